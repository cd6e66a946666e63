"""The reference solutions get full marks on a loaded machine, with the course's own time limits.

A cell's time limit counts the CPU time its kernel used, not the wall-clock time: a reviewer
once graded notebook 10's exercise 1 (a correct answer) while other grading work ran, and it
scored 0 with ``CellTimeoutError``; alone, a minute later, it scored 3 of 3. Here every
notebook of ``notebooks/`` is released into a throwaway course, submitted as it is and graded
with ``course autograde --jobs 2`` and the course's limits (``Execute.timeout``, 60 s a cell;
600 s a notebook) beside two busy processes per core that the grader does not control. Every
test cell must score its points, except a measured test (notebook 12's speed, decided outside
the kernel by timed rounds, which the load may leave for manual grading): no cell may have
met a time limit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grading.autograde import autograde
from tests.grading_end_to_end.test_reference_solutions import NOTEBOOKS, failed_tests, reference_course

pytestmark = pytest.mark.slow_grading  # every notebook on a loaded machine: several minutes


@pytest.fixture(scope="module")
def graded_under_load(tmp_path_factory):
    course = reference_course(tmp_path_factory.mktemp("loaded"))
    busy = [
        subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        summary = autograde(course, jobs=2, progress=False)  # the course's limits: Execute.timeout = 60
    finally:
        for process in busy:
            process.kill()
            process.wait()
    for result in summary.graded:
        print(f"{result.submission.assignment}: {result.seconds:.0f} s")
    return course, summary


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_reference_solution_scores_every_point_on_a_loaded_machine(graded_under_load, path):
    course, summary = graded_under_load
    result = next(g for g in summary.graded if g.submission.assignment == path.stem)
    notes = " ".join(result.notes)
    assert "time limit" not in notes, notes
    assert "the submission" not in notes, notes  # no verdict of tampering
    problems = [n for n in result.notes if n.startswith("Grader problem") and "measur" not in n]
    assert not problems, problems  # a measured test the load kept from being timed is the only excuse
    assert not failed_tests(course, path), failed_tests(course, path)
