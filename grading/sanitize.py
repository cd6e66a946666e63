"""The notebook that is graded: the learner's own notebook, sanitized as nbgrader does, then hardened.

Contract: ``read_submission`` turns a file's bytes into a notebook or an honest reason why
not (empty, too large, not UTF-8, not JSON, not a notebook); old nbformat versions are
upgraded. ``prepare`` starts from that notebook, so everything the learner wrote stays:
written answers, task cells, cells they added (run where they put them), and it then

1. repairs nbgrader metadata nbgrader itself would choke on (damaged, from an old schema,
   naming a cell the gradebook does not know): such a cell becomes an ordinary cell,
   and a cell the gradebook knows gets back its role (test, answer, task, points);
2. runs nbgrader's own sanitizing preprocessors (``Autograde.sanitize_preprocessors``
   of the course's config: ``ClearOutput``, ``DeduplicateIds``, ``OverwriteKernelspec``,
   ``OverwriteCells``, ``CheckCellMetadata`` by default) when a gradebook is at hand;
3. hardens what nbgrader leaves open: every locked cell's source comes from the
   gradebook (edited tests restored, hidden tests included), a test cell the learner
   deleted or stripped of its metadata is put back after the cell that precedes it in
   the instructor's notebook, and an answer cell whose metadata was stripped is found
   by its stub's ``def``/``class`` line and gets its metadata back.

Every change is explained in ``Prepared.notes``. Nothing a submission wrote decides how
the grader treats a cell: the grader's own metadata (``course_grading``) is removed from
every submitted cell first, and the grader's cells are only those ``with_grader_cells``
adds (the preamble, a check before each test cell and a closing cell after it), which
``without_grader_cells`` removes again before the notes go on top. Each test cell restored
from the gradebook is told which of its lines are hidden tests (``hidden_lines``): the
guard scrubs them from the kernel, and the executor keeps them out of every output.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass, field

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

from grading.guard import ROLE_KEY, closing, guard, preamble
from grading.untrusted import markdown_text

__all__ = [
    "MAX_SUBMISSION_BYTES",
    "Prepared",
    "SourceCell",
    "SourceNotebook",
    "changed_cells",
    "fail_all_tests",
    "fail_cell",
    "hidden_lines",
    "is_test",
    "nbgrader_meta",
    "notes_cell",
    "prepare",
    "read_submission",
    "role",
    "stand_in",
    "with_grader_cells",
    "without_grader_cells",
]

MAX_SUBMISSION_BYTES = 20 * 1024 * 1024


def nbgrader_meta(cell: NotebookNode) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def is_test(cell: NotebookNode) -> bool:
    """An autograded test cell: code, graded, not an answer."""
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def role(cell: NotebookNode) -> str | None:
    """``preamble``, ``guard``, ``close`` or ``notes`` for the grader's own cells, else None.

    Only the grader writes this metadata: ``prepare`` removes it from every submitted cell.
    """
    value = cell.get("metadata", {}).get(ROLE_KEY, {})
    return value.get("role") if isinstance(value, dict) else None


def hidden_lines(cell: NotebookNode) -> list[int]:
    """The line numbers (from 0) of a test cell's hidden tests, as ``prepare`` recorded them."""
    value = cell.get("metadata", {}).get(ROLE_KEY, {})
    lines = value.get("hidden_lines", []) if isinstance(value, dict) else []
    return [int(i) for i in lines if isinstance(i, int)]


_HIDDEN_MARKERS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")  # nbgrader's default ClearHiddenTests delimiters


