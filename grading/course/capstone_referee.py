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
* threads (one), CPU (the same one for both sides, held by this measurement: no other job
  may run there meanwhile; changing the affinity is refused), priority, environment and
  limits are the grader's, the same for both sides;
* the time other work had that CPU anyway during a timed run (the machine's other users,
  where the grader cannot keep them off) is not counted when the kernel accounted it
  exactly, and a run it disturbed too much (``grading.sandbox.cpus``) is measured again with
  new inputs, up to ``DISTURBED_RUNS`` times; then the test keeps its correctness points and
  its speed points are left to the instructor (``Verdict.needs_manual_grade``), never
  charged to the learner. Its result is still checked: correctness does not depend on time;
* the ratio, the tier and the points are computed here, from ``course_utils.capstone``
  as installed (a learner who rebinds anything in their notebook changes their kernel's
  copy, never this one).

Only each side's compile cache (``TORCHINDUCTOR_CACHE_DIR``) survives from one of its
processes to the next, so that a ``torch.compile`` answer compiles once; it cannot carry
a result, since each round's task is drawn when the round starts.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from course_utils.capstone import correctness, scoring, transfer
from course_utils.capstone.task import GRADED_TASK, OTHER_TASK
from grading.measure import Rounds, Verdict
from grading.sandbox.rounds import Disturbed, RoundError

ENTRY = "course_utils.capstone.round_process:timed_rounds"
ROUNDS = 5  # at most; measuring stops once the tier of the median is certain
READY_SECONDS = 300.0  # loading, warming up and a cold torch.compile of the learner's answer
MIN_ROUND_SECONDS = 60.0  # the answer's timed run may take this long, or 20 times the baseline's
DISTURBED_RUNS = 5  # timed runs measured again because other work took their CPU, at most


class _Unmeasurable(Exception):
    """Other work kept taking the measured CPU: the speed cannot be measured now."""


class _OutOfTime(Exception):
    """The measurement's time budget is used up."""


