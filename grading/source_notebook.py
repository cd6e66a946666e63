"""What the instructor's notebook says about its graded cells: from the gradebook, or from a release.

Contract: a ``SourceNotebook`` lists the graded, answer, task and locked cells of one
assignment notebook in notebook order, each a ``SourceCell`` with the metadata nbgrader
gives it. ``from_gradebook`` reads nbgrader's gradebook (full tests, hidden ones included),
``from_release`` a released notebook (visible tests only, what a learner's machine has).
Both only read; the values are frozen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nbformat import NotebookNode

from grading.cells import nbgrader_meta

__all__ = ["SourceCell", "SourceNotebook"]


@dataclass(frozen=True)
class SourceCell:
    """One cell of the instructor's notebook with nbgrader metadata, as the gradebook keeps it."""

    name: str
    cell_type: str
    source: str
    checksum: str | None
    locked: bool
    grade: bool = False
    solution: bool = False
    task: bool = False
    points: float | None = None
    released: str | None = None  # what the release showed of a locked cell (visible tests only), if known

    @property
    def is_test(self) -> bool:
        """An autograded test cell: code, graded, not an answer."""
        return self.grade and not self.solution and self.cell_type == "code"

    def metadata(self) -> dict:
        """The nbgrader cell metadata (schema 3) nbgrader would give this cell."""
        meta = {
            "grade": self.grade,
            "grade_id": self.name,
            "locked": self.locked,
            "schema_version": 3,
            "solution": self.solution,
            "task": self.task,
            "cell_type": self.cell_type,
        }
        if self.grade or self.task:
            meta["points"] = self.points
        if self.checksum:
            meta["checksum"] = self.checksum
        return meta


@dataclass(frozen=True)
class SourceNotebook:
    """What the instructor's notebook says about its graded cells, in notebook order."""

    assignment: str
    name: str
    cells: tuple[SourceCell, ...]
    kernelspec: dict | None = None

    def cell(self, name: str | None) -> SourceCell | None:
        """The cell with grade_id ``name``, or None (also for ``name`` None: a cell without one)."""
        return next((c for c in self.cells if c.name == name), None)

    @classmethod
    def from_gradebook(cls, gb, assignment: str, notebook: str, release: NotebookNode | None = None) -> SourceNotebook:
        """From nbgrader's gradebook (full tests, hidden ones included); ``release`` tells edited tests apart."""
        released = {nbgrader_meta(c).get("grade_id"): c.source for c in release.cells} if release else {}
        position = {name: index for index, name in enumerate(released)}
        record = gb.find_notebook(notebook, assignment)
        grades = {c.name: c for c in record.grade_cells}
        solutions = {c.name for c in record.solution_cells}
        tasks = {c.name: c for c in record.task_cells}
        cells = []
        # the gradebook keeps cells in insertion (notebook) order; the release, when at hand, confirms it
        end = len(position)
        for source in sorted(record.source_cells, key=lambda cell: position.get(cell.name, end)):
            graded = grades.get(source.name) or tasks.get(source.name)
            cells.append(
                SourceCell(
                    name=source.name,
                    cell_type=source.cell_type,
                    source=source.source,
                    checksum=source.checksum,
                    locked=bool(source.locked),
                    grade=source.name in grades,
                    solution=source.name in solutions,
                    task=source.name in tasks,
                    points=float(graded.max_score) if graded is not None else None,
                    released=released.get(source.name) if source.locked else None,
                )
            )
        kernelspec = json.loads(record.kernelspec) if record.kernelspec else None
        return cls(assignment, notebook, tuple(cells), kernelspec)

    @classmethod
    def from_release(
        cls, nb: NotebookNode, assignment: str, notebook: str, *, trust_sources: bool = True
    ) -> SourceNotebook:
        """From a released notebook (visible tests only: what a learner's machine has).

        ``trust_sources=False`` reads a learner's own notebook: its cells are taken as they
        are, and a changed locked cell shows only through its checksum (``nbgrader validate``).
        """
        from nbgrader import utils

        cells = []
        for cell in nb.cells:
            meta = nbgrader_meta(cell)
            if not meta.get("grade_id") or not any(meta.get(k) for k in ("grade", "solution", "locked", "task")):
                continue
            cells.append(
                SourceCell(
                    name=meta["grade_id"],
                    cell_type=cell.cell_type,
                    source=cell.source,
                    checksum=meta.get("checksum"),
                    locked=utils.is_locked(cell),
                    grade=bool(meta.get("grade")),
                    solution=bool(meta.get("solution")),
                    task=bool(meta.get("task")),
                    points=float(meta["points"]) if "points" in meta else None,
                    released=cell.source if trust_sources and utils.is_locked(cell) else None,
                )
            )
        return cls(assignment, notebook, tuple(cells), nb.metadata.get("kernelspec"))
