"""The sandbox: protections are probed and named, and the jail applies what it promises."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from grading.sandbox.cpus import CpuIsolation
from grading.sandbox.protections import GRADING_UID_BASE, Limits, Protections, SlotLease, detect, jail_argv

PROTECTIONS = detect()


def test_missing_protections_are_named():
    none = Protections("none").missing()
    assert any("network" in gap for gap in none) and any("course files" in gap for gap in none)
    assert any("separate user" in gap for gap in Protections("userns").missing())
    assert Protections("root").missing() == []
    assert Protections("none").describe().startswith("sandbox: none\n  missing protection:")


def test_detect_returns_a_level_that_works():
    assert PROTECTIONS.level in {"root", "userns", "none"}
    assert detect("none").level == "none"


def test_the_cgroup_layout_is_named_beside_the_level():
    assert PROTECTIONS.cgroups in {"v1", "v2", "hybrid", "none"}
    assert PROTECTIONS.describe().startswith(f"sandbox: {PROTECTIONS.level} (cgroups: {PROTECTIONS.cgroups})")


def test_a_cgroup_v2_only_host_names_what_its_subtree_lacks_and_nothing_it_has():
    """v2's gaps come from the grader's v2 subtree (``cgroup2.missing``); v1's wording is unchanged."""
    why = "this process is in the cgroup v2 group /system.slice/x.service, which is not delegated to it"
    gaps = Protections("root", cpu=CpuIsolation(layout="v2", why=why), cgroups="v2").missing()
    assert gaps[0] == f"no cgroup v2 subtree for the grader's groups: {why}"
    assert any("cgroup v2's cpuset controller in the grader's subtree" in gap for gap in gaps)
    assert any("cgroup v2's cpu controller" in gap for gap in gaps)
    base = Path("/sys/fs/cgroup")
    whole = CpuIsolation(base, None, base, True, base, base, layout="v2")
    assert Protections("root", cpu=whole, cgroups="v2").missing() == []
    v1 = Protections("root", cpu=CpuIsolation(), cgroups="v1").missing()
    assert any("needs root and cgroup v1's cpuset" in gap for gap in v1)
    assert not any("cgroup v2 subtree" in gap for gap in v1)


