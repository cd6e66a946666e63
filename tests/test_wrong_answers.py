"""Plausible wrong answers fail the exercise tests, for the reason the test names.

Each case replaces one solution cell of a notebook with a wrong answer a learner might
write, runs the notebook's setup cell, the exercise's own code cells (the functions or data
it asks about, as in notebook 11), that answer and the exercise's test cell in a fresh
namespace, and expects an ``AssertionError`` whose message matches. ``hidden=False`` runs
only the visible part of the test cell: the learner must see the failure before grading.
The notebook's own solution passes the same harness (so a failure is the answer's fault,
not the harness's).

The cases are this module's lists named ``_WRONG...`` and, one module per notebook, the lists
named ``WRONG`` in ``tests/wrong_answers/nbNN.py`` (the harness lives in that package too).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import wrong_answers
from nbtools import is_solution_cell, nbgrader_meta, read
from wrong_answers import Wrong, notebook_path, run_exercise

# Notebook 09's "asks torch" wrong answer calls torch.quantize_per_tensor, which torch says is deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")

FLOPS = "def matmul_flops(m, n, k):\n"
TIMER = "def time_per_call(fn, sync, repeats, clock=time.perf_counter):\n"
TIMED_LOOP = "    for _ in range(repeats): fn()\n"
CHOOSE = "def choose_device_type(cuda_available, mps_available):\n"
CALL_ORDER = r"the order of calls should be"
# Notebook 01 exercise 4: the visible test says whether the set is right, and names no line number.
NOT_THE_SYNC_SET = r"^SYNC_LINES is not yet the set of lines that make the CPU wait for the GPU: [^0-9]*section 4$"

_WRONG_01 = [
    Wrong("01", "ex1_matmul_flops", "one FLOP per multiply-add", FLOPS + "    return m * n * k", "2, got 1", False),
    Wrong("01", "ex1_matmul_flops", "counts the outputs", FLOPS + "    return 2 * m * n", "48, got 12", False),
    Wrong("01", "ex1_matmul_flops", "returns a float", FLOPS + "    return 2.0 * m * n * k", "should be an int", False),
    Wrong(
        "01",
        "ex2_time_per_call",
        "no warm-up call",
        TIMER + "    sync(); start = clock()\n" + TIMED_LOOP + "    sync()\n    return (clock() - start) / repeats",
        CALL_ORDER,
        False,
    ),
    Wrong(
        "01",
        "ex2_time_per_call",
        "reads the clock before synchronising",
        TIMER + "    fn(); start = clock()\n" + TIMED_LOOP + "    sync()\n    return (clock() - start) / repeats",
        CALL_ORDER,
        False,
    ),
    Wrong(
        "01",
        "ex2_time_per_call",
        "no sync after the timed calls",
        TIMER + "    fn(); sync(); start = clock()\n" + TIMED_LOOP + "    return (clock() - start) / repeats",
        CALL_ORDER,
        False,
    ),
    Wrong(
        "01",
        "ex2_time_per_call",
        "returns the total",
        TIMER + "    fn(); sync(); start = clock()\n" + TIMED_LOOP + "    sync()\n    return clock() - start",
        "seconds per call should be about 0.5, got 1.5",
        False,
    ),
    # The statement names all four cases, so the visible tests catch these two.
    Wrong(
        "01",
        "ex3_choose_device",
        "prefers MPS to CUDA",
        CHOOSE + "    if mps_available: return 'mps'\n    return 'cuda' if cuda_available else 'cpu'",
        r"choose_device_type\(True, True\) should be 'cuda'",
        False,
    ),
    Wrong(
        "01",
        "ex3_choose_device",
        "ignores MPS",
        CHOOSE + "    return 'cuda' if cuda_available else 'cpu'",
        r"choose_device_type\(False, True\) should be 'mps'",
        False,
    ),
    Wrong(
        "01", "ex4_sync_lines", "misses the boolean-mask index", "SYNC_LINES = {4, 7, 10, 11}", NOT_THE_SYNC_SET, False
    ),
    Wrong(
        "01",
        "ex4_sync_lines",
        "a queued reduction as a sync",
        "SYNC_LINES = {3, 4, 5, 7, 10, 11}",
        NOT_THE_SYNC_SET,
        False,
    ),
    Wrong(
        "01",
        "ex4_sync_lines",
        "the no-op non_blocking move",
        "SYNC_LINES = {4, 5, 7, 10, 11, 12}",
        NOT_THE_SYNC_SET,
        False,
    ),
    Wrong("01", "ex4_sync_lines", "a list", "SYNC_LINES = [4, 5, 7, 10, 11]", "should be a set, got list", False),
]

KAIMING_WITH_INIT = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    weight = torch.empty(fan_out, fan_in)
    return torch.nn.init.normal_(weight, std=gain / math.sqrt(fan_in), generator=generator)
"""
KAIMING_WITH_ALIAS = """
from torch.nn.init import normal_ as draw

def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return draw(torch.empty(fan_out, fan_in), std=gain / math.sqrt(fan_in), generator=generator)
"""
KAIMING_FAN_OUT = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return gain / math.sqrt(fan_out) * torch.randn(fan_out, fan_in, generator=generator)
"""
INIT_UNIFORM = """
def init_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.kaiming_uniform_(module.weight, nonlinearity="relu")
        if module.bias is not None:
            nn.init.zeros_(module.bias)
"""
GRADIENTS_ARE_ZERO = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(X), y).backward()
    return bool(torch.allclose(first.weight.grad, torch.zeros_like(first.weight.grad)))
"""
WEIGHTS_NOT_GRADIENTS = """
def first_layer_units_identical(model, X, y):
    weight = next(m for m in model.modules() if isinstance(m, nn.Linear)).weight
    return bool(torch.allclose(weight, weight[:1].expand_as(weight)))
"""
STALE_GRADIENTS = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    nn.functional.cross_entropy(model(X), y).backward()
    grad = first.weight.grad
    return bool(torch.allclose(grad, grad[:1].expand_as(grad)))
"""
CLIP_BODY = """
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
"""
CLIP_REBINDS = f"""
def clip_global_norm_(parameters, max_norm):
    parameters = [p for p in parameters if p.grad is not None]
    {CLIP_BODY.strip()}
    for p in parameters:
        p.grad = p.grad * coefficient
    return total_norm
"""
CLIP_NEW_MEMORY = f"""
def clip_global_norm_(parameters, max_norm):
    parameters = [p for p in parameters if p.grad is not None]
    {CLIP_BODY.strip()}
    for p in parameters:
        p.grad.data = p.grad.data * coefficient
    return total_norm
"""
CLIP_WITH_ALIAS = """
from torch.nn.utils import clip_grad_norm_

def clip_global_norm_(parameters, max_norm):
    return clip_grad_norm_(parameters, max_norm)
"""
CLIP_WITH_TOTAL_NORM = """
from torch.nn.utils import get_total_norm as norm_of

def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = norm_of(grads)
    for g in grads:
        g.mul_(torch.clamp(max_norm / (total_norm + 1e-6), max=1.0))
    return total_norm
"""
COEFFICIENT_WITH_MIN = """
def clip_coefficient(total_norm, max_norm):
    return min(1.0, max_norm / (total_norm + 1e-6))
"""
COEFFICIENT_WITH_ITEM = """
def clip_coefficient(total_norm, max_norm):
    return torch.tensor(min(1.0, max_norm / (total_norm.item() + 1e-6)), dtype=total_norm.dtype)
"""
COEFFICIENT_UNCAPPED = """
def clip_coefficient(total_norm, max_norm):
    return max_norm / (total_norm + 1e-6)
