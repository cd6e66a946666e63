"""The cgroup v2 backend on fake cgroup trees (plain files in tmp_path): its file operations, where it finds the
grader's subtree, the job groups' CPUs and weight, and what it says is missing. The kernel's own run in
``tests/cgroup2`` (``make grading-test-cgroup2``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grading.sandbox import cgroup2, cgroups, cpus
from grading.sandbox.protections import Limits


def _files(group: Path, **files: str) -> Path:
    group.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (group / name.replace("__", ".")).write_text(text)
    return group


def _mounts(tmp_path: Path, mount: Path) -> list[Path]:
    table = tmp_path / "mounts"
    table.write_text(f"cgroup2 {mount} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n")
    return [table]


def test_the_v2_backend_writes_v2_files(tmp_path):
    v2 = cgroups.V2Layout()
    root = _files(tmp_path / "cg", cpuset__cpus__effective="0-3\n")
    group = _files(root / "course-grading", cpuset__cpus="\n", cpuset__cpus__effective="0-3\n", cgroup__freeze="0")
    assert v2.cpus(group) == {0, 1, 2, 3}  # nothing of its own: what it inherits
    v2.fill_cpuset(group, root)
    assert (group / "cpuset.cpus").read_text() == "0-3"
    v2.set_cpus(group, {3, 1})
    assert (group / "cpuset.cpus").read_text() == "1,3" and v2.cpus(group) == {1, 3}
    v2.fill_cpuset(group, root)  # set already: kept
    assert v2.cpus(group) == {1, 3}
    v2.copy_mems(group, root)  # nothing to copy: v2 inherits memory nodes
    assert not (group / "cpuset.mems").exists()
    v2.set_weight(group, 3)
    assert (group / "cpu.weight").read_text() == "300"
    v2.set_weight(group, 500)
    assert (group / "cpu.weight").read_text() == "10000"  # the kernel's largest
    (group / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert v2.freeze(group, True, timeout=0.05) and (group / "cgroup.freeze").read_text() == "1"
    assert not v2.freeze(group, False, timeout=0.05)  # the events never say "frozen 0": not thawed in time
    assert cgroups.populated(group) and not cgroups.populated(root / "gone")


def test_the_grader_s_subtree_is_found_where_it_may_make_groups_and_nowhere_else(tmp_path, monkeypatch):
    mount = _files(tmp_path / "cg", cgroup__controllers="cpuset cpu memory pids\n", cgroup__procs="")
    systemd = tmp_path / "run-systemd-system"
    v2 = cgroups.V2Layout(_mounts(tmp_path, mount), systemd)
    where = {"own": mount}
    monkeypatch.setattr(cgroups, "own_group", lambda hierarchy, controller: where["own"])
    assert v2.base() == (mount, "")  # the real root (no cgroup.type)
    assert v2.usable("cpuset") == mount and v2.usable("freezer") == mount and v2.usable("cpuacct") is None

    service = _files(mount / "system.slice" / "course.service", cgroup__type="domain", cgroup__procs="1\n")
    (service / "cgroup.subtree_control").write_text("")
    where["own"] = service
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no systemctl to ask
    assert v2.base() == (service, "")  # no systemd: a group it may write is its own
    systemd.mkdir()
    base, why = v2.base()
    assert base is None and "systemd-run --scope -p Delegate=yes" in why and str(service) in why
    assert v2.usable("cpu") is None

    where["own"] = mount / "course-grading" / "job-61001" / "worker"  # a worker inside a subtree made earlier
    assert v2.base() == (mount, "")
    where["own"] = service / "course-grader"  # moved into a delegated group's leaf by an earlier call
    assert v2.base() == (service, "")
    assert cgroups.V2Layout([tmp_path / "no-table"], systemd).base()[0] is None


def test_a_group_it_may_not_write_is_named_as_such_with_the_container_s_fix(tmp_path, monkeypatch):
    """A container's read-only /sys/fs/cgroup (root bypasses permission bits, so the check is faked here)."""
    mount = _files(tmp_path / "cg", cgroup__controllers="cpuset cpu memory pids\n", cgroup__type="domain")
    (mount / "cgroup.procs").write_text("1\n")
    (mount / "cgroup.subtree_control").write_text("")
    v2 = cgroups.V2Layout(_mounts(tmp_path, mount), tmp_path / "no-systemd")
    monkeypatch.setattr(cgroups, "own_group", lambda hierarchy, controller: mount)
    assert v2.base() == (mount, "")  # a container's namespace root it may write: its own
    writable = os.access
    monkeypatch.setattr(cgroups.os, "access", lambda path, mode: False if "cg" in str(path) else writable(path, mode))
    base, why = v2.base()
    assert base is None and "may not write" in why and "container" in why and str(mount) in why


