"""The test suite's process helpers: finding processes by a marker, waiting, free ports, stopping servers."""

from __future__ import annotations

import signal
import socket
import subprocess
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


def free_port() -> int:
    """A loopback TCP port that nothing listened on a moment ago (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Send ``sig`` to ``process`` and wait for it; kill it if it is still there after ``timeout`` seconds."""
    process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
