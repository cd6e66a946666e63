"""Hidden tests never leave the kernel in an output.

Contract: ``keep_hidden_tests_out(nb, notes)`` searches every output of every code cell of a
graded notebook for the hidden lines that ``sanitize`` recorded on each test cell (as
printed, as a ``repr``, as HTML, coloured); an output that holds one is replaced by a note,
and the test whose hidden lines it showed scores 0, with a note (the learner's cell stays,
as evidence). ``label(nb, index)`` names a cell the way every grading note does.
"""

from __future__ import annotations

import html
import json
import re

from nbformat import NotebookNode

from grading.sanitize import fail_cell, hidden_lines, is_test, role

__all__ = ["REDACTED", "keep_hidden_tests_out", "label"]



_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\'": "'", '\\"': '"', "\\\\": "\\"}
_MIN_SECRET = 8  # characters of a hidden line, once stripped, for it to count (as release.find_leaks)
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


def _secrets(nb: NotebookNode) -> dict[str, str]:
    """squeezed hidden line -> the label of its test cell, for lines no visible text contains."""
    hidden: dict[str, str] = {}
    public = []
    for index, cell in enumerate(nb.cells):
        lines = cell.get("source", "").split("\n")
        secret = set(hidden_lines(cell)) if is_test(cell) else set()
        public += [line for i, line in enumerate(lines) if i not in secret]
        for i in secret:
            if i < len(lines) and len(lines[i].strip()) >= _MIN_SECRET:
                hidden.setdefault(_squeeze(lines[i]), label(nb, index))
    text = _squeeze("\n".join(public))
    return {line: label for line, label in hidden.items() if line not in text and "HIDDEN TESTS" not in line}


def _leaked(text: str, secrets: dict[str, str]) -> set[str]:
    readings = _readings(text)
    return {label for line, label in secrets.items() if any(line in reading for reading in readings)}


def keep_hidden_tests_out(nb: NotebookNode, notes: list[str]) -> None:
    """Replace every output that shows a hidden line; the tests it came from score 0, with a note."""
    secrets = _secrets(nb)
    if not secrets:
        return
    leaked: dict[str, set[str]] = {}
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            for field, text in _texts(output):
                found = _leaked(text, secrets)
                if found:
                    _replace(output, field, REDACTED.format(", ".join(sorted(found))))
                    for test in found:
                        leaked.setdefault(test, set()).add(label(nb, index))
    for index, cell in enumerate(nb.cells):
        test = label(nb, index)
        if is_test(cell) and test in leaked:
            where = ", ".join(sorted(leaked[test]))
            message = (
                f"text of this test's hidden lines appeared in the output of {where}: the hidden tests were read "
                "from the kernel, so this test scores 0"
            )
            fail_cell(cell, "GradingIntegrityError", message)
            notes.append(f"{test}: {message} (that output was removed).")


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