def _run_in_jail(protections: Protections, script: str, hide: list[Path]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        base.chmod(0o711)
        workdir = base / "work"
        workdir.mkdir(mode=0o700)
        connection = workdir / "kernel.json"
        connection.write_text("{}")
        limits = Limits(memory_bytes=2 << 30, processes=32, file_bytes=1 << 20)
        argv = jail_argv(protections, limits, workdir=workdir, connection_file=connection, hide=hide, slot=7)
        result = subprocess.run([*argv, "/bin/sh", "-c", script], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout


def test_limits_apply_at_every_level(tmp_path):
    out = _run_in_jail(Protections("none"), "ulimit -v; ulimit -f; grep NoNewPrivs /proc/self/status; env", [])
    lines = out.splitlines()
    assert lines[0] == str((2 << 30) // 1024) and lines[1] == str((1 << 20) // 512)
    assert lines[2].split() == ["NoNewPrivs:", "1"]
    assert "COURSE_QUICK=1" in out and "HOME=" in out and "SSH_AUTH_SOCK" not in out


@pytest.mark.skipif(not PROTECTIONS.namespaces, reason="no namespaces here: " + "; ".join(PROTECTIONS.missing()))
def test_namespaces_hide_course_files_and_cut_the_network(tmp_path):
    secret = tmp_path / "grading"
    secret.mkdir()
    (secret / "gradebook.db").write_text("grades")
    script = (
        f"ls -A {secret} | wc -l; id -u; "
        "cat /proc/net/dev | grep -c ':' ; "
        'python3 -c \'import socket; s = socket.create_server(("127.0.0.1", 0)); '
        'socket.create_connection(s.getsockname(), timeout=2); print("lo-up")\'; '
        "ps -e --no-headers | wc -l; "
        "touch /var/tmp/x && echo tmp-writable"
    )
    out = _run_in_jail(PROTECTIONS, script, [secret]).split()
    assert out[0] == "0"  # the course directory looks empty
    assert out[2] == "1"  # only the loopback interface exists
    assert out[3] == "lo-up"  # and it is up, for local servers (torch.distributed)
    assert int(out[4]) <= 4  # a fresh PID namespace: just this shell and its pipeline
    assert (secret / "gradebook.db").read_text() == "grades"
    if PROTECTIONS.level == "root":
        assert out[1] == str(GRADING_UID_BASE + 7)


@pytest.mark.skipif(PROTECTIONS.level != "root", reason="grading users are leased at the root level only")
def test_two_gradings_at_once_never_share_a_grading_user():
    first, second = SlotLease(2, root=True), SlotLease(2, root=True)
    try:
        assert len(set(first.uids()) | set(second.uids())) == 4
        assert all(uid >= GRADING_UID_BASE + 16 for uid in first.uids() + second.uids())
        first.release()
        third = SlotLease(2, root=True)  # may take the released slots, never the held ones
        assert not set(third.slots) & set(second.slots)
        third.release()
    finally:
        first.release()
        second.release()


@pytest.mark.slow_grading  # a cold Inductor build: 20 s and more
def test_torch_compile_runs_in_a_grading_kernel_within_the_limits():
    """Inductor's C++ build writes a precompiled header of about 150 MB: it needs a writable TMPDIR that big.

    Before, the kernel's temporary files went to a 16 MiB /var/tmp and the header to a 64 MiB
    file limit, so a compiled answer failed in grading ("No space left on device").
    """
    from nbformat.v4 import new_code_cell, new_notebook

    from grading.sandbox.workers import WorkerPool
    from grading.sanitize import with_grader_cells

    source = (
        "import torch\n"
        "f = torch.compile(lambda x: torch.sin(x) * 2 + 1)\n"
        "x = torch.linspace(0, 1, 64)\n"
        "assert torch.allclose(f(x), torch.sin(x) * 2 + 1)\n"
        "print('compiled')"
    )
    job = {"nb": with_grader_cells(new_notebook(cells=[new_code_cell(source)])), "files": None}
    [(_, result)] = list(WorkerPool(1, PROTECTIONS, Limits(cell_timeout=300), []).run([("nb", job)]))
    [cell] = [c for c in result["nb"]["cells"] if c["source"] == source]
    errors = [f"{o['ename']}: {o['evalue'][:500]}" for o in cell["outputs"] if o["output_type"] == "error"]
    assert not errors, errors
    assert "compiled" in "".join(o.get("text", "") for o in cell["outputs"])


ORPHAN_SCRIPT = """
import os, subprocess, sys, time
from pathlib import Path
from grading.sandbox import worker
from grading.sandbox.cpus import CpuIsolation
from grading.sandbox.protections import GRADING_UID_BASE, Limits, SlotLease, detect, jail_argv

def mine(uid):
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                found.append(int(entry))
        except OSError:
            pass
    return found

worker.adopt_orphans()
lease = SlotLease(1, root=True)
uid = GRADING_UID_BASE + lease.slots[0]
argv = jail_argv(detect(), Limits(), workdir=Path(sys.argv[1]), connection_file=None, hide=[], slot=lease.slots[0])
jailer = subprocess.Popen([*argv, "/bin/sleep", "60"])
deadline = time.monotonic() + 30
while not mine(uid) and time.monotonic() < deadline:
    time.sleep(0.02)
[kernel] = mine(uid)
jailer.kill()  # as a kernel manager's kill does: the unshare goes first, its child is orphaned
jailer.wait()
parent = "?"
while time.monotonic() < deadline:  # the orphan is killed with its parent (--kill-child) and adopted
    try:
        state, parent = open(f"/proc/{kernel}/stat").read().rsplit(")", 1)[1].split()[:2]
    except FileNotFoundError:
        parent = f"{parent} (and reaped by it)"
        break
    if state == "Z":
        break
    time.sleep(0.02)
print("parent", "us" if parent == str(os.getpid()) else parent)
worker._kill_user(uid)
print("left", mine(uid))
"""


@pytest.mark.skipif(PROTECTIONS.level != "root", reason="grading users exist at the root level only")
def test_a_killed_kernel_is_reaped_by_its_worker_before_the_slot_is_reused():
    """A zombie counts against its user's process limit until reaped, and the next notebook on
    the slot runs as that user: the worker adopts and reaps it (init did, on its own schedule)."""
    import sys

    with tempfile.TemporaryDirectory(prefix="orphan-test-") as workdir:  # in /tmp: the grading user can reach it
        result = subprocess.run(
            [sys.executable, "-c", ORPHAN_SCRIPT, workdir], capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["parent us", "left []"], result.stdout
