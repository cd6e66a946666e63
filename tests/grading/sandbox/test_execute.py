"""The executor: the flood cap, the profiler's stderr chatter, hidden tests kept out, and time limits
that count a cell's CPU time (real kernels beside busy processes the grader does not control)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from grading.sandbox.execute import (
    GRADER_PROBLEM,
    JailedKernelManager,
    drop_profiler_chatter,
    execute,
    explain_limits,
)
from grading.sandbox.kernel import CellClient
from grading.sandbox.leaks import keep_hidden_tests_out
from grading.sandbox.protections import Limits
from tests.support.paths import FIXTURES

# Real kernels, servers or processes for seconds: `make test` runs this file, `make test-fast` does not.
pytestmark = pytest.mark.slow

SOURCE = FIXTURES / "notebooks" / "90_grade_fixture_tensors.ipynb"


def test_output_cap_keeps_what_decides_a_grade():
    nb = nbformat.read(SOURCE, as_version=4)
    client = CellClient(nb, JailedKernelManager(), Limits(output_bytes=1000))
    client.clear_before_next_output = False  # set by nbclient when a cell starts

    def message(kind, **content):
        return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "m"}, "content": content}

    outs = []
    for _ in range(50):
        client.output(outs, message("stream", name="stdout", text="spam " * 40), None, 3)
    client.output(outs, message("stream", name="stderr", text="warning\n" * 400), None, 3)
    client.output(outs, message("error", ename="AssertionError", evalue="x" * 10**5, traceback=["t"] * 500), None, 3)
    assert sum(len(o.get("text", "")) for o in outs) < 2000
    assert any("output truncated by the grader" in o.get("text", "") for o in outs)
    assert any(o.get("name") == "stderr" for o in outs)  # nbgrader fails a test that wrote to stderr
    error = next(o for o in outs if o["output_type"] == "error")
    assert error["ename"] == "AssertionError" and len(error["evalue"]) == 1000 and len(error["traceback"]) == 20


def test_profiler_chatter_is_dropped_and_nothing_else():
    chatter = (
        "USDT:2026-11-22 00:56:43 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        "STAGE:2026-11-22 00:56:43 1:1 ActivityProfilerController.cpp:312] Completed Stage: Collection\n"
    )
    cells = [
        new_code_cell("a", outputs=[new_output("stream", name="stderr", text=chatter)]),
        new_code_cell("b", outputs=[new_output("stream", name="stderr", text=chatter + "UserWarning: real\n")]),
        new_code_cell("c", outputs=[new_output("stream", name="stderr", text="USDT: printed by a learner\n")]),
    ]
    nb = new_notebook(cells=cells)
    drop_profiler_chatter(nb)
    assert nb.cells[0].outputs == []
    assert nb.cells[1].outputs[0]["text"] == "UserWarning: real\n"
    assert nb.cells[2].outputs[0]["text"] == "USDT: printed by a learner\n"


def test_an_error_a_sandbox_limit_caused_says_which_limit_and_how_much():
    """The Inductor error of a compile that hit the disk limit had only a g++ command on its first line."""
    compile_error = "CppCompileError: C++ compile error\n\nCommand:\ng++ ... -o /tmp/x.so\n\nOutput:\n"
    cells = [
        new_code_cell("a", outputs=[new_output("error", ename="InductorError", evalue=compile_error,
                                               traceback=["...", "OSError: [Errno 28] No space left on device"])]),
        new_code_cell("b", outputs=[new_output("error", ename="MemoryError", evalue="", traceback=[])]),
        new_code_cell("c", outputs=[new_output("error", ename="AssertionError", evalue="wrong", traceback=[])]),
    ]  # fmt: skip
    nb = new_notebook(cells=cells)
    notes: list[str] = []
    explain_limits(nb, Limits(disk_bytes=1 << 30, memory_bytes=6 << 30), notes)
    first_line = nb.cells[0].outputs[0]["evalue"].splitlines()[0]
    assert first_line.startswith("CppCompileError: C++ compile error [grading sandbox: the sandbox's temporary disk")
    assert "1 GiB" in first_line and "g++" in nb.cells[0].outputs[0]["evalue"]  # the rest is kept
    assert "memory limit was reached (6 GiB" in nb.cells[1].outputs[0]["evalue"]
    assert nb.cells[2].outputs[0]["evalue"] == "wrong"  # the learner's own failures are left alone
    assert len(notes) == 2
    explain_limits(nb, Limits(), notes)  # idempotent
    assert nb.cells[0].outputs[0]["evalue"].count("[grading sandbox:") == 1


HIDDEN_CHECK = 'check_int(matmul_flops(7, 5, 3), 210, "matmul_flops(7, 5, 3)")'


TEST_META = {"grade": True, "grade_id": "ex1_tests", "locked": True, "points": 1, "schema_version": 3,
             "solution": False, "task": False}  # fmt: skip


def _leaky_notebook(printed: list[dict]) -> nbformat.NotebookNode:
    test = new_code_cell(
        'check_int(matmul_flops(2, 3, 4), 48, "matmul_flops(2, 3, 4)")\n### BEGIN HIDDEN TESTS\n'
        f"{HIDDEN_CHECK}\nx = 1\n### END HIDDEN TESTS",
        metadata={"nbgrader": TEST_META, "course_grading": {"hidden_lines": [1, 2, 3, 4]}},
    )
    other = new_code_cell("x = 1", metadata={"nbgrader": {**test.metadata["nbgrader"], "grade_id": "ex2_tests"}})
    return new_notebook(cells=[test, other, new_code_cell("print(stolen)", outputs=printed)])


@pytest.mark.parametrize(
    "output",
    [
        new_output("stream", name="stdout", text=f"found: {HIDDEN_CHECK}\n"),
        new_output("execute_result", data={"text/plain": repr(["x = 1\n" + HIDDEN_CHECK + "\n"])}, execution_count=3),
        new_output("display_data", data={"text/html": f"<pre>{html.escape(HIDDEN_CHECK)}</pre>"}),
        new_output("error", ename="ValueError", evalue="x", traceback=[f"\x1b[31m{HIDDEN_CHECK}\x1b[0m"]),
    ],
    ids=["printed", "repr", "html", "coloured traceback"],
)
def test_an_output_with_a_hidden_line_is_removed_and_its_test_scores_0(output):
    nb = _leaky_notebook([output])
    notes: list[str] = []
    keep_hidden_tests_out(nb, notes)
    assert HIDDEN_CHECK not in json.dumps(nb.cells[2].outputs) and "hidden tests of `ex1_tests`" in json.dumps(
        nb.cells[2].outputs
    )
    error = next(o for o in nb.cells[0].outputs if o["output_type"] == "error")
    assert error["ename"] == "GradingIntegrityError" and "the output of code cell 3" in error["evalue"]
    assert notes == [f"`ex1_tests`: {error['evalue']} (that output was removed)."]
    assert not nb.cells[1].outputs  # the other test is not concerned


def test_short_or_visible_lines_are_no_secret():
    """A hidden line under 8 characters (`x = 1`), or one the visible text also has, proves nothing."""
    nb = _leaky_notebook([new_output("stream", name="stdout", text="x = 1\nmatmul_flops(2, 3, 4)\n")])
    notes: list[str] = []
    keep_hidden_tests_out(nb, notes)
    assert notes == [] and nb.cells[2].outputs[0]["text"] == "x = 1\nmatmul_flops(2, 3, 4)\n"


def test_after_a_flood_is_interrupted_the_next_cells_answer_is_not_lost(tmp_path):
    """A flood leaves seconds of output queued after its time limit (CI, stop 25: a grader check
    after `floods_output` lost its answer, and the grade read 'the submission replaced it').

    Each interrupted flood keeps what it defined first (as in nbgrader), and the cell after it
    gets its own result. Before the fix, each of these cells lost its answer (100 kB a line
    queues more than a line of 1 kB, where one cell in four lost it).
    """
    flood = "while True:\n    print('spam ' * 20_000)"
    cells = []
    for round_ in range(2):
        cells += [new_code_cell(f"defined_{round_} = {round_}\n{flood}"), new_code_cell(f"defined_{round_} + 40")]
    nb = new_notebook(cells=cells)

    def new_kernel() -> JailedKernelManager:  # the executor's logic, without the sandbox's jail
        km = JailedKernelManager()
        workdir = Path(tempfile.mkdtemp(dir=tmp_path))
        km.configure([], workdir, workdir / "kernel.log")
        return km

    notes: list[str] = []
    execute(nb, new_kernel, Limits(cell_timeout=3, notebook_timeout=120), notes)
    results = [[o["data"]["text/plain"] for o in nb.cells[i].outputs if o["output_type"] == "execute_result"]
               for i in (1, 3)]  # fmt: skip
    assert results == [["40"], ["41"]], notes
    assert [note.split(" (")[0] for note in notes] == [
        f"Cell code cell {i} exceeded its 3 s time limit" for i in (1, 3)
    ]


@pytest.fixture
def outside_load():
    """Two busy processes per core that the grader does not control (the machine's other users), killed at the end."""
    busy = [
        subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))
    ]
    yield
    for process in busy:
        process.kill()
        process.wait()


