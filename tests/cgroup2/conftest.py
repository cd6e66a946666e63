"""Fixtures for the cgroup v2 tests: the skip where cgroup v2 is not the only layout, groups, forked processes.

**Where they run.** Every test of this folder is skipped unless this machine mounts cgroup v2
and no cgroup v1 hierarchy with a controller (``/proc/self/mounts``), ``/sys/fs/cgroup`` is
that v2 hierarchy, and this process is root and may write its root group. That is the machine
of ``tools/cgroup2_vm.py`` (``make grading-test-cgroup2``); on this project's development
machines (v1 hierarchies) ``make test`` collects and skips them in milliseconds. On a real
v2-only host, as root, they would run: they enable the ``cpuset cpu memory pids`` controllers
in the root group's ``cgroup.subtree_control`` (and leave them), and make and remove groups
named ``cg2test-*`` under the root; ``test_placement.py`` runs the grader's own placement,
which makes ``course-grading`` under the root and removes it after each test with whatever
runs in it, so it runs only in that machine (``CGROUP2_VM=1``).

**Processes.** A test's processes are forked from the pytest process (``spawn``): a child
waits until the parent has moved it into its group, then runs a function, and talks to the
parent over two pipes in JSON lines (``Child``, ``Link``). Forking costs milliseconds where
starting a Python interpreter costs seconds (the machine emulates its CPU).

**Findings.** What a test saw that is worth a sentence (how far a frozen group's CPU time
grew, what the kernel did to a pinned process) goes into ``findings``; the session prints them
at the end and writes them to ``$OUT/cgroup2-findings.json`` when ``$OUT`` is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpuset", "cpu", "memory", "pids")
"""The controllers the grader's backend would use, enabled for the test groups."""
V1_CONTROLLERS = frozenset(
    {"cpuset", "cpu", "cpuacct", "blkio", "memory", "devices", "freezer", "net_cls", "perf_event", "net_prio"}
    | {"hugetlb", "pids", "rdma", "misc"}
)
HERE = Path(__file__).resolve().parent
WAIT = 30.0
"""Seconds to wait for anything the kernel or a child does (the emulated machine is slow)."""

_findings: dict[str, dict[str, Any]] = {}


def mounts(text: str) -> list[tuple[str, str, set[str]]]:
    """``(type, mount point, options)`` of each line of a mount table."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            found.append((fields[2], fields[1], set(fields[3].split(","))))
    return found


def v2_only(text: str) -> bool:
    """Whether a mount table has a ``cgroup2`` mount and no ``cgroup`` (v1) mount with a controller."""
    table = mounts(text)
    v1 = any(kind == "cgroup" and V1_CONTROLLERS & options for kind, _, options in table)
    return not v1 and any(kind == "cgroup2" for kind, _, _ in table)


def skip_reason(mount_table: Path = Path("/proc/self/mounts"), root: Path = CGROUP_ROOT) -> str | None:
    """Why this machine cannot run the tests of this folder, or None where it can."""
    try:
        text = mount_table.read_text()
    except OSError as error:
        return f"no mount table ({error})"
    if not v2_only(text):
        return "this machine does not mount only cgroup v2 (run them with make grading-test-cgroup2)"
    if not any(kind == "cgroup2" and where == str(root) for kind, where, _ in mounts(text)):
        return f"cgroup2 is not mounted at {root}"
    if os.geteuid() != 0 or not os.access(root / "cgroup.subtree_control", os.W_OK):
        return f"not root, or {root} is not writable"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this folder's tests where they cannot run (the hook sees every item: only this folder's)."""
    mine = [item for item in items if HERE in Path(item.path).resolve().parents]
    if not mine:
        return
    reason = skip_reason()
    if reason is not None:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The findings, printed and written to ``$OUT/cgroup2-findings.json``."""
    if not _findings:
        return
    terminalreporter.section("cgroup v2 findings")
    for test, found in _findings.items():
        terminalreporter.write_line(f"{test}: {json.dumps(found, sort_keys=True)}")
    out = os.environ.get("OUT")
    if out and Path(out).is_dir():
        Path(out, "cgroup2-findings.json").write_text(json.dumps(_findings, indent=1, sort_keys=True) + "\n")


@pytest.fixture
def findings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """This test's findings (a dict to fill), reported at the end of the session."""
    return _findings.setdefault(request.node.name, {})


