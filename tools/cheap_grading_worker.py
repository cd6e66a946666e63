"""A Dask worker preload for ``tools/coordinator_benchmark.py``: grading workers whose kernels cost nothing.

``dask worker --preload tools/cheap_grading_worker.py`` makes this worker grade every task
through the grader's own code (``grading.cluster.tasks.grade``, ``grading.sandbox.worker.run_job``:
unpacking the files, the working folder, the results) except the jailed Jupyter kernel: each
code cell of the learner's is run with ``exec`` in this worker thread, in one namespace per
notebook, and given the outputs a kernel gives (stdout, the last expression's value, the
error with its traceback); the grader's own cells (preamble, guards) are skipped. So the
coordinator gets a realistic result for each notebook at a small fraction of a kernel's cost,
and what the benchmark measures is the coordinator. For the benchmark's own notebooks only:
nothing here is a sandbox, and it must never grade a real class.
"""

from __future__ import annotations

import ast
import contextlib
import io
import traceback
from typing import Any

__all__ = ["cheap_execute", "dask_setup"]


def _run_cell(source: str, namespace: dict, count: int) -> list:
    """A cell's outputs as a kernel would give them: its stdout, its last expression's value or its error."""
    from nbformat.v4 import new_output

    outputs = []
    stdout = io.StringIO()
    try:
        tree = ast.parse(source)
        final = tree.body[-1] if tree.body else None
        last = final if isinstance(final, ast.Expr) else None
        if last is not None:
            tree.body.pop()
        with contextlib.redirect_stdout(stdout):
            exec(compile(tree, f"<cell {count}>", "exec"), namespace)
            value = eval(compile(ast.Expression(last.value), f"<cell {count}>", "eval"), namespace) if last else None
        if stdout.getvalue():
            outputs.append(new_output("stream", name="stdout", text=stdout.getvalue()))
        if value is not None:
            outputs.append(new_output("execute_result", data={"text/plain": repr(value)}, execution_count=count))
    except Exception as error:
        if stdout.getvalue():
            outputs.append(new_output("stream", name="stdout", text=stdout.getvalue()))
        lines = traceback.format_exception_only(type(error), error)
        outputs.append(new_output("error", ename=type(error).__name__, evalue=str(error), traceback=lines))
    return outputs


def cheap_execute(nb: Any, new_kernel: Any, limits: Any, notes: list, token: Any = None, skip: Any = frozenset()):
    """``grading.sandbox.execute.execute``'s signature: run the learner's cells of ``nb`` in place, without a kernel."""
    from grading.sanitize import role

    namespace: dict = {"__name__": "__main__"}
    count = 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index in skip or not cell.source.strip() or role(cell):
            continue
        count += 1
        cell.execution_count = count
        cell.outputs = _run_cell(cell.source, namespace, count)
    return nb


class _InThreadPool:
    """``grading.cluster.tasks``' one-slot grading pool, run in the Dask worker's thread, not in a grading worker."""

    def __init__(self, hide: list[str]):
        from grading.sandbox.protections import Limits

        self.limits = Limits()
        self.hide = hide
        self._done: list[tuple[str, Any]] = []

    def submit(self, task_id: str, task: Any) -> None:
        """Run ``task`` (a ``grading.jobs.Task``) now, as slot 0 of a pool without a sandbox."""
        from grading.jobs import Job, Result
        from grading.sandbox.worker import run_job

        job = Job(task, slot=0, limits=self.limits, level="none", hide=tuple(self.hide), private_tmp=False)
        result = run_job(Job.from_json(job.to_json()))
        self._done.append((task_id, Result.from_json(result.to_json())))  # through JSON, as from a worker's pipe

    def next_result(self, timeout: float | None = None) -> tuple[str, Any] | None:
        return self._done.pop(0) if self._done else None


def dask_setup(worker: Any) -> None:
    """Dask's preload hook: swap the kernel and the grading worker process for the cheap ones above."""
    import grading.cluster.tasks
    import grading.sandbox.execute

    grading.sandbox.execute.execute = cheap_execute
    grading.cluster.tasks._thread_pool = lambda protections, hide: _InThreadPool(list(hide))
