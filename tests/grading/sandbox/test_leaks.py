"""The hidden-test leak check (``grading.sandbox.leaks``): what honest code prints accuses no one.

After the kernel has run, every output is searched for text of the hidden tests. An output that
shows a hidden line is always removed; the test whose line it showed scores 0 only on
conclusive evidence (several of its lines, or one holding text found nowhere public), and is
otherwise flagged for manual grading with a neutral note, keeping its score. The fast tests
here work on notebook 01 as the grader prepares it (its real hidden lines marked on each test
cell) with outputs as the kernel records them (tracebacks formatted by IPython from real
exceptions). The slow tests (``make grading-test``) run every reference solution and every wrong
answer of ``tests/wrong_answers`` through its exercise's real test cell in a real kernel under
the guard and the executor, and find no leak in what they print (before this check learned what
is public, notebooks 01, 03 and 10 accused a test there); and grade a submission with
``course autograde`` whose last cell prints a common hidden line: full marks, flagged for the
instructor in the gradebook.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from IPython.core.ultratb import AutoFormattedTB
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_notebook, new_output

from course_utils import check_int
from grading.coursedir import REPO_ROOT
from grading.guard import ROLE_KEY
from grading.sandbox.leaks import flagged_for_review, keep_hidden_tests_out

NOTEBOOK_01 = REPO_ROOT / "notebooks" / "01_run_tensors_on_the_gpu.ipynb"
BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
ACCUSATION = "the hidden tests were read from the kernel"


def _hidden_indices(source: str) -> list[int]:
    """The lines of a test cell from its BEGIN marker to its END marker (what ``sanitize`` marks)."""
    lines = source.split("\n")
    start = next((i for i, line in enumerate(lines) if BEGIN in line), None)
    if start is None:
        return []
    end = next(i for i, line in enumerate(lines) if END in line)
    return list(range(start, end + 1))


def _hidden_block(nb: NotebookNode, grade_id: str) -> list[str]:
    cell = _test(nb, grade_id)
    return [cell.source.split("\n")[i] for i in _hidden_indices(cell.source)][1:-1]


def _test(nb: NotebookNode, grade_id: str) -> NotebookNode:
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _graded(path: Path) -> NotebookNode:
    """A notebook as the grader runs it: solutions in place, each test cell's hidden lines marked."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        hidden = _hidden_indices(cell.source) if cell.cell_type == "code" else []
        if hidden:
            cell.metadata[ROLE_KEY] = {"hidden_lines": hidden}
    return nb


def _notebook_01(printed: list[dict] | None = None) -> NotebookNode:
    """Notebook 01 as graded, and a last cell that printed ``printed``."""
    nb = _graded(NOTEBOOK_01)
    nb.cells.append(new_code_cell("print(found)", outputs=printed or []))
    return nb


def _traceback_of(call) -> dict:
    """The error output of a real exception, its traceback formatted by IPython as a kernel sends it (coloured)."""
    try:
        call()
    except AssertionError:
        kind, value, tb = sys.exc_info()
        lines = AutoFormattedTB(mode="Context", theme_name="linux").structured_traceback(kind, value, tb)
        return new_output("error", ename=kind.__name__, evalue=str(value), traceback=lines)
    raise AssertionError(f"{call} did not fail")


def _errors(cell: NotebookNode) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_a_failing_checks_traceback_accuses_no_one():
    """Notebook 01: exercise 1 wrong. Its traceback quotes ``raise AssertionError(`` from course_utils/checks.py,
    a line exercise 4's hidden test also has; exercise 4 used to score 0 for it, with an accusation."""
    nb = _notebook_01()
    failure = _traceback_of(lambda: check_int(1, 2, "matmul_flops(1, 1, 1)"))
    assert "raise AssertionError(" in _plain("".join(failure["traceback"]))  # the premise: the real traceback
    assert any(line.strip() == "raise AssertionError(" for line in _hidden_block(nb, "ex4_sync_lines_tests"))
    _test(nb, "ex1_matmul_flops_tests").outputs = [failure]
    before = json.dumps(nb.cells, sort_keys=True)
    notes: list[str] = []
    keep_hidden_tests_out(nb, notes)
    assert notes == []
    assert json.dumps(nb.cells, sort_keys=True) == before  # the learner still reads where the check failed
    assert _errors(_test(nb, "ex4_sync_lines_tests")) == [] and flagged_for_review(nb) == []


