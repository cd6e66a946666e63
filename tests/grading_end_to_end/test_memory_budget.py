"""A job's memory budget holds the kernel and every process it starts: issue 29, graded for real.

A hostile learner's cell forks three children that each allocate and touch 300 MiB, then wait:
each child alone is far within its address-space limit (``--memory-gb``, 6 GiB per process),
together they hold 900 MiB. ``course autograde --jobs 2 --job-memory-gb 0.5`` (the budget
set as an instructor would) grades it beside a neighbour that holds 200 MiB of its own at
the same time, at the ``root`` level of this machine's cgroup layout:

* the hostile cell fails with the budget's message, its kernel and children are gone, and
  grading goes on in a fresh kernel: the exercise after it still scores;
* the neighbour keeps its full grade, and the command exits 0;
* the wrong defence: without the budget (``--job-memory-gb 0``) the same three children all
  live to the end, each holding its 300 MiB (what one submission could do 256 times over).
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grading.coursedir import Course
from grading.release import release
from grading.sandbox.protections import detect
from tests.support.submissions import cell_meta, graded, score, submit

pytestmark = pytest.mark.slow_grading  # `course autograde`, twice: about a minute

PROTECTIONS = detect()
NAME = "01_memory"
BUDGETED = PROTECTIONS.level == "root" and PROTECTIONS.memory is not None and bool(PROTECTIONS.memory.hierarchy)

ANSWER = "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n"
ANSWER_TEST = "assert answer() == 42, 'answer() should return 42'\n"
DOUBLE = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"
DOUBLE_TEST = "assert double(21) == 42, 'double(21) should be 42'\n"

# The hostile cell: three children, each resident with CHILD_MIB, say so through a pipe and wait.
CHILDREN = """
import os, time

read_end, write_end = os.pipe()
children = []
for number in range(3):
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        block = bytearray(300 << 20)
        block[::4096] = b"x" * len(range(0, len(block), 4096))  # every page touched: resident
        status = open("/proc/self/status").read()
        resident = int(status.split("VmRSS:")[1].split()[0]) // 1024
        os.write(write_end, f"child {number} resident {resident} MiB\\n".encode())
        time.sleep(8)
        os._exit(0)
    children.append(pid)
os.close(write_end)
with os.fdopen(read_end) as reports:
    for line in reports:  # until every child has exited
        print(line.strip(), flush=True)
statuses = [os.waitpid(pid, 0)[1] for pid in children]
print("children alive to the end:", sum(status == 0 for status in statuses))
"""

# The neighbour's own cell: 200 MiB of its own, held while the hostile job runs.
NEIGHBOUR = """
import time

held = bytearray(200 << 20)
held[::4096] = b"y" * len(range(0, len(held), 4096))
time.sleep(10)
print("neighbour held", len(held) >> 20, "MiB")
"""


def _course(root: Path, extra: dict[str, str]) -> Course:
    """A two-exercise course, released; each student of ``extra`` submits right answers with that cell after ex1."""
    notebooks = root / "notebooks"
    notebooks.mkdir(parents=True)
    source = new_notebook(
        cells=[
            new_code_cell(ANSWER, metadata=cell_meta("answer", solution=True)),
            new_code_cell(ANSWER_TEST, metadata=cell_meta("answer_test", solution=False)),
            new_code_cell(DOUBLE, metadata=cell_meta("double", solution=True)),
            new_code_cell(DOUBLE_TEST, metadata=cell_meta("double_test", solution=False)),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(source, notebooks / f"{NAME}.ipynb")
    course = Course(root=root / "course", notebooks=notebooks)
    course.root.mkdir()
    (course.root / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\nc.Execute.timeout = 60\n")
    release(course)
    released = nbformat.read(course.folder("release", NAME) / f"{NAME}.ipynb", as_version=4)
    for student, cell in extra.items():
        nb = nbformat.from_dict(released)
        nb.cells[0].source = ANSWER.replace("### ", "# ")
        nb.cells[2].source = DOUBLE.replace("### ", "# ")
        nb.cells.insert(2, new_code_cell(cell))
        submit(course, NAME, student, nb)
    return course


def _autograde(course: Course, budget_gb: float) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--jobs", "2"]
    command += ["--job-memory-gb", str(budget_gb), "--no-progress"]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def _cell(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    return next(cell for cell in nb.cells if cell.cell_type == "code" and cell.source == source)


def _printed(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o["output_type"] == "stream")


def _notes(nb: nbformat.NotebookNode) -> str:
    """The grading notes cell's text (its markdown escapes punctuation)."""
    notes = nb.cells[0] if nb.cells and nb.cells[0].get("id", "").startswith("grading-notes") else None
    return html.unescape(notes.source) if notes is not None else ""


def _scores(course: Course) -> dict[str, tuple[float, float]]:
    return {student: score(course, NAME, student) for student in ("hog", "neighbour")}


def _resident(text: str) -> list[int]:
    return [int(mib) for mib in re.findall(r"child \d resident (\d+) MiB", text)]


@pytest.mark.skipif(not BUDGETED, reason="; ".join(PROTECTIONS.missing()) or "no memory budget here")
def test_three_children_past_the_budget_lose_their_kernel_and_cost_the_neighbour_nothing(tmp_path):
    course = _course(tmp_path / "budget", {"hog": CHILDREN, "neighbour": NEIGHBOUR})
    done = _autograde(course, 0.5)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    hog = graded(course, NAME, "hog")
    cell = _cell(hog, CHILDREN)
    words = "the kernel and the processes it started went past the job's memory budget (512 MiB in all)"
    error = cell.outputs[-1]
    assert error["output_type"] == "error" and error["ename"] == "KernelDied", cell.outputs
    assert error["evalue"] == words, cell.outputs
    assert "children alive to the end" not in _printed(cell)  # the cell never got there: every child went
    assert f"{words}." in _notes(hog), _notes(hog)
    print(f"\nwith a budget of 512 MiB: {_printed(cell).strip()!r}, then KernelDied: {error['evalue']}")

    neighbour = graded(course, NAME, "neighbour")
    assert _printed(_cell(neighbour, NEIGHBOUR)) == "neighbour held 200 MiB\n"
    assert "memory budget" not in _notes(neighbour)
    # the hog's exercise after its cell still scored in a fresh kernel; the neighbour kept its full grade
    assert _scores(course) == {"hog": (2.0, 2.0), "neighbour": (2.0, 2.0)}


def test_without_the_budget_the_same_children_all_live(tmp_path):
    """The wrong defence, the address space per process alone: each child is within it, all three live."""
    course = _course(tmp_path / "no-budget", {"hog": CHILDREN, "neighbour": NEIGHBOUR})
    done = _autograde(course, 0)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = _printed(_cell(graded(course, NAME, "hog"), CHILDREN))
    resident = _resident(printed)
    print(f"\nwithout a budget: each child resident {resident} MiB; {printed.splitlines()[-1]}")
    assert len(resident) == 3 and all(mib >= 290 for mib in resident), printed
    assert "children alive to the end: 3" in printed, printed
    assert _scores(course) == {"hog": (2.0, 2.0), "neighbour": (2.0, 2.0)}
