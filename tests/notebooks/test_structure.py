"""Static checks of every notebook: format, skeleton, and nbgrader metadata."""

from __future__ import annotations

import re

import nbformat
import pytest

from tests.support.nbtools import NOTEBOOKS, is_solution_cell, is_test_cell, nbgrader_meta, read

ids = [p.stem for p in NOTEBOOKS]


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found in notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_valid_nbformat_and_stripped(path):
    nb = read(path)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: outputs committed (run nbstripout)"
            assert cell.execution_count is None, f"{path.name}: execution count committed"
        assert "NBVAL_SKIP" not in cell.source, f"{path.name}: cells may not be skipped"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_file_name_and_skeleton(path):
    assert re.fullmatch(r"\d\d_[a-z0-9]+(_[a-z0-9]+)+", path.stem), f"{path.name}: name it NN_verb_topic.ipynb"
    nb = read(path)
    title = nb.cells[0].source
    assert nb.cells[0].cell_type == "markdown" and title.startswith(f"# {path.stem[:2]} "), "title cell first"
    assert "colab.research.google.com" in title and f"grading/course/release/{path.stem}/{path.stem}.ipynb" in title
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for heading in ("What you'll learn", "Summary", "Further reading"):
        assert heading in markdown, f"{path.name}: missing a '{heading}' section"
    setup = next(c for c in nb.cells if c.cell_type == "code")
    assert "google.colab" in setup.source and "pick_device" in setup.source, "first code cell is the setup cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_graded_exercises(path):
    nb = read(path)
    tests = [c for c in nb.cells if is_test_cell(c)]
    solutions = [c for c in nb.cells if is_solution_cell(c)]
    assert 3 <= len(tests) <= 5, f"{path.name}: {len(tests)} graded test cells, want 3 to 5"
    assert len(solutions) >= len(tests), f"{path.name}: every exercise needs a solution cell"
    grade_ids = [nbgrader_meta(c)["grade_id"] for c in nb.cells if nbgrader_meta(c)]
    assert len(grade_ids) == len(set(grade_ids)), f"{path.name}: duplicate grade_id"
    for cell in solutions:
        assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
    for cell in tests:
        meta = nbgrader_meta(cell)
        assert meta.get("points", 0) > 0 and meta.get("locked"), f"{meta['grade_id']}: points and locked"
        assert "### BEGIN HIDDEN TESTS" in cell.source, f"{meta['grade_id']}: needs hidden tests"
        visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        assert "check_" in visible or "assert" in visible, f"{meta['grade_id']}: needs visible tests"