"""
CLIP_BEFORE_UNSCALE = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return norm
"""
RUNS_AUTOCAST = """
from torch import autocast as cast_automatically

OPS = {
    "linear": lambda t: F.linear(t, t), "matmul": lambda t: t @ t, "bmm": lambda t: torch.bmm(t[None], t[None]),
    "conv2d": lambda t: F.conv2d(t[None, None], t[None, None, :3, :3]), "relu": lambda t: t.relu(),
    "exp": lambda t: t.exp(), "softmax": lambda t: t.softmax(dim=-1), "sum": lambda t: t.sum(),
    "add": lambda t: t + t, "layer_norm": lambda t: F.layer_norm(t, t.shape[-1:]),
    "mse_loss": lambda t: F.mse_loss(t, t.flip(0)), "l1_loss": lambda t: F.l1_loss(t, t.flip(0)),
    "cross_entropy": lambda t: F.cross_entropy(t, torch.arange(len(t))),
    "nll_loss": lambda t: F.nll_loss(t, torch.arange(len(t))),
}

def predict_autocast_dtype(op, input_dtype):
    with cast_automatically("cpu", dtype=torch.bfloat16):
        return OPS[op](torch.randn(6, 6).to(input_dtype)).dtype
"""
NO_FLOAT32_LIST = """
def predict_autocast_dtype(op, input_dtype):
    if input_dtype == torch.float64:
        return torch.float64
    if op in {"linear", "matmul", "bmm", "conv2d"}:
        return torch.bfloat16
    return input_dtype
"""
COUNTS_EXISTING_INF = """
def count_lost(x, dtype):
    stored = x.to(dtype)
    return int(torch.isinf(stored).sum()), int(((x != 0) & (stored == 0)).sum())
"""
BACKOFF_KEEPS_COUNT = """
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale * backoff_factor, growth_tracker
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return float(scale), growth_tracker
"""

_WRONG_05_07 = [
    Wrong("05", "ex1_kaiming_normal", "calls torch.nn.init", KAIMING_WITH_INIT, "without torch.nn.init", False),
    Wrong(
        "05",
        "ex1_kaiming_normal",
        "imports torch.nn.init under another name",
        KAIMING_WITH_ALIAS,
        "without torch.nn.init",
        False,
    ),
    Wrong("05", "ex1_kaiming_normal", "scales by fan_out", KAIMING_FAN_OUT, "std should be about", False),
    Wrong("05", "ex2_init_weights", "uniform instead of normal", INIT_UNIFORM, "kurtosis", False),
    Wrong(
        "05", "ex3_units_identical", "tests for zero gradients", GRADIENTS_ARE_ZERO, "constant first two layers", False
    ),
    Wrong(
        "05",
        "ex3_units_identical",
        "compares weights, not gradients",
        WEIGHTS_NOT_GRADIENTS,
        "identical first-layer weights, random second layer",
        False,
    ),
    Wrong("05", "ex3_units_identical", "keeps stale gradients", STALE_GRADIENTS, "stale", False),
    Wrong(
        "06", "ex1_clip_global_norm", "assigns new tensors to .grad", CLIP_REBINDS, "replaced by a new tensor", False
    ),
    Wrong("06", "ex1_clip_global_norm", "assigns new memory to .grad.data", CLIP_NEW_MEMORY, "new memory", False),
    Wrong(
        "06",
        "ex1_clip_global_norm",
        "clip_grad_norm_ imported at the top",
        CLIP_WITH_ALIAS,
        "without torch's clipping utilities",
        False,
    ),
    Wrong(
        "06",
        "ex1_clip_global_norm",
        "get_total_norm under another name",
        CLIP_WITH_TOTAL_NORM,
        "without torch's clipping utilities",
        False,
    ),
    Wrong(
        "06",
        "ex2_clip_coefficient",
        "Python min on the norm",
        COEFFICIENT_WITH_MIN,
        "without reading the norm on the host",
        False,
    ),
    Wrong(
        "06",
        "ex2_clip_coefficient",
        "reads the norm with .item()",
        COEFFICIENT_WITH_ITEM,
        "without reading the norm on the host",
        False,
    ),
    Wrong("06", "ex2_clip_coefficient", "not capped at 1", COEFFICIENT_UNCAPPED, "below the threshold", False),
    Wrong("06", "ex3_clipped_amp_step", "clips before unscaling", CLIP_BEFORE_UNSCALE, "when the step is taken", False),
    Wrong(
        "07",
        "ex1_predict_autocast_dtype",
        "runs autocast under another name",
        RUNS_AUTOCAST,
        "do not run autocast",
        False,
    ),
    Wrong(
        "07",
        "ex1_predict_autocast_dtype",
        "forgets the float32 list",
        NO_FLOAT32_LIST,
        "should be torch.float32, got torch.bfloat16",
        False,
    ),
    Wrong("07", "ex2_count_lost", "counts infinities already in x", COUNTS_EXISTING_INF, "inf, nan and 0", False),
    Wrong(
        "07", "ex3_update_scale", "keeps the count after an inf", BACKOFF_KEEPS_COUNT, "an inf resets the count", False
    ),
]

# 02 · Measure and reduce memory
FROZEN_GET_GRADIENTS = """
def training_memory_bytes(model, optimizer):
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in copies:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = copies[optimizer] * params
    return {"parameters": params, "gradients": params, "optimizer_state": state, "total": 2 * params + state}
"""
SAME_DATA_PTR = """
def shares_storage(a, b):
    return a.device == b.device and a.data_ptr() == b.data_ptr()


def new_bytes(result, base):
    return 0 if shares_storage(result, base) else result.untyped_storage().nbytes()
"""
EVERY_SAVE_COUNTED = """
class SavedBytesByDtype:
    def __init__(self):
        self.bytes_by_dtype = {}

    def __enter__(self):
        def pack(tensor):
            size = tensor.numel() * tensor.element_size()
            self.bytes_by_dtype[tensor.dtype] = self.bytes_by_dtype.get(tensor.dtype, 0) + size
            return tensor

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._hooks.__exit__(*exc_info)

    @property
    def total_bytes(self):
        return sum(self.bytes_by_dtype.values())
"""
RELU_OUTPUT_TWICE = """
def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    element_size = torch.empty((), dtype=dtype).element_size()
    return batch_size * (in_features + 2 * depth * hidden) * element_size
"""

# 03 · Feed the model with batches
PIN_FOR_ANY_ACCELERATOR = """
def loader_options(device, num_workers):
    has_workers = num_workers > 0
    return {
        "num_workers": num_workers,
        "pin_memory": device.type != "cpu",
        "persistent_workers": has_workers,
        "prefetch_factor": 4 if has_workers else None,
    }
"""
TIME_FIRST_PADDING = """
def pad_collate(batch, padding_value=0):
    from torch.nn.utils.rnn import pad_sequence

    sequences = [sequence for sequence, _ in batch]
    padded = pad_sequence(sequences, padding_value=padding_value)
    lengths = torch.tensor([len(sequence) for sequence in sequences])
    labels = torch.tensor([label for _, label in batch])
    return padded, lengths, labels
"""
GLOBAL_SEED = """
def make_reproducible_loader(dataset, batch_size, seed):
    torch.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
"""
SEEDED_SAMPLER = """
from torch.utils.data import RandomSampler


def make_reproducible_loader(dataset, batch_size, seed):
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
"""
NO_SET_EPOCH = """
def shard_indices(num_samples, num_replicas, shuffle, seed=0, epoch=0):
    dataset = TensorDataset(torch.arange(num_samples))
    return [
        list(DistributedSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed))
        for rank in range(num_replicas)
    ]
"""

# 04 · Stabilise training with BatchNorm
BIASED_RUNNING_VAR = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * var
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean.clone(), running_var.clone()
    return (x - mean) / torch.sqrt(var + eps) * weight + bias, new_mean, new_var
"""
CALLS_F_BATCH_NORM = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    output = torch.nn.functional.batch_norm(x, new_mean, new_var, weight, bias, training, momentum, eps)
    return output, new_mean, new_var
"""
DROPS_LINEAR_BIAS = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        folded = nn.Linear(linear.in_features, linear.out_features)
        folded.weight.copy_(linear.weight * scale[:, None])
        folded.bias.copy_(bn.bias - scale * bn.running_mean)
    return folded
"""
WHOLE_MODEL_EVAL = """
def freeze_batchnorm(model):
    return model.eval()
