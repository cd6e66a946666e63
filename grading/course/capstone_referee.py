"""The referee of notebook 12's measured test: ``fast_train``'s correctness and speed, decided by the grader.

A plugin of this course (``grading.measure``): notebook 12's exercise 3 test cell says
``# course: measure capstone_referee ...``, so under ``course`` the kernel never runs it and
the grading worker calls ``referee(rounds)`` here instead, after the notebook has run.
Everything that decides the points happens in the worker, outside any learner code:

* every timed run is a fresh process started by the grader (``grading.sandbox.rounds``):
  the baseline's processes never run learner code, the answer's run only notebook 12's
  imports and the learner's answer cells; each process warms up once on a task of its own,
  then trains one timed task and is killed with everything it started;
* the tasks (initial weights, batch order, which images, the noise on their pixels) are
  drawn here, with ``secrets``, and sent to a process only when its clock starts;
* the clock is this process's; it stops when the trained weights and every step's loss
  have arrived as plain float32 bytes, which are checked against the baseline's here;
* threads (one), CPU (the same one for both sides; changing the affinity is refused),
  environment and limits are the grader's, the same for both sides;
* the ratio, the tier and the points are computed here, from ``course_utils.capstone``
  as installed (a learner who rebinds anything in their notebook changes their kernel's
  copy, never this one).

Only each side's compile cache (``TORCHINDUCTOR_CACHE_DIR``) survives from one of its
processes to the next, so that a ``torch.compile`` answer compiles once; it cannot carry
a result, since each round's task is drawn when the round starts.
"""

from __future__ import annotations

import secrets
import statistics
from dataclasses import asdict, replace
from typing import Any

from grading.measure import Rounds, Verdict
from grading.sandbox.rounds import RoundError

ENTRY = "course_utils.capstone:timed_rounds"
ROUNDS = 5  # at most; measuring stops once the tier of the median is certain
READY_SECONDS = 300.0  # loading, warming up and a cold torch.compile of the learner's answer
MIN_ROUND_SECONDS = 60.0  # the answer's timed run may take this long, or 20 times the baseline's


def _draw(task):
    """``task`` with its own weights, batch order and data, drawn now."""
    return replace(task, seed=secrets.randbelow(2**31), data_seed=secrets.randbelow(2**31))


