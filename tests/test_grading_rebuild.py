"""The notebook that is graded: unreadable files explained, tests restored, answers matched."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from course_utils.grading.guard import GUARD
from course_utils.grading.rebuild import (
    is_test,
    read_submission,
    rebuild,
    role,
    with_grader_cells,
    without_grader_cells,
)

SOURCE = Path(__file__).parent / "fixtures" / "grading" / "notebooks" / "90_grade_fixture_tensors.ipynb"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"\x80\x81abc", "not UTF-8"),
        (b'{"cells": [', "not valid JSON"),
        (b'{"hello": 1}', "not a notebook"),
        (b"[1, 2]", "not a notebook"),
    ],
)
def test_unreadable_files_are_explained(data, reason):
    nb, problem, _ = read_submission(data)
    assert nb is None and reason in problem


def test_old_nbformat_is_upgraded():
    nb = nbformat.read(SOURCE, as_version=4)
    data = nbformat.writes(nbformat.convert(nb, 3), version=3).encode()
    upgraded, problem, version = read_submission(data)
    assert problem is None and version == 3 and upgraded.nbformat == 4


def _parts():
    source = nbformat.read(SOURCE, as_version=4)
    released = copy.deepcopy(source)
    locked = {}
    for cell in released.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = cell.source.split("### BEGIN SOLUTION")[0] + "raise NotImplementedError()"
        if meta.get("locked"):
            locked[meta["grade_id"]] = (cell.source, "checksum-" + meta["grade_id"])
            cell.source = cell.source.split("### BEGIN HIDDEN TESTS")[0]
    return source, released, locked


def test_tests_come_back_from_the_gradebook_and_only_answers_are_taken():
    source, released, locked = _parts()
    submitted = copy.deepcopy(source)
    submitted.cells = [c for c in submitted.cells if not is_test(c)]  # tests deleted
    submitted.cells.append(new_code_cell("import os; os.system('rm -rf /')"))  # an added cell
    rebuilt = rebuild(nbformat.writes(submitted).encode(), released, locked)
    tests = [c for c in rebuilt.nb.cells if is_test(c)]
    assert [c.source for c in tests] == [locked[c.metadata.nbgrader["grade_id"]][0] for c in tests]
    assert "BEGIN HIDDEN TESTS" in tests[0].source
    assert all("rm -rf" not in c.source for c in rebuilt.nb.cells)
    answers = [c for c in rebuilt.nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert all("NotImplementedError" not in c.source for c in answers)
    assert rebuilt.notes == [] and rebuilt.runnable


def test_stripped_metadata_is_matched_by_signature():
    source, released, locked = _parts()
    submitted = copy.deepcopy(source)
    for cell in submitted.cells:
        cell.metadata = {}
    rebuilt = rebuild(nbformat.writes(submitted).encode(), released, locked)
    answers = [c for c in rebuilt.nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert all("### BEGIN SOLUTION" in c.source for c in answers)
    assert len(rebuilt.notes) == 3 and all("no nbgrader metadata" in n for n in rebuilt.notes)


def test_unreadable_submission_fails_every_test():
    _, released, locked = _parts()
    rebuilt = rebuild(b"", released, locked)
    assert not rebuilt.runnable and "empty" in rebuilt.notes[0]
    tests = [c for c in rebuilt.nb.cells if is_test(c)]
    assert tests and all(c.outputs[0]["ename"] == "NotGraded" for c in tests)


def test_grader_cells_round_trip():
    source, _, _ = _parts()
    guarded = with_grader_cells(source)
    assert role(guarded.cells[0]) == "preamble"
    for index, cell in enumerate(guarded.cells):
        if is_test(cell):
            assert guarded.cells[index - 1].source == GUARD
    back = without_grader_cells(guarded, ["a note"])
    assert role(back.cells[0]) == "notes" and "a note" in back.cells[0].source
    assert [c.source for c in back.cells[1:]] == [c.source for c in source.cells]
