"""The grader's own cgroup v2 placement, run for real on a machine that mounts only cgroup v2.

``cpus.join_job``, ``cpus.reserve``, ``pausable_group``/``pause``, ``cputime.account`` and
``memory.budget``, with the tree of ``grading.sandbox.cgroup2``; and a measured test's round
process (``grading.sandbox.rounds``) in the jail, under its memory budget.

Each test runs the grader's functions in processes forked from pytest (``spawn``), plain Python
only. pytest itself sits in the v2 root, as the grader does on a machine without systemd, so the
subtree is ``/sys/fs/cgroup/course-grading``; one test runs it from a group of its own, as under
``systemd-run --scope -p Delegate=yes``. Each test removes the subtree afterwards (killing what is
left in it); the isolation probe (``cpus.isolation``) runs once.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grading.sandbox import cgroup2, cpus, cputime, memory
from grading.sandbox.cgroups import SUBTREE, parse_cpus
from grading.sandbox.ledger import Ledger
from grading.sandbox.protections import Limits, SlotLease, detect
from grading.sandbox.rounds import RoundError, starter

from .conftest import CGROUP_ROOT, WAIT, Group, Link, Spawn, hold_and_report, make_group

# Only in the machine of tools/cgroup2_vm.py (which sets CGROUP2_VM=1): the tests remove course-grading under the
# root after each test, with whatever runs in it, which on another v2-only machine could be a grading run's.
pytestmark = pytest.mark.skipif(os.environ.get("CGROUP2_VM") != "1", reason="only in tools/cgroup2_vm.py's machine")

MIB = 1 << 20
UID = 61000  # grading users, as protections.GRADING_UID_BASE hands them out
ROOT = Group(CGROUP_ROOT)
SUB = CGROUP_ROOT / SUBTREE


@pytest.fixture
def placement() -> Iterator[cpus.CpuIsolation]:
    """What ``cpus.isolation("root")`` finds here; the subtree made for the test, and removed after it."""
    iso = cpus.isolation("root")
    root, why = cgroup2.subtree(create=True)
    assert root == SUB, why
    try:
        yield iso
    finally:
        Group(SUB).remove()


def _cpus_allowed(pid: int | str = "self") -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def _group_of(pid: int) -> Path:
    return CGROUP_ROOT / Path(f"/proc/{pid}/cgroup").read_text().strip().split("::", 1)[1].lstrip("/")


def test_the_v2_backend_gives_a_measurement_every_protection(placement: cpus.CpuIsolation) -> None:
    assert placement.layout == "v2"
    assert (placement.cpuset, placement.shares, placement.freezer, placement.pressure) == (CGROUP_ROOT,) * 4
    assert placement.realtime  # SCHED_RR in a group with the cpu controller: Debian's kernel lacks RT_GROUP_SCHED
    assert placement.missing() == []
    assert set(Group(SUB).read("cgroup.subtree_control").split()) == {"cpu", "cpuset", "memory", "pids"}


def _job_reporter(uid: int) -> Any:
    """A worker's stand-in: joins job-<uid>, drops to the grading user, reports its CPUs on each request."""

    def body(link: Link) -> None:
        assert cpus.join_job("root", uid)
        os.setgid(uid)
        os.setuid(uid)
        every = sorted(parse_cpus(ROOT.read("cpuset.cpus.effective")))
        while link.receive() != "stop":
            pin = {}
            for cpu in every:
                try:
                    os.sched_setaffinity(0, {cpu})
                    pin[str(cpu)] = "ok"
                except OSError as error:
                    pin[str(cpu)] = errno.errorcode[error.errno or 0]
            os.sched_setaffinity(0, every)
            try:
                with open(CGROUP_ROOT / "cgroup.procs", "w") as procs:
                    procs.write(str(os.getpid()))
                escape = "left its group"
            except OSError as error:
                escape = errno.errorcode[error.errno or 0]
            link.send({"affinity": sorted(os.sched_getaffinity(0)), "pin": pin, "escape": escape})

    return body