"""

_WRONG_02_04 = [
    Wrong(
        "02",
        "ex1_training_memory",
        "frozen parameters get gradients",
        FROZEN_GET_GRADIENTS,
        "first layer frozen",
        False,
    ),
    Wrong("02", "ex2_view_or_copy", "compares data_ptr", SAME_DATA_PTR, "a view that starts at an offset", False),
    Wrong("02", "ex3_saved_bytes_by_dtype", "counts every save", EVERY_SAVE_COUNTED, r"a counter around b \* b", False),
    Wrong(
        "02",
        "ex4_mlp_activations",
        "counts relu outputs twice",
        RELU_OUTPUT_TWICE,
        r"mlp_activation_bytes\(8, 16, 32, 2, float32\)",
        False,
    ),
    Wrong("03", "ex1_loader_options", "pins memory for mps", PIN_FOR_ANY_ACCELERATOR, "'mps'", False),
    Wrong("03", "ex2_pad_collate", "pads time-first", TIME_FIRST_PADDING, "^padded", False),
    Wrong("03", "ex3_reproducible_loader", "seeds the global generator", GLOBAL_SEED, "second loader", False),
    Wrong(
        "03",
        "ex3_reproducible_loader",
        "seeds a RandomSampler",
        SEEDED_SAMPLER,
        "the construction the statement",
        False,
    ),
    Wrong("03", "ex4_shard_indices", "forgets set_epoch", NO_SET_EPOCH, "another epoch", False),
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "biased running variance",
        BIASED_RUNNING_VAR,
        "train-mode new_running_var",
        False,
    ),
    Wrong("04", "ex1_batchnorm_forward", "calls F.batch_norm", CALLS_F_BATCH_NORM, "tensor arithmetic", False),
    Wrong(
        "04",
        "ex2_fold_linear_bn",
        "drops the linear bias",
        DROPS_LINEAR_BIAS,
        r"folded\(x\) for a 6->4 layer",
        False,
    ),
    Wrong(
        "04",
        "ex3_freeze_batchnorm",
        "puts the whole model in eval",
        WHOLE_MODEL_EVAL,
        "should still be in training mode",
        False,
    ),
]

SHARDS_FROM_SAMPLER = """
def shard_indices(num_samples, num_replicas, rank):
    return list(DistributedSampler(range(num_samples), num_replicas=num_replicas, rank=rank, shuffle=False))
"""
SHARDS_UNPADDED = """
def shard_indices(num_samples, num_replicas, rank):
    return list(range(rank, num_samples, num_replicas))
"""
MEAN_OF_OVERWRITTEN = """
def all_reduce_mean_(tensors):
    for tensor in tensors:
        tensor.copy_(torch.stack(tensors).mean(dim=0))
"""
SUM_NOT_MEAN = """
def all_reduce_mean_(tensors):
    total = torch.stack(tensors).sum(dim=0)
    for tensor in tensors:
        tensor.copy_(total)
"""
BATCH_WITHOUT_ACCUMULATION = """
def scale_for_ranks(per_rank_batch, world_size, accumulation_steps, base_lr, base_batch):
    effective_batch = per_rank_batch * world_size
    return effective_batch, base_lr * effective_batch / base_batch
"""
RING_HALF = """
def ring_allreduce_bytes(num_elements, world_size, element_size=4):
    return (world_size - 1) * num_elements * element_size / world_size
"""
QUANTIZE_WITH_TORCH = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    legacy = {torch.uint8: torch.quint8, torch.int8: torch.qint8}[dtype]
    return torch.quantize_per_tensor(x, scale, zero_point, legacy).int_repr()


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""
QUANTIZE_WITH_TORCHAO = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    info = torch.iinfo(dtype)
    return quantize_affine(x, x.shape, torch.tensor([scale]), torch.tensor([zero_point]), dtype, info.min, info.max)


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""
QUANTIZE_HALVES_UP = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    info = torch.iinfo(dtype)
    return (torch.floor(x / scale + 0.5) + zero_point).clamp(info.min, info.max).to(dtype)


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""
QPARAMS_WITH_TORCHAO = """
def choose_qparams(min_val, max_val, dtype):
    from torchao.quantization import choose_qparams_affine_with_min_max

    info = torch.iinfo(dtype)
    scale, zero_point = choose_qparams_affine_with_min_max(
        torch.tensor([min_val]), torch.tensor([max_val]), MappingType.ASYMMETRIC, (1,), dtype, info.min, info.max,
        eps=torch.finfo(torch.float32).eps, zero_point_dtype=torch.int32,
    )
    return scale.item(), int(zero_point.item())
"""
QPARAMS_WITHOUT_ZERO = """
def choose_qparams(min_val, max_val, dtype):
    info = torch.iinfo(dtype)
    scale = max((max_val - min_val) / (info.max - info.min), torch.finfo(torch.float32).eps)
    zero_point = info.min - round(min_val / scale)
    return float(scale), int(min(max(zero_point, info.min), info.max))
"""
SQNR_WITH_TORCHAO = """
def sqnr_db(x, x_hat):
    return compute_error(x, x_hat).item()
"""
SQNR_TWENTY_LOG = """
def sqnr_db(x, x_hat):
    import math

    return 20 * math.log10(x.pow(2).sum().item() / (x - x_hat).pow(2).sum().item())
"""
BYTES_FROM_ELEMENT_SIZE = """
def stored_bytes(model):
    return sum(t.numel() * t.element_size() for t in model.state_dict().values() if isinstance(t, torch.Tensor))
"""
BYTES_ONE_LEVEL = """
def stored_bytes(model):
    total = 0
    for t in model.state_dict().values():
        if not isinstance(t, torch.Tensor):
            continue
        inner = [getattr(t, name) for name in t.__tensor_flatten__()[0]] if hasattr(t, "__tensor_flatten__") else [t]
        total += sum(part.numel() * part.element_size() for part in inner)
    return total
"""
STEPS_FROM_SCHEDULE = """
def recorded_steps(wait, warmup, active, repeat, skip_first, num_steps):
    import warnings

    from torch.profiler import ProfilerAction, schedule

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)
    return [s for s in range(num_steps) if plan(s) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]
"""
STEPS_WITHOUT_REPEAT = """
def recorded_steps(wait, warmup, active, repeat, skip_first, num_steps):
    cycle = wait + warmup + active
    return [s for s in range(skip_first, num_steps) if (s - skip_first) % cycle >= wait + warmup]
"""
OPTIMIZER_IN_BACKWARD = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
    with record_function(f"{prefix}/backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with record_function(f"{prefix}/optimizer"):
        pass
    return loss.detach()
"""
TRACE_ELSEWHERE = """
def export_and_load(prof, directory):
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as file:
        return json.load(file)
"""
EVERY_PHASE_COUNTED = """
def event_stats(trace, name):
    durations = [event.get("dur", 0.0) for event in trace["traceEvents"] if event.get("name") == name]
    return len(durations), float(sum(durations)) / 1e3
"""
MICROSECONDS = """
def event_stats(trace, name):
    durations = [e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name and "dur" in e]
    return len(durations), float(sum(durations))
"""