def _kernels(tmp_path: Path, cgroup: bool = False) -> Callable[[], JailedKernelManager]:
    """Kernels for ``execute`` without the jail; with ``cgroup``, their CPU time is read from a cgroup of their own."""

    def new_kernel() -> JailedKernelManager:
        km = JailedKernelManager()
        workdir = Path(tempfile.mkdtemp(dir=tmp_path))
        km.configure([], workdir, workdir / "kernel.log")
        if cgroup:
            from grading.sandbox.cputime import account

            km.cpu_account = account("root")
            if not km.cpu_account.exact:
                pytest.skip("needs root and a writable cgroup hierarchy with CPU accounting")
        return km

    return new_kernel


def _printed(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o["output_type"] == "stream")


@pytest.mark.parametrize("cgroup", [False, True], ids=["process tree", "cgroup"])
def test_a_cell_that_burns_cpu_is_stopped_at_its_cpu_limit_and_the_kernel_goes_on(tmp_path, outside_load, cgroup):
    """Beside two busy processes per core, the loop counts its own CPU time: it had its limit's 1 s
    of it when it was stopped (the old wall-clock limit stopped it after 1 s of wall time, with less)."""
    burner = (
        "import time\nstart, spent = time.process_time(), 0.0\nwhile True:\n    spent = time.process_time() - start"
    )
    nb = new_notebook(cells=[new_code_cell(burner), new_code_cell("print(round(spent, 2))")])
    notes: list[str] = []
    execute(nb, _kernels(tmp_path, cgroup), Limits(cell_timeout=1, notebook_timeout=120), notes)
    assert nb.cells[0].outputs[-1]["ename"] == "CellTimeoutError", nb.cells[0].outputs
    spent = float(_printed(nb.cells[1]))  # the same kernel: it still has the loop's variables
    assert 0.95 <= spent <= 2.0, notes
    assert len(notes) == 1 and notes[0].startswith("Cell code cell 1 exceeded its 1 s time limit"), notes


