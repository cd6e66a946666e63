"""Objects a kernel creates in the operating system die with it and are never shared with another job.

A kernel left seven System V shared-memory segments of 1 GiB each on the host after its
batch (past the 6 GiB memory limit, until someone ran ``ipcrm``), and two kernels graded at
once shared the host's IPC namespace (a SysV semaphore coordinated an accomplice with a
measurement). Now each kernel has an IPC namespace of its own, whose System V limits are
capped, a devpts instance of its own, a private ``/dev/shm``, and no kernel keyring (keys
belong to a user id, not a namespace: the next job of the same grading user would read them).

Checked twice: a jailed process against the host's view (``/proc/sysvipc``, ``/dev/shm``,
the grading user's keyring), and two real submissions graded at once by ``course autograde
--jobs 2``, each trying to find the other's objects and leave its own behind.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grading.coursedir import Course
from grading.release import release
from grading.sandbox.protections import Limits, detect, jail_argv
from tests.support.submissions import cell_meta, graded, submit

PROTECTIONS = detect()
needs_namespaces = pytest.mark.skipif(
    not PROTECTIONS.namespaces, reason="no namespaces here: " + "; ".join(PROTECTIONS.missing())
)

# What a kernel tries: find objects under KEY (another job's), then leave its own behind.
# Prints one JSON line: what it found, and what it could create.
MAKE_OBJECTS = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
KEY, NAME = {key}, "course-ipc-{key}"
IPC_CREAT = 0o1000
found = {{
    "shm": libc.shmget(KEY, 0, 0) >= 0,
    "sem": libc.semget(KEY, 0, 0) >= 0,
    "msg": libc.msgget(KEY, 0) >= 0,
    "posix_shm": os.path.exists(f"/dev/shm/{{NAME}}"),
    "pts": sorted(os.listdir("/dev/pts")),
}}
made = {{
    "shm": libc.shmget(KEY, 1 << 20, IPC_CREAT | 0o666) >= 0,
    "sem": libc.semget(KEY, 1, IPC_CREAT | 0o666) >= 0,
    "msg": libc.msgget(KEY, IPC_CREAT | 0o666) >= 0,
    "gib_segments": sum(libc.shmget(KEY + i, 1 << 30, IPC_CREAT | 0o666) >= 0 for i in range(1, 8)),
    "key": libc.syscall(248, b"user", NAME.encode(), b"a message", 9, ctypes.c_int(-4)) > 0,  # add_key(@u)
}}
with open(f"/dev/shm/{{NAME}}", "w") as shared:
    shared.write("left behind")
made["posix_shm"] = True
print("IPC " + json.dumps({{"found": found, "made": made}}), flush=True)
"""


def _sysv_keys() -> set[int]:
    """The keys of every System V object in the host's IPC namespace."""
    keys = set()
    for kind in ("shm", "sem", "msg"):
        for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]:
            keys.add(int(line.split()[0]))
    return keys


def _host_has(key: int) -> list[str]:
    """What the host still holds of the objects made under ``key`` (SysV, /dev/shm, the grading user's keyring)."""
    left = [f"SysV key {k:#x}" for k in _sysv_keys() if key <= k <= key + 7]
    if Path(f"/dev/shm/course-ipc-{key}").exists():
        left.append(f"/dev/shm/course-ipc-{key}")
    return left


def test_the_host_check_finds_an_object_left_behind():
    """The check used below can fail: an object made on the host under a key is found, then removed."""
    key = 0x2300_0000 + secrets.randbelow(1 << 20) * 8
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(key, 4096, 0o1000 | 0o600)
    assert shmid >= 0
    try:
        assert _host_has(key) == [f"SysV key {key:#x}"]
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID
    assert _host_has(key) == []