def test_a_traceback_through_a_visible_helper_accuses_no_one():
    """Notebook 03, exercise 4: a traceback through the visible helper ``check_shards`` names its frame
    ``check_shards(shards, num_samples, num_replicas, name)`` (IPython prints each frame's parameters),
    which is also a line of the hidden test. Every wrong answer's output was flagged for it."""
    nb = _graded(REPO_ROOT / "notebooks" / "03_feed_the_model_with_batches.ipynb")
    test = _test(nb, "ex4_shard_indices_tests")
    helper = test.source.split(BEGIN)[0].split("\n\n\nplain =")[0]  # its imports and ``def check_shards``
    namespace: dict = {}
    exec(compile(helper, "<ex4_shard_indices_tests>", "exec"), namespace)
    failure = _traceback_of(lambda: namespace["check_shards"]([[0, 1], [2]], 4, 2, "shard_indices(4, 2)"))
    header = "check_shards(shards, num_samples, num_replicas, name)"
    assert header in _plain("".join(failure["traceback"]))  # the premise: what IPython prints
    assert any(line.strip() == header for line in _hidden_block(nb, "ex4_shard_indices_tests"))
    test.outputs = [failure]
    notes: list[str] = []
    keep_hidden_tests_out(nb, notes)
    assert notes == [] and test.outputs == [failure] and flagged_for_review(nb) == []


@pytest.mark.parametrize(
    ("what", "evidence"),
    [
        ("the whole hidden test", "text found nowhere else"),
        ("one line with a name only the hidden test has", "text found nowhere else"),
        ("one line with the expected value", "text found nowhere else"),
        ("three common lines", "3 of its lines"),
    ],
)
def test_a_printed_hidden_test_is_removed_and_scores_0(what, evidence):
    nb = _notebook_01()
    grade_id = "ex2_time_per_call_tests" if what == "three common lines" else "ex4_sync_lines_tests"
    block = _hidden_block(nb, grade_id)
    if what == "the whole hidden test":
        shown = block
    elif what == "one line with a name only the hidden test has":
        shown = [line for line in block if line.startswith("SYNCHRONISING =")]
    elif what == "one line with the expected value":
        grade_id = "ex1_matmul_flops_tests"
        shown = [line for line in _hidden_block(nb, grade_id) if "137438953472" in line]
    else:
        shown = [line.strip() for line in block if line.strip().startswith(("fake =", "seconds =", "expected ="))]
    assert shown and any(len(line.strip()) >= 8 for line in shown), shown
    nb.cells[-1].outputs = [new_output("execute_result", data={"text/plain": repr("\n".join(shown))})]
    notes: list[str] = []
    keep_hidden_tests_out(nb, notes)
    (printed,) = nb.cells[-1].outputs
    assert (
        printed["data"]["text/plain"]
        == f"[removed by the grader: this output held text of the hidden tests of `{grade_id}`]"
    )
    (error,) = _errors(_test(nb, grade_id))
    assert error["ename"] == "GradingIntegrityError" and ACCUSATION in error["evalue"]
    assert f"appeared in the output of code cell {_code_cells(nb)}" in error["evalue"] and evidence in error["evalue"]
    assert notes == [f"`{grade_id}`: {error['evalue']} (that output was removed)."]
    assert flagged_for_review(nb) == []
    assert all(not _errors(c) for c in nb.cells[:-1] if c is not _test(nb, grade_id))  # the others are not concerned


def _code_cells(nb: NotebookNode) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize(
    "starts",
    [("if missing:",), ("if missing:", "count = ")],
    ids=["one common line", "two common lines"],
)
def test_common_hidden_lines_are_removed_and_flagged_without_accusing(starts):
    """A line made only of words public text has (``if missing:``) is no proof: removed, flagged, score kept."""
    nb = _notebook_01()
    shown = [line.strip() for line in _hidden_block(nb, "ex4_sync_lines_tests") if line.strip().startswith(starts)]
    assert len(shown) == len(starts), shown
    nb.cells[-1].outputs = [new_output("stream", name="stdout", text="\n".join(shown) + "\n")]
    notes: list[str] = []
    keep_hidden_tests_out(nb, notes)
    assert not any(line in nb.cells[-1].outputs[0]["text"] for line in shown)  # still never leaves
    assert all(not _errors(c) for c in nb.cells)  # every test keeps its score
    assert flagged_for_review(nb) == ["ex4_sync_lines_tests"]
    (note,) = notes
    assert note.startswith("`ex4_sync_lines_tests`: ") and "flagged for manual grading" in note, note
    assert "keeps its score" in note and ACCUSATION not in note and "scores 0" not in note, note
    assert not any(line in note for line in shown)  # a note never quotes a hidden line