def test_a_cell_that_waits_for_ever_is_stopped_by_the_wall_clock_limit(tmp_path, outside_load):
    """A sleep uses no CPU: the cell is stopped at 4 times its limit and the note says it was waiting,
    even beside two busy processes per core (its kernel waited on no run queue: not held back)."""
    nb = new_notebook(cells=[new_code_cell("import time\ntime.sleep(10_000)"), new_code_cell("print('after')")])
    notes: list[str] = []
    execute(nb, _kernels(tmp_path), Limits(cell_timeout=1, notebook_timeout=60), notes)
    assert "4 s wall-clock time limit" in nb.cells[0].outputs[-1]["evalue"], nb.cells[0].outputs
    assert _printed(nb.cells[1]) == "after\n"
    assert len(notes) == 1 and "4 s wall-clock time limit" in notes[0], notes
    used = float(re.search(r"having used ([0-9.]+) s of its 1 s of CPU time", notes[0]).group(1))
    assert used < 0.5, notes  # a sleep: the kernel's own bookkeeping only (0.0-0.1 s, more on a loaded machine)
    assert "it was waiting" in notes[0] and not notes[0].startswith(GRADER_PROBLEM), notes


def test_a_cell_within_its_cpu_limit_passes_on_a_loaded_machine(tmp_path, outside_load):
    """The cell needs 1 s of CPU time, its limit is 2 s: beside two busy processes per core it takes
    more than 2 s of wall time, which the old wall-clock limit failed (notebook 10's exercise 1)."""
    work = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1.0:\n    pass\nprint('done')"
    nb = new_notebook(cells=[new_code_cell(work)])
    notes: list[str] = []
    execute(nb, _kernels(tmp_path), Limits(cell_timeout=2, notebook_timeout=120), notes)
    assert _printed(nb.cells[0]) == "done\n" and notes == [], (nb.cells[0].outputs, notes)
