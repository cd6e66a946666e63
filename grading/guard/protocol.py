"""What the grader and the guard in the kernel say to each other: the grader's cells and their answers.

Contract, grader side: ``preamble(sources)`` is the source of the first cell the grader runs,
before any learner code; ``guard(index, hidden)`` the source of the cell it runs right before
each test cell (``hidden``: the test cell's hidden-test line numbers) and ``closing(index)``
the source of the cell it runs right after. Each of these two answers with
``digest(token, index, phase)``, an HMAC of a secret the worker hands the kernel in
``TOKEN_FILE``; the executor fails the test, and every later one, when the answer is
missing or wrong. Only the audit hook (``grading.guard.vault``) holds the secret in the
kernel; this module computes ``digest`` for the grader.

``MODULES`` names every module the kernel loads for the guard: the preamble imports them all
(through ``grading.guard``) before any learner code runs, and the audit hook compares each
one's namespace, its classes and its ``sys.modules`` entry before it trusts any of them.
This module imports only the standard library.
"""

from __future__ import annotations

__all__ = [
    "EVENT",
    "HELPERS",
    "LOCAL",
    "MODULES",
    "RESULT",
    "ROLE_KEY",
    "TEST_FUNCTION",
    "TOKEN_FILE",
    "GradingIntegrityError",
    "closing",
    "digest",
    "guard",
    "preamble",
    "watched_modules",
]

ROLE_KEY = "course_grading"
HELPERS = "__course_grading__"  # the name the grader's check cell hands the next test its helpers through
LOCAL = "__course_g__"  # the test function's own reference to them (a local: nothing can rebind it)
TEST_FUNCTION = "__course_test__"
RESULT = "__course_result__"
TOKEN_FILE = ".course-grading-token"  # in the kernel's working directory until ``install`` reads it
EVENT = "course_grading."  # the audit events of the grader's protocol

# positions of the helpers in the tuple a test cell receives (a tuple: nothing can replace an item)
VALUE, COMPARE, TRUTH, RETURNED, EXPORT, LOCALS, INITIAL, RUN, PIN, DISPLAY, CALL, MARK, KEY, AFTER = range(14)

# the guard's modules, the package first: each is loaded before any learner code and compared by the audit hook
# (``tests/grading/guard/test_guard.py`` checks that every file of the package is named here)
MODULES = (
    "grading.guard",
    "grading.guard.protocol",
    "grading.guard.trust",
    "grading.guard.watchlist",
    "grading.guard.records",
    "grading.guard.recheck",
    "grading.guard.lying",
    "grading.guard.state",
    "grading.guard.cell",
    "grading.guard.rewrite",
    "grading.guard.vault",
    "grading.guard.kernel",
)


def watched_modules(sources: list[str]) -> list[str]:
    """Which heavy modules the notebook's cells use (importing torch costs seconds: only when needed)."""
    text = "\n".join(sources)
    wanted = []
    if "torch" in text or "course_utils" in text:
        wanted += ["torch", "numpy"]
    elif "numpy" in text or "np." in text:
        wanted.append("numpy")
    if "course_utils" in text:
        wanted.append("course_utils")
    return wanted


def guard(index: int, hidden: tuple[int, ...] | list[int] = ()) -> str:
    """The source of the check cell at position ``index`` (the next cell's hidden lines: ``hidden``)."""
    lines = tuple(sorted({int(i) for i in hidden}))
    return f'__import__("grading.guard", fromlist=["check"]).check({int(index)}, {lines!r})'


def closing(index: int) -> str:
    """The source of the cell at position ``index`` that closes the test before it."""
    return f'__import__("grading.guard", fromlist=["close"]).close({int(index)})'


def digest(token: str | None, index: int, phase: str = "check") -> str:
    """What the grader's cell at ``index`` answers in ``phase`` (``check`` or ``close``) for ``token``."""
    import hashlib
    import hmac

    return hmac.new((token or "").encode(), f"{phase}:{int(index)}".encode(), hashlib.sha256).hexdigest()[:32]


def preamble(sources: list[str]) -> str:
    """The source of the grader's first cell for a notebook whose cells are ``sources``.

    The guard, and the modules it records (torch, numpy, ``course_utils``), are imported
    with the kernel's working directory taken off ``sys.path`` for the duration: that folder
    holds the submission's own files, and a ``grading/``, ``course_utils/`` or ``torch.py``
    among them would otherwise be imported in place of the real ones. Later imports of the
    same names find these modules already loaded.
    """
    modules = watched_modules(sources)
    return (
        "import os as _os, sys as _sys\n"
        "_path = _sys.path[:]\n"
        "_sys.path[:] = [p for p in _path if _os.path.abspath(p or '.') != _os.getcwd()]\n"
        "try:\n"
        f"    __import__('grading.guard', fromlist=['install']).install(get_ipython(), {modules!r})\n"
        "finally:\n"
        "    _sys.path[:] = _path\n"
        "    del _os, _sys, _path\n"
    )


class GradingIntegrityError(Exception):
    """Raised in the kernel when the tests can no longer be trusted.

    It stands outside the grader's error tree (``grading.errors.CourseError``) on purpose. It
    never reaches a person as an exception of the ``course`` command: it is raised in the
    learner's kernel, and the executor reads only its name and message from the cell's error
    output (``grading/sandbox/execute.py`` matches the name). And ``CourseError`` is a
    ``RuntimeError``: a test that expects the code under test to raise one (``except
    RuntimeError: pass``) would then swallow the guard's verdict and pass. Derived from
    ``Exception`` alone, only a bare ``except`` or ``except Exception`` catches it, as before.
    Importing ``grading.errors`` into the kernel would also be one more module to fingerprint.
    """


def _message(problems: list[str], during: bool = False) -> str:
    """The verdict's text for what the audit hook found (the executor shows it in the notes)."""
    when = " while the test ran" if during else ""
    return (
        f"the submission {'; '.join(dict.fromkeys(problems))}{when}: the tests cannot be trusted from here on, "
        "so this and every later test scores 0"
    )