def test_a_held_cpu_is_out_of_a_jobs_reach_until_the_measurement_ends(
    placement: cpus.CpuIsolation, spawn: Spawn, findings: dict[str, Any]
) -> None:
    every = sorted(parse_cpus(ROOT.read("cpuset.cpus.effective")))
    if len(every) < 2:
        pytest.skip("needs two CPUs")
    job = spawn(ROOT, _job_reporter(UID + 1))
    job.send("look")
    before = job.receive()
    group = SUB / f"job-{UID + 1}"
    assert _group_of(job.pid) == group / "worker"
    assert Group(group).read("cpu.weight") == "100" and Group(group).read("pids.max") == str(cgroup2.JOB_PIDS)
    assert "memory" in Group(group).read("cgroup.subtree_control").split()
    assert before["affinity"] == every and set(before["pin"].values()) == {"ok"}
    assert before["escape"] == "EACCES"  # a grading user cannot leave its job's group
    with cpus.reserve("root", 0, UID, wait=WAIT) as held:
        assert held.held and held.realtime
        assert held.pressure == held.freezer == SUB / f"measure-{UID}" == _group_of(os.getpid()).parent
        assert _group_of(os.getpid()).name == cgroup2.WORKER  # in a leaf: its round groups may get +memory
        assert Group(held.freezer).read("cgroup.subtree_control").split() == ["memory"]
        assert Group(held.pressure).read("cpuset.cpus.effective") == str(held.cpu)
        job.send("look")
        during = job.receive()
        sample = Ledger(held, lambda: []).sample()  # the ledger reads the measurement group's cpu.pressure
        with cpus.reserve("root", 1, UID + 9, wait=0.5) as second:  # it would leave the jobs no CPU: not held
            unheld = (second.held, second.realtime, second.pressure, sorted(os.sched_getaffinity(0)))
        assert _group_of(os.getpid()) == SUB / f"measure-{UID}" / cgroup2.WORKER  # back in the first measurement
    job.send("look")
    after = job.receive()
    findings.update(held_cpu=held.cpu, before=before, during=during, after=after, full_pressure_s=sample.full)
    assert held.cpu not in during["affinity"] and during["pin"][str(held.cpu)] == "EINVAL"
    assert during["affinity"] == sorted(set(every) - {held.cpu})
    assert sorted(parse_cpus(Group(group).read("cpuset.cpus"))) == every  # given back
    assert after["affinity"] == every and after["pin"][str(held.cpu)] == "ok"
    assert _group_of(os.getpid()) == CGROUP_ROOT and not (SUB / f"measure-{UID}").exists()
    assert unheld == (False, False, SUB / f"unheld-{UID + 9}", sorted(set(every) - {held.cpu}))
    assert not (SUB / f"unheld-{UID + 9}").exists()
    job.send("stop")
    assert job.wait() == 0
    cpus.leave_jobs("root", [UID + 1])  # the pool's workers are gone: their job groups go
    assert not group.exists()


def _spinners(uid: int, count: int, cpu: int) -> Any:
    def body(link: Link) -> None:
        assert cpus.join_job("root", uid)
        for _ in range(count):
            if os.fork() == 0:
                os.sched_setaffinity(0, {cpu})
                while True:
                    pass
        link.send("spinning")
        signal.pause()

    return body