class Group:
    """A cgroup v2 group: a directory of files, each read or written whole."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"Group({str(self.path)!r})"

    def read(self, name: str) -> str:
        """A file's text, stripped."""
        return (self.path / name).read_text().strip()

    def write(self, name: str, value: str) -> None:
        """Write ``value`` to a file in one ``write`` (the kernel acts on each; a refusal is an ``OSError``)."""
        with open(self.path / name, "w") as file:
            file.write(value)

    def has(self, name: str) -> bool:
        """Whether the group has the file ``name``."""
        return (self.path / name).is_file()

    def keyed(self, name: str) -> dict[str, int]:
        """A flat keyed file (``cgroup.events``, ``memory.events``, ``cpu.stat``, ...) as a dict."""
        values = {}
        for line in self.read(name).splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                values[key] = int(value)
        return values

    def child(self, name: str) -> Group:
        """A new group under this one."""
        path = self.path / name
        path.mkdir()
        return Group(path)

    def add(self, pid: int) -> None:
        """Move process ``pid`` into this group."""
        self.write("cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """The processes in this group (not in its children)."""
        return [int(pid) for pid in self.read("cgroup.procs").split()]

    def wait_for(self, name: str, key: str, value: int, timeout: float = WAIT) -> bool:
        """Wait until the keyed file ``name`` shows ``key`` at ``value``; whether it did."""
        deadline = time.monotonic() + timeout
        while self.keyed(name).get(key) != value:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def remove(self) -> None:
        """Kill whatever runs in this group and its children, then remove them all (children first)."""
        if not self.path.is_dir():
            return
        for sub in sorted((p for p in self.path.iterdir() if p.is_dir()), reverse=True):
            Group(sub).remove()
        with contextlib.suppress(OSError):
            self.write("cgroup.freeze", "0")
        with contextlib.suppress(OSError):
            self.write("cgroup.kill", "1")
        self.wait_for("cgroup.events", "populated", 0)
        with contextlib.suppress(OSError):
            self.write("cpuset.cpus.partition", "member")
        self.path.rmdir()


def enable_controllers(root: Path = CGROUP_ROOT) -> None:
    """``CONTROLLERS`` in the root group's ``cgroup.subtree_control`` (each written alone)."""
    for controller in CONTROLLERS:
        Group(root).write("cgroup.subtree_control", f"+{controller}")


def make_group(prefix: str = "cg2test-", root: Path = CGROUP_ROOT) -> Group:
    """A new group under the root, with a name of its own."""
    enable_controllers(root)
    return Group(Path(tempfile.mkdtemp(prefix=prefix, dir=root)))


@pytest.fixture
def delegated() -> Iterator[Group]:
    """A group under the root with ``+cpuset +cpu +memory +pids`` in its ``cgroup.subtree_control``.

    A test makes its groups (and puts its processes) below it; all of it is removed afterwards.
    """
    group = make_group()
    try:
        group.write("cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))
        yield group
    finally:
        group.remove()


class Link:
    """The child's end of its pipes to the parent: JSON messages each way."""

    def __init__(self, reader: int, writer: int) -> None:
        self._reader = os.fdopen(reader, "r")
        self._writer = writer

    def send(self, message: Any) -> None:
        """One message to the parent (one ``write`` under ``PIPE_BUF``: atomic beside other senders)."""
        os.write(self._writer, (json.dumps(message) + "\n").encode())

    def receive(self) -> Any:
        """The parent's next message (blocks)."""
        return json.loads(self._reader.readline())


def hold_and_report(link: Link, mib: int = 50) -> None:
    """A neighbour's work: hold ``mib`` MiB (each page written), say "allocated", when told whether it is intact."""
    data = b"\x5a" * (mib << 20)
    link.send("allocated")
    link.receive()
    link.send({"intact": data.count(0x5A) == len(data)})


class Child:
    """A forked process, as its parent sees it: messages, its exit status."""

    def __init__(self, pid: int, reader: int, writer: int) -> None:
        self.pid = pid
        self._reader = reader
        self._writer = writer
        self._buffer = b""
        self.status: int | None = None
        """The raw wait status, once reaped."""

    def send(self, message: Any) -> None:
        """One message to the child."""
        os.write(self._writer, (json.dumps(message) + "\n").encode())

    def receive(self, timeout: float = WAIT) -> Any:
        """The child's next message (or any of its descendants'); a ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._reader], [], [], left)[0]:
                raise TimeoutError(f"no message from process {self.pid} in {timeout:g} s")
            chunk = os.read(self._reader, 65536)
            if not chunk:
                raise EOFError(f"process {self.pid} and its children closed the pipe")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def alive(self) -> bool:
        """Whether the process has not exited (reaps it if it has)."""
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is None

    def wait(self, timeout: float = WAIT) -> int | None:
        """Its raw wait status once it exits, None if it still runs after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return self.status

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait()

    def close(self) -> None:
        """Close the parent's ends of the pipes."""
        for fd in (self._reader, self._writer):
            with contextlib.suppress(OSError):
                os.close(fd)


Spawn = Callable[[Group, Callable[[Link], None]], Child]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """``spawn(group, body)``: fork a process, move it into ``group``, then run ``body(link)`` in it.

    The child exits 0 when ``body`` returns, 70 when it raises (the traceback on stderr); it never
    returns into pytest. Whatever is left of the test's children is killed and reaped afterwards.
    """
    children: list[Child] = []

    def start(group: Group, body: Callable[[Link], None]) -> Child:
        to_child, from_parent = os.pipe()[::-1]
        to_parent, from_child = os.pipe()[::-1]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child
            status = 0
            try:
                os.close(to_child)
                os.close(from_child)
                link = Link(from_parent, to_parent)
                link.receive()  # in its group now
                body(link)
            except BaseException:
                traceback.print_exc()
                status = 70
            finally:
                os._exit(status)
        os.close(from_parent)
        os.close(to_parent)
        child = Child(pid, from_child, to_child)
        children.append(child)
        try:
            group.add(pid)
        except BaseException:
            child.kill()
            raise
        child.send("go")
        return child

    yield start
    for child in children:
        child.kill()
        child.close()
