"""``course export``: the CSV files open in a spreadsheet as text, whatever the roster and the student ids hold.

A roster's display names and a student id taken from a folder name are not the
instructor's: a cell starting with ``=``, ``+``, ``-`` or ``@`` is a formula in Excel,
LibreOffice and Google Sheets (``=HYPERLINK(...)`` sends whoever clicks it, with what
the sheet holds, to another site). The real command writes the files from a real
gradebook; each is read back with the csv module and checked cell by cell.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from grading.cli import main
from grading.coursedir import Course

FORMULA = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"-?\d+(\.\d+)?")  # what export writes for a number: _num's %g or %.2f


# Real kernels, servers or processes for seconds: `make test` runs this file, `make test-fast` does not.
pytestmark = pytest.mark.slow


def _read(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _autograded(course: Course, student: str, assignment: str) -> None:
    """What ``course autograde`` leaves for a graded submission: a notebook in its autograded folder."""
    folder = course.folder("autograded", assignment, student)
    folder.mkdir(parents=True)
    (folder / "nb.ipynb").write_text("{}")


def _course(tmp_path: Path, students: list[str]) -> Course:
    """A course whose gradebook holds ps1 and a graded submission of each of ``students`` (scores 0 of 0)."""
    course = Course(tmp_path / "course")
    course.root.mkdir()
    with course.gradebook() as gb:
        gb.add_assignment("ps1")
        for student in students:
            gb.add_student(student)
            gb.add_submission("ps1", student)
            _autograded(course, student, "ps1")
    return course


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's add_submission, as autograde's
def test_no_cell_of_any_export_is_a_formula(tmp_path, capsys):
    names = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)"]
    course = _course(tmp_path, ["=1+1", "alice", "mallory\x1b[2J"])
    roster = tmp_path / "roster.csv"
    with roster.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1 (4711)"])
        writer.writerow(["Points Possible", "", "", "", "", "10"])
        for index, (name, login) in enumerate(
            zip([*names, "Eve"], ["alice", "bob", "carol", "dan", "=1+1"], strict=True)
        ):
            writer.writerow([name, str(100 + index), "", login, "@section", ""])
    argv = ["--course", str(course.root), "export", "--roster", str(roster)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "warning: mallory\\x1b[2J: in the gradebook but not in the roster" in out and "\x1b" not in out

    grades, totals, canvas = (_read(course.exports / name) for name in ("grades.csv", "totals.csv", "canvas.csv"))
    for table in (grades, totals, canvas):
        for row in table:
            for cell in row:
                assert not cell.startswith(FORMULA) or NUMBER.fullmatch(cell), (cell, row)
    assert [row[0] for row in grades[1:]] == ["'=1+1", "alice", "mallory\x1b[2J"]
    assert [row[0] for row in totals[1:]] == ["'=1+1", "alice", "mallory\x1b[2J"]
    assert canvas[0][:6] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1 (4711)"]
    people = {row[3]: row for row in canvas[2:]}
    assert people["alice"][0] == '\'=HYPERLINK("http://x","y")'
    assert people["bob"][0] == "'+1+1" and people["carol"][0] == "'-2+3" and people["dan"][0] == "'@SUM(A1)"
    assert people["'=1+1"][0] == "Eve"  # the id matched the gradebook's "=1+1" before it was made safe
    assert {row[4] for row in canvas[2:]} == {"'@section"}
    assert [people[login][5] for login in ("alice", "bob", "carol", "dan", "'=1+1")] == ["0", "", "", "", "0"]


# -- which assignments, and what an LMS receives -------------------------------------------------------


def _term(tmp_path: Path, released: dict[str, float], scores: dict[tuple[str, str], float]) -> Course:
    """A course mid-term: ``released`` assignments (name -> points, one cell of one notebook each) in the
    gradebook, and a graded submission of each ``(student, assignment)`` in ``scores`` with that score."""
    course = Course(tmp_path / "course")
    course.root.mkdir()
    with course.gradebook() as gb:
        for name, points in released.items():
            gb.add_assignment(name)
            gb.add_notebook("nb", name)
            gb.add_grade_cell("answer", "nb", name, max_score=points, cell_type="code")
        for student in sorted({s for s, _ in scores}):
            gb.add_student(student)
        for (student, assignment), score in scores.items():
            gb.add_submission(assignment, student)
            grade = gb.find_grade("answer", "nb", assignment, student)
            grade.auto_score, grade.needs_manual_grade = score, False
            _autograded(course, student, assignment)
        gb.db.commit()
    return course


def _canvas_roster(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1 (4711)"])
        writer.writerow(["    Points Possible", "", "", "", "", "10"])
        writer.writerows(rows)
    return path


TERM = {f"ps{n}": 10.0 for n in range(1, 6)}  # five released, ten points each; only ps1 and ps2 collected


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_released_but_uncollected_assignments_are_left_out_and_named(tmp_path, capsys):
    # Before: canvas.csv had a column and a Points Possible cell for all five, with 0 for everyone in the
    # three never collected, and totals.csv put alice, who did everything so far, at 40 %.
    scores = {("alice", "ps1"): 10.0, ("alice", "ps2"): 10.0, ("bob", "ps1"): 7.5}
    course = _term(tmp_path, TERM, scores)
    roster = _canvas_roster(tmp_path / "roster.csv", [["Liddell, Alice", "1", "", "alice", "A", ""],
                                                       ["Builder, Bob", "2", "", "bob", "A", ""]])  # fmt: skip
    assert main(["--course", str(course.root), "export", "--roster", str(roster)]) == 0
    out = capsys.readouterr().out
    assert "left out (released, nothing graded yet): ps3, ps4, ps5" in out
    canvas = _read(course.exports / "canvas.csv")
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1 (4711)", "ps2",
                         "Late penalty", "Needs manual grading"]  # fmt: skip
    assert canvas[1] == ["Points Possible", "", "", "", "", "10", "10", "(read only)", "(read only)"]
    assert {row[3]: row[5:7] for row in canvas[2:]} == {"alice": ["10", "10"], "bob": ["7.50", "0"]}
    totals = {row[0]: row for row in _read(course.exports / "totals.csv")}
    assert totals["student"] == ["student", "ps1", "ps2", "total", "max_total", "percent"]
    assert totals["alice"] == ["alice", "10", "10", "20", "20", "100"]
    assert totals["bob"] == ["bob", "7.50", "0", "7.50", "20", "37.50"]
    assert {row[1] for row in _read(course.exports / "grades.csv")[1:]} == {"ps1", "ps2"}


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_assignment_option_exports_those_only_and_refuses_what_it_cannot(tmp_path, capsys):
    course = _term(tmp_path, TERM, {("alice", "ps1"): 10.0, ("alice", "ps2"): 4.0})
    base = ["--course", str(course.root), "export"]
    assert main([*base, "--assignment", "ps2"]) == 0  # before: argparse refused --assignment (exit 2)
    assert "left out" not in capsys.readouterr().out
    assert _read(course.exports / "totals.csv") == [
        ["student", "ps2", "total", "max_total", "percent"],
        ["alice", "4", "4", "10", "40"],
    ]
    before = (course.exports / "totals.csv").read_bytes()
    assert main([*base, "--assignment", "ps1", "--assignment", "ps3"]) == 1
    assert "nothing graded yet in ps3" in capsys.readouterr().err
    assert main([*base, "--assignment", "ps99"]) == 1
    assert "no assignment ps99 in the gradebook" in capsys.readouterr().err
    assert (course.exports / "totals.csv").read_bytes() == before  # a refused export writes nothing


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_canvas_test_student_is_reported_not_dropped(tmp_path, capsys):
    course = _term(tmp_path, {"ps1": 10.0}, {("alice", "ps1"): 9.0})
    roster = _canvas_roster(
        tmp_path / "roster.csv",
        [["Liddell, Alice", "1", "", "alice", "A", ""], ["Student, Test", "99", "", "", "A", ""]],
    )
    assert main(["--course", str(course.root), "export", "--roster", str(roster)]) == 0
    out = capsys.readouterr().out
    # before: the row was skipped and nothing said so
    assert "warning: Student, Test: no SIS Login ID in the roster (Canvas's test student has none)" in out
    rows = {row[0]: row for row in _read(course.exports / "canvas.csv")[2:]}
    assert rows["Student, Test"] == ["Student, Test", "99", "", "", "A", "", "", ""]
    assert rows["Liddell, Alice"][5] == "9"


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_moodle_file_follows_moodles_csv_import_rules(tmp_path, capsys):
    scores = {("zoë", "ps1"): 7.5, ("zoë", "ps2"): 10.0, ("bob", "ps1"): 3.0}  # bob did not submit ps2
    course = _term(tmp_path, {"ps1": 10.0, "ps2": 10.0, "ps3": 10.0}, scores)
    assert main(["--course", str(course.root), "export", "--lms", "moodle"]) == 0  # before: no --lms (exit 2)
    assert "wrote " + str(course.exports / "moodle.csv") in capsys.readouterr().out
    raw = (course.exports / "moodle.csv").read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf") and raw.decode("utf-8")  # UTF-8, no byte-order mark
    table = _read(course.exports / "moodle.csv")
    assert table[0] == ["student", "ps1", "ps2"]  # an identifier column, one per graded grade item
    assert table[1:] == [["bob", "3", "0"], ["zoë", "7.50", "10"]]
    assert all(re.fullmatch(r"\d+(\.\d+)?", cell) for row in table[1:] for cell in row[1:])  # dot decimal

    roster = tmp_path / "moodle_roster.csv"  # a Moodle grade export: the ids are e-mail addresses
    roster.write_text("First name,Last name,Email address\nZoë,Z,zoë\nBob,B,bob\nNew,N,new@example.org\n")
    argv = ["--course", str(course.root), "export", "--lms", "moodle", "--roster", str(roster)]
    assert main([*argv, "--match-column", "Email address"]) == 0
    assert _read(course.exports / "moodle.csv") == [["Email address", "ps1", "ps2"], ["zoë", "7.50", "10"],
                                                      ["bob", "3", "0"]]  # fmt: skip
    assert main(["--course", str(course.root), "export", "--lms", "canvas"]) == 1
    assert "needs the class's roster" in capsys.readouterr().err
