"""Hidden tests never leave the kernel in an output; only conclusive evidence accuses a learner.

Contract: ``keep_hidden_tests_out(nb, notes)`` runs in the grading worker after the kernel has
finished. It searches every output of every code cell of a graded notebook for the hidden
lines that ``sanitize`` recorded on each test cell (as printed, as a ``repr``, as HTML,
coloured). A hidden line counts only when honest code could not have printed it: it has 8
characters or more and is found nowhere in the notebook's visible text, in the source of
``course_utils`` (which every notebook imports), in an installed Python file an output that
showed hidden text names (a traceback's frames, a warning's location; the first
``_MAX_NAMED_FILES``), nor in a frame header IPython prints for a function the notebook
defines (``check_shards(shards, num_samples, num_replicas, name)``): ``raise AssertionError(``,
quoted from ``course_utils/checks.py`` by every failing check's traceback, is no secret. An output that
holds a hidden line that counts is replaced by a note (always: that costs nobody a point).
What it means for the test whose hidden lines it showed depends on the evidence:

* **conclusive**: several distinct hidden lines of that test (``SEVERAL``), or one that holds a
  name, number or word found nowhere in that public text (a literal only the hidden test
  has). The test scores 0, with a note that says the hidden tests were read from the kernel;
* **inconclusive** (fewer lines, each made only of public words: ``import random``,
  ``torch.manual_seed(1)``): the test keeps its score and is flagged for manual grading,
  with a neutral note. ``flagged_for_review(nb)`` names those tests; the flag lives in the
  test cell's grader metadata, which only the grader writes (``sanitize.sanitize_and_harden`` removes
  it from every submitted cell, and a kernel cannot write cell metadata), and is cleared
  here before it is set.

Notes never quote a hidden line. ``label(nb, index)`` names a cell the way every grading note
does.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from nbformat import NotebookNode

from grading.guard import ROLE_KEY
from grading.sanitize import fail_cell, hidden_lines, is_test, role

__all__ = ["REDACTED", "SEVERAL", "flagged_for_review", "keep_hidden_tests_out", "label"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\'": "'", '\\"': '"', "\\\\": "\\"}
_MIN_SECRET = 8  # characters of a hidden line, once stripped, for it to count (as release.find_leaks)
SEVERAL = 3  # distinct hidden lines of one test in the outputs: conclusive whatever they hold
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_PYTHON_FILE = re.compile(r"(/[^\s\"'<>:,()\x1b]+\.py)\b")  # an absolute path to a .py file, as tracebacks print it
_MAX_SOURCE_BYTES = 4 << 20  # a larger "source file" is not read (no installed module is near it)
_MAX_NAMED_FILES = 200  # files read of those named by the outputs that showed hidden text (a traceback names ~30)
_PACKAGES = ("course_utils", "grading")  # this course's own packages: installed code wherever they live
_REVIEW = "needs_manual_grade"  # the grader-metadata key of a test flagged for manual grading
REDACTED = "[removed by the grader: this output held text of the hidden tests of {}]"


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def _readings(text: str) -> list[str]:
    """The ways an output may show a line: as printed, inside a repr (escaped), as HTML, coloured."""
    plain = _ANSI.sub("", text)
    unescaped = plain
    for escaped, character in _ESCAPES.items():
        unescaped = unescaped.replace(escaped, character)
    return [_squeeze(t) for t in dict.fromkeys((plain, unescaped, html.unescape(plain), html.unescape(unescaped)))]


def _hidden_and_visible(nb: NotebookNode) -> tuple[dict[str, set[str]], str]:
    """(squeezed hidden line -> labels of the test cells that hide it, the notebook's visible text squeezed)."""
    hidden: dict[str, set[str]] = {}
    public = []
    for index, cell in enumerate(nb.cells):
        lines = cell.get("source", "").split("\n")
        secret = set(hidden_lines(cell)) if is_test(cell) else set()
        public += [line for i, line in enumerate(lines) if i not in secret]
        for i in secret:
            if i < len(lines) and len(lines[i].strip()) >= _MIN_SECRET and "HIDDEN TESTS" not in lines[i]:
                hidden.setdefault(_squeeze(lines[i]), set()).add(label(nb, index))
    visible = _squeeze("\n".join(public))
    return {line: tests for line, tests in hidden.items() if line not in visible}, visible


class _PublicText:
    """What honest code could print: the visible text, ``course_utils``' source, installed files the outputs name,
    and the frame headers of the notebook's functions."""

    def __init__(self, nb: NotebookNode, visible: str, outputs_text: Iterable[str]) -> None:
        sources = [_course_utils_source()]
        named = dict.fromkeys(path for text in outputs_text for path in _PYTHON_FILE.findall(_ANSI.sub("", text)))
        sources += [_installed_source(path) for path in list(named)[:_MAX_NAMED_FILES]]
        text = " ".join([visible, *(_squeeze(source) for source in sources)])
        self.words = set(_TOKEN.findall(text))
        self.text = " ".join([text, *_frame_headers(nb)])

    def has(self, line: str) -> bool:
        return line in self.text

    def new_words(self, line: str) -> list[str]:
        """The names, numbers and words of ``line`` found nowhere in the public text."""
        return [word for word in _TOKEN.findall(line) if word not in self.words]


def _frame_headers(nb: NotebookNode) -> list[str]:
    """How IPython's tracebacks name a frame of each function the notebook defines: ``name(a, b, *args, **kw)``.

    Hidden tests' functions included: a frame's header shows its function's name and parameters
    (from the code object, not the source the guard blanks), so ``check_shards(shards,
    num_samples, num_replicas, name)``, a hidden call of a visible helper, is printed by every
    traceback through that helper.
    """
    from IPython.core.inputtransformer2 import TransformerManager

    to_python = TransformerManager().transform_cell
    headers = []
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        try:
            tree = ast.parse(to_python(cell.get("source", "")))
        except Exception:  # not Python (a learner's broken cell): it defines nothing
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                args = node.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                names += [f"*{args.vararg.arg}"] if args.vararg else []
                names += [f"**{args.kwarg.arg}"] if args.kwarg else []
                name = "<lambda>" if isinstance(node, ast.Lambda) else node.name
                headers.append(f"{name}({', '.join(names)})")
    return headers


@lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    """Folders whose files are installed code: the interpreter's, the environment's, this course's packages."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for package in _PACKAGES:
        roots.update(_package_folders(package))
    real = {os.path.realpath(root).rstrip(os.sep) + os.sep for root in roots if root}
    return tuple(sorted(root for root in real if root != os.sep))


@lru_cache(maxsize=512)
def _installed_source(path: str) -> str:
    """The text of ``path`` if it is an installed ``.py`` file (a learner's own files are not), else ``""``."""
    real = os.path.realpath(path)
    if not real.endswith(".py") or not real.startswith(_installed_roots()):
        return ""
    try:
        if os.path.getsize(real) > _MAX_SOURCE_BYTES:
            return ""
        return Path(real).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _package_folders(name: str) -> list[str]:
    """Where the top-level package ``name`` is installed (found, not imported)."""
    spec = importlib.util.find_spec(name)
    return list(spec.submodule_search_locations or []) if spec is not None else []


@lru_cache(maxsize=1)
def _course_utils_source() -> str:
    folders = _package_folders("course_utils")
    return "\n".join(_installed_source(str(path)) for folder in folders for path in sorted(Path(folder).rglob("*.py")))


def keep_hidden_tests_out(nb: NotebookNode, notes: list[str]) -> None:
    """Replace every output that shows a hidden line that counts; decide each test concerned (module docstring)."""
    for cell in nb.cells:
        grader = cell.get("metadata", {}).get(ROLE_KEY)
        if isinstance(grader, dict):
            grader.pop(_REVIEW, None)
    hidden, visible = _hidden_and_visible(nb)
    if not hidden:
        return
    found = []  # (cell index, output, field, hidden lines it shows)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            for field, text in _texts(output):
                readings = _readings(text)
                lines = {line for line in hidden if any(line in reading for reading in readings)}
                if lines:
                    found.append((index, output, field, lines))
    if not found:
        return
    public = _PublicText(nb, visible, [text for _, output, _, _ in found for _, text in _texts(output)])
    shown: dict[str, set[str]] = {}  # test label -> the hidden lines of it that outputs showed
    where: dict[str, set[str]] = {}  # test label -> labels of the cells whose outputs showed them
    for index, output, field, lines in found:
        unknown = {line for line in lines if not public.has(line)}  # the lines honest code could not print
        if not unknown:
            continue
        tests = sorted({test for line in unknown for test in hidden[line]})
        _replace(output, field, REDACTED.format(", ".join(tests)))
        for line in unknown:
            for test in hidden[line]:
                shown.setdefault(test, set()).add(line)
                where.setdefault(test, set()).add(label(nb, index))
    for index, cell in enumerate(nb.cells):
        test = label(nb, index)
        if not is_test(cell) or test not in shown:
            continue
        cells = ", ".join(sorted(where[test]))
        lines = shown[test]
        literal = any(public.new_words(line) for line in lines)
        if literal or len(lines) >= SEVERAL:
            evidence = "a line with text found nowhere else" if literal else f"{len(lines)} of its lines"
            message = (
                f"text of this test's hidden lines appeared in the output of {cells} ({evidence}): the hidden "
                "tests were read from the kernel, so this test scores 0"
            )
            fail_cell(cell, "GradingIntegrityError", message)
            notes.append(f"{test}: {message} (that output was removed).")
        else:
            cell.metadata.setdefault(ROLE_KEY, {})[_REVIEW] = True
            count = "a line" if len(lines) == 1 else f"{len(lines)} lines"
            notes.append(
                f"{test}: the output of {cells} held {count} also found in this test's hidden lines, made only of "
                "words that honest code prints too; that output was removed. Nothing is concluded from it: the "
                "test keeps its score and is flagged for manual grading."
            )


def flagged_for_review(nb: NotebookNode) -> list[str]:
    """The ``grade_id`` s of the test cells ``keep_hidden_tests_out`` flagged for manual grading."""
    return [
        cell.metadata["nbgrader"]["grade_id"]
        for cell in nb.cells
        if is_test(cell)
        and isinstance(cell.get("metadata", {}).get(ROLE_KEY), dict)
        and cell.metadata[ROLE_KEY].get(_REVIEW) is True
        and cell.metadata["nbgrader"].get("grade_id")
    ]


def _texts(output: dict) -> list[tuple[tuple, str]]:
    """(where in the output, text) of every piece of text an output holds."""
    found: list[tuple[tuple, str]] = []
    if "text" in output:
        found.append((("text",), _joined(output["text"])))
    for mime, value in (output.get("data") or {}).items():
        found.append((("data", mime), _joined(value) if isinstance(value, str | list) else json.dumps(value)))
    if "evalue" in output:
        found.append((("evalue",), str(output["evalue"])))
    for i, line in enumerate(output.get("traceback") or []):
        found.append((("traceback", i), str(line)))
    return found


def _joined(value: object) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _replace(output: dict, field: tuple, note: str) -> None:
    if field[0] == "data":
        output["data"][field[1]] = note if isinstance(output["data"][field[1]], str | list) else {"removed": note}
    elif field[0] == "traceback":
        output["traceback"][field[1]] = note
    else:
        output[field[0]] = note + ("\n" if field[0] == "text" else "")


def label(nb: NotebookNode, index: int) -> str:
    if index >= len(nb.cells):
        return "the end"
    grade_id = nb.cells[index].get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if grade_id:
        return f"`{grade_id}`"
    kind = role(nb.cells[index])
    if kind:
        return f"(grader {kind})"
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not role(c)]
    return f"code cell {code.index(index) + 1}" if index in code else f"cell {index}"
