"""Attacks on the guard itself, as real submissions graded by ``course autograde --jobs 2`` (issue 23, section 2).

The class is ``tests/fixtures/grading/guard_attacks.py``: what a check function is made of
(its code, keyword defaults, closures, globals, builtins, module attributes, abstract classes,
``__wrapped__``), grader metadata a submission writes, the guard's own state, changes made
while a test runs, and the ways code in the kernel can read the tests. Each gets its score
and note; the evidence stays in the autograded notebook; and no line of a hidden test is in
any output of the autograded notebooks nor in the ``--hide-hidden-tests`` feedback.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest

from grading.autograde import autograde
from grading.collect import collect
from grading.coursedir import Course
from grading.feedback import feedback
from grading.release import release, secret_blocks
from grading.sandbox.protections import Limits, MiB, detect
from tests.fixtures.grading import grading_cases as cases
from tests.fixtures.grading import guard_attacks as attacks
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.slow_grading  # about twenty kernels with torch: `make grading-test`

LIMITS = Limits(cell_timeout=30, notebook_timeout=240, memory_bytes=3 << 30, processes=64, file_bytes=16 * MiB,
                disk_bytes=64 * MiB, output_bytes=200_000)  # fmt: skip


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guard")
    course = Course(root=tmp / "grading", notebooks=FIXTURES / "notebooks")
    release(course)
    released = nbformat.read(_notebook(course, "release"), as_version=4)
    inbox = tmp / "inbox"
    inbox.mkdir()
    for name, data in attacks.build_all(released).items():
        (inbox / f"{name}_{cases.ASSIGNMENT}.ipynb").write_bytes(data)
    collect(course, inbox)
    summary = autograde(course, jobs=2, limits=LIMITS, protections=detect(), progress=False)
    files = {path.parts[-3]: path for path in feedback(course, hide_hidden_tests=True)}
    return {"course": course, "summary": summary, "feedback": files}


def _notebook(course: Course, step: str, student: str = ".") -> Path:
    return course.folder(step, cases.ASSIGNMENT, student) / f"{cases.ASSIGNMENT}.ipynb"


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def _hidden_lines() -> list[str]:
    """Every distinctive line of the assignment's hidden tests (as ``release.find_leaks`` counts them)."""
    source = nbformat.read(cases.SOURCE, as_version=4)
    lines = [line.strip() for _, kind, block in secret_blocks(source) if "test" in kind for line in block]
    assert len(lines) >= 8, lines  # the fixture has hidden tests in all three exercises
    return [_squeeze(line) for line in lines if len(line) >= 8]


@pytest.mark.parametrize("case", attacks.CASES, ids=lambda c: c.name)
def test_score_and_note(graded, case):
    result = next(g for g in graded["summary"].graded if g.submission.student == case.name)
    notes = " ".join(result.notes)
    assert result.score == case.score, f"{case.name} ({case.why}): got {result.score}, notes: {notes}"
    if case.note:
        assert case.note in notes, f"{case.name}: notes should mention {case.note!r}: {notes}"
    assert not result.grader_error, notes


@pytest.mark.parametrize("case", attacks.CASES, ids=lambda c: c.name)
def test_no_hidden_test_text_reaches_the_learner(graded, case):
    nb = nbformat.read(_notebook(graded["course"], "autograded", case.name), as_version=4)
    outputs = _squeeze(html.unescape(nbformat.writes(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(outputs=cell.outputs) for cell in nb.cells if cell.cell_type == "code"
    ]))).replace("\\n", " ").replace('\\"', '"'))  # fmt: skip
    page = _squeeze(html.unescape(re.sub(r"<[^>]+>", "", graded["feedback"][case.name].read_text())))
    for line in _hidden_lines():
        assert line not in outputs, f"{case.name}: a hidden line in the autograded notebook's outputs: {line}"
        assert line not in page, f"{case.name}: a hidden line in the --hide-hidden-tests feedback: {line}"


@pytest.mark.parametrize(("name", "code"), sorted(attacks.EVIDENCE.items()))
def test_the_evidence_stays_in_the_autograded_notebook(graded, name, code):
    nb = nbformat.read(_notebook(graded["course"], "autograded", name), as_version=4)
    assert any(code in cell.source for cell in nb.cells if cell.cell_type == "code"), name


def test_the_checks_are_no_harder_on_the_right_answers(graded):
    """The cases that score 4 are right answers whose reading found nothing; the summary has no grader error."""
    assert not graded["summary"].errors
    full = {g.submission.student for g in graded["summary"].graded if g.score == 4}
    assert full == {name for name, score in attacks.EXPECTED.items() if score == 4}


def test_every_case_says_what_it_scored_before():
    """The table of what the cases scored under the previous guard covers them all (it is measured, not derived)."""
    assert set(attacks.BEFORE) == set(attacks.EXPECTED)
