"""A stopped regrade never takes a learner's result away: the old one stays, whole, until the new one is.

The compatibility course (two notebooks per submission) is graded once; then bob's files are
changed (one answer fixed, a slow cell added to the other notebook) and ``course autograde
--force`` is stopped while his slow cell runs, by SIGTERM and by SIGKILL, and once more as if
killed between the two renames that put a new result in place. After each stop bob's
``autograded/`` folder and his grades in the gradebook are still the first run's, and his
feedback can be made; a full ``--force`` run then gives him the new grades.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grading.collect import collect
from grading.coursedir import Course
from grading.feedback import feedback
from grading.release import release
from tests.fixtures.grading import compat_students as students
from tests.support.paths import ROOT
from tests.support.processes import marked_processes, wait_for

pytestmark = [
    pytest.mark.slow_grading,  # four grading runs of the compatibility course: `make grading-test`
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

A = students.ASSIGNMENT
MARK = "314.159"  # bob's slow cell runs `sleep 314.159`, found by its arguments
SLOW_CELL = f'import subprocess\nsubprocess.run(["sleep", "{MARK}"])'
FIXED_MEAN = students.MEAN  # alice's right answer, which bob's second submission now has


def _grades(course: Course, student: str) -> dict[tuple[str, str], float | None]:
    with course.gradebook() as gb:
        sub = gb.find_submission(A, student)
        return {(nb.name, grade.cell.name): grade.auto_score for nb in sub.notebooks for grade in nb.grades}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _command(course: Course, *args: str) -> list[str]:
    return [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--no-progress", *args]


def _stopped_while_slow(course: Course, how: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        _command(course, "--force", "--student", "bob", "--jobs", "1"), env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert wait_for(lambda: bool(marked_processes(MARK)), 120, step=0.2), "bob's slow cell never started"
        run.send_signal(how)
        run.communicate(timeout=30)
    finally:
        run.kill()
        run.wait()
    assert wait_for(lambda: not marked_processes(MARK), 20, step=0.2), "the stopped run's kernel outlived it"


@pytest.fixture()
def course(tmp_path):
    course = Course(tmp_path / "course")
    shutil.copytree(students.COURSE, course.root)
    release(course, duedate=students.DUE)
    inbox = tmp_path / "inbox"
    students.build(course.folder("release", A), inbox)
    shutil.rmtree(inbox / "carol")
    collect(course, inbox)
    done = subprocess.run(_command(course, "--jobs", "2"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return course


def _resubmit_bob(course: Course) -> None:
    """bob's files change in place (a regrade with --force reads them again): ex1 fixed, a slow cell in the essay."""
    folder = course.folder("submitted", A, "bob")
    problems = nbformat.read(folder / "problems.ipynb", as_version=4)
    cell = next(c for c in problems.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "mean_column")
    cell.source = cell.source.split("    with open(path")[0] + FIXED_MEAN
    nbformat.write(problems, folder / "problems.ipynb")
    essay = nbformat.read(folder / "essay.ipynb", as_version=4)
    essay.cells.insert(1, nbformat.v4.new_code_cell(SLOW_CELL))
    nbformat.write(essay, folder / "essay.ipynb")


def test_a_stopped_force_regrade_leaves_every_learner_a_complete_result(course, tmp_path):
    bob = course.folder("autograded", A, "bob")
    first_files, first_grades = _files(bob), _grades(course, "bob")
    alice_grades = _grades(course, "alice")
    assert first_grades[("problems", "mean_column_tests")] == 0.0, "bob's first answer to mean_column is wrong"
    _resubmit_bob(course)

    for how in (signal.SIGTERM, signal.SIGKILL):
        _stopped_while_slow(course, how)
        assert _files(bob) == first_files, f"after {how.name}, bob's autograded folder is not the first run's"
        assert _grades(course, "bob") == first_grades, f"after {how.name}, the gradebook changed bob's grades"
        assert _grades(course, "alice") == alice_grades
        made = feedback(course, A, students=["bob"])
        assert any(path.name == "problems.html" for path in made), f"no feedback for bob after {how.name}"

    # killed between the two renames: the old folder aside, the new one not yet in place
    aside = bob.with_name(f".{bob.name}.replaced")
    bob.rename(aside)
    again = subprocess.run(_command(course, "--student", "bob"), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 already graded" in again.stdout, again.stdout
    assert _files(bob) == first_files and not aside.exists()

    # the regrade run to its end (the slow cell times out at 2 s): bob's new grades, in both places
    regrade = _command(course, "--force", "--student", "bob", "--cell-timeout", "2")
    done = subprocess.run(regrade, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _grades(course, "bob")[("problems", "mean_column_tests")] == 2.0
    assert _files(bob) != first_files
    assert not any(p.name.startswith(".") for p in bob.parent.iterdir()), "a staging or replaced folder was left"
