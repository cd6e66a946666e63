"""A job's memory budget (``grading.sandbox.memory``): the counters read, the files written, every process killed.

The file writes are checked against fake group folders; the kill and the OOM count against a
real cgroup v1 memory group where this machine has one (root, a writable ``memory``
hierarchy); the executor's part with real kernels (``slow``), whose children together go
past a small budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grading.sandbox.memory import (
    MemoryBudget,
    MemorySupport,
    apply_v1,
    apply_v2,
    budget,
    enable_v2,
    oom_count,
    parse_events,
    parse_oom_control,
    support,
)
from grading.sandbox.protections import Limits, Protections

MiB = 1 << 20
V1 = support("root").hierarchy == "v1"
needs_v1 = pytest.mark.skipif(not V1, reason="needs root and a writable cgroup v1 memory hierarchy")


def _files(folder: Path, contents: dict[str, str]) -> Path:
    """A fake cgroup folder: each entry of ``contents`` a file with its text."""
    folder.mkdir(exist_ok=True)
    for name, text in contents.items():
        (folder / name).write_text(text)
    return folder


# ----------------------------------------------------------------------------- counters


def test_the_oom_kill_count_of_v1_and_v2():
    assert parse_oom_control("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    assert parse_oom_control("oom_kill_disable 0\nunder_oom 1\n") is None  # Linux before 4.13
    assert parse_events("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n") == 1
    assert parse_events("low 0\nmax 4\noom 1\noom_kill 0\noom_group_kill 1\n") == 1  # the whole group went
    assert parse_events("max 40\noom 0\noom_kill 0\n") == 0  # the limit was reached and memory reclaimed: no kill


def test_a_v1_kernel_without_an_oom_kill_count_reads_the_memsw_failure_count(tmp_path):
    new = _files(tmp_path / "new", {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"})
    assert oom_count(new, "v1") == 2
    old = _files(tmp_path / "old", {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"})
    _files(old, {"memory.memsw.failcnt": "5\n", "memory.failcnt": "9\n"})
    assert oom_count(old, "v1") == 5
    (old / "memory.memsw.failcnt").unlink()  # no swap accounting: the memory failure count
    assert oom_count(old, "v1") == 9
    v2 = _files(tmp_path / "v2", {"memory.events": "max 3\noom 1\noom_kill 1\n"})
    assert oom_count(v2, "v2") == 1


# ----------------------------------------------------------------------------- files written


def test_v1_limits_memory_and_memory_plus_swap(tmp_path):
    group = _files(tmp_path / "kernel", {"memory.limit_in_bytes": "max", "memory.memsw.limit_in_bytes": "max"})
    apply_v1(group, 512 * MiB)
    assert (group / "memory.limit_in_bytes").read_text() == str(512 * MiB)
    assert (group / "memory.memsw.limit_in_bytes").read_text() == str(512 * MiB)
    no_swap = _files(tmp_path / "no-swap", {"memory.limit_in_bytes": "max"})
    apply_v1(no_swap, 64 * MiB)
    assert (no_swap / "memory.limit_in_bytes").read_text() == str(64 * MiB)
    assert not (no_swap / "memory.memsw.limit_in_bytes").exists()


def test_v2_limits_memory_forbids_swap_and_kills_the_group_as_one(tmp_path):
    group = _files(tmp_path / "kernel", {"memory.max": "max", "memory.swap.max": "max", "memory.oom.group": "0"})
    apply_v2(group, 8 << 30)
    assert (group / "memory.max").read_text() == str(8 << 30)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (group / "memory.oom.group").read_text() == "1"
    bare = _files(tmp_path / "bare", {"memory.max": "max"})  # no swap accounting, a kernel before 4.19
    apply_v2(bare, 1 << 30)
    assert sorted(path.name for path in bare.iterdir()) == ["memory.max"]


def test_v2_enables_the_memory_controller_only_where_it_is_missing(tmp_path):
    root = _files(tmp_path / "root", {"cgroup.subtree_control": "cpu memory pids\n"})
    parent = _files(root / "course-grading", {"cgroup.subtree_control": "\n"})
    enable_v2(root, parent)
    assert (root / "cgroup.subtree_control").read_text() == "cpu memory pids\n"  # left as it was
    assert (parent / "cgroup.subtree_control").read_text() == "+memory"


# ----------------------------------------------------------------------------- where it applies


def test_no_budget_below_root_or_at_zero_and_the_gap_is_named():
    for kernel_budget in (budget("none", 512 * MiB), budget("userns", 512 * MiB), budget("root", 0)):
        assert not kernel_budget.active and not kernel_budget.killed() and kernel_budget.kill_all()
        kernel_budget.join()
        kernel_budget.attach(os.getpid())
        kernel_budget.close()
    assert support("none") == MemorySupport("", "needs the root level")
    gap = "no memory budget per job (needs the root level): a kernel's processes together can use the machine's memory"
    for level in ("none", "userns"):
        assert [line for line in Protections(level).missing() if "memory budget" in line] == [
            gap + "; each process is still held to its address-space limit (--memory-gb)"
        ]
    assert Protections("root", memory=MemorySupport("v1")).missing() == []
    assert Protections("root").missing() == []  # not probed: nothing said
    why = "this process is in the cgroup v2 group /sys/fs/cgroup/system.slice/x.service, below the root"
    [line] = Protections("root", memory=MemorySupport("", why)).missing()
    assert line.startswith(f"no memory budget per job ({why})")
    assert Limits().job_memory_bytes == 8 << 30 and Limits().job_memory_bytes > Limits().memory_bytes


# ----------------------------------------------------------------------------- cgroup v2, on a fake hierarchy


@pytest.fixture
def fake_v2(tmp_path, monkeypatch):
    """A cgroup v2 hierarchy in a folder, this process in its root, no v1 hierarchy: (root, the kernel's group)."""
    from grading.sandbox import memory

    root = _files(tmp_path / "v2", {"cgroup.controllers": "cpu memory pids\n", "cgroup.subtree_control": "cpu\n"})
    parent = _files(root / "course-grading", {"cgroup.subtree_control": "\n"})
    kernel = _files(
        parent / "kernel-1-0",
        {"cgroup.controllers": "memory\n", "cgroup.procs": "", "cgroup.kill": "", "memory.max": "max"}
        | {"memory.swap.max": "max", "memory.oom.group": "0", "memory.events": "max 0\noom 0\noom_kill 0\n"},
    )
    monkeypatch.setattr(memory, "mount_point", lambda fstype, controller="": root if fstype == "cgroup2" else None)
    monkeypatch.setattr(memory, "own_group", lambda hierarchy, controller: root)
    monkeypatch.setattr(memory, "_root", lambda: True)
    return root, kernel


def test_on_v2_the_budget_is_set_on_the_cpu_accounts_group(fake_v2):
    """A process is in one v2 group: the budget goes on the kernel's group that ``cputime`` made, never a second."""
    root, kernel = fake_v2
    assert support("root") == MemorySupport("v2")
    shared = budget("root", 1 << 30, shared=kernel)
    assert (shared.group, shared.version, shared.owned, shared.limit) == (kernel, "v2", False, 1 << 30)
    assert (root / "cgroup.subtree_control").read_text() == "+memory"  # the root's, then course-grading's
    assert (root / "course-grading" / "cgroup.subtree_control").read_text() == "+memory"
    assert [(kernel / name).read_text() for name in ("memory.max", "memory.swap.max", "memory.oom.group")] == [
        str(1 << 30),
        "0",
        "1",
    ]
    shared.join()  # the CPU account's join moves the kernel there: nothing to write here
    assert (kernel / "cgroup.procs").read_text() == ""
    assert not shared.killed()
    (kernel / "memory.events").write_text("max 9\noom 1\noom_kill 0\noom_group_kill 1\n")
    assert shared.killed() and shared.kill_all()
    assert (kernel / "cgroup.kill").read_text() == "1"
    shared.close()
    assert kernel.is_dir()  # the CPU account removes it


def test_on_v2_no_budget_below_the_root_or_in_another_group(fake_v2, monkeypatch):
    from grading.sandbox import memory

    root, kernel = fake_v2
    elsewhere = _files(root / "elsewhere", {"cgroup.controllers": ""})
    assert not budget("root", 1 << 30, shared=elsewhere).active  # not a kernel group of course-grading's
    assert not budget("root", 1 << 30, shared=None).active
    (root / "cgroup.type").write_text("domain\n")  # a container's namespace root: it holds its processes
    assert "below the root" in support("root").why and not budget("root", 1 << 30, shared=kernel).active
    (root / "cgroup.type").unlink()
    monkeypatch.setattr(memory, "own_group", lambda hierarchy, controller: root / "system.slice" / "course.service")
    gap = support("root")
    assert gap.hierarchy == "" and "system.slice/course.service" in gap.why and "delegated subtree" in gap.why
    assert not budget("root", 1 << 30, shared=kernel).active
    assert (kernel / "memory.max").read_text() == "max"  # nothing was written


# ----------------------------------------------------------------------------- a real v1 group

# Three children, each forks a grandchild in a new session; all sleep; the first prints the pids.
TREE = """
import os, sys, time
pids = []
for _ in range(3):
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
        os._exit(0)
    pids.append(child)
print(" ".join(map(str, pids)), flush=True)
time.sleep(60)
"""


def _procs(group: Path) -> list[str]:
    return (group / "cgroup.procs").read_text().split()


@needs_v1
def test_a_real_v1_group_holds_its_limit_and_every_process_is_killed():
    kernel_budget = budget("root", 64 * MiB)
    group = kernel_budget.group
    assert group is not None and kernel_budget.version == "v1" and kernel_budget.active
    assert (group / "memory.limit_in_bytes").read_text().strip() == str(64 * MiB)
    if (group / "memory.memsw.limit_in_bytes").exists():
        assert (group / "memory.memsw.limit_in_bytes").read_text().strip() == str(64 * MiB)
    process = subprocess.Popen(
        [sys.executable, "-S", "-c", TREE], stdout=subprocess.PIPE, text=True, preexec_fn=kernel_budget.join
    )
    try:
        kernel_budget.attach(process.pid)
        assert kernel_budget.group == group  # it joined
        assert process.stdout is not None and len(process.stdout.readline().split()) == 3
        deadline = time.monotonic() + 5
        while len(_procs(group)) < 7 and time.monotonic() < deadline:  # 1 + 3 children + 3 grandchildren
            time.sleep(0.02)
        assert len(_procs(group)) == 7 and not kernel_budget.killed()
        assert kernel_budget.kill_all()
        assert _procs(group) == []
        assert process.wait(timeout=5) == -9
    finally:
        process.kill()
        process.wait()
        kernel_budget.close()
    assert not group.exists() and kernel_budget.group is None


@needs_v1
def test_past_the_budget_the_oom_count_rises():
    kernel_budget = budget("root", 48 * MiB)
    hog = "b = bytearray(96 << 20)\nb[::4096] = b'x' * len(range(0, len(b), 4096))\nprint('survived')"
    try:
        done = subprocess.run(
            [sys.executable, "-S", "-c", hog], capture_output=True, text=True, preexec_fn=kernel_budget.join, timeout=30
        )
        assert done.returncode == -9 and "survived" not in done.stdout
        assert kernel_budget.killed()
    finally:
        kernel_budget.close()


@needs_v1
def test_a_kernel_that_did_not_join_has_no_budget():
    kernel_budget = budget("root", 64 * MiB)
    group = kernel_budget.group
    assert group is not None
    process = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(5)"])  # no preexec join
    try:
        kernel_budget.attach(process.pid)
        assert not kernel_budget.active and not group.exists()
    finally:
        process.kill()
        process.wait()


# ----------------------------------------------------------------------------- the executor, real kernels

# A cell that forks three children that each hold (and touch) CHILD MiB, then waits for them.
CHILDREN = """
import os, time
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        block = bytearray({size} << 20)
        block[::4096] = b"x" * len(range(0, len(block), 4096))
        time.sleep(3)
        os._exit(0)
    children.append(pid)
statuses = [os.waitpid(pid, 0)[1] for pid in children]
print("survived", sum(status == 0 for status in statuses))
"""


def _kernels(tmp_path: Path, limit: int) -> Callable:
    """Kernels for ``execute`` without the jail, each with a memory budget of ``limit`` bytes (0: none)."""
    from grading.sandbox.execute import JailedKernelManager

    def new_kernel() -> JailedKernelManager:
        km = JailedKernelManager()
        workdir = Path(tempfile.mkdtemp(dir=tmp_path))
        km.configure([], workdir, workdir / "kernel.log", memory=budget("root", limit))
        if limit and not km.memory_budget.active:
            pytest.skip("needs root and a writable cgroup memory hierarchy")
        return km

    return new_kernel


def _printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o["output_type"] == "stream")