def _hidden(source: str, released: str | None) -> list[int]:
    """Which lines of a test cell the release did not show (its hidden tests, markers included).

    With the release at hand, every line it lacks (whatever the course's markers); without
    it, the lines between nbgrader's default markers.
    """
    lines = source.split("\n")
    if released is not None:
        matcher = difflib.SequenceMatcher(None, lines, released.split("\n"), autojunk=False)
        shown = {i for block in matcher.get_matching_blocks() for i in range(block.a, block.a + block.size)}
        return [i for i in range(len(lines)) if i not in shown]
    hidden, inside = [], False
    for index, line in enumerate(lines):
        if _HIDDEN_MARKERS[0] in line:
            inside = True
        if inside:
            hidden.append(index)
        if _HIDDEN_MARKERS[1] in line:
            inside = False
    return hidden


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
        return self.grade and not self.solution and self.cell_type == "code"

    def metadata(self) -> dict:
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

    def cell(self, name: str) -> SourceCell | None:
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


@dataclass
class Prepared:
    """The notebook to grade and what the grader noticed on the way."""

    nb: NotebookNode
    notes: list[str] = field(default_factory=list)
    runnable: bool = True


def read_submission(data: bytes) -> tuple[NotebookNode | None, str | None, int | None]:
    """(notebook as nbformat 4, None, original major version) or (None, why it cannot be read, None)."""
    if len(data) > MAX_SUBMISSION_BYTES:
        return None, f"the file is {len(data) / 1e6:.0f} MB, over the {MAX_SUBMISSION_BYTES / 1e6:.0f} MB limit", None
    if not data.strip():
        return None, "the file is empty", None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"the file is not UTF-8 text (byte {error.start}), so it is not a saved notebook", None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as error:
        return None, f"the file is not valid JSON, probably not saved completely ({str(error)[:120]})", None
    version = raw.get("nbformat") if isinstance(raw, dict) else None
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises many types for many kinds of garbage
        return None, f"the file is JSON but not a notebook ({type(error).__name__}: {str(error)[:120]})", None
    if not isinstance(nb.get("cells"), list):
        return None, "the file is JSON but not a notebook (no list of cells)", None
    for cell in nb.cells:
        if not isinstance(cell.get("metadata"), dict):
            cell["metadata"] = nbformat.NotebookNode()
        if not isinstance(cell.get("source"), str):
            cell["source"] = "".join(cell.get("source") or []) if isinstance(cell.get("source"), list) else ""
    return nb, None, version if isinstance(version, int) else None


def _repair_metadata(nb: NotebookNode, spec: SourceNotebook, notes: list[str]) -> None:
    """Make every cell's nbgrader metadata something nbgrader can process, and true to the gradebook."""
    from nbgrader import utils
    from nbgrader.nbgraderformat import MetadataValidator

    validator = MetadataValidator()
    for index, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.get("metadata", {}):
            continue
        raw = cell.metadata["nbgrader"]
        if not isinstance(raw, dict):
            del cell.metadata["nbgrader"]
            notes.append(f"Cell {index + 1} had damaged nbgrader metadata; it was run as an ordinary cell.")
            continue
        known = spec.cell(raw.get("grade_id")) if isinstance(raw.get("grade_id"), str) else None
        if known is not None:
            expected = known.metadata()
            flags = ("grade", "solution", "locked", "task")
            changed = [k for k in flags if bool(raw.get(k)) != bool(expected[k])]
            if known.grade and _number(raw.get("points")) != known.points:
                changed.append("points")
            if changed:
                notes.append(f"`{known.name}`: its nbgrader metadata had been changed; the instructor's was used.")
            if known.locked and _edited(cell, known, raw):
                notes.append(f"`{known.name}` had been edited; the instructor's version was graded.")
            cell.metadata["nbgrader"] = {k: v for k, v in expected.items() if k != "checksum"}
            continue
        try:
            validator.upgrade_cell_metadata(cell)
            if "nbgrader" in cell.metadata:
                validator.validate_cell(cell)
        except Exception:
            cell.metadata.pop("nbgrader", None)
            notes.append(f"Cell {index + 1} had damaged nbgrader metadata; it was run as an ordinary cell.")
            continue
        meta = cell.metadata.get("nbgrader", {})
        if utils.is_grade(cell) or utils.is_solution(cell) or utils.is_locked(cell) or utils.is_task(cell):
            del cell.metadata["nbgrader"]
            notes.append(
                f"Cell {index + 1} claimed to be graded cell `{meta.get('grade_id')}`, which this assignment "
                "does not have; it was run as an ordinary cell."
            )


