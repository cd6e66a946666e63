"""One notebook's grading around its execution: the recipe, the notebook prepared for the kernel, the grades after.

No kernel runs: the "executed" notebook is the prepared one with outputs written on its
test cells by hand (a passing test has none, a failing one an error), as the grading worker
would return it. The compatibility course (``ps1/problems``: two tests, a hand-graded answer,
a task) is released once into an SQLite gradebook and copied for each test.
"""

from __future__ import annotations

import pickle
import shutil
import types

import nbformat
import pytest
from nbformat.v4 import new_output

from grading.cells import is_test, role
from grading.converter import AutogradeConverter
from grading.coursedir import Course
from grading.guard import ROLE_KEY
from grading.jobs import NotebookJob, Result
from grading.pipeline import Recipe, finish, prepare, snapshot_gradebook
from grading.release import release
from grading.sandbox.execute import GRADER_PROBLEM
from grading.sanitize import SourceNotebook, read_submission
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")

ANSWERS = {
    "mean_column": "def mean_of_column(path, column):\n    return 2.0",
    "count_words": "def count_words(text):\n    return 3",
}


@pytest.fixture(scope="module")
def course(tmp_path_factory, _gradebook_head_read_in_process) -> Course:
    course = Course(tmp_path_factory.mktemp("released") / "compat")
    shutil.copytree(FIXTURES / "compat_course", course.root)
    release(course)
    return course


@pytest.fixture(scope="module")
def recipe(course) -> Recipe:
    return _recipe(course)


def _recipe(course: Course, snapshot: bytes | None = None) -> Recipe:
    released = read_submission((course.folder("release", "ps1") / "problems.ipynb").read_bytes())[0]
    with course.gradebook() as gb:
        spec = SourceNotebook.from_gradebook(gb, "ps1", "problems", released)
    return Recipe.build(course, AutogradeConverter(course), spec, snapshot=snapshot)


def _released(course: Course) -> nbformat.NotebookNode:
    return nbformat.read(course.folder("release", "ps1") / "problems.ipynb", as_version=4)


def _job(course: Course, nb: nbformat.NotebookNode | None = None, data: bytes | None = None) -> NotebookJob:
    if data is None:
        nb = nb if nb is not None else _released(course)
        for cell in nb.cells:
            answer = ANSWERS.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
            if answer:
                cell.source = answer
        data = nbformat.writes(nb).encode()
    return NotebookJob("alice", "ps1", "problems", data, autograded=str(course.folder("autograded", "ps1", "alice")))


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _executed(task_nb, failing: str = "count_words_tests") -> dict:
    """The prepared notebook as a worker returns it: every code cell ran, ``failing`` raised."""
    nb = nbformat.from_dict(pickle.loads(pickle.dumps(task_nb)))
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        cell.execution_count = count
    _cell(nb, failing).outputs = [
        new_output("error", ename="AssertionError", evalue="three words", traceback=["AssertionError: three words"])
    ]
    return nb


def test_the_recipe_holds_nbgraders_configured_steps_with_its_recording_batched(recipe):
    assert (recipe.assignment, recipe.notebook) == ("ps1", "problems")
    assert [s.name for s in recipe.sanitize] == [
        "ClearOutput", "DeduplicateIds", "OverwriteKernelspec", "OverwriteCells", "CheckCellMetadata"
    ]  # fmt: skip
    names = [s if isinstance(s, str) else s.name for s in recipe.after_execute]
    # SaveAutoGrades and AssignLatePenalties are left to the coordinator's batches, in their places
    assert names == ["IgnorePattern", "ClearMetadataPreprocessor", "LimitOutput", "record", "late", "CheckCellMetadata"]
    assert recipe.batched
    assert not recipe.portable  # no snapshot of the gradebook: not for a cluster's worker
    assert pickle.loads(pickle.dumps(recipe)) == recipe


def test_a_recipe_with_a_snapshot_is_portable_and_the_snapshot_holds_no_student(course):
    from nbgrader.api import Gradebook

    with course.gradebook() as gb:
        gb.add_student("alice")
        snapshot = snapshot_gradebook(gb, "ps1")
        gb.remove_student("alice")
    assert _recipe(course, snapshot).portable
    path = course.root / "snapshot.db"
    path.write_bytes(snapshot)
    with Gradebook(f"sqlite:///{path}") as snap:
        assert snap.students == []
        cells = {c.name: c.source for c in snap.find_notebook("problems", "ps1").source_cells}
    assert "### BEGIN HIDDEN TESTS" in cells["count_words_tests"]  # the full tests, as the course's gradebook
    path.unlink()


@pytest.mark.parametrize(
    ("order", "batched"),
    [
        (["SaveAutoGrades", "AssignLatePenalties"], True),
        (["SaveAutoGrades"], True),
        (["AssignLatePenalties", "SaveAutoGrades"], False),  # not nbgrader's order: run as nbgrader runs it
        (["SaveAutoGrades", "GetGrades"], False),  # reads the gradebook: not batched
        (["Subclassed"], False),  # a course's own recording preprocessor keeps nbgrader's per-notebook path
    ],
)
def test_recording_is_batched_only_for_nbgraders_own_recording_steps(course, order, batched):
    from nbgrader import preprocessors

    class Subclassed(preprocessors.SaveAutoGrades):
        pass

    made = [Subclassed() if name == "Subclassed" else getattr(preprocessors, name)() for name in order]
    nbgrader = types.SimpleNamespace(sanitize=[], before_execute=[], after_execute=made)
    spec = SourceNotebook("ps1", "problems", ())
    built = Recipe.build(course, nbgrader, spec)
    assert built.batched is batched
    assert all(isinstance(s, str) for s in built.after_execute) is batched


