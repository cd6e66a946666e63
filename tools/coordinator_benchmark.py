"""Benchmark: how many notebooks a second the coordinator of ``course autograde --scheduler`` can handle.

Run with ``make coordinator-benchmark`` (or ``.venv/bin/python tools/coordinator_benchmark.py``).
On a cluster the notebooks run on the workers, but one process, the coordinator (the
``course`` command on the instructor's machine), does the serial part of every notebook:
whatever it prepares, sends, receives, records in the gradebook and writes to
``autograded/``. That part caps the whole cluster, however many machines it has. This
measures it:

* a synthetic class of ``--students`` submissions (2,000 by default) of one small notebook
  each (two answers, two tests, one hidden, a written answer), cycling through four kinds of
  learner: right, one answer wrong, blank, right but late (the course's late penalty takes
  every point), released into a course directory by ``course release``;
* a local Dask cluster (a scheduler and ``--workers`` one-thread workers on 127.0.0.1) whose
  workers are cheap: ``tools/cheap_grading_worker.py`` replaces the jailed kernel by ``exec``
  (everything else a worker does is the grader's own code), so the coordinator is the
  bottleneck and nearly everything measured is its work;
* the coordinator, in a process of its own, grading the class through
  ``grading.autograde.autograde`` with a ``ClusterPool`` (its imports and the connection made
  before the clocks start), for each ``--versions`` (``before``: the grader and
  ``course_utils`` at commit ``--before``, taken with ``git archive``, workers and coordinator
  alike; ``after``: a copy of this checkout's) and each ``--databases`` (``sqlite``: the course's ``gradebook.db``;
  ``postgresql``: a server started here, as the tests start it, on a loopback port).

It prints, per run, the coordinator's CPU seconds (its process time: every thread, user and
system, so a busy machine changes it little) per notebook and the notebooks a CPU second
that makes, the wall time and notebooks a second of wall time, and the load average before
and after; with ``--phases``, where an ``after`` coordinator spent its CPU. It then checks
every run's gradebook cell by cell (auto score, needs-manual-grade, automatic comment,
late penalty) against the grades the class was built to get, and against each other, and
exits 1 on any difference. A measurement, not a test: nothing is asserted about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO = Path(__file__).resolve().parents[1]
BEFORE = "f42dc3c"  # the last commit before the coordinator's work moved to the workers (issue 24)
ASSIGNMENT, NOTEBOOK = "ps1", "warmup"
DUE = "2026-01-10 17:00:00 UTC"
ON_TIME, LATE = "2026-01-09 12:00:00.000000 UTC", "2026-01-12 18:00:00.000000 UTC"
CONFIG = """c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "coordinator-benchmark"
c.Execute.timeout = 30
c.LateSubmissionPlugin.penalty_method = "zero"  # a late submission scores 0: the penalty is the whole score
"""
KINDS = ("right", "wrong", "blank", "late")


def _meta(grade_id: str, *, grade: bool, solution: bool, points: float | None = None) -> dict:
    meta = {"grade_id": grade_id, "grade": grade, "solution": solution, "locked": not solution, "schema_version": 3}
    return {"nbgrader": {**meta, **({"points": points} if grade else {})}}


def source_notebook() -> nbformat.NotebookNode:
    """The instructor's notebook: two answers with their tests (one with hidden tests) and a written answer."""
    return new_notebook(
        cells=[
            new_markdown_cell("# Warm-up\n\nTwo small functions and one sentence."),
            new_code_cell(
                "def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION",
                metadata=_meta("add", grade=False, solution=True),
            ),
            new_code_cell(
                "assert add(1, 2) == 3, 'add(1, 2) should be 3'\n"
                "### BEGIN HIDDEN TESTS\nassert add(-1, 1) == 0, 'add(-1, 1) should be 0'\n### END HIDDEN TESTS",
                metadata=_meta("test_add", grade=True, solution=False, points=2),
            ),
            new_code_cell(
                "def mean(xs):\n    ### BEGIN SOLUTION\n    return sum(xs) / len(xs)\n    ### END SOLUTION",
                metadata=_meta("mean", grade=False, solution=True),
            ),
            new_code_cell(
                "assert mean([1, 2, 3]) == 2, 'the mean of 1, 2, 3 is 2'\nprint('mean works')",
                metadata=_meta("test_mean", grade=True, solution=False, points=1),
            ),
            new_markdown_cell(
                "When is `mean` undefined?\n\n### BEGIN SOLUTION\nFor an empty list.\n### END SOLUTION",
                metadata=_meta("why", grade=True, solution=True, points=1),
            ),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def _answered(released: nbformat.NotebookNode, kind: str) -> str:
    """A learner's submission of ``kind`` (``KINDS``), from the student version."""
    nb = nbformat.from_dict(json.loads(json.dumps(released)))
    if kind != "blank":
        answers = {
            "add": "def add(a, b):\n    return a - b" if kind == "wrong" else "def add(a, b):\n    return a + b",
            "mean": "def mean(xs):\n    return sum(xs) / len(xs)",
            "why": "When the list is empty: len(xs) is 0.",
        }
        for cell in nb.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if grade_id in answers:
                cell.source = answers[grade_id]
    return nbformat.writes(nb)


def expected_grades(students: int) -> dict[tuple, object]:
    """What the gradebook must say, by construction (``grades``' keys)."""
    found: dict[tuple, object] = {}
    for index in range(students):
        student, kind = f"s{index:05d}", KINDS[index % len(KINDS)]
        right = kind in {"right", "late"}
        scores = {
            "test_add": 2.0 if right else 0.0,
            "test_mean": 0.0 if kind == "blank" else 1.0,
            "why": 0.0 if kind == "blank" else None,  # an answered written answer waits for a person
        }
        for cell, score in scores.items():
            found[(student, cell, "auto score")] = score
            found[(student, cell, "needs manual grade")] = score is None
        for cell in ("add", "mean", "why"):
            found[(student, cell, "comment")] = "No response." if kind == "blank" else None
        found[(student, "late penalty")] = sum(s for s in scores.values() if s) if kind == "late" else None
    return found


def grades(course) -> dict[tuple, object]:
    """Everything autograde records for each submission: scores, flags, comments, late penalty."""
    found: dict[tuple, object] = {}
    with course.gradebook() as gb:
        for sub in gb.find_assignment(ASSIGNMENT).submissions:
            for nb in sub.notebooks:
                found[(sub.student.id, "late penalty")] = nb.late_submission_penalty
                for grade in nb.grades:
                    found[(sub.student.id, grade.cell.name, "auto score")] = grade.auto_score
                    found[(sub.student.id, grade.cell.name, "needs manual grade")] = grade.needs_manual_grade
                for comment in nb.comments:
                    found[(sub.student.id, comment.cell.name, "comment")] = comment.auto_comment
    return found


def build_class(root: Path, students: int) -> None:
    """The course directory (source, config) and ``students`` submissions in ``submitted/``; not yet released."""
    from grading.coursedir import Course
    from grading.release import release

    source = root / "source" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(source_notebook(), source / f"{NOTEBOOK}.ipynb")
    (root / "nbgrader_config.py").write_text(CONFIG)
    scratch = root.parent / "release-scratch"
    shutil.copytree(root, scratch)
    course = Course(scratch)
    release(course, duedate=DUE)
    released = nbformat.read(course.folder("release", ASSIGNMENT) / f"{NOTEBOOK}.ipynb", as_version=4)
    texts = {kind: _answered(released, kind) for kind in KINDS}
    for index in range(students):
        kind = KINDS[index % len(KINDS)]
        folder = root / "submitted" / f"s{index:05d}" / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{NOTEBOOK}.ipynb").write_text(texts[kind])
        (folder / "timestamp.txt").write_text(LATE if kind == "late" else ON_TIME)
    shutil.rmtree(scratch)


def _code(version: str, before: str, tmp: Path) -> Path:
    """A snapshot of ``grading/`` and ``course_utils/`` for ``version``: this checkout's, or commit ``before``'s.

    Coordinator and workers import both from the snapshot (``PYTHONPATH``), so their source
    hashes agree even while someone edits the checkout during the run.
    """
    folder = tmp / f"grader-{version}"
    if not folder.exists():
        folder.mkdir()
        if version == "after":
            for package in ("grading", "course_utils"):
                shutil.copytree(REPO / package, folder / package, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", before, "grading", "course_utils"],
                                     capture_output=True)  # fmt: skip
            archive.check_returncode()
            subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def _coordinator(spec: dict) -> dict:
    """The coordinator's run (in a process of its own, the grader of the version under test on its path)."""
    import cProfile
    import resource
    import threading

    from grading.autograde import autograde, find_submissions
    from grading.cluster import ClusterPool
    from grading.coursedir import Course

    course = Course(Path(spec["course"]))
    find_submissions(course)  # the imports (nbgrader, SQLAlchemy, the database driver) before the clocks start
    options = {}
    if spec.get("tls"):
        from grading.certificates import security

        options["security"] = security(Path(spec["tls"]))
    started = time.process_time()
    with ClusterPool(spec["address"], "auto", course.hidden_paths(), **options) as pool:
        connect = time.process_time() - started
        profile = cProfile.Profile() if spec.get("profile") else None
        cpu, wall = time.process_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        summary = autograde(course, pool=pool, progress=False)
        if profile is not None:
            profile.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profile is not None:
        profile.dump_stats(spec["profile"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "notebooks": len(summary.graded),
        "errors": len(summary.errors),
        "cpu": cpu,
        "wall": wall,
        "connect_cpu": connect,
        "process_cpu": usage.ru_utime + usage.ru_stime,
        "threads": threading.active_count(),
        "phases": dict(getattr(summary, "coordinator_phases", {}) or {}),
    }


def _run(version: str, code: Path, database: str, template: Path, tmp: Path, args, server) -> dict:
    """One version on one database: a fresh copy of the class, a fresh cluster, the coordinator timed."""
    from grading.coursedir import Course
    from grading.release import release
    from tests.support.dask_cluster import DaskCluster

    root = tmp / f"{version}-{database}"
    shutil.copytree(template, root)
    if database == "postgresql":
        url = server.create_database(f"{version}_{int(time.time() * 1000)}")
        with (root / "nbgrader_config.py").open("a") as config:
            config.write(f"c.CourseDirectory.db_url = {url!r}\n")
    course = Course(root)
    release(course, duedate=DUE)  # the gradebook's assignment (the release itself is not measured)
    env = {"PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    preload = ["--preload", str(REPO / "tools" / "cheap_grading_worker.py")]
    with DaskCluster(tmp / f"dask-{version}-{database}", workers=args.workers, env=env, worker_args=preload,
                     tls=Path(args.tls_folder) if args.tls and version == "after" else None) as cluster:  # fmt: skip
        spec = {"course": str(root), "address": cluster.address}
        if args.profile:  # the coordinator's main thread, for pstats
            spec["profile"] = str(Path(args.profile).resolve().with_suffix(f".{version}-{database}.pstats"))
        if args.tls and version == "after":
            spec["tls"] = args.tls_folder
        load = os.getloadavg()[0]
        result = subprocess.run(
            [sys.executable, __file__, "--coordinator", json.dumps(spec)],
            env={**os.environ, **env},
            cwd=root,  # nbgrader puts the working directory on sys.path: not this checkout's
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            print(result.stdout[-3000:], result.stderr[-6000:], sep="\n")
            for log in sorted(cluster.folder.glob("*.log")):
                print(f"--- {log.name}", *log.read_text().splitlines()[-15:], sep="\n")
            raise SystemExit(f"the {version} coordinator on {database} failed ({result.returncode})")
        measured = json.loads(result.stdout.strip().splitlines()[-1])
    measured.update(version=version, database=database, load_before=load, load_after=os.getloadavg()[0])
    measured["grades"] = grades(course)
    return measured


def _report(run: dict, phases: bool) -> None:
    notebooks, cpu, wall = run["notebooks"], run["cpu"], run["wall"]
    print(
        f"{run['version']:6} {run['database']:10} {notebooks:5d} notebooks: coordinator {cpu:7.1f} CPU s = "
        f"{1000 * cpu / notebooks:6.1f} ms a notebook = {notebooks / cpu:6.1f} notebooks a CPU second; "
        f"wall {wall:6.1f} s = {notebooks / wall:5.1f} notebooks/s; load {run['load_before']:.1f} -> "
        f"{run['load_after']:.1f}; {run['errors']} grader errors"
    )
    if phases and run["phases"]:
        parts = ", ".join(f"{name} {1000 * seconds / notebooks:.2f}" for name, seconds in run["phases"].items())
        print(f"       CPU ms a notebook by phase: {parts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=2000, help="submissions of one notebook each (2000)")
    parser.add_argument("--workers", type=int, default=2, help="cheap one-thread Dask workers (2)")
    parser.add_argument("--databases", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument(
        "--versions", default="after", help="comma-separated: before, after (before: about an hour on 2 cores)"
    )
    parser.add_argument("--before", default=BEFORE, help=f"the commit whose grader is 'before' ({BEFORE})")
    parser.add_argument("--tls", action="store_true", help="the 'after' cluster over mutual TLS (course cluster-certs)")
    parser.add_argument("--phases", action="store_true", help="print where the 'after' coordinator spent its CPU")
    parser.add_argument("--profile", help="cProfile each coordinator's main thread into PROFILE.<version>-<db>.pstats")
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)  # the child process's own run
    args = parser.parse_args()
    if args.coordinator:
        print(json.dumps(_coordinator(json.loads(args.coordinator))))
        return

    # a kill (`timeout`, a closed session) stops it as Ctrl-C does: the cluster and the server stop on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.path.insert(0, str(REPO))  # this checkout's grading, and the test suite's helpers (tests.support)
    databases = [d for d in args.databases.split(",") if d]
    versions = [v for v in args.versions.split(",") if v]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if "before" in versions:
        print(f"warning: the 'before' coordinator ({args.before}) spends about 15 times the CPU per notebook: "
              f"on 2 cores its runs took 49 min (SQLite) and 61 min (PostgreSQL) for 2,000 notebooks")  # fmt: skip
    print(f"class: {args.students} submissions of one notebook; {args.workers} cheap Dask workers; "
          f"before = {args.before}, after = this checkout")  # fmt: skip
    runs = []
    with tempfile.TemporaryDirectory(prefix="coordinator-benchmark-") as name:
        tmp = Path(name)
        tmp.chmod(0o711)  # the PostgreSQL server runs as nobody, in a folder below this one
        build_class(tmp / "template", args.students)
        server = None
        if "postgresql" in databases:
            from tests.support.postgres_server import MISSING, PostgresServer

            if MISSING:
                raise SystemExit(MISSING)
            server = PostgresServer(tmp / "postgres")
            server.start()
        if args.tls:
            from grading.certificates import make_certificates

            args.tls_folder = str(make_certificates(tmp / "certs", "coordinator-benchmark").folder)
        try:
            for version in versions:
                code = _code(version, args.before, tmp)
                for database in databases:
                    runs.append(_run(version, code, database, tmp / "template", tmp, args, server))
                    _report(runs[-1], args.phases)
        finally:
            if server is not None:
                server.stop()
    expected = expected_grades(args.students)
    failed = False
    for run in runs:
        differ = {k for k in expected.keys() | run["grades"].keys() if expected.get(k) != run["grades"].get(k)}
        status = "as built" if not differ else f"{len(differ)} DIFFER from the class's design"
        print(f"grades {run['version']} {run['database']}: {len(run['grades'])} values, {status}")
        for key in sorted(differ)[:5]:
            print(f"  {key}: expected {expected.get(key)!r}, got {run['grades'].get(key)!r}")
        failed |= bool(differ) or run["errors"] > 0
    for run in runs[1:]:
        if run["grades"] != runs[0]["grades"]:
            print(f"grades {run['version']} {run['database']} differ from {runs[0]['version']} {runs[0]['database']}")
            failed = True
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
