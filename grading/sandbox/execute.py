"""Run one prepared notebook in a jailed kernel, whatever the learner's code does.

Contract: ``execute(nb, ...)`` runs every code cell in order in a kernel started through
the jail, and always returns: each cell's outputs (capped at ``Limits.output_bytes`` per
cell), plus notes in plain words for the feedback. When a cell exceeds its time limit or
the kernel dies (``os._exit``, a segfault, ``exit()``, the memory limit), that cell gets an
error output saying so; so does a cell during which the kernel and the processes it started
went past the job's memory budget (``sandbox.memory``: every one of them is then killed).
A cell's time limit (``Limits.cell_timeout``) is CPU time: what its kernel and every
process the kernel started used during the cell (``cputime``; a watchdog
looks every ``WATCH_INTERVAL``), so other work on the machine does not make a correct cell
fail. A cell that uses little CPU but does not finish (sleeping, blocked) is stopped at
``WALL_FACTOR`` times its limit of wall-clock time, a limit that moves on while the cell is
held back by other work (its kernel's threads ready to run but waiting for a CPU at least
``HELD_BACK`` of the time: ``CpuAccount.waited``); a cell that the notebook's limit stops while
it was held back so gets a grader-problem note, not a verdict on the code, and a cell that
slept or blocked is told so. No cell outlasts the notebook's wall-clock time limit
(``Limits.notebook_timeout``); the grader's preamble has a wall-clock limit only
(``kernel.PREAMBLE_TIMEOUT``). A cell over its time limit is first interrupted, as nbgrader does
(the kernel keeps what the cell did before the interrupt and grading goes on in it); when
the kernel does not answer the interrupt, or dies, a fresh kernel replays the cells that
had run and grading goes on from the next cell, up to ``Limits.restarts`` times and within
the notebook's time limit; cells that could not run get an error output, so a test that
never ran never scores. When a guard cell finds patched comparison functions, every
remaining test cell fails with the guard's message, without running; when the closing cell
after a test finds that something changed while the test ran, that test fails too; when a
test cell meets an object that lies (``guard``), it fails and the notes say what was found.
Test cells run with ``store_history=False`` (not in ``In``, ``_ih`` or the history). A reply
with status "error" but no error output (a suppressed traceback) gets its error output
back, as nbgrader does.

Whatever the kernel did, no output leaves with the text of a hidden test in it: every
output of every cell is searched for the hidden lines ``sanitize`` recorded on each test
cell (as printed, as a ``repr``, as HTML); an output that holds one is replaced by a note,
and the test whose hidden lines it showed scores 0 (the learner's cell stays, as evidence).

The kernel, the client that runs one cell under those limits and the limits themselves are
``grading.sandbox.kernel``; this module decides what happens to the notebook around them.
"""

from __future__ import annotations

import copy
import re
import signal
import time
from collections.abc import Callable

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from grading.guard import digest
from grading.sandbox.cputime import CellClock
from grading.sandbox.kernel import (
    HELD_BACK,
    CellClient,
    CellLimits,
    CpuTimeExceeded,
    JailedKernelManager,
    WallTimeExceeded,
    time_limits,
)
from grading.sandbox.leaks import keep_hidden_tests_out, label
from grading.sandbox.protections import Limits, size_text
from grading.sanitize import fail_cell, is_test, role

__all__ = ["GRADER_PROBLEM", "JailedKernelManager", "drop_profiler_chatter", "execute", "explain_limits"]

GRADER_PROBLEM = "Grader problem"  # notes that start so are the grader's fault, not the learner's

BYPASSED = "the grader's integrity check did not answer (the submission replaced it): the tests cannot be trusted"


# torch's profiler (kineto) writes progress lines such as
# "USDT:2026-01-01 12:00:00 42:42 SyncActivityProfilerHandler.cpp:52] profiler_start" to the
# process's stderr, and no setting turns them off. nbgrader fails any test cell with stderr
# output, so a correct answer that runs the profiler would score 0: these lines, and only
# these, are removed before grading.
_PROFILER_CHATTER = re.compile(r"^(USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] .*\n?", re.M)


def drop_profiler_chatter(nb: NotebookNode) -> None:
    """Remove kineto's progress lines from stderr outputs (and stderr outputs left empty)."""
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output["text"] = _PROFILER_CHATTER.sub("", output.get("text", ""))
                if not output["text"]:
                    continue
            kept.append(output)
        cell.outputs = kept


