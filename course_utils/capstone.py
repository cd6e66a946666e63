"""The capstone of notebook 12: a slow but correct training loop, and the grader of a fast one.

Contract: nothing happens at import. ``slow_train(task, device)`` trains a small MLP on the
digits with every mistake the course taught you to avoid, and returns ``(model, losses)``;
a learner's ``fast_train(task, device)`` must return the same kind of pair.
``check_same_training`` decides whether two such results are the same training within the
stated tolerances (raising ``AssertionError`` with a message a learner can act on),
``measure_speedup`` times the two side by side (interleaved rounds, median of the per-round
ratios), ``diagnose`` runs a training function once under counters and names the mistakes
it still makes, and ``grade_fast_train`` puts the three together into points.
First written out in notebook 12 ("Make this training loop fast").
"""

from __future__ import annotations

import bisect
import gc
import math
import os
import secrets
import statistics
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset

from course_utils.device import synchronize
from course_utils.timing import synced_timer

__all__ = [
    "ANSWER_IMPORTS",
    "CORRECTNESS_POINTS",
    "FINAL_LOSS_TOLERANCE",
    "GRADED_TASK",
    "MAX_POINTS",
    "OTHER_TASK",
    "SPEED_TIERS",
    "STEP_LOSS_TOLERANCE",
    "TEST_ACCURACY_TOLERANCE",
    "AutocastUse",
    "CapstoneGrade",
    "CapstoneNet",
    "CapstoneTask",
    "Diagnosis",
    "DigitsPixels",
    "Speedup",
    "TorchCallCounter",
    "TrainFn",
    "as_if_on_cuda",
    "check_same_training",
    "diagnose",
    "evaluate",
    "gelu_by_hand",
    "grade_fast_train",
    "make_model",
    "measure_speedup",
    "result_arrays",
    "result_from_arrays",
    "slow_train",
    "speed_points",
    "standardize_image",
    "timed_rounds",
    "watch_autocast",
]

NUM_PIXELS = 64
NUM_CLASSES = 10
NUM_TRAIN_IMAGES = 1348
"""Images in ``load_digits_split()``'s training split (1,797 digits, a quarter held out)."""
STD_EPS = 1e-5
"""Added to each image's standard deviation before dividing by it."""

TrainFn = Callable[["CapstoneTask", torch.device], tuple[nn.Module, torch.Tensor]]
"""``train(task, device) -> (trained model, per-step training losses)``."""


# ----------------------------------------------------------------------------- the task


@lru_cache(maxsize=1)
def _digits_pixels() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from course_utils.data import load_digits_split

    split = load_digits_split()
    as_stored = lambda X: (X * 16).round().to(torch.uint8)  # noqa: E731  # pixel values 0..16
    return as_stored(split.X_train), split.y_train, as_stored(split.X_test), split.y_test


