"""Finding a test's own processes by a marker in their command line, and waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def marked_processes(mark: str) -> list[int]:
    """The ids of the running processes whose command line contains ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass  # it ended while we looked
    return found


def wait_for(condition: Callable[[], bool], seconds: float, step: float = 0.1) -> bool:
    """Whether ``condition()`` became true within ``seconds``, polling every ``step``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()
