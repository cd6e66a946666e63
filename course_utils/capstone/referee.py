"""The referee of notebook 12's measured test: ``fast_train``'s correctness and speed, decided by the grader.

Contract: ``referee(rounds, errors)`` measures the learner's answer cells in ``rounds`` (the
grader's ``grading.measure.Rounds``, duck-typed: ``answers``, ``start(setup, side)``,
``remaining()``, ``cpu``) and returns a ``Decision`` (points, the report the learner reads,
whether the instructor must decide the speed points), or raises ``AssertionError`` (the
learner's failure, 0 points, its message shown); any other exception is a grader problem.
``errors`` names the grader's two exception types of a round process (``GraderErrors``):
this package never imports the grader (a learner's install has none), so the course's
plugin, ``grading/course/capstone_referee.py``, hands them in and turns the ``Decision``
into the grader's ``Verdict``. Everything that decides the points happens in the grading
worker that calls this, outside any learner code:

* every round starts two fresh processes (``grading.sandbox.rounds``): the course's, which
  runs only the course's code, the baseline (``slow_train``) and the reference solution
  (``reference_train``), and the answer's, which runs only notebook 12's imports and the
  learner's answer cells (``round_process``). Each warms up once on a task of its own,
  then trains ``TIMED_RUNS`` timed tasks per side, the same tasks for the three, and is
  killed with everything it started. Every result of the answer and of the reference is
  checked against the baseline's. Where the grader can pause a process (root, cgroup
  v1's freezer), both processes are alive during a round and the three sides' runs
  alternate, baseline, reference, answer, then answer, reference, baseline, ..., the idle
  process paused, so that all three sample the same moments of a machine whose speed
  drifts; elsewhere one process's runs follow the other's. A side's time in a round is
  the median of its runs;
* the tasks (initial weights, batch order, which images, the noise on their pixels) are
  drawn here, with ``secrets``, and sent to a process only when its clock starts;
* the clock is the grader's; it stops when the trained weights and every step's loss
  have arrived as plain float32 bytes, which are checked here;
* the time other work had the measured CPU anyway is not counted where the kernel
  accounted it exactly; a run it disturbed too much is left out of its side's median, a
  round that keeps no majority of some side's runs is done again with new inputs, and
  past ``DISTURBED_RUNS`` disturbed runs the test keeps its correctness points and leaves
  its speed points to the instructor (``Decision.needs_manual_grade``), never charged to
  the learner. A disturbed run's result is still checked;
* the points: each round's share of the reference's gain (``scoring.share``: 0 at the
  baseline's time, 1 at the reference's, on a logarithmic scale), their median, and the
  tier of ``scoring.SHARE_TIERS`` it reaches, computed here from ``course_utils`` as
  installed (a learner who rebinds anything in their notebook changes their kernel's
  copy, never this one). Rounds stop once that tier is certain. A reference that gained
  less than ``scoring.MIN_REFERENCE_SPEEDUP`` leaves the speed points to the instructor.

Only each process's compile cache (``TORCHINDUCTOR_CACHE_DIR``) survives from one of its
processes to the next, so that a ``torch.compile`` answer compiles once; it cannot carry a
result, since each round's tasks are drawn when the round starts.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from course_utils.capstone import correctness, scoring, transfer
from course_utils.capstone.task import GRADED_TASK, OTHER_TASK, CapstoneTask

__all__ = [
    "DISTURBED_RUNS",
    "ENTRY",
    "ROUNDS",
    "TIMED_RUNS",
    "Decision",
    "GraderErrors",
    "referee",
]

ENTRY = "course_utils.capstone.round_process:timed_rounds"
ROUNDS = 5  # at most; measuring stops once the tier of the median share is certain
TIMED_RUNS = 5  # timed tasks per side and round; the side's time in the round is their median
READY_SECONDS = 300.0  # loading, warming up and a cold torch.compile of the learner's answer
MIN_ROUND_SECONDS = 60.0  # the answer's timed run may take this long, or 20 times the baseline's
DISTURBED_RUNS = 3 * TIMED_RUNS  # timed runs other work disturbed, at most, before the speed is left unmeasured
SIDES = ("baseline", "reference", "answer")
"""The three timed sides, in the order of a round's first task."""
PROCESS = {"baseline": "course", "reference": "course", "answer": "answer"}
"""Which process runs each side: the course's code in one, the learner's in the other."""


@dataclass(frozen=True)
class GraderErrors:
    """The grader's exceptions of a round process (``grading.sandbox.rounds``), handed in by the course's plugin.

    ``disturbed``: other work took the measured CPU (``.result``: the run's message when it
    finished anyway, else None); ``failed``: the process's own failure (``.timeout``,
    ``.details``: its traceback).
    """

    disturbed: type[Exception]
    failed: type[Exception]


