"""A kernel's CPU time (``grading.sandbox.cputime``): every process it starts, counted once, whatever they do.

Each program below burns known amounts of CPU time, measured by the burning process itself
(``time.process_time``), in processes that exit, are reaped or are daemonised; the account
must find their sum (give or take the interpreters' own start-up), never twice what a
reaped child used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from grading.sandbox.cputime import CpuAccount, account
from tests.support.processes import wait_for

# Burns BURN s in each of three children, one after the other: each is waited for by its
# parent (so it moves into the parent's cutime), while the account looks every 50 ms.
REAPED = """
import os, sys, time
def burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        burn({burn})
        os._exit(0)
    os.waitpid(pid, 0)
burn({burn})
"""

# A child that leaves the tree (double fork: its parent exits at once), burns, then says so.
DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        start = time.process_time()
        while time.process_time() - start < {burn}:
            pass
        open({done!r}, "w").close()
        os._exit(0)
    os._exit(0)
os.wait()
"""


def _run(program: str, cpu: CpuAccount, look: float = 0.05) -> float:
    process = subprocess.Popen([sys.executable, "-S", "-c", program], preexec_fn=cpu.join)
    cpu.attach(process.pid)
    while process.poll() is None:
        cpu.used()
        time.sleep(look)
    return cpu.used()


def _cgroup() -> CpuAccount:
    found = account("root")
    if not found.exact:
        pytest.skip("needs root and a writable cgroup hierarchy with CPU accounting")
    return found


def test_the_process_tree_counts_reaped_children_once():
    """Four burns of 0.4 s make about 1.6 s: a child counted as it ran is not counted again once its parent reaps it."""
    used = _run(REAPED.format(burn=0.4), CpuAccount())
    assert 1.55 <= used <= 2.1, used


def test_a_cgroup_counts_every_process_and_is_removed():
    cpu = _cgroup()
    group = cpu.group
    assert group is not None and group.is_dir()
    used = _run(REAPED.format(burn=0.4), cpu)
    assert 1.55 <= used <= 2.1, used
    cpu.close()
    assert not group.exists()


def test_a_cgroup_counts_a_process_daemonised_out_of_the_tree(tmp_path):
    """The grandchild leaves the tree (its parent exits) and burns 1 s: the tree cannot see it, the cgroup does."""
    cpu, done = _cgroup(), tmp_path / "done"
    try:
        _run(DAEMON.format(burn=1.0, done=str(done)), cpu, look=0.2)
        assert wait_for(done.exists, 60)
        used = cpu.used()
    finally:
        cpu.close()
    assert 1.0 <= used <= 1.5, used


def test_the_account_never_goes_back():
    """Once the kernel's process is gone the tree is empty: what was counted stays counted."""
    cpu = CpuAccount()
    used = _run(REAPED.format(burn=0.2), cpu)
    time.sleep(0.1)
    assert cpu.used() == used and used >= 0.75


def test_below_root_there_is_no_cgroup():
    assert not account("userns").exact and not account("none").exact
    if os.geteuid() == 0:
        cpu = account("root")
        cpu.close()  # whatever it made goes


def _pinned(code: str) -> subprocess.Popen:
    """A Python process on CPU 0 only (so that processes pinned beside it compete for that one CPU); it prints
    a line once it has started, before ``code``."""
    return subprocess.Popen(
        [sys.executable, "-S", "-c", f"import os\nos.sched_setaffinity(0, {{0}})\nprint(flush=True)\n{code}"],
        stdout=subprocess.PIPE,
    )


@pytest.mark.slow
def test_a_process_held_back_by_load_waits_on_the_run_queue_and_a_sleeping_one_does_not():
    """What tells a cell the machine's load holds back from one that sleeps: the scheduler's run-queue wait."""
    rivals = [_pinned("while True: pass") for _ in range(3)]
    sleeper, burner = _pinned("import time\ntime.sleep(60)"), _pinned("while True: pass")
    try:
        for process in (sleeper, burner):
            assert process.stdout is not None
            process.stdout.readline()  # started: its interpreter's start-up, which waits too, is over
        time.sleep(0.2)
        shares = {}
        for name, process in (("sleeper", sleeper), ("burner", burner)):
            tracked = CpuAccount()
            tracked.attach(process.pid)
            before, start = tracked.waited(), time.monotonic()
            time.sleep(1.5)
            shares[name] = (tracked.waited() - before) / (time.monotonic() - start)
        # the burner shares CPU 0 with three others: ready to run about 3/4 of the time, not running
        assert shares["burner"] > 0.4, shares
        assert shares["sleeper"] < 0.05, shares
    finally:
        for process in [*rivals, sleeper, burner]:
            process.kill()
            process.wait()