def test_a_group_systemd_marks_as_delegated_is_the_grader_s(tmp_path):
    systemd = _files(tmp_path / "run-systemd-system")
    group = _files(tmp_path / "scope", cgroup__procs="", cgroup__subtree_control="")
    assert not cgroups.delegated(group, systemd)
    try:
        os.setxattr(group, "trusted.delegate", b"1")
    except OSError as error:
        pytest.skip(f"no trusted.* attributes here ({error})")
    assert cgroups.delegated(group, systemd)
    assert cgroups.delegated(group, tmp_path / "no-systemd")


def test_an_older_systemd_that_marks_nothing_is_asked_about_the_unit(tmp_path, monkeypatch):
    """Before systemd 251 a delegated group carries no attribute: ``systemctl show`` says whether its unit has
    ``Delegate=yes`` (here a fake ``systemctl`` that records each call); a group that is no scope or service's is
    never asked about, and without ``systemctl`` nothing is delegated."""
    calls = tmp_path / "calls"
    bin_dir = _files(tmp_path / "bin")
    fake = bin_dir / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncase "$*" in *run-u7.scope) echo yes;; *) echo no;; esac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    systemd = _files(tmp_path / "run-systemd-system")
    scope, service, slice_ = (
        _files(tmp_path / name, cgroup__procs="", cgroup__subtree_control="")
        for name in ("run-u7.scope", "cron.service", "user-1000.slice")
    )
    assert cgroups.delegated(scope, systemd)
    assert not cgroups.delegated(service, systemd)
    assert not cgroups.delegated(slice_, systemd)
    assert calls.read_text().splitlines() == [
        "show --property=Delegate --value -- run-u7.scope",
        "show --property=Delegate --value -- cron.service",
    ]
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert not cgroups.delegated(scope, systemd)


def _subtree(tmp_path: Path) -> Path:
    return _files(
        tmp_path / "course-grading",
        cgroup__subtree_control="cpuset cpu memory pids\n",
        cpuset__cpus="0-3\n",
        cpu__weight="100\n",
    )


def test_jobs_get_every_cpu_no_measurement_holds_and_stale_groups_go(tmp_path):
    root = _subtree(tmp_path)
    running = _files(root / "job-61001", cgroup__events="populated 1\n", cpuset__cpus="0-3\n")
    other = _files(root / "job-61002", cgroup__events="populated 1\n", cpuset__cpus="0-3\n")
    (root / "job-61003").mkdir()  # ended: no process (an empty folder here)
    holding = _files(root / "measure-61004", cgroup__events="populated 1\n", cpuset__cpus="3\n")
    (root / "measure-61005").mkdir()  # its worker died mid-measurement
    unheld = _files(root / "unheld-61006", cgroup__events="populated 1\n", cpuset__cpus="0-3\n")
    assert cgroup2.rebalance(root) == {3}
    for group in (running, other, unheld):
        assert (group / "cpuset.cpus").read_text() == "0,1,2"
    assert not (root / "job-61003").exists() and not (root / "measure-61005").exists()
    assert (root / "cpu.weight").read_text() == "200"  # one default weight per job
    assert (holding / "cpuset.cpus").read_text() == "3\n"
    _files(root / "measure-61007", cgroup__events="populated 1\n", cpuset__cpus="0-2\n")
    assert cgroup2.rebalance(root) == {0, 1, 2, 3}
    assert (running / "cpuset.cpus").read_text() == "0,1,2,3"  # never none: the jobs keep every CPU then


def test_a_job_s_process_bound_leaves_room_for_what_its_rlimit_counts():
    assert 2 * Limits().processes <= cgroup2.JOB_PIDS


def test_what_a_measurement_lacks_on_cgroup_v2_is_named_in_v2_terms():
    gaps = cpus.CpuIsolation(layout="v2", why="this process is in /system.slice/x.service ...").missing()
    assert len(gaps) == 6 and gaps[0].startswith("no cgroup v2 subtree for the grader's groups: this process")
    assert all("v1" not in gap for gap in gaps)
    assert any("cgroup v2's cpuset" in gap for gap in gaps) and any("RT_GROUP_SCHED" in gap for gap in gaps)
    assert any("cgroup v2's cpu controller" in gap for gap in gaps) and any("cgroup.freeze" in gap for gap in gaps)
    base = Path("/sys/fs/cgroup")
    everything = cpus.CpuIsolation(base, None, base, True, base, base, layout="v2")
    assert everything.missing() == []
    v1 = cpus.CpuIsolation().missing()  # v1 and hybrid hosts: the words they had
    assert len(v1) == 5 and "cgroup v1's cpuset" in v1[0]
