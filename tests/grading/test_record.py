"""What the coordinator's batched transactions write into nbgrader's gradebook, read back with nbgrader's own API.

The compatibility course (``ps1``: ``problems`` with two tests, a hand-graded answer and a
task; ``essay`` with two written answers and a test), released once into an SQLite
gradebook with a due date and copied for each test. Its late plugin takes one point per
started day.
"""

from __future__ import annotations

import pytest

from grading.converter import AutogradeConverter
from grading.coursedir import Course
from grading.jobs import Outcome
from grading.record import Recorder
from grading.sandbox.execute import GRADER_PROBLEM
from grading.submissions import Submission

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's own session use

# against the due date COMPAT_DUE (tests/grading/conftest.py): 2026-01-10 17:00 UTC
ON_TIME, TWO_DAYS_LATE = "2026-01-10 12:00:00 UTC", "2026-01-12 12:00:00 UTC"


@pytest.fixture
def course(compat_course) -> Course:
    """The compatibility course, released (tests/grading/conftest.py), in a copy of this test's own."""
    return compat_course


def _submit(course: Course, student: str, *notebooks: str, stamp: str | None = ON_TIME) -> Submission:
    folder = course.folder("submitted", "ps1", student)
    folder.mkdir(parents=True)
    for name in notebooks:
        (folder / f"{name}.ipynb").write_text("{}")
    if stamp is not None:
        (folder / "timestamp.txt").write_text(stamp)
    return Submission(student, "ps1", folder)


def _late(course: Course):
    """The course's AssignLatePenalties (its late.py plugin), as the coordinator hands it to the Recorder."""
    from nbgrader.preprocessors import AssignLatePenalties

    return next(p for p in AutogradeConverter(course).after_execute if type(p) is AssignLatePenalties)


PROBLEMS = Outcome(
    "{}",
    [],
    scores={"mean_column_tests": 2.0, "count_words_tests": 0.0, "describe": None},
    comments={"mean_column": None, "count_words": "No response.", "describe": None, "sort_task": None},
    recorded=True,
    late=True,
)


def test_open_records_the_student_and_a_submission_mirroring_the_assignment(course):
    from nbgrader.utils import parse_utc

    sub = _submit(course, "alice", "problems")  # no essay.ipynb
    with Recorder(course) as recorder:
        opened = recorder.open([sub])
    state = opened[sub]
    assert sorted(state.expected) == ["essay", "problems"] and state.notes == [] and not state.refused
    assert state.missing == {"essay": 4.0}
    with course.gradebook() as gb:
        record = gb.find_submission("ps1", "alice")
        assert record.timestamp == parse_utc(ON_TIME)
        assert sorted(nb.notebook.name for nb in record.notebooks) == ["essay", "problems"]
        grades = {g.name: g for nb in record.notebooks for g in nb.grades}
        assert sorted(grades) == ["count_words_tests", "describe", "mean_column_tests", "png_width_tests",
                                  "q1_answer", "q2_answer", "sort_task"]  # fmt: skip
        # the missing notebook scores 0 and needs nobody; the submitted one waits for its grading
        for name in ("png_width_tests", "q1_answer", "q2_answer"):
            assert grades[name].auto_score == 0 and not grades[name].needs_manual_grade
        assert grades["mean_column_tests"].auto_score is None
        assert gb.find_submission_notebook("essay", "ps1", "alice").score == 0


def test_a_student_not_in_the_gradebook_is_refused_without_create_student(course):
    sub = _submit(course, "mallory", "problems")
    with Recorder(course, create_student=False) as recorder:
        opened = recorder.open([sub])
    assert opened[sub].refused
    assert opened[sub].notes == ["Not graded: no student 'mallory' in the gradebook (Autograde.create_student)."]
    with course.gradebook() as gb:
        assert [s.id for s in gb.students] == [] and gb.find_assignment("ps1").submissions == []


