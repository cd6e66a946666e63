"""Grading on a real Dask cluster: a scheduler and two single-thread workers on 127.0.0.1 (``support/dask_cluster.py``).

The cluster speaks mutual TLS with certificates made by ``course cluster-certs``, started with
the flags it prints. The same class is graded on this machine (``--jobs 2``) and on the
cluster, from identical copies: the gradebooks must agree cell by cell, on the compatibility
course (written answers, a data file, a late penalty, a missing notebook) and on the torch
fixture notebook (with a submission that snoops for files it must not see). Then security:
a client without the course's certificate, or with one of another authority, gets no
connection and runs nothing; a plain-TCP cluster reachable from other machines is refused
even through a loopback address, judged by the sockets its processes listen on (the
scheduler's HTTP server, a worker on every interface), not by what they advertise; and the
commands grading/README.md and ``course cluster-certs`` give, run as written, listen only
where they say (every listening socket of every process, read with psutil). Then the
faults: a measured test and the assignment's files travel with the task; a worker killed
mid-task loses nothing and counts nothing twice; a worker whose environment differs, an
unreachable scheduler, a stopped run and a coordinator killed with SIGKILL write nothing
they should not, and leave no kernel behind.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grading.autograde import autograde
from grading.cli import main
from grading.cluster import ClusterPool, differences, environment, pack_files, unpack_files
from grading.collect import collect
from grading.coursedir import Course, CourseError
from grading.jobs import Result, Task
from grading.measure import measured_tests
from grading.release import release
from grading.sandbox.protections import Limits, detect
from grading.sandbox.workers import WorkerPool
from grading.sanitize import with_grader_cells, without_grader_cells
from tests.fixtures.grading import compat_students
from tests.fixtures.grading import grading_cases as cases
from tests.support.dask_cluster import DASK, DaskCluster
from tests.support.paths import FIXTURES, ROOT
from tests.support.processes import free_port, marked_processes, stop_process, wait_for

# A real cluster in processes of its own: `make grading-test` (and CI) runs it, `make test` does not.
pytestmark = [
    pytest.mark.slow_grading,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]
MARK = "314.159"  # the slow submission's child process: `sleep 314.159`, found by its arguments
SLOW_CELL = f'import subprocess\nsubprocess.run(["sleep", "{MARK}"])'
PROTECTIONS = detect()


@pytest.fixture(scope="module")
def cluster():
    """Two workers over TLS, their local directories outside /tmp (so the jail's hiding them is what hides them)."""
    (ROOT / "build").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="test-dask-", dir=ROOT / "build"))
    try:
        assert main(["--course", str(folder), "cluster-certs", "--out", str(folder / "certs")]) == 0
        with DaskCluster(folder / "dask", workers=2, tls=folder / "certs") as started:
            yield started
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def compat(tmp_path_factory) -> tuple[Path, Path]:
    """The compatibility course released once (its folder) and its class's submissions (an inbox)."""
    root = tmp_path_factory.mktemp("compat")
    course = Course(root / "course")
    shutil.copytree(compat_students.COURSE, course.root)
    release(course, duedate=compat_students.DUE)
    compat_students.build(course.folder("release", compat_students.ASSIGNMENT), root / "inbox")
    return course.root, root / "inbox"


def _compat_class(compat: tuple[Path, Path], root: Path, *, slow: bool = False) -> Course:
    """A copy of the released course with the class collected; ``slow``: bob's problems stuck in a slow cell first."""
    course = Course(root)
    shutil.copytree(compat[0], course.root)
    inbox = root.parent / f"{root.name}-inbox"
    shutil.copytree(compat[1], inbox)
    if slow:
        path = inbox / "bob" / "ps1" / "problems.ipynb"
        nb = nbformat.read(path, as_version=4)
        nb.cells.insert(0, new_code_cell(SLOW_CELL))
        nbformat.write(nb, path)
    collect(course, inbox)
    return course


