"""Measured tests: decided by a referee outside the kernel, in timed rounds the learner's code cannot reach.

The round processes are real (``grading.sandbox.rounds`` in the jail, with the protocol's
own ``echo`` entry); so is the worker that grades a notebook with a measured test cell,
whose kernel must not run that cell.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from nbgrader.utils import determine_grade

from grading.coursedir import Course
from grading.measure import Verdict, apply_verdict, find_measured, measured_tests, unmeasured
from grading.sandbox.cpus import reserve
from grading.sandbox.protections import GRADING_UID_BASE, Limits, SlotLease, detect
from grading.sandbox.rounds import RoundError, starter
from grading.sandbox.workers import WorkerPool
from grading.sanitize import with_grader_cells, without_grader_cells

PROTECTIONS = detect()
ECHO = "grading.sandbox.rounds:echo"


def _meta(grade_id: str, *, solution: bool = False, points: int = 3) -> dict:
    flags = {"grade_id": grade_id, "schema_version": 3, "task": False, "solution": solution}
    if solution:
        return {"nbgrader": {**flags, "grade": False, "locked": False}}
    return {"nbgrader": {**flags, "grade": True, "locked": True, "points": points}}


@pytest.fixture
def held():
    """``(slot, reservation)``: a leased grading slot and the CPU it holds, as a grading worker's measurement has."""
    lease = SlotLease(1, PROTECTIONS.level == "root")
    slot = lease.slots[0]
    uid = GRADING_UID_BASE + slot if PROTECTIONS.level == "root" else None
    try:
        with reserve(PROTECTIONS.level, slot, uid, wait=600) as reservation:
            yield slot, reservation
    finally:
        lease.release()


@pytest.fixture
def start(held):
    """``start(setup, side)`` as a referee gets it, over a fresh base folder."""
    slot, reservation = held
    with tempfile.TemporaryDirectory(prefix="measure-test-") as tmp:
        base = Path(tmp)
        base.chmod(0o711)  # the grading user must reach its working directories
        yield starter(PROTECTIONS, Limits(), [], slot, base, reservation)


