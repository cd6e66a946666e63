"""The guard's entry points in the kernel: ``install`` (the grader's first cell), ``check`` and ``close``.

Contract: ``install(shell, modules)`` reads and deletes the worker's secret (``TOKEN_FILE``),
records what the tests rely on (``grading.guard.state._State``), finds code a cell left for a
later kernel (IPython startup and configuration files, Python's user site-packages) and adds
the audit hook that judges (``grading.guard.vault``); a second ``install`` in one kernel is
refused. ``check(index, hidden)`` (the cell before a test) and ``close(index)`` (the cell
after it) only ask the audit hook, which compares everything and answers with the digest the
grader expects (``grading.guard.protocol.digest``), or they raise ``GradingIntegrityError``
with what it found. They hold nothing themselves: replacing them cannot forge an answer.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from grading.guard.protocol import EVENT, TOKEN_FILE, GradingIntegrityError, _message
from grading.guard.state import _State
from grading.guard.vault import _vault


def _read_token() -> str | None:
    """The worker's secret for this kernel, removed from the disk as soon as it is read."""
    try:
        with open(TOKEN_FILE, encoding="ascii") as handle:
            token = handle.read().strip()
        os.unlink(TOKEN_FILE)
    except OSError:
        return None
    return token or None


def _planted(shell: Any) -> list[str]:
    """Code a cell left for the next kernel to run before the grader's first cell (after a crash, say)."""
    import site

    found: list[str] = []
    profile = getattr(shell, "profile_dir", None)
    startup = getattr(profile, "startup_dir", None)
    if startup and os.path.isdir(startup) and any(name != "README" for name in os.listdir(startup)):
        found.append("left IPython startup files (code that runs before the grader's)")
    location = getattr(profile, "location", None)
    if location and any(
        os.path.exists(os.path.join(location, f"{name}_config.py")) for name in ("ipython", "ipython_kernel")
    ):
        found.append("left an IPython configuration file (code that runs before the grader's)")
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and os.path.isdir(user_site) and os.listdir(user_site):
        found.append("left files in Python's user site-packages (.pth files run before the grader's code)")
    return [f"{what} (refused)" for what in found]


def install(shell: Any, modules: list[str]) -> None:
    """Record what the tests rely on and install the audit hook that judges it (the grader's first cell)."""
    box: list[Any] = []
    sys.audit(EVENT + "installed", box)
    if box:
        raise GradingIntegrityError("the grader's checks were installed twice")
    token = _read_token()
    sys.addaudithook(_vault(_State(shell, modules), token, _planted(shell)))


def _answer(box: list[Any], during: bool = False) -> str:
    """The audit hook's answer in ``box``: the digest, else ``GradingIntegrityError`` with what it found."""
    if not box:
        raise GradingIntegrityError("the grader's checks are missing: the tests cannot be trusted")
    if isinstance(box[0], str):
        return box[0]
    raise GradingIntegrityError(_message(box[0], during))


def check(index: int = 0, hidden: tuple[int, ...] = ()) -> str:
    """Before a test cell: fail if anything the tests rely on changed, else arm the transformer.

    Returns the answer the executor checks (``digest`` of the kernel's secret, ``check`` and
    ``index``), which only the audit hook can compute.
    """
    box: list[Any] = []
    sys.audit(EVENT + "check", int(index), tuple(int(i) for i in hidden), box)
    return _answer(box)


def close(index: int = 0) -> str:
    """After a test cell: fail if anything changed while it ran, and clear what it left in the kernel."""
    box: list[Any] = []
    sys.audit(EVENT + "close", int(index), box)
    return _answer(box, during=True)
