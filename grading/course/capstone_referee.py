"""The referee of notebook 12's measured test: a plugin of this course, as nbgrader's late-penalty plugins are.

Notebook 12's exercise 3 test cell says ``# course: measure capstone_referee ...``, so under
``course`` the kernel never runs it and the grading worker calls ``referee(rounds)`` here
instead, after the notebook has run (``grading.measure``). What it measures and how (the
baseline, the course's reference solution and the answer in the same rounds, the share of
the reference's gain, the tiers) is ``course_utils.capstone.referee``, an installed,
tested module; this file only connects it to the grader: it hands in the grader's
exceptions of a round process and turns the decision into the grader's ``Verdict``.
"""

from __future__ import annotations

from course_utils.capstone import referee as capstone
from grading.measure import Rounds, Verdict
from grading.sandbox.rounds import Disturbed, RoundError

ERRORS = capstone.GraderErrors(disturbed=Disturbed, failed=RoundError)


def referee(rounds: Rounds) -> Verdict:
    """Correctness first (2 points), then the share of the reference solution's gain in tiers (up to 8)."""
    decision = capstone.referee(rounds, ERRORS)
    return Verdict(decision.points, decision.report, decision.needs_manual_grade)
