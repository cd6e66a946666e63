"""Compatibility with plain nbgrader on a standard nbgrader course (``fixtures/grading/compat_course``).

The course has what instructors coming from nbgrader use: an assignment of two notebooks
not named after it, written answers, a hand-graded code answer, a task, a data file the
code reads, an image, a late-penalty plugin in ``nbgrader_config.py``. Three students
(``fixtures/grading/compat_students.py``) add cells of their own, submit a file of their
own, skip a notebook, submit late.

The same class is graded twice from identical copies: by plain nbgrader (its Python API:
the gradebook's ``update_or_create_assignment``, as ``nbgrader db assignment add`` does,
then ``generate_assignment`` and ``autograde``) and by ``course``'s ``release``,
``collect`` and ``autograde(jobs=2)``. The gradebooks must agree cell by cell
(auto score, needs-manual-grade, automatic comment, late penalty per notebook), every
written answer must reach ``autograded/`` and the feedback, and manual grades given in the
gradebook (what nbgrader's formgrader does) must reach the feedback and the exports.
"""

from __future__ import annotations

import csv
import html
import os
import re
import shutil
import time
import warnings
from pathlib import Path

import nbformat
import pytest

from grading.autograde import autograde
from grading.collect import collect
from grading.coursedir import Course
from grading.export import export
from grading.feedback import feedback
from grading.release import release
from grading.sandbox.protections import detect
from grading.validate import validate
from tests.fixtures.grading import compat_students as students

pytestmark = pytest.mark.slow_grading  # tests/grading_end_to_end/ is `make grading-test`

A = students.ASSIGNMENT


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded by plain nbgrader's Python API and by ``course``, from identical copies."""
    from nbgrader.utils import parse_utc
    from sqlalchemy.exc import SAWarning

    tmp = tmp_path_factory.mktemp("compat")
    plain, ours, inbox = Course(tmp / "plain"), Course(tmp / "ours"), tmp / "inbox"
    shutil.copytree(students.COURSE, plain.root)
    shutil.copytree(students.COURSE, ours.root)

    with plain.gradebook() as gb:  # what `nbgrader db assignment add ps1 --duedate=...` does
        gb.update_or_create_assignment(A, duedate=parse_utc(students.DUE))
    api = plain.api()
    assert api.generate_assignment(A)["success"]
    students.build(plain.folder("release", A), inbox)
    shutil.copytree(inbox, plain.submitted)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's gradebook warns about its own session use
        for student in students.STUDENTS:
            result = api.autograde(A, student)
            assert result["success"], result.get("error") or result["log"]
    plain_seconds = time.perf_counter() - started

    release(ours, duedate=students.DUE)
    collect(ours, inbox)
    started = time.perf_counter()
    summary = autograde(ours, jobs=2, progress=False)
    our_seconds = time.perf_counter() - started
    assert not summary.errors, summary.line()
    print(
        f"\nautograde of {len(students.STUDENTS)} students x 2 notebooks, in-process: plain nbgrader "
        f"{plain_seconds:.1f} s, course autograde --jobs 2 {our_seconds:.1f} s (load average {os.getloadavg()[0]:.1f})"
    )
    return {"plain": plain, "ours": ours, "inbox": inbox}


def _gradebook(course: Course) -> dict[tuple, object]:
    """Everything autograde records, keyed by (student, notebook, cell, what)."""
    found: dict[tuple, object] = {}
    with course.gradebook() as gb:
        for sub in gb.find_assignment(A).submissions:
            found[(sub.student.id, "timestamp")] = sub.timestamp
            for nb in sub.notebooks:
                found[(sub.student.id, nb.name, "late penalty")] = nb.late_submission_penalty
                for grade in nb.grades:
                    found[(sub.student.id, nb.name, grade.cell.name, "auto score")] = grade.auto_score
                    found[(sub.student.id, nb.name, grade.cell.name, "needs manual grade")] = grade.needs_manual_grade
                for comment in nb.comments:
                    found[(sub.student.id, nb.name, comment.cell.name, "comment")] = comment.auto_comment
    return found