class _Referee:
    """One measurement: the tasks drawn for it, the rounds run so far, and what they showed."""

    def __init__(self, rounds: Rounds) -> None:
        from course_utils import capstone  # the installed module, imported here, in the grader's process

        self.capstone = capstone
        self.rounds = rounds
        self.other = _draw(capstone.OTHER_TASK)
        warmup = asdict(_draw(capstone.GRADED_TASK))
        answers = [[grade_id, source] for grade_id, source in rounds.answers.items()]
        self.setups = {
            "baseline": {"entry": ENTRY, "role": "baseline", "warmup": warmup},
            "answer": {"entry": ENTRY, "role": "answer", "warmup": warmup, "answers": answers},
        }
        self.seconds: dict[str, list[float]] = {"baseline": [], "answer": []}
        self.other_results: dict[str, Any] = {}
        self.agreement: Any = None
        self.diagnosis: dict = {}

    def limit(self) -> float:
        """Seconds a timed run may take: MIN_ROUND_SECONDS, or 20 times the baseline's."""
        times = self.seconds["baseline"]
        return max(MIN_ROUND_SECONDS, 20 * statistics.median(times)) if times else MIN_ROUND_SECONDS

    def side(self, side: str, task: Any, index: int, first: bool, baseline: Any) -> tuple[float, Any]:
        """One fresh process of ``side``: warm up, the timed run of ``task``, then (first round) the checks."""
        capstone = self.capstone
        who = f"fast_train (round {index + 1})" if side == "answer" else "the baseline"
        try:
            with self.rounds.start(self.setups[side], side) as process:
                process.wait_ready(min(READY_SECONDS, max(self.rounds.remaining(), 1.0)))
                seconds, message = process.round({"task": asdict(task)}, self.limit())
                result = capstone.result_from_arrays(message.arrays, task, who=who)
                if baseline is not None:  # the answer's run, checked before anything else is asked of it
                    agreement = capstone.check_same_training(result, baseline, task, who=who)
                    self.agreement = self.agreement or agreement
                if first:
                    _, other = process.round({"task": asdict(self.other)}, max(self.limit(), MIN_ROUND_SECONDS))
                    self.other_results[side] = capstone.result_from_arrays(other.arrays, self.other, who=who)
                    if side == "answer":
                        _, counted = process.round({"task": asdict(task), "diagnose": True}, MIN_ROUND_SECONDS)
                        self.diagnosis = counted.header
        except TimeoutError as error:
            raise AssertionError(f"the measurement used up its time budget in round {index + 1}: {error}") from None
        except RoundError as error:
            if side == "baseline":
                raise RuntimeError(f"the baseline's process failed: {error} {error.details[-800:]}") from error
            raise _answer_failed(error, f"in round {index + 1}") from None
        return seconds, result

    def run(self) -> None:
        """Interleaved rounds, stopping once the tier of the median is certain."""
        capstone = self.capstone
        thresholds = sorted(threshold for threshold, _ in capstone.SPEED_TIERS)
        for index in range(ROUNDS):
            task = _draw(capstone.GRADED_TASK)
            first = index == 0
            results: dict[str, tuple[float, Any]] = {}
            for side in ("baseline", "answer") if index % 2 == 0 else ("answer", "baseline"):
                baseline = results["baseline"][1] if side == "answer" and "baseline" in results else None
                results[side] = self.side(side, task, index, first, baseline)
            if "baseline" in results and index % 2 == 1:  # the answer went first: check it now
                self.agreement = self.agreement or capstone.check_same_training(
                    results["answer"][1], results["baseline"][1], task, who=f"fast_train (round {index + 1})"
                )
            if first:
                capstone.check_same_training(
                    self.other_results["answer"],
                    self.other_results["baseline"],
                    self.other,
                    who="fast_train on another task",
                )
            for side in ("baseline", "answer"):
                self.seconds[side].append(results[side][0])
            ratios = [b / a for b, a in zip(self.seconds["baseline"], self.seconds["answer"], strict=True)]
            if capstone._decided(ratios, ROUNDS, thresholds):
                return

    def verdict(self) -> Verdict:
        capstone = self.capstone
        speedup = capstone.Speedup(tuple(self.seconds["baseline"]), tuple(self.seconds["answer"]))
        speed = capstone.speed_points(speedup.ratio)
        points = capstone.CORRECTNESS_POINTS + speed
        tiers = ", ".join(f"{threshold:g}x: {p}" for threshold, p in capstone.SPEED_TIERS)
        lines = [
            "measured by the grader, outside your notebook: each timed run in a fresh process on one CPU thread, "
            "on weights, batches and images drawn when the run started",
            f"correct: {self.agreement} -> {capstone.CORRECTNESS_POINTS} points",
            f"{speedup} -> {speed} of {capstone.MAX_POINTS - capstone.CORRECTNESS_POINTS} points (tiers {tiers})",
        ]
        if self.diagnosis:
            mistakes = [str(m) for m in self.diagnosis.get("mistakes", [])]
            lines.append(f"your run, as counted in its own process: {self.diagnosis.get('summary', '')}")
            lines.append("mistakes left:" if mistakes else "mistakes left: none found")
            lines += [f"  - {mistake}" for mistake in mistakes]
        lines.append(f"points: {points} of {capstone.MAX_POINTS}")
        return Verdict(points, "\n".join(lines))


def _answer_failed(error: RoundError, when: str) -> AssertionError:
    details = "\n".join(error.details.strip().splitlines()[-6:])
    message = f"fast_train failed {when} in the grader's process: {error}"
    return AssertionError(f"{message}\n{details}" if details else message)


def referee(rounds: Rounds) -> Verdict:
    """Correctness first (2 points), then the speedup over ``slow_train`` in tiers (up to 8)."""
    measurement = _Referee(rounds)
    measurement.run()
    return measurement.verdict()