_WRONG_08_10 = [
    Wrong("08", "ex1_shard_indices", "asks the sampler", SHARDS_FROM_SAMPLER, "without DistributedSampler", False),
    Wrong("08", "ex1_shard_indices", "no padding", SHARDS_UNPADDED, r"\(with padding\) should be", False),
    Wrong("08", "ex2_all_reduce_mean", "mean of overwritten values", MEAN_OF_OVERWRITTEN, "wrong values", False),
    Wrong("08", "ex2_all_reduce_mean", "sum, not mean", SUM_NOT_MEAN, "wrong values", False),
    Wrong("08", "ex3_scale_for_ranks", "forgets accumulation", BATCH_WITHOUT_ACCUMULATION, "should be 1024", False),
    Wrong("08", "ex4_ring_allreduce_bytes", "reduce-scatter only", RING_HALF, "should be about 4000", False),
    Wrong("09", "ex1_quantize_per_tensor", "asks torch", QUANTIZE_WITH_TORCH, r"called torch\..*per_tensor", False),
    Wrong("09", "ex1_quantize_per_tensor", "asks torchao", QUANTIZE_WITH_TORCHAO, r"called torchao\.", False),
    Wrong("09", "ex1_quantize_per_tensor", "rounds halves up", QUANTIZE_HALVES_UP, "round half to even", False),
    Wrong("09", "ex2_choose_qparams", "asks torchao", QPARAMS_WITH_TORCHAO, r"called torchao\.", False),
    Wrong("09", "ex2_choose_qparams", "range without zero", QPARAMS_WITHOUT_ZERO, r"stretched to \[0, 2\]", False),
    Wrong("09", "ex3_sqnr_db", "asks torchao", SQNR_WITH_TORCHAO, r"called torchao\..*compute_error", False),
    Wrong("09", "ex3_sqnr_db", "20 log10 of a power ratio", SQNR_TWENTY_LOG, "should be about 20, got 40", False),
    Wrong("09", "ex4_stored_bytes", "trusts element_size", BYTES_FROM_ELEMENT_SIZE, "after Int8WeightOnly", False),
    Wrong("09", "ex4_stored_bytes", "flattens one level only", BYTES_ONE_LEVEL, "a subclass inside a subclass", False),
    Wrong("10", "ex1_recorded_steps", "asks schedule", STEPS_FROM_SCHEDULE, r"called torch\.profiler", False),
    Wrong("10", "ex1_recorded_steps", "ignores repeat", STEPS_WITHOUT_REPEAT, r"should be \[3, 4, 7, 8\]", False),
    Wrong(
        "10", "ex2_labelled_step", "optimizer in the backward label", OPTIMIZER_IN_BACKWARD, "should run inside", False
    ),
    Wrong("10", "ex3_export_and_load", "writes elsewhere", TRACE_ELSEWHERE, "no .json file was written", False),
    Wrong("10", "ex4_event_stats", "counts every phase", EVERY_PHASE_COUNTED, "instant does not count", False),
    Wrong("10", "ex4_event_stats", "microseconds", MICROSECONDS, "total milliseconds", False),
]

GRAPH_BREAKS_SHAPE_IF = 'GRAPH_BREAKS = {"normalise": 1, "log_and_scale": 2, "relu_if_positive": 1, "count_large": 1}'
GRAPH_BREAKS_PRINT_IGNORED = (
    'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 1, "relu_if_positive": 1, "count_large": 1}'
)
GRAPH_BREAKS_NONZERO_IGNORED = (
    'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 2, "relu_if_positive": 1, "count_large": 0}'
)
GRAPH_COUNTS = 'GRAPH_BREAKS = {"normalise": 1, "log_and_scale": 3, "relu_if_positive": 2, "count_large": 2}'
CLIP_KEEPS_ITEM = """
def clip_in_one_graph(x):
    peak = x.abs().max().item()
    return torch.tanh(x / max(peak, 1.0))
"""
CLIP_ALWAYS_DIVIDES = """
def clip_in_one_graph(x):
    return torch.tanh(x / x.abs().amax())
"""
CLIP_CLAMPS_VALUES = """
def clip_in_one_graph(x):
    return torch.tanh(torch.clamp(x, -1.0, 1.0))
"""
CLIP_WITHOUT_PRINT = """
def clip_in_one_graph(x):
    peak = x.abs().max().item()
    if peak > 1.0:
        x = x / peak
    return torch.tanh(x)
"""
CLIP_CALLS_THE_ORIGINAL = """
def clip_in_one_graph(x):
    return clip_and_report(x)
"""
BREAK_EVEN_FLOOR_PLUS_ONE = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else int(compile_seconds // saved) + 1
"""
BREAK_EVEN_INFINITY = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    saved = eager_seconds - compiled_seconds
    return math.inf if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""
BREAK_EVEN_ZERO_CALLS = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else math.ceil(compile_seconds / saved)
"""
BREAK_EVEN_IGNORES_COMPILED = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    return None if compiled_seconds >= eager_seconds else max(1, math.ceil(compile_seconds / eager_seconds))
"""
BREAK_EVEN_NEGATIVE_TIMES = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""
CALLS_DYNAMIC_FALSE = "COMPILING_CALLS = {1, 3, 4, 5, 6, 7, 8}"

_WRONG_11 = [
    Wrong("11", "ex1_graph_breaks", "an if on a shape breaks", GRAPH_BREAKS_SHAPE_IF, r"\['normalise'\]", False),
    Wrong("11", "ex1_graph_breaks", "counts graphs", GRAPH_COUNTS, r"\['normalise'\]", False),
    Wrong("11", "ex1_graph_breaks", "print does not break",
          GRAPH_BREAKS_PRINT_IGNORED, r"'log_and_scale'\] is off", False),
    Wrong("11", "ex1_graph_breaks", "nonzero does not break",
          GRAPH_BREAKS_NONZERO_IGNORED, r"'count_large'\] is off", False),
    Wrong("11", "ex2_clip_in_one_graph", "keeps .item()", CLIP_KEEPS_ITEM, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "only drops the print", CLIP_WITHOUT_PRINT, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "calls the original", CLIP_CALLS_THE_ORIGINAL, "explain reports", False),
    Wrong("11", "ex2_clip_in_one_graph", "always divides", CLIP_ALWAYS_DIVIDES, "peak is below 1", False),
    Wrong("11", "ex2_clip_in_one_graph", "clamps the values", CLIP_CLAMPS_VALUES, "peak is 2", False),
    Wrong("11", "ex3_compiling_calls", "every new shape compiles",
          CALLS_DYNAMIC_FALSE, "call 4 is not a compile", False),
    Wrong("11", "ex3_compiling_calls", "requires_grad unguarded",
          "COMPILING_CALLS = {1, 3, 5, 7, 8}", "call 6 compiles a graph", False),
    Wrong("11", "ex3_compiling_calls", "no size-1 graph",
          "COMPILING_CALLS = {1, 3, 5, 6, 8}", "call 7 compiles", False),
    Wrong("11", "ex3_compiling_calls", "dynamic from the start",
          "COMPILING_CALLS = {1, 5, 6, 7}", r"call 3 compiles a graph.*\(and 1 more call is wrong\)", False),
    Wrong("11", "ex4_break_even_calls", "floor plus one", BREAK_EVEN_FLOOR_PLUS_ONE, "even counts", False),
    Wrong("11", "ex4_break_even_calls", "ignores compiled time", BREAK_EVEN_IGNORES_COMPILED, "even counts", False),
    Wrong("11", "ex4_break_even_calls", "infinity for no gain", BREAK_EVEN_INFINITY, "return None", False),
    Wrong("11", "ex4_break_even_calls", "zero calls", BREAK_EVEN_ZERO_CALLS, "at least one call", False),
    Wrong("11", "ex4_break_even_calls", "accepts negative times", BREAK_EVEN_NEGATIVE_TIMES, "raise ValueError", False),
]

IMAGES_GLOBAL_STATS = """
def standardize_images(pixels):
    x = pixels.float() / 16.0
    return (x - x.mean()) / (x.std() + 1e-5)
"""
IMAGES_POPULATION_STD = """
def standardize_images(pixels):
    x = pixels.float() / 16.0
    return (x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True, correction=0) + 1e-5)
"""
IMAGES_LOOP = """
def standardize_images(pixels):
    return torch.stack([standardize_image(p) for p in pixels])
"""
STEP_BODY = """
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
# Autocast done right, so that the answers below fail for their own mistake.
STEP_AUTOCAST = "with torch.autocast(images.device.type, dtype=amp_dtype or torch.bfloat16, enabled=bool(amp_dtype)):"
STEP_LOGS_ITEM = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    {STEP_AUTOCAST}
        loss = F.cross_entropy(model(images), labels)
    {STEP_BODY.strip()}
    losses[step] = loss.item()
"""
STEP_WRITES_ZEROS = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    {STEP_AUTOCAST}
        loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer.step()
    losses[step] = loss.detach()
"""
STEP_PER_SAMPLE = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    {STEP_AUTOCAST}
        loss = sum(F.cross_entropy(model(x[None]), t[None]) for x, t in zip(images, labels)) / len(labels)
    {STEP_BODY.strip()}
    losses[step] = loss.detach()
"""
STEP_KEEPS_GRAPH = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    loss = F.cross_entropy(model(images), labels)
    {STEP_BODY.strip()}
    losses[step] = loss
"""
STEP_IGNORES_AMP = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    loss = F.cross_entropy(model(images), labels)
    {STEP_BODY.strip()}
    losses[step] = loss.detach()