def test_gradebooks_agree_cell_by_cell(graded):
    theirs, ours = _gradebook(graded["plain"]), _gradebook(graded["ours"])
    differ = {k: (theirs.get(k), ours.get(k)) for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k)}
    print(f"\n{len(theirs) - len(differ)} of {len(theirs)} gradebook entries agree with plain nbgrader")
    assert not differ, differ
    # the class exercises what it should: scores, written answers left for grading by hand, a penalty
    assert theirs[("alice", "problems", "mean_column_tests", "auto score")] == 2
    assert theirs[("bob", "problems", "mean_column_tests", "auto score")] == 0
    assert theirs[("alice", "essay", "q1_answer", "needs manual grade")] is True
    assert theirs[("bob", "essay", "q2_answer", "comment")] == "No response."
    assert theirs[("bob", "problems", "late penalty")] > 0 and theirs[("alice", "problems", "late penalty")] is None
    assert theirs[("carol", "essay", "png_width_tests", "auto score")] == 0  # no essay.ipynb submitted


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _shown(path: Path) -> str:
    """The text an HTML page shows (tags dropped, entities decoded, white space collapsed)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", _text(path))).split())


def test_written_answers_and_added_cells_reach_autograded(graded):
    course = graded["ours"]
    for (student, _cell), words in students.WRITTEN.items():
        assert words in _text(course.folder("autograded", A, student) / "essay.ipynb")
    problems = nbformat.read(course.folder("autograded", A, "alice") / "problems.ipynb", as_version=4)
    sources = [c.source for c in problems.cells]
    assert students.ALICE_HELPER in sources  # her own cell, kept where she put it and run
    assert sources.index(students.ALICE_HELPER) < next(i for i, s in enumerate(sources) if "len(words_of(text))" in s)
    task_output = problems.cells[-1].outputs[0]["text"]  # the code she added under the task ran, beside the data
    assert "2,5" in task_output


def test_other_files_are_present_when_grading_and_copied_as_nbgrader_does(graded):
    for name in ("plain", "ours"):
        course = graded[name]
        for student in ("alice", "bob", "carol"):
            folder = course.folder("autograded", A, student)
            assert (folder / "data" / "points.csv").is_file() and (folder / "images" / "diagram.png").is_file()
        assert (course.folder("autograded", A, "carol") / "helpers.py").is_file()  # hers, imported by her answer


def test_config_is_nbgraders(graded):
    course = graded["ours"]
    assert course.course_id == "compat-101"
    assert course.config.Execute.timeout == 30
    assert str(course.config.AssignLatePenalties.plugin_class) == "late.OnePointPerDay"


@pytest.fixture(scope="module")
def graded_by_hand(graded):
    """Grades given in the gradebook, as nbgrader's formgrader does, then feedback and exports."""
    course = graded["ours"]
    with course.gradebook() as gb:
        scores = [("q1_answer", "essay", 1.5), ("q2_answer", "essay", 1), ("describe", "problems", 2)]
        for cell, notebook, score in [*scores, ("sort_task", "problems", 1)]:
            grade = gb.find_grade(cell, notebook, A, "alice")
            grade.manual_score = score  # what the formgrader's grade API (GradeHandler.put) stores
            grade.needs_manual_grade = grade.manual_score is None and grade.auto_score is None
        gb.db.commit()
    roster = course.root / "roster.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,ps1 (4711),Current Score\n"
        "    Points Possible,,,,,10,(read only)\n"
        '"Liddell, Alice",101,S1,alice,Sec 1,,\n"Builder, Bob",102,S2,bob,Sec 1,,\n'
        '"Singer, Carol",103,S3,carol,Sec 2,,\n"Dalton, Dave",104,S4,dave,Sec 2,,\n'
    )
    files = feedback(course)
    exported = export(course, roster=roster)
    return {"course": course, "feedback": files, "exported": exported}


def test_feedback_has_written_answers_scores_and_errors(graded_by_hand):
    course = graded_by_hand["course"]
    assert len(graded_by_hand["feedback"]) == 5  # carol submitted one notebook
    for (student, _cell), words in students.WRITTEN.items():
        assert words in _text(course.folder("feedback", A, student) / "essay.html")
    assert (course.folder("feedback", A, "alice") / "images" / "diagram.png").is_file()
    alice = _shown(course.folder("feedback", A, "alice") / "essay.html")
    assert "q1_answer written answer 1.5 / 2 graded by hand" in alice  # the manual grade
    bob = _shown(course.folder("feedback", A, "bob") / "problems.html")
    assert "mean_column_tests test 0 / 2 AssertionError: the mean of x should be 2.0" in bob
    assert "Late submission penalty: -1 points" in bob
    assert 'mean_of_column("data/points.csv","y")' in bob.replace(" ", "")  # hidden tests shown by default


