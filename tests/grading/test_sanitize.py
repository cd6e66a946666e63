"""The notebook that is graded: the learner's own, sanitized as nbgrader does, then hardened.

Unit tests without a kernel: unreadable files explained, written answers and added cells
kept, tests restored from the instructor's notebook, stripped answers found, damaged
metadata made harmless, grader cells added and removed.
"""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grading.guard import closing, guard
from grading.sanitize import (
    SourceNotebook,
    changed_cells,
    hidden_lines,
    is_test,
    read_submission,
    role,
    sanitize_and_harden,
    with_grader_cells,
    without_grader_cells,
)
from tests.support.paths import FIXTURES

SOURCE = FIXTURES / "notebooks" / "90_grade_fixture_tensors.ipynb"


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


STUB = "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"


def _meta(grade_id, **flags):
    meta = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3, "solution": False}
    return {"nbgrader": {**meta, "task": False, **flags}}


def _released() -> nbformat.NotebookNode:
    """A released notebook (checksums as nbgrader's generate_assignment computes them)."""
    from nbgrader import utils

    nb = new_notebook(
        cells=[
            new_markdown_cell("# Title"),
            new_code_cell(STUB, metadata=_meta("ans", solution=True)),
            new_code_cell("assert double(2) == 4", metadata=_meta("ans_tests", grade=True, locked=True, points=2)),
            new_markdown_cell("Explain.", metadata=_meta("essay", grade=True, solution=True, points=1)),
            new_markdown_cell("YOUR ANSWER HERE", metadata=_meta("essay_answer", grade=True, solution=True, points=1)),
        ]
    )
    nb.cells[3].metadata["nbgrader"].update(solution=False, grade=False, locked=True, task=False)
    nb.cells[3].metadata["nbgrader"].pop("points")
    for cell in nb.cells[1:]:
        cell.metadata["nbgrader"]["checksum"] = utils.compute_checksum(cell)
    return nb


def _spec(nb=None) -> SourceNotebook:
    return SourceNotebook.from_release(nb or _released(), "a1", "nb")


def _dump(nb) -> bytes:
    return nbformat.writes(nb).encode()


def _answered() -> nbformat.NotebookNode:
    nb = _released()
    nb.cells[1].source = "def double(x):\n    return twice(x)"
    nb.cells[4].source = "Because MY-OWN-WORDS."
    nb.cells.insert(1, new_code_cell("def twice(x):\n    return 2 * x"))  # a cell the learner added
    return nb


def test_the_learners_notebook_is_kept_whole():
    prepared = sanitize_and_harden(_dump(_answered()), _spec())
    sources = [c.source for c in prepared.nb.cells]
    assert "def twice(x):\n    return 2 * x" in sources  # the added cell, in the learner's order
    assert sources.index("def twice(x):\n    return 2 * x") < sources.index("def double(x):\n    return twice(x)")
    assert "Because MY-OWN-WORDS." in sources  # the written answer
    assert prepared.notes == [] and prepared.runnable


def test_edited_and_deleted_tests_come_back_where_they_were():
    edited = _answered()
    edited.cells[3].source = "pass  # no tests here"
    prepared = sanitize_and_harden(_dump(edited), _spec())
    test = next(c for c in prepared.nb.cells if is_test(c))
    assert test.source == "assert double(2) == 4"
    assert any("had been edited" in n for n in prepared.notes)
    assert changed_cells(edited, _spec()) == ["ans_tests"]

    deleted = _answered()
    del deleted.cells[3]
    prepared = sanitize_and_harden(_dump(deleted), _spec())
    names = [c.metadata.get("nbgrader", {}).get("grade_id") for c in prepared.nb.cells]
    assert names.index("ans_tests") == names.index("ans") + 1  # put back right after the answer
    assert any("was missing" in n for n in prepared.notes)