@pytest.mark.slow
@needs_v1
@pytest.mark.parametrize(
    "cell",
    [
        CHILDREN.format(size=120),  # the OOM killer takes one child; the watchdog the rest
        "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'b = bytearray(400 << 20)'])\nprint('ended')",
        "hog = bytearray(400 << 20)",  # the kernel itself is the largest: it dies, and the executor says why
    ],
    ids=["children", "a child killed, the cell ends", "the kernel itself"],
)
def test_a_cell_past_the_budget_loses_its_kernel_with_a_clear_message(tmp_path, cell):
    nb = new_notebook(cells=[new_code_cell("x = 41"), new_code_cell(cell), new_code_cell("print('after', x + 1)")])
    notes: list[str] = []
    from grading.sandbox.execute import execute

    execute(nb, _kernels(tmp_path, 256 * MiB), Limits(cell_timeout=20, notebook_timeout=120), notes)
    error = nb.cells[1].outputs[-1]
    words = "the kernel and the processes it started went past the job's memory budget (256 MiB in all)"
    assert error["ename"] == "KernelDied" and error["evalue"] == words, nb.cells[1].outputs
    assert notes == [f"Cell code cell 2: {words}."]
    assert _printed(nb.cells[2]) == "after 42\n"  # a fresh kernel replayed the first cell and went on