def test_two_jobs_share_a_cpu_equally_however_many_processes_each_runs(
    placement: cpus.CpuIsolation, spawn: Spawn, findings: dict[str, Any]
) -> None:
    """20 spinners in one job, 1 in another, all on one CPU: each job's group gets about half of it."""
    cpu = max(parse_cpus(ROOT.read("cpuset.cpus.effective")))
    crowd, single = spawn(ROOT, _spinners(UID + 2, 20, cpu)), spawn(ROOT, _spinners(UID + 3, 1, cpu))
    assert crowd.receive() == single.receive() == "spinning"
    groups = [Group(SUB / f"job-{uid}") for uid in (UID + 2, UID + 3)]
    assert Group(SUB).read("cpu.weight") == "200"  # one default weight per job
    time.sleep(0.5)
    start = [g.keyed("cpu.stat")["usage_usec"] for g in groups]
    time.sleep(3.0)
    used = [g.keyed("cpu.stat")["usage_usec"] - s for g, s in zip(groups, start, strict=True)]
    findings.update(crowd_cpu_s=used[0] / 1e6, single_cpu_s=used[1] / 1e6, pids_crowd=groups[0].read("pids.current"))
    assert sum(used) > 1.5e6  # the CPU was busy for the 3 s
    assert used[1] > 0.6 * used[0], used  # without a group per job: 1/20 of it


def test_a_frozen_round_group_uses_no_cpu_and_thaws_intact(
    placement: cpus.CpuIsolation, spawn: Spawn, findings: dict[str, Any]
) -> None:
    counter = mmap.mmap(-1, 16)  # [0:8] the round process's count, [8:16] its child's

    def counted() -> tuple[int, int]:
        return int.from_bytes(counter[:8], "little"), int.from_bytes(counter[8:], "little")

    with cpus.reserve("root", 0, UID + 4, wait=WAIT) as held:
        assert held.freezer is not None
        group, join = cpus.pausable_group(held.freezer)
        assert group.parent == SUB / f"measure-{UID + 4}"

        def round_process(link: Link) -> None:
            join()  # as a round process's preexec_fn does
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(cpus.REALTIME_PRIORITY))  # allowed in the group
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # (spinning at it would starve pytest)
            offset = 8 if os.fork() == 0 else 0  # and what it starts is born inside
            n = 0
            while True:
                n += 1
                if not n & 0x3FF:
                    counter[offset : offset + 8] = n.to_bytes(8, "little")

        child = spawn(Group(held.freezer / cgroup2.WORKER), round_process)  # forked by the measuring worker
        deadline = time.monotonic() + WAIT
        while 0 in counted():
            assert time.monotonic() < deadline, "the round process never started counting"
            time.sleep(0.05)
        assert len(Group(group).pids()) == 2
        assert cpus.pause(group, True)
        usage, frozen_at = Group(group).keyed("cpu.stat")["usage_usec"], counted()
        time.sleep(1.0)
        frozen_growth = Group(group).keyed("cpu.stat")["usage_usec"] - usage
        assert counted() == frozen_at and frozen_growth <= 10_000
        assert cpus.pause(group, False)
        time.sleep(1.0)
        thawed = counted()
        findings.update(frozen_usage_growth_usec=frozen_growth, counted_frozen=frozen_at, counted_thawed=thawed)
        assert all(after > before for after, before in zip(thawed, frozen_at, strict=True))
        assert child.alive()
        child.kill()
        Group(group).write("cgroup.kill", "1")
        assert cpus.remove_group(group)
    assert not (SUB / f"measure-{UID + 4}").exists()


def test_a_jobs_pids_max_refuses_the_thread_and_the_fork_past_it(
    placement: cpus.CpuIsolation, spawn: Spawn, findings: dict[str, Any]
) -> None:
    def threads_until_refused(link: Link) -> None:
        assert cpus.join_job("root", UID + 5)  # as root: RLIMIT_NPROC does not hold it, the group's bound does
        stop = threading.Event()
        started = 0
        try:
            while started < 2 * cgroup2.JOB_PIDS:
                threading.Thread(target=stop.wait, daemon=True).start()
                started += 1
        except RuntimeError:
            pass
        try:
            if os.fork() == 0:
                os._exit(0)
            fork = "forked"
        except OSError as error:
            fork = errno.errorcode[error.errno or 0]
        link.send({"threads": started, "fork": fork})
        stop.set()

    child = spawn(ROOT, threads_until_refused)
    result = child.receive(timeout=120)
    group = Group(SUB / f"job-{UID + 5}")
    findings.update(result, **{"pids.events": group.read("pids.events")})
    assert result["fork"] == "EAGAIN"
    assert result["threads"] == cgroup2.JOB_PIDS - 1  # the group holds the worker's main thread and these
    assert group.keyed("pids.events")["max"] >= 1