def changed_cells(nb: NotebookNode, spec: SourceNotebook) -> list[str]:
    """grade_ids of the locked cells a learner changed (what ``nbgrader validate`` calls changed)."""
    changed = []
    for cell in nb.cells:
        raw = nbgrader_meta(cell)
        known = spec.cell(raw.get("grade_id")) if isinstance(raw.get("grade_id"), str) else None
        if known is not None and known.locked and _edited(cell, known, raw):
            changed.append(known.name)
    return list(dict.fromkeys(changed))


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _edited(cell: NotebookNode, known: SourceCell, raw: dict) -> bool:
    """Whether the learner changed a locked cell (against the release, else against its own checksum)."""
    from nbgrader import utils

    if cell.get("cell_type") != known.cell_type:
        return True
    if known.released is not None:
        return cell.source.rstrip() != known.released.rstrip()
    if "checksum" not in raw:  # nothing to compare with: nbgrader validate does not call it changed either
        return False
    probe = copy.deepcopy(cell)
    probe.metadata["nbgrader"] = {**known.metadata(), "points": known.points}
    return raw.get("checksum") != utils.compute_checksum(probe)


def _duplicates(nb: NotebookNode, notes: list[str]) -> None:
    seen: dict[str, int] = {}
    for cell in nb.cells:
        name = nbgrader_meta(cell).get("grade_id")
        if name:
            seen[name] = seen.get(name, 0) + 1
    for name, count in seen.items():
        if count > 1:
            notes.append(
                f"`{name}` appears {count} times; as in nbgrader, the last copy is graded and the earlier ones "
                "run as ordinary cells."
            )


def _signature(source: str) -> str | None:
    """The first ``def``/``class`` line of a stub, which a learner's answer keeps."""
    for line in source.splitlines():
        if line.startswith(("def ", "class ", "async def ")):
            return line.strip()
    return None


def _restore(nb: NotebookNode, spec: SourceNotebook, notes: list[str]) -> None:
    """Locked sources from the gradebook; stripped answers found by signature; deleted tests put back."""
    from nbgrader import utils

    present = {nbgrader_meta(c).get("grade_id"): c for c in nb.cells if nbgrader_meta(c).get("grade_id")}
    for source in spec.cells:
        cell = present.get(source.name)
        if cell is not None and cell.cell_type != source.cell_type:
            _set_cell_type(cell, source.cell_type)
        if cell is not None and source.locked and cell.source != source.source:
            cell.source = source.source
        if cell is not None and source.checksum:
            cell.metadata["nbgrader"]["checksum"] = source.checksum
    taken: set[int] = set()
    for source in spec.cells:
        if source.name in present or not source.solution or source.cell_type != "code":
            continue
        signature = _signature(source.source)
        if signature is None:
            continue
        for index, cell in enumerate(nb.cells):
            if index in taken or cell.get("cell_type") != "code" or "nbgrader" in cell.metadata:
                continue
            if signature in (line.strip() for line in cell.source.splitlines()):
                cell.metadata["nbgrader"] = source.metadata()
                present[source.name] = cell
                taken.add(index)
                notes.append(f"`{source.name}` had no nbgrader metadata; the cell defining `{signature}` was graded.")
                break
    anchor = -1
    for source in spec.cells:
        cell = present.get(source.name)
        if cell is not None:
            anchor = next(i for i, c in enumerate(nb.cells) if c is cell)
            continue
        if source.is_test:
            restored = new_code_cell(source.source, metadata={"nbgrader": source.metadata()})
            anchor += 1
            nb.cells.insert(anchor, restored)
            present[source.name] = restored
            notes.append(f"`{source.name}` was missing from the submission; the instructor's test was put back.")
        elif source.grade or source.task:
            notes.append(
                f"`{source.name}` ({'written answer' if source.cell_type == 'markdown' else 'graded answer'}) "
                "is missing from the submission: it has no score until graded by hand."
            )
        elif source.solution:
            notes.append(f"No answer cell `{source.name}` in the submission (nor a cell defining its function).")
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("locked") and "checksum" in meta and utils.compute_checksum(cell) != meta["checksum"]:
            raise RuntimeError(f"inconsistent checksum for restored cell {meta.get('grade_id')}")


