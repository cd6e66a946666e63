"""Notebook 01's graded tests accept the reference answer and reject plausible wrong ones.

Each exercise's test cell (visible and hidden tests, as in the source notebook) runs in a
fresh namespace after an answer. The wrong answers are mistakes a learner could make;
each must fail, and ``test_exercises.py`` separately shows that no answer at all fails.
"""

from __future__ import annotations

import time

import pytest
from nbtools import NOTEBOOK_DIR, nbgrader_meta, read

NOTEBOOK = read(NOTEBOOK_DIR / "01_run_tensors_on_the_gpu.ipynb")
EXERCISES = ("ex1_matmul_flops", "ex2_time_per_call", "ex3_choose_device", "ex4_sync_lines")


def cell_source(grade_id: str) -> str:
    sources = [cell.source for cell in NOTEBOOK.cells if nbgrader_meta(cell).get("grade_id") == grade_id]
    assert len(sources) == 1, f"{grade_id}: expected one cell, found {len(sources)}"
    return sources[0]


def grade(exercise: str, answer: str) -> None:
    """Run ``answer``, then the exercise's test cell; raises AssertionError if a test fails."""
    namespace: dict = {"time": time}
    exec(answer, namespace)
    exec(cell_source(f"{exercise}_tests"), namespace)


FLOPS = "def matmul_flops(m, n, k):\n"
TIMER = "def time_per_call(fn, sync, repeats, clock=time.perf_counter):\n"

WRONG_ANSWERS = [
    ("ex1_matmul_flops", "forgets that a multiply-add is two FLOPs", FLOPS + "    return m * n * k"),
    ("ex1_matmul_flops", "counts only the output elements", FLOPS + "    return 2 * m * n"),
    ("ex1_matmul_flops", "returns a float", FLOPS + "    return 2.0 * m * n * k"),
    (
        "ex2_time_per_call",
        "no warm-up call",
        TIMER + "    sync(); start = clock()\n    for _ in range(repeats): fn()\n    sync()\n"
        "    return (clock() - start) / repeats",
    ),
    (
        "ex2_time_per_call",
        "reads the clock before synchronising",
        TIMER + "    fn(); start = clock()\n    for _ in range(repeats): fn()\n    sync()\n"
        "    return (clock() - start) / repeats",
    ),
    (
        "ex2_time_per_call",
        "never synchronises after the timed calls",
        TIMER + "    fn(); sync(); start = clock()\n    for _ in range(repeats): fn()\n"
        "    return (clock() - start) / repeats",
    ),
    (
        "ex2_time_per_call",
        "returns the total, not the time per call",
        TIMER + "    fn(); sync(); start = clock()\n    for _ in range(repeats): fn()\n    sync()\n"
        "    return clock() - start",
    ),
    (
        "ex3_choose_device",
        "prefers MPS to CUDA (passes the visible tests)",
        "def choose_device_type(cuda_available, mps_available):\n"
        "    if mps_available: return 'mps'\n    return 'cuda' if cuda_available else 'cpu'",
    ),
    (
        "ex3_choose_device",
        "ignores MPS",
        "def choose_device_type(cuda_available, mps_available):\n    return 'cuda' if cuda_available else 'cpu'",
    ),
    ("ex4_sync_lines", "misses the boolean-mask index", "SYNC_LINES = {4, 7, 10, 11}"),
    ("ex4_sync_lines", "counts a queued reduction as a sync", "SYNC_LINES = {3, 4, 5, 7, 10, 11}"),
    ("ex4_sync_lines", "counts the no-op non_blocking move", "SYNC_LINES = {4, 5, 7, 10, 11, 12}"),
    ("ex4_sync_lines", "a list instead of a set", "SYNC_LINES = [4, 5, 7, 10, 11]"),
]


@pytest.mark.parametrize("exercise", EXERCISES)
def test_reference_answer_passes(exercise):
    grade(exercise, cell_source(exercise))


@pytest.mark.parametrize(("exercise", "mistake", "answer"), WRONG_ANSWERS, ids=[w[1] for w in WRONG_ANSWERS])
def test_wrong_answer_fails(exercise, mistake, answer):
    with pytest.raises(AssertionError):
        grade(exercise, answer)


def test_every_exercise_has_a_wrong_answer():
    assert {exercise for exercise, _, _ in WRONG_ANSWERS} == set(EXERCISES)
