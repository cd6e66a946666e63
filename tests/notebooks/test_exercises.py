"""Every graded test cell fails without its solution, and the demos never need one.

Each notebook runs once with all solutions replaced by nbgrader's stub
(``raise NotImplementedError()``), the way a learner first opens it. Then:

* every graded test cell must raise (a test that passes with no answer grades nothing);
* no other cell may raise (exercises are independent: demos never use an answer);
* nothing may print a deprecation warning.

The same notebooks with their solutions are run by nbval (``pytest notebooks/``), which
shows that every test cell passes with the solution in place.
"""

from __future__ import annotations

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from tests.support.nbtools import NOTEBOOKS, clear_solutions, execute, exercise_problems, read

pytestmark = pytest.mark.exercises  # `make exercises-test` runs these, `make test` leaves them out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_test_cells_fail_and_demos_run_without_solutions(path):
    problems = exercise_problems(execute(clear_solutions(read(path))))
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def _cell(role, error=False, text=""):
    cell = new_code_cell("pass")
    if role:
        cell.metadata["nbgrader"] = {"grade_id": role, "grade": role == "test", "solution": role == "solution"}
    if error:
        cell.outputs.append(new_output("error", ename="NotImplementedError", evalue="", traceback=[]))
    if text:
        cell.outputs.append(new_output("stream", name="stderr", text=text))
    return cell


def test_checker_accepts_a_well_formed_run():
    nb = new_notebook(cells=[_cell(None), _cell("solution", error=True), _cell("test", error=True)])
    assert exercise_problems(nb) == []


def test_checker_flags_each_kind_of_problem():
    nb = new_notebook(
        cells=[
            _cell("test"),  # passes without a solution
            _cell(None, error=True),  # a demo that needed an answer
            _cell(None, text="x.py:1: DeprecationWarning: old"),
        ]
    )
    problems = exercise_problems(nb)
    assert len(problems) == 3
    assert "passes without its solution" in problems[0]
    assert "depends on an exercise" in problems[1]
    assert "deprecation warning" in problems[2]