def _limit_signatures(limits: Limits) -> list[tuple[re.Pattern, str]]:
    """Error texts that a sandbox limit causes, and the limit in plain words."""
    return [
        (
            re.compile(r"No space left on device|\[Errno 28\]"),
            f"the sandbox's temporary disk is full: a notebook and the files it writes (its TMPDIR, "
            f"torch.compile's C++ builds included) get {size_text(limits.disk_bytes)} in all",
        ),
        (
            re.compile(r"File too large|File size limit exceeded|\[Errno 27\]"),
            f"a file reached the sandbox's limit of {size_text(limits.file_bytes)}",
        ),
        (
            re.compile(r"MemoryError|Cannot allocate memory|\[Errno 12\]|bad_alloc|can't allocate memory"),
            f"the sandbox's memory limit was reached ({size_text(limits.memory_bytes)} of address space)",
        ),
        (
            re.compile(r"can't start new thread|\[Errno 11\] Resource temporarily unavailable"),
            f"the sandbox's limit of {limits.processes} processes and threads was reached",
        ),
        (
            re.compile(r"Network is unreachable|Temporary failure in name resolution|Name or service not known"),
            "the grading sandbox has no network (only the loopback interface)",
        ),
    ]


def explain_limits(nb: NotebookNode, limits: Limits, notes: list[str]) -> None:
    """Say in plain words when an error comes from a sandbox limit (which limit, how much).

    The explanation goes at the end of the error message's first line, the line that
    ``course validate`` and the feedback show, and into the notes.
    """
    signatures = _limit_signatures(limits)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if output.get("output_type") != "error":
                continue
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}\n" + "\n".join(output.get("traceback", []))
            why = next((words for pattern, words in signatures if pattern.search(text)), None)
            if why is None or "[grading sandbox:" in str(output.get("evalue", "")):
                continue
            first, newline, rest = str(output.get("evalue", "")).partition("\n")
            output["evalue"] = f"{first} [grading sandbox: {why}]{newline}{rest}"
            notes.append(f"{label(nb, index)}: {why}.")


def _has_error(cell: NotebookNode) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return str(output.get("evalue", ""))
    return None


def _exit_words(status: int | None) -> str:
    if status is None:
        return "the kernel stopped responding"
    if status < 0 or status > 128:
        number = -status if status < 0 else status - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        words = {"SIGSEGV": "a segmentation fault", "SIGKILL": "SIGKILL (a resource limit)", "SIGXCPU": "the CPU limit"}
        return f"the kernel was killed by {words.get(name, name)}"
    return f"the kernel exited with status {status} (os._exit, exit() or quit())"


def _over_budget(limit: int) -> str:
    return f"the kernel and the processes it started went past the job's memory budget ({size_text(limit)} in all)"


def execute(
    nb: NotebookNode,
    new_kernel: Callable[[], JailedKernelManager],
    limits: Limits,
    notes: list[str],
    token: str | None = None,
    skip: frozenset[int] = frozenset(),
) -> NotebookNode:
    """Run ``nb`` (with grader cells) in place; append what went wrong to ``notes``.

    ``token`` is the secret each new kernel finds in ``guard.TOKEN_FILE``: every guard cell
    must answer with its ``guard.digest``. The cells at the indices in ``skip`` (measured
    tests, which the grader decides outside the kernel) are not run.
    """
    _Grading(nb, new_kernel, limits, notes, token, skip).run()
    drop_profiler_chatter(nb)
    explain_limits(nb, limits, notes)
    keep_hidden_tests_out(nb, notes)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if is_test(cell) else []:
            if output.get("ename") == "GradingIntegrityError" and str(output.get("evalue", "")).startswith("the test"):
                notes.append(f"{label(nb, index)}: {output['evalue']}.")
    return nb


def _answered(cell: NotebookNode, expected: str) -> bool:
    """Whether a grader cell's result is the expected digest (its ``execute_result``)."""
    return any(
        output.get("output_type") == "execute_result" and output.get("data", {}).get("text/plain") == repr(expected)
        for output in cell.get("outputs", [])
    )