def test_hidden_tests_of_the_gradebook_replace_the_visible_ones():
    from dataclasses import replace

    from nbgrader import utils

    full = _released()
    full.cells[2].source += "\nassert double(5) == 10"  # what the gradebook keeps: hidden tests included
    checksum = utils.compute_checksum(full.cells[2])
    released = {c.name: c for c in _spec().cells}
    cells = [
        replace(c, checksum=checksum, released=released[c.name].source) if c.name == "ans_tests" else c
        for c in _spec(full).cells
    ]
    gradebook = SourceNotebook("a1", "nb", tuple(cells))
    prepared = sanitize_and_harden(_dump(_answered()), gradebook)
    assert next(c for c in prepared.nb.cells if is_test(c)).source.endswith("assert double(5) == 10")
    assert prepared.notes == []  # the visible part was not edited: no note


def test_stripped_metadata_is_matched_by_signature_and_tests_restored():
    stripped = _answered()
    for cell in stripped.cells:
        cell.metadata = {}
    prepared = sanitize_and_harden(_dump(stripped), _spec())
    answer = next(c for c in prepared.nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ans")
    assert answer.source == "def double(x):\n    return twice(x)"
    assert any("no nbgrader metadata" in n for n in prepared.notes)
    assert sum(1 for c in prepared.nb.cells if is_test(c)) == 1


def test_a_test_turned_into_an_answer_is_a_test_again():
    tampered = _answered()
    tampered.cells[3].metadata["nbgrader"]["solution"] = True  # nbgrader would leave it for manual grading
    prepared = sanitize_and_harden(_dump(tampered), _spec())
    test = next(c for c in prepared.nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ans_tests")
    assert is_test(test)
    assert any("metadata had been changed" in n for n in prepared.notes)


def test_damaged_or_unknown_metadata_makes_an_ordinary_cell():
    nb = _answered()
    nb.cells.append(new_code_cell("x = 1", metadata={"nbgrader": "garbage"}))
    nb.cells.append(new_code_cell("y = 2", metadata=_meta("invented", grade=True, locked=True, points=99)))
    nb.cells.append(new_code_cell("z = 3", metadata={"nbgrader": {"grade": True}}))
    prepared = sanitize_and_harden(_dump(nb), _spec())
    assert [c.metadata.get("nbgrader") for c in prepared.nb.cells[-3:]] == [None, None, None]
    assert sum("ordinary cell" in n for n in prepared.notes) == 3


def test_duplicates_follow_nbgrader_the_last_copy_is_graded():
    nb = _answered()
    wrong = copy.deepcopy(nb.cells[2])
    wrong.source = "def double(x):\n    return 0"
    wrong["id"] = "wrong-copy"
    nb.cells.insert(3, wrong)
    prepared = sanitize_and_harden(_dump(nb), _spec())
    graded = [c for c in prepared.nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ans"]
    assert len(graded) == 1 and graded[0].source.endswith("return 0")
    assert any("appears 2 times" in n for n in prepared.notes)


def test_unreadable_submission_fails_every_test():
    prepared = sanitize_and_harden(b"", _spec())
    assert not prepared.runnable and "empty" in prepared.notes[0]
    tests = [c for c in prepared.nb.cells if is_test(c)]
    assert tests and all(c.outputs[0]["ename"] == "NotGraded" for c in tests)


def test_grader_cells_round_trip_and_cells_are_renumbered():
    nb = _answered()
    guarded = with_grader_cells(nb)
    assert role(guarded.cells[0]) == "preamble"
    assert "torch" not in guarded.cells[0].source  # the notebook does not use torch: the grader does not import it
    for index, cell in enumerate(guarded.cells):
        if is_test(cell):
            assert guarded.cells[index - 1].source == guard(index - 1)
    for count, cell in enumerate(c for c in guarded.cells if c.cell_type == "code"):
        cell.execution_count = count + 1
    back = without_grader_cells(guarded, ["a note"])
    assert role(back.cells[0]) == "notes" and "a note" in back.cells[0].source
    assert [c.source for c in back.cells[1:]] == [c.source for c in nb.cells]
    assert [c.execution_count for c in back.cells if c.cell_type == "code"] == [1, 2, 3]


@pytest.mark.parametrize("with_checksums", [True, False])
def test_changed_cells_without_a_release_agree_with_nbgrader_validate(with_checksums):
    """With no release to compare with, a locked cell is changed when its checksum says so, as in nbgrader."""
    from nbgrader.validator import Validator

    nb = _answered()
    nb.cells[3].source = "pass  # no tests here"
    if not with_checksums:
        for cell in nb.cells:
            cell.metadata.get("nbgrader", {}).pop("checksum", None)
    ours = changed_cells(nb, SourceNotebook.from_release(nb, "a1", "nb", trust_sources=False))
    theirs = [cell.metadata.nbgrader["grade_id"] for cell in Validator()._get_changed_cells(nb)]
    assert ours == theirs == (["ans_tests"] if with_checksums else [])


@pytest.mark.parametrize("claimed", ["notes", "preamble", "guard", "close"])
def test_a_cell_claiming_to_be_the_graders_is_the_learners(claimed):
    """Only the grader writes its metadata: a submitted cell keeps its place and is graded, not deleted."""
    nb = _answered()
    nb.cells.insert(3, new_code_cell("import os  # EVIDENCE", metadata={"course_grading": {"role": claimed}}))
    prepared = sanitize_and_harden(_dump(nb), _spec())
    cell = next(c for c in prepared.nb.cells if "EVIDENCE" in c.source)
    assert role(cell) is None and "course_grading" not in cell.metadata
    assert any("carried the grader's own metadata" in n for n in prepared.notes)
    back = without_grader_cells(with_grader_cells(prepared.nb), ["a note"])
    assert any("EVIDENCE" in c.source for c in back.cells)
    assert [role(c) for c in with_grader_cells(prepared.nb).cells].count(None) == len(prepared.nb.cells)


def test_hidden_lines_are_those_the_release_lacks_and_the_checks_are_told():
    from dataclasses import replace

    from nbgrader import utils

    hidden = "assert double(5) == 10, 'double(5)'\nassert double(-1) == -2"
    full = _released()
    full.cells[2].source += "\n### BEGIN HIDDEN TESTS\n" + hidden + "\n### END HIDDEN TESTS"
    checksum = utils.compute_checksum(full.cells[2])
    released = {c.name: c for c in _spec().cells}
    cells = [
        replace(c, checksum=checksum, released=released[c.name].source) if c.name == "ans_tests" else c
        for c in _spec(full).cells
    ]
    prepared = sanitize_and_harden(_dump(_answered()), SourceNotebook("a1", "nb", tuple(cells)))
    test = next(c for c in prepared.nb.cells if is_test(c))
    assert hidden_lines(test) == [1, 2, 3, 4]  # the markers too: the release shows neither
    guarded = with_grader_cells(prepared.nb)
    at = next(i for i, c in enumerate(guarded.cells) if is_test(c))
    assert guarded.cells[at - 1].source == guard(at - 1, [1, 2, 3, 4])
    assert role(guarded.cells[at + 1]) == "close" and guarded.cells[at + 1].source == closing(at + 1)
    back = without_grader_cells(guarded, [])
    assert all("course_grading" not in c.metadata for c in back.cells)  # the autograded notebook has none


def test_without_a_release_the_hidden_lines_are_between_nbgraders_markers():
    from nbgrader import utils

    nb = _released()
    nb.cells[2].source = "x = 1\n### BEGIN HIDDEN TESTS\nassert x == 1\n### END HIDDEN TESTS\ny = 2"
    nb.cells[2].metadata["nbgrader"]["checksum"] = utils.compute_checksum(nb.cells[2])
    spec = SourceNotebook.from_release(nb, "a1", "nb", trust_sources=False)
    prepared = sanitize_and_harden(_dump(nb), spec)
    assert hidden_lines(next(c for c in prepared.nb.cells if is_test(c))) == [1, 2, 3]
