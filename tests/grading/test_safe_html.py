"""No learner text runs in a person's browser: the autograded notebook, the formgrader, the feedback.

The corpus (``tests/support/hostile_html.py``) puts active content everywhere a learner controls:
written answers, outputs of every MIME type, output and cell metadata, exception messages,
the kernelspec's name. Rendered by nbconvert with the formgrader's template (``formgrade``,
the exporter configured as nbgrader's formgrader configures it, ``sanitize_html`` off) and
nbgrader's feedback template, the page must hold no script, event handler, ``javascript:``
URL or embedding element beyond the template's own (the same template's page for an empty
notebook), while the learner's text, ``<script>`` and all, still reads as text and the PNG
plot still shows. An honest notebook (the course's twelve as released, honest answers using math,
tables, code spans with ``<``, ``<sup>`` and relative images) is left exactly as written.

The slow test grades a real class (alice honest, mallory hostile) with ``course autograde``
and renders every page a person opens: the formgrader's view of each autograded notebook
and ``course feedback`` with and without ``--hide-hidden-tests``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from traitlets.config import Config

from grading.feedback import offline_html
from grading.safe_html import make_safe_to_read, safe_exporter_config
from grading.sanitize import SourceNotebook, notes_cell, sanitize_and_harden
from tests.support.hostile_html import PNG, active_content, build_hostile_class, hostile_notebook, visible_text
from tests.support.paths import ROOT

INSTRUCTOR_CONFIG = ROOT / "jupyter" / "instructor" / "jupyter_server_config.json"
TEMPLATES = ("formgrade", "feedback")
# what a person must still read in the page: the learner's markup as text, and their honest words
SEEN = ("My answer: y is x plus three.", "<script>document.documentElement", '<img src=x onerror="document', "bold")


def _render(nb: NotebookNode, template: str, config: Config | None = None) -> str:
    """``nb`` as nbgrader's formgrader (``formgrade``) or feedback (``feedback``) renders it."""
    from nbgrader.server_extensions.formgrader import handlers

    config = copy.deepcopy(config) if config is not None else Config()
    config.HTMLExporter.template_name = template
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    config.HTMLExporter.extra_template_paths = [str(Path(handlers.static_path, "node_modules/bootstrap/dist/css"))]
    resources = {  # what the formgrader's SubmissionHandler and nbgrader's GetGrades give the templates
        "assignment_id": "ps1",
        "notebook_id": "essay",
        "submission_id": "abc",
        "index": 0,
        "total": 2,
        "base_url": "",
        "student": "mallory",
        "last_name": None,
        "first_name": None,
        "notebook_path": "autograded/mallory/ps1/essay.ipynb",
        "nbgrader": {"notebook": "essay", "score": 1, "max_score": 4, "late_penalty": 0},
    }
    html, _ = HTMLExporter(config=config).from_notebook_node(copy.deepcopy(nb), resources=resources)
    return html


def _inert(nb: NotebookNode, template: str, config: Config | None = None) -> tuple[list[str], str]:
    """(active content of the rendered page beyond the template's own, the page's visible text)."""
    page = _render(nb, template, config)
    return active_content(page, _render(new_notebook(), template, config)), visible_text(page)


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_autograded_notebook_renders_inert_and_readable(template):
    raw, _ = _inert(hostile_notebook(), template)  # the corpus is real: as it is, the page runs its scripts
    assert any("document.documentElement.setAttribute" in item for item in raw), raw
    assert any(item.startswith("<iframe") for item in raw) and any(" onerror=" in item for item in raw)
    safe = make_safe_to_read(hostile_notebook())
    page = _render(safe, template)
    found, text = _inert(safe, template)
    assert found == []
    for words in SEEN:
        assert words in text, words
    assert f'src="data:image/png;base64,{PNG}"' in page  # the plot shows


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_exporter_config_makes_a_notebook_it_never_saw_inert(template):
    """The second layer (an autograded notebook from plain nbgrader): the instructor's server config and feedback's.

    Its ``clean_html`` keeps what markdown makes (nbconvert's own shows ``<h1>`` and ``<p>`` as text).
    """
    config = safe_exporter_config(Config())
    nb = hostile_notebook()
    nb.cells.insert(0, new_markdown_cell("# Title\n\nSome *text*, a [link](https://example.org)."))
    found, text = _inert(nb, template, config)
    assert found == []
    assert "<script>document.documentElement" in text
    assert "Title" in text and "<h1" not in text and "<p>" not in text
    served = Config(json.loads(INSTRUCTOR_CONFIG.read_text()))  # what `jupyter lab` reads from the file
    assert served.HTMLExporter == config.HTMLExporter
    # nbconvert's own sanitize_html alone is not enough: an image's width metadata becomes an attribute
    plain = Config({"HTMLExporter": {"sanitize_html": True}})
    assert any("png-width" in item for item in _inert(hostile_notebook(), template, plain)[0])


HONEST = [
    "Every `y` is larger than the `x` in its row: $\\bar y = \\bar x + 3$, so $y > x$.",
    "| x | y |\n|---|---|\n| 1 | 4 |\n\n`a < b && c > d` and x<sup>2</sup>, H<sub>2</sub>O<br>next line",
    '![the plot](images/plot.png) and <img src="images/diagram.png" width="200" alt="diagram">',
    "> a quote\n\n```python\nif x < y and y > z:\n    print('<b>')\n```\n\n"
    "1. one\n2. two\n\n**bold** <b>b</b> <i>i</i>",
    "<details><summary>More</summary>\n\nHidden *detail*, see [the docs](https://pytorch.org/docs)"
    " or [below](#title)\n\n</details>",
    "- [x] done\n- [ ] to do\n\n| left | right |\n|:--|--:|\n| 1 | 2 |\n\n~~old~~ <kbd>Ctrl</kbd>",
    '<span style="color: red">warm</span> <font color="blue">cold</font> '
    '<a href="https://example.org" target="_blank">out</a> <center>centred</center> <p align="center">x</p>',
]


