"""The test cell before it runs: its hidden lines scrubbed from the kernel, then handed to the rewriter.

Contract: ``_CellHook`` is the AST transformer ``install`` adds to IPython's. It acts on the one
cell after a check that armed it (``state.armed``: the test cell's hidden line numbers) and on
no other: it blanks the hidden lines wherever the kernel keeps the cell's source (``linecache``,
the kernel's request; IPython's execution record once the cell runs:
``_scrub_execution_record``), tells the audit hook the cell was compiled, and returns the cell
rewritten by ``grading.guard.rewrite._rewrite``; a cell it cannot prepare becomes one that
raises ``GradingIntegrityError`` (IPython would otherwise drop a transformer that fails).
"""

from __future__ import annotations

import ast
import linecache
import sys
from typing import TYPE_CHECKING, Any

from grading.guard.protocol import EVENT, GradingIntegrityError
from grading.guard.rewrite import _rewrite

if TYPE_CHECKING:
    from grading.guard.state import _State


class _CellHook:
    """IPython's AST transformer: rewrites the one cell after a check (a test cell), leaves others alone."""

    __slots__ = ("state",)

    def __init__(self, state: _State) -> None:
        self.state = state

    def visit(self, node: ast.AST) -> ast.AST:
        """The armed test cell rewritten (IPython calls ``visit`` on each cell's whole module once)."""
        state = self.state
        hidden = state.armed
        if hidden is None or not isinstance(node, ast.Module):
            return node
        state.armed = None
        try:
            filename, semicolon = _scrub(state.shell, hidden)
            sys.audit(EVENT + "compiled", filename)
            return _rewrite(node, show=not semicolon)
        except Exception as error:  # never let IPython unregister the transformer: the test fails instead
            message = f"Grader problem: the grader could not prepare this test ({type(error).__name__}: {error})"
            failing = ast.parse(f"raise {GradingIntegrityError.__name__}({message!r})")
            failing.body.insert(0, ast.parse(f"from grading.guard import {GradingIntegrityError.__name__}").body[0])
            return failing


def _cell_name(shell: Any) -> str | None:
    """The ``linecache`` name IPython gave the cell being compiled."""
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return next(reversed(names), None) if names else None


def _blank(text: str, hidden: set[int], offset: int = 0) -> str:
    """``text`` with the lines at ``hidden`` (counted from ``offset``) emptied."""
    return "\n".join("" if i + offset in hidden else line for i, line in enumerate(text.split("\n")))


def _ends_with_semicolon(text: str) -> bool:
    """IPython's rule: a cell whose last token is ``;`` displays nothing."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return False
    skip = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)
    last = next((t for t in reversed(tokens) if t.type not in skip), None)
    return last is not None and last.type == tokenize.OP and last.string == ";"


def _scrub(shell: Any, hidden: tuple[int, ...]) -> tuple[str | None, bool]:
    """Blank a test cell's hidden lines wherever the kernel keeps its source; (its linecache name, ends in ;)."""
    lines = set(hidden)
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    info = getattr(result, "info", None)
    raw = getattr(info, "raw_cell", None) or ""
    name = _cell_name(shell)
    entry: Any = linecache.cache.get(name) if name else None  # (size, mtime, lines, name)
    text = "".join(entry[2]) if entry else raw
    semicolon = _ends_with_semicolon(text)
    if not lines:
        return name, semicolon
    if entry and name:  # IPython drops a cell's leading empty lines before it compiles it
        offset = len(raw.split("\n")) - len(raw.lstrip("\n\r\t ").split("\n")) if raw else 0
        kept = ["\n" if i + offset in lines else line for i, line in enumerate(entry[2])]
        linecache.cache[name] = (entry[0], None, kept, name)
    kernel = getattr(shell, "kernel", None)
    parent = kernel.get_parent("shell") if kernel is not None and hasattr(kernel, "get_parent") else None
    content = parent.get("content") if isinstance(parent, dict) else None
    if isinstance(content, dict) and isinstance(content.get("code"), str):
        content["code"] = _blank(content["code"], lines)
    return name, semicolon


def _scrub_execution_record(shell: Any, hidden: tuple[int, ...]) -> None:
    """Blank the hidden lines in IPython's record of the running cell (it exists only once the cell runs)."""
    info = getattr(getattr(getattr(shell, "displayhook", None), "exec_result", None), "info", None)
    for attr in ("raw_cell", "transformed_cell") if hidden and info is not None else ():
        if isinstance(getattr(info, attr, None), str):
            setattr(info, attr, _blank(getattr(info, attr), set(hidden)))
