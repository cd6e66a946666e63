"""What an autograde run came to: a ``Graded`` per submission, and the run's ``Summary``.

Contract: ``Summary.graded`` holds each graded submission's scores as the gradebook has them
after the run (``Graded``), ``skipped`` the submissions already graded and not newer,
``ignored`` a note on each submission nbgrader would not grade either; ``errors`` are those
the grader itself failed on, and ``line()`` is the command's last line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grading.coursedir import counted
from grading.sandbox.protections import Protections
from grading.submissions import Submission

__all__ = ["Graded", "Summary"]


@dataclass
class Graded:
    """One graded submission, as the gradebook has it after autograding."""

    submission: Submission
    score: float  # before the late penalty (nbgrader's ``SubmittedAssignment.score``)
    max_score: float
    notes: list[str]
    grader_error: bool = False
    seconds: float = 0.0  # in the workers (0 for notebooks that could not be run)
    late_penalty: float = 0.0
    needs_manual_grade: bool = False


@dataclass
class Summary:
    """A run's graded, skipped and ignored submissions, its times and where it ran."""

    graded: list[Graded] = field(default_factory=list)
    skipped: list[Submission] = field(default_factory=list)  # already autograded and not newer
    ignored: list[str] = field(default_factory=list)  # submissions of assignments nbgrader does not know
    seconds: float = 0.0
    coordinator_seconds: float = 0.0  # wall seconds this process spent laying out, sending, receiving, recording
    coordinator_phases: dict[str, float] = field(default_factory=dict)  # its CPU seconds by phase (the serial part)
    protections: Protections | None = None
    uids: list[int] = field(default_factory=list)

    @property
    def errors(self) -> list[Graded]:
        """Submissions the grader could not grade properly (not a learner's mistake)."""
        return [g for g in self.graded if g.grader_error]

    def line(self) -> str:
        """The command's summary line: counts of submissions, grader errors, notes, manual grading, skipped."""
        troubled = sum(1 for g in self.graded if g.notes)
        manual = sum(1 for g in self.graded if g.needs_manual_grade)
        parts = [
            f"graded {counted(len(self.graded), 'submission')}, {counted(len(self.errors), 'grader error')}, "
            f"{troubled} with notes",
            f"{manual} {'needs' if manual == 1 else 'need'} manual grading" if manual else "",
            f"{len(self.skipped)} already graded (--force regrades them)" if self.skipped else "",
        ]
        return ", ".join(p for p in parts if p) + f", in {self.seconds:.1f} s"
