"""HTML feedback per student, by nbgrader's ``generate_feedback``, with what the instructor chooses to show.

Contract: ``feedback(course)`` runs nbgrader's ``GenerateFeedback`` (its template, its
``GetGrades``: every score comes from the gradebook, so manual grades given in the
formgrader are in it) on every autograded submission, writing
``feedback/<student>/<assignment>/<notebook>.html`` and copying the assignment's other
files along, as nbgrader does. Two preprocessors of ours run after ``GetGrades``:

* ``TestResults`` puts a table on top: each graded cell, its score, and for a failed test
  the error it raised (the failing assertion's message), plus the late penalty;
* ``HideHiddenTests`` (``hide_hidden_tests=True``, ``course feedback --hide-hidden-tests``;
  nbgrader issue #917) replaces each hidden-test region of a test cell by one comment line
  and cuts the traceback of a failed test down to its last line (``AssertionError:
  message``), because IPython's traceback quotes the failing line. The messages stay:
  write hidden tests whose messages do not give the answer away.

Nothing a learner wrote runs in the page: every text in the table is plain text
(``untrusted.markdown_text``: an error message is the submission's to choose), the
notebook passes through ``safe_html.make_safe_to_read`` last (``safe_html.SafeToRead``:
autograded notebooks written by older versions or by plain nbgrader get it here), and the
exporter renders with ``sanitize_html`` and ``safe_html.clean_html`` as a second layer (no
``application/javascript`` output is rendered, and the HTML of every markdown cell and
HTML output is cleaned by the same allowlist).

Raises ``CourseError`` when there is no autograded submission to give feedback on.
"""

from __future__ import annotations

from pathlib import Path

from nbconvert.exporters.exporter import ResourcesDict
from nbformat import NotebookNode
from nbformat.v4 import new_markdown_cell
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from traitlets import Bool, Unicode
from traitlets.config import Config

from grading.coursedir import Course, CourseError
from grading.guard import ROLE_KEY
from grading.safe_html import SafeToRead, safe_exporter_config
from grading.untrusted import markdown_text

__all__ = ["HideHiddenTests", "TestResults", "feedback"]


def _failure(cell: NotebookNode) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}".strip().rstrip(":")
    if any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.get("outputs", [])):
        return "wrote to stderr (a test that writes to stderr scores 0)"
    return ""


def _cell_text(text: str) -> str:
    """``text`` (its first 300 characters) as the plain text of one table cell."""
    return markdown_text(" ".join(str(text).split())[:300])


class TestResults(NbGraderPreprocessor):
    """A table of every graded cell's score and, for a failed test, its error (after ``GetGrades``)."""

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        keys = (info["notebook"], info["assignment"], info["student"])
        rows = []
        with Gradebook(info["db_url"]) as gb:
            for cell in nb.cells:
                meta = cell.get("metadata", {}).get("nbgrader", {})
                if not (utils.is_grade(cell) or utils.is_task(cell)):
                    continue
                grade = gb.find_grade(meta["grade_id"], *keys)
                shown = f"{float(grade.score or 0):g} / {float(grade.max_score):g}"
                if utils.is_solution(cell) or utils.is_task(cell):
                    what = "written answer" if cell.cell_type == "markdown" else "code answer"
                    what = "task" if utils.is_task(cell) else what
                    comment = gb.find_comment(meta["grade_id"], *keys)
                    if grade.manual_score is not None:
                        result = "graded by hand"
                    elif comment.auto_comment == "No response.":
                        result = "no response"
                    else:
                        result, shown = "waiting to be graded by hand", f"- / {float(grade.max_score):g}"
                else:
                    what, result = "test", _failure(cell) or "passed"
                    if grade.manual_score is not None:
                        result += " (score changed by hand)"
                rows.append(f"| {_cell_text(meta['grade_id'])} | {what} | {shown} | {_cell_text(result)} |")
        if not rows:
            return nb, resources
        penalty = info.get("late_penalty") or 0
        text = "## Test results\n\n| cell | kind | score | result |\n|---|---|---|---|\n" + "\n".join(rows)
        if penalty:
            text += f"\n\nLate submission penalty: -{float(penalty):g} points."
        position = 1 if nb.cells and nb.cells[0].get("metadata", {}).get(ROLE_KEY, {}).get("role") == "notes" else 0
        nb.cells.insert(position, new_markdown_cell(text, metadata={ROLE_KEY: {"role": "results"}}))
        return nb, resources


