"""How notebook 12's referee schedules a round's timed runs, with fake processes that record what they are asked.

The real processes, the exploit corpus and the clock are in ``tests/test_capstone_referee.py``
(``make grading-test``); here only the order: where the grader can pause a process, both
sides' runs alternate (baseline, answer, answer, baseline, ...) and the idle side is paused
through every run of the other; elsewhere one side's runs follow the other's. Every answer
is checked against the baseline's result on the same task.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
import types
from pathlib import Path

import pytest

from grading.measure import Rounds

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("capstone_referee_schedule", ROOT / "grading/course/capstone_referee.py")
referee_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(referee_module)


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
        if timed:
            self.log.append((self.side, spec["task"]["seed"], others))
        seconds = 0.2 if self.side == "baseline" else 0.05
        return seconds, types.SimpleNamespace(arrays={}, header={"summary": "", "mistakes": []})


@pytest.fixture
def fake(monkeypatch):
    """``run(pausable)``: the event log and the checks of one measurement with fake processes."""
    checks: list[tuple] = []

    def check_same_training(result, reference, task, who="fast_train"):
        checks.append((result, reference))
        return "agrees"

    monkeypatch.setattr(
        referee_module, "transfer", types.SimpleNamespace(result_from_arrays=lambda arrays, task, who: task.seed)
    )
    monkeypatch.setattr(referee_module, "correctness", types.SimpleNamespace(check_same_training=check_same_training))

    def run(pausable: bool):
        log: list = []
        processes: dict = {}
        start = lambda setup, side: FakeProcess(side, log, processes, pausable)  # noqa: E731
        verdict = referee_module.referee(Rounds({}, start, time.monotonic() + 60))
        return verdict, log, checks

    return run


def test_where_processes_can_be_paused_the_sides_alternate_and_the_idle_one_is_paused(fake):
    verdict, log, checks = fake(pausable=True)
    runs = [event for event in log if event[0] != "closed"]
    first_round = runs[: 2 * referee_module.TIMED_RUNS]
    assert [side for side, _, _ in first_round] == ["baseline", "answer", "answer", "baseline"] * 2 + [
        "baseline",
        "answer",
    ]
    assert all(others == {"answer" if side == "baseline" else "baseline": True} for side, _, others in runs)
    seeds = [seed for _, seed, _ in first_round]
    assert seeds[0] == seeds[1] and seeds[2] == seeds[3] and seeds[0] != seeds[2]  # both sides, the same tasks
    assert checks[: referee_module.TIMED_RUNS] == [(seed, seed) for seed in seeds[::2]]  # every answer checked
    assert "alternating with the baseline's" in verdict.report and "speedup 4.0x" in verdict.report


def test_elsewhere_one_sides_runs_follow_the_others_and_each_process_ends_first(fake):
    verdict, log, checks = fake(pausable=False)
    first_round = log[: 2 * referee_module.TIMED_RUNS + 2]
    assert [event[0] for event in first_round] == ["baseline"] * referee_module.TIMED_RUNS + ["closed"] + [
        "answer"
    ] * referee_module.TIMED_RUNS + ["closed"]
    assert all(event[2] == {} for event in first_round if event[0] != "closed")  # never two processes alive
    assert len(checks) >= referee_module.TIMED_RUNS
    assert "alternating" not in verdict.report and "speedup 4.0x" in verdict.report
