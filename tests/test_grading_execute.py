"""The executor's output handling: the flood cap and the profiler's stderr chatter."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from grading.sandbox.execute import JailedKernelManager, _Client, drop_profiler_chatter, explain_limits
from grading.sandbox.protections import Limits

SOURCE = Path(__file__).parent / "fixtures" / "grading" / "notebooks" / "90_grade_fixture_tensors.ipynb"


def test_output_cap_keeps_what_decides_a_grade():
    nb = nbformat.read(SOURCE, as_version=4)
    client = _Client(nb, JailedKernelManager(), Limits(output_bytes=1000))
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