@pytest.mark.slow
def test_without_a_budget_the_same_children_all_survive(tmp_path):
    """The wrong defence: each child is within any per-process limit, so only a budget for all of them stops them."""
    nb = new_notebook(cells=[new_code_cell(CHILDREN.format(size=120))])
    notes: list[str] = []
    from grading.sandbox.execute import execute

    execute(nb, _kernels(tmp_path, 0), Limits(cell_timeout=20, notebook_timeout=120), notes)
    assert _printed(nb.cells[0]) == "survived 3\n" and notes == [], (nb.cells[0].outputs, notes)


def test_a_budget_with_no_group_never_reports_a_kill():
    assert not MemoryBudget().killed() and MemoryBudget().kill_all()


# ----------------------------------------------------------------------------- a v2-only host: the grader's subtree


def test_on_a_v2_only_host_the_budget_goes_on_a_kernel_group_of_the_graders_subtree(fake_v2, monkeypatch):
    """Beside a worker's leaf in its job group (which gives it +memory), or in R; nowhere else; why, where none."""
    from grading.sandbox import memory

    root, _ = fake_v2
    subtree = root / "course-grading"
    (subtree / "cgroup.subtree_control").write_text("cpu cpuset memory pids\n")
    job = _files(subtree / "job-61001", {"cgroup.controllers": "cpu cpuset memory pids\n"})
    (job / "cgroup.subtree_control").write_text("memory\n")  # as cgroup2.job leaves it
    kernel = _files(
        job / "kernel-1-0",
        {"cgroup.controllers": "memory\n", "cgroup.procs": "", "memory.max": "max", "memory.oom.group": "0"}
        | {"memory.events": "max 0\noom 0\noom_kill 0\n"},
    )
    monkeypatch.setattr(memory, "detect_layout", lambda: "v2")
    monkeypatch.setattr(memory, "subtree", lambda create=True: (subtree, ""))
    assert support("root") == MemorySupport("v2")
    shared = budget("root", 1 << 30, shared=kernel)
    assert (shared.group, shared.version, shared.owned) == (kernel, "v2", False)
    assert [(kernel / name).read_text() for name in ("memory.max", "memory.oom.group")] == [str(1 << 30), "1"]
    assert (job / "cgroup.subtree_control").read_text() == "memory\n"  # enabled already: not written again
    elsewhere = _files(root / "kernel-2-0", {"cgroup.controllers": "memory\n"})
    assert not budget("root", 1 << 30, shared=elsewhere).active  # not in the grader's subtree
    why = "this process is in the cgroup v2 group /sys/fs/cgroup/system.slice/x.service, which is not delegated"
    monkeypatch.setattr(memory, "subtree", lambda create=True: (None, why))
    assert support("root") == MemorySupport("", why)
    assert not budget("root", 1 << 30, shared=kernel).active


