"""The errors a user of the grader can see, in one tree.

Contract: every exception the ``course`` command, the learner's workspace or the Validate
button reports to a person as a message (not a traceback) is a ``CourseError``; the modules
that raise one define its subclass beside the code that raises it and import the base from
here. This module imports nothing from ``grading`` nor any third-party package, so any
module (the sandbox, the learner's side in ``lab/``) can import it without a cycle and
without cost.
"""

from __future__ import annotations

__all__ = ["CourseError"]


class CourseError(RuntimeError):
    """Something the person running the command can fix (the message says what).

    For the instructor, something about the course directory, its configuration or the
    command line; the ``course`` command prints the message and exits with status 1.
    """
