"""A term's late steps on a real class: extensions, feedback that waits for hand grading, exports.

The compatibility course's class (alice and carol on time, bob two days late) is graded by
``course autograde``. erin submits bob's very files at bob's very time, but was given an
extension (``course extend``) before she submitted: she loses nothing, bob loses the course's
penalty (one point per started day, capped at each notebook's score). Then bob is given an
extension after grading: the command says his penalty changes when he is graded again, and
``course autograde --force --student bob`` removes it. ``course feedback`` leaves out the
learners whose written answers wait for a person, hides hidden tests unless told otherwise,
and makes pages that load nothing from the internet.
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import re
import shutil
import sys
from pathlib import Path

import pytest

from grading.cli import main
from grading.coursedir import Course
from grading.release import release
from tests.fixtures.grading import compat_students as students

pytestmark = [
    pytest.mark.slow_grading,  # three grading runs of the compatibility course: `make grading-test`
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
    pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning"),  # nbgrader's add_submission
]

A = students.ASSIGNMENT
FAR = "2099-01-01 00:00:00 UTC"
HIDDEN_LINE = 'mean_of_column("data/points.csv","y")'  # a hidden test of problems.ipynb, spaces removed


def _course_cmd(course: Course, *argv: str) -> int:
    return main(["--course", str(course.root), *argv])


def _penalties(course: Course) -> dict[str, float]:
    with course.gradebook() as gb:
        return {s.student.id: float(s.late_submission_penalty or 0) for s in gb.find_assignment(A).submissions}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """The class graded, erin's extension given before she submitted, her submission graded; outputs kept."""
    tmp = tmp_path_factory.mktemp("term")
    course = Course(tmp / "course")
    shutil.copytree(students.COURSE, course.root)
    release(course, duedate=students.DUE)
    inbox = tmp / "inbox"
    students.build(course.folder("release", A), inbox)
    late = tmp / "late"
    shutil.copytree(inbox / "bob", late / "erin")  # bob's files and time
    outputs: dict[str, str] = {}

    def run(name: str, *argv: str) -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = _course_cmd(course, *argv)
            except SystemExit as stop:  # argparse refusing the command line
                code = stop.code
        outputs[name] = out.getvalue()
        outputs[name + ".err"] = err.getvalue()
        outputs[name + ".rc"] = str(code)

    run("collect", "collect", str(inbox))
    run("grade", "autograde", "--no-progress")
    assert outputs["grade.rc"] == "0", outputs["grade"] + outputs["grade.err"]
    run("extend-erin", "extend", A, "erin", "--until", FAR)
    run("export-before", "export", "--lms", "moodle")
    for name in ("moodle", "grades"):
        path = course.exports / f"{name}.csv"
        outputs[f"{name}-before"] = path.read_text(encoding="utf-8") if path.exists() else ""
    outputs["penalties-before"] = repr(_penalties(course))
    run("collect-erin", "collect", str(late))
    run("grade-erin", "autograde", "--no-progress")
    return {"course": course, "out": outputs, "run": run}


def test_an_extension_given_before_submitting_spares_the_late_penalty(term):
    out = term["out"]
    assert out["extend-erin.rc"] == "0", out["extend-erin.err"]  # before: no `extend` step (argparse, exit 2)
    assert "ps1  erin: extended by " in out["extend-erin"] and "due 2099-01-01 00:00:00 UTC" in out["extend-erin"]
    assert "note: not in the gradebook before (no submission graded yet), added: erin" in out["extend-erin"]
    # her empty record is not a submission: no row in grades.csv, and an empty cell, not a 0, for the LMS
    assert "erin" not in _csv_text_students(out["grades-before"])
    assert out["export-before.rc"] == "0", out["export-before.err"]
    moodle = dict(line.split(",") for line in out["moodle-before"].splitlines())
    assert moodle["student"] == "ps1" and moodle["erin"] == ""
    assert all(re.fullmatch(r"\d+(\.\d+)?", moodle[s]) for s in ("alice", "bob", "carol"))
    assert "not submitted yet, with an extension still running (cell left empty): erin (ps1)" in out["export-before"]
    assert out["grade-erin.rc"] == "0", out["grade-erin"] + out["grade-erin.err"]
    penalties = _penalties(term["course"])
    # the same files at the same time: bob pays the course's penalty, erin with her extension does not
    assert penalties["bob"] == 2 and penalties["erin"] == 0


def _csv_text_students(text: str) -> set[str]:
    return {row["student"] for row in csv.DictReader(text.splitlines())}


