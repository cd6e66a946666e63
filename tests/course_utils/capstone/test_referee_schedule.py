"""How notebook 12's referee schedules a round's timed runs, with fake processes that record what they are asked.

The real processes, the exploit corpus and the clock are in ``tests/grading_end_to_end/test_capstone_exploits.py``
(``make grading-test``); here only the order: where the grader can pause a process, the three
sides' runs alternate (baseline, reference, answer, then answer, reference, baseline, ...),
the course's process running the baseline and the reference, and the idle process is paused
through every run of the other; elsewhere one process's runs follow the other's. Every
answer and every reference run is checked against the baseline's result on the same task.
"""

from __future__ import annotations

import contextlib
import time
import types

import pytest

from course_utils.capstone import referee as referee_module
from grading.measure import Rounds
from grading.sandbox.rounds import Disturbed, RoundError

ERRORS = referee_module.GraderErrors(disturbed=Disturbed, failed=RoundError)
SECONDS = {"baseline": 0.2, "reference": 0.02, "answer": 0.05}
"""Each side's fake time per run: the answer 4x, the reference 10x; the share ln 4 / ln 10 = 0.60."""


class FakeProcess:
    """Answers every run at once; records each timed run and which sides were paused meanwhile."""

    def __init__(self, side: str, log: list, processes: dict, pausable: bool) -> None:
        self.side, self.log, self.processes, self.pausable = side, log, processes, pausable
        self.paused = False
        self.disturbance = None
        processes[side] = self

    def __enter__(self) -> FakeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(("closed", self.side))
        del self.processes[self.side]

    def wait_ready(self, timeout: float) -> None:
        pass

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    @contextlib.contextmanager
    def resumed(self):
        self.resume()
        yield self
        self.pause()

    def round(self, spec: dict, timeout: float, *, timed: bool = True):
        assert not self.paused, f"{self.side} was asked to run while paused"
        others = {side: p.paused for side, p in self.processes.items() if side != self.side}
        run = spec.get("train", "answer")
        assert (run == "answer") == (self.side == "answer"), f"{run} asked of the {self.side} process"
        if timed:
            self.log.append((run, spec["task"]["seed"], others))
        return SECONDS[run], types.SimpleNamespace(arrays={}, header={"summary": "", "mistakes": []})


@pytest.fixture
def fake(monkeypatch):
    """``run(pausable)``: the event log and the checks of one measurement with fake processes."""
    checks: list[tuple] = []

    def check_same_training(result, reference, task, who="fast_train"):
        checks.append((who.split(" (")[0], result, reference))
        return "agrees"

    monkeypatch.setattr(
        referee_module, "transfer", types.SimpleNamespace(result_from_arrays=lambda arrays, task, who: task.seed)
    )
    monkeypatch.setattr(referee_module, "correctness", types.SimpleNamespace(check_same_training=check_same_training))

    def run(pausable: bool):
        log: list = []
        processes: dict = {}
        start = lambda setup, side: FakeProcess(side, log, processes, pausable)  # noqa: E731
        verdict = referee_module.referee(Rounds({}, start, time.monotonic() + 60), ERRORS)
        return verdict, log, checks

    return run


def test_where_processes_can_be_paused_the_sides_alternate_and_the_idle_one_is_paused(fake):
    verdict, log, checks = fake(pausable=True)
    runs = [event for event in log if event[0] != "closed"]
    first_round = runs[: 3 * referee_module.TIMED_RUNS]
    forwards, backwards = ["baseline", "reference", "answer"], ["answer", "reference", "baseline"]
    assert [side for side, _, _ in first_round] == (forwards + backwards) * 2 + forwards
    other = {"baseline": "answer", "reference": "answer", "answer": "course"}
    assert all(others == {other[side]: True} for side, _, others in runs)  # the other process paused
    seeds = [seed for _, seed, _ in first_round]
    assert all(len(set(seeds[3 * i : 3 * i + 3])) == 1 for i in range(referee_module.TIMED_RUNS))  # one task each
    assert len(set(seeds[::3])) == referee_module.TIMED_RUNS  # a task of its own for each
    first_checks = checks[: 2 * referee_module.TIMED_RUNS]
    assert sorted(who for who, _, _ in first_checks) == ["fast_train"] * 5 + ["the reference solution"] * 5
    assert all(result == reference for _, result, reference in first_checks)  # each against the same task
    assert "alternating" in verdict.report and "speedup 4.0x" in verdict.report
    assert "the reference solution 10.0x in the same rounds" in verdict.report
    assert "share of its gain 0.60" in verdict.report
    assert verdict.points == 2 + 4


def test_elsewhere_one_process_runs_follow_the_others_and_each_process_ends_first(fake):
    verdict, log, checks = fake(pausable=False)
    first_round = log[: 3 * referee_module.TIMED_RUNS + 2]
    course_runs = [event[0] for event in first_round[: 2 * referee_module.TIMED_RUNS]]
    assert sorted(set(course_runs)) == ["baseline", "reference"] and course_runs.count("baseline") == 5
    assert [event[0] for event in first_round[2 * referee_module.TIMED_RUNS :]] == ["closed"] + [
        "answer"
    ] * referee_module.TIMED_RUNS + ["closed"]
    assert all(event[2] == {} for event in first_round if event[0] != "closed")  # never two processes alive
    assert len(checks) >= 2 * referee_module.TIMED_RUNS
    second_round = [event[0] for event in log[3 * referee_module.TIMED_RUNS + 2 :]][: referee_module.TIMED_RUNS]
    assert second_round == ["answer"] * referee_module.TIMED_RUNS  # the next round starts with the answer's
    assert "alternating" not in verdict.report and "speedup 4.0x" in verdict.report