def _gradebook(course: Course) -> dict[tuple, object]:
    """Everything autograde records, keyed by (assignment, student, notebook, cell, what)."""
    found: dict[tuple, object] = {}
    with course.gradebook() as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                key = (assignment.name, sub.student.id)
                found[(*key, "timestamp")] = sub.timestamp
                for nb in sub.notebooks:
                    found[(*key, nb.name, "late penalty")] = nb.late_submission_penalty
                    for grade in nb.grades:
                        found[(*key, nb.name, grade.cell.name, "auto score")] = grade.auto_score
                        found[(*key, nb.name, grade.cell.name, "needs manual grade")] = grade.needs_manual_grade
                    for comment in nb.comments:
                        found[(*key, nb.name, comment.cell.name, "comment")] = comment.auto_comment
    return found


def _on_cluster(course: Course, cluster: DaskCluster, **kwargs):
    with ClusterPool(cluster.address, "auto", course.hidden_paths(), security=cluster.security) as pool:
        return autograde(course, pool=pool, progress=False, **kwargs)


def _notes(summary) -> dict[str, list[str]]:
    return {g.submission.student: g.notes for g in summary.graded}


def _assert_same(local: Course, remote: Course, here, there) -> None:
    ours, theirs = _gradebook(local), _gradebook(remote)
    differ = {k: (ours.get(k), theirs.get(k)) for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    assert ours and not differ, differ
    assert _notes(here) == _notes(there)
    assert not here.errors and not there.errors, there.line()


def test_the_compatibility_course_grades_the_same_on_the_cluster(cluster, compat, tmp_path):
    local, remote = _compat_class(compat, tmp_path / "local"), _compat_class(compat, tmp_path / "remote")
    here = autograde(local, jobs=2, progress=False)
    there = _on_cluster(remote, cluster)
    _assert_same(local, remote, here, there)
    for (student, _cell), words in compat_students.WRITTEN.items():  # the written answers came back
        assert words in (remote.folder("autograded", "ps1", student) / "essay.ipynb").read_text()
    assert (remote.folder("autograded", "ps1", "carol") / "helpers.py").is_file()  # her own file, copied here
    assert not any(remote.root.rglob(".*.grading"))  # every staging folder was put in place


def _torch_class(root: Path) -> Course:
    course = Course(root=root, notebooks=FIXTURES / "notebooks")
    release(course)
    return course


def _submit(course: Course, students: dict[str, bytes]) -> None:
    for student, data in students.items():
        folder = course.folder("submitted", cases.ASSIGNMENT, student)
        folder.mkdir(parents=True)
        (folder / f"{cases.ASSIGNMENT}.ipynb").write_bytes(data)


def test_the_torch_notebook_grades_the_same_and_the_sandbox_holds_on_the_workers(cluster, tmp_path):
    wanted = ("correct", "blank", "partial", "snoops_instructor_files")
    local, remote = _torch_class(tmp_path / "local"), Course(tmp_path / "remote", FIXTURES / "notebooks")
    shutil.copytree(local.root, remote.root)
    released = nbformat.read(local.folder("release", cases.ASSIGNMENT) / f"{cases.ASSIGNMENT}.ipynb", as_version=4)
    built = {name: data for name, data in cases.build_all(released).items() if name in wanted}
    _submit(local, built)
    _submit(remote, built)
    for name in cluster.workers:  # what another task could leave in a worker's local directory
        (cluster.folder / name / f"{cases.CANARY}-task.txt").write_text("another learner's files")
    here = autograde(local, jobs=2, progress=False)
    there = _on_cluster(remote, cluster)
    _assert_same(local, remote, here, there)
    scores = {g.submission.student: g.score for g in there.graded}
    assert scores == {name: cases.EXPECTED[name] for name in wanted}
    if PROTECTIONS.namespaces:
        nb = nbformat.read(remote.folder("autograded", cases.ASSIGNMENT, "snoops_instructor_files")
                           / f"{cases.ASSIGNMENT}.ipynb", as_version=4)  # fmt: skip
        snoop = "\n".join(str(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        assert "snooping done" in snoop and "READ" not in snoop and "WROTE" not in snoop, snoop


REFEREE = """
from grading.measure import Verdict


def referee(rounds):
    with rounds.start({"entry": "grading.sandbox.rounds:echo"}, "answer") as process:
        process.wait_ready(60)
        _, message = process.round({"payload": rounds.answers["answer"]}, timeout=30)
    assert "def f" in message.arrays["payload"][2].decode(), "no f in the answer"
    return Verdict(2, "measured outside: the answer defines f")
"""


def _meta(grade_id: str, *, solution: bool = False) -> dict:
    flags = {"grade_id": grade_id, "schema_version": 3, "task": False, "solution": solution, "locked": not solution}
    return {"nbgrader": {**flags, "grade": not solution, **({} if solution else {"points": 3})}}


MEASURED_CELL = "# course: measure echo_referee answer\nraise RuntimeError('ran in the kernel')"


def test_a_measured_test_and_the_assignments_files_travel_with_the_task(cluster, tmp_path):
    """The referee's source and the files go in the job; what a local worker leaves out is named the same."""
    (tmp_path / "echo_referee.py").write_text(REFEREE)
    files = tmp_path / "files"
    (files / "data").mkdir(parents=True)
    (files / "data" / "points.csv").write_text("x,y\n1,4\n")
    (files / "data" / "link.csv").symlink_to(files / "data" / "points.csv")
    (files / "data" / "big.bin").write_bytes(os.urandom(3 << 20))  # over 1 MiB: sent to the cluster ahead of its task
    folders = [str(cluster.folder / name) for name in cluster.workers]  # the workers' local directories
    nb = new_notebook(
        cells=[
            new_code_cell("def f():\n    return 1", metadata=_meta("answer", solution=True)),
            new_code_cell("print(open('data/points.csv').read().split()[1], len(open('data/big.bin', 'rb').read()))"),
            new_code_cell(f"import os\nprint([os.path.exists(f'{{d}}/course-grading') for d in {folders!r}])"),
            new_code_cell(MEASURED_CELL, metadata=_meta("measured")),
        ]
    )
    measured, _ = measured_tests(nb, tmp_path)
    task = Task(with_grader_cells(nb), files=str(files), measured=tuple(measured))
    with WorkerPool(1, PROTECTIONS, Limits(), []) as here:
        here.submit("nb", task)
        [(_, local)] = list(here.results())
    with ClusterPool(cluster.address, "auto", [], security=cluster.security) as pool:
        pool.submit("nb", task)
        [(task_id, remote)] = list(pool.results())
    assert task_id == "nb" and isinstance(remote, Result) and remote.nb is not None, remote
    assert isinstance(local, Result) and local.nb is not None, local
    graded = without_grader_cells(nbformat.from_dict(remote.nb), [])
    assert graded.cells[1].outputs[0]["text"] == f"1,4 {3 << 20}\n"  # the data files were there
    if PROTECTIONS.namespaces:  # the task's own folder and the other tasks' are hidden from the kernel
        assert graded.cells[2].outputs[0]["text"] == f"{[False] * len(folders)}\n"
    assert "measured outside" in graded.cells[3].outputs[0].get("text", ""), (graded.cells[3].outputs, remote.notes)
    assert graded.cells[3].outputs == without_grader_cells(nbformat.from_dict(local.nb), []).cells[3].outputs
    assert remote.notes == local.notes and "data/link.csv (a symbolic link)" in remote.notes[0]


def test_packed_files_cannot_land_outside_their_folder(tmp_path):
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../escape.txt", b"x")
    with pytest.raises(ValueError, match=r"escape\.txt"):
        unpack_files(buffer.getvalue(), tmp_path / "in")
    assert not (tmp_path / "escape.txt").exists()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.ipynb").write_text("{}")
    (tmp_path / "src" / "big.bin").write_bytes(b"x" * 2048)
    blob, skipped = pack_files(str(tmp_path / "src"), budget=1024)
    unpack_files(blob, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == [] and skipped[0].startswith("big.bin (over the")


def _ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 1:
        found.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
    return found


def test_a_worker_killed_mid_task_loses_nothing_and_counts_nothing_twice(cluster, compat, tmp_path):
    course = _compat_class(compat, tmp_path / "course", slow=True)
    killed: list[str] = []

    def kill_the_slow_tasks_worker() -> None:
        assert wait_for(lambda: bool(marked_processes(MARK)), 120), "the slow cell never started"
        running = _ancestors(marked_processes(MARK)[0])
        [name] = [n for n, p in cluster.workers.items() if p.pid in running]
        cluster.workers[name].kill()  # the machine died: its grading worker and kernel die with it
        killed.append(name)

    import threading

    killer = threading.Thread(target=kill_the_slow_tasks_worker)
    killer.start()
    try:
        summary = _on_cluster(course, cluster, limits=Limits(cell_timeout=6))
    finally:
        killer.join()
        for name in killed:  # the cluster keeps two workers for the tests after this one
            cluster.workers.pop(name).wait()
            cluster.add_worker(f"{name}-again")
    assert killed and wait_for(lambda: not marked_processes(MARK), 10)
    assert sorted(g.submission.student for g in summary.graded) == ["alice", "bob", "carol"]
    assert not summary.errors, summary.line()
    with course.gradebook() as gb:
        bob = gb.find_submission_notebook("problems", "ps1", "bob")
        assert len(gb.find_assignment("ps1").submissions) == 3
        assert any("timed out" in note or "time limit" in note for note in _notes(summary)["bob"]), summary.graded
        assert bob.score == 1.0  # as without the slow cell (compat_students): the later tests ran elsewhere
    cluster.wait_for(2)


def _nothing_graded(course: Course) -> None:
    assert not course.autograded.exists()
    with course.gradebook() as gb:
        assert not gb.find_assignment("ps1").submissions


def test_a_worker_whose_environment_differs_is_refused_before_anything_is_graded(cluster, compat, tmp_path, capsys):
    fake = tmp_path / "fake-site"
    (fake / "torch-0.0.1.dist-info").mkdir(parents=True)
    (fake / "torch-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n")
    cluster.add_worker("mismatched", env={"PYTHONPATH": str(fake)})
    try:
        cluster.wait_for(3)
        course = _compat_class(compat, tmp_path / "course")
        argv = ["--course", str(course.root), "autograde", "--scheduler", cluster.address, "--no-progress"]
        status = main([*argv, "--tls-certs", str(cluster.tls)])
        err = capsys.readouterr().err
    finally:
        cluster.stop_worker("mismatched")
    assert status == 1
    torch = environment()["torch"]
    assert f"refused: its environment differs from this machine's: torch 0.0.1 there, {torch} here" in err, err
    assert "Traceback" not in err and err.count("refused") == 1  # only that worker
    _nothing_graded(course)
    cluster.wait_for(2)


def test_environment_differences_are_named():
    here = environment()
    assert {"python", "torch", "nbgrader", "dask", "distributed", "grading source"} <= here.keys()
    edited = {**here, "grading source": "0" * 16}
    assert differences(here, edited) == [f"grading source {'0' * 16} there, {here['grading source']} here"]


def test_an_unreachable_scheduler_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    course = Course(tmp_path / "course")
    shutil.copytree(compat_students.COURSE, course.root)
    shutil.copytree(course.folder("source", "ps1"), course.folder("submitted", "ps1", "alice"))
    port = free_port()  # nothing listens there
    argv = ["--course", str(course.root), "autograde", "--no-progress"]
    assert main([*argv, "--scheduler", f"tcp://127.0.0.1:{port}", "--scheduler-timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 2 s" in err and "Traceback" not in err
    assert main([*argv, "--scheduler", str(tmp_path / "missing.json")]) == 1
    assert "cannot read the scheduler's address from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--scheduler", f"tcp://127.0.0.1:{port}", "--jobs", "4"])
    assert exit_.value.code == 2
    assert not course.autograded.exists() and not (course.root / "gradebook.db").exists()
    with DaskCluster(tmp_path / "empty", 0) as empty, pytest.raises(CourseError, match=r"has no worker after 0\.5 s"):
        ClusterPool(empty.address, timeout=0.5).__enter__()


def test_sigterm_cancels_the_tasks_kills_their_kernels_and_leaves_the_rest(cluster, compat, tmp_path):
    course = _compat_class(compat, tmp_path / "course", slow=True)
    argv = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv += ["--scheduler", cluster.address, "--tls-certs", str(cluster.tls)]
    run = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(lambda: bool(marked_processes(MARK)), 120), "the slow cell never started"
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130, err
    assert "interrupted; run it again to grade the rest" in err and "Traceback" not in err
    assert wait_for(lambda: not marked_processes(MARK), 10), "the cancelled task's kernel outlived the run"
    assert not course.folder("autograded", "ps1", "bob").exists(), "an unfinished submission must not look graded"
    again = ["--course", str(course.root), "autograde", "--no-progress", "--scheduler", cluster.address]
    again += ["--tls-certs", str(cluster.tls)]
    assert main([*again, "--cell-timeout", "2"]) == 0  # the next run grades what was left
    assert (course.folder("autograded", "ps1", "bob") / "problems.ipynb").is_file()


def _clients(cluster: DaskCluster) -> set[str]:
    """The clients the scheduler has now, asked through a client with the course's certificate."""
    from distributed import Client

    with Client(cluster.address, timeout=30, set_as_default=False, security=cluster.security) as client:
        return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.clients))) - {client.id}


def _intrude(address: str, marker: Path, security=None) -> BaseException:
    """Try to connect and make every worker write ``marker``; the exception that stopped it."""
    from distributed import Client

    try:
        with Client(address, timeout=10, set_as_default=False, security=security) as client:
            client.run(lambda: marker.write_text("ran code on a grading machine"))
    except Exception as error:  # whatever Dask raises: the test asserts nothing ran
        return error
    raise AssertionError(f"a client without the course's certificate connected to {address}")


def _handshake_without_certificate(address: str, ca: str) -> BaseException:
    """Below Dask: a TLS client that trusts the course's authority but offers no certificate of its own."""
    import socket
    import ssl

    host, port = address.split("://")[1].rsplit(":", 1)
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    try:
        with socket.create_connection((host, int(port)), timeout=10) as raw, context.wrap_socket(raw) as tls:
            tls.sendall(b"\0" * 8)
            tls.recv(1)  # TLS 1.3: the server's verdict on the missing certificate arrives after the handshake
    except (ssl.SSLError, ConnectionError) as error:
        return error
    raise AssertionError("the scheduler accepted a TLS connection without a client certificate")


def test_without_the_courses_certificate_nothing_connects_and_nothing_runs(cluster, tmp_path):
    """The scheduler asks every client for a certificate of the course's authority, and checks it."""
    from distributed.security import Security

    from grading.certificates import security

    before = _clients(cluster)
    marker = tmp_path / "intruder-was-here"
    other = tmp_path / "other-course"
    assert main(["--course", str(tmp_path), "cluster-certs", "--out", str(other)]) == 0
    ca = str(cluster.tls / "ca.pem")  # the course's authority is public: an intruder may have it
    mixed = Security(
        tls_ca_file=ca,
        tls_client_cert=str(other / "instructor.pem"),
        tls_client_key=str(other / "instructor-key.pem"),
        require_encryption=True,
    )
    address = cluster.address
    errors = {
        "no certificate": _intrude(address, marker),
        "plain tcp:// to the TLS port": _intrude(address.replace("tls://", "tcp://"), marker),
        "another authority's certificate": _intrude(address, marker, security(other)),
        "another authority's certificate, trusting the course's": _intrude(address, marker, mixed),
        "raw TLS, no certificate": _handshake_without_certificate(address, ca),
    }
    for what, error in errors.items():
        print(f"{what}: {type(error).__name__}: {error}")  # shown with pytest -s
    assert "does not match" in str(errors["another authority's certificate"])  # the scheduler's is not theirs
    refusals = [line for line in (cluster.folder / "scheduler.log").read_text().splitlines() if "TLS handshake" in line]
    print("the scheduler's side:", *refusals, sep="\n  ")
    assert any("certificate verify failed" in line for line in refusals)  # it checked theirs: not the course's
    assert any("did not return a certificate" in line.lower() for line in refusals), refusals  # the raw client
    assert not marker.exists() and _clients(cluster) == before  # no code ran, no client was ever admitted


def test_a_plain_tcp_cluster_reachable_from_other_machines_is_refused_even_through_loopback(compat, tmp_path, capsys):
    """A scheduler bound to every interface, reached as 127.0.0.1: its socket gives it away, whatever it advertises."""
    course = _compat_class(compat, tmp_path / "course")
    with DaskCluster(tmp_path / "open", workers=1, host="0.0.0.0") as open_cluster:
        port = open_cluster.address.rsplit(":", 1)[1]
        argv = ["--course", str(course.root), "autograde", "--no-progress", "--scheduler", f"tcp://127.0.0.1:{port}"]
        assert main(argv) == 1
    err = capsys.readouterr().err
    assert "refusing tcp://127.0.0.1" in err and "reachable from other machines" in err, err
    assert re.search(rf"the scheduler listens on (0\.0\.0\.0|\[::\]):{port}\b", err), err  # the bound address
    _nothing_graded(course)


# A cluster of this machine alone, as grading/README.md starts it ("The opt-out"), and as it said before.
LOOPBACK = [
    "dask scheduler --host 127.0.0.1 --port 8786 --dashboard-address 127.0.0.1:8787 --no-dashboard",
    "dask worker tcp://127.0.0.1:8786 --host 127.0.0.1 --dashboard-address 127.0.0.1:0 --nworkers 2 --nthreads 1 "
    "--no-dashboard",
]
DASK_DEFAULTS = [  # what the README's `--no-dashboard` advice left: an HTTP server and a worker on every interface
    "dask scheduler --host 127.0.0.1 --port 8786 --no-dashboard",
    "dask worker tcp://127.0.0.1:8786 --nthreads 1 --no-dashboard",
]


def _started(command: str, folder: Path, replace: dict[str, str]) -> subprocess.Popen:
    """``command`` (``dask ...``) started in ``folder`` with each key of ``replace`` replaced (free ports, paths)."""
    for documented, here in replace.items():
        command = command.replace(documented, here)
    argv = shlex.split(command)
    log = (folder / f"{argv[1]}.log").open("w")
    return subprocess.Popen([str(DASK), *argv[1:]], stdout=log, stderr=subprocess.STDOUT, cwd=folder)


def _listening(process: subprocess.Popen) -> dict[int, list[str]]:
    """``host:port`` of every listening TCP socket of ``process`` and of each process below it, by process id."""
    import psutil

    top = psutil.Process(process.pid)
    found = {}
    for each in [top, *top.children(recursive=True)]:
        sockets = [c.laddr for c in each.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        found[each.pid] = sorted(f"[{a.ip}]:{a.port}" if ":" in a.ip else f"{a.ip}:{a.port}" for a in sockets)
    return found


def _workers(address: str, count: int, security=None) -> dict[str, dict]:
    """The scheduler's record of its workers once ``count`` have joined."""
    from distributed import Client

    with Client(address, timeout=60, set_as_default=False, security=security) as client:
        client.wait_for_workers(count, timeout=120)
        return client.scheduler_info(n_workers=-1)["workers"]


def _stopped(processes: list[subprocess.Popen]) -> None:
    for process in reversed(processes):
        stop_process(process)


def test_the_documented_loopback_cluster_listens_on_loopback_only_and_grades(compat, tmp_path):
    readme = (ROOT / "grading" / "README.md").read_text(encoding="utf-8")
    assert all(f"$ .venv/bin/{command}\n" in readme for command in LOOPBACK)  # the commands tested are the README's
    course = _compat_class(compat, tmp_path / "course")
    folder = tmp_path / "dask"
    folder.mkdir()
    ports = {"8786": str(free_port()), "8787": str(free_port())}
    processes = []
    try:
        processes += [_started(command, folder, ports) for command in LOOPBACK]
        address = f"tcp://127.0.0.1:{ports['8786']}"
        assert len(_workers(address, 2)) == 2
        scheduler, workers = (_listening(p) for p in processes)
        assert scheduler == {processes[0].pid: sorted([f"127.0.0.1:{ports['8786']}", f"127.0.0.1:{ports['8787']}"])}
        sockets = [s for found in workers.values() for s in found]
        assert len(sockets) == 6, workers  # two nannies' comms, and two workers' comms and HTTP servers
        assert all(s.startswith("127.0.0.1:") for s in sockets), workers
        argv = ["--course", str(course.root), "autograde", "--no-progress", "--scheduler", address]
        assert main([*argv, "--student", "alice"]) == 0  # admitted: nothing of it is reachable from another machine
    finally:
        _stopped(processes)
    with course.gradebook() as gb:
        assert [s.student.id for s in gb.find_assignment("ps1").submissions] == ["alice"]


def test_a_loopback_cluster_with_a_socket_on_every_interface_is_refused(compat, tmp_path, capsys):
    """All it advertises is 127.0.0.1; its scheduler's HTTP server and its worker listen on every interface."""
    course = _compat_class(compat, tmp_path / "course")
    folder = tmp_path / "dask"
    folder.mkdir()
    port = str(free_port())
    processes = []
    try:
        processes += [_started(command, folder, {"8786": port}) for command in DASK_DEFAULTS]
        [worker] = _workers(f"tcp://127.0.0.1:{port}", 1)
        assert worker.startswith("tcp://127.0.0.1:")  # what it advertises: the old check's whole view
        argv = ["--course", str(course.root), "autograde", "--no-progress", "--scheduler", f"tcp://127.0.0.1:{port}"]
        assert main(argv) == 1
    finally:
        _stopped(processes)
    err = capsys.readouterr().err
    assert "refusing tcp://127.0.0.1" in err and "reachable from other machines" in err, err
    assert re.search(r"the scheduler listens on (0\.0\.0\.0|\[::\]):\d+", err), err  # its HTTP server
    assert re.search(rf"worker {re.escape(worker)} listens on (0\.0\.0\.0|\[::\]):{worker.rsplit(':', 1)[1]}\b", err)
    assert "--dashboard-address 127.0.0.1" in err  # the way out
    _nothing_graded(course)


def test_a_worker_that_joins_later_on_every_interface_is_refused_by_its_first_task(compat, tmp_path):
    """The cluster passed the check at connecting; then a worker without --host joined (advertising 127.0.0.1)."""
    course = _compat_class(compat, tmp_path / "course")
    refused = r"refused: it joined a plain-TCP cluster reachable from other machines \(at .*(0\.0\.0\.0|\[::\]):"
    with (
        DaskCluster(tmp_path / "dask", workers=1) as cluster,  # the README's loopback flags: admitted
        ClusterPool(cluster.address, "auto", course.hidden_paths(), timeout=60) as pool,
    ):
        cluster.stop_worker("worker0")
        late = _started(DASK_DEFAULTS[1], cluster.folder, {"tcp://127.0.0.1:8786": cluster.address})
        try:
            cluster.wait_for(1)
            with pytest.raises(CourseError, match=refused):
                autograde(course, pool=pool, progress=False)
        finally:
            stop_process(late)
    assert not list(course.autograded.glob("*/ps1"))  # no submission was graded there (nor put in place)


def test_the_documented_tls_commands_listen_where_they_say(tmp_path, capsys):
    """`course cluster-certs`'s commands, run: HTTP on 127.0.0.1 only; beyond it, only the workers' and nannies' TLS."""
    from distributed import Client

    from grading.certificates import security

    certs = tmp_path / "certs"
    assert main(["--course", str(tmp_path), "cluster-certs", "--out", str(certs), "--scheduler-host", "127.0.0.1"]) == 0
    printed = [line.strip() for line in capsys.readouterr().out.splitlines()]
    commands = [next(line for line in printed if line.startswith(f"dask {role} ")) for role in ("scheduler", "worker")]
    folder = tmp_path / "dask"
    folder.mkdir()
    ports = {"8786": str(free_port()), "8787": str(free_port()), "CORES": "1", "/etc/course-grading/tls": str(certs)}
    processes = []
    try:
        processes += [_started(command, folder, ports) for command in commands]
        address = f"tls://127.0.0.1:{ports['8786']}"
        [(worker, info)] = _workers(address, 1, security(certs)).items()
        scheduler, workers = (_listening(p) for p in processes)
        assert scheduler == {processes[0].pid: sorted([f"127.0.0.1:{ports['8786']}", f"127.0.0.1:{ports['8787']}"])}
        tls_ports = {worker.rsplit(":", 1)[1], info["nanny"].rsplit(":", 1)[1]}
        for pid, sockets in workers.items():
            for socket_address in sockets:
                host, port = socket_address.rsplit(":", 1)
                assert host == "127.0.0.1" or (host in {"0.0.0.0", "[::]"} and port in tls_ports), (pid, sockets)
        assert {s.rsplit(":", 1)[1] for found in workers.values() for s in found} >= tls_ports
        from grading.cluster import dask_listening

        with Client(address, timeout=60, set_as_default=False, security=security(certs)) as client:
            reported = client.run(dask_listening)[worker]  # what the check reads: the worker's and its nanny's
        assert reported == sorted(s for found in workers.values() for s in found)
    finally:
        _stopped(processes)


def _running_below(pids: set[int]) -> list[str]:
    """The live (not zombie) processes below ``pids`` other than idle grading workers, by command line.

    A Dask worker thread keeps its grading worker process for its next task, as a local pool
    keeps its workers; anything else below a Dask worker (a kernel, what it started, a
    grading worker with children) is a job still running.
    """
    found, parents = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in pids:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if fields[0] != "Z" and _ancestors(int(entry.name)) & pids:
            found[int(entry.name)] = command
            parents[int(entry.name)] = int(fields[1])
    busy = set(parents.values())
    return [
        f"{pid}: {command}" for pid, command in found.items() if "grading.sandbox.worker" not in command or pid in busy
    ]


def test_the_coordinator_killed_with_sigkill_leaves_no_kernel_and_nothing_half_written(cluster, compat, tmp_path):
    course = _compat_class(compat, tmp_path / "course", slow=True)
    argv = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--no-progress"]
    argv += ["--scheduler", cluster.address, "--tls-certs", str(cluster.tls)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "coordinator.log"
    with log.open("w") as output:
        run = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        assert wait_for(lambda: bool(marked_processes(MARK)), 120), f"no slow cell started: {log.read_text()}"
        run.kill()  # SIGKILL: the coordinator gets no chance to cancel anything itself
        run.wait(timeout=30)
    finally:
        run.kill()
    workers = {process.pid for process in cluster.workers.values()}
    assert wait_for(lambda: not _running_below(workers), 30), f"left running on a worker: {_running_below(workers)}"
    assert not marked_processes(MARK)
    finished = [p for p in course.autograded.glob("*/ps1")] if course.autograded.exists() else []
    assert "bob" not in {p.parent.name for p in finished}, "an unfinished submission must not look graded"
    with course.gradebook() as gb:
        for folder in finished:  # a folder in place is a whole grading: every notebook, its grades recorded
            for name in ("problems", "essay"):
                if (course.folder("submitted", "ps1", folder.parent.name) / f"{name}.ipynb").exists():
                    nbformat.validate(nbformat.read(folder / f"{name}.ipynb", as_version=4))
            grades = gb.find_submission_notebook("problems", "ps1", folder.parent.name).grades
            assert all(g.auto_score is not None for g in grades if g.cell.name.endswith("tests")), folder
    again = ["--course", str(course.root), "autograde", "--no-progress", "--scheduler", cluster.address]
    assert main([*again, "--tls-certs", str(cluster.tls), "--cell-timeout", "2"]) == 0  # grades the rest
    assert {p.parent.name for p in course.autograded.glob("*/ps1")} == {"alice", "bob", "carol"}
    assert not any(course.root.rglob(".*.grading"))
    with course.gradebook() as gb:
        assert gb.find_submission_notebook("problems", "ps1", "bob").score == 1.0  # as in the worker-killed test
    cluster.wait_for(2)