def test_an_extension_given_after_grading_takes_effect_when_graded_again(term):
    course, run, out = term["course"], term["run"], term["out"]
    run("extend-bob", "extend", A, "bob", "--days", "3")
    assert out["extend-bob.rc"] == "0"
    assert (
        "already graded: their late penalty changes when graded again: "
        "course autograde --force --assignment ps1 --student bob" in out["extend-bob"]
    )
    assert _penalties(course)["bob"] == 2  # not yet: graded before the extension
    run("list", "extend", "--list")
    lines = out["list"].splitlines()
    assert lines[0] == "ps1  bob: extended by 3 days, due 2026-01-13 17:00:00 UTC"
    assert lines[1].startswith("ps1  erin: extended by ") and lines[1].endswith(", due 2099-01-01 00:00:00 UTC")
    assert lines[2] == "2 extensions in force"
    run("regrade", "autograde", "--no-progress", "--force", "--student", "bob")
    assert out["regrade.rc"] == "0", out["regrade"] + out["regrade.err"]
    assert _penalties(course)["bob"] == 0
    run("remove", "extend", A, "bob", "--remove")
    assert "ps1  bob: no extension" in out["remove"]
    run("list-after", "extend", "--list", A)
    assert "bob" not in out["list-after"] and "erin" in out["list-after"]


def test_extend_refuses_what_it_cannot_do(term):
    run, out = term["run"], term["out"]
    run("bad-until", "extend", A, "bob", "--until", "1999-01-01 00:00:00 UTC")
    assert out["bad-until.rc"] == "1" and "is not after ps1's due date" in out["bad-until.err"]
    run("no-length", "extend", A, "bob")
    assert out["no-length.rc"] == "1" and "say how long" in out["no-length.err"]
    run("bad-id", "extend", A, "../bob", "--days", "1")
    assert out["bad-id.rc"] == "1" and "not a student id: '../bob'" in out["bad-id.err"]
    run("unknown", "extend", "ps9", "bob", "--days", "1")
    assert out["unknown.rc"] == "1" and "no assignment 'ps9'" in out["unknown.err"]


def _shown(path: Path) -> str:
    """The text an HTML page shows (tags dropped, entities decoded), without spaces."""
    return "".join(html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8"))).split())


def _assets(page: Path) -> list[str]:
    html = page.read_text(encoding="utf-8")
    return re.findall(r"<script[^>]*\ssrc=\"([^\"]*)\"", html) + re.findall(r"<link[^>]*\shref=\"([^\"]*)\"", html)


def test_feedback_waits_for_hand_grading_hides_hidden_tests_and_works_offline(term):
    course, run, out = term["course"], term["run"], term["out"]
    with course.gradebook() as gb:  # carol graded by hand, as the formgrader's grade API stores it
        for notebook in gb.find_submission(A, "carol").notebooks:
            for grade in notebook.grades:
                if grade.needs_manual_grade:
                    grade.manual_score, grade.needs_manual_grade = 0.0, False
        gb.db.commit()
    run("feedback", "feedback")
    assert out["feedback.rc"] == "0", out["feedback.err"]
    text = out["feedback"]
    # alice, bob and erin wrote answers that wait for a person; carol's were graded by hand above
    assert "left out: 3 submissions still waiting for hand grading: alice (ps1), bob (ps1), erin (ps1)" in text
    assert "course hand-grading export" in text and "formgrader" in text
    assert "hidden tests are hidden" in text and "--show-hidden-tests" in text
    assert not course.folder("feedback", A, "bob").exists()  # before: bob's page said "- / 2 waiting"
    carol = course.folder("feedback", A, "carol") / "problems.html"
    shown = _shown(carol)
    assert HIDDEN_LINE not in shown and "(hiddentestsarenotshown)" in shown  # before: shown in full by default
    assets = _assets(carol)
    assert assets, "the page loads MathJax"
    for url in assets:
        assert not re.match(r"(https?:)?//", url), url  # before: MathJax from cdnjs.cloudflare.com
        assert (carol.parent / url.split("?")[0]).resolve().is_file(), url
    mathjax = next(u for u in assets if "MathJax.js" in u)
    assert mathjax.endswith("config=TeX-AMS-MML_HTMLorMML-full,Safe")
    assert (course.feedback / "_mathjax" / "extensions" / "Safe.js").is_file()

    run("feedback-all", "feedback", "--include-ungraded", "--show-hidden-tests", "--student", "bob")
    assert "warning: 1 submission still waiting for hand grading, given feedback anyway" in out["feedback-all"]
    assert "warning: hidden tests are shown in full" in out["feedback-all"]
    assert HIDDEN_LINE in _shown(course.folder("feedback", A, "bob") / "problems.html")
    run("feedback-old-flag", "feedback", "--hide-hidden-tests", "--student", "carol")
    assert out["feedback-old-flag.rc"] == "0" and "hidden tests are hidden" in out["feedback-old-flag"]
