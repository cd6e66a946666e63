"""course_utils.memory: exact byte counts, checked against sizes computed by hand."""

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    checkpoint_sequential,
    create_selective_checkpoint_contexts,
)

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


class _Block(nn.Module):
    """Notebook 02's pre-norm residual MLP block."""

    def __init__(self, width):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


_MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


def test_selective_checkpointing_keeps_its_cache_out_of_saved_tensor_hooks():
    # Notebook 02 counts SAC's memory as the hooks' count (the block inputs) plus what its policy
    # keeps, which it adds up itself from the matmuls' arguments. Check that sum against SAC's own cache.
    torch.manual_seed(0)
    width, depth, batch = 16, 3, 5
    blocks = nn.ModuleList(_Block(width) for _ in range(depth))
    kept, caches = [0], []

    def policy(ctx, op, *args, **kwargs):
        if op not in _MATMULS:
            return CheckpointPolicy.PREFER_RECOMPUTE
        if not ctx.is_recompute:
            kept[0] += args[-2].shape[0] * args[-1].shape[1] * args[-2].element_size()
        return CheckpointPolicy.MUST_SAVE

    def context_fn():
        pair = create_selective_checkpoint_contexts(policy)
        caches.append(pair[0].storage)  # private: read here only to check the notebook's count
        return pair

    x = torch.randn(batch, width)
    with SavedTensorsCounter(exclude=blocks.parameters()) as counter:
        out = x
        for block in blocks:
            out = checkpoint(block, out, use_reentrant=False, context_fn=context_fn)
    cached = sum(
        entry.val.untyped_storage().nbytes()
        for storage in caches
        for entries in storage.values()
        for entry in entries.values()
        if hasattr(entry, "val")
    )
    activation = batch * width * 4
    assert counter.activation_bytes == depth * activation  # the block inputs only
    assert kept[0] == cached == depth * 5 * activation  # up's 4 * width and down's width per block

    plain_grads = torch.autograd.grad(nn.functional.mse_loss(nn.Sequential(*blocks)(x), x), list(blocks.parameters()))
    sac_grads = torch.autograd.grad(nn.functional.mse_loss(out, x), list(blocks.parameters()))
    for plain, sac in zip(plain_grads, sac_grads, strict=True):
        torch.testing.assert_close(sac, plain)


@pytest.mark.parametrize("segments", [1, 2, 3, 4, 6])
def test_checkpoint_sequential_keeps_segment_inputs_and_the_whole_last_run(segments):
    torch.manual_seed(0)
    width, depth, batch = 8, 6, 3
    blocks = [_Block(width) for _ in range(depth)]
    with SavedTensorsCounter(exclude=nn.ModuleList(blocks).parameters()) as counter:
        checkpoint_sequential(blocks, segments, torch.randn(batch, width), use_reentrant=False)
    last_run = depth - (segments - 1) * (depth // segments)
    assert counter.activation_bytes == ((segments - 1) * width + last_run * (10 * width + 2)) * batch * 4


def test_inference_tensors_fail_only_where_autograd_saves_or_mutates_them():
    with torch.inference_mode():
        frozen = torch.randn(4)
    weight = torch.ones(4, requires_grad=True)
    (frozen + weight).sum().backward()  # add saves neither input
    assert torch.equal(weight.grad, torch.ones(4))
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        frozen * weight
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        frozen.add_(1)
