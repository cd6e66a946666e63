"""Notebook 12's test as it runs in the learner's own kernel: ``measure_speedup`` and ``grade_fast_train``.

These time and grade inside the interpreter that runs the learner's code, so they are a
learner's tool, not a referee: what ``course`` grades is measured outside the kernel
(``course_utils.capstone.round_process`` and the course's referee), from the same task,
check and scoring.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import torch

from course_utils.capstone.baseline import slow_train
from course_utils.capstone.correctness import Agreement, check_same_training
from course_utils.capstone.diagnosis import Diagnosis, diagnose
from course_utils.capstone.scoring import (
    CORRECTNESS_POINTS,
    MAX_POINTS,
    SPEED_TIERS,
    Speedup,
    speed_points,
    tier_is_certain,
)
from course_utils.capstone.task import GRADED_TASK, OTHER_TASK, CapstoneTask, TrainFn
from course_utils.device import synchronize
from course_utils.timing import synced_timer

__all__ = ["CapstoneGrade", "grade_fast_train", "measure_speedup"]


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


def measure_speedup(
    fast_train: TrainFn,
    task: CapstoneTask = GRADED_TASK,
    device: torch.device | str = "cpu",
    *,
    rounds: int = 5,
    thresholds: tuple[float, ...] = (),
    baseline: TrainFn = slow_train,
) -> Speedup:
    """Time ``baseline`` against ``fast_train`` in up to ``rounds`` rounds of four runs; check that every result agrees.

    First both functions train one drawn task, untimed (the warm-up: lazy initialisation,
    caches, the allocator's pools, a GPU's clocks), and the two results must agree. Then
    each round draws two tasks (``seed`` and ``data_seed``: no run can reuse an earlier
    one, or anything computed for it) and times, back to back, the baseline and then
    ``fast_train`` on the first, ``fast_train`` and then the baseline on the second. Each
    function so runs once right after the other and once right after itself, as early in
    the round on average as the other: what a run gains from its place (a cache the run
    before warmed, a drift in the machine's load, a clock ramping up) it gains for both,
    and the round's ratio (mean baseline time over mean ``fast_train`` time) cancels it.
    Nothing of the measurement runs between timed runs: the rounds' results are
    checked with ``check_same_training`` after the last round. With ``thresholds``,
    measuring stops as soon as the median of all ``rounds`` ratios is certain to lie
    between the same two thresholds, whatever the remaining rounds would measure.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    device = torch.device(device)
    warmup = task.drawn()
    fast_result = fast_train(warmup, device)
    who = "fast_train (warm-up, on weights and images drawn for it)"
    check_same_training(fast_result, baseline(warmup, device), warmup, who=who)
    sorted_thresholds = sorted(thresholds)
    base_times: list[float] = []
    fast_times: list[float] = []
    to_check: list[tuple[int, CapstoneTask, object, object]] = []
    for index in range(1, rounds + 1):
        first, second = task.drawn(), task.drawn()
        base_first, base_result = _timed(baseline, first, device)
        fast_first, fast_result = _timed(fast_train, first, device)
        to_check.append((index, first, fast_result, base_result))
        fast_second, fast_result = _timed(fast_train, second, device)
        base_second, base_result = _timed(baseline, second, device)
        to_check.append((index, second, fast_result, base_result))
        base_times.append((base_first + base_second) / 2)
        fast_times.append((fast_first + fast_second) / 2)
        ratios = [b / f for b, f in zip(base_times, fast_times, strict=True)]
        if sorted_thresholds and tier_is_certain(ratios, rounds, sorted_thresholds):
            break
    for index, round_task, fast_result, base_result in to_check:
        check_same_training(fast_result, base_result, round_task, who=f"fast_train (round {index})")  # type: ignore[arg-type]
    return Speedup(tuple(base_times), tuple(fast_times))


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
        speed = speed_points(self.speedup.ratio)
        lines = [
            f"correct: {self.agreement} -> {CORRECTNESS_POINTS} points",
            f"{self.speedup} on {self.device_type} -> {speed} of {MAX_POINTS - CORRECTNESS_POINTS} points "
            f"(tiers {tiers})",
            f"your run: {self.diagnosis.summary()}",
        ]
        mistakes = self.diagnosis.mistakes()
        if mistakes:
            lines += ["mistakes left:", *(f"  - {mistake}" for mistake in mistakes)]
        elif speed < MAX_POINTS - CORRECTNESS_POINTS:
            lines.append(
                "mistakes left: none that the counters recognise, yet the speedup earns "
                f"{speed} of {MAX_POINTS - CORRECTNESS_POINTS}: profile fast_train as section 3 profiles slow_train"
            )
        else:
            lines.append("mistakes left: none found")
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
       must pass, or ``AssertionError`` says what differs.
    2. ``measure_speedup`` warms both up and times them in up to ``rounds`` rounds,
       stopping once the tier of the median is certain.
    3. ``diagnose`` runs ``fast_train`` once more under counters.

    This runs in the caller's interpreter: what ``course`` grades is measured outside it
    (``course_utils.capstone.round_process``, and the course's referee), where the
    learner's code cannot reach the baseline, the clock, the inputs or the scoring.
    """
    device = torch.device(device)
    reference = slow_train(task, device)
    agreement = check_same_training(fast_train(task, device), reference, task)
    other, who = OTHER_TASK, f"fast_train on another task, {OTHER_TASK}"
    check_same_training(fast_train(other, device), slow_train(other, device), other, who=who)
    thresholds = tuple(threshold for threshold, _ in SPEED_TIERS)
    speedup = measure_speedup(fast_train, task, device, rounds=rounds, thresholds=thresholds)
    return CapstoneGrade(agreement, speedup, diagnose(fast_train, task, device), device.type)
