"""Notebook 12's test as it runs in the learner's own kernel: ``measure_speedup`` and ``grade_fast_train``.

These time and grade inside the interpreter that runs the learner's code, so they are a
learner's tool, not a referee: what ``course`` grades is measured outside the kernel
(``course_utils.capstone.referee``, in processes running ``round_process``), from the same
task, check, reference solution and scoring: the points go by the share of the reference
solution's gain (``reference_train``) that ``fast_train`` reaches, both timed in the same
rounds on the device at hand (``course_utils.capstone.scoring``).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import torch

from course_utils.capstone.baseline import slow_train
from course_utils.capstone.correctness import Agreement, check_same_training
from course_utils.capstone.diagnosis import Diagnosis, diagnose
from course_utils.capstone.reference import own_work, reference_train
from course_utils.capstone.scoring import (
    CORRECTNESS_POINTS,
    MAX_POINTS,
    MIN_REFERENCE_SPEEDUP,
    SHARE_TIERS,
    Speedup,
    mistake_lines,
    speed_points,
    tier_is_certain,
    tiers_text,
)
from course_utils.capstone.task import GRADED_TASK, OTHER_TASK, CapstoneTask, TrainFn
from course_utils.device import synchronize
from course_utils.timing import synced_timer

__all__ = ["CapstoneGrade", "grade_fast_train", "measure_speedup"]


def _timed(
    train: TrainFn, task: CapstoneTask, device: torch.device
) -> tuple[float, tuple[torch.nn.Module, torch.Tensor]]:
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


def measure_speedup(
    fast_train: TrainFn,
    task: CapstoneTask = GRADED_TASK,
    device: torch.device | str = "cpu",
    *,
    rounds: int = 5,
    thresholds: tuple[float, ...] = (),
    baseline: TrainFn = slow_train,
    reference: TrainFn | None = None,
) -> Speedup:
    """Time ``baseline`` against ``fast_train`` (and ``reference``) in up to ``rounds`` rounds; check every result.

    First each function trains one drawn task, untimed (the warm-up: lazy initialisation,
    caches, the allocator's pools, a GPU's clocks), and ``fast_train``'s result must agree
    with the baseline's. Then each round draws two tasks (``seed`` and ``data_seed``: no
    run can reuse an earlier one, or anything computed for it) and times, back to back,
    the baseline, the reference (if any) and ``fast_train`` on the first, then the same in
    reverse order on the second. Each function so runs as early in the round on average
    as the others: what a run gains from its place (a cache the run before warmed, a drift
    in the machine's load, a clock ramping up) it gains for all, and the round's ratios of
    mean times cancel it. Nothing of the measurement runs between timed runs:
    ``fast_train``'s results are checked with ``check_same_training`` after the last
    round. With ``thresholds``, measuring stops as soon as the median of all ``rounds``
    values (shares of the reference's gain with a ``reference``, else speedups) is certain
    to lie between the same two thresholds, whatever the remaining rounds would measure.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    device = torch.device(device)
    sides = {"baseline": baseline, **({"reference": reference} if reference is not None else {}), "fast": fast_train}
    warmup = task.drawn()
    results = {name: train(warmup, device) for name, train in sides.items()}
    who = "fast_train (warm-up, on weights and images drawn for it)"
    check_same_training(results["fast"], results["baseline"], warmup, who=who)
    sorted_thresholds = sorted(thresholds)
    times: dict[str, list[float]] = {name: [] for name in sides}
    Trained = tuple[torch.nn.Module, torch.Tensor]
    to_check: list[tuple[int, CapstoneTask, Trained, Trained]] = []
    for index in range(1, rounds + 1):
        first, second = task.drawn(), task.drawn()
        seconds: dict[str, float] = dict.fromkeys(sides, 0.0)
        for round_task, order in ((first, list(sides)), (second, list(sides)[::-1])):
            for name in order:
                elapsed, results[name] = _timed(sides[name], round_task, device)
                seconds[name] += elapsed / 2
            to_check.append((index, round_task, results["fast"], results["baseline"]))
        for name in sides:
            times[name].append(seconds[name])
        speedup = Speedup(tuple(times["baseline"]), tuple(times["fast"]), tuple(times.get("reference", ())))
        values = speedup.shares if reference is not None else speedup.ratios
        if sorted_thresholds and tier_is_certain(values, rounds, sorted_thresholds):
            break
    for index, round_task, fast_result, base_result in to_check:
        check_same_training(fast_result, base_result, round_task, who=f"fast_train (round {index})")
    return Speedup(tuple(times["baseline"]), tuple(times["fast"]), tuple(times.get("reference", ())))


@dataclass(frozen=True)
class CapstoneGrade:
    """Correctness, speed, remaining mistakes and points of one graded ``fast_train``."""

    agreement: Agreement
    speedup: Speedup
    diagnosis: Diagnosis
    device_type: str

    @property
    def points(self) -> int:
        return CORRECTNESS_POINTS + speed_points(self.speedup.share)

    def __str__(self) -> str:
        speed = speed_points(self.speedup.share)
        speed_max = MAX_POINTS - CORRECTNESS_POINTS
        lines = [
            f"correct: {self.agreement} -> {CORRECTNESS_POINTS} points",
            f"{self.speedup} on {self.device_type} -> {speed} of {speed_max} points "
            f"({tiers_text(self.speedup.reference_ratio)})",
        ]
        if self.speedup.reference_ratio < MIN_REFERENCE_SPEEDUP:
            lines.append(
                f"note: the reference solution gained less than {MIN_REFERENCE_SPEEDUP:g}x here, too little to scale "
                "your speedup by; the grader's measurement decides"
            )
        lines.append(f"your run: {self.diagnosis.summary()}")
        lines += mistake_lines(self.diagnosis.mistakes(), speed, speed_max)
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

    1. Both train ``task`` once, and ``OTHER_TASK`` (another shape); ``check_same_training``
       must pass, or ``AssertionError`` says what differs. So must ``fast_train`` not run
       the course's ``reference_train``.
    2. ``measure_speedup`` warms up the baseline, the course's reference solution
       (``reference_train``) and ``fast_train``, and times them in up to ``rounds``
       rounds, stopping once the tier of the median share of the reference's gain is
       certain (``SHARE_TIERS``).
    3. ``diagnose`` runs ``fast_train`` once more under counters.

    This runs in the caller's interpreter: what ``course`` grades is measured outside it
    (``course_utils.capstone.referee``), where the learner's code cannot reach the
    baseline, the reference, the clock, the inputs or the scoring.
    """
    device = torch.device(device)
    fast_train = own_work(fast_train)
    reference = slow_train(task, device)
    agreement = check_same_training(fast_train(task, device), reference, task)
    other, who = OTHER_TASK, f"fast_train on another task, {OTHER_TASK}"
    check_same_training(fast_train(other, device), slow_train(other, device), other, who=who)
    thresholds = tuple(line for line, _ in SHARE_TIERS)
    speedup = measure_speedup(fast_train, task, device, rounds=rounds, thresholds=thresholds, reference=reference_train)
    return CapstoneGrade(agreement, speedup, diagnose(fast_train, task, device), device.type)