def _set_cell_type(cell: NotebookNode, cell_type: str) -> None:
    """What nbgrader's ``OverwriteCells.update_cell_type`` does."""
    cell.cell_type = cell_type
    if cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


def _run_preprocessors(preprocessors: list, nb: NotebookNode, resources: dict) -> NotebookNode:
    for preprocessor in preprocessors:
        nb, resources = preprocessor(nb, resources)
        for cell in nb.cells:
            # nbgrader's DeduplicateIds empties the metadata of earlier copies, and its own
            # CheckCellMetadata then rejects the whole notebook ("old schema"): make them ordinary cells
            if cell.get("metadata", {}).get("nbgrader", None) == {}:
                del cell.metadata["nbgrader"]
    return nb


def prepare(
    data: bytes, spec: SourceNotebook, sanitizers: list | None = None, resources: dict | None = None
) -> Prepared:
    """The notebook to grade from a submission's bytes; see the module docstring.

    ``sanitizers`` are nbgrader preprocessor instances run after the metadata repair
    (with ``resources``, nbgrader's ``resources['nbgrader']`` for this submission); without
    them, nbgrader's ``ClearOutput`` and ``DeduplicateIds`` run, which need no gradebook.
    """
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds

    submitted, problem, version = read_submission(data)
    if submitted is None:
        reason = problem or "unreadable"
        return Prepared(stand_in(spec, reason), [f"Not graded: {reason}. Every test scores 0."], False)
    notes: list[str] = []
    if version is not None and version < 4:
        notes.append(f"The notebook was in the old nbformat {version}; it was converted to nbformat 4.")
    kernel = submitted.get("metadata", {}).get("kernelspec", {})
    if isinstance(kernel, dict) and kernel.get("name") not in (None, "python3"):
        notes.append(f"The notebook asked for kernel `{kernel.get('name')}`; it was graded with Python 3.")
    nb = submitted
    _strip_grader_metadata(nb, notes)
    _repair_metadata(nb, spec, notes)
    _duplicates(nb, notes)
    if sanitizers is None:
        sanitizers = [ClearOutput(), DeduplicateIds()]
    nb = _run_preprocessors(sanitizers, nb, resources or {})
    _restore(nb, spec, notes)
    if spec.kernelspec:
        nb.metadata["kernelspec"] = copy.deepcopy(spec.kernelspec)
    CheckCellMetadata().preprocess(nb, {})
    _mark_hidden_lines(nb, spec)
    return Prepared(nb, list(dict.fromkeys(notes)))


def _strip_grader_metadata(nb: NotebookNode, notes: list[str]) -> None:
    """The grader's own metadata is the grader's to write: a submitted cell that carries it loses it.

    A cell claiming to be the grader's notes, preamble or check would otherwise be removed from
    the autograded notebook (hiding what it did) or run with the grader's time limits.
    """
    for index, cell in enumerate(nb.cells):
        if ROLE_KEY in cell.get("metadata", {}):
            del cell.metadata[ROLE_KEY]
            notes.append(
                f"Cell {index + 1} carried the grader's own metadata (`{ROLE_KEY}`), which only the grader "
                "writes; it was removed and the cell graded as the learner's."
            )
    if ROLE_KEY in nb.get("metadata", {}):
        del nb.metadata[ROLE_KEY]


def _mark_hidden_lines(nb: NotebookNode, spec: SourceNotebook) -> None:
    """Tell each test cell restored from the gradebook which of its lines are hidden tests."""
    for cell in nb.cells:
        known = spec.cell(nbgrader_meta(cell).get("grade_id")) if is_test(cell) else None
        if known is None or not known.is_test or cell.source != known.source:
            continue
        lines = _hidden(cell.source, known.released)
        if lines:
            cell.metadata[ROLE_KEY] = {"hidden_lines": lines}