class _Grading:
    """One notebook's run through fresh kernels: where it stands, what a fresh kernel replays, how often it restarted.

    ``run()`` goes through ``code`` (the indices of the code cells to run) from ``position``;
    each kernel replays ``history`` (the cells that ran, outputs discarded) and goes on from
    there. A cell over its time limit is interrupted, and grading goes on in the same kernel
    when it answers; a cell that crashed or hung its kernel is marked and grading goes on from
    the next cell in a fresh one. Grading stops (every cell not run marked, with a note) when
    the notebook's time runs out, the grader's preamble fails, a grader cell finds tampering,
    a replay fails, or after ``Limits.restarts`` restarts.
    """

    def __init__(
        self,
        nb: NotebookNode,
        new_kernel: Callable[[], JailedKernelManager],
        limits: Limits,
        notes: list[str],
        token: str | None,
        skip: frozenset[int],
    ) -> None:
        self.nb, self.new_kernel, self.limits, self.notes, self.token = nb, new_kernel, limits, notes, token
        self.deadline = time.monotonic() + limits.notebook_timeout
        skip = _with_grader_cells(nb, skip)
        self.code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip() and i not in skip]
        self.history: list[int] = []
        self.unfinished: set[int] = set()  # test cells that timed out or crashed
        self.position = 0
        self.restarts = 0

    def run(self) -> None:
        """Run every code cell, in as many kernels as it takes (see the class docstring)."""
        while self.position < len(self.code) and self._in_a_kernel():
            pass

    def _stop(self, note: str, reason: str) -> bool:
        """Grading stops here: ``note`` for the notes, ``reason`` on every test and answer cell not run. False."""
        self.notes.append(note)
        for index in self.code[self.position :]:
            cell = self.nb.cells[index]
            if is_test(cell) or cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                fail_cell(cell, "NotRun", reason)
        return False

    def _in_a_kernel(self) -> bool:
        """A fresh kernel: replay the history, then run cells until the end or a crash; whether grading goes on."""
        km = self.new_kernel()
        client = CellClient(self.nb, km, self.limits)
        replaying = True
        try:
            with client.setup_kernel():
                for index in self.history:  # replay after a restart, outputs discarded
                    given = time_limits(
                        role(self.nb.cells[index]), self.limits.cell_timeout, self.limits.notebook_timeout
                    )
                    client.run_cell(
                        copy.deepcopy(self.nb.cells[index]), index, not is_test(self.nb.cells[index]), given
                    )
                replaying = False
                while self.position < len(self.code):
                    if not self._next_cell(client, km):
                        return False
                return True
        except (CellTimeoutError, DeadKernelError):
            return self._after_crash(replaying)
        except Exception as error:  # the kernel could not start, or replay failed
            failure = f"{GRADER_PROBLEM}: the grading kernel failed ({type(error).__name__}: {error})."
            return self._stop(
                f"{failure} {km.log_tail()}".strip(), f"not run: the grading kernel failed ({type(error).__name__})"
            )
        finally:
            km.discard()

    def _next_cell(self, client: CellClient, km: JailedKernelManager) -> bool:
        """Run and judge the cell at ``position``; whether grading goes on (a crash raises, for a fresh kernel)."""
        index = self.code[self.position]
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return self._stop(
                f"The notebook used up its {self.limits.notebook_timeout:.0f} s time limit.",
                "not run: the notebook's time limit was used up",
            )
        kind = role(self.nb.cells[index])
        if not self._finished(client, km, index, time_limits(kind, self.limits.cell_timeout, remaining)):
            self.position += 1  # the kernel keeps what the cell did before the interrupt, as in nbgrader
            return True
        return self._judge(index, kind)

    def _finished(self, client: CellClient, km: JailedKernelManager, index: int, given: CellLimits) -> bool:
        """Run one cell: True when it finished, False when it ran out of time and the kernel answered the interrupt.

        Raises (``CellTimeoutError``, ``DeadKernelError``) when the kernel must be replaced;
        the cell is marked and noted first.
        """
        cell = self.nb.cells[index]
        try:
            client.run_cell(cell, index, not is_test(cell), given)
        except CellTimeoutError as stop:
            self.notes.append(_over_time(cell, label(self.nb, index), client.clock, given, stop))
            self._unfinished(index)
            if role(cell) is None and client.interrupted(km, given.cpu or given.wall, self.deadline):
                return False
            raise
        except DeadKernelError:
            self._unfinished(index)
            words = _over_budget(km.memory_budget.limit) if client.over_budget() else _exit_words(km.exit_status())
            fail_cell(cell, "KernelDied", words)
            self.notes.append(f"Cell {label(self.nb, index)}: {words}.")
            raise
        return True

    def _judge(self, index: int, kind: str | None) -> bool:
        """After a cell ran: the preamble must not fail, a grader cell must answer; whether grading goes on."""
        cell = self.nb.cells[index]
        if kind == "preamble" and _has_error(cell):
            self.position += 1
            return self._stop(
                f"{GRADER_PROBLEM}: the grader's preamble failed ({_has_error(cell)}).",
                "not run: the grader's preamble failed",
            )
        if kind in ("guard", "close"):
            phase = "check" if kind == "guard" else "close"
            if not _has_error(cell) and not _answered(cell, digest(self.token, index, phase)):
                fail_cell(cell, "GradingIntegrityError", BYPASSED)
            if _has_error(cell):
                _untrusted_from(self.nb, self.code, self.position, _has_error(cell) or "tampering detected", self.notes)
                return False
        if not (kind == "close" and index - 1 in self.unfinished):
            self.history.append(index)  # a test that did not finish is not replayed, nor its check and close
        self.position += 1
        return True

    def _after_crash(self, replaying: bool) -> bool:
        """The kernel died or hung: whether grading goes on after the failing cell in a fresh one."""
        if replaying:
            return self._stop(
                "Replaying the earlier cells in a fresh kernel failed; grading stopped there.",
                "not run: the kernel could not be restored after a crash",
            )
        kind = role(self.nb.cells[self.code[self.position]])
        if kind == "preamble":
            return self._stop(
                f"{GRADER_PROBLEM}: the grader's preamble did not finish.",
                "not run: the grader's preamble did not finish",
            )
        if kind in ("guard", "close"):  # the integrity check itself was made to hang or crash
            message = "the grader's integrity check could not run, so the tests cannot be trusted"
            _untrusted_from(self.nb, self.code, self.position, message, self.notes)
            return False
        self.position += 1  # the failing cell is marked; carry on after it in a fresh kernel
        if self.position < len(self.code) and role(self.nb.cells[self.code[self.position]]) == "close":
            self.position += 1  # the test did not finish: its closing cell has nothing to close in a fresh kernel
        self.restarts += 1
        if self.restarts > self.limits.restarts:
            return self._stop(
                f"Stopped after {self.limits.restarts} kernel restarts.",
                "not run: too many kernel crashes or timeouts before this cell",
            )
        return True

    def _unfinished(self, index: int) -> None:
        """A test cell did not finish: a fresh kernel must not replay the check that armed it."""
        if is_test(self.nb.cells[index]):
            self.unfinished.add(index)
            if self.history and self.history[-1] == index - 1 and role(self.nb.cells[index - 1]) == "guard":
                self.history.pop()