class _Referee:
    """One measurement: the tasks drawn for it, the rounds run so far, and what they showed."""

    def __init__(self, rounds: Rounds) -> None:
        self.rounds = rounds
        self.other = OTHER_TASK.drawn()
        warmup = asdict(GRADED_TASK.drawn())
        answers = [[grade_id, source] for grade_id, source in rounds.answers.items()]
        self.setups = {
            "baseline": {"entry": ENTRY, "role": "baseline", "warmup": warmup},
            "answer": {"entry": ENTRY, "role": "answer", "warmup": warmup, "answers": answers},
        }
        self.seconds: dict[str, list[float]] = {"baseline": [], "answer": []}
        self.other_results: dict[str, Any] = {}
        self.other_checked = False
        self.agreement: Any = None
        self.diagnosis: dict = {}
        self.disturbed: list[str] = []  # the timed runs measured again, and why
        self.corrections: list[float] = []  # seconds taken off timed runs: other work had their CPU (exact)

    def limit(self) -> float:
        """Seconds a timed run may take: MIN_ROUND_SECONDS, or 20 times the baseline's."""
        times = self.seconds["baseline"]
        return max(MIN_ROUND_SECONDS, 20 * statistics.median(times)) if times else MIN_ROUND_SECONDS

    def note_disturbed(self, who: str, attempt: int, error: Disturbed) -> None:
        """A run to do again; past ``DISTURBED_RUNS`` of them, the speed cannot be measured."""
        self.disturbed.append(f"{who} in round {attempt}: {error}")
        if len(self.disturbed) > DISTURBED_RUNS:
            raise _Unmeasurable

    def side(self, side: str, task: Any, attempt: int, baseline: Any) -> tuple[float | None, Any]:
        """One fresh process of ``side``: warm up, the timed run of ``task``, then (once per side) the checks.

        The seconds are None when other work disturbed the timed run (its result is checked all
        the same); ``Disturbed`` leaves here when the process could not even finish meanwhile.
        """
        who = f"fast_train (round {attempt})" if side == "answer" else "the baseline"
        try:
            with self.rounds.start(self.setups[side], side) as process:
                budget = self.rounds.remaining()
                try:
                    process.wait_ready(min(READY_SECONDS, max(budget, 1.0)))
                except RoundError as error:
                    if error.timeout and budget < READY_SECONDS:  # the budget ran out, not the answer's time
                        raise _OutOfTime from None
                    raise
                try:
                    seconds, message = process.round({"task": asdict(task)}, self.limit())
                    if process.disturbance is not None and process.disturbance.correction:
                        self.corrections.append(process.disturbance.correction)
                except Disturbed as disturbed:
                    if disturbed.result is None:
                        raise
                    self.note_disturbed(who, attempt, disturbed)
                    seconds, message = None, disturbed.result
                result = transfer.result_from_arrays(message.arrays, task, who=who)
                if baseline is not None:  # the answer's run, checked before anything else is asked of it
                    agreement = correctness.check_same_training(result, baseline, task, who=who)
                    self.agreement = self.agreement or agreement
                if side not in self.other_results:  # untimed: correctness on another task, then the diagnosis
                    limit = max(self.limit(), MIN_ROUND_SECONDS)
                    _, other = process.round({"task": asdict(self.other)}, limit, timed=False)
                    self.other_results[side] = transfer.result_from_arrays(other.arrays, self.other, who=who)
                    if side == "answer":
                        spec = {"task": asdict(task), "diagnose": True}
                        _, counted = process.round(spec, MIN_ROUND_SECONDS, timed=False)
                        self.diagnosis = counted.header
        except TimeoutError:  # the budget, at the start of a process
            raise _OutOfTime from None
        except RoundError as error:
            if side == "baseline":
                raise RuntimeError(f"the baseline's process failed: {error} {error.details[-800:]}") from error
            raise _answer_failed(error, f"in round {attempt}") from None
        return seconds, result

    def run(self) -> None:
        """Interleaved rounds, stopping once the tier of the median is certain; disturbed rounds again."""
        thresholds = sorted(threshold for threshold, _ in scoring.SPEED_TIERS)
        attempt = 0
        while len(self.seconds["answer"]) < ROUNDS:
            attempt += 1
            task = GRADED_TASK.drawn()
            order = ("baseline", "answer") if attempt % 2 == 1 else ("answer", "baseline")
            results: dict[str, tuple[float | None, Any]] = {}
            try:
                for side in order:
                    baseline = results["baseline"][1] if side == "answer" and "baseline" in results else None
                    results[side] = self.side(side, task, attempt, baseline)
            except Disturbed as disturbed:  # a process could not finish while other work had its CPU
                self.note_disturbed("fast_train" if side == "answer" else "the baseline", attempt, disturbed)
                continue
            if order[0] == "answer":  # the answer went first: check it now
                self.agreement = self.agreement or correctness.check_same_training(
                    results["answer"][1], results["baseline"][1], task, who=f"fast_train (round {attempt})"
                )
            if not self.other_checked and len(self.other_results) == 2:
                correctness.check_same_training(
                    self.other_results["answer"],
                    self.other_results["baseline"],
                    self.other,
                    who="fast_train on another task",
                )
                self.other_checked = True
            if any(seconds is None for seconds, _ in results.values()):
                continue  # its timing is void; the round is done again with new inputs
            for side in ("baseline", "answer"):
                self.seconds[side].append(results[side][0])
            ratios = [b / a for b, a in zip(self.seconds["baseline"], self.seconds["answer"], strict=True)]
            if scoring.tier_is_certain(ratios, ROUNDS, thresholds):
                return

    @property
    def correct(self) -> bool:
        return self.agreement is not None and self.other_checked

    def _header(self) -> list[str]:
        lines = [
            "measured by the grader, outside your notebook: each timed run in a fresh process on one CPU thread, "
            "on weights, batches and images drawn when the run started"
            + (f"; on {self.rounds.cpu}" if self.rounds.cpu else "")
        ]
        if self.correct:
            lines.append(f"correct: {self.agreement} -> {scoring.CORRECTNESS_POINTS} points")
        return lines

    def _disturbances(self) -> list[str]:
        lines = []
        if self.corrections:
            lines.append(
                f"other work had the measured CPU for {sum(self.corrections) * 1e3:.0f} ms during "
                f"{len(self.corrections)} timed runs (by the kernel's account); that time is not counted"
            )
        if not self.disturbed:
            return lines
        more = len(self.disturbed) - 3
        shown = "; ".join(self.disturbed[:3]) + (f"; and {more} more" if more > 0 else "")
        return [*lines, f"measured again ({len(self.disturbed)} timed runs): {shown}"]

    def verdict(self, note: str = "") -> Verdict:
        speedup = scoring.Speedup(tuple(self.seconds["baseline"]), tuple(self.seconds["answer"]))
        speed = scoring.speed_points(speedup.ratio)
        points = scoring.CORRECTNESS_POINTS + speed
        tiers = ", ".join(f"{threshold:g}x: {p}" for threshold, p in scoring.SPEED_TIERS)
        lines = [
            *self._header(),
            f"{speedup} -> {speed} of {scoring.MAX_POINTS - scoring.CORRECTNESS_POINTS} points (tiers {tiers})",
            *([note] if note else []),
            *self._disturbances(),
        ]
        if self.diagnosis:
            mistakes = [str(m) for m in self.diagnosis.get("mistakes", [])]
            lines.append(f"your run, as counted in its own process: {self.diagnosis.get('summary', '')}")
            if mistakes:
                lines += ["mistakes left:", *(f"  - {mistake}" for mistake in mistakes)]
            elif speed < scoring.MAX_POINTS - scoring.CORRECTNESS_POINTS:
                lines.append(
                    "mistakes left: none that the counters recognise, yet the speedup earns "
                    f"{speed} of {scoring.MAX_POINTS - scoring.CORRECTNESS_POINTS}: profile fast_train as "
                    "section 3 profiles slow_train"
                )
            else:
                lines.append("mistakes left: none found")
        lines.append(f"points: {points} of {scoring.MAX_POINTS}")
        return Verdict(points, "\n".join(lines))

    def unmeasured(self) -> Verdict:
        """Could not measure: the points decided without timing, the speed points left to the instructor."""
        points = scoring.CORRECTNESS_POINTS if self.correct else 0
        speed_max = scoring.MAX_POINTS - scoring.CORRECTNESS_POINTS
        ratios = ", ".join(
            f"{b / a:.1f}" for b, a in zip(self.seconds["baseline"], self.seconds["answer"], strict=True)
        )
        lines = [
            *self._header(),
            *([] if self.correct else ["correctness: not checked yet (no run could finish undisturbed)"]),
            "speed: NOT MEASURED: other work on this machine kept taking the CPU of the timed runs, so the grader "
            f"could not measure your speed; your instructor decides these {speed_max} points",
            *self._disturbances(),
            f"undisturbed rounds so far: {len(self.seconds['answer'])}" + (f" (speedups {ratios})" if ratios else ""),
            f"points so far: {points} of {scoring.MAX_POINTS}; the other {scoring.MAX_POINTS - points} are left "
            "to your instructor",
        ]
        return Verdict(points, "\n".join(lines), needs_manual_grade=True)


def _answer_failed(error: RoundError, when: str) -> AssertionError:
    details = "\n".join(error.details.strip().splitlines()[-6:])
    message = f"fast_train failed {when} in the grader's process: {error}"
    return AssertionError(f"{message}\n{details}" if details else message)


def referee(rounds: Rounds) -> Verdict:
    """Correctness first (2 points), then the speedup over ``slow_train`` in tiers (up to 8)."""
    measurement = _Referee(rounds)
    try:
        measurement.run()
    except _Unmeasurable:
        return measurement.unmeasured()
    except _OutOfTime:
        rounds_done = len(measurement.seconds["answer"])
        if rounds_done:
            return measurement.verdict(f"(the measurement's time budget ran out after {rounds_done} rounds)")
        if measurement.disturbed:
            return measurement.unmeasured()
        raise AssertionError("the measurement used up its time budget before a round was done") from None
    return measurement.verdict()