def test_an_unreadable_timestamp_is_noted_and_the_submission_has_none(course):
    sub = _submit(course, "alice", "problems", "essay", stamp="yesterday-ish")
    with Recorder(course) as recorder:
        notes = recorder.open([sub])[sub].notes
    assert notes == ["timestamp.txt ('yesterday-ish') is not a time; the submission has none."]
    with course.gradebook() as gb:
        assert gb.find_submission("ps1", "alice").timestamp is None


def test_a_resubmission_gets_the_new_timestamp_and_keeps_one_set_of_grades(course):
    from nbgrader.utils import parse_utc

    sub = _submit(course, "alice", "problems", "essay")
    with Recorder(course) as recorder:
        recorder.open([sub])
        (sub.folder / "timestamp.txt").write_text(TWO_DAYS_LATE)
        recorder.open([sub])
    with course.gradebook() as gb:
        record = gb.find_submission("ps1", "alice")
        assert record.timestamp == parse_utc(TWO_DAYS_LATE)
        assert len(gb.find_submission_notebook("problems", "ps1", "alice").grades) == 4


def test_record_writes_scores_comments_and_needs_manual_grade_as_save_auto_grades_does(course):
    alice, bob = _submit(course, "alice", "problems", "essay"), _submit(course, "bob", "problems", "essay")
    flagged = Outcome("{}", [], scores={"mean_column_tests": 2.0, "count_words_tests": 1.0, "describe": 0.0},
                      comments={}, recorded=True, manual=["count_words_tests"])  # fmt: skip
    with Recorder(course) as recorder:
        recorder.open([alice, bob])
        problems = recorder.record([(alice, "problems", PROBLEMS), (bob, "problems", flagged)])
    assert problems == {}
    with course.gradebook() as gb:

        def grade(name, student):
            return gb.find_grade(name, "problems", "ps1", student)

        assert (
            grade("mean_column_tests", "alice").score == 2
            and not grade("mean_column_tests", "alice").needs_manual_grade
        )
        assert grade("count_words_tests", "alice").score == 0
        assert grade("describe", "alice").auto_score is None and grade("describe", "alice").needs_manual_grade
        assert gb.find_comment("count_words", "problems", "ps1", "alice").auto_comment == "No response."
        assert gb.find_comment("mean_column", "problems", "ps1", "alice").auto_comment is None
        # a test the grader flagged (unmeasured, hidden text shown) keeps its score and waits for a person
        assert grade("count_words_tests", "bob").score == 1 and grade("count_words_tests", "bob").needs_manual_grade
        assert not grade("describe", "bob").needs_manual_grade
        assert gb.find_submission("ps1", "alice").needs_manual_grade
        assert gb.find_submission_notebook("problems", "ps1", "bob").score == 3


def test_a_manual_score_already_given_means_a_person_looks_again(course):
    sub = _submit(course, "alice", "problems", "essay")
    with Recorder(course) as recorder:
        recorder.open([sub])
    with course.gradebook() as gb:
        gb.find_grade("mean_column_tests", "problems", "ps1", "alice").manual_score = 1.5
        gb.db.commit()
    with Recorder(course) as recorder:
        recorder.record([(sub, "problems", PROBLEMS)])
    with course.gradebook() as gb:
        grade = gb.find_grade("mean_column_tests", "problems", "ps1", "alice")
        assert grade.auto_score == 2 and grade.manual_score == 1.5 and grade.needs_manual_grade


def test_a_grade_id_the_gradebook_lacks_is_a_grader_problem_note(course):
    sub = _submit(course, "alice", "problems", "essay")
    odd = Outcome("{}", [], scores={"mean_column_tests": 2.0, "invented_tests": 5.0}, comments={"invented": None},
                  recorded=True)  # fmt: skip
    with Recorder(course) as recorder:
        recorder.open([sub])
        problems = recorder.record([(sub, "problems", odd)])
    assert problems == {
        (sub, "problems"): [
            f"{GRADER_PROBLEM}: recording the grades failed "
            "(no grade `invented_tests` in the gradebook; no comment `invented` in the gradebook)."
        ]
    }
    with course.gradebook() as gb:
        assert gb.find_grade("mean_column_tests", "problems", "ps1", "alice").score == 2  # the rest is written


