"""Launch a distributed training script with ``torchrun`` from a notebook or a test.

Contract: nothing starts at import. ``torchrun_command`` builds the command line (it runs
``python -m torch.distributed.run`` with the *current* interpreter, so the workers see the
same environment as the caller). ``run_torchrun`` runs it in its own process session with
a timeout: on timeout every process of that session (torchrun and its workers) is ended,
and any failure raises ``LaunchError`` carrying the exit code and both output streams.
``choose_backend`` picks the collective backend: NCCL when each process can have its own
GPU, Gloo otherwise (CPU).
First written out in notebook 08 ("Scale out with DistributedDataParallel").
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LaunchError", "LaunchResult", "choose_backend", "run_command", "run_torchrun", "torchrun_command"]


@dataclass(frozen=True)
class LaunchResult:
    """What a finished command left behind."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    """Wall-clock time from start to exit, process start-up included."""


class LaunchError(RuntimeError):
    """A launched command failed or timed out.

    The message shows the workers' own error lines (torchrun prefixes a Python traceback
    with ``[rank N]:``; a native crash such as C++'s ``terminate called ...`` comes without
    a prefix) and the end of both output streams; ``result`` keeps all of it.
    """

    def __init__(self, result: LaunchResult, reason: str) -> None:
        self.result = result
        worker_errors = "\n".join(line for line in result.stderr.splitlines() if _NATIVE_OR_RANK.match(line))
        workers = f"--- workers' errors ---\n{_tail(worker_errors, 60)}\n" if worker_errors else ""
        super().__init__(
            f"{reason}: {' '.join(result.command)}\n{workers}"
            f"--- stdout (last lines) ---\n{_tail(result.stdout)}\n"
            f"--- stderr (last lines) ---\n{_tail(result.stderr)}"
        )


# a worker's Python traceback as torchrun relays it, or what a native crash prints before the abort
_NATIVE_OR_RANK = re.compile(r"\[rank\d+\]:|terminate called|\s*what\(\):|Fatal Python error|Segmentation fault")


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty)"


def choose_backend(cuda_device_count: int, nproc_per_node: int) -> str:
    """``"nccl"`` if every local process gets its own GPU, else ``"gloo"`` (the processes compute on the CPU).

    NCCL only moves CUDA tensors and wants one GPU per process. Gloo works everywhere: every
    collective on CPU tensors, and a few (broadcast, all-reduce) on CUDA tensors too, which
    the ``torch.distributed`` docs say runs slower than NCCL; their rule of thumb, NCCL for
    GPU training and Gloo for CPU training, is what this function applies.

    >>> choose_backend(0, 2), choose_backend(1, 2), choose_backend(8, 2)
    ('gloo', 'gloo', 'nccl')
    """
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be at least 1, got {nproc_per_node}")
    return "nccl" if cuda_device_count >= nproc_per_node else "gloo"


def torchrun_command(script: str | Path, script_args: Sequence[str] = (), *, nproc_per_node: int = 2) -> list[str]:
    """The single-node ``torchrun`` command line for ``script``, as an argument list.

    ``python -m torch.distributed.run`` is what the ``torchrun`` console script runs;
    calling it through ``sys.executable`` guarantees the notebook's own environment.

    >>> torchrun_command("train.py", ["--steps", "3"])[3:]
    ['--standalone', '--nproc-per-node=2', 'train.py', '--steps', '3']
    """
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc_per_node}",
        str(script),
        *map(str, script_args),
    ]


def _end_session(process: subprocess.Popen[str], grace_s: float = 5.0) -> None:
    """Stop ``process`` and everything it started in its session: SIGTERM, then SIGKILL."""
    if not hasattr(os, "killpg"):  # Windows: no process groups; end the launcher itself
        process.kill()
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_s)
            # torchrun has exited; end any worker that outlived it in the same session
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
        return


def run_command(
    command: Sequence[str],
    *,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    check: bool = True,
) -> LaunchResult:
    """Run ``command`` in a new session, capture its output, and always end it.

    On timeout the whole session is terminated (so no worker outlives its launcher) and
    ``LaunchError`` is raised; with ``check=True`` a non-zero exit raises it too.
    """
    start = time.perf_counter()
    process = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
    )
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _end_session(process)
        stdout, stderr = process.communicate()
    except BaseException:  # KeyboardInterrupt in a notebook: leave nothing running
        _end_session(process)
        process.communicate()
        raise
    result = LaunchResult(tuple(command), process.returncode, stdout, stderr, time.perf_counter() - start)
    if timed_out:
        raise LaunchError(result, f"timed out after {timeout:g} s")
    if check and result.returncode != 0:
        raise LaunchError(result, f"exit code {result.returncode}")
    return result


def run_torchrun(
    script: str | Path,
    script_args: Sequence[str] = (),
    *,
    nproc_per_node: int = 2,
    timeout: float = 120.0,
    threads_per_process: int | None = 1,
    extra_env: Mapping[str, str] | None = None,
) -> LaunchResult:
    """Run ``script`` under ``torchrun --standalone`` and return its captured output.

    ``threads_per_process`` sets ``OMP_NUM_THREADS`` for every worker (torchrun would
    otherwise set 1 itself and print a notice); ``None`` leaves the caller's value.
    Raises ``LaunchError`` (with both output streams) on failure or timeout.
    """
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if threads_per_process is not None:
        env["OMP_NUM_THREADS"] = str(threads_per_process)
    env.update(extra_env or {})
    command = torchrun_command(script, script_args, nproc_per_node=nproc_per_node)
    return run_command(command, timeout=timeout, env=env)
