"""course_utils.device: the choice logic, and the CUDA paths exercised with fakes on CPU."""

import pytest
import torch

from course_utils import device as device_module
from course_utils.device import (
    choose_device,
    describe_environment,
    float32_precision_settings,
    format_environment,
    pick_device,
    synchronize,
)


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(False, False, "cpu"), (True, False, "cuda"), (False, True, "mps"), (True, True, "cuda")],
)
def test_choose_device_order(cuda, mps, expected):
    assert choose_device(cuda, mps) == expected


def test_choose_device_prefer():
    assert choose_device(True, False, prefer="cpu") == "cpu"
    assert choose_device(True, False, prefer="cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match="not available"):
        choose_device(False, False, prefer="cuda")
    with pytest.raises(ValueError, match="unknown device type"):
        choose_device(False, False, prefer="meta")


def test_pick_device_uses_cuda_when_available(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == torch.device("cuda")


def test_pick_device_environment_override(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")


def test_pick_device_here_is_cpu(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert pick_device().type in {"cpu", "mps"}


def test_synchronize_calls_cuda_synchronize(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    synchronize("cuda:0")
    synchronize(torch.device("cuda"))
    assert calls == [torch.device("cuda:0"), torch.device("cuda")]


def test_synchronize_cpu_does_not_touch_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: pytest.fail("synchronised CUDA"))
    synchronize("cpu")


def test_describe_environment_cpu():
    facts = describe_environment("cpu")
    assert facts["device"] == "cpu"
    assert facts["torch"] == torch.__version__
    assert int(facts["cpu threads"]) == torch.get_num_threads()
    assert "CUDA" not in facts
    assert format_environment("cpu").count("\n") == len(facts) - 1


def test_describe_environment_cuda_with_fakes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    facts = describe_environment("cuda")
    assert facts["hardware"] == "NVIDIA H100 80GB HBM3"
    assert facts["compute capability"] == "9.0"
    assert facts["cuDNN"] == "91000"
    assert facts["fp32 matmul precision"] == torch.backends.cuda.matmul.fp32_precision
    assert facts["fp32 conv precision"] == torch.backends.cudnn.conv.fp32_precision


def test_float32_precision_settings_reads_the_new_api_and_survives_mixing():
    fresh = float32_precision_settings()
    assert fresh == {"fp32 matmul precision": "none", "fp32 conv precision": "tf32"}  # PyTorch's defaults
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
            torch.get_float32_matmul_precision()  # why describe_environment does not call it
        assert float32_precision_settings()["fp32 matmul precision"] == "tf32"
    finally:
        torch.backends.cuda.matmul.fp32_precision = "none"
    assert float32_precision_settings() == fresh
    assert torch.get_float32_matmul_precision() == "highest"


def test_cpu_name_is_not_empty():
    assert device_module.device_name("cpu").strip()
