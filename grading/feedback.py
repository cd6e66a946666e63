"""HTML feedback per student, by nbgrader's ``generate_feedback``, with what the instructor chooses to show.

Contract: ``feedback(course)`` runs nbgrader's ``GenerateFeedback`` (its template, its
``GetGrades``: every score comes from the gradebook, so manual grades given in the
formgrader are in it) on every autograded submission, writing
``feedback/<student>/<assignment>/<notebook>.html`` and copying the assignment's other
files along, as nbgrader does. Two preprocessors of ours (``feedback_preprocessors``) run
after ``GetGrades``:

* ``TestResults`` puts a table on top: each graded cell, its score, and for a failed test
  the error it raised (the failing assertion's message), plus the late penalty;
* ``HideHiddenTests`` (``hide_hidden_tests=True``; ``course feedback`` hides them unless
  ``--show-hidden-tests``; nbgrader issue #917) replaces each hidden-test region of a test
  cell by one comment line and cuts the traceback of a failed test down to its last line
  (``AssertionError: message``), because IPython's traceback quotes the failing line. The
  messages stay: write hidden tests whose messages do not give the answer away.

**Waiting for hand grading.** With ``include_ungraded=False`` (what ``course feedback`` does
unless ``--include-ungraded``), a submission the gradebook still marks as needing manual grading
(``SubmittedAssignment.needs_manual_grade``) gets no feedback: its page would show a score
that counts only what is graded so far. The returned ``Feedback`` (a list of the files written)
names those submissions in ``waiting`` either way.

**Offline.** nbgrader's template loads MathJax from a CDN, so a page read offline shows raw
TeX. The pages load MathJax 2.7 from the copy the ``jupyter-server-mathjax`` package installs,
copied once per feedback tree into ``feedback/_mathjax/`` (a student id never starts with
``_``: ``collect`` strips it) and referenced by a relative URL, with MathJax's ``Safe``
extension (no ``javascript:`` link, no style or class from TeX) and its STIX-Web fonts, the
only ones that package ships. A learner's folder sent alone, without ``_mathjax/`` beside it,
shows the TeX source of the formulas; everything else on the page is inline.

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

import os
import shutil
from pathlib import Path

from traitlets.config import Config

from grading.coursedir import Course
from grading.errors import CourseError
from grading.feedback_preprocessors import HideHiddenTests, TestResults
from grading.safe_html import SafeToRead, safe_exporter_config

__all__ = [
    "MATHJAX_FOLDER",
    "Feedback",
    "HideHiddenTests",
    "TestResults",
    "feedback",
    "mathjax_source",
    "offline_html",
]

MATHJAX_FOLDER = "_mathjax"  # in the feedback tree: feedback/_mathjax/MathJax.js
# what nbconvert's mathjax macro loads when no URL is passed (nbgrader's feedback template passes none)
_CDN_MATHJAX = (
    '<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe">'
    " </script>"
)
# the local copy's combined configuration, its Safe extension, and the STIX-Web fonts it ships (as docs/conf.py)
_LOCAL_MATHJAX = (
    '<script type="text/x-mathjax-config">MathJax.Hub.Config({"HTML-CSS": '
    '{availableFonts: [], webFont: "STIX-Web", imageFont: null, preferredFont: null}});</script>\n'
    '<script src="{url}?config=TeX-AMS-MML_HTMLorMML-full,Safe"> </script>'
)


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


class Feedback(list):
    """The feedback files written (a list of paths), and the submissions still waiting for hand grading.

    ``waiting``: (student, assignment) of each selected submission the gradebook marks as needing
    manual grading; left out of the feedback unless ``include_ungraded`` was given.
    """

    def __init__(self, paths: list[Path], waiting: list[tuple[str, str]]):
        super().__init__(paths)
        self.waiting = waiting


def mathjax_source() -> Path:
    """The MathJax 2.7 folder the ``jupyter-server-mathjax`` package installs (holding ``MathJax.js``)."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise CourseError("feedback needs the jupyter-server-mathjax package (its MathJax copy)") from None
    folder = Path(jupyter_server_mathjax.__file__).parent / "static"
    if not (folder / "MathJax.js").is_file():
        raise CourseError(f"no MathJax.js in {folder}: reinstall jupyter-server-mathjax")
    return folder