def test_prepare_makes_the_notebook_to_run_with_the_full_tests_and_the_graders_cells(course, recipe):
    nb = _released(course)
    _cell(nb, "count_words_tests").source = "pass  # my own test"
    prepared, task = prepare(_job(course, nb), recipe, course.db_url, course.root)
    assert prepared.runnable and task is not None
    assert any("had been edited" in note for note in prepared.notes)
    tests = _cell(task.nb, "count_words_tests").source
    assert tests.startswith('assert count_words("a b  c") == 3') and 'count_words("") == 0' in tests  # hidden ones back
    assert _cell(task.nb, "count_words").source == ANSWERS["count_words"]  # the learner's answer
    assert role(task.nb.cells[0]) == "preamble"
    roles = [role(c) for c in task.nb.cells]
    assert roles.count("guard") == roles.count("close") == 2  # one check before and after each test cell
    assert task.files is None and task.measured == ()


def test_an_unreadable_submission_is_not_run_and_fails_every_test(course, recipe):
    prepared, task = prepare(_job(course, data=b"{not json"), recipe, course.db_url, course.root)
    assert task is None and not prepared.runnable
    assert "not valid JSON" in prepared.notes[0]
    outcome = finish(prepared, None, recipe, _job(course, data=b""), course.db_url)
    assert outcome.scores["mean_column_tests"] == 0 and outcome.scores["count_words_tests"] == 0
    assert not outcome.error  # the learner's file, not the grader


def test_finish_scores_a_passing_and_a_failing_test_as_nbgrader_would(course, recipe):
    job = _job(course)
    prepared, task = prepare(job, recipe, course.db_url, course.root)
    outcome = finish(prepared, Result(nb=_executed(task.nb), seconds=1.5), recipe, job, course.db_url)
    assert outcome.recorded and outcome.late and outcome.manual == []
    assert outcome.scores == {"mean_column_tests": 2.0, "count_words_tests": 0.0, "describe": 0.0}  # stub unchanged
    assert outcome.comments == {"mean_column": None, "count_words": None, "describe": "No response.",
                                "sort_task": None}  # fmt: skip
    assert outcome.seconds == 1.5 and outcome.notes == [] and not outcome.error
    graded = nbformat.reads(outcome.text, as_version=4)
    assert all(role(c) is None and ROLE_KEY not in c.metadata for c in graded.cells)  # the grader's cells are gone
    assert [c.execution_count for c in graded.cells if c.cell_type == "code"] == [1, 2, 3, 4, 5, 6]
    with course.gradebook() as gb:
        assert gb.find_assignment("ps1").submissions == []  # nothing written: the coordinator records in batches


def test_a_grader_problem_note_goes_on_top_and_marks_a_grader_error(course, recipe):
    job = _job(course)
    prepared, task = prepare(job, recipe, course.db_url, course.root)
    note = f"{GRADER_PROBLEM}: the kernel's memory limit could not be set."
    result = Result(nb=_executed(task.nb), notes=(note,)).to_dict()  # its dict form, as from a worker's JSON line
    outcome = finish(prepared, result, recipe, job, course.db_url)
    assert outcome.error and outcome.notes == [note]
    graded = nbformat.reads(outcome.text, as_version=4)
    assert role(graded.cells[0]) == "notes" and "memory limit could not be set" in graded.cells[0].source
    assert outcome.scores["mean_column_tests"] == 2.0  # the learner's grades stand


def test_a_worker_that_returned_no_notebook_fails_every_test_as_a_grader_error(course, recipe):
    job = _job(course)
    prepared, _ = prepare(job, recipe, course.db_url, course.root)
    outcome = finish(prepared, Result.failure("the worker died"), recipe, job, course.db_url)
    assert outcome.error and "Grader error: the worker died." in outcome.notes
    assert outcome.scores["mean_column_tests"] == 0 and outcome.scores["count_words_tests"] == 0


def test_a_test_flagged_for_review_keeps_its_score_and_asks_for_a_person(course, recipe):
    job = _job(course)
    prepared, task = prepare(job, recipe, course.db_url, course.root)
    executed = _executed(task.nb)
    _cell(executed, "mean_column_tests").metadata.setdefault(ROLE_KEY, {})["needs_manual_grade"] = True
    outcome = finish(prepared, Result(nb=executed), recipe, job, course.db_url)
    assert outcome.manual == ["mean_column_tests"] and outcome.scores["mean_column_tests"] == 2.0


def test_a_submitted_cell_cannot_flag_itself_for_review(course, recipe):
    """The flag is the grader's metadata: a submission that carries it loses it before the kernel runs."""
    nb = _released(course)
    _cell(nb, "mean_column_tests").metadata[ROLE_KEY] = {"needs_manual_grade": True}
    job = _job(course, nb)
    prepared, task = prepare(job, recipe, course.db_url, course.root)
    outcome = finish(prepared, Result(nb=_executed(task.nb)), recipe, job, course.db_url)
    assert outcome.manual == []
    assert is_test(_cell(task.nb, "mean_column_tests"))