def _jailed(script: str, slot: int, base: Path) -> subprocess.Popen:
    workdir = base / f"work-{slot}"
    workdir.mkdir(mode=0o700)
    argv = jail_argv(PROTECTIONS, Limits(), workdir=workdir, connection_file=None, hide=[], slot=slot)
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"
    return subprocess.Popen(
        [*argv, "/bin/sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _report(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    [line] = [line for line in out.splitlines() if line.startswith("IPC ")]
    return json.loads(line[4:])


@pytest.mark.slow
@needs_namespaces
def test_a_jailed_process_has_ipc_of_its_own_that_vanishes_with_it():
    key = 0x2300_0000 + secrets.randbelow(1 << 20) * 8
    hold = MAKE_OBJECTS.format(key=key) + "\nimport time; time.sleep(4)\n"  # alive while the second one looks
    with tempfile.TemporaryDirectory(prefix="ipc-test-") as tmp:  # in /tmp: the grading users can reach it
        base = Path(tmp)
        base.chmod(0o711)
        first = _jailed(hold, 7, base)
        time.sleep(1.5)
        second = _jailed(MAKE_OBJECTS.format(key=key), 8, base)
        seen_by_second = _report(second)
        first_report = _report(first)
    for report in (first_report, seen_by_second):
        assert report["found"] == {"shm": False, "sem": False, "msg": False, "posix_shm": False, "pts": ["ptmx"]}
        made = report["made"]
        assert made["shm"] and made["sem"] and made["msg"] and made["posix_shm"]  # small objects work as usual
        assert made["gib_segments"] == 0  # System V memory is capped (64 MiB in all)
        assert made["key"] is False  # add_key is refused
    assert _host_has(key) == []


# ----------------------------------------------------------------------------- graded for real


SOLUTION = "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n"
TEST = "assert answer() == 42, 'answer() should return 42'\n"


def _course(tmp_path: Path, answers: dict[str, str]) -> Course:
    """A one-exercise course, released, with one submission per ``answers`` entry (student -> answer cell)."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    source = new_notebook(
        cells=[
            new_code_cell(SOLUTION, metadata=cell_meta("answer", solution=True)),
            new_code_cell(TEST, metadata=cell_meta("answer_test", solution=False)),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(source, notebooks / "01_ipc.ipynb")
    course = Course(root=tmp_path / "course", notebooks=notebooks)
    course.root.mkdir()
    (course.root / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\nc.Execute.timeout = 60\n")
    release(course)
    released = nbformat.read(course.folder("release", "01_ipc") / "01_ipc.ipynb", as_version=4)
    for student, answer in answers.items():
        released.cells[0].source = answer
        submit(course, "01_ipc", student, released)
    return course


def _printed(course: Course, student: str) -> dict:
    text = "".join(o.get("text", "") for c in graded(course, "01_ipc", student).cells for o in c.get("outputs", []))
    [line] = [line for line in text.splitlines() if line.startswith("IPC ")]
    return json.loads(line[4:])


@pytest.mark.slow_grading  # a course graded by `course autograde`: about 20 s, a minute on a busy machine
@needs_namespaces
def test_graded_submissions_find_nothing_of_each_other_and_leave_nothing(tmp_path):
    """Three submissions on two workers: two run at once, and one worker's grading user runs two in a row."""
    key = 0x2300_0000 + secrets.randbelow(1 << 20) * 8
    attack = MAKE_OBJECTS.format(key=key) + "\nimport time\ntime.sleep(3)\n\n" + SOLUTION.replace("### ", "# ")
    course = _course(tmp_path, {name: attack for name in ("ann", "ben", "cho")})
    command = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--jobs", "2"]
    done = subprocess.run([*command, "--no-progress"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for student in ("ann", "ben", "cho"):
        report = _printed(course, student)
        assert report["found"] == {"shm": False, "sem": False, "msg": False, "posix_shm": False, "pts": ["ptmx"]}
        assert report["made"]["gib_segments"] == 0 and report["made"]["key"] is False
    assert _host_has(key) == []
    assert not [d for d in Path("/dev/shm").iterdir() if d.name.startswith("course-ipc-")]
    assert "3 submissions" in done.stdout  # graded, each with its point: the answers work as usual
    assert os.path.exists(course.root / "gradebook.db")
