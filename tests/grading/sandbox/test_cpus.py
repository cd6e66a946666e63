"""A measured test owns its CPU: no other job can run there, and whatever still does is accounted.

Real processes throughout: a pretend grading worker that joins its job's cgroup and drops to
its grading user (as ``grading.sandbox.worker`` does before it starts a kernel), a held CPU
(``cpus.reserve``), round processes in the jail, and an outside process that burns CPU on the
measured CPU as another user's work would. The slow end-to-end attacks (collusion, sabotage,
another grading run's load) are in ``tests/grading_end_to_end/test_cpu_attacks.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grading.sandbox import cgroups, cpus
from grading.sandbox.protections import GRADING_UID_BASE, Limits, Protections, SlotLease, detect
from grading.sandbox.rounds import Disturbed, RoundError, starter

# Real kernels, servers or processes for seconds: `make test` runs this file, `make test-fast` does not.
pytestmark = pytest.mark.slow

PROTECTIONS = detect()
ISOLATION = cpus.isolation(PROTECTIONS.level)
ECHO = "grading.sandbox.rounds:echo"
# The tests below read cgroup v1's files; on a host that mounts only cgroup v2 the placement is run by
# tests/cgroup2/test_placement.py (make grading-test-cgroup2).
V1 = ISOLATION.layout == "v1"
needs_cpuset = pytest.mark.skipif(ISOLATION.cpuset is None or not V1, reason="no cgroup v1 cpuset here (or not root)")
needs_pressure = pytest.mark.skipif(
    ISOLATION.pressure is None or ISOLATION.cpuset is None or not V1, reason="no cgroup v2 pressure or no cpuset here"
)


def test_what_a_measurement_lacks_is_named():
    gaps = cpus.CpuIsolation().missing()
    assert len(gaps) == 5
    assert any("no CPU of its own" in gap for gap in gaps) and any("normal priority" in gap for gap in gaps)
    assert any("no CPU share per job" in gap for gap in gaps) and any("pressure" in gap for gap in gaps)
    assert any("one after the other" in gap and "freezer" in gap for gap in gaps)
    everything = cpus.CpuIsolation(
        Path("/cpuset"), None, Path("/unified"), realtime=True, shares=Path("/cpu"), freezer=Path("/freezer")
    )
    assert Protections("root", cpu=everything).missing() == []
    assert "no CPU of its own" in Protections("root", cpu=cpus.CpuIsolation()).describe()


def test_cpu_lists_are_read_as_the_kernel_writes_them():
    assert cpus.parse_cpus("0-2,5,7-8\n") == {0, 1, 2, 5, 7, 8}
    assert cpus.parse_cpus("") == set()


# Mount tables as the kernel writes them (/proc/self/mounts), one per layout.
V1_MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,nosuid,nodev,noexec,relatime,xattr,name=systemd 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,nosuid,nodev,noexec,relatime,freezer 0 0
"""
HYBRID_MOUNTS = V1_MOUNTS + "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
V2_MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
"""
# an old systemd's named v1 hierarchy beside a full v2 one: no v1 controller, so v2
V2_WITH_NAMED_V1 = V2_MOUNTS + "cgroup /run/systemd/cgroup cgroup rw,nosuid,nodev,noexec,relatime,name=systemd 0 0\n"
NO_CGROUPS = "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\nsysfs /sys sysfs rw,relatime 0 0\n"


@pytest.mark.parametrize(
    ("table", "layout"),
    [
        (V1_MOUNTS, "v1"),
        (HYBRID_MOUNTS, "hybrid"),
        (V2_MOUNTS, "v2"),
        (V2_WITH_NAMED_V1, "v2"),
        (NO_CGROUPS, "none"),
        ("", "none"),
    ],
    ids=["v1", "hybrid", "v2", "v2-beside-named-v1", "no-cgroups", "empty-table"],
)
def test_the_cgroup_layout_is_read_from_the_mount_table(tmp_path, table, layout):
    mounts = tmp_path / "mounts"
    mounts.write_text(table)
    empty_sysfs = tmp_path / "sys-fs-cgroup"  # read only when no mount table is: here it would say "none"
    assert cgroups.detect_layout([mounts], empty_sysfs) == layout
    assert cgroups.detect_layout([tmp_path / "missing", mounts], empty_sysfs) == layout  # the first readable table
    assert (cgroups.backend(layout) is not None) == (layout != "none")
    assert isinstance(cgroups.backend(layout), cgroups.V2Layout) == (layout == "v2")


def test_the_mount_points_of_a_layout_are_found(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(HYBRID_MOUNTS.replace("/sys/fs/cgroup/freezer", "/sys/fs/cgroup/frozen\\040stuff"))
    assert cgroups.mount_point("cgroup", "cpuacct", [mounts]) == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert cgroups.mount_point("cgroup", "cpu", [mounts]) == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert cgroups.mount_point("cgroup", "freezer", [mounts]) == Path("/sys/fs/cgroup/frozen stuff")  # \\040: space
    assert cgroups.mount_point("cgroup2", tables=[mounts]) == Path("/sys/fs/cgroup/unified")
    assert cgroups.mount_point("cgroup", "memory", [mounts]) is None
    assert cgroups.mount_point("cgroup2", tables=[tmp_path / "missing"]) is None


@pytest.mark.parametrize(
    ("files", "layout"),
    [
        (["cgroup.controllers"], "v2"),
        (["cpu/cgroup.procs", "cpuset/cgroup.procs"], "v1"),
        (["cpuset/cgroup.procs", "unified/cgroup.controllers"], "hybrid"),
        (["systemd/cgroup.procs"], "none"),  # a named hierarchy holds no controller
        ([], "none"),
    ],
    ids=["v2", "v1", "hybrid", "named-only", "empty"],
)
def test_without_a_mount_table_the_layout_is_read_from_sysfs(tmp_path, files, layout):
    sysfs = tmp_path / "cgroup"
    for name in files:
        (sysfs / name).parent.mkdir(parents=True, exist_ok=True)
        (sysfs / name).write_text("")
    assert cgroups.detect_layout([tmp_path / "no-such-table"], sysfs) == layout


def test_this_hosts_layout_is_one_of_the_four_and_matches_what_isolation_found():
    layout = cgroups.detect_layout()
    assert layout in ("v1", "v2", "hybrid", "none")
    if ISOLATION.cpuset is not None or ISOLATION.shares is not None or ISOLATION.freezer is not None:
        assert layout in (("v1", "hybrid") if V1 else ("v2",))
    if ISOLATION.pressure is not None:
        assert layout in ("v2", "hybrid")


def test_the_v1_backend_writes_v1_files(tmp_path):
    """The v1 operations on fake cgroup folders (plain files; the kernel's own run in the tests below)."""
    v1 = cgroups.V1Layout()
    root = tmp_path / "cpuset"
    root.mkdir()
    (root / "cpuset.effective_cpus").write_text("0-3\n")
    (root / "cpuset.effective_mems").write_text("0\n")
    group = root / "course-grading"
    assert cgroups.make(group) and not cgroups.make(group)  # created now, then found
    for name in ("cpuset.cpus", "cpuset.mems", "cgroup.procs", "cpu.shares", "freezer.state"):
        (group / name).write_text("")
    v1.fill_cpuset(group, root)
    assert v1.cpus(group) == {0, 1, 2, 3} and (group / "cpuset.mems").read_text() == "0"
    v1.set_cpus(group, {3, 1, 2})
    assert (group / "cpuset.cpus").read_text() == "1,2,3"
    v1.fill_cpuset(group, root)  # set already: kept
    assert v1.cpus(group) == {1, 2, 3}
    v1.set_weight(group, 3)
    assert (group / "cpu.shares").read_text() == "3072"
    assert cgroups.empty(group)
    cgroups.add(group, 4242)
    assert not cgroups.empty(group) and (group / "cgroup.procs").read_text() == "4242"
    assert v1.freeze(group, True, timeout=0.1)  # a plain file reads back what was written at once
    assert (group / "freezer.state").read_text() == "FROZEN"
    assert not cgroups.rmdir_when_empty(group)  # not empty (files in it)
    assert cgroups.rmdir_when_empty(tmp_path / "gone")


# A grading worker's stand-in: joins job-<uid> as root, drops to the grading user (as a kernel
# runs), then answers each "look" line with its CPUs, which CPUs it can pin itself to, and
# whether it can leave its cgroup.
JOB = """
import json, os, sys
from grading.sandbox import cpus
uid = int(sys.argv[1])
assert cpus.join_job("root", uid)
os.setgid(uid)
os.setuid(uid)
every = sorted(cpus.parse_cpus(open(f"{sys.argv[2]}/cpuset.cpus").read()))
for line in sys.stdin:
    pin = {}
    for cpu in every:
        try:
            os.sched_setaffinity(0, {cpu})
            pin[cpu] = True
        except OSError:
            pin[cpu] = False
    os.sched_setaffinity(0, every)
    try:
        with open(f"{sys.argv[2]}/cgroup.procs", "w") as procs:
            procs.write(str(os.getpid()))
        escape = "left its cgroup"
    except OSError as error:
        escape = error.strerror
    print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)), "pin": pin, "escape": escape}), flush=True)
"""


def _look(job: subprocess.Popen) -> dict:
    assert job.stdin is not None and job.stdout is not None
    job.stdin.write("look\n")
    job.stdin.flush()
    return json.loads(job.stdout.readline())


@needs_cpuset
def test_a_held_cpu_is_out_of_every_other_jobs_reach():
    lease = SlotLease(3, root=True)
    measuring, other, third = (GRADING_UID_BASE + slot for slot in lease.slots)
    assert ISOLATION.cpuset is not None
    every = sorted(cpus.parse_cpus((ISOLATION.cpuset / "cpuset.effective_cpus").read_text()))
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(other), str(ISOLATION.cpuset)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        before = _look(job)
        assert before["escape"] == "Permission denied"  # a grading user cannot leave its job's cgroup
        with cpus.reserve(PROTECTIONS.level, lease.slots[0], measuring, wait=600) as held:
            assert held.held and held.realtime
            during = _look(job)
            assert held.cpu not in during["cpus"] and not during["pin"][str(held.cpu)]
            assert during["escape"] == "Permission denied"
            if len(every) == 2:  # a second measurement would leave no CPU to the rest: it does not get one
                with cpus.reserve(PROTECTIONS.level, lease.slots[2], third, wait=0.5) as second:
                    assert not second.held and not second.realtime
        after = _look(job)
        assert held.cpu in after["cpus"] and after["pin"][str(held.cpu)]  # given back when the measurement ends
    finally:
        job.kill()
        job.wait()
        cpus.leave_jobs(PROTECTIONS.level, [measuring, other, third])
        lease.release()


BURN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def _burn(seconds: float, cpu: int | None = None) -> list[str]:
    pin = f"import os; os.sched_setaffinity(0, {{{cpu}}})\n" if cpu is not None else ""
    return [sys.executable, "-c", pin + BURN, str(seconds)]


def start_intruder(seconds: float, cpu: int | None = None) -> subprocess.Popen:
    """Another user's process: at the root of every cgroup hierarchy (not the test's measurement), burning CPU."""
    roots = [h for h in (ISOLATION.cpuset, ISOLATION.cpuacct, ISOLATION.pressure, ISOLATION.shares) if h is not None]
    leave = "".join(f"open({str(root / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n" for root in roots)
    command = _burn(seconds, cpu)
    command[2] = "import os\n" + leave + command[2]
    return subprocess.Popen(command)


def _pressure(group: Path) -> dict[str, float]:
    """Seconds of CPU pressure of a cgroup v2 group: ``some`` (a task waited) and ``full`` (all waited)."""
    lines = (group / "cpu.pressure").read_text().splitlines()
    return {line.split()[0]: int(line.rsplit("total=", 1)[1]) / 1e6 for line in lines}


@pytest.fixture
def measurement():
    """``(start, reservation)``: round processes of one measurement on a held CPU, as a worker has them."""
    lease = SlotLease(1, PROTECTIONS.level == "root")
    slot = lease.slots[0]
    uid = GRADING_UID_BASE + slot if PROTECTIONS.level == "root" else None
    try:
        with (
            tempfile.TemporaryDirectory(prefix="cpus-test-") as tmp,
            cpus.reserve(PROTECTIONS.level, slot, uid, wait=600) as held,
        ):
            base = Path(tmp)
            base.chmod(0o711)

            def start(reservation: cpus.Reservation):
                return starter(PROTECTIONS, Limits(), [], slot, base, reservation)({"entry": ECHO}, "answer")

            yield start, held
    finally:
        lease.release()


@needs_pressure
def test_another_process_on_the_measured_cpu_disturbs_a_round_and_is_caught(measurement):
    """Without real-time priority (a machine that refuses it), an outside process pinned there takes half the CPU."""
    start, held = measurement
    plain = dataclasses.replace(held, realtime=False)
    intruder = start_intruder(20, held.cpu)  # root, outside any job: it may use that CPU
    try:
        with start(plain) as process:
            process.wait_ready(60)
            with pytest.raises(Disturbed) as caught:
                process.round({"run": _burn(0.6)}, timeout=60)
            assert caught.value.seconds is not None and caught.value.result is not None  # still fit for checking
            assert caught.value.disturbance.exact and caught.value.disturbance.share > 0.3
            with pytest.raises(Disturbed, match="no result within 1 s while other work took"):
                process.round({"run": _burn(3)}, timeout=1)  # out of time because of the intruder: not the learner's
    finally:
        intruder.kill()
        intruder.wait()


@needs_pressure
def test_a_measurements_own_processes_competing_are_no_disturbance(measurement):
    """Two busy processes of the round's own, after a sleep (others may use the idle CPU then): not disturbed."""
    start, held = measurement
    own = f"sleep 0.3; {shlex.join(_burn(0.4))} & {shlex.join(_burn(0.4))}; wait"
    with start(held) as process:
        process.wait_ready(60)
        before = _pressure(held.pressure)
        _, message = process.round({"run": ["sh", "-c", own], "payload": "done"}, timeout=60)
        after = _pressure(held.pressure)
    assert message.header["status"] == 0
    assert after["some"] - before["some"] > 0.2  # they did wait for each other
    assert not process.disturbance.substantial(), process.disturbance
    assert process.disturbance.lost < 0.15 * process.disturbance.seconds, process.disturbance


@needs_pressure
def test_round_processes_on_a_held_cpu_run_at_real_time_priority_and_an_intruder_barely_gets_in(measurement):
    start, held = measurement
    policy = [sys.executable, "-c", "import os; print(os.sched_getscheduler(0) == os.SCHED_RR)"]
    intruder = start_intruder(20)  # unpinned, ordinary priority: another user's work
    try:
        with start(held) as process:
            process.wait_ready(60)
            _, message = process.round({"run": policy}, timeout=60)
            assert message.header["output"].strip() == "True"  # and what it starts inherits it
            seconds, _ = process.round({"run": _burn(0.5)}, timeout=60)
    finally:
        intruder.kill()
        intruder.wait()
    assert not process.disturbance.substantial(), process.disturbance
    assert seconds == pytest.approx(process.disturbance.seconds - process.disturbance.lost, abs=0.05)


needs_freezer = pytest.mark.skipif(
    ISOLATION.freezer is None or ISOLATION.cpuset is None or not V1, reason="no cgroup v1 freezer or no cpuset here"
)


def _cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds of ``pids`` so far (those still alive)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@needs_freezer
def test_a_paused_round_process_and_all_it_started_use_no_cpu(measurement):
    """The idle side of an interleaved round is paused: a background burner it left cannot take the other's CPU."""
    start, held = measurement
    background = ["sh", "-c", f"{shlex.join(_burn(20))} >/dev/null 2>&1 &"]
    with start(held) as process:
        assert process.pausable
        process.wait_ready(60)
        process.round({"run": background}, timeout=60)  # returns at once; the burner runs on, in the jail
        group = process._group
        pids = [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
        assert len(pids) >= 3  # the jail, the round process, the burner (born inside the group)
        time.sleep(0.3)
        running = _cpu_seconds(pids)
        time.sleep(0.5)
        assert _cpu_seconds(pids) - running > 0.2  # it burns while the process runs
        process.pause()
        paused = _cpu_seconds(pids)
        time.sleep(0.5)
        assert _cpu_seconds(pids) - paused < 0.05  # and not at all while paused (a tick or two of rounding)
        with process.resumed():
            _, message = process.round({"payload": "awake"}, timeout=60)  # it answers once resumed
        assert bytes(message.arrays["payload"][2]) == b"awake"
        assert (group / "freezer.state").read_text().strip() == "FROZEN"  # paused again after the block
    assert not group.exists()  # killed (thawed first) and its group removed


def test_a_round_that_runs_out_of_time_alone_is_the_processes_own_failure(measurement):
    """No other work involved (a sleep): the timeout is a RoundError (the learner's), not Disturbed."""
    start, held = measurement
    with start(held) as process:
        process.wait_ready(60)
        with pytest.raises(RoundError) as caught:
            process.round({"sleep": 3}, timeout=1)
        assert caught.value.timeout


# A job's stand-in that burns CPU with ``count`` processes on one CPU for a while and prints their CPU seconds.
CROWD = """
import os, resource, sys, time
from grading.sandbox import cpus
uid, count, cpu = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
assert cpus.join_job("root", uid)
os.setgid(uid)
os.setuid(uid)
for _ in range(count):
    if os.fork() == 0:
        os.sched_setaffinity(0, {cpu})
        end = time.monotonic() + 3
        while time.monotonic() < end:
            pass
        os._exit(0)
for _ in range(count):
    os.wait()
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)
"""


@pytest.mark.skipif(
    ISOLATION.shares is None or ISOLATION.cpuset is None or not V1, reason="no cgroup v1 cpu controller here"
)
def test_a_job_with_many_processes_takes_no_more_than_its_share_of_a_cpu():
    """Twenty spinners in one job, one in another, on the same CPU: each job gets about half of what they get."""
    lease = SlotLease(2, root=True)
    crowd, single = (GRADING_UID_BASE + slot for slot in lease.slots)
    cpu = min(os.sched_getaffinity(0))
    try:
        jobs = [
            subprocess.Popen(
                [sys.executable, "-c", CROWD, str(uid), str(count), str(cpu)], stdout=subprocess.PIPE, text=True
            )
            for uid, count in ((crowd, 20), (single, 1))
        ]
        crowd_seconds, single_seconds = (float(job.communicate(timeout=120)[0]) for job in jobs)
    finally:
        cpus.leave_jobs(PROTECTIONS.level, [crowd, single])
        lease.release()
    assert single_seconds > 0.6 * crowd_seconds, (single_seconds, crowd_seconds)  # without: 1/20 of it


def test_without_cgroups_the_ledger_reads_proc_and_still_sees_an_intruder():
    """The userns and none levels: no held CPU, no pressure; /proc/stat against the round processes' schedstat."""
    cpu = max(os.sched_getaffinity(0))
    unheld = cpus.Reservation(cpu)  # what `reserve` gives below the root level
    intruder = start_intruder(20, cpu)
    try:
        with tempfile.TemporaryDirectory(prefix="cpus-test-") as tmp:
            start = starter(Protections("none"), Limits(), [], 0, Path(tmp), unheld)
            with start({"entry": ECHO}, "answer") as process:
                process.wait_ready(60)
                with pytest.raises(Disturbed) as caught:
                    process.round({"spin": 0.4}, timeout=60)  # in the round process: its waits are seen
    finally:
        intruder.kill()
        intruder.wait()
    disturbance = caught.value.disturbance
    assert not disturbance.exact and disturbance.share > 0.2, disturbance