@dataclass(frozen=True)
class Decision:
    """What the referee decided: the points, the report, and whether the instructor must decide the speed points."""

    points: float
    report: str
    needs_manual_grade: bool = False


class _Unmeasurable(Exception):
    """Other work kept taking the measured CPU: the speed cannot be measured now."""


class _OutOfTime(Exception):
    """The measurement's time budget is used up."""


class _VoidRound(Exception):
    """A round process could not finish while other work had its CPU: the round is done again."""


Runs = dict[str, list[tuple[float | None, Any]]]
"""Per side, each timed run's seconds (None: left out, disturbed) and its result."""


@dataclass
class _Measurement:
    """One measurement: the tasks drawn for it, the rounds run so far, and what they showed."""

    rounds: Any
    errors: GraderErrors
    other: CapstoneTask = field(default_factory=OTHER_TASK.drawn)
    seconds: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    other_results: dict[str, Any] = field(default_factory=dict)
    other_checked: bool = False
    agreement: Any = None
    diagnosis: dict = field(default_factory=dict)
    disturbed: list[str] = field(default_factory=list)  # the timed runs left out, and why
    interleaved: bool = False  # whether the rounds' runs alternated between live processes
    corrections: list[float] = field(default_factory=list)  # seconds taken off timed runs (exact accounting)
    current: str = "course"  # the process the round is waiting on: whose failure it is

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        warmup = asdict(GRADED_TASK.drawn())
        answers = [[grade_id, source] for grade_id, source in self.rounds.answers.items()]
        self.setups = {
            "course": {"entry": ENTRY, "role": "course", "warmup": warmup},
            "answer": {"entry": ENTRY, "role": "answer", "warmup": warmup, "answers": answers},
        }

    def limit(self) -> float:
        """Seconds a timed run may take: MIN_ROUND_SECONDS, or 20 times the baseline's."""
        times = self.seconds["baseline"]
        return max(MIN_ROUND_SECONDS, 20 * statistics.median(times)) if times else MIN_ROUND_SECONDS

    def note_disturbed(self, who: str, attempt: int, error: Exception) -> None:
        """A run left out; past ``DISTURBED_RUNS`` of them, the speed cannot be measured."""
        self.disturbed.append(f"{who} in round {attempt}: {error}")
        if len(self.disturbed) > DISTURBED_RUNS:
            raise _Unmeasurable

    @staticmethod
    def _who(side: str, attempt: int) -> str:
        return {"answer": f"fast_train (round {attempt})", "reference": "the reference solution"}.get(
            side, "the baseline"
        )

    def _open(self, stack: contextlib.ExitStack, process: str) -> Any:
        """A fresh process (``"course"`` or ``"answer"``), warmed up and ready (closed with ``stack``)."""
        self.current = process
        started = stack.enter_context(self.rounds.start(self.setups[process], process))
        budget = self.rounds.remaining()
        try:
            started.wait_ready(min(READY_SECONDS, max(budget, 1.0)))
        except self.errors.failed as error:
            if getattr(error, "timeout", False) and budget < READY_SECONDS:  # the budget ran out, not the answer's
                raise _OutOfTime from None
            raise
        return started

    def _timed(self, process: Any, side: str, task: CapstoneTask, attempt: int) -> tuple[float | None, Any]:
        """One timed run of ``side``: its seconds (None when other work disturbed it) and its result, always read."""
        who = self._who(side, attempt)
        try:
            seconds, message = process.round({"task": asdict(task), "train": side}, self.limit())
            if process.disturbance is not None and process.disturbance.correction:
                self.corrections.append(process.disturbance.correction)
        except self.errors.disturbed as disturbed:
            if getattr(disturbed, "result", None) is None:
                raise
            self.note_disturbed(who, attempt, disturbed)
            seconds, message = None, disturbed.result  # type: ignore[attr-defined]
        return seconds, transfer.result_from_arrays(message.arrays, task, who=who)

    def _untimed(self, process: Any, name: str, task: CapstoneTask, attempt: int) -> None:
        """Once per process: correctness on another task (the baseline's, the answer's), then the answer's diagnosis."""
        side = "baseline" if name == "course" else "answer"
        if side in self.other_results:
            return
        limit = max(self.limit(), MIN_ROUND_SECONDS)
        _, other = process.round({"task": asdict(self.other), "train": side}, limit, timed=False)
        self.other_results[side] = transfer.result_from_arrays(other.arrays, self.other, who=self._who(side, attempt))
        if side == "answer":
            _, counted = process.round({"task": asdict(task), "diagnose": True}, MIN_ROUND_SECONDS, timed=False)
            self.diagnosis = counted.header

    def _check(self, runs: Runs, tasks: list[CapstoneTask], index: int, side: str, attempt: int) -> None:
        """``side``'s result on ``tasks[index]`` against the baseline's, once both have arrived.

        An answer that differs fails the learner's test; a reference that differs is the
        grader's problem (``RuntimeError``).
        """
        for checked in ("answer", "reference") if side == "baseline" else (side,):
            if len(runs[checked]) <= index or len(runs["baseline"]) <= index:
                continue
            result, baseline = runs[checked][index][1], runs["baseline"][index][1]
            if checked == "answer":
                agreement = correctness.check_same_training(
                    result, baseline, tasks[index], who=self._who("answer", attempt)
                )
                self.agreement = self.agreement or agreement
                continue
            try:
                correctness.check_same_training(result, baseline, tasks[index], who="the reference solution")
            except AssertionError as error:
                raise RuntimeError(f"the course's reference solution disagrees with the baseline: {error}") from None

    def _schedule(self, tasks: list[CapstoneTask], attempt: int) -> Iterator[tuple[int, tuple[str, ...]]]:
        """Per task, its index and the order of the three sides: forwards, then backwards, and so on."""
        for index in range(len(tasks)):
            yield index, SIDES if (index + attempt) % 2 == 1 else SIDES[::-1]

    def _interleaved(self, processes: dict[str, Any], tasks: list[CapstoneTask], attempt: int, runs: Runs) -> None:
        """The round with both processes alive, the idle one paused, the sides' runs alternating."""
        self.interleaved = True
        for index, order in self._schedule(tasks, attempt):
            position = 0
            while position < len(order):  # consecutive runs of one process share one resumed stretch
                name = self.current = PROCESS[order[position]]
                with processes[name].resumed() as process:
                    while position < len(order) and PROCESS[order[position]] == name:
                        side = order[position]
                        runs[side].append(self._timed(process, side, tasks[index], attempt))
                        self._check(runs, tasks, index, side, attempt)
                        position += 1
        for name, process in processes.items():
            self.current = name
            with process.resumed() as resumed:
                self._untimed(resumed, name, tasks[0], attempt)

    def round(self, tasks: list[CapstoneTask], attempt: int) -> Runs:
        """Each side's timed runs of ``tasks`` (seconds or None, result), every result checked as it arrives.

        Interleaved where the processes can be paused; else one process after the other.
        ``_VoidRound`` when a process could not finish while other work had its CPU (noted).
        """
        names = ("course", "answer") if attempt % 2 == 1 else ("answer", "course")
        runs: Runs = {side: [] for side in SIDES}
        try:
            with contextlib.ExitStack() as both:
                first = self._open(both, names[0])
                if first.pausable:
                    first.pause()
                    processes = {names[0]: first, names[1]: self._open(both, names[1])}
                    processes[names[1]].pause()
                    self._interleaved(processes, tasks, attempt, runs)
                    return runs
                for position, name in enumerate(names):
                    self.current = name
                    with contextlib.ExitStack() as one:
                        process = first if position == 0 else self._open(one, name)
                        for index, order in self._schedule(tasks, attempt):
                            for side in (side for side in order if PROCESS[side] == name):
                                runs[side].append(self._timed(process, side, tasks[index], attempt))
                                self._check(runs, tasks, index, side, attempt)
                        self._untimed(process, name, tasks[0], attempt)
                    if position == 0:
                        both.close()  # the first process ends before the second starts
            return runs
        except TimeoutError:  # the budget, at the start of a process
            raise _OutOfTime from None
        except self.errors.disturbed as disturbed:  # a process could not finish while other work had its CPU
            self.note_disturbed(f"the {self.current} process", attempt, disturbed)
            raise _VoidRound from None
        except self.errors.failed as error:
            details = getattr(error, "details", "")
            if self.current == "course":
                raise RuntimeError(f"the course's process failed: {error} {details[-800:]}") from error
            raise _answer_failed(error, details, f"in round {attempt}") from None

    def _check_other(self) -> None:
        """The answer on another task against the baseline's, once both have arrived."""
        if not self.other_checked and len(self.other_results) == 2:
            correctness.check_same_training(
                self.other_results["answer"],
                self.other_results["baseline"],
                self.other,
                who="fast_train on another task",
            )
            self.other_checked = True

    def run(self) -> None:
        """Rounds until the tier of the median share is certain; a round without enough undisturbed runs again."""
        thresholds = sorted(line for line, _ in scoring.SHARE_TIERS)
        attempt = 0
        while len(self.seconds["answer"]) < ROUNDS:
            attempt += 1
            tasks = [GRADED_TASK.drawn() for _ in range(TIMED_RUNS)]
            try:
                runs = self.round(tasks, attempt)
            except _VoidRound:
                continue
            self._check_other()
            medians = {}
            for side, side_runs in runs.items():
                seconds = [s for s, _ in side_runs if s is not None]
                if len(seconds) > len(tasks) // 2:
                    medians[side] = statistics.median(seconds)
            if len(medians) < len(SIDES):
                continue  # too few undisturbed runs of a side; the round is done again with new inputs
            for side in SIDES:
                self.seconds[side].append(medians[side])
            if scoring.tier_is_certain(self.speedup().shares, ROUNDS, thresholds):
                return

    def speedup(self) -> scoring.Speedup:
        seconds = {side: tuple(times) for side, times in self.seconds.items()}
        return scoring.Speedup(seconds["baseline"], seconds["answer"], seconds["reference"])

    @property
    def correct(self) -> bool:
        return self.agreement is not None and self.other_checked

    def _header(self) -> list[str]:
        lines = [
            "measured by the grader, outside your notebook: in each round a fresh process of yours and one of the "
            f"course's (the baseline and the reference solution), on one CPU thread, {TIMED_RUNS} timed runs of each "
            "side" + (", alternating" if self.interleaved else "") + " (a round takes each side's median), on "
            "weights, batches and images drawn for the round" + (f"; on {self.rounds.cpu}" if self.rounds.cpu else "")
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

    def verdict(self, note: str = "") -> Decision:
        """The decision from the rounds measured so far (at least one)."""
        speedup = self.speedup()
        if speedup.reference_ratio < scoring.MIN_REFERENCE_SPEEDUP:
            return self.unmeasured(
                f"the reference solution ran only {speedup.reference_ratio:.1f}x faster than the baseline on this "
                f"machine (at least {scoring.MIN_REFERENCE_SPEEDUP:g}x is needed to scale your speedup by it)"
            )
        speed = scoring.speed_points(speedup.share)
        points = scoring.CORRECTNESS_POINTS + speed
        speed_max = scoring.MAX_POINTS - scoring.CORRECTNESS_POINTS
        lines = [
            *self._header(),
            f"{speedup} -> {speed} of {speed_max} points ({scoring.tiers_text(speedup.reference_ratio)})",
            *([note] if note else []),
            *self._disturbances(),
            f"measured in {len(self.seconds['answer'])} rounds in {time.monotonic() - self.started:.0f} s",
        ]
        if self.diagnosis:
            mistakes = [str(m) for m in self.diagnosis.get("mistakes", [])]
            lines.append(f"your run, as counted in its own process: {self.diagnosis.get('summary', '')}")
            lines += scoring.mistake_lines(mistakes, speed, speed_max)
        lines.append(f"points: {points} of {scoring.MAX_POINTS}")
        return Decision(points, "\n".join(lines))

    def unmeasured(self, why: str = "") -> Decision:
        """Could not measure: the points decided without timing, the speed points left to the instructor."""
        points = scoring.CORRECTNESS_POINTS if self.correct else 0
        speed_max = scoring.MAX_POINTS - scoring.CORRECTNESS_POINTS
        why = why or "other work on this machine kept taking the CPU of the timed runs"
        ratios = ", ".join(f"{r:.1f}" for r in self.speedup().ratios)
        lines = [
            *self._header(),
            *([] if self.correct else ["correctness: not checked yet (no run could finish undisturbed)"]),
            f"speed: NOT MEASURED: {why}, so the grader could not measure your speed; your instructor decides "
            f"these {speed_max} points",
            *self._disturbances(),
            f"undisturbed rounds so far: {len(self.seconds['answer'])}" + (f" (speedups {ratios})" if ratios else ""),
            f"points so far: {points} of {scoring.MAX_POINTS}; the other {scoring.MAX_POINTS - points} are left "
            "to your instructor",
        ]
        return Decision(points, "\n".join(lines), needs_manual_grade=True)


def _answer_failed(error: Exception, details: str, when: str) -> AssertionError:
    details = "\n".join(details.strip().splitlines()[-6:])
    message = f"fast_train failed {when} in the grader's process: {error}"
    return AssertionError(f"{message}\n{details}" if details else message)


def referee(rounds: Any, errors: GraderErrors) -> Decision:
    """Correctness first (2 points), then the share of the reference's gain in tiers (up to 8)."""
    measurement = _Measurement(rounds, errors)
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
