"""Plausible wrong answers fail the exercise tests, for the reason the test names.

Each case replaces one solution cell of a notebook with a wrong answer a learner might
write, runs the notebook's setup cell, the exercise's own code cells (the functions or data
it asks about, as in notebook 11), that answer and the exercise's test cell in a fresh
namespace, and expects an ``AssertionError`` whose message matches. ``hidden=False`` runs
only the visible part of the test cell: the learner must see the failure before grading.
The notebook's own solution passes the same harness (so a failure is the answer's fault,
not the harness's).

The cases are the lists named ``WRONG`` in ``tests/wrong_answers/nbNN.py``, one module per
notebook and one home per wrong answer (the harness lives in that package too).
"""

from __future__ import annotations

import pytest

from tests.support.nbtools import is_solution_cell, nbgrader_meta, read
from tests.wrong_answers import every_wrong_answer, notebook_path, run_exercise

pytestmark = [
    pytest.mark.exercises,  # `make exercises-test` runs these, `make test` leaves them out
    # Notebook 09's "asks torch" wrong answer calls torch.quantize_per_tensor, which torch says is deprecated.
    pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
]

# Every list named WRONG in tests/wrong_answers/nbNN.py: each wrong answer has one home, its notebook's module.
WRONG = every_wrong_answer()


@pytest.mark.parametrize("wrong", WRONG, ids=lambda w: f"{w.notebook}-{w.grade_id}-{w.why}")
def test_wrong_answer_fails(wrong):
    with pytest.raises(AssertionError, match=wrong.match):
        run_exercise(wrong.notebook, wrong.grade_id, wrong.answer, hidden=wrong.hidden)


@pytest.mark.parametrize("exercise", sorted({(w.notebook, w.grade_id) for w in WRONG}), ids="-".join)
def test_solution_passes_the_same_harness(exercise):
    run_exercise(*exercise)


@pytest.mark.parametrize("prefix", [f"{n:02d}" for n in range(1, 13)])
def test_every_exercise_has_a_wrong_answer(prefix):
    exercises = {nbgrader_meta(c)["grade_id"] for c in read(notebook_path(prefix)).cells if is_solution_cell(c)}
    covered = {w.grade_id for w in WRONG if w.notebook == prefix}
    assert exercises == covered, f"notebook {prefix}: no wrong answer for {sorted(exercises - covered)}"
