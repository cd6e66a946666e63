"""The two preprocessors ``feedback`` adds to nbgrader's ``GenerateFeedback``: the results table, hidden tests hidden.

Contract: ``TestResults`` (after ``GetGrades``) puts a markdown table on top of a feedback
notebook: each graded cell, its score from the gradebook, and for a failed test the error it
raised, plus the late penalty; every text in it is plain text (``untrusted.markdown_text``).
``HideHiddenTests`` (configurable ``enabled``, ``placeholder``) replaces each hidden-test
region of a test cell by one comment line and cuts a failed test's traceback to its last line.
Both are nbgrader configurables, so a course's ``nbgrader_config.py`` may set their options
(``c.HideHiddenTests.placeholder``); ``coursedir.config_problems`` knows them by importing
this module, which imports nothing of the course directory (``coursedir``, ``feedback``).
"""

from __future__ import annotations

from nbconvert.exporters.exporter import ResourcesDict
from nbformat import NotebookNode
from nbformat.v4 import new_markdown_cell
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from traitlets import Bool, Unicode

from grading.guard import ROLE_KEY
from grading.untrusted import markdown_text

__all__ = ["HideHiddenTests", "TestResults"]


def _failure(cell: NotebookNode) -> str:
    """Why a test cell failed, as one line (its error, or its writing to stderr); empty when it passed."""
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

    def preprocess_cell(
        self, cell: NotebookNode, resources: ResourcesDict, index: int
    ) -> tuple[NotebookNode, ResourcesDict]:
        """A test cell with its hidden-test regions replaced by the placeholder; other cells unchanged."""
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