class HideHiddenTests(NbGraderPreprocessor):
    """Hidden-test regions out of the feedback; failed tests' tracebacks cut to their last line."""

    enabled = Bool(False, help="Leave hidden tests out of the feedback").tag(config=True)
    placeholder = Unicode("# (hidden tests are not shown)", help="What replaces a hidden-test region").tag(config=True)

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict, index: int):
        if not (utils.is_grade(cell) and not utils.is_solution(cell) and cell.cell_type == "code"):
            return cell, resources
        delimiters = ClearHiddenTests(parent=self)  # the course's configured markers
        begin, end = delimiters.begin_test_delimeter, delimiters.end_test_delimeter
        if begin not in cell.source:
            return cell, resources
        lines, hidden = [], False
        for line in cell.source.split("\n"):
            if begin in line:
                hidden = True
                lines.append(line[: len(line) - len(line.lstrip())] + self.placeholder)
            elif end in line:
                hidden = False
            elif not hidden:
                lines.append(line)
        cell.source = "\n".join(lines)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [f"{output.get('ename')}: {output.get('evalue')}"]
        return cell, resources


def _config(course: Course, hide_hidden_tests: bool) -> Config:
    from nbgrader.converters import GenerateFeedback

    config = Config(course.config)
    default = GenerateFeedback.class_traits()["preprocessors"].default()  # GetGrades, CSSHTMLHeaderPreprocessor
    configured = list(config.GenerateFeedback.get("preprocessors", default))
    names = [p if isinstance(p, str) else f"{p.__module__}.{p.__name__}" for p in configured]
    after = next((i + 1 for i, name in enumerate(names) if name.endswith("GetGrades")), 0)
    configured[after:after] = [TestResults, HideHiddenTests]
    config.GenerateFeedback.preprocessors = [*configured, SafeToRead]
    config.HideHiddenTests.enabled = hide_hidden_tests
    return safe_exporter_config(config, preprocess=False)


def feedback(
    course: Course,
    assignments: list[str] | None = None,
    *,
    students: list[str] | None = None,
    hide_hidden_tests: bool = False,
) -> list[Path]:
    """Generate HTML feedback for every autograded submission; return the files written."""
    from nbgrader.apps import NbGraderAPI

    graded = [
        (student, assignment)
        for student, assignment, _ in _autograded(course)
        if (not assignments or assignment in assignments) and (not students or student in students)
    ]
    if not graded:
        what = f" of {', '.join(assignments)}" if assignments else ""
        who = f" from {', '.join(students)}" if students else ""
        raise CourseError(f"no autograded submissions{what}{who} in {course.autograded}: run `course autograde` first")
    with course.gradebook():  # an unreachable database server is a CourseError here, not nbgrader's traceback
        pass
    config = _config(course, hide_hidden_tests)
    api = NbGraderAPI(coursedir=course.coursedir, config=config)
    api.log.setLevel("ERROR")
    runs = [(a, s) for s, a in graded] if students else [(a, None) for a in sorted({a for _, a in graded})]
    for assignment, student in runs:
        result = api.generate_feedback(assignment, student)
        if not result["success"]:
            why = result.get("error") or result["log"]
            raise CourseError(f"nbgrader could not generate feedback for {assignment}:\n{why}")
    written = []
    for student, assignment in graded:
        written += sorted(course.folder("feedback", assignment, student).glob("*.html"))
    course.protect()
    return written


def _autograded(course: Course) -> list[tuple[str, str, Path]]:
    """(student, assignment, folder) of each autograded submission."""
    found = []
    for student, assignment, _ in course.submissions():
        folder = course.folder("autograded", assignment, student)
        if any(folder.glob("*.ipynb")):
            found.append((student, assignment, folder))
    return found