def test_an_outcome_that_was_not_recorded_writes_nothing(course):
    sub = _submit(course, "alice", "problems", "essay")
    with Recorder(course) as recorder:
        recorder.open([sub])
        assert recorder.record([(sub, "problems", Outcome("{}", [], scores={"mean_column_tests": 2.0}))]) == {}
    with course.gradebook() as gb:
        assert gb.find_grade("mean_column_tests", "problems", "ps1", "alice").auto_score is None


def test_a_batch_that_fails_midway_writes_nothing(course):
    """The grades are sent before the comments: a comment that cannot be written undoes the batch's grades too."""
    alice, bob = _submit(course, "alice", "problems", "essay"), _submit(course, "bob", "problems", "essay")
    broken = Outcome("{}", [], scores={"mean_column_tests": 2.0}, comments={"mean_column": object()}, recorded=True)
    with Recorder(course) as recorder:
        recorder.open([alice, bob])
    with pytest.raises(Exception), Recorder(course) as recorder:  # noqa: B017  (whatever the driver raises)
        recorder.record([(alice, "problems", PROBLEMS), (bob, "problems", broken)])
    with course.gradebook() as gb:
        for student in ("alice", "bob"):
            assert gb.find_grade("mean_column_tests", "problems", "ps1", student).auto_score is None
        assert gb.find_comment("count_words", "problems", "ps1", "alice").auto_comment is None


def test_late_penalties_follow_the_courses_plugin_clamped_to_the_score(course):
    on_time = _submit(course, "alice", "problems", "essay", stamp=ON_TIME)
    late = _submit(course, "bob", "problems", "essay", stamp=TWO_DAYS_LATE)
    little = _submit(course, "carol", "problems", "essay", stamp=TWO_DAYS_LATE)
    one_point = Outcome("{}", [], scores={"mean_column_tests": 0.0, "count_words_tests": 1.0, "describe": 0.0},
                        comments={}, recorded=True, late=True)  # fmt: skip
    with Recorder(course, late=_late(course)) as recorder:
        recorder.open([on_time, late, little])
        recorder.record(
            [(on_time, "problems", PROBLEMS), (late, "problems", PROBLEMS), (little, "problems", one_point)]
        )
        totals = recorder.totals([on_time, late, little])
    assert totals[on_time].late_penalty == 0 and totals[on_time].score == 2 and totals[on_time].max_score == 10
    assert totals[late].late_penalty == 2  # two started days, one point each (late.py)
    assert totals[little].late_penalty == 1  # two days, but the notebook scored only 1: nbgrader's clamp
    with course.gradebook() as gb:
        assert gb.find_submission_notebook("problems", "ps1", "bob").late_submission_penalty == 2
        assert gb.find_submission("ps1", "bob").late_submission_penalty == 2


def test_without_the_late_preprocessor_no_penalty_is_written(course):
    late = _submit(course, "bob", "problems", "essay", stamp=TWO_DAYS_LATE)
    with Recorder(course) as recorder:
        recorder.open([late])
        recorder.record([(late, "problems", PROBLEMS)])
        assert recorder.totals([late])[late].late_penalty == 0


def test_totals_are_each_submissions_score_maximum_and_manual_flag(course):
    alice, bob = _submit(course, "alice", "problems", "essay"), _submit(course, "bob", "problems")
    all_auto = Outcome("{}", [], scores={"mean_column_tests": 2.0, "count_words_tests": 1.0, "describe": 2.0},
                       comments={}, recorded=True)  # fmt: skip
    with Recorder(course) as recorder:
        recorder.open([alice, bob])
        recorder.record([(alice, "problems", PROBLEMS), (bob, "problems", all_auto)])
        totals = recorder.totals([alice, bob])
    assert (totals[alice].score, totals[alice].max_score, totals[alice].needs_manual_grade) == (2, 10, True)
    # bob's essay is missing (0, nobody needs to look); the task still waits for a person
    assert (totals[bob].score, totals[bob].max_score) == (5, 10)
    with course.gradebook() as gb:
        assert totals[bob].needs_manual_grade == gb.find_submission("ps1", "bob").needs_manual_grade