def _over_time(cell: NotebookNode, name: str, clock: CellClock, limits: CellLimits, stop: Exception) -> str:
    """Fail a cell stopped by a time limit; the note says which limit, and whether the machine's load may have."""
    used, held = clock.cpu(), stop.held if isinstance(stop, WallTimeExceeded) else clock.held_back()
    if isinstance(stop, CpuTimeExceeded):
        why = (
            f"the cell exceeded its {limits.cpu:.0f} s time limit (CPU time of its kernel and the processes it started)"
        )
        note = f"Cell {name} exceeded its {limits.cpu:.0f} s time limit ({used:.1f} s of CPU time)."
    elif limits.cpu is None:  # the grader's preamble
        why = f"the cell exceeded its {limits.wall:.0f} s time limit"
        note = f"Cell {name} exceeded its {limits.wall:.0f} s time limit."
    else:
        limit = f"its {limits.wall:.0f} s wall-clock" if isinstance(stop, WallTimeExceeded) else "the notebook's"
        done = (
            f"did not finish within {limit} time limit, having used {used:.1f} s of its {limits.cpu:.0f} s of CPU time"
        )
        why = f"the cell {done}: it was waiting (sleeping, or blocked on a lock, a process or input)"
        note = f"Cell {name} {done}: it was waiting (sleeping, or blocked on a lock, a process or input)."
        if held >= HELD_BACK:  # it was ready to run and did not get a CPU: held back, not waiting
            why = f"the cell {done}, held back by other work on the grading machine (a grader problem, not the code's)"
            note = (
                f"{GRADER_PROBLEM}: cell {name} {done}, while its kernel waited for a CPU {held:.0%} of the time: "
                "the machine's load stopped it; grade it again on a quieter machine (--force)."
            )
    fail_cell(cell, "CellTimeoutError", why)
    return note


def _with_grader_cells(nb: NotebookNode, skip: frozenset[int]) -> frozenset[int]:
    """The test cells in ``skip`` and the grader's check and closing cells around each."""
    around = set(skip)
    for index in skip:
        for neighbour in (index - 1, index + 1):
            if 0 <= neighbour < len(nb.cells) and role(nb.cells[neighbour]) in ("guard", "close"):
                around.add(neighbour)
    return frozenset(around)


def _untrusted_from(nb: NotebookNode, code: list[int], position: int, message: str, notes: list[str]) -> None:
    """A grader cell found tampering: fail every test from here on (and the test a closing cell closes)."""
    index = code[position]
    if role(nb.cells[index]) == "close" and index > 0 and is_test(nb.cells[index - 1]):
        notes.append(f"During {label(nb, index - 1)}: {message}.")
        fail_cell(nb.cells[index - 1], "GradingIntegrityError", message)
    else:
        notes.append(f"Before {label(nb, index + 1)}: {message}.")
    for later in code[position + 1 :]:
        if is_test(nb.cells[later]):
            fail_cell(nb.cells[later], "GradingIntegrityError", message)
