"""Text a learner controls, made safe for the place a person reads it.

A submission controls much of what the grader reports: cell sources, outputs, exception
messages, its kernelspec's name, file and folder names; an LMS roster controls display
names. None of it may act where it is shown. Each function here is for one kind of
reader, and every such text goes through the one for its reader at the point where the
grader writes it:

* ``terminal_text``: a terminal or a log. Control characters (``ESC``, ``\\r``, the C1
  range, ``DEL``), line breaks and the Unicode characters that reorder or hide text
  (bidirectional overrides, zero-width marks) are shown as visible escapes (``\\x1b``,
  ``\\u202e``): a note cannot move the cursor, erase the line before it, set the window's
  title or print a line of its own.
* ``markdown_text``: a markdown cell the grader writes (the grading notes, the feedback's
  test-results table). Every ASCII punctuation character becomes a numeric character
  reference, which CommonMark (and the renderers of JupyterLab, nbconvert and the
  formgrader) show as that literal character and never read as markup: no raw HTML, no
  link, no code span to break out of, no table cell to end. Line breaks become spaces, so
  the text stays inside its list item or table cell.
* ``csv_cell``: a cell of a CSV file opened in a spreadsheet. A text that starts with
  ``=``, ``+``, ``-``, ``@``, a tab or a carriage return would be read as a formula
  (OWASP's "CSV injection"); it is prefixed with ``'``, which spreadsheets show as text. So
  is one whose first character after leading blanks is one of those (`` =1+1``: a
  spreadsheet that trims blanks on import would read the rest). Numbers, and texts that are
  plain numbers (``-2``, ``+1.5``), are left alone.

Learner HTML (markdown cells, rich outputs) is not escaped here: ``grading.safe_html`` makes the
autograded notebook inert where it is written, and the feedback's and the formgrader's exporter
with it.
"""

from __future__ import annotations

import re
import string

__all__ = ["csv_cell", "markdown_text", "terminal_text"]

# C0 controls (tab and newline included: one note, one line), DEL, the C1 range, and Unicode's
# invisible or reordering format characters (Trojan Source: bidi embeddings, overrides and
# isolates; zero-width and directional marks; the BOM; line and paragraph separators).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)
_PUNCTUATION = frozenset(string.punctuation)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: object) -> str:
    """``text`` as one line that a terminal shows as written: every control character visible as an escape."""
    return _UNSAFE.sub(_escape, str(text))


def markdown_text(text: object) -> str:
    """``text`` for a grader-written markdown cell: shown literally, never read as markup or HTML."""
    flat = " ".join(_UNSAFE.sub(" ", str(text)).split())
    return "".join(f"&#{ord(c)};" if c in _PUNCTUATION else c for c in flat)


def csv_cell(value: object) -> object:
    """``value`` for a CSV cell that a spreadsheet opens: a text that would be a formula is kept as text."""
    if not isinstance(value, str):
        return value
    trimmed = value.lstrip()
    if not (value.startswith(_FORMULA_START) or trimmed.startswith(_FORMULA_START)) or _NUMBER.fullmatch(trimmed):
        return value
    return "'" + value
