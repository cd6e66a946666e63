"""What the guard costs a test cell: CPU time of each graded test cell, plain and guarded.

Usage (from the repository root; one notebook per process, since the guard's audit hook
stays for the life of the interpreter)::

    .venv/bin/python tools/guard_cost.py plain   notebooks/10_*.ipynb
    .venv/bin/python tools/guard_cost.py guarded notebooks/10_*.ipynb [--package-root DIR]

It runs the instructor's notebook (solutions in) in an in-process IPython shell, in quick mode
with one thread, as the grader's kernels do, and prints one JSON line per test cell:
``{"notebook", "grade_id", "cpu_s", "ok"}``: ``cpu_s`` is ``time.process_time()`` around the
test cell alone (the guard's check and closing cells are not counted), ``ok`` whether it
passed (guarded: and its closing cell found nothing). ``guarded`` runs the grader's
preamble, check and closing cells around each test cell, as ``course autograde`` does;
``--package-root`` puts another copy of the ``grading`` package first on ``sys.path``
(an older guard, to compare). This is a measuring tool, not a
test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _hidden(source: str) -> tuple[int, ...]:
    lines, inside = [], False
    for number, line in enumerate(source.split("\n")):
        if "### BEGIN HIDDEN TESTS" in line:
            inside = True
        if inside:
            lines.append(number)
        if "### END HIDDEN TESTS" in line:
            inside = False
    return tuple(lines)


def measure(path: str, guarded: bool) -> list[dict]:
    """Run the notebook at ``path``; the CPU time of each graded test cell."""
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell

    nb = nbformat.read(path, as_version=4)
    shell = InteractiveShell.instance()
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    folder = os.path.dirname(os.path.abspath(path))
    os.chdir(folder)
    if guarded:
        from grading.guard import closing, guard, preamble

        result = shell.run_cell(preamble(sources))
        if not result.success:
            raise SystemExit(f"the preamble failed: {result.error_in_exec!r}")
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            shell.run_cell(cell.source, silent=False)
            continue
        if guarded:
            shell.run_cell(guard(2 * index, _hidden(cell.source)))
        start = time.process_time()
        result = shell.run_cell(cell.source, store_history=False)
        spent = time.process_time() - start
        ok = bool(result.success)
        if guarded:
            ok = ok and bool(shell.run_cell(closing(2 * index + 1)).success)
        found.append({"notebook": os.path.basename(path), "grade_id": meta.get("grade_id"),
                      "cpu_s": round(spent, 4), "ok": ok})  # fmt: skip
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["plain", "guarded"])
    parser.add_argument("notebook")
    parser.add_argument("--package-root", help="a folder holding another copy of the grading package")
    args = parser.parse_args(argv)
    os.environ.update(COURSE_QUICK="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, here)
    if args.package_root:
        sys.path.insert(0, os.path.abspath(args.package_root))
    notebook = os.path.abspath(args.notebook)
    for row in measure(notebook, args.mode == "guarded"):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
