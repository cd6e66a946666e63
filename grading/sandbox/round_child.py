"""The child side of a timed round's process: its end of the pipe (``Channel``), its ``main``, and
``echo``, an entry for checking the protocol and the sandbox.

``grading.sandbox.rounds`` (the grader's side) starts ``python -I -m grading.sandbox.rounds``,
whose ``main`` is this one: that module re-exports ``Channel``, ``main`` and ``echo``, so
``grading.sandbox.rounds:echo`` names the same entry. The wire format is written in that
module's docstring; both ends of it change together.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import struct
import subprocess
import sys
import time
import traceback
from typing import Any, BinaryIO, TextIO

__all__ = ["Channel", "echo", "main"]


class Channel:
    """The round process's end of the pipe to the grader (handed to the entry function)."""

    def __init__(self, inbox: TextIO, outbox: BinaryIO) -> None:
        self._inbox, self._outbox = inbox, outbox

    def _send(self, header: dict[str, Any], arrays: dict[str, tuple[str, tuple[int, ...], bytes]]) -> None:
        header = {
            **header,
            "arrays": [[name, dtype, list(shape), len(data)] for name, (dtype, shape, data) in arrays.items()],
        }
        encoded = json.dumps(header).encode()
        self._outbox.write(struct.pack(">I", len(encoded)) + encoded + b"".join(data for _, _, data in arrays.values()))
        self._outbox.flush()

    def ready(self, **info: Any) -> None:
        """Tell the grader the warm-up is done: the next ``receive`` starts its clock."""
        self._send({"kind": "ready", **info}, {})

    def receive(self) -> dict[str, Any] | None:
        """The next round's inputs, or None when the grader has no more."""
        line = self._inbox.readline()
        return json.loads(line) if line.strip() else None

    def send(self, arrays: dict[str, tuple[str, tuple[int, ...], bytes]], **info: Any) -> None:
        """The round's result: ``{name: (dtype, shape, raw bytes)}`` plus small JSON ``info``."""
        self._send({"kind": "result", **info}, arrays)

    def fail(self, message: str, details: str = "") -> None:
        """The round cannot be done (the learner's code raised, or returned the wrong thing)."""
        self._send({"kind": "error", "message": message, "details": details[-4000:]}, {})


def main() -> None:
    """``python -I -m grading.sandbox.rounds``: read the setup line, run its entry with a channel."""
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to the log, never into the protocol
    sys.stdout = sys.stderr
    channel = Channel(sys.stdin, outbox)
    try:
        setup = json.loads(sys.stdin.readline())
        module, _, function = setup["entry"].partition(":")
        entry = getattr(importlib.import_module(module), function)
        entry(channel, setup)
    except BaseException as error:
        with contextlib.suppress(OSError):
            channel.fail(f"{type(error).__name__}: {error}", traceback.format_exc())


def echo(channel: Channel, setup: dict[str, Any]) -> None:
    """An entry for checking the protocol and the sandbox: ready, then each round's ``payload`` back.

    A round ``{"payload": text, "sleep": seconds, "spin": seconds, "run": [argv...]}`` sleeps,
    computes for ``spin`` seconds of its own CPU time (a fixed amount of work: other work on
    its CPU makes it take longer), optionally runs a command, and answers the payload as
    bytes with the process's CPU affinity and the command's exit status and output.
    """
    channel.ready(cpus=sorted(os.sched_getaffinity(0)))
    while (spec := channel.receive()) is not None:
        time.sleep(float(spec.get("sleep", 0)))
        end = time.process_time() + float(spec.get("spin", 0))
        while time.process_time() < end:
            pass
        info: dict[str, Any] = {"cpus": sorted(os.sched_getaffinity(0))}
        if spec.get("run"):
            done = subprocess.run(spec["run"], capture_output=True, text=True, timeout=30)
            info.update(status=done.returncode, output=(done.stdout + done.stderr)[-2000:])
        data = str(spec.get("payload", "")).encode()
        channel.send({"payload": ("uint8", (len(data),), data)}, **info)