def test_hidden_tests_can_be_left_out_of_the_feedback(graded_by_hand):
    course = graded_by_hand["course"]
    feedback(course, students=["bob"], hide_hidden_tests=True)
    shown = _shown(course.folder("feedback", A, "bob") / "problems.html").replace(" ", "")
    assert 'mean_of_column("data/points.csv","y")' not in shown and "hiddentestsarenotshown" in shown
    assert "themeanofxshouldbe2.0" in shown  # the failing visible test's message stays


def test_exports_include_manual_grades_and_late_penalties(graded_by_hand):
    course = graded_by_hand["course"]
    with open(course.exports / "grades.csv", newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert float(rows["alice"]["raw_score"]) == 9.5 and rows["alice"]["needs_manual_grade"] == "False"
    # bob: 2 points before the penalty; 49 hours late, 3 points by the plugin, capped by nbgrader at
    # each notebook's score (the per-notebook penalties are compared with plain nbgrader's above)
    assert (rows["bob"]["raw_score"], rows["bob"]["late_penalty"], rows["bob"]["score"]) == ("2", "2", "0")
    with open(course.exports / "canvas.csv", newline="") as handle:
        table = list(csv.reader(handle))
    header, points, body = table[0], table[1], {row[3]: row for row in table[2:]}
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1 (4711)", "Late penalty",
                      "Needs manual grading"]  # fmt: skip
    assert points == ["Points Possible", "", "", "", "", "10", "(read only)", "(read only)"]
    assert body["alice"][:6] == ["Liddell, Alice", "101", "S1", "alice", "Sec 1", "9.50"] and body["alice"][7] == ""
    assert body["bob"][5:] == ["0", "ps1: -2", "ps1"]
    assert body["dave"][5:] == ["", "", ""]  # not in the gradebook: Canvas changes nothing
    warning = "1 roster student has no grades in the gradebook (its cells are empty)"
    assert graded_by_hand["exported"].warnings == [warning]


def _validate_both(course: Course, notebook: Path) -> tuple[dict, object]:
    """``nbgrader validate``'s verdict (its ``Validator``) and ours, for the same notebook."""
    from nbgrader.validator import Validator

    return Validator().validate(str(notebook)), validate(notebook, course, protections=detect())


def test_validate_agrees_with_nbgrader_validate(graded):
    course = graded["ours"]
    release = course.folder("release", A)
    work = course.root / "validate" / A
    shutil.copytree(release, work)
    essay = nbformat.read(graded["inbox"] / "bob" / A / "essay.ipynb", as_version=4)
    essay.cells = [c for c in essay.cells if c.cell_type == "markdown"]  # only written answers left
    nbformat.write(essay, work / "essay.ipynb")
    problems = nbformat.read(graded["inbox"] / "alice" / A / "problems.ipynb", as_version=4)
    test = next(c for c in problems.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "count_words_tests")
    test.source = "assert True  # changed by the learner"
    nbformat.write(problems, work / "problems.ipynb")

    theirs, ours = _validate_both(course, work / "essay.ipynb")
    assert [f["raw_error"] for f in theirs["failed"]] == ["You did not provide a response."]
    assert ours.unanswered == ["q2_answer"] and not ours.changed and not ours.ok
    assert not any("metadata" in note for note in ours.notes)  # no "metadata stripped" misreport
    assert "NO ANSWER  q2_answer" in ours.text()

    theirs, ours = _validate_both(course, work / "problems.ipynb")
    assert len(theirs["changed"]) == 1 and theirs["changed"][0]["source"].startswith("assert True")
    assert ours.changed == ["count_words_tests"] and not ours.ok
    verdicts = {c.grade_id: c.status for c in ours.cells}
    assert verdicts["count_words_tests"] == "pass" and verdicts["mean_column_tests"] == "pass"  # the original test ran