def test_a_file_of_the_learners_own_makes_no_hidden_line_public(tmp_path):
    """An installed file an output names is public; a file the learner wrote, named the same way, is not.

    The line is a common one (``if missing:``): quoted from the learner's own file it is still
    removed, and its test flagged (not accused, not let through as public text).
    """
    nb = _notebook_01()
    (shown,) = [line.strip() for line in _hidden_block(nb, "ex4_sync_lines_tests") if "if missing:" in line]
    planted = tmp_path / "checks.py"
    planted.write_text(f"def check():\n    {shown}\n        pass\n")
    fake = f"File {planted}:2, in check\n----> 2     {shown}\n"
    nb.cells[-1].outputs = [new_output("error", ename="AssertionError", evalue="x", traceback=[fake])]
    notes: list[str] = []
    keep_hidden_tests_out(nb, notes)
    assert shown not in json.dumps(nb.cells[-1].outputs)  # removed
    assert flagged_for_review(nb) == ["ex4_sync_lines_tests"] and not _errors(_test(nb, "ex4_sync_lines_tests"))


def test_no_learner_output_or_earlier_mark_flags_a_test():
    """The flag is the leak check's alone: an output's metadata asks for nothing, and a stale flag is cleared."""
    nb = _notebook_01()
    forged = {ROLE_KEY: {"needs_manual_grade": True}}
    _test(nb, "ex1_matmul_flops_tests").outputs = [
        new_output("display_data", data={"text/plain": "x"}, metadata=forged)
    ]
    _test(nb, "ex2_time_per_call_tests").metadata[ROLE_KEY]["needs_manual_grade"] = True
    keep_hidden_tests_out(nb, [])
    assert flagged_for_review(nb) == []


def test_a_flagged_test_keeps_its_score_and_is_recorded_for_manual_grading():
    """``pipeline.finish`` hands the flag to the gradebook's needs-manual-grade, and drops it from the notebook."""
    from grading.pipeline import NotebookJob, Recipe, finish
    from grading.sanitize import Prepared, SourceNotebook

    nb = _notebook_01()
    shown = next(line.strip() for line in _hidden_block(nb, "ex4_sync_lines_tests") if "if missing:" in line)
    nb.cells[-1].outputs = [new_output("stream", name="stdout", text=shown + "\n")]
    keep_hidden_tests_out(nb, [])
    recipe = Recipe("01", "01", SourceNotebook("01", "01", ()), (), (), ("record",), True)
    job = NotebookJob("learner", "01", "01", b"")
    with tempfile.TemporaryDirectory() as folder:
        outcome = finish(
            Prepared(nb, [], True), {"nb": nb, "notes": [], "seconds": 1.0}, recipe, job, f"sqlite:///{folder}/x.db"
        )
    assert outcome.manual == ["ex4_sync_lines_tests"]
    assert outcome.scores["ex4_sync_lines_tests"] == _test(nb, "ex4_sync_lines_tests").metadata["nbgrader"]["points"]
    assert "needs_manual_grade" not in outcome.text  # the grader's mark does not reach the autograded notebook


def _is_test_meta(meta: dict) -> bool:
    return bool(meta.get("grade")) and not meta.get("solution")