@dataclass(frozen=True)
class CapstoneTask:
    """What to train: which images, how long, with which hyperparameters and seed.

    ``num_samples`` images of the digits training split, ``epochs`` passes in the shuffled
    order of ``batch_order()`` (each epoch drops the last incomplete batch), Adam with
    learning rate ``lr``, a ``CapstoneNet`` of width ``hidden`` initialised from ``seed``.
    With ``data_seed`` None the images are the first ``num_samples`` of the split, as
    stored; with a ``data_seed`` they are a random choice of ``num_samples`` images with a
    little random noise on their pixels (see ``data``). The grader's timed rounds draw
    ``seed`` and ``data_seed`` when each round starts, so that nothing computed before a
    round (standardised images, initial weights, a whole training run) can serve in it.
    """

    num_samples: int = 256
    epochs: int = 2
    batch_size: int = 16
    hidden: int = 128
    lr: float = 1e-2
    seed: int = 0
    data_seed: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= self.num_samples <= NUM_TRAIN_IMAGES:
            raise ValueError(
                f"need 1 <= batch_size <= num_samples <= {NUM_TRAIN_IMAGES}, "
                f"got {self.batch_size} and {self.num_samples}"
            )
        if self.epochs < 1 or self.hidden < 1:
            raise ValueError(f"need epochs >= 1 and hidden >= 1, got {self.epochs} and {self.hidden}")

    @property
    def steps(self) -> int:
        """Optimizer steps in the whole run."""
        return self.epochs * (self.num_samples // self.batch_size)

    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training images as stored, ``(num_samples, 64)`` uint8 in 0..16, and their int64 labels.

        With a ``data_seed``: ``num_samples`` images drawn without replacement from the
        whole training split, each pixel moved one step up or down with probability 1/8
        (kept in 0..16), all fixed by ``data_seed``.
        """
        pixels, labels, _, _ = _digits_pixels()
        if self.data_seed is None:
            return pixels[: self.num_samples].clone(), labels[: self.num_samples].clone()
        generator = torch.Generator().manual_seed(self.data_seed)
        chosen = torch.randperm(NUM_TRAIN_IMAGES, generator=generator)[: self.num_samples]
        picked = pixels[chosen].to(torch.int16)
        moved = torch.rand(picked.shape, generator=generator) < 0.125
        step = torch.randint(0, 2, picked.shape, generator=generator, dtype=torch.int16) * 2 - 1
        noisy = (picked + moved * step).clamp(0, 16).to(torch.uint8)
        return noisy, labels[chosen].clone()

    def batch_order(self) -> torch.Tensor:
        """Sample indices of every step, ``(steps, batch_size)`` int64, fixed by ``seed``."""
        generator = torch.Generator().manual_seed(self.seed)
        per_epoch = self.num_samples // self.batch_size
        epochs = [
            torch.randperm(self.num_samples, generator=generator)[: per_epoch * self.batch_size]
            for _ in range(self.epochs)
        ]
        return torch.cat(epochs).view(self.steps, self.batch_size)


GRADED_TASK = CapstoneTask()
"""The task the graded test trains and times (the same in quick mode and on every device)."""
OTHER_TASK = CapstoneTask(num_samples=96, epochs=1, batch_size=8, hidden=64, lr=5e-3, seed=11)
"""Another shape of the task, trained once (untimed) to check that ``fast_train`` reads its sizes from the task."""


def standardize_image(pixels: torch.Tensor) -> torch.Tensor:
    """One image's pixels (0..16) as float32 in [0, 1], shifted and scaled to mean 0, std 1."""
    x = pixels.float() / 16.0
    return (x - x.mean()) / (x.std() + STD_EPS)


class DigitsPixels(Dataset):
    """The stored images, transformed one at a time in ``__getitem__`` (as a decoder would)."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor) -> None:
        self.pixels = pixels
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return standardize_image(self.pixels[index]), self.labels[index]


def gelu_by_hand(x: torch.Tensor) -> torch.Tensor:
    """GELU (tanh approximation) as a chain of separate elementwise operators (notebook 10)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class CapstoneNet(nn.Module):
    """64 -> hidden -> hidden -> 10 with tanh-GELU, written out by hand unless ``fused_gelu``."""

    def __init__(self, hidden: int = 128, *, fused_gelu: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(NUM_PIXELS, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, NUM_CLASSES)
        self.fused_gelu = fused_gelu

    def act(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh") if self.fused_gelu else gelu_by_hand(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


def make_model(task: CapstoneTask, *, fused_gelu: bool = False) -> CapstoneNet:
    """The task's model on the CPU, initialised from ``task.seed`` (the global RNG is left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(task.seed)
        return CapstoneNet(task.hidden, fused_gelu=fused_gelu)


def slow_train(task: CapstoneTask, device: torch.device | str = "cpu") -> tuple[nn.Module, torch.Tensor]:
    """Train ``make_model(task)`` on ``task``: correct, and slow in every way the course warned about."""
    device = torch.device(device)
    model = make_model(task).to(device)  # GELU written out by hand, float32 throughout
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)  # one parameter at a time on the CPU
    order = task.batch_order().flatten().tolist()
    loader = DataLoader(DigitsPixels(*task.data()), batch_size=1, sampler=order)  # one image per fetch
    samples = iter(loader)
    losses = []
    for _ in range(task.steps):
        with record_function("zero_grad"):
            for parameter in model.parameters():
                parameter.grad = torch.zeros_like(parameter)  # zeros written, then added to
        loss = torch.zeros((), device=device)
        for _ in range(task.batch_size):  # one sample at a time
            with record_function("data"):
                image, label = next(samples)  # transformed on the main thread, now
                image, label = image.to(device), label.to(device)
            with record_function("forward"):
                loss = loss + F.cross_entropy(model(image), label) / task.batch_size
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
        with record_function("logging"):
            losses.append(loss.item())  # waits for the device, every step
    return model, torch.tensor(losses)


# ----------------------------------------------------------------------------- correctness

STEP_LOSS_TOLERANCE = 0.1
"""Largest allowed difference between the two runs' training losses at any step."""
FINAL_LOSS_TOLERANCE = 0.05
"""Largest allowed difference of the trained models' loss on the whole training subset."""
TEST_ACCURACY_TOLERANCE = 0.02
"""Largest allowed difference of the trained models' test accuracy (9 of the 449 test images)."""


@lru_cache(maxsize=8)
def _standardized(task: CapstoneTask) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The task's training images and the test set, standardized image by image (the slow, obviously right way)."""
    pixels, labels = task.data()
    _, _, test_pixels, test_labels = _digits_pixels()
    train = torch.stack([standardize_image(p) for p in pixels])
    test = torch.stack([standardize_image(p) for p in test_pixels])
    return train, labels, test, test_labels


def _unwrap(model: nn.Module) -> nn.Module:
    """The module ``torch.compile`` wrapped, or the model itself."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model


@torch.no_grad()
def evaluate(model: nn.Module, task: CapstoneTask) -> tuple[float, float]:
    """``(training loss, test accuracy)`` of ``model``'s weights, computed in float32 on the CPU.

    The weights are copied into a fresh ``CapstoneNet`` (fused GELU), so every model is
    measured the same way, whatever device, dtype or wrapper it was trained with.
    """
    state = {name: value.detach().float().cpu() for name, value in _unwrap(model).named_parameters()}
    probe = CapstoneNet(task.hidden, fused_gelu=True)
    probe.load_state_dict(state)
    X, y, X_test, y_test = _standardized(task)
    loss = F.cross_entropy(probe(X), y).item()
    accuracy = (probe(X_test).argmax(dim=1) == y_test).float().mean().item()
    return loss, accuracy


def _check_result(result: object, task: CapstoneTask, reference: nn.Module, who: str) -> torch.Tensor:
    """Type, parameter shapes and loss-curve shape of ``result``; returns its losses as float32 on the CPU."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise AssertionError(f"{who} should return a tuple (model, losses), got {type(result).__name__}")
    model, losses = result
    if not isinstance(model, nn.Module):
        raise AssertionError(f"{who}: the first element should be the trained nn.Module, got {type(model).__name__}")
    expected = {name: tuple(p.shape) for name, p in _unwrap(reference).named_parameters()}
    actual = {name: tuple(p.shape) for name, p in _unwrap(model).named_parameters()}
    if actual != expected:
        raise AssertionError(
            f"{who}: the model's parameters should be named and shaped as make_model(task)'s, {expected}, got {actual}"
        )
    if type(losses) is not torch.Tensor:
        raise AssertionError(
            f"{who}: the second element should be a torch.Tensor of losses, got {type(losses).__name__}"
        )
    if losses.shape != (task.steps,) or not losses.is_floating_point():
        raise AssertionError(
            f"{who}: losses should be a floating-point tensor of shape ({task.steps},), one per step, "
            f"got {losses.dtype} of shape {tuple(losses.shape)}"
        )
    losses = losses.detach().float().cpu()
    if not torch.isfinite(losses).all():
        raise AssertionError(f"{who}: some losses are not finite")
    return losses


@dataclass(frozen=True)
class Agreement:
    """How closely two training runs agree: the differences the tolerances bound."""

    max_step_loss_diff: float
    train_loss: tuple[float, float]
    """(reference, yours): loss of the trained model on the training subset."""
    test_accuracy: tuple[float, float]
    """(reference, yours)."""

    def __str__(self) -> str:
        return (
            f"trained model: loss {self.train_loss[1]:.4f} (baseline {self.train_loss[0]:.4f}), test accuracy "
            f"{self.test_accuracy[1]:.1%} (baseline {self.test_accuracy[0]:.1%}); per-step losses within "
            f"{self.max_step_loss_diff:.2g} of the baseline's"
        )


def check_same_training(
    result: object, reference: tuple[nn.Module, torch.Tensor], task: CapstoneTask, who: str = "fast_train"
) -> Agreement:
    """Fail unless ``result`` is the same training as ``reference`` (``slow_train``'s) on ``task``.

    Same parameter names and shapes; one loss per step, each within ``STEP_LOSS_TOLERANCE``
    of the reference's; a trained model whose training loss and test accuracy are within
    ``FINAL_LOSS_TOLERANCE`` and ``TEST_ACCURACY_TOLERANCE`` of the reference's. The
    tolerances admit what does not change the training (bf16 autocast, TF32, summation
    order, fused kernels) and reject a different number of steps, other batches, a missing
    step or a clearly different learning rate.
    """
    ref_model, ref_losses = reference
    losses = _check_result(result, task, ref_model, who)
    ref_losses = ref_losses.detach().float().cpu()
    step_diff = (losses - ref_losses).abs()
    worst = int(step_diff.argmax())
    if step_diff[worst] > STEP_LOSS_TOLERANCE:
        raise AssertionError(
            f"{who}: the loss at step {worst} is {losses[worst]:.4f}, the baseline's {ref_losses[worst]:.4f} "
            f"(allowed difference {STEP_LOSS_TOLERANCE}): train on task.batch_order()'s batches, in order, with "
            f"Adam at the task's lr, one optimizer step per batch"
        )
    ref_loss, ref_accuracy = evaluate(ref_model, task)
    loss, accuracy = evaluate(result[0], task)  # type: ignore[index]
    if abs(loss - ref_loss) > FINAL_LOSS_TOLERANCE:
        raise AssertionError(
            f"{who}: the trained model's training loss is {loss:.4f}, the baseline's {ref_loss:.4f} "
            f"(allowed difference {FINAL_LOSS_TOLERANCE})"
        )
    if abs(accuracy - ref_accuracy) > TEST_ACCURACY_TOLERANCE:
        raise AssertionError(
            f"{who}: the trained model's test accuracy is {accuracy:.1%}, the baseline's {ref_accuracy:.1%} "
            f"(allowed difference {TEST_ACCURACY_TOLERANCE:.0%})"
        )
    return Agreement(float(step_diff.max()), (ref_loss, loss), (ref_accuracy, accuracy))


# ----------------------------------------------------------------------------- speed


@dataclass(frozen=True)
class Speedup:
    """Paired timings of the baseline and a fast version, one pair per round."""

    baseline_seconds: tuple[float, ...]
    fast_seconds: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        """Baseline time over fast time, per round."""
        return tuple(b / f for b, f in zip(self.baseline_seconds, self.fast_seconds, strict=True))

    @property
    def ratio(self) -> float:
        """The median of the per-round ratios: how many times faster the fast version is."""
        return statistics.median(self.ratios)

    def __str__(self) -> str:
        rounds = ", ".join(f"{r:.1f}" for r in self.ratios)
        return (
            f"speedup {self.ratio:.1f}x (median of {len(self.ratios)} rounds: {rounds}); baseline "
            f"{statistics.median(self.baseline_seconds) * 1e3:.0f} ms, yours "
            f"{statistics.median(self.fast_seconds) * 1e3:.1f} ms per training run"
        )


def _timed(train: TrainFn, task: CapstoneTask, device: torch.device) -> tuple[float, object]:
    """Seconds for one ``train(task, device)`` call (device synchronised, no garbage collection inside).

    The collector is paused, as ``timeit`` does, so that a collection triggered by one
    run's garbage is not charged to whichever run happens to be going.
    """
    clock = synced_timer(lambda: synchronize(device))
    gc.disable()
    try:
        start = clock()
        result = train(task, device)
        return clock() - start, result
    finally:
        gc.enable()


def _tier(ratio: float, thresholds: list[float]) -> int:
    return bisect.bisect_right(thresholds, ratio)


def _decided(ratios: list[float], rounds: int, thresholds: list[float]) -> bool:
    """Whether the median of ``rounds`` ratios must fall in one tier, whatever the rounds still to come.

    It must once more than half of all ``rounds`` ratios already lie in one tier (tiers are
    intervals, and the median of the full set then lies between two of them).
    """
    tiers = [_tier(ratio, thresholds) for ratio in ratios]
    return any(tiers.count(tier) > rounds // 2 for tier in set(tiers))


def measure_speedup(
    fast_train: TrainFn,
    task: CapstoneTask = GRADED_TASK,
    device: torch.device | str = "cpu",
    *,
    rounds: int = 5,
    thresholds: tuple[float, ...] = (),
    baseline: TrainFn = slow_train,
) -> Speedup:
    """Time ``baseline`` and ``fast_train`` in up to ``rounds`` interleaved pairs; check every pair agrees.

    Each round trains the task with a ``seed`` and ``data_seed`` drawn for that round (so no
    run can reuse an earlier one, or anything computed for it) and alternates which function
    goes first, so that a drift in machine load hits both alike. The two results of each round must pass
    ``check_same_training``. With ``thresholds``, measuring stops as soon as the median
    of all ``rounds`` ratios is certain to lie between the same two thresholds, whatever
    the remaining rounds would measure. Warm up both functions before calling this (the
    grader's correctness run does).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    device = torch.device(device)
    sorted_thresholds = sorted(thresholds)
    base_times: list[float] = []
    fast_times: list[float] = []
    for index in range(rounds):
        round_task = replace(task, seed=secrets.randbelow(2**31), data_seed=secrets.randbelow(2**31))
        order = [("baseline", baseline), ("fast", fast_train)]
        timed = {name: _timed(fn, round_task, device) for name, fn in order[:: 1 if index % 2 == 0 else -1]}
        check_same_training(timed["fast"][1], timed["baseline"][1], round_task, who=f"fast_train (round {index + 1})")
        base_times.append(timed["baseline"][0])
        fast_times.append(timed["fast"][0])
        ratios = [b / f for b, f in zip(base_times, fast_times, strict=True)]
        if sorted_thresholds and _decided(ratios, rounds, sorted_thresholds):
            break
    return Speedup(tuple(base_times), tuple(fast_times))


SPEED_TIERS: tuple[tuple[float, int], ...] = ((2.0, 2), (3.0, 4), (4.0, 6), (5.0, 8))
"""``(minimum speedup, points)``, best tier that the measured speedup reaches."""
CORRECTNESS_POINTS = 2
MAX_POINTS = CORRECTNESS_POINTS + max(points for _, points in SPEED_TIERS)


def speed_points(ratio: float) -> int:
    """Points for a measured speedup: the best tier of ``SPEED_TIERS`` it reaches, else 0."""
    return max((points for threshold, points in SPEED_TIERS if ratio >= threshold), default=0)


# ----------------------------------------------------------------------------- diagnosis

_HOST_READS = frozenset(
    {"item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__", "__complex__",
     "__repr__", "__format__"}
)  # fmt: skip
"""Tensor methods that bring a value to Python; on a GPU each one waits for the device."""
_UNFUSED_GELU_MARKERS = frozenset({"tanh", "tanh_"})
"""A tanh call in this model's forward means the GELU is written out by hand."""


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DISPATCH_FILES = frozenset(
    os.path.join(os.path.dirname(torch.__file__), name) for name in ("overrides.py", "_tensor.py")
)
"""Where ``Tensor.__repr__`` and friends hand a call to the mode: skipped to find who made it."""


def _called_from_torch(frame: types.FrameType | None) -> bool:
    """Whether the code that made this call lives inside the torch package (not yours)."""
    while frame is not None and frame.f_code.co_filename in _DISPATCH_FILES:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR)


class TorchCallCounter(TorchFunctionMode):
    """Counts the PyTorch functions called from Python, by name, and the values your code reads.

    A ``TorchFunctionMode``: inside ``with TorchCallCounter() as counter:`` every call of
    a PyTorch function or tensor method made from Python passes through it. A read
    (``.item()``, ``float()``, ``.tolist()``, ``print``, ...) made inside torch itself is
    not counted in ``reads``: the optimizers read their step counters, which stay on the
    CPU even when training on a GPU.

    >>> with TorchCallCounter() as counter:
    ...     total = torch.ones(3).sum().item()
    >>> counter.calls["sum"], counter.reads
    (1, 1)
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in _HOST_READS and not _called_from_torch(sys._getframe(1)):
            self.reads += 1
        return func(*args, **(kwargs or {}))


@dataclass
class Diagnosis:
    """What one training run did, counted while it ran (see ``diagnose``)."""

    device_type: str
    optimizer_steps: int = 0
    first_layer_calls: int = 0
    """Calls of the model's first ``Linear`` (64 inputs): one per step when the batch goes in at once."""
    backward_into_existing_grads: int = 0
    """Backward passes that found the first layer's ``.grad`` already allocated (zeros written)."""
    items_fetched: int = 0
    """``DigitsPixels`` items fetched (and transformed) one at a time in this process."""
    host_syncs: int = 0
    """On CUDA: synchronising calls the sync debug mode flagged. Elsewhere: tensor values read into Python."""
    torch_calls: dict[str, int] = field(default_factory=dict)
    autocast_used: bool = False
    optimizer_implementation: str = ""
    """How the last optimizer step ran: "fused", "foreach" or "for-loop" (one parameter at a time)."""
    bf16_tensor_cores: bool = False
    """Whether the device is a CUDA GPU of compute capability 8.0 or newer (native bf16 matmuls)."""

    def per_step(self, count: int) -> float:
        return count / max(self.optimizer_steps, 1)

    def mistakes(self) -> list[str]:
        """The mistakes this run still makes, each with the notebook that shows the fix."""
        found = []
        if self.optimizer_steps == 0:
            return ["no torch.optim optimizer step was seen: train with torch.optim.Adam as the baseline does"]
        if self.per_step(self.first_layer_calls) > 1:
            found.append(
                f"per-sample loop: the model ran {self.per_step(self.first_layer_calls):.0f} times per step; "
                "give it the whole batch at once (notebook 03)"
            )
        if self.per_step(self.items_fetched) >= 1:
            found.append(
                f"data prepared one image at a time on the main thread ({self.per_step(self.items_fetched):.0f} "
                "DigitsPixels items per step, a DataLoader fetching single items): transform the whole set once, "
                "or batch it and move it off the main thread (notebooks 03 and 10)"
            )
        if self.per_step(self.host_syncs) >= 1:
            what = (
                "calls the sync debug mode flagged" if self.device_type == "cuda" else "tensor values read into Python"
            )
            found.append(
                f"host syncs: {self.per_step(self.host_syncs):.0f} per step ({what}: .item(), float(), .tolist(), "
                "print, blocking copies); keep the losses on the device and read them once (notebooks 01 and 10)"
            )
        if self.backward_into_existing_grads >= self.optimizer_steps / 2:
            found.append(
                "gradients zeroed by writing zeros (backward found .grad already allocated); "
                "optimizer.zero_grad() sets them to None (notebook 02)"
            )
        tanh_calls = sum(self.torch_calls.get(name, 0) for name in _UNFUSED_GELU_MARKERS)
        if self.per_step(tanh_calls) >= 1:
            found.append(
                "GELU written out as a chain of elementwise operators (tanh, pow, mul, add); "
                "use the fused F.gelu(x, approximate='tanh'): CapstoneNet(fused_gelu=True) (notebooks 10 and 11)"
            )
        if self.optimizer_implementation == "for-loop":
            found.append(
                "the optimizer updates one parameter at a time (the for-loop implementation, the default on the "
                "CPU); ask for fused=True (notebook 11)"
            )
        return found

    def notes(self) -> list[str]:
        """Choices worth measuring that are not mistakes in themselves."""
        if self.bf16_tensor_cores and not self.autocast_used:
            return [
                "autocast is off and this GPU has bf16 Tensor Cores: it pays once the matrix products dominate "
                "the step; measure it for your model (notebook 07)"
            ]
        return []

    def summary(self) -> str:
        calls = sum(self.torch_calls.values())
        return (
            f"{self.optimizer_steps} optimizer steps; per step: {self.per_step(calls):.0f} PyTorch calls from "
            f"Python, {self.per_step(self.first_layer_calls):.0f} model calls, "
            f"{self.per_step(self.items_fetched):.0f} items fetched one at a time, "
            f"{self.per_step(self.host_syncs):.1f} host syncs; autocast {'on' if self.autocast_used else 'off'}; "
            f"{self.optimizer_implementation or 'no'} optimizer"
        )


_FOREACH_DEVICES = frozenset({"cuda", "xpu", "mtia"})
"""Device types on which ``foreach=None`` means foreach (``torch.utils._foreach_utils``)."""


def _implementation(optimizer: torch.optim.Optimizer) -> str:
    """Which implementation ``optimizer.step()`` runs, by the rule of ``torch.optim``'s defaults.

    ``fused=True`` runs one fused kernel; ``foreach=True`` (or ``foreach=None``, the default,
    with every parameter on a CUDA device) runs a few multi-tensor operators; otherwise
    the step loops over the parameters in Python.
    """
    options = optimizer.defaults
    if options.get("fused"):
        return "fused"
    foreach = options.get("foreach")
    if foreach is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        foreach = bool(params) and all(p.device.type in _FOREACH_DEVICES for p in params)
    return "foreach" if foreach else "for-loop"


@contextmanager
def _counting(diagnosis: Diagnosis, device: torch.device) -> Iterator[None]:
    """Install every counter of ``diagnose`` for the duration of the block, then remove them all."""
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    watched: set[int] = set()

    def on_forward(module: nn.Module, args: tuple) -> None:
        if not (isinstance(module, nn.Linear) and module.in_features == NUM_PIXELS):
            return
        diagnosis.first_layer_calls += 1
        if args and isinstance(args[0], torch.Tensor) and torch.is_autocast_enabled(args[0].device.type):
            diagnosis.autocast_used = True
        weight = module.weight
        if id(weight) not in watched and weight.requires_grad:
            watched.add(id(weight))
            stack.callback(weight.register_hook(lambda grad: on_gradient(weight)).remove)

    def on_gradient(weight: torch.Tensor) -> None:
        if weight.grad is not None:
            diagnosis.backward_into_existing_grads += 1

    def on_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        diagnosis.optimizer_steps += 1
        diagnosis.optimizer_implementation = _implementation(optimizer)

    original_getitem = DigitsPixels.__getitem__

    def counting_getitem(self: DigitsPixels, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        diagnosis.items_fetched += 1
        return original_getitem(self, index)

    counter = TorchCallCounter()
    with ExitStack() as stack:
        stack.callback(register_module_forward_pre_hook(on_forward).remove)
        stack.callback(register_optimizer_step_post_hook(on_step).remove)
        DigitsPixels.__getitem__ = counting_getitem  # type: ignore[method-assign]
        stack.callback(setattr, DigitsPixels, "__getitem__", original_getitem)
        if device.type == "cuda":
            recorded = stack.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")
            stack.callback(torch.cuda.set_sync_debug_mode, torch.cuda.get_sync_debug_mode())  # the learner's
            torch.cuda.set_sync_debug_mode("warn")
        stack.enter_context(counter)
        try:
            yield
        finally:
            diagnosis.torch_calls = dict(counter.calls)
            if device.type == "cuda":
                diagnosis.host_syncs = sum("synchronizing CUDA operation" in str(w.message) for w in recorded)
            else:
                diagnosis.host_syncs = counter.reads


def diagnose(train: TrainFn, task: CapstoneTask = GRADED_TASK, device: torch.device | str = "cpu") -> Diagnosis:
    """Run ``train(task, device)`` once under counters and return what they saw.

    The counters: optimizer steps (a global ``torch.optim`` step hook); calls of the
    model's first ``Linear`` (a global forward pre-hook); backward passes that found
    that layer's ``.grad`` already allocated (a tensor hook, which runs before the new
    gradient is accumulated); ``DigitsPixels`` items fetched in this process; every
    PyTorch function called from Python (a ``TorchFunctionMode``); and host syncs: on
    CUDA the calls ``torch.cuda.set_sync_debug_mode("warn")`` flags (blocking copies
    between host and device, ``.item()``, stream synchronisation), elsewhere the tensor
    values read into Python (``.item()``, ``float()``, ``.tolist()``, ``print``, ...),
    each of which would wait for a GPU. The run is slower than usual; do not time it.
    """
    device = torch.device(device)
    tensor_cores = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)
    diagnosis = Diagnosis(device_type=device.type, bf16_tensor_cores=tensor_cores)
    with _counting(diagnosis, device):
        train(task, device)
    synchronize(device)
    return diagnosis


# ----------------------------------------------------------------------------- watching autocast (exercise 2)


@dataclass
class AutocastUse:
    """What a block did with autocast (see ``watch_autocast``)."""

    regions: list[tuple[str, torch.dtype | None, bool]] = field(default_factory=list)
    """``(device type, dtype, enabled)`` of each ``torch.autocast`` region entered."""
    backward_under_autocast: list[bool] = field(default_factory=list)
    """For each backward call, whether an autocast region was active on the CPU then."""
    step_under_autocast: list[bool] = field(default_factory=list)
    """For each optimizer step, whether an autocast region was active on the CPU then."""


@contextmanager
def watch_autocast() -> Iterator[AutocastUse]:
    """Record, while the block runs, the autocast regions it enters and whether backward and steps ran inside one.

    Entering ``torch.autocast`` (by any name: the class's ``__enter__`` is watched),
    ``torch.autograd.backward`` (which ``Tensor.backward`` calls) and every optimizer step
    (a global step pre-hook) are recorded; everything is put back when the block ends.

    >>> with watch_autocast() as use, torch.autocast("cpu", dtype=torch.bfloat16):
    ...     pass
    >>> use.regions
    [('cpu', torch.bfloat16, True)]
    """
    from torch.amp.autocast_mode import autocast
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    use = AutocastUse()
    enter, backward = autocast.__enter__, torch.autograd.backward

    def recording_enter(self: autocast) -> autocast:
        use.regions.append((self.device, self.fast_dtype, bool(self._enabled)))
        return enter(self)

    def recording_backward(*args, **kwargs) -> None:
        use.backward_under_autocast.append(torch.is_autocast_enabled("cpu"))
        return backward(*args, **kwargs)

    def on_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        use.step_under_autocast.append(torch.is_autocast_enabled("cpu"))

    handle = register_optimizer_step_pre_hook(on_step)
    autocast.__enter__ = recording_enter  # type: ignore[method-assign]
    torch.autograd.backward = recording_backward
    try:
        yield use
    finally:
        autocast.__enter__ = enter  # type: ignore[method-assign]
        torch.autograd.backward = backward
        handle.remove()


class _ReportsCuda(torch.Tensor):
    """A CPU tensor whose ``device`` says ``cuda``: what an answer reads from it shows which device it asks for."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda")


def as_if_on_cuda(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (on the CPU) reporting ``device.type == "cuda"``, for tests that need a second device type.

    Computation still happens on the CPU; ``torch.autocast("cuda")`` on a machine without
    CUDA warns and does nothing, which is all a test of the device type needs.
    """
    return tensor.as_subclass(_ReportsCuda)


# ----------------------------------------------------------------------------- the grade


@dataclass(frozen=True)
class CapstoneGrade:
    """Correctness, speed, remaining mistakes and points of one graded ``fast_train``."""

    agreement: Agreement
    speedup: Speedup
    diagnosis: Diagnosis
    device_type: str

    @property
    def points(self) -> int:
        return CORRECTNESS_POINTS + speed_points(self.speedup.ratio)

    def __str__(self) -> str:
        tiers = ", ".join(f"{threshold:g}x: {points}" for threshold, points in SPEED_TIERS)
        lines = [
            f"correct: {self.agreement} -> {CORRECTNESS_POINTS} points",
            f"{self.speedup} on {self.device_type} -> {speed_points(self.speedup.ratio)} of "
            f"{MAX_POINTS - CORRECTNESS_POINTS} points (tiers {tiers})",
            f"your run: {self.diagnosis.summary()}",
        ]
        mistakes = self.diagnosis.mistakes()
        lines.append("mistakes left:" if mistakes else "mistakes left: none found")
        lines += [f"  - {mistake}" for mistake in mistakes]
        lines += [f"note: {note}" for note in self.diagnosis.notes()]
        lines.append(f"points: {self.points} of {MAX_POINTS}")
        return "\n".join(lines)


def grade_fast_train(
    fast_train: TrainFn,
    device: torch.device | str = "cpu",
    *,
    task: CapstoneTask = GRADED_TASK,
    rounds: int = 5,
) -> CapstoneGrade:
    """Grade ``fast_train`` against ``slow_train`` on ``task``: correctness, then speed.

    1. Both train ``task`` once (this also warms them up), and ``OTHER_TASK`` (another
       shape); ``check_same_training`` must pass, or ``AssertionError`` says what differs.
    2. ``measure_speedup`` times them in up to ``rounds`` interleaved pairs, stopping
       once the tier of the median is certain.
    3. ``diagnose`` runs ``fast_train`` once more under counters.

    This runs in the caller's interpreter: what ``course`` grades is measured outside it
    (``timed_rounds``, and the course's referee), where the learner's code cannot reach
    the baseline, the clock, the inputs or the scoring.
    """
    device = torch.device(device)
    reference = slow_train(task, device)
    agreement = check_same_training(fast_train(task, device), reference, task)
    other = OTHER_TASK
    check_same_training(fast_train(other, device), slow_train(other, device), other, who="fast_train on another task")
    thresholds = tuple(threshold for threshold, _ in SPEED_TIERS)
    speedup = measure_speedup(fast_train, task, device, rounds=rounds, thresholds=thresholds)
    return CapstoneGrade(agreement, speedup, diagnose(fast_train, task, device), device.type)


# ----------------------------------------------------------------------------- timed rounds, outside the kernel

ANSWER_IMPORTS = """\
import inspect
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import profile

from course_utils import compare, format_environment, load_digits_split, pick_device, scaled, seed_everything
from course_utils.capstone import (
    CORRECTNESS_POINTS,
    GRADED_TASK,
    CapstoneNet,
    CapstoneTask,
    TorchCallCounter,
    check_same_training,
    diagnose,
    evaluate,
    grade_fast_train,
    make_model,
    measure_speedup,
    slow_train,
    standardize_image,
)
from course_utils.profiling import label_times, plot_label_times, profiler_activities
"""
"""What a timed-round process runs before the learner's answer cells: notebook 12's setup-cell imports."""

Arrays = dict[str, tuple[str, tuple[int, ...], bytes]]
"""``name -> (dtype, shape, raw bytes)``: a training result as it crosses to the grader."""


def _expected_parameters(task: CapstoneTask) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        return {name: tuple(p.shape) for name, p in CapstoneNet(task.hidden).named_parameters()}


def _plain(value: object, what: str) -> torch.Tensor:
    """``value`` detached, float32, contiguous, on the CPU, and a plain ``torch.Tensor`` (no subclass)."""
    if not isinstance(value, torch.Tensor):
        raise AssertionError(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    plain = value.detach().to("cpu", torch.float32).contiguous()
    if type(plain) is not torch.Tensor:
        raise AssertionError(f"{what} should be a plain torch.Tensor, got a {type(plain).__name__}")
    return plain


def result_arrays(result: object, task: CapstoneTask) -> Arrays:
    """A ``(model, losses)`` result as the grader receives it: every weight and the losses, materialised.

    Runs in the timed-round process, inside the timed region: a result whose training has
    not happened yet (a lazy wrapper) is trained here, on the clock. The grader checks the
    bytes again (``result_from_arrays``); nothing of this process's objects reaches it.
    """
    if not isinstance(result, tuple) or len(result) != 2:
        raise AssertionError(f"fast_train should return a tuple (model, losses), got {type(result).__name__}")
    model, losses = result
    if not isinstance(model, nn.Module):
        raise AssertionError(f"the first element should be the trained nn.Module, got {type(model).__name__}")
    arrays: Arrays = {}
    expected = _expected_parameters(task)
    for name, parameter in _unwrap(model).named_parameters():
        if name in expected:
            tensor = _plain(parameter, f"parameter {name}")
            arrays[f"param:{name}"] = ("float32", tuple(tensor.shape), tensor.numpy().tobytes())
    tensor = _plain(losses, "losses")
    arrays["losses"] = ("float32", tuple(tensor.shape), tensor.numpy().tobytes())
    return arrays


def result_from_arrays(arrays: Arrays, task: CapstoneTask, who: str = "fast_train") -> tuple[CapstoneNet, torch.Tensor]:
    """The grader's side of ``result_arrays``: names, dtypes, shapes and sizes checked, then a model and losses."""
    expected = {f"param:{name}": shape for name, shape in _expected_parameters(task).items()}
    expected["losses"] = (task.steps,)
    if set(arrays) != set(expected):
        missing, extra = sorted(set(expected) - set(arrays)), sorted(set(arrays) - set(expected))
        raise AssertionError(
            f"{who}: the model's parameters should be make_model(task)'s (missing {missing}, extra {extra})"
        )
    tensors = {}
    for name, shape in expected.items():
        dtype, got_shape, data = arrays[name]
        if dtype != "float32" or tuple(got_shape) != shape or len(data) != 4 * math.prod(shape):
            raise AssertionError(
                f"{who}: {name.removeprefix('param:')} should have shape {shape}, got {tuple(got_shape)}"
            )
        tensors[name] = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
    model = CapstoneNet(task.hidden, fused_gelu=True)
    model.load_state_dict({name.removeprefix("param:"): t for name, t in tensors.items() if name != "losses"})
    return model, tensors["losses"]


def _load_answer(answers: list[list[str]]) -> TrainFn:
    """The learner's ``fast_train``: ``ANSWER_IMPORTS``, then their answer cells, in a fresh namespace."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(ANSWER_IMPORTS, "<notebook 12's imports>", "exec"), namespace)
    for grade_id, source in answers:
        try:
            code = compile(source, f"<your cell {grade_id}>", "exec")
        except SyntaxError as error:
            raise AssertionError(
                f"your cell {grade_id} is not plain Python ({error.msg}, line {error.lineno}): the grader runs it "
                "in a plain Python process, where IPython's % and ! lines do not work"
            ) from None
        exec(code, namespace)
    train = namespace.get("fast_train")
    if not callable(train):
        raise AssertionError("no fast_train function after running your answer cells")
    return train


def timed_rounds(channel, setup: dict) -> None:
    """Inside a fresh timed-round process (``grading.sandbox.rounds``): warm up, then train what the grader sends.

    ``setup["role"]`` is ``"baseline"`` (``slow_train``: no learner code ever runs in this
    process) or ``"answer"`` (the learner's ``fast_train``, loaded by ``_load_answer``).
    One warm-up run on ``setup["warmup"]``, untimed; then, for each round the grader
    sends, the task it names (drawn when the round starts): the result goes back through
    ``result_arrays``, or with ``"diagnose"`` the counters of ``diagnose``.
    """
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    train = slow_train if setup["role"] == "baseline" else _load_answer(setup["answers"])
    warmup = CapstoneTask(**setup["warmup"])
    result_arrays(train(warmup, cpu), warmup)
    channel.ready()
    while (spec := channel.receive()) is not None:
        task = CapstoneTask(**spec["task"])
        if spec.get("diagnose"):
            found = diagnose(train, task, cpu)
            channel.send({}, summary=found.summary(), mistakes=found.mistakes())
        else:
            channel.send(result_arrays(train(task, cpu), task))