def test_honest_notebooks_are_left_as_written():
    """The course's twelve notebooks (their student versions) and honest answers: not one cell changes.

    The same notebooks with one hostile written answer added: only that cell changes.
    """
    paths = sorted((ROOT / "grading" / "course" / "release").glob("*/*.ipynb"))  # what learners submit
    assert len(paths) >= 12
    honest = new_notebook(cells=[new_markdown_cell(source) for source in HONEST])
    hostile = hostile_notebook().cells[1]
    for nb in [*(nbformat.read(path, as_version=4) for path in paths), honest]:
        original = [cell.source for cell in nb.cells]
        nb.cells.insert(1, copy.deepcopy(hostile))
        safe = make_safe_to_read(copy.deepcopy(nb))
        assert [cell.source for cell in safe.cells[:1] + safe.cells[2:]] == original
        assert safe.cells[1].source != hostile.source and hostile.source in safe.cells[1].source


def test_outputs_keep_their_text_and_inert_html():
    """A pandas table (HTML with a ``<style>``) keeps its text form; inert HTML and a plot stay as they are."""
    table = "<table><tr><td>1</td></tr></table>"
    frame = {
        "text/html": f"<div><style scoped>.dataframe td {{color: red}}</style>{table}</div>",
        "text/plain": "   a\n0  1",
    }
    inert = {"text/html": "<table><tr><th>a</th></tr><tr><td>1</td></tr></table>", "text/plain": "a 1"}
    plot = {"image/png": PNG, "text/plain": "<Figure size 640x480 with 1 Axes>"}
    outputs = [new_output("display_data", data=data) for data in (frame, inert, plot)]
    nb = make_safe_to_read(new_notebook(cells=[new_code_cell("df", outputs=outputs)]))
    assert [dict(output.data) for output in nb.cells[0].outputs] == [{"text/plain": "   a\n0  1"}, inert, plot]


def test_grading_notes_are_text():
    """A kernelspec name with a backtick and an ``<img onerror>`` shows as text in the notes."""
    name = 'x`<img src=x onerror="document.documentElement.setAttribute(1,1)">`'
    released = new_notebook(cells=[new_markdown_cell("# Problem")])
    submission = copy.deepcopy(released)
    submission.metadata["kernelspec"] = {"name": name, "display_name": "x", "language": "python"}
    prepared = sanitize_and_harden(
        nbformat.writes(submission).encode(), SourceNotebook.from_release(released, "a", "n")
    )
    nb = copy.deepcopy(released)
    nb.cells.insert(0, notes_cell(prepared.notes, nb))
    for template in TEMPLATES:
        found, text = _inert(nb, template)
        assert found == []
        assert f"The notebook asked for kernel `{name}`" in text


def test_make_safe_to_read_is_idempotent_and_keeps_grades_metadata():
    once = make_safe_to_read(hostile_notebook())
    twice = make_safe_to_read(copy.deepcopy(once))
    assert once == twice
    assert once.cells[1].metadata["nbgrader"] == {"grade_id": "q1_answer", "solution": True}
    assert "transient" not in once.cells[2].metadata and "title" not in once.metadata
    kinds = [sorted(output.get("data", {})) for output in once.cells[2].outputs]
    assert kinds[:4] == [["text/html", "text/plain"], ["text/plain"], ["text/plain"], ["text/plain"]]
    assert "application/javascript" not in json.dumps(once)


@pytest.mark.slow_grading
def test_a_real_grading_and_its_feedback_hold_no_active_content(tmp_path):
    """``course autograde`` then ``course feedback`` (both ways) on a class with a hostile student."""
    from grading.autograde import autograde
    from grading.feedback import feedback

    beacon = "http://127.0.0.1:9/beacon"
    course = build_hostile_class(tmp_path, beacon)["course"]
    summary = autograde(course, jobs=1, progress=False)
    assert not summary.errors, summary.line()
    autograded = course.folder("autograded", "ps1", "mallory")
    for notebook in ("essay", "problems"):
        nb = nbformat.read(autograded / f"{notebook}.ipynb", as_version=4)
        found, text = _inert(nb, "formgrade")
        assert found == [], notebook
    essay = nbformat.read(autograded / "essay.ipynb", as_version=4)
    text = visible_text(_render(essay, "formgrade"))
    assert "My answer: y is x plus three." in text and "<script>document.documentElement" in text
    assert "asked for kernel `evil`<img src=x" in text  # the note, as text
    assert any("image/png" in output.get("data", {}) for cell in essay.cells for output in cell.get("outputs", []))
    for hide in (False, True):
        pages = feedback(course, hide_hidden_tests=hide)
        assert len(pages) == 4
        baseline = None
        for path in pages:
            page = path.read_text()
            if baseline is None:
                empty = _render(new_notebook(), "feedback", safe_exporter_config(Config()))
                baseline = offline_html(empty, "../../_mathjax/MathJax.js")  # as course feedback writes its pages
            assert active_content(page, baseline) == [], path
        mallory = visible_text((course.folder("feedback", "ps1", "mallory") / "problems.html").read_text())
        assert 'count_words_tests test 0 / 1 ValueError: <img src=x onerror="document' in mallory
        essay_page = (course.folder("feedback", "ps1", "mallory") / "essay.html").read_text()
        assert f"data:image/png;base64,{PNG}" in essay_page
