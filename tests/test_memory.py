"""course_utils.memory: exact byte counts, checked against sizes computed by hand."""

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from course_utils.memory import (
    SavedTensorsCounter,
    buffer_bytes,
    cuda_peak_bytes,
    format_bytes,
    gradient_bytes,
    optimizer_state_bytes,
    parameter_bytes,
    peak_extra_bytes,
    saved_activation_bytes,
    tensor_bytes,
    unique_bytes,
)


def test_tensor_bytes_by_dtype():
    assert tensor_bytes(torch.zeros(10, 3)) == 120
    assert tensor_bytes(torch.zeros(10, 3, dtype=torch.float16)) == 60
    assert tensor_bytes(torch.zeros(7, dtype=torch.int64)) == 56


def test_unique_bytes_counts_shared_storage_once():
    base = torch.zeros(100)
    assert unique_bytes([base, base[:10], base.view(10, 10)]) == 400
    assert unique_bytes([base, base.clone()]) == 800


def test_model_and_optimizer_bytes():
    model = nn.Sequential(nn.Linear(10, 5), nn.BatchNorm1d(5))
    params = (10 * 5 + 5 + 5 + 5) * 4
    assert parameter_bytes(model) == params
    assert buffer_bytes(model) == (5 + 5) * 4 + 8  # running mean, var, and an int64 counter
    assert gradient_bytes(model) == 0
    model(torch.randn(4, 10)).sum().backward()
    assert gradient_bytes(model) == params
    optimizer = torch.optim.Adam(model.parameters())
    assert optimizer_state_bytes(optimizer) == 0
    optimizer.step()
    # Adam keeps two moments per parameter plus a float32 step counter per tensor.
    assert optimizer_state_bytes(optimizer) == 2 * params + 4 * 4


def test_shared_parameters_count_once():
    layer = nn.Linear(4, 4, bias=False)
    model = nn.Sequential(layer, layer)
    assert parameter_bytes(model) == 64


def test_saved_tensors_counter_linear_relu():
    layer = nn.Linear(4, 3)
    with SavedTensorsCounter(exclude=layer.parameters()) as counter:
        layer(torch.randn(2, 4, requires_grad=True)).relu()
    assert counter.activation_bytes == (2 * 4 + 2 * 3) * 4
    assert counter.total_bytes == counter.activation_bytes + 3 * 4 * 4  # + the weight


def test_nothing_saved_without_grad():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    with torch.no_grad():
        assert saved_activation_bytes(model, torch.randn(5, 8)) == 0


def test_checkpointing_saves_less():
    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU()) for _ in range(8))
    x = torch.randn(32, 64, requires_grad=True)

    def plain(inp):
        for block in blocks:
            inp = block(inp)
        return inp

    def checkpointed(inp):
        for block in blocks:
            inp = checkpoint(block, inp, use_reentrant=False)
        return inp

    with SavedTensorsCounter(exclude=blocks.parameters()) as full:
        plain(x)
    with SavedTensorsCounter(exclude=blocks.parameters()) as ckpt:
        checkpointed(x)
    activation = 32 * 64 * 4
    # Without checkpointing: the input, then both ReLU outputs of every block (a block's
    # last output is the next block's input, stored once).
    assert full.activation_bytes == (1 + 8 * 2) * activation
    # With it: only each block's input; the rest is recomputed during backward.
    assert ckpt.activation_bytes == 8 * activation


def test_cuda_peak_bytes_rejects_cpu():
    with pytest.raises(RuntimeError, match="CUDA"):
        cuda_peak_bytes(lambda: None, "cpu")


def test_cuda_peak_bytes_logic_with_fakes(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 1234)
    assert cuda_peak_bytes(lambda: calls.append("fn")) == 1234
    assert calls == ["sync", "reset", "fn", "sync"]


def _uint8(num_bytes):
    return torch.empty(num_bytes, dtype=torch.uint8)


def test_peak_extra_bytes_on_cpu_sees_what_is_alive_together():
    def both_alive():
        first = _uint8(2**20)
        second = _uint8(2**21)
        return first, second

    def one_after_the_other():
        first = _uint8(2**21)
        del first
        return _uint8(2**20)

    assert peak_extra_bytes(both_alive, "cpu") == 3 * 2**20
    assert peak_extra_bytes(one_after_the_other, "cpu") == 2**21
    assert peak_extra_bytes(lambda: None, torch.device("cpu")) == 0


def _tower_step(**adam_options):
    """A second Adam step of eight Linear layers (state exists, gradients were set to None)."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(64, 64) for _ in range(8)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, **adam_options)
    inputs = torch.randn(4, 64)

    def step():
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        optimizer.step()

    step()
    optimizer.zero_grad()  # outside the measurement: see peak_extra_bytes' docstring
    return model, step


def test_foreach_adam_holds_a_parameter_sized_temporary():
    # The claim notebook 02 makes: foreach Adam computes sqrt(exp_avg_sq) for all
    # parameters at once, so its step peaks at gradients + one more copy of the parameters.
    model, step = _tower_step(foreach=True)
    params = parameter_bytes(model)
    activations = 9 * 4 * 64 * 4  # far smaller than the parameters
    assert peak_extra_bytes(step, "cpu") == pytest.approx(2 * params, abs=activations)
    # The for-loop implementation needs temporaries for one parameter at a time: two of
    # the largest (sqrt, then the division), an eighth of the parameters each here.
    model, step = _tower_step(foreach=False)
    assert peak_extra_bytes(step, "cpu") == pytest.approx(1.25 * params, abs=activations)


def test_peak_extra_bytes_cuda_logic_with_fakes(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: calls.append("allocated") or 1000)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: calls.append("max") or 1234)
    assert peak_extra_bytes(lambda: calls.append("fn"), "cuda:0") == 234
    assert calls == ["sync", "allocated", "sync", "reset", "fn", "sync", "max"]


def test_peak_extra_bytes_rejects_other_devices():
    with pytest.raises(ValueError, match="cpu or cuda"):
        peak_extra_bytes(lambda: None, "meta")


@pytest.mark.parametrize(("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1536, "1.50 KiB"), (5 * 2**30, "5.00 GiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text
