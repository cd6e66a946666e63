"""The referee of notebook 12's measured test: ``fast_train``'s correctness and speed, decided by the grader.

A plugin of this course (``grading.measure``): notebook 12's exercise 3 test cell says
``# course: measure capstone_referee ...``, so under ``course`` the kernel never runs it and
the grading worker calls ``referee(rounds)`` here instead, after the notebook has run.
Everything that decides the points happens in the worker, outside any learner code:

* each side of a round is a fresh process started by the grader (``grading.sandbox.rounds``):
  the baseline's processes never run learner code, the answer's run only notebook 12's
  imports and the learner's answer cells; each process warms up once on a task of its own,
  then trains ``TIMED_RUNS`` timed tasks and is killed with everything it started. Both
  sides train the same tasks, and every one of the answer's results is checked against the
  baseline's. Where the grader can pause a process (root, cgroup v1's freezer), both sides'
  processes are alive during a round and their timed runs alternate (baseline, answer,
  answer, baseline, ...), the idle side paused, so that both sample the same moments of a
  machine whose speed drifts; elsewhere one side's runs follow the other's. A side's time in
  a round is the median of its runs;
* the tasks (initial weights, batch order, which images, the noise on their pixels) are
  drawn here, with ``secrets``, and sent to a process only when its clock starts;
* the clock is this process's; it stops when the trained weights and every step's loss
  have arrived as plain float32 bytes, which are checked against the baseline's here;
* threads (one), CPU (the same one for both sides, held by this measurement: no other job
  may run there meanwhile; changing the affinity is refused), priority, environment and
  limits are the grader's, the same for both sides;
* the time other work had that CPU anyway during a timed run (the machine's other users,
  where the grader cannot keep them off) is not counted when the kernel accounted it
  exactly; a run it disturbed too much (``grading.sandbox.cpus``) is left out of its side's
  median, a round that keeps no majority of either side's runs is done again with new
  inputs, and past ``DISTURBED_RUNS`` disturbed runs the test keeps its correctness points
  and its speed points are left to the instructor (``Verdict.needs_manual_grade``), never
  charged to the learner. A disturbed run's result is still checked: correctness does not
  depend on time;
* the ratio, the tier and the points are computed here, from ``course_utils.capstone``
  as installed (a learner who rebinds anything in their notebook changes their kernel's
  copy, never this one).

Only each side's compile cache (``TORCHINDUCTOR_CACHE_DIR``) survives from one of its
processes to the next, so that a ``torch.compile`` answer compiles once; it cannot carry
a result, since each round's task is drawn when the round starts.
"""

from __future__ import annotations

import contextlib
import statistics
from dataclasses import asdict
from typing import Any

from course_utils.capstone import correctness, scoring, transfer
from course_utils.capstone.task import GRADED_TASK, OTHER_TASK
from grading.measure import Rounds, Verdict
from grading.sandbox.rounds import Disturbed, RoundError

ENTRY = "course_utils.capstone.round_process:timed_rounds"
ROUNDS = 5  # at most; measuring stops once the tier of the median is certain
TIMED_RUNS = 5  # timed tasks per side and round; the side's time in the round is their median
READY_SECONDS = 300.0  # loading, warming up and a cold torch.compile of the learner's answer
MIN_ROUND_SECONDS = 60.0  # the answer's timed run may take this long, or 20 times the baseline's
DISTURBED_RUNS = 3 * TIMED_RUNS  # timed runs other work disturbed, at most, before the speed is left unmeasured


class _Unmeasurable(Exception):
    """Other work kept taking the measured CPU: the speed cannot be measured now."""


class _OutOfTime(Exception):
    """The measurement's time budget is used up."""


