"""The hostile cells of the CPU attacks (issue 23), shared by the notebook 12 tests and their plain-Python stand-ins.

* ``SEMAPHORE_UP``: code an answer runs first: it raises a System V semaphore (key ``KEY``)
  while its process lives, so that a colluding neighbour can tell when the answer is timed.
* ``burners(count, coordinate)``: a learner's added cell that starts ``count`` CPU burners in
  new sessions, each pinned (again and again) to one CPU, burning only while the semaphore is
  down when ``coordinate`` (while the baseline is timed), each writing what it saw into a file
  of the kernel's working directory.
* ``KEEP_ALIVE``: the last added cell: keeps the kernel alive while the neighbour is measured,
  printing every 5 s what the burners saw (a ``BURNERS {json}`` line).
* ``burner_notes(nb)`` and ``cpu_limit_notes(nb)`` read a graded notebook: the last ``BURNERS``
  line, and the grading notes that say a cell was stopped at its CPU-time limit.

Plain Python (no torch): the VM of ``tools/cgroup2_vm.py`` imports this module too.
"""

from __future__ import annotations

import json
from typing import Any

KEY = 0x23C0

SEMAPHORE_UP = f"""
import ctypes as _ctypes

_libc = _ctypes.CDLL(None, use_errno=True)


class _Sembuf(_ctypes.Structure):
    _fields_ = [("sem_num", _ctypes.c_ushort), ("sem_op", _ctypes.c_short), ("sem_flg", _ctypes.c_short)]


_semaphore = _libc.semget({KEY}, 1, 0o1000 | 0o666)
_libc.semop(_semaphore, _ctypes.byref(_Sembuf(0, 1, 0x1000)), 1)  # up while this process lives (SEM_UNDO)
"""

BURNERS = f"""
import ctypes, json, os, time

_libc = ctypes.CDLL(None, use_errno=True)
_semaphore = _libc.semget({KEY}, 1, 0o1000 | 0o666)


def _burner(cpu, coordinate, start_at):
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    time.sleep(max(0.0, start_at - time.time()))  # all together, once the kernel has forked them all
    seen = pinned = refused = 0
    log, written = f"burner-{{os.getpid()}}.json", time.monotonic()
    while True:
        try:
            os.sched_setaffinity(0, {{cpu}})
            pinned += 1
        except OSError:
            refused += 1
        if coordinate and _libc.semctl(_semaphore, 0, 12) > 0:  # GETVAL: an answer process is alive
            seen += 1
            time.sleep(0.01)
        else:
            end = time.perf_counter() + 0.02
            while time.perf_counter() < end:
                pass
        if time.monotonic() - written > 0.5:
            with open(log, "w") as out:
                out.write(json.dumps({{"cpu": cpu, "seen": seen, "pinned": pinned, "refused": refused}}))
            written = time.monotonic()


_start_at = time.time() + START_AFTER
for _index in range(BURNER_COUNT):
    _burner(_index % os.cpu_count(), COORDINATE, _start_at)
print("burners started:", BURNER_COUNT)
"""

# Their CPU time counts against this cell's CPU-time limit, which can stop it before the end (it did, in CI and
# here: 8 burners spinning on two CPUs): what it printed before stays in the notebook.
KEEP_ALIVE = """
import glob, json, time


def _seen(path):
    try:
        with open(path) as log:
            return json.load(log)
    except (OSError, ValueError):  # a burner rewriting its log right now
        return None


for _ in range(ROUNDS):
    time.sleep(5)
    burners = [b for b in map(_seen, glob.glob("burner-*.json")) if b is not None]
    total = {key: sum(b[key] for b in burners) for key in ("seen", "pinned", "refused")}
    print("BURNERS " + json.dumps({"count": len(burners), **total}), flush=True)
"""


def burners(count: int, coordinate: bool, start_after: float = 15) -> str:
    """The burner cell: ``count`` burners, together ``start_after`` s after the cell ran."""
    return f"BURNER_COUNT = {count}\nCOORDINATE = {coordinate}\nSTART_AFTER = {start_after}\n" + BURNERS


def keep_alive(seconds: int = 100) -> str:
    """The last cell: alive for ``seconds`` (in steps of 5), printing what the burners saw."""
    return f"ROUNDS = {max(1, seconds // 5)}\n" + KEEP_ALIVE


def _code_text(nb: Any) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def burner_notes(nb: Any, student: str) -> dict:
    """The last ``BURNERS`` line a graded notebook printed (before its cell ended or was stopped)."""
    text = _code_text(nb)
    lines = [line for line in text.splitlines() if line.startswith("BURNERS ")]
    assert lines, f"{student}'s notebook printed no BURNERS line:\n" + text[-2000:]
    return json.loads(lines[-1].removeprefix("BURNERS "))


def cpu_limit_notes(nb: Any) -> list[str]:
    """The graded notebook's grading notes that say a cell exceeded its (CPU) time limit."""
    notes = nb.cells[0].source if nb.cells and nb.cells[0].get("id", "").startswith("grading-notes") else ""
    return [line for line in notes.splitlines() if "exceeded its" in line and "time limit" in line]
