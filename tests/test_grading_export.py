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


def _read(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _course(tmp_path: Path, students: list[str]) -> Course:
    """A course whose gradebook holds ps1 and a submission of each of ``students`` (scores 0 of 0)."""
    course = Course(tmp_path / "course")
    course.root.mkdir()
    with course.gradebook() as gb:
        gb.add_assignment("ps1")
        for student in students:
            gb.add_student(student)
            gb.add_submission("ps1", student)
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