def _processes_running(needle: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(needle):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_round_is_timed_by_the_grader_until_its_result_has_arrived(start):
    with start({"entry": ECHO}, "answer") as process:
        ready = process.wait_ready(60)
        seconds, message = process.round({"payload": "hello", "sleep": 0.3}, timeout=30)
        taken_off = process.disturbance.correction
    # The clock ran while the process worked. What the round reports is less the time other work had the
    # group's CPU (on CI another test's wait after the sleep took 4 ms off: 0.296 s), so add it back.
    assert seconds + taken_off >= 0.3, (seconds, taken_off)
    assert message.arrays["payload"] == ("uint8", (5,), b"hello")
    assert len(ready["cpus"]) == 1 and message.header["cpus"] == ready["cpus"]  # one CPU, the same throughout


def test_a_round_process_cannot_widen_its_cpus_nor_can_what_it_starts(start):
    widen = [sys.executable, "-c", "import os; os.sched_setaffinity(0, range(os.cpu_count()))"]
    with start({"entry": ECHO}, "answer") as process:
        process.wait_ready(60)
        _, message = process.round({"run": widen}, timeout=30)
    assert message.header["status"] != 0 and "Operation not permitted" in message.header["output"]


def test_everything_a_round_process_started_dies_with_it(start):
    marker = f"{time.time_ns() % 10**9}"
    leave_behind = ["sh", "-c", f"(exec sleep 3{marker} >/dev/null 2>&1 &); echo started"]
    with start({"entry": ECHO}, "answer") as process:
        process.wait_ready(60)
        _, message = process.round({"run": leave_behind}, timeout=30)
        assert "started" in message.header["output"]
        deadline = time.monotonic() + 10  # (the background shell may not have exec'd sleep yet)
        while not _processes_running(f"sleep\0003{marker}".encode()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_running(f"sleep\0003{marker}".encode())
    deadline = time.monotonic() + 10
    while _processes_running(f"sleep\0003{marker}".encode()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_running(f"sleep\0003{marker}".encode())


def test_what_goes_wrong_in_a_round_process_reaches_the_grader(start):
    with start({"entry": "no_such_module:entry"}, "answer") as process, pytest.raises(RoundError) as caught:
        process.wait_ready(60)
    assert "ModuleNotFoundError" in str(caught.value) and "no_such_module" in caught.value.details
    with start({"entry": ECHO}, "answer") as process:
        process.wait_ready(60)
        with pytest.raises(RoundError, match="no result within 1 s"):
            process.round({"sleep": 5}, timeout=1)


REFEREE = """
from grading.measure import Verdict


def referee(rounds):
    with rounds.start({"entry": "grading.sandbox.rounds:echo"}, "answer") as process:
        process.wait_ready(60)
        _, message = process.round({"payload": rounds.answers["answer"]}, timeout=30)
    text = message.arrays["payload"][2].decode()
    assert "def f" in text, "no f in the answer"
    return Verdict(2, "measured outside: the answer defines f")
"""
TEST_CELL = """# course: measure echo_referee answer
raise RuntimeError("the kernel ran a measured test")
"""


def test_the_directive_is_read_from_test_cells_only_and_names_its_referee(tmp_path):
    nb = new_notebook(
        cells=[
            new_code_cell("def f():\n    return 1", metadata=_meta("answer", solution=True)),
            new_code_cell("# course: measure echo_referee answer", metadata={}),  # not a test cell: ignored
            new_code_cell(TEST_CELL, metadata=_meta("measured")),
        ]
    )
    [measured] = find_measured(nb)
    assert (measured.grade_id, measured.referee, measured.answers) == ("measured", "echo_referee", ("answer",))
    jobs, notes = measured_tests(nb, tmp_path)
    assert jobs[0]["source"] is None and "echo_referee.py" in notes[0] and "scores 0" in notes[0]
    (tmp_path / "echo_referee.py").write_text(REFEREE)
    jobs, notes = measured_tests(nb, tmp_path)
    assert jobs[0]["source"] == REFEREE and not notes


def test_a_verdict_is_scored_by_nbgrader_as_partial_credit_and_a_failure_as_zero():
    cell = new_code_cell(TEST_CELL, metadata=_meta("measured", points=10))
    apply_verdict(cell, Verdict(7, "report"))
    assert determine_grade(cell) == (7.0, 10.0) and cell.outputs[0]["text"] == "report\n"
    apply_verdict(cell, AssertionError("too slow"))
    assert determine_grade(cell) == (0.0, 10.0) and cell.outputs[0]["evalue"] == "too slow"


@pytest.mark.parametrize(("answer", "points"), [("def f():\n    return 1", 2.0), ("g = 1", 0.0)])
def test_the_worker_decides_a_measured_test_outside_the_kernel(tmp_path, answer, points):
    (tmp_path / "echo_referee.py").write_text(REFEREE)
    nb = new_notebook(
        cells=[
            new_code_cell(answer, metadata=_meta("answer", solution=True)),
            new_code_cell(TEST_CELL, metadata=_meta("measured")),
        ]
    )
    measured, _ = measured_tests(nb, tmp_path)
    job = {"nb": with_grader_cells(nb), "files": None, "measured": measured}
    [(_, result)] = list(WorkerPool(1, PROTECTIONS, Limits(cell_timeout=60), []).run([("nb", job)]))
    graded = without_grader_cells(nbformat.from_dict(result["nb"]), [])
    cell = graded.cells[1]
    assert "the kernel ran a measured test" not in str(cell.outputs)
    assert determine_grade(cell) == (points, 3.0)
    assert ("measured outside" in cell.outputs[0].get("text", "")) == bool(points)


def _measured_notebook(answer: str) -> nbformat.NotebookNode:
    return new_notebook(
        cells=[
            new_code_cell(answer, metadata=_meta("answer", solution=True)),
            new_code_cell(TEST_CELL, metadata=_meta("measured")),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def _released_course(tmp_path: Path, referee: str) -> tuple[Course, nbformat.NotebookNode]:
    """A course of one measured notebook refereed by ``referee``, released; and its student version, answered."""
    from grading.release import release

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    solution = "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"
    nbformat.write(_measured_notebook(solution), notebooks / "01_measured.ipynb")
    course = Course(root=tmp_path / "course", notebooks=notebooks)
    course.root.mkdir()
    (course.root / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\n")
    (course.root / "echo_referee.py").write_text(referee)
    release(course)
    learner = nbformat.read(course.folder("release", "01_measured") / "01_measured.ipynb", as_version=4)
    learner.cells[0].source = "def f():\n    return 1"
    return course, learner


@pytest.mark.slow
def test_validate_gives_the_learner_the_graders_measurement_and_verdict(tmp_path):
    """`course validate` measures outside the kernel too, from the release's test cell, never the learner's."""
    from grading.validate import validate

    course, learner = _released_course(tmp_path, REFEREE)
    mine = tmp_path / "01_measured.ipynb"
    nbformat.write(learner, mine)
    result = validate(mine, course, Limits(cell_timeout=60), PROTECTIONS)
    [cell] = result.cells
    assert (cell.grade_id, cell.status) == ("measured", "fail")  # 2 of 3 points: partial credit
    assert "2 of 3 points, measured outside the notebook" in cell.message
    assert "measured outside: the answer defines f" in cell.message

    learner.cells[1].source = "pass  # the learner deleted the directive"
    nbformat.write(learner, mine)
    result = validate(mine, course, Limits(cell_timeout=60), PROTECTIONS)
    assert "measured outside: the answer defines f" in result.cells[0].message  # the release's cell is graded


UNMEASURED_REFEREE = """
from grading.measure import Verdict


def referee(rounds):
    with rounds.start({"entry": "grading.sandbox.rounds:echo"}, "answer") as process:
        process.wait_ready(60)
        _, message = process.round({"payload": rounds.answers["answer"]}, timeout=30)
    assert "def f" in message.arrays["payload"][2].decode(), "no f in the answer"
    return Verdict(1, "correct -> 1 point; speed: NOT MEASURED, left to your instructor", needs_manual_grade=True)
"""


@pytest.mark.slow_grading  # `course autograde` as a command: 15 s, minutes while other measurements hold the CPUs
def test_a_test_it_could_not_measure_keeps_its_points_and_waits_for_the_instructor(tmp_path):
    """A referee's needs_manual_grade verdict, graded by `course autograde`: its points, the flag, a grader note."""
    from nbgrader.api import Gradebook


    course, learner = _released_course(tmp_path, UNMEASURED_REFEREE)
    learner.cells[1].outputs = []
    folder = course.folder("submitted", "01_measured", "ann")
    folder.mkdir(parents=True)
    nbformat.write(learner, folder / "01_measured.ipynb")
    (folder / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
    command = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--jobs", "1"]
    done = subprocess.run([*command, "--no-progress"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # a grader problem: the instructor must act
    assert "could not be measured" in done.stdout + done.stderr
    with Gradebook(course.db_url) as gb:
        grade = gb.find_grade("measured", "01_measured", "01_measured", "ann")
        assert (grade.auto_score, grade.needs_manual_grade) == (1.0, True)
    graded = nbformat.read(course.folder("autograded", "01_measured", "ann") / "01_measured.ipynb", as_version=4)
    assert any("NOT MEASURED" in o.get("text", "") for c in graded.cells for o in c.get("outputs", []))


def test_only_a_measured_cells_verdict_can_ask_for_manual_grading():
    """The mark is read from measured test cells only: a learner's cell printing the same output asks for nothing."""
    measured = new_code_cell(TEST_CELL, metadata=_meta("measured", points=10))
    apply_verdict(measured, Verdict(2, "report", needs_manual_grade=True))
    assert determine_grade(measured) == (2.0, 10.0)  # the points it could decide stay
    forged = new_code_cell("print('report')", metadata=_meta("other", points=10))
    forged.outputs = [dict(o) for o in measured.outputs]  # what a kernel could display, metadata included
    nb = new_notebook(cells=[measured, forged])
    assert unmeasured(nb) == ["measured"]
    apply_verdict(measured, Verdict(10, "report"))
    assert unmeasured(nb) == []