def _ship_mathjax(course: Course) -> Path:
    """``feedback/_mathjax/``: a copy of the installed MathJax, refreshed when it differs; its ``MathJax.js``."""
    source = mathjax_source()
    target = course.feedback / MATHJAX_FOLDER
    if target.is_dir() and _same_tree(source, target):
        return target / "MathJax.js"
    aside = target.with_name(f".{MATHJAX_FOLDER}.new")
    shutil.rmtree(aside, ignore_errors=True)
    shutil.copytree(source, aside, ignore=shutil.ignore_patterns("__pycache__"))
    if target.exists():
        shutil.rmtree(target)
    aside.rename(target)
    return target / "MathJax.js"


def _same_tree(source: Path, target: Path) -> bool:
    """Whether ``target`` holds every file of ``source`` with the same size."""
    for path in source.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            copy = target / path.relative_to(source)
            if not copy.is_file() or copy.stat().st_size != path.stat().st_size:
                return False
    return True


def offline_html(html: str, mathjax_url: str) -> str:
    """A feedback page of nbgrader's template (``html``) loading MathJax from ``mathjax_url`` instead of the CDN.

    Raises ``CourseError`` when the page does not load MathJax as nbgrader's template does.
    """
    if _CDN_MATHJAX not in html:
        raise CourseError("the feedback template no longer loads MathJax as expected; not made offline")
    return html.replace(_CDN_MATHJAX, _LOCAL_MATHJAX.replace("{url}", mathjax_url), 1)


def _local_mathjax(page: Path, mathjax: Path) -> None:
    """Point ``page`` at the local MathJax instead of the CDN (a relative URL)."""
    html = page.read_text(encoding="utf-8")
    url = Path(os.path.relpath(mathjax, page.parent)).as_posix()
    if _CDN_MATHJAX not in html and f'<script src="{url}?config=' in html:
        return  # done before (a page nbgrader did not write again)
    try:
        page.write_text(offline_html(html, url), encoding="utf-8")
    except CourseError as error:
        raise CourseError(f"{page}: {error}") from None


def _needs_hand_grading(course: Course, graded: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (student, assignment) of ``graded`` that the gradebook marks as needing manual grading."""
    waiting = []
    with course.gradebook() as gb:  # an unreachable database server is a CourseError here
        for assignment in sorted({a for _, a in graded}):
            flagged = {s.student.id for s in gb.find_assignment(assignment).submissions if s.needs_manual_grade}
            waiting += [(s, a) for s, a in graded if a == assignment and s in flagged]
    return sorted(waiting)


def feedback(
    course: Course,
    assignments: list[str] | None = None,
    *,
    students: list[str] | None = None,
    hide_hidden_tests: bool = False,
    include_ungraded: bool = True,
) -> Feedback:
    """Generate HTML feedback for the autograded submissions; return the files written.

    ``hide_hidden_tests`` and ``include_ungraded`` default to nbgrader's behaviour (everything
    shown, every submission); ``course feedback`` passes the course's: hidden tests hidden, and
    submissions waiting for hand grading left out. See the module docstring.
    """
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
    waiting = _needs_hand_grading(course, graded)
    held = set() if include_ungraded else set(waiting)
    chosen = [g for g in graded if g not in held]
    if not chosen:
        return Feedback([], waiting)
    mathjax = _ship_mathjax(course)
    config = _config(course, hide_hidden_tests)
    api = NbGraderAPI(coursedir=course.coursedir, config=config)
    api.log.setLevel("ERROR")
    # one nbgrader run per assignment whose every graded submission is wanted, else one per submission
    left_out = {a for _, a in set(graded) - set(chosen)}
    whole = {a for _, a in chosen} - left_out if not students else set()
    runs = sorted({(a, None if a in whole else s) for s, a in chosen}, key=lambda r: (r[0], r[1] or ""))
    for assignment, student in runs:
        result = api.generate_feedback(assignment, student)
        if not result["success"]:
            why = result.get("error") or result["log"]
            raise CourseError(f"nbgrader could not generate feedback for {assignment}:\n{why}")
    written = []
    for student, assignment in chosen:
        pages = sorted(course.folder("feedback", assignment, student).glob("*.html"))
        for page in pages:
            _local_mathjax(page, mathjax)
        written += pages
    course.protect()
    return Feedback(written, waiting)


def _autograded(course: Course) -> list[tuple[str, str, Path]]:
    """(student, assignment, folder) of each autograded submission."""
    found = []
    for student, assignment, _ in course.submissions():
        folder = course.folder("autograded", assignment, student)
        if any(folder.glob("*.ipynb")):
            found.append((student, assignment, folder))
    return found
