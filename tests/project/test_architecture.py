"""The shape of the code: no import circle, no module too long without a reason, one direction between the halves.

Run after moving code between modules. The import graph is grimp's (the library behind
import-linter), built from the source, function-level imports included, so an import hidden
inside a function to dodge a cycle still counts as one; imports made only for type checking
(``if TYPE_CHECKING:``) do not run and are left out.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

from tests.support.paths import ROOT

PACKAGES = ("grading", "course_utils")
MAX_LINES = 500
LONG_REASON = "Longer than 500 lines because"
"""A module over ``MAX_LINES`` says why in its first lines, starting with these words."""


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # Imports under ``if TYPE_CHECKING:`` are left out: they never run, and naming a type for an
    # annotation is how a module states what it is handed. No cache: a stale graph would hide a change.
    return grimp.build_graph(
        *PACKAGES, include_external_packages=False, exclude_type_checking_imports=True, cache_dir=None
    )


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    modules = sorted(graph.modules)
    edges = {module: sorted(graph.find_modules_directly_imported_by(module)) for module in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_import_circle(graph: grimp.ImportGraph) -> None:
    cycles = _cycles(graph)
    described = []
    for group in cycles:
        chain = graph.find_shortest_chain(importer=group[0], imported=group[1]) or ()
        back = graph.find_shortest_chain(importer=group[1], imported=group[0]) or ()
        described.append(f"{' -> '.join(chain)} and back: {' -> '.join(back)}")
    assert not cycles, "import circles:\n" + "\n".join(described)


def test_the_cycle_finder_finds_a_circle() -> None:
    """The check above can fail: two modules importing each other are reported."""
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


def test_course_utils_never_imports_the_grader(graph: grimp.ImportGraph) -> None:
    """A learner's install (Colab) brings course_utils only: it must not need grading/."""
    chains = graph.find_shortest_chains(importer="course_utils", imported="grading")
    assert not chains, f"course_utils imports the grader: {sorted(chains)}"


def _modules() -> list[Path]:
    paths = (path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    return sorted(path for path in paths if "release" not in path.parts)


def test_no_module_is_long_without_its_reason() -> None:
    too_long = []
    for path in _modules():
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_LINES and not any(LONG_REASON in line for line in lines[:80]):
            too_long.append(f"{path.relative_to(ROOT)}: {len(lines)} lines")
    assert not too_long, (
        f"over {MAX_LINES} lines with no '{LONG_REASON} ...' in the first lines (split it, or say why not):\n"
        + "\n".join(too_long)
    )