def test_a_kernel_past_its_budget_is_killed_whole_and_its_worker_and_a_neighbour_job_go_on(
    placement: cpus.CpuIsolation, spawn: Spawn, findings: dict[str, Any]
) -> None:
    def worker(link: Link) -> None:
        assert cpus.join_job("root", UID + 6)
        account = cputime.account("root")
        budget = memory.budget("root", 200 * MIB, account.group)
        link.send({"group": str(account.group), "active": budget.active, "version": budget.version})
        joined, inside = os.pipe()
        kernel = os.fork()
        if kernel == 0:
            account.join()  # as the kernel's preexec_fn does, before attach looks
            budget.join()
            os.write(inside, b"1")
            done, allocated = os.pipe()
            for index in range(3):
                if os.fork() == 0:
                    data = b"\x01" * (100 * MIB)
                    os.write(allocated, bytes([index]))
                    signal.pause()
                    os._exit(len(data) & 0)
                os.read(done, 1)
            signal.pause()
            os._exit(0)
        os.read(joined, 1)
        account.attach(kernel)
        budget.attach(kernel)
        _, status = os.waitpid(kernel, 0)
        outcome = {
            "kernel_signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "killed": budget.killed(),
            "exact": account.exact,
            "cpu_s": account.used(),
        }
        group = account.group
        account.close()
        budget.close()
        link.send({**outcome, "group_gone": group is not None and not group.exists(), "worker_alive": True})
        link.receive()

    def neighbour(link: Link) -> None:
        assert cpus.join_job("root", UID + 7)
        hold_and_report(link)

    quiet = spawn(ROOT, neighbour)
    assert quiet.receive() == "allocated"
    job = spawn(ROOT, worker)
    made = job.receive()
    kernel_group = Path(made["group"])
    assert kernel_group.parent == SUB / f"job-{UID + 6}"  # beside the worker's leaf: the job's CPUs and weight
    assert made["active"] and made["version"] == "v2"
    assert Group(kernel_group).read("memory.max") == str(200 * MIB)
    assert Group(kernel_group).read("memory.oom.group") == "1"
    started = time.monotonic()
    outcome = job.receive(timeout=120)
    findings.update(outcome, seconds_to_kill=round(time.monotonic() - started, 2))
    assert outcome["kernel_signal"] == signal.SIGKILL and outcome["killed"] and outcome["exact"]
    assert outcome["worker_alive"] and job.alive()  # the calling process goes on
    assert outcome["group_gone"] and not kernel_group.exists()  # closed: the group is gone
    job.send("done")
    assert job.wait() == 0
    assert quiet.alive()
    quiet.send("check")
    assert quiet.receive() == {"intact": True}
    assert Group(SUB / f"job-{UID + 7}").keyed("memory.events").get("oom_kill", 0) == 0


