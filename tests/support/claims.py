"""Recorded GPU claims (``tests/gpu_claims/NN.toml``) checked against the kept GPU runs.

A sentence of notebook NN about what happens on a GPU, which the notebook's cells do not
print from their own numbers, is recorded with the relation that makes it true
(``tests/gpu_claims/README.md`` has the format). ``check_file`` checks one claims file
against every kept run (``gpu_runs.kept_runs``) and returns its problems, each naming the
claims file, the claim and the sentence:

* the claims file is not ``NN.toml``, is not TOML, has a key it does not know, or its
  notebook ``notebooks/NN_*.ipynb`` does not exist;
* a claim's sentence no longer stands in a markdown cell of the notebook;
* ``holds`` is not an expression of the whitelist (``check_expression``): comparisons,
  and/or/not, + - * /, numbers, and the calls ``median``, ``spread``, ``speedup``,
  ``value``, ``abs``, ``min``, ``max``; nothing else is ever evaluated;
* no kept run matches the claim (no GPU printed it);
* a run does not print what the claim reads (a stale claim: no such table, row or match);
* the code that printed it has changed since the run (a stale claim too): a cell whose output
  the claim reads no longer stands, as the run had it, in the notebook. A sentence that knowingly
  quotes the run of an earlier version of its cell says so, naming the run's commit, and its
  claim sets ``earlier_code = true``;
* ``holds`` is false on a run (the run contradicts the sentence): the message shows the
  values it read.

``holds`` is never given to ``eval``: ``evaluate`` walks its syntax tree, node by node.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course_utils.timing import format_seconds
from tests.support.paths import ROOT
from tools.gpu_runs import KeptRun, Table, cell_text, kept_runs, notebook_text, tables

CLAIMS_DIR = ROOT / "tests" / "gpu_claims"
KEYS = {"sentence", "runs", "table", "title", "output", "holds", "earlier_code"}
TABLE_READERS = ("median", "spread", "speedup")  # table claims: one argument, a row's label
OUTPUT_READERS = ("value",)  # output claims: one argument, a named group of the regex
NUMERIC = {"abs": (1, 1), "min": (2, None), "max": (2, None)}  # name -> (fewest, most) arguments
_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_COMPARE: dict[type, Callable[[float, float], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


class ClaimError(Exception):
    """A claim is malformed: the message says what to change."""


@dataclass(frozen=True)
class Claim:
    """One ``[[claim]]`` of ``tests/gpu_claims/NN.toml``."""

    path: Path  # the claims file
    index: int  # 1-based, in the file
    number: str  # "NN"
    sentence: str
    holds: str
    tree: ast.Expression  # ``holds``, parsed and checked against the whitelist
    runs: str = "*"
    table: tuple[str, ...] | None = None
    title: str | None = None
    output: str | None = None
    earlier_code: bool = False  # the sentence quotes the run of an earlier version of its cell, and says so

    def describe(self) -> str:
        return f"{self.path.name}, claim {self.index}: {self.sentence!r}"


def collapse(text: str) -> str:
    """Runs of whitespace as one space."""
    return " ".join(text.split())


def check_expression(holds: str, readers: tuple[str, ...]) -> ast.Expression:
    """``holds`` parsed, when every node of it is on the whitelist; ``ClaimError`` otherwise.

    ``readers`` are the reading functions this kind of claim may call (``TABLE_READERS``
    or ``OUTPUT_READERS``).

    >>> check_expression("median('a') > 2 * median('b')", TABLE_READERS).body.__class__.__name__
    'Compare'
    """
    try:
        tree = ast.parse(holds.strip(), mode="eval")
    except SyntaxError as exc:
        raise ClaimError(f"`holds` is not a Python expression: {exc.msg}") from exc
    if not isinstance(tree.body, ast.Compare | ast.BoolOp) and not (
        isinstance(tree.body, ast.UnaryOp) and isinstance(tree.body.op, ast.Not)
    ):
        raise ClaimError("`holds` must be a relation (a comparison, or comparisons joined with and/or/not)")
    _check_node(tree.body, readers)
    return tree


def _check_node(node: ast.AST, readers: tuple[str, ...]) -> None:
    allowed = sorted([*readers, *NUMERIC])
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check_node(value, readers)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub | ast.UAdd):
        _check_node(node.operand, readers)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check_node(node.left, readers)
        _check_node(node.right, readers)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        for part in [node.left, *node.comparators]:
            _check_node(part, readers)
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        pass
    elif isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in allowed:
            shown = name or ast.unparse(node.func)
            raise ClaimError(f"`{shown}` is not a function a claim may call (it may call {', '.join(allowed)})")
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise ClaimError(f"`{ast.unparse(node)}`: plain arguments only")
        if name in readers:
            if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant) or type(node.args[0].value) is not str:
                raise ClaimError(f"`{ast.unparse(node)}`: {name}() takes one quoted name")
        else:
            fewest, most = NUMERIC[name]
            if len(node.args) < fewest or (most is not None and len(node.args) > most):
                raise ClaimError(f"`{ast.unparse(node)}`: wrong number of arguments")
            for arg in node.args:
                _check_node(arg, readers)
    else:
        raise ClaimError(f"`{ast.unparse(node)}` is not allowed in `holds` ({type(node).__name__})")


def evaluate(tree: ast.Expression, read: Callable[[str, str], float]) -> bool:
    """The value of a whitelisted ``holds``; ``read(function, name)`` supplies ``median('x')`` and the like."""

    def value(node: ast.AST):
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.And):
                return all(value(v) for v in node.values)
            return any(value(v) for v in node.values)
        if isinstance(node, ast.UnaryOp):
            operand = value(node.operand)
            if isinstance(node.op, ast.Not):
                return not operand
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Compare):
            left = value(node.left)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = value(comparator)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Call):
            name = node.func.id
            if name in NUMERIC:
                return {"abs": abs, "min": min, "max": max}[name](*(value(arg) for arg in node.args))
            return read(name, node.args[0].value)
        raise ClaimError(f"not allowed: {ast.unparse(node)}")  # _check_node let nothing else through

    return bool(value(tree.body))


def load_claims(path: Path) -> list[Claim]:
    """The claims of one ``NN.toml``; ``ClaimError`` naming the claim when one is malformed."""
    if not re.fullmatch(r"\d\d\.toml", path.name):
        raise ClaimError(f"{path.name}: a claims file is named NN.toml after its notebook (e.g. 07.toml)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ClaimError(f"{path.name}: not TOML: {exc}") from exc
    if set(data) - {"claim"} or not isinstance(data.get("claim", []), list):
        raise ClaimError(f"{path.name}: only [[claim]] tables belong here, not {sorted(set(data) - {'claim'})}")
    return [_claim(path, index, entry) for index, entry in enumerate(data.get("claim", []), 1)]


def _claim(path: Path, index: int, entry: dict) -> Claim:
    where = f"{path.name}, claim {index}"
    if unknown := set(entry) - KEYS:
        raise ClaimError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(KEYS)})")
    for key in ("sentence", "holds"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise ClaimError(f"{where}: `{key}` is required (a string)")
    if ("table" in entry) == ("output" in entry):
        raise ClaimError(f"{where}: give exactly one of `table` (row labels) and `output` (a regex)")
    for key in ("runs", "title", "output"):
        if key in entry and not isinstance(entry[key], str):
            raise ClaimError(f"{where}: `{key}` must be a string")
    if "earlier_code" in entry and not isinstance(entry["earlier_code"], bool):
        raise ClaimError(f"{where}: `earlier_code` is true or false")
    table = entry.get("table")
    if table is not None and (not isinstance(table, list) or not table or not all(isinstance(x, str) for x in table)):
        raise ClaimError(f"{where}: `table` must be a list of the table's row labels")
    if "title" in entry and table is None:
        raise ClaimError(f"{where}: `title` picks one of several tables; it goes with `table`")
    for key in ("title", "output"):
        if key in entry:
            try:
                re.compile(entry[key])
            except re.error as exc:
                raise ClaimError(f"{where}: `{key}` is not a regular expression: {exc}") from exc
    readers = TABLE_READERS if table is not None else OUTPUT_READERS
    try:
        tree = check_expression(entry["holds"], readers)
    except ClaimError as exc:
        raise ClaimError(f"{where}: {exc}") from None
    if "output" in entry:
        groups = set(re.compile(entry["output"]).groupindex)
        used = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and n.func.id == "value"}
        if missing := used - groups:
            raise ClaimError(f"{where}: value() of {sorted(missing)}, which `output` has no named group for")
    return Claim(
        path=path,
        index=index,
        number=path.name[:2],
        sentence=entry["sentence"],
        holds=entry["holds"],
        tree=tree,
        runs=entry.get("runs", "*"),
        table=tuple(table) if table is not None else None,
        title=entry.get("title"),
        output=entry.get("output"),
        earlier_code=entry.get("earlier_code", False),
    )


class _Stale(Exception):
    """The run does not print what the claim reads."""


def _show(function: str, number: float) -> str:
    if function == "median":
        return format_seconds(number)
    if function == "spread":
        return f"{number:.1%}"
    if function == "speedup":
        return f"{number:.3g}x"
    return f"{number:g}"


def _pick_table(claim: Claim, found: list[Table]) -> Table:
    candidates = [t for t in found if set(claim.table) <= set(t.labels)]
    if claim.title is not None:
        candidates = [t for t in candidates if re.search(claim.title, t.title)]
    if not candidates:
        printed = "; ".join(t.describe() for t in found) or "none"
        title = f" under a title matching {claim.title!r}" if claim.title else ""
        raise _Stale(f"no table with rows {list(claim.table)}{title} (its tables: {printed})")
    if len(candidates) > 1:
        raise _Stale(
            f"{len(candidates)} tables have rows {list(claim.table)}: add `title`, a regex for the lines printed "
            f"above the one you mean ({'; '.join(repr(t.title) for t in candidates)})"
        )
    return candidates[0]


def _cells_of_match(nb: NotebookNode, start: int, end: int) -> list[int]:
    """The indices of the code cells whose text outputs hold ``notebook_text(nb)[start:end]``."""
    cells, offset = [], 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        length = len(cell_text(cell))
        if offset <= end and start <= offset + length:
            cells.append(index)
        offset += length + 1  # notebook_text joins the cells with a newline
    return cells


def _code(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def changed_since_run(cells: list[int], run_nb: NotebookNode, current: NotebookNode) -> list[int]:
    """The cells (indices in the run's notebook) whose code no longer stands, as the run had it, in ``current``."""
    now = {_code(cell.source) for cell in current.cells if cell.cell_type == "code"}
    return [index for index in cells if _code(run_nb.cells[index].source) not in now]


def _code_check(claim: Claim, run: KeptRun, cells: list[int], current: NotebookNode | None) -> str | None:
    """Why the run's numbers do not speak for the notebook's code as it is (None: they do)."""
    if current is None:
        return None
    run_nb = run.notebook(claim.number)
    changed = changed_since_run(cells, run_nb, current)
    commit = str(run.info.get("commit", "?"))
    named = ", ".join(f"cell {i}" for i in cells)
    if changed and not claim.earlier_code:
        shown = ", ".join(f"cell {i}" for i in changed)
        return (
            f"STALE: {claim.describe()}\n  run {run.name} printed it from {named}; the code of {shown} has changed "
            f"since (the run is of commit {commit}): run the notebook on a GPU again, or say in the sentence that it "
            f"quotes the run of commit {commit} and set `earlier_code = true`"
        )
    if changed and commit not in claim.sentence:
        return (
            f"STALE: {claim.describe()}\n  `earlier_code = true`, but the sentence does not name the run's commit "
            f"({commit}): a reader must know which code printed these numbers"
        )
    if not changed and claim.earlier_code:
        return (
            f"FAILED: {claim.describe()}\n  `earlier_code = true`, but {named} of run {run.name} stand unchanged in "
            "the notebook: the run printed today's code; drop `earlier_code`"
        )
    return None


def check_run(claim: Claim, run: KeptRun, current: NotebookNode | None = None) -> str | None:
    """None when ``claim`` holds on ``run``; otherwise what is wrong (stale or contradicted).

    ``current``: the notebook as it is now; when given, the cells whose outputs the claim
    reads must stand in it as the run had them (``changed_since_run``).
    """
    nb = run.notebook(claim.number)
    where = f"notebook {claim.number}"
    read_values: dict[str, str] = {}
    cells: list[int] = []
    try:
        if claim.table is not None:
            table = _pick_table(claim, tables(nb))
            where += f", {table.describe()}"
            cells = [table.cell]
            first = table.rows[0]

            def read(function: str, label: str) -> float:
                try:
                    row = table.row(label)
                except KeyError:
                    raise _Stale(f"the table has no row {label!r} (rows: {table.labels})") from None
                number = {"median": row.median, "spread": row.spread, "speedup": first.median / row.median}[function]
                read_values[f"{function}({label!r})"] = _show(function, number)
                return number

        else:
            match = re.search(claim.output, notebook_text(nb))
            if match is None:
                raise _Stale(f"nothing in its outputs matches `output` {claim.output!r}")
            cells = _cells_of_match(nb, match.start(), match.end())

            def read(function: str, name: str) -> float:
                text = (match[name] or "").replace(",", "")
                try:
                    number = float(text)
                except ValueError:
                    raise _Stale(f"group {name!r} matched {match[name]!r}, not a number") from None
                read_values[f"value({name!r})"] = _show(function, number)
                return number

        holds = evaluate(claim.tree, read)
    except _Stale as exc:
        return f"STALE: {claim.describe()}\n  run {run.name} ({run.describe()}), {where}: {exc}"
    except (ZeroDivisionError, OverflowError) as exc:
        return f"FAILED: {claim.describe()}\n  run {run.name}, {where}: `holds` raised {exc}"
    if holds:
        return _code_check(claim, run, cells, current)
    values = ", ".join(f"{key} = {shown}" for key, shown in read_values.items())
    return (
        f"CONTRADICTED: {claim.describe()}\n  run {run.name} ({run.describe()}), {where}\n"
        f"  holds = {claim.holds!r} is false: {values}"
    )


def check_file(path: Path, root: Path = ROOT, runs: list[KeptRun] | None = None) -> list[str]:
    """Every problem of one claims file (empty when each claim holds on every kept run it matches)."""
    runs = kept_runs(root / "notebooks" / "gpu-runs") if runs is None else runs
    try:
        claims = load_claims(path)
    except ClaimError as exc:
        return [str(exc)]
    number = path.name[:2]
    notebooks = sorted((root / "notebooks").glob(f"{number}_*.ipynb"))
    if len(notebooks) != 1:
        return [f"{path.name}: claims for notebook {number}, but notebooks/ has {len(notebooks)} notebooks {number}_*"]
    current = nbformat.read(notebooks[0], as_version=4)
    markdown = [collapse(cell.source) for cell in current.cells if cell.cell_type == "markdown"]
    problems = []
    for claim in claims:
        if not any(collapse(claim.sentence) in cell for cell in markdown):
            problems.append(f"GONE: {claim.describe()} no longer stands in a markdown cell of {notebooks[0].name}")
        matching = [r for r in runs if fnmatch.fnmatchcase(r.name, claim.runs) and r.notebook(claim.number)]
        if not matching:
            held = sorted(r.name for r in runs if r.notebook(claim.number))
            problems.append(
                f"UNCHECKED: {claim.describe()}: no kept run matches runs={claim.runs!r} and holds notebook "
                f"{claim.number} (runs that do: {held or 'none'}): no GPU printed it"
            )
        problems += [problem for run in matching if (problem := check_run(claim, run, current))]
    return problems


def claim_files(claims_dir: Path = CLAIMS_DIR) -> list[Path]:
    """Every file of the claims folder except its README."""
    if not claims_dir.is_dir():
        return []
    return sorted(p for p in claims_dir.iterdir() if p.is_file() and p.name != "README.md")