class _VoidRound(Exception):
    """A round process could not finish while other work had its CPU: the round is done again."""


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
        self.disturbed: list[str] = []  # the timed runs left out, and why
        self.interleaved = False  # whether the rounds' runs alternated between live processes
        self.corrections: list[float] = []  # seconds taken off timed runs: other work had their CPU (exact)

    def limit(self) -> float:
        """Seconds a timed run may take: MIN_ROUND_SECONDS, or 20 times the baseline's."""
        times = self.seconds["baseline"]
        return max(MIN_ROUND_SECONDS, 20 * statistics.median(times)) if times else MIN_ROUND_SECONDS

    def note_disturbed(self, who: str, attempt: int, error: Disturbed) -> None:
        """A run left out; past ``DISTURBED_RUNS`` of them, the speed cannot be measured."""
        self.disturbed.append(f"{who} in round {attempt}: {error}")
        if len(self.disturbed) > DISTURBED_RUNS:
            raise _Unmeasurable

    def _who(self, side: str, attempt: int) -> str:
        return f"fast_train (round {attempt})" if side == "answer" else "the baseline"

    def _open(self, stack: contextlib.ExitStack, side: str) -> Any:
        """A fresh process of ``side``, warmed up and ready (closed with ``stack``)."""
        process = stack.enter_context(self.rounds.start(self.setups[side], side))
        budget = self.rounds.remaining()
        try:
            process.wait_ready(min(READY_SECONDS, max(budget, 1.0)))
        except RoundError as error:
            if error.timeout and budget < READY_SECONDS:  # the budget ran out, not the answer's time
                raise _OutOfTime from None
            raise
        return process

    def _timed(self, process: Any, side: str, task: Any, attempt: int) -> tuple[float | None, Any]:
        """One timed run: its seconds (None when other work disturbed it) and its result, which is always read."""
        who = self._who(side, attempt)
        try:
            seconds, message = process.round({"task": asdict(task)}, self.limit())
            if process.disturbance is not None and process.disturbance.correction:
                self.corrections.append(process.disturbance.correction)
        except Disturbed as disturbed:
            if disturbed.result is None:
                raise
            self.note_disturbed(who, attempt, disturbed)
            seconds, message = None, disturbed.result
        return seconds, transfer.result_from_arrays(message.arrays, task, who=who)

    def _untimed(self, process: Any, side: str, task: Any, attempt: int) -> None:
        """Once per side: correctness on another task, then (the answer) the diagnosis."""
        if side in self.other_results:
            return
        limit = max(self.limit(), MIN_ROUND_SECONDS)
        _, other = process.round({"task": asdict(self.other)}, limit, timed=False)
        self.other_results[side] = transfer.result_from_arrays(other.arrays, self.other, who=self._who(side, attempt))
        if side == "answer":
            _, counted = process.round({"task": asdict(task), "diagnose": True}, MIN_ROUND_SECONDS, timed=False)
            self.diagnosis = counted.header

    def _check(self, runs: dict[str, list], tasks: list[Any], index: int, attempt: int) -> None:
        """The answer's result on ``tasks[index]`` against the baseline's, once both have arrived."""
        if len(runs["answer"]) > index and len(runs["baseline"]) > index:
            agreement = correctness.check_same_training(
                runs["answer"][index][1], runs["baseline"][index][1], tasks[index], who=self._who("answer", attempt)
            )
            self.agreement = self.agreement or agreement

    def round(self, tasks: list[Any], attempt: int) -> dict[str, list[tuple[float | None, Any]]]:
        """Each side's timed runs of ``tasks`` (seconds or None, result), every answer checked as it arrives.

        Interleaved where the processes can be paused; else one side after the other.
        ``_VoidRound`` when a process could not finish while other work had its CPU (noted).
        """
        order = ("baseline", "answer") if attempt % 2 == 1 else ("answer", "baseline")
        runs: dict[str, list[tuple[float | None, Any]]] = {"baseline": [], "answer": []}
        side = order[0]
        try:
            with contextlib.ExitStack() as both:
                first = self._open(both, side)
                if first.pausable:
                    self.interleaved = True
                    first.pause()
                    side = order[1]
                    processes = {order[0]: first, side: self._open(both, side)}
                    processes[side].pause()
                    for index, task in enumerate(tasks):
                        for side in order if index % 2 == 0 else order[::-1]:
                            with processes[side].resumed() as process:
                                runs[side].append(self._timed(process, side, task, attempt))
                            self._check(runs, tasks, index, attempt)
                    for side in order:
                        with processes[side].resumed() as process:
                            self._untimed(process, side, tasks[0], attempt)
                    return runs
                for position, side in enumerate(order):
                    with contextlib.ExitStack() as one:
                        process = first if position == 0 else self._open(one, side)
                        for index, task in enumerate(tasks):
                            runs[side].append(self._timed(process, side, task, attempt))
                            self._check(runs, tasks, index, attempt)
                        self._untimed(process, side, tasks[0], attempt)
                    if position == 0:
                        both.close()  # the first side's process ends before the second starts
            return runs
        except TimeoutError:  # the budget, at the start of a process
            raise _OutOfTime from None
        except Disturbed as disturbed:  # a process could not finish while other work had its CPU
            self.note_disturbed(self._who(side, attempt), attempt, disturbed)
            raise _VoidRound from None
        except RoundError as error:
            if side == "baseline":
                raise RuntimeError(f"the baseline's process failed: {error} {error.details[-800:]}") from error
            raise _answer_failed(error, f"in round {attempt}") from None

    def run(self) -> None:
        """Rounds until the tier of the median is certain; a round without enough undisturbed runs again."""
        thresholds = sorted(threshold for threshold, _ in scoring.SPEED_TIERS)
        attempt = 0
        while len(self.seconds["answer"]) < ROUNDS:
            attempt += 1
            tasks = [GRADED_TASK.drawn() for _ in range(TIMED_RUNS)]
            try:
                runs = self.round(tasks, attempt)
            except _VoidRound:
                continue
            if not self.other_checked and len(self.other_results) == 2:
                correctness.check_same_training(
                    self.other_results["answer"],
                    self.other_results["baseline"],
                    self.other,
                    who="fast_train on another task",
                )
                self.other_checked = True
            medians = {}
            for side, side_runs in runs.items():
                seconds = [s for s, _ in side_runs if s is not None]
                if len(seconds) > len(tasks) // 2:
                    medians[side] = statistics.median(seconds)
            if len(medians) < 2:
                continue  # too few undisturbed runs of a side; the round is done again with new inputs
            for side in ("baseline", "answer"):
                self.seconds[side].append(medians[side])
            ratios = [b / a for b, a in zip(self.seconds["baseline"], self.seconds["answer"], strict=True)]
            if scoring.tier_is_certain(ratios, ROUNDS, thresholds):
                return

    @property
    def correct(self) -> bool:
        return self.agreement is not None and self.other_checked

    def _header(self) -> list[str]:
        lines = [
            "measured by the grader, outside your notebook: each side of a round in a fresh process on one CPU "
            f"thread, {TIMED_RUNS} timed runs each"
            + (", alternating with the baseline's" if self.interleaved else "")
            + " (a round takes their median), on weights, batches and images drawn for the round"
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
        return [*lines, f"left out of the medians ({len(self.disturbed)} timed runs): {shown}"]

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