def test_a_grader_in_a_delegated_group_keeps_its_groups_inside_it(spawn: Spawn, findings: dict[str, Any]) -> None:
    """As under ``systemd-run --scope -p Delegate=yes`` (no systemd here: a group it may write is delegated)."""
    scope = make_group("cg2test-scope-")
    try:

        def grader(link: Link) -> None:
            cpus.isolation.cache_clear()
            cpus._cgroups.cache_clear()
            iso = cpus.isolation("root")
            where = str(_group_of(os.getpid()))
            joined = cpus.join_job("root", UID + 8)
            link.send(
                {
                    "cpuset": str(iso.cpuset),
                    "missing": iso.missing(),
                    "leaf": where,
                    "joined": joined,
                    "worker": str(_group_of(os.getpid())),
                }
            )
            link.receive()

        child = spawn(scope, grader)
        seen = child.receive(timeout=120)
        findings.update(seen)
        assert seen["cpuset"] == str(scope.path) and seen["missing"] == []
        assert seen["leaf"] == str(scope.path / "course-grader")  # out of the way of its controllers
        assert seen["joined"] and seen["worker"] == str(scope.path / SUBTREE / f"job-{UID + 8}" / "worker")
        assert not (CGROUP_ROOT / SUBTREE / f"job-{UID + 8}").exists()
        child.send("done")
        assert child.wait() == 0
    finally:
        scope.remove()


# A round of the ``echo`` entry runs this shell: two Python children that each hold ``mib`` MiB (every page
# written) for a second, at the same time, and waits for both.
HOLD = "import sys, time; block = b'x' * (int(sys.argv[1]) << 20); time.sleep(1)"


def _two_children(mib: int) -> list[str]:
    child = f'{sys.executable} -c "{HOLD}" {mib}'
    return ["sh", "-c", f"{child} & {child}; wait"]


def test_a_round_process_past_the_jobs_budget_fails_alone_and_one_under_it_passes(
    placement: cpus.CpuIsolation, spawn: Spawn, findings: dict[str, Any]
) -> None:
    """The grader's real round processes (the jail, ``python -I -m grading.sandbox.rounds``) in a held measurement.

    Each gets a budget of 300 MiB on its freezer group, beside the measuring worker's leaf: two children of
    200 MiB together fail that round as the process's own failure, and nothing else (the measuring process, a
    neighbour job's 50 MiB); the next round process, whose two children hold 50 MiB each, passes.
    """
    protections = detect()
    assert protections.level == "root", protections.missing()
    lease = SlotLease(1, True)

    def neighbour(link: Link) -> None:
        assert cpus.join_job("root", UID + 11)
        hold_and_report(link)

    quiet = spawn(ROOT, neighbour)
    assert quiet.receive() == "allocated"
    try:
        with tempfile.TemporaryDirectory(prefix="rounds-") as tmp, cpus.reserve("root", 0, UID + 10, wait=WAIT) as held:
            Path(tmp).chmod(0o711)
            start = starter(protections, Limits(job_memory_bytes=300 * MIB), [], lease.slots[0], Path(tmp), held)
            started = time.monotonic()
            with start({"entry": "grading.sandbox.rounds:echo"}, "answer") as process:
                group = process._memory.group
                assert group is not None and group.parent == SUB / f"measure-{UID + 10}"
                assert (process._memory.version, Group(group).read("memory.max")) == ("v2", str(300 * MIB))
                process.wait_ready(300)
                ready = time.monotonic() - started
                with pytest.raises(RoundError, match=r"went past the job's memory budget \(300 MiB in all\)") as over:
                    process.round({"run": _two_children(200)}, timeout=300)
                assert not over.value.timeout
                assert not Group(group).pids()  # every process of the round killed
                events = Group(group).keyed("memory.events")
            assert not group.exists()
            with start({"entry": "grading.sandbox.rounds:echo"}, "answer") as process:
                process.wait_ready(300)
                _, message = process.round({"run": _two_children(50), "payload": "fine"}, timeout=300)
            assert message.header["status"] == 0 and bytes(message.arrays["payload"][2]) == b"fine"
            assert _group_of(os.getpid()) == SUB / f"measure-{UID + 10}" / cgroup2.WORKER  # the measurement goes on
        findings.update(round_ready_s=round(ready, 1), round_memory_events=events, error=str(over.value)[:200])
        assert events.get("oom_group_kill", 0) >= 1 or events.get("oom_kill", 0) >= 1
        quiet.send("check")
        assert quiet.receive() == {"intact": True}
    finally:
        lease.release()
