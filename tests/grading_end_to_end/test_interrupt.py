"""A stopped ``course autograde`` (Ctrl-C, SIGTERM) kills what it started and loses no submission."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys

import nbformat
import pytest

from grading.coursedir import Course
from grading.release import release
from grading.sandbox.protections import detect
from tests.fixtures.grading import grading_cases as cases
from tests.support.paths import FIXTURES, ROOT
from tests.support.processes import marked_processes, wait_for

pytestmark = pytest.mark.slow_grading  # tests/grading_end_to_end/ is `make grading-test`

MARK = "271.828"  # the slow submission's child process: `sleep 271.828`, found by its arguments
SLOW_CELL = f'import subprocess\nsubprocess.run(["sleep", "{MARK}"])'
COURSE = [sys.executable, "-m", "grading"]


def _submit(course: Course, student: str, nb: nbformat.NotebookNode) -> None:
    folder = course.folder("submitted", cases.ASSIGNMENT, student)
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{cases.ASSIGNMENT}.ipynb")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_sigterm_kills_the_kernels_and_the_next_run_grades_what_was_left(tmp_path):
    course = Course(root=tmp_path / "grading", notebooks=FIXTURES / "notebooks")
    release(course)
    good = cases.solved()
    slow = copy.deepcopy(good)
    slow.cells.insert(0, nbformat.v4.new_code_cell(SLOW_CELL))
    _submit(course, "a_first", good)
    _submit(course, "b_slow", slow)
    base = [*COURSE, "--course", str(course.root), "--notebooks", str(course.notebooks), "autograde", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    run = subprocess.Popen([*base, "--jobs", "1"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(lambda: bool(marked_processes(MARK)), 120, step=0.2), "the slow submission never started"
        done = course.folder("autograded", cases.ASSIGNMENT, "a_first")
        assert done.is_dir(), "the first submission was graded before the second started"
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 130
    assert "interrupted; run it again to grade the rest" in err and "Traceback" not in err
    if detect().namespaces:  # the kernel's PID namespace goes with it (at the `none` level only its process group)
        assert wait_for(lambda: not marked_processes(MARK), 10, step=0.2), "the interrupted kernel outlived the run"
    left = course.folder("autograded", cases.ASSIGNMENT, "b_slow")
    assert not left.exists(), "an unfinished submission must not look graded"

    again = subprocess.run([*base, "--cell-timeout", "2"], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "graded 1 submission," in again.stdout and "1 already graded" in again.stdout
    assert (left / f"{cases.ASSIGNMENT}.ipynb").is_file()
    with course.gradebook() as gb:  # its slow cell timed out; every answer after it is right
        scores = {s: gb.find_submission(cases.ASSIGNMENT, s).score for s in ("a_first", "b_slow")}
    assert scores == {"a_first": cases.EXPECTED["correct"], "b_slow": cases.EXPECTED["correct"]}