def _every_answer(prefix: str) -> tuple[NotebookNode, dict[str, str | None]]:
    """Notebook ``prefix``'s setup cell, then for each exercise and each of its answers (the reference solution,
    then every wrong answer of ``tests/wrong_answers``): the exercise's own code cells, the answer and the
    exercise's real test cell, hidden tests included and marked as the grader marks them.

    Returns the notebook and, for each test cell's label, the wrong answer it grades (None: the reference).
    """
    from tests.wrong_answers import _exercise_code, every_wrong_answer, notebook_path

    WRONG = every_wrong_answer()

    cells = nbformat.read(notebook_path(prefix), as_version=4).cells
    out = [new_code_cell(next(c for c in cells if c.cell_type == "code").source)]
    graded: dict[str, str | None] = {}
    for index, cell in enumerate(cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("solution"):
            continue
        test = next(c for c in cells[index + 1 :] if _is_test_meta(c.metadata.get("nbgrader", {})))
        answers = [(None, cell.source)]
        answers += [(w.why, w.answer) for w in WRONG if w.notebook == prefix and w.grade_id == meta["grade_id"]]
        for n, (why, answer) in enumerate(answers):
            out += [new_code_cell(source) for source in _exercise_code(cells, index)]
            out.append(new_code_cell(answer))
            grade_id = f"{test.metadata['nbgrader']['grade_id']}__{n}"
            marks = {"nbgrader": {**test.metadata["nbgrader"], "grade_id": grade_id}}
            hidden = _hidden_indices(test.source)
            out.append(new_code_cell(test.source, metadata={**marks, ROLE_KEY: {"hidden_lines": hidden}}))
            graded[f"`{grade_id}`"] = why
    return new_notebook(cells=out), graded


@pytest.mark.slow_grading
@pytest.mark.parametrize("prefix", [f"{n:02d}" for n in range(1, 13)])
def test_what_every_answer_prints_under_the_grader_shows_no_hidden_line(prefix, tmp_path):
    """Every reference solution and wrong answer, graded by its exercise's real test cell in a real kernel
    behind the guard's cells (``with_grader_cells``) by the executor (``execute``, which runs the leak check):
    no output holds a hidden line, no test is accused or flagged, and each answer scores as it should."""
    import secrets

    from grading.guard import TOKEN_FILE
    from grading.sandbox.execute import JailedKernelManager, execute
    from grading.sandbox.protections import Limits
    from grading.sanitize import is_test, with_grader_cells

    nb, graded = _every_answer(prefix)
    token = secrets.token_hex(16)

    def new_kernel() -> JailedKernelManager:  # the executor's logic, without the sandbox's jail
        workdir = Path(tempfile.mkdtemp(dir=tmp_path))
        (workdir / TOKEN_FILE).write_text(token, encoding="ascii")
        km = JailedKernelManager()
        km.configure([], workdir, workdir / "kernel.log")
        return km

    notes: list[str] = []
    ran = execute(with_grader_cells(nb), new_kernel, Limits(cell_timeout=240, notebook_timeout=3000), notes, token)
    assert not [note for note in notes if "hidden" in note], notes
    assert flagged_for_review(ran) == []
    outcome = {f"`{c.metadata['nbgrader']['grade_id']}`": _errors(c) for c in ran.cells if is_test(c)}
    outcome = {name: [f"{e['ename']}: {e['evalue']}" for e in errors] for name, errors in outcome.items()}
    assert set(outcome) == set(graded)
    passed_wrongly = [name for name, why in graded.items() if why is not None and not outcome[name]]
    failed_rightly = {name: outcome[name] for name, why in graded.items() if why is None and outcome[name]}
    assert not passed_wrongly and not failed_rightly, (passed_wrongly, failed_rightly, notes)
    assert all(e.startswith("AssertionError") for errors in outcome.values() for e in errors), outcome


@pytest.mark.slow_grading
def test_a_common_hidden_line_in_a_real_grading_keeps_the_score_and_asks_the_instructor(tmp_path):
    """``course autograde`` of the fixture assignment, every answer right, and a last cell printing one line of
    ex2's hidden test made only of public words: full marks, ex2 flagged for manual grading in the gradebook,
    a neutral note, and the line in no output."""
    from nbgrader.api import Gradebook

    from grading.autograde import autograde
    from grading.collect import collect
    from grading.coursedir import Course
    from grading.release import release
    from tests.fixtures.grading import grading_cases as cases
    from tests.support.paths import FIXTURES as fixtures

    line = "result = standardize(y)"
    assert line in _test(nbformat.read(cases.SOURCE, as_version=4), "ex2_standardize_tests").source
    course = Course(root=tmp_path / "grading", notebooks=fixtures / "notebooks")
    release(course)
    nb = cases.solved()
    nb.cells.append(new_code_cell('print("result = " + "standardize(y)")'))  # its source does not hold the line
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / f"learner_{cases.ASSIGNMENT}.ipynb").write_text(nbformat.writes(nb))
    collect(course, inbox)

    summary = autograde(course, jobs=1, progress=False)

    (result,) = summary.graded
    notes = " ".join(result.notes)
    assert result.score == result.max_score and result.needs_manual_grade, notes
    assert "`ex2_standardize_tests`: " in notes and "flagged for manual grading" in notes and ACCUSATION not in notes
    with Gradebook(course.db_url) as gb:
        grade = gb.find_grade("ex2_standardize_tests", cases.ASSIGNMENT, cases.ASSIGNMENT, "learner")
        assert grade.needs_manual_grade and grade.auto_score == grade.max_score
    graded = nbformat.read(course.folder("autograded", cases.ASSIGNMENT, "learner") / cases.SOURCE.name, as_version=4)
    assert line not in json.dumps([cell.get("outputs", []) for cell in graded.cells])