def stand_in(spec: SourceNotebook, reason: str) -> NotebookNode:
    """A stand-in for a file that cannot be read: the instructor's graded cells, every test failed."""
    cells = []
    for source in spec.cells:
        if source.cell_type == "code":
            cells.append(new_code_cell(source.source, metadata={"nbgrader": source.metadata()}))
        else:
            cells.append(new_markdown_cell(source.source, metadata={"nbgrader": source.metadata()}))
    nb = nbformat.v4.new_notebook(cells=cells)
    return fail_all_tests(nb, reason)


def _grader_cell(source: str, kind: str) -> NotebookNode:
    return new_code_cell(source, metadata={ROLE_KEY: {"role": kind}})


def with_grader_cells(nb: NotebookNode) -> NotebookNode:
    """A copy with the preamble first, and a check before and a closing cell after each test cell."""
    out = copy.deepcopy(nb)
    cells = [_grader_cell(preamble([c.source for c in nb.cells if c.cell_type == "code"]), "preamble")]
    for cell in out.cells:
        if is_test(cell):
            cells.append(_grader_cell(guard(len(cells), hidden_lines(cell)), "guard"))
            cells.append(cell)
            cells.append(_grader_cell(closing(len(cells)), "close"))
        else:
            cells.append(cell)
    out.cells = cells
    return out


GRADER_ROLES = frozenset({"preamble", "guard", "close", "notes"})


def without_grader_cells(nb: NotebookNode, notes: list[str]) -> NotebookNode:
    """The grader's code cells and metadata removed, and the notes (if any) as a markdown cell on top."""
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if role(c) not in GRADER_ROLES]
    for cell in out.cells:
        cell.get("metadata", {}).pop(ROLE_KEY, None)
    count = 0
    for cell in out.cells:  # number the cells that ran 1, 2, ... as if the grader's had not been there
        if cell.get("cell_type") == "code" and cell.get("execution_count") is not None:
            count += 1
            cell.execution_count = count
            for output in cell.get("outputs", []):
                if "execution_count" in output:
                    output["execution_count"] = count
    if notes:
        out.cells.insert(0, notes_cell(notes, out))
    return out


NOTES_CELL_ID = "grading-notes"


def notes_cell(notes: list[str], nb: NotebookNode | None = None) -> NotebookNode:
    """The markdown cell of grading notes that goes on top of ``nb``.

    Its id is fixed (``grading-notes``, or ``grading-notes-2``, ... when a cell of ``nb``
    already has it), so two identical submissions give identical autograded files. Each
    note is plain text (``untrusted.markdown_text``), never markup: a note quotes what a
    submission controls (its kernelspec's name, cell names, error messages), so a backtick
    or an HTML tag in it is shown as written wherever the cell is rendered.
    """
    text = "## Grading notes\n\n" + "\n".join(f"- {markdown_text(note)}" for note in notes)
    cell = new_markdown_cell(text, metadata={ROLE_KEY: {"role": "notes"}})
    taken = {c.get("id") for c in nb.cells} if nb is not None else set()
    cell.id = next(name for n in range(1, len(taken) + 2) if (name := _numbered(NOTES_CELL_ID, n)) not in taken)
    return cell


def _numbered(name: str, n: int) -> str:
    return name if n == 1 else f"{name}-{n}"


def fail_cell(cell: NotebookNode, ename: str, message: str) -> None:
    """Give ``cell`` one error output (its other errors removed): nbgrader scores a test with one as failed."""
    cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "error"]
    cell.outputs.append(new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"]))


def fail_all_tests(nb: NotebookNode, reason: str) -> NotebookNode:
    """Give every test cell an error output (for a submission that cannot be run)."""
    for cell in nb.cells:
        if is_test(cell):
            cell.outputs = [new_output("error", ename="NotGraded", evalue=reason, traceback=[f"NotGraded: {reason}"])]
    return nb
