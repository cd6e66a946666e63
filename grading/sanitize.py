"""The notebook that is graded: the learner's own notebook, sanitized as nbgrader does, then hardened.

Contract: ``read_submission`` turns a file's bytes into a notebook or an honest reason why
not (empty, too large, not UTF-8, not JSON, not a notebook); old nbformat versions are
upgraded. ``sanitize_and_harden`` starts from that notebook, so everything the learner
wrote stays: written answers, task cells, cells they added (run where they put them), and
it then

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

The cells' roles, the grader's own cells and failing a test are in ``cells``; what the
instructor's notebook says (``SourceNotebook``) is in ``source_notebook``. Their names stay
importable from here.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass, field

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell

from grading.cells import fail_all_tests as fail_all_tests
from grading.cells import fail_cell as fail_cell
from grading.cells import hidden_lines as hidden_lines
from grading.cells import is_test as is_test
from grading.cells import nbgrader_meta as nbgrader_meta
from grading.cells import notes_cell as notes_cell
from grading.cells import role as role
from grading.cells import with_grader_cells as with_grader_cells
from grading.cells import without_grader_cells as without_grader_cells
from grading.guard import ROLE_KEY
from grading.source_notebook import SourceCell as SourceCell
from grading.source_notebook import SourceNotebook as SourceNotebook

# Names imported ``as`` themselves are re-exported: they moved to ``cells`` and ``source_notebook``,
# and the modules that import them from here keep doing so.
__all__ = ["MAX_SUBMISSION_BYTES", "Prepared", "changed_cells", "read_submission", "sanitize_and_harden", "stand_in"]

MAX_SUBMISSION_BYTES = 20 * 1024 * 1024


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
        return float(value)  # type: ignore[arg-type]  # any metadata value: what float() refuses is caught below
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


def sanitize_and_harden(
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