"""
STEP_CPU_AUTOCAST = """
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    with torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
        loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses[step] = loss.detach()
"""
STEP_BACKWARD_IN_AUTOCAST = """
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    with torch.autocast(images.device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    losses[step] = loss.detach()
"""
FAST_DEFAULT_LR = """
def fast_train(task, device):
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters())  # Adam's default lr, not task.lr
    pixels, labels = task.data()
    images = torch.stack([standardize_image(p) for p in pixels]).to(device)
    losses = torch.empty(task.steps, device=device)
    for step, batch in enumerate(task.batch_order()):
        loss = F.cross_entropy(model(images[batch]), labels.to(device)[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
"""
FAST_OWN_SHUFFLE = """
def fast_train(task, device):
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)
    pixels, labels = task.data()
    images = torch.stack([standardize_image(p) for p in pixels]).to(device)
    order = torch.cat([torch.randperm(task.num_samples) for _ in range(task.epochs)])  # not task.batch_order()
    losses = torch.empty(task.steps, device=device)
    for step in range(task.steps):
        batch = order[step * task.batch_size : (step + 1) * task.batch_size]
        loss = F.cross_entropy(model(images[batch]), labels.to(device)[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
"""
FAST_LOSS_LIST = """
def fast_train(task, device):
    model, losses = slow_train(task, device)
    return model, losses.tolist()
"""
FAST_HARD_CODED_WIDTH = """
def fast_train(task, device):
    return slow_train(replace(task, hidden=128), device)
"""

_WRONG_12 = [
    Wrong("12", "ex1_standardize_images", "one mean for all images", IMAGES_GLOBAL_STATS, "wrong values", False),
    Wrong("12", "ex1_standardize_images", "population std", IMAGES_POPULATION_STD, "wrong values", False),
    Wrong("12", "ex1_standardize_images", "loops over images", IMAGES_LOOP, "a loop over images", False),
    Wrong("12", "ex2_train_step", "logs with .item()", STEP_LOGS_ITEM, "values into Python", False),
    Wrong("12", "ex2_train_step", "writes zeros", STEP_WRITES_ZEROS, "not to zeros", False),
    Wrong("12", "ex2_train_step", "one sample at a time", STEP_PER_SAMPLE, "once per step", False),
    Wrong("12", "ex2_train_step", "keeps the graph", STEP_KEEPS_GRAPH, r"loss\.detach\(\)", False),
    Wrong("12", "ex2_train_step", "ignores amp_dtype", STEP_IGNORES_AMP, "amp_dtype=torch.bfloat16", False),
    Wrong("12", "ex2_train_step", "autocast on the CPU only", STEP_CPU_AUTOCAST, r"images\.device\.type", False),
    Wrong("12", "ex2_train_step", "backward inside autocast", STEP_BACKWARD_IN_AUTOCAST, "outside the autocast", False),
    Wrong("12", "ex3_fast_train", "Adam's default lr", FAST_DEFAULT_LR, "loss at step", False),
    Wrong("12", "ex3_fast_train", "shuffles on its own", FAST_OWN_SHUFFLE, "loss at step", False),
    Wrong("12", "ex3_fast_train", "losses as a list", FAST_LOSS_LIST, "torch.Tensor of losses", False),
    Wrong("12", "ex3_fast_train", "hard-codes the width", FAST_HARD_CODED_WIDTH, "named and shaped", False),
]

CLIP_TWO_PASSES = """
def clip_global_norm_(parameters, max_norm):
    total_norm = torch.sqrt(sum(p.grad.detach().pow(2).sum() for p in parameters if p.grad is not None))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for p in parameters:  # a generator is already used up here
        if p.grad is not None:
            p.grad.detach().mul_(coefficient)
    return total_norm
"""
CLIP_PYTHON_FLOAT_NORM = """
import math

def clip_global_norm_(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.tensor(math.sqrt(sum(float(g.pow(2).sum()) for g in grads)))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(coefficient)
    return total_norm
"""
CLIP_FILLS_ZEROS = """
def clip_global_norm_(parameters, max_norm):
    parameters = list(parameters)
    for p in parameters:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    total_norm = torch.sqrt(sum(p.grad.detach().pow(2).sum() for p in parameters))
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for p in parameters:
        p.grad.detach().mul_(coefficient)
    return total_norm
"""
COEFFICIENT_WHERE_FLOAT32 = """
def clip_coefficient(total_norm, max_norm):
    return torch.where(total_norm > max_norm, max_norm / (total_norm + 1e-6), torch.tensor(1.0))
"""
AMP_STEP_ONLY_IF_FINITE = """
def clipped_amp_step(model, optimizer, scaler, max_norm):
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(norm):  # skips scaler.update() too, so the scale never backs off
        scaler.step(optimizer)
        scaler.update()
    return norm
"""

_WRONG_01_REVIEW3 = [
    # The visible test says the set is wrong without naming a line (no number but "section 4").
    Wrong(
        "01",
        "ex4_sync_lines",
        "the first five lines",
        "SYNC_LINES = {1, 2, 3, 4, 5}",
        NOT_THE_SYNC_SET,
        False,
    ),
    Wrong(
        "01",
        "ex4_sync_lines",
        "only the explicit reads",
        "SYNC_LINES = {4, 10, 11}",
        NOT_THE_SYNC_SET,
        False,
    ),
]

_WRONG_06_REVIEW3 = [
    Wrong(
        "06", "ex1_clip_global_norm", "iterates a generator twice", CLIP_TWO_PASSES, "parameters as a generator", False
    ),
    Wrong(
        "06",
        "ex1_clip_global_norm",
        "norm built from Python floats",
        CLIP_PYTHON_FLOAT_NORM,
        r"norm \(float64 gradients\) should have dtype torch.float64, got torch.float32",
        False,
    ),
    Wrong(
        "06", "ex1_clip_global_norm", "fills missing gradients with zeros", CLIP_FILLS_ZEROS, "should stay None", False
    ),
    Wrong(
        "06",
        "ex2_clip_coefficient",
        "torch.where with a float32 one",
        COEFFICIENT_WHERE_FLOAT32,
        "should have dtype torch.bfloat16, got torch.float32",
        False,
    ),
    Wrong(
        "06",
        "ex3_clipped_amp_step",
        "steps and updates only if the norm is finite",
        AMP_STEP_ONLY_IF_FINITE,
        r"the scale after an inf: scaler.update\(\) halves it",
        False,
    ),
]

R3_11_IF_ON_DATA_IGNORED = (
    'GRAPH_BREAKS = {"normalise": 0, "log_and_scale": 2, "relu_if_positive": 0, "count_large": 1}'
)
R3_11_EQUAL_DIVIDES_BY_ZERO = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if min(compile_seconds, eager_seconds, compiled_seconds) < 0:
        raise ValueError("negative time")
    if compiled_seconds > eager_seconds:
        return None
    return max(1, math.ceil(compile_seconds / (eager_seconds - compiled_seconds)))
"""
R3_11_ASSERTS_INSTEAD = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    assert min(compile_seconds, eager_seconds, compiled_seconds) >= 0, "negative time"
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""
R3_11_CHECKS_COMPILE_TIME_ONLY = """
def break_even_calls(compile_seconds, eager_seconds, compiled_seconds):
    if compile_seconds < 0:
        raise ValueError("negative compile time")
    saved = eager_seconds - compiled_seconds
    return None if saved <= 0 else max(1, math.ceil(compile_seconds / saved))
"""

# Review 3: notebook 11's visible tests now check every case the statements ask for; the prediction
# exercises name the first wrong item without giving the answer away (no digits in exercise 1's message,
# one call only in exercise 3's).
_WRONG_11_REVIEW3 = [
    Wrong("11", "ex1_graph_breaks", "if on data does not break", R3_11_IF_ON_DATA_IGNORED,
          r"^GRAPH_BREAKS\['relu_if_positive'\] is off: [^0-9]*$", False),
    Wrong("11", "ex3_compiling_calls", "call 9 recompiles", "COMPILING_CALLS = {1, 3, 5, 6, 7, 8, 9}",
          r"^call 9 is not a compile: it reuses a graph compiled before it$", False),
    Wrong("11", "ex3_compiling_calls", "a list",
          "COMPILING_CALLS = [1, 3, 5, 6, 7, 8]", "should be a set, got list", False),
    Wrong("11", "ex4_break_even_calls", "equal speed divides by zero", R3_11_EQUAL_DIVIDES_BY_ZERO,
          "equally fast compiled call never pays off, so return None; it raised ZeroDivisionError", False),
    Wrong("11", "ex4_break_even_calls", "asserts instead of raising", R3_11_ASSERTS_INSTEAD,
          "should raise ValueError for the negative time, not AssertionError", False),
    Wrong("11", "ex4_break_even_calls", "checks only the compile time", R3_11_CHECKS_COMPILE_TIME_ONLY,
          r"break_even_calls\(1\.0, -2\.0, 1\.0\) should raise ValueError", False),
]

DEQUANTIZE_IN_UINT8 = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    info = torch.iinfo(dtype)
    return (torch.round(x / scale) + zero_point).clamp(info.min, info.max).to(dtype)


def dequantize_per_tensor(q, scale, zero_point):
    return (q - zero_point).to(torch.float32) * scale
"""
QUANTIZE_WITHOUT_CLAMP = """
def quantize_per_tensor(x, scale, zero_point, dtype):
    return (torch.round(x / scale) + zero_point).to(dtype)


def dequantize_per_tensor(q, scale, zero_point):
    return (q.to(torch.float32) - zero_point) * scale
"""
QPARAMS_WITHOUT_EPS = """
def choose_qparams(min_val, max_val, dtype):
    info = torch.iinfo(dtype)
    min_neg, max_pos = min(min_val, 0.0), max(max_val, 0.0)
    scale = (max_pos - min_neg) / (info.max - info.min)
    zero_point = info.min - round(min_neg / scale)
    return float(scale), int(min(max(zero_point, info.min), info.max))
"""
QPARAMS_LOW_END_ONLY = """
def choose_qparams(min_val, max_val, dtype):
    info = torch.iinfo(dtype)
    min_neg = min(min_val, 0.0)
    scale = max((max_val - min_neg) / (info.max - info.min), torch.finfo(torch.float32).eps)
    zero_point = info.min - round(min_neg / scale)
    return float(scale), int(min(max(zero_point, info.min), info.max))
"""
SQNR_AS_TENSOR = """
def sqnr_db(x, x_hat):
    return 10 * torch.log10(x.pow(2).sum() / (x - x_hat).pow(2).sum())
"""
SQNR_WITH_DOT = """
def sqnr_db(x, x_hat):
    import math

    noise = x - x_hat
    return 10 * math.log10(torch.dot(x, x).item() / torch.dot(noise, noise).item())
"""
_FLATTEN_ALL = """
    def tensor_bytes(t):
        if hasattr(t, "__tensor_flatten__"):
            return sum(tensor_bytes(getattr(t, name)) for name in t.__tensor_flatten__()[0])
        return t.numel() * t.element_size()
"""
_STORED_BYTES = "def stored_bytes(model):" + _FLATTEN_ALL + "\n    return sum(map(tensor_bytes, {}))\n"
BYTES_PARAMETERS_ONLY = _STORED_BYTES.format("model.parameters()")
BYTES_EVERY_ENTRY = _STORED_BYTES.format("model.state_dict().values()")
STEP_NEVER_ZEROES = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
    with record_function(f"{prefix}/backward"):
        loss.backward()
    with record_function(f"{prefix}/optimizer"):
        optimizer.step()
    return loss.detach()
"""
TRACE_FROM_EVENTS = """
def export_and_load(prof, directory):
    prof.export_chrome_trace(os.path.join(directory, "trace.json"))
    return {"traceEvents": [{"name": event.name, "ph": "X"} for event in prof.events()]}
"""
STATS_WITHOUT_DUR_COUNTED = """
def event_stats(trace, name):
    durations = [e.get("dur", 0.0) for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]
    return len(durations), float(sum(durations)) / 1e3
"""
STATS_INT_ZERO = """
def event_stats(trace, name):
    durations = [e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name and "dur" in e]
    return len(durations), (sum(durations) / 1e3 if durations else 0)
"""
WRONG_VALUES = "has the right shape and dtype but wrong values"
DEQUANTIZED_WRONG = r"dequantize_per_tensor\(codes, 0\.1, 10\) " + WRONG_VALUES
CODES_WRONG_AT_THE_TOP = r"quantize_per_tensor\(x, 0\.1, 10, uint8\) " + WRONG_VALUES + r".*at index \(6,\)"

# Review 3: every case an exercise's statement names fails in its visible tests (notebooks 09 and 10).
_WRONG_09_REVIEW3 = [
    Wrong("09", "ex1_quantize_per_tensor", "subtracts in uint8", DEQUANTIZE_IN_UINT8, DEQUANTIZED_WRONG, False),
    Wrong("09", "ex1_quantize_per_tensor", "no clamp", QUANTIZE_WITHOUT_CLAMP, CODES_WRONG_AT_THE_TOP, False),
    Wrong("09", "ex2_choose_qparams", "no eps floor", QPARAMS_WITHOUT_EPS, r"\(0\.0, 0\.0, int8\) failed", False),
    Wrong("09", "ex2_choose_qparams", "stretches the low end only", QPARAMS_LOW_END_ONLY, r"to \[-2, 0\]", False),
    Wrong("09", "ex3_sqnr_db", "returns a tensor", SQNR_AS_TENSOR, "should be a float, got Tensor", False),
    Wrong("09", "ex3_sqnr_db", "1-D only", SQNR_WITH_DOT, "failed on 2x2 tensors", False),
    Wrong("09", "ex4_stored_bytes", "parameters only", BYTES_PARAMETERS_ONLY, "counts buffers too", False),
    Wrong("09", "ex4_stored_bytes", "every state_dict entry", BYTES_EVERY_ENTRY, "holds a non-tensor entry", False),
]
_WRONG_10_REVIEW3 = [
    Wrong("10", "ex2_labelled_step", "never zeroes the gradients", STEP_NEVER_ZEROES, "gradients zeroed", False),
    Wrong("10", "ex3_export_and_load", "returns its own events", TRACE_FROM_EVENTS, "what is in the file", False),
    Wrong("10", "ex4_event_stats", "counts an X without dur", STATS_WITHOUT_DUR_COUNTED, "should be 2, got 3", False),
    Wrong("10", "ex4_event_stats", "int 0 for a missing name", STATS_INT_ZERO, "never occurs should be a float", False),
]

# 07 and 08, third review: each exercise's visible tests now exercise every case its statement names.
R3_07_CASTS_FLOAT64 = """
def predict_autocast_dtype(op, input_dtype):
    if op in {"linear", "matmul", "bmm", "conv2d"}:
        return torch.bfloat16
    if op in {"mse_loss", "l1_loss", "cross_entropy", "nll_loss"}:
        return torch.float32
    return input_dtype
"""
R3_07_POSITIVE_UNDERFLOW_ONLY = """
def count_lost(x, dtype):
    stored = x.to(dtype)
    overflowed = int((torch.isfinite(x) & torch.isinf(stored)).sum())
    underflowed = int(((x > 0) & (stored == 0)).sum())
    return overflowed, underflowed
"""
R3_07_FIXED_FACTORS = """
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale / 2, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * 2.0, 0
    return float(scale), growth_tracker
"""
R3_08_PADS_ONCE = """
def shard_indices(num_samples, num_replicas, rank):
    total = -(-num_samples // num_replicas) * num_replicas
    indices = list(range(num_samples))
    indices += indices[: total - len(indices)]
    return indices[rank:total:num_replicas]
"""
R3_08_ONE_SHARED_TENSOR = """
def all_reduce_mean_(tensors):
    mean = torch.stack(tensors).mean(dim=0)
    for tensor in tensors:
        tensor.set_(mean)
"""
R3_08_LR_OVER_256 = """
def scale_for_ranks(per_rank_batch, world_size, accumulation_steps, base_lr, base_batch):
    effective_batch = per_rank_batch * world_size * accumulation_steps
    return effective_batch, base_lr * effective_batch / 256
"""
R3_08_RING_FOUR_BYTES = """
def ring_allreduce_bytes(num_elements, world_size, element_size=4):
    return 2 * (world_size - 1) * num_elements * 4 / world_size
"""
R3_08_RING_INTEGER = """
def ring_allreduce_bytes(num_elements, world_size, element_size=4):
    return 2 * (world_size - 1) * num_elements * element_size // world_size
"""

_WRONG_07_REVIEW3 = [
    Wrong("07", "ex1_predict_autocast_dtype", "casts float64 too", R3_07_CASTS_FLOAT64,
          r"'linear', torch\.float64\) should be torch\.float64, got torch\.bfloat16", False),
    Wrong("07", "ex2_count_lost", "only positive values underflow", R3_07_POSITIVE_UNDERFLOW_ONLY,
          "negative values underflow too", False),
    Wrong("07", "ex3_update_scale", "ignores the factors", R3_07_FIXED_FACTORS, "backoff_factor=0.25", False),
]

_WRONG_08_REVIEW3 = [
    Wrong("08", "ex1_shard_indices", "pads only once", R3_08_PADS_ONCE, "repeats more than once", False),
    Wrong("08", "ex2_all_reduce_mean", "one tensor shared by all ranks", R3_08_ONE_SHARED_TENSOR,
          r"shared memory\?", False),
    Wrong("08", "ex3_scale_for_ranks", "divides by 256, not base_batch", R3_08_LR_OVER_256,
          "base_lr=0.05 at base_batch=32", False),
    Wrong("08", "ex4_ring_allreduce_bytes", "ignores element_size", R3_08_RING_FOUR_BYTES,
          r"element_size=2\) should be about 800", False),
    Wrong("08", "ex4_ring_allreduce_bytes", "integer division", R3_08_RING_INTEGER,
          "should be a float, got int", False),
]

# 04 · review 3: the bans see every name (forbidden_calls), and the visible tests ask for every case.
BN_WITH_TORCH_ALIAS = """
from torch import batch_norm as _bn

def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    return _bn(x, weight, bias, new_mean, new_var, training, momentum, eps, False), new_mean, new_var
"""
BN_WITH_NATIVE = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    output, _, _ = torch.native_batch_norm(x, weight, bias, new_mean, new_var, training, momentum, eps)
    return output, new_mean, new_var
"""
BN_WITH_ATEN_OP = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    output, _, _ = torch.ops.aten.native_batch_norm(x, weight, bias, new_mean, new_var, training, momentum, eps)
    return output, new_mean, new_var
"""
BN_WITH_LAYER_NORM = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if not training:
        return (x - running_mean) / torch.sqrt(running_var + eps) * weight + bias, running_mean, running_var
    output = torch.nn.functional.layer_norm(x.T, x.shape[:1], eps=eps).T * weight + bias
    new_mean = (1 - momentum) * running_mean + momentum * x.mean(dim=0)
    new_var = (1 - momentum) * running_var + momentum * x.var(dim=0)
    return output, new_mean, new_var
"""
BN_FIXED_MOMENTUM = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        new_mean = 0.9 * running_mean + 0.1 * mean
        new_var = 0.9 * running_var + 0.1 * x.var(dim=0)
    else:
        mean, var, new_mean, new_var = running_mean, running_var, running_mean.clone(), running_var.clone()
    return (x - mean) / torch.sqrt(var + eps) * weight + bias, new_mean, new_var
"""
BN_FIXED_EPS = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * x.var(dim=0)
    else:
        mean, var, new_mean, new_var = running_mean, running_var, running_mean.clone(), running_var.clone()
    return (x - mean) / torch.sqrt(var + 1e-5) * weight + bias, new_mean, new_var
"""
BN_IN_PLACE = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        running_mean.mul_(1 - momentum).add_(momentum * mean)
        running_var.mul_(1 - momentum).add_(momentum * x.var(dim=0))
    else:
        mean, var = running_mean, running_var
    return (x - mean) / torch.sqrt(var + eps) * weight + bias, running_mean, running_var
"""
FOLD_WITH_FUSION_ALIAS = """
from torch.nn.utils.fusion import fuse_linear_bn_weights as _f

def fold_linear_bn(linear, bn):
    weight, bias = _f(linear.weight, linear.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    folded = nn.Linear(linear.in_features, linear.out_features)
    with torch.no_grad():
        folded.weight.copy_(weight)
        folded.bias.copy_(bias)
    return folded
"""
FOLD_WITH_FUSE_MODULES = """
import copy

def fold_linear_bn(linear, bn):
    pair = torch.nn.Sequential(copy.deepcopy(linear), copy.deepcopy(bn)).eval()
    return torch.ao.quantization.fuse_modules(pair, [["0", "1"]])[0]
"""
FOLD_FIXED_EPS = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + 1e-5)
        bias = linear.bias if linear.bias is not None else torch.zeros_like(bn.running_mean)
        folded = nn.Linear(linear.in_features, linear.out_features)
        folded.weight.copy_(linear.weight * scale[:, None])
        folded.bias.copy_(scale * (bias - bn.running_mean) + bn.bias)
    return folded
"""
FOLD_SCALES_IN_PLACE = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        bias = linear.bias if linear.bias is not None else torch.zeros_like(bn.running_mean)
        folded = nn.Linear(linear.in_features, linear.out_features)
        folded.weight.copy_(linear.weight.mul_(scale[:, None]))
        folded.bias.copy_(scale * (bias - bn.running_mean) + bn.bias)
    return folded
"""
FREEZE_ONLY_1D = """
def freeze_batchnorm(model):
    for module in model.modules():
        if isinstance(module, nn.BatchNorm1d):
            module.eval()
    return model
"""
FREEZE_TRAINS_THE_REST = """
def freeze_batchnorm(model):
    for module in model.modules():
        module.train(not isinstance(module, nn.modules.batchnorm._BatchNorm))
    return model
"""

_WRONG_04_REVIEW3 = [
    Wrong("04", "ex1_batchnorm_forward", "torch.batch_norm aliased", BN_WITH_TORCH_ALIAS, "tensor arithmetic", False),
    Wrong("04", "ex1_batchnorm_forward", "torch.native_batch_norm", BN_WITH_NATIVE, "tensor arithmetic", False),
    Wrong("04", "ex1_batchnorm_forward", "a torch.ops.aten operator", BN_WITH_ATEN_OP, "tensor arithmetic", False),
    Wrong("04", "ex1_batchnorm_forward", "layer_norm on the transpose", BN_WITH_LAYER_NORM, "layer_norm", False),
    Wrong("04", "ex1_batchnorm_forward", "fixed momentum", BN_FIXED_MOMENTUM, r"mean \(momentum=0\.3", False),
    Wrong("04", "ex1_batchnorm_forward", "fixed eps", BN_FIXED_EPS, r"output \(momentum=0\.3, eps=0\.01\)", False),
    Wrong("04", "ex1_batchnorm_forward", "updates the running stats in place", BN_IN_PLACE, "do not modify it", False),
    Wrong("04", "ex2_fold_linear_bn", "fusion under an alias", FOLD_WITH_FUSION_ALIAS, "fold by hand", False),
    Wrong("04", "ex2_fold_linear_bn", "quantization fuse_modules", FOLD_WITH_FUSE_MODULES, "fold by hand", False),
    Wrong("04", "ex2_fold_linear_bn", "eps fixed at 1e-5", FOLD_FIXED_EPS, r"eps=0\.5", False),
    Wrong("04", "ex2_fold_linear_bn", "scales linear.weight in place", FOLD_SCALES_IN_PLACE, "must not change", False),
    Wrong("04", "ex3_freeze_batchnorm", "BatchNorm1d only", FREEZE_ONLY_1D, "BatchNorm2d", False),
    Wrong("04", "ex3_freeze_batchnorm", "trains the others", FREEZE_TRAINS_THE_REST, "evaluation mode", False),
]

# 05 · review 3: every case the statements ask for is in the visible tests.
KAIMING_IGNORES_GAIN = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return math.sqrt(2.0 / fan_in) * torch.randn(fan_out, fan_in, generator=generator)
"""
KAIMING_DEFAULT_GAIN_ONE = """
def kaiming_normal(fan_out, fan_in, gain=1.0, generator=None):
    return gain / math.sqrt(fan_in) * torch.randn(fan_out, fan_in, generator=generator)
"""
KAIMING_GLOBAL_GENERATOR = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return gain / math.sqrt(fan_in) * torch.randn(fan_out, fan_in)
"""
KAIMING_OWN_GENERATOR = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    own = torch.Generator().manual_seed(0)
    return gain / math.sqrt(fan_in) * torch.randn(fan_out, fan_in, generator=own)
"""
INIT_EVERY_WEIGHT = """
def init_weights(module):
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() >= 2:
        nn.init.kaiming_normal_(weight, mode="fan_in", nonlinearity="relu")
    if isinstance(getattr(module, "bias", None), torch.Tensor):
        nn.init.zeros_(module.bias)
"""
UNITS_TAKES_A_STEP = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(X), y).backward()
    optimizer.step()
    grad = first.weight.grad
    return bool(torch.allclose(grad, grad[:1].expand_as(grad)))
"""

_WRONG_05_REVIEW3 = [
    Wrong("05", "ex1_kaiming_normal", "ignores gain", KAIMING_IGNORES_GAIN, r"gain=1\): std should be about", False),
    Wrong("05", "ex1_kaiming_normal", "default gain 1", KAIMING_DEFAULT_GAIN_ONE, r"\(400, 100\): std", False),
    Wrong("05", "ex1_kaiming_normal", "global generator", KAIMING_GLOBAL_GENERATOR, "seeded alike", False),
    Wrong("05", "ex1_kaiming_normal", "its own generator", KAIMING_OWN_GENERATOR, "seeded differently", False),
    Wrong("05", "ex2_init_weights", "initialises every weight", INIT_EVERY_WEIGHT, "not a Linear: it must not", False),
    Wrong("05", "ex3_units_identical", "takes an optimiser step", UNITS_TAKES_A_STEP, "the weights changed", False),
]

# 02 · Measure and reduce memory, third review: the visible tests cover every case of the statements.
TRAINING_MEMORY = """
def training_memory_bytes(model, optimizer):
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in copies:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    state = copies[optimizer] * grads
    return {"parameters": params, "gradients": grads, "optimizer_state": state, "total": params + grads + state}
"""
MOMENTUM_TWO_BUFFERS = TRAINING_MEMORY.replace('"momentum": 1', '"momentum": 2')
UNKNOWN_NAME_ACCEPTED = TRAINING_MEMORY.replace(
    '    if optimizer not in copies:\n        raise ValueError(f"unknown optimizer {optimizer!r}")\n', ""
).replace("copies[optimizer]", "copies.get(optimizer, 0)")
SHARED_WEIGHT_TWICE = TRAINING_MEMORY.replace(
    "model.parameters()", "(q for module in model.modules() for q in module.parameters(recurse=False))"
)
FOUR_BYTES_A_PARAMETER = TRAINING_MEMORY.replace("p.numel() * p.element_size()", "p.numel() * 4")
COUNTS_THE_VIEW_ONLY = """
def shares_storage(a, b):
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def new_bytes(result, base):
    return 0 if shares_storage(result, base) else result.numel() * result.element_size()
"""
COUNTS_TENSORS_NOT_STORAGES = EVERY_SAVE_COUNTED.replace(
    "        def pack(tensor):\n",
    "        seen = set()\n\n"
    "        def pack(tensor):\n"
    "            if tensor.untyped_storage().data_ptr() in seen:\n"
    "                return tensor\n"
    "            seen.add(tensor.untyped_storage().data_ptr())\n",
)
RUNS_THE_MODEL = """
from course_utils import MLP


def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    net = MLP(in_features, 3, hidden=hidden, depth=depth).to(dtype)
    return saved_activation_bytes(net, torch.randn(batch_size, in_features, dtype=dtype))
"""
FOUR_BYTE_ACTIVATIONS = """
def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    return batch_size * (in_features + depth * hidden) * 4
"""

_WRONG_02_REVIEW3 = [
    Wrong(
        "02",
        "ex1_training_memory",
        "momentum keeps two buffers",
        MOMENTUM_TWO_BUFFERS,
        r"'momentum'\)\['optimizer_state'\] should be 13864, got 27728",
        False,
    ),
    Wrong("02", "ex1_training_memory", "accepts unknown names", UNKNOWN_NAME_ACCEPTED, "'rmsprop'.*ValueError", False),
    Wrong(
        "02", "ex1_training_memory", "counts a shared weight twice", SHARED_WEIGHT_TWICE, "sharing one weight", False
    ),
    Wrong("02", "ex1_training_memory", "four bytes a parameter", FOUR_BYTES_A_PARAMETER, "a float64 MLP", False),
    Wrong("02", "ex2_view_or_copy", "counts the view only", COUNTS_THE_VIEW_ONLY, "should be 48, got 12", False),
    Wrong(
        "02",
        "ex3_saved_bytes_by_dtype",
        "counts tensors, not storages",
        COUNTS_TENSORS_NOT_STORAGES,
        "views of one tensor",
        False,
    ),
    Wrong("02", "ex4_mlp_activations", "runs the model", RUNS_THE_MODEL, "don't run the model", False),
    Wrong("02", "ex4_mlp_activations", "four bytes an element", FOUR_BYTE_ACTIVATIONS, "12, 3, float64", False),
]

# 03 · Feed the model with batches, third review.
PINS_ONLY_CUDA_ZERO = PIN_FOR_ANY_ACCELERATOR.replace('device.type != "cpu"', 'str(device) in ("cuda", "cuda:0")')
IGNORES_PADDING_VALUE = TIME_FIRST_PADDING.replace(
    "pad_sequence(sequences, padding_value=padding_value)", "pad_sequence(sequences, batch_first=True)"
)
DROPS_THE_LAST_BATCH = """
def make_reproducible_loader(dataset, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator, drop_last=True)
"""
IGNORES_THE_SEED = """
def shard_indices(num_samples, num_replicas, shuffle, seed=0, epoch=0):
    dataset = TensorDataset(torch.arange(num_samples))
    shards = []
    for rank in range(num_replicas):
        sampler = DistributedSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards
"""

_WRONG_03_REVIEW3 = [
    Wrong("03", "ex1_loader_options", "pins only cuda:0", PINS_ONLY_CUDA_ZERO, "any CUDA index", False),
    Wrong("03", "ex2_pad_collate", "ignores padding_value", IGNORES_PADDING_VALUE, r"padding_value=-1\.0", False),
    Wrong("03", "ex3_reproducible_loader", "drops the last batch", DROPS_THE_LAST_BATCH, "last one smaller", False),
    Wrong("03", "ex4_shard_indices", "ignores the seed", IGNORES_THE_SEED, r"shuffle=True, seed=3, epoch=1", False),
]

# Every module-level list whose name starts with _WRONG (one or more per notebook).
# and every list named WRONG in tests/wrong_answers/nbNN.py.
WRONG = [w for name, cases in sorted(globals().items()) if name.startswith("_WRONG") for w in cases] + [
    w
    for module in pkgutil.iter_modules(wrong_answers.__path__)
    if module.name.startswith("nb")
    for w in importlib.import_module(f"wrong_answers.{module.name}").WRONG
]


@pytest.mark.parametrize("wrong", WRONG, ids=lambda w: f"{w.notebook}-{w.grade_id}-{w.why}")
def test_wrong_answer_fails(wrong):
    with pytest.raises(AssertionError, match=wrong.match):
        run_exercise(wrong.notebook, wrong.grade_id, wrong.answer, hidden=wrong.hidden)


@pytest.mark.parametrize("exercise", sorted({(w.notebook, w.grade_id) for w in WRONG}), ids="-".join)
def test_solution_passes_the_same_harness(exercise):
    run_exercise(*exercise)


@pytest.mark.parametrize("prefix", [f"{n:02d}" for n in range(1, 13)])
def test_every_exercise_has_a_wrong_answer(prefix):
    exercises = {nbgrader_meta(c)["grade_id"] for c in read(notebook_path(prefix)).cells if is_solution_cell(c)}
    covered = {w.grade_id for w in WRONG if w.notebook == prefix}
    assert exercises == covered, f"notebook {prefix}: no wrong answer for {sorted(exercises - covered)}"
