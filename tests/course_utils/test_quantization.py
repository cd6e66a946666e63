"""Unit tests for course_utils.quantization."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import warnings

import matplotlib
import pytest
import torch
from torch import nn

import course_utils.quantization as quantization
from course_utils.quantization import (
    KNOWN_TORCHAO_IMPORT_MESSAGES,
    TORCHAO_VERSION,
    _DropMatching,
    import_torchao,
    legacy_quantize_dynamic,
    legacy_quantize_per_tensor,
    linear_input_absmax,
    plot_tradeoff,
    serialized_bytes,
    torchao_problem,
)
from tests.support.paths import ROOT

matplotlib.use("Agg")


def test_known_messages_are_dropped_and_others_kept():
    records = {
        "torchao": [
            ("Failed to load /x/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: nope", False),
            ("Failed to load /x/site-packages/torchao/_C_cutlass_90a.abi3.so: nope", False),
            ("Failed to load /x/other/libfoo.so: nope", True),
            ("Skipping import of cpp extensions due to incompatible torch version.", True),
        ],
        "torch.utils._pytree": [
            ("<enum 'KernelPreference'> is an Enum subclass and is now natively supported by torch.compile", False),
            ("register_constant() is deprecated for something else", True),
        ],
    }
    for logger_name, cases in records.items():
        drop = _DropMatching(KNOWN_TORCHAO_IMPORT_MESSAGES[logger_name])
        for message, kept in cases:
            record = logging.LogRecord(logger_name, logging.WARNING, __file__, 1, message, None, None)
            assert drop.filter(record) is kept, message


@pytest.mark.slow
def test_import_torchao_is_quiet_and_leaves_no_filters():
    code = (
        "import logging\n"
        "from course_utils.quantization import import_torchao\n"
        "torchao = import_torchao()\n"
        "assert torchao.__name__ == 'torchao'\n"
        "assert not logging.getLogger('torchao').filters\n"
        "assert not logging.getLogger('torch.utils._pytree').filters\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Failed to load" not in done.stderr
    assert "register_constant" not in done.stderr


@pytest.mark.slow  # a fresh Python that imports torch (seconds): make test, not make test-fast
def test_import_torchao_drops_only_the_known_messages(tmp_path):
    fake = tmp_path / "torchao"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import logging, warnings\n"
        "logger = logging.getLogger(__name__)\n"
        "logger.warning('Failed to load /site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: no')\n"
        "logger.warning('Failed to load /site-packages/torchao/_C_cutlass_90a.abi3.so: no')\n"
        "logger.warning('an unexpected torchao message')\n"
        "logging.getLogger('torch.utils._pytree').warning(\n"
        "    '<enum Kernel> is an Enum subclass and is now natively supported by torch.compile')\n"
        "warnings.warn('a real deprecation', DeprecationWarning)\n"
    )
    code = (
        "import sys, warnings\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "warnings.simplefilter('always')\n"
        "from course_utils.quantization import import_torchao\n"
        "assert import_torchao().__file__.startswith(sys.path[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "DeprecationWarning: a real deprecation" in done.stderr
    assert "an unexpected torchao message" in done.stderr
    assert "Failed to load" not in done.stderr
    assert "Enum subclass" not in done.stderr


def test_serialized_bytes_matches_torch_save():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    assert serialized_bytes(model) == len(buffer.getvalue())
    assert serialized_bytes(model) >= 4 * sum(p.numel() for p in model.parameters())


def test_torchao_int8_is_about_four_times_smaller_when_serialized():
    import_torchao()
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    before = serialized_bytes(model)
    quantize_(model, Int8WeightOnlyConfig())
    ratio = before / serialized_bytes(model)
    assert 3.0 < ratio < 4.0, ratio


def test_legacy_quantize_dynamic_records_its_deprecation():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
    result = legacy_quantize_dynamic(model)
    if result.model is None:
        assert result.reason and not result.messages
        pytest.skip(result.reason)
    assert result.reason == ""
    assert any("deprecated" in message for message in result.messages), result.messages
    assert type(model[0]) is nn.Linear, "the original model must be left alone"
    x = torch.randn(5, 16)
    torch.testing.assert_close(result.model(x), model(x), atol=0.05, rtol=0.05)


def test_legacy_quantize_per_tensor_matches_the_formula():
    x = torch.tensor([-1.0, -0.26, 0.0, 0.24, 0.5, 2.0, 30.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may leak out of the helper
        result = legacy_quantize_per_tensor(x, 0.1, 10, torch.uint8)
    if result is None:
        pytest.skip("this PyTorch has no torch.quantize_per_tensor")
    expected = torch.tensor([0, 7, 10, 12, 15, 30, 255], dtype=torch.uint8)
    torch.testing.assert_close(result.int_repr, expected)
    torch.testing.assert_close(result.dequantized, (expected.float() - 10) * 0.1)
    signed = legacy_quantize_per_tensor(torch.tensor([0.25, 0.75, -100.0]), 0.5, 0, torch.int8)
    assert signed is not None
    torch.testing.assert_close(signed.int_repr, torch.tensor([0, 2, -128], dtype=torch.int8))
    with pytest.raises(ValueError, match=r"uint8 or torch\.int8"):
        legacy_quantize_per_tensor(x, 0.1, 0, torch.int32)


def test_linear_input_absmax_records_each_linear_input():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
        model[0].bias.zero_()
    batches = [torch.tensor([[1.0, -3.0]]), torch.tensor([[2.0, 0.5]])]
    absmax = linear_input_absmax(model.train(), batches)
    assert absmax == {"0": 3.0, "2": 3.0}
    assert model.training, "the model's mode must be restored"
    assert not model[0]._forward_pre_hooks, "hooks must be removed"


def test_plot_tradeoff_draws_three_panels():
    import matplotlib.pyplot as plt

    fig, axes = plot_tradeoff({"fp32": 4096, "int8": 1024}, {"fp32": 0.97, "int8": 0.96}, {"fp32": 1e-3, "int8": 2e-3})
    assert len(axes) == 3
    assert [bar.get_width() for bar in axes[0].patches] == [4.0, 1.0]
    plt.close(fig)


@pytest.mark.parametrize(
    ("torch_version", "torchao_version", "phrase"),
    [
        ("2.13.0+cpu", "0.18.0", None),
        ("2.11.0+cu126", "0.18.0", None),
        ("2.12.0.dev20260414+cu130", "0.19.0", None),  # newer torchao: allowed
        ("2.13.0", None, "torchao is not installed: run `pip install torchao==0.18.0`"),
        ("2.10.1+cu128", "0.18.0", "torch 2.10.1+cu128 is too old for torchao 0.18.0, which needs torch >= 2.11"),
        ("2.11.0", "0.16.0", "torchao 0.16.0 is older than the 0.18.0"),
    ],
)
def test_torchao_problem_names_the_fix(torch_version, torchao_version, phrase):
    problem = torchao_problem(torch_version, torchao_version)
    if phrase is None:
        assert problem is None
    else:
        assert problem is not None and phrase in problem


def test_import_torchao_refuses_a_missing_torchao_with_the_install_command(monkeypatch):
    monkeypatch.setattr(quantization, "_installed_torchao_version", lambda: None)
    with pytest.raises(ImportError, match=r"pip install torchao==0\.18\.0"):
        import_torchao()


def test_the_torchao_pin_is_the_same_everywhere():
    """pyproject.toml and notebook 09's Colab install line pin the release the helpers check."""
    root = ROOT
    assert f'"torchao=={TORCHAO_VERSION}"' in (root / "pyproject.toml").read_text()
    notebook = (root / "notebooks" / "09_shrink_models_with_quantization.ipynb").read_text()
    assert f"%pip install --quiet torchao=={TORCHAO_VERSION}" in notebook