def test_on_a_v2_only_host_a_round_process_gets_its_budget_on_its_group_in_the_measurement(fake_v2, monkeypatch):
    """A round group sits in ``measure-<uid>`` beside the measuring worker's leaf: the budget goes on it; a group
    under another group of the subtree (a job's leaf, say) gets none."""
    from grading.sandbox import memory

    root, _ = fake_v2
    subtree = root / "course-grading"
    measure = _files(subtree / "measure-61001", {"cgroup.controllers": "cpu cpuset memory pids\n"})
    (measure / "cgroup.subtree_control").write_text("memory\n")  # as cgroup2.measurement leaves it
    files = {"cgroup.controllers": "memory\n", "cgroup.procs": "", "memory.max": "max", "memory.oom.group": "0"}
    files |= {"memory.swap.max": "max", "memory.events": "max 0\noom 0\noom_kill 0\n"}
    round_group = _files(measure / "round-abc", files)
    monkeypatch.setattr(memory, "detect_layout", lambda: "v2")
    monkeypatch.setattr(memory, "subtree", lambda create=True: (subtree, ""))
    shared = budget("root", 300 << 20, shared=round_group)
    assert (shared.group, shared.version, shared.owned) == (round_group, "v2", False)
    assert [(round_group / name).read_text() for name in ("memory.max", "memory.swap.max", "memory.oom.group")] == [
        str(300 << 20),
        "0",
        "1",
    ]
    (subtree / "job-61002" / "worker").mkdir(parents=True)
    deeper = _files(subtree / "job-61002" / "worker" / "round-x", files)
    assert not budget("root", 300 << 20, shared=deeper).active
