"""Benchmark: grade one class with plain ``nbgrader autograde`` and with ``course autograde --jobs 2``.

Run with ``make grade-benchmark`` (or ``.venv/bin/python tools/grade_benchmark.py``). Two classes:

* default: a throwaway course from one notebook (the grading tests' fixture assignment,
  which uses torch; ``--notebook notebooks/NN_slug.ipynb`` for a real one) and
  ``--students`` ordinary submissions (correct, one answer wrong, blank, in turn);
* ``--compat``: the standard nbgrader course of the compatibility tests
  (``tests/fixtures/grading/compat_course``: two small notebooks, no torch) with its three
  students repeated up to ``--students``.

From identical copies it then times, one after the other:

1. every submission run bare with nbclient, sequentially (the floor: executing the
   notebooks and nothing else);
2. ``nbgrader autograde`` (sequential, nbgrader's own sandbox-free execution);
3. ``course autograde --jobs N`` (jailed kernels, N workers), both as commands, start-up
   included.

It checks that both graders give every graded cell of every student the same score and
needs-manual-grade flag, and prints the wall times, the ratio nbgrader / course, and each
grader's overhead over bare execution. It is a measurement, not a test: nothing is
asserted about speed. The machine and its load average are printed, because both change
the figures.

``--cluster`` compares ``course autograde --jobs N`` with grading on a Dask cluster instead:
a scheduler and N single-thread workers started here (``dask scheduler``, ``dask worker
--nthreads 1``, as the instructor guide starts them by hand; their start is not timed).
Both grade the class in this process, through ``grading.autograde.autograde`` (the
command's code path, with a ``WorkerPool`` or a ``ClusterPool``; the coordinator's imports
are made before either clock starts), and it prints both wall times, the cluster's overhead,
the grades compared cell by cell, and the per-notebook costs an estimate for a bigger class
needs: seconds in the grading workers, seconds in the coordinator (preparing, sending,
recording: the part that does not spread over machines) and the cluster's own overhead.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
# The root: the grading package without `make install`, and the test suite's fixtures and helpers (tests.*).
sys.path.insert(0, str(REPO))

from grading.coursedir import Course  # noqa: E402
from grading.release import release  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "grading" / "notebooks" / "90_grade_fixture_tensors.ipynb"
NBGRADER_CONFIG = """c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "optimization-course"
c.Execute.timeout = 120
"""


def _one_notebook_class(tmp: Path, source: Path, students: int) -> Course:
    """A course releasing ``source``, with ``students`` submissions in submitted/."""
    notebooks = tmp / "notebooks"
    notebooks.mkdir()
    shutil.copy(source, notebooks / source.name)
    base = Course(root=tmp / "base", notebooks=notebooks)
    base.root.mkdir()
    (base.root / "nbgrader_config.py").write_text(NBGRADER_CONFIG)
    release(base)
    name = source.stem
    released = nbformat.read(base.folder("release", name) / f"{name}.ipynb", as_version=4)
    solved = nbformat.read(source, as_version=4)
    for cell in solved.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            cell.source = re.sub(r"\n\s*### (BEGIN|END) SOLUTION", "", cell.source)
    wrong = nbformat.from_dict(nbformat.reads(nbformat.writes(solved), as_version=4))

    def answers(nb: nbformat.NotebookNode) -> list:
        return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]

    answers(wrong)[0].source = answers(released)[0].source
    kinds = [nbformat.writes(solved), nbformat.writes(wrong), nbformat.writes(released)]
    for index in range(students):
        folder = base.folder("submitted", name, f"student{index:02d}")
        folder.mkdir(parents=True)
        (folder / f"{name}.ipynb").write_text(kinds[index % 3])
        (folder / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
    return base


def _compat_class(tmp: Path, students: int) -> Course:
    """The compatibility course, its three students repeated up to ``students`` submissions."""
    from tests.fixtures.grading import compat_students

    base = Course(root=tmp / "base")
    shutil.copytree(compat_students.COURSE, base.root)
    release(base, duedate=compat_students.DUE)
    inbox = tmp / "inbox"
    compat_students.build(base.folder("release", compat_students.ASSIGNMENT), inbox)
    originals = sorted(p for p in inbox.iterdir() if p.is_dir())
    for index in range(students):
        original = originals[index % len(originals)]
        shutil.copytree(original, base.submitted / f"{original.name}{index:02d}")
    return base


def _grades(course: Course) -> dict[tuple[str, str, str], tuple[float | None, bool]]:
    with course.gradebook() as gb:
        return {
            (grade.student.id, notebook.name, grade.cell.name): (grade.auto_score, grade.needs_manual_grade)
            for assignment in gb.assignments
            for sub in assignment.submissions
            for notebook in sub.notebooks
            for grade in notebook.grades
        }


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        print(result.stdout[-2000:], result.stderr[-4000:], sep="\n")
        raise SystemExit(f"{argv[:4]} failed with status {result.returncode}")
    return seconds


def _differ(theirs: dict, ours: dict) -> dict:
    return {k: (theirs.get(k), ours.get(k)) for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k)}


def _cluster_benchmark(tmp: Path, base: Course, jobs: int) -> None:
    """``--jobs N`` here against a local Dask cluster of N single-thread workers; see the module docstring."""
    from grading.autograde import autograde, find_submissions
    from grading.cluster import ClusterPool
    from tests.support.dask_cluster import DaskCluster

    local, remote = Course(tmp / "local", base.notebooks), Course(tmp / "remote", base.notebooks)
    shutil.copytree(base.root, local.root)
    shutil.copytree(base.root, remote.root)
    find_submissions(local)  # the coordinator's imports (nbgrader, SQLAlchemy) before either clock starts
    notebooks = sum(len(Course.notebook_names(folder)) for _, _, folder in base.submissions())
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"class: {len(base.submissions())} submissions, {notebooks} notebooks of {', '.join(base.assignments())}")
    with DaskCluster(tmp / "dask", workers=jobs) as cluster:
        started = time.perf_counter()
        here = autograde(local, jobs=jobs, progress=False)
        mine = time.perf_counter() - started
        print(f"course autograde --jobs {jobs}:                  {mine:7.1f} s")
        started = time.perf_counter()
        with ClusterPool(cluster.address, "auto", remote.hidden_paths()) as pool:
            there = autograde(remote, pool=pool, progress=False)
        theirs = time.perf_counter() - started
        print(f"course autograde --scheduler ({jobs} x 1 thread): {theirs:7.1f} s (connecting and checking included)")
    differ = _differ(_grades(local), _grades(remote))
    print(f"grades: {len(_grades(local))} graded cells; {'identical' if not differ else f'{len(differ)} DIFFER'}")
    print(f"cluster overhead over --jobs {jobs}:         {100 * (theirs / mine - 1):+6.1f} %")
    for name, summary, wall in (("--jobs", here, mine), ("cluster", there, theirs)):
        worker = sum(g.seconds for g in summary.graded) / notebooks
        coordinator = summary.coordinator_seconds / notebooks
        print(
            f"per notebook ({name:7}): {worker:5.2f} s in a grading worker, {coordinator:5.3f} s in the coordinator, "
            f"{wall * jobs / notebooks:5.2f} s of wall time x slots"
        )
    print(f"cluster overhead per notebook: {(theirs - mine) * jobs / notebooks:+.3f} s per slot")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if differ or here.errors or there.errors:
        for key, (a, b) in sorted(differ.items())[:10]:
            print(f"  {key}: --jobs {a}, cluster {b}")
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebook", type=Path, default=FIXTURE)
    parser.add_argument("--compat", action="store_true", help="grade the compatibility course instead")
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--cluster", action="store_true", help="compare --jobs N with a local Dask cluster of N one-thread workers"
    )
    args = parser.parse_args()

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["COURSE_QUICK"] = "1"  # the grader's kernels use quick sizes; give nbgrader and bare runs the same
    with tempfile.TemporaryDirectory(prefix="grade-benchmark-") as tmp_name:
        tmp = Path(tmp_name)
        if args.compat:
            base = _compat_class(tmp, args.students)
        else:
            base = _one_notebook_class(tmp, args.notebook, args.students)
        if args.cluster:
            _cluster_benchmark(tmp, base, args.jobs)
            return
        assignments = base.assignments()
        plain, mine = Course(tmp / "plain"), Course(tmp / "mine")
        shutil.copytree(base.root, plain.root)
        shutil.copytree(base.root, mine.root)
        submissions = base.submissions()

        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        print(f"class: {len(submissions)} submissions of {', '.join(assignments)}")
        started = time.perf_counter()
        for student, assignment, folder in submissions:
            work = tmp / "bare" / student / assignment
            shutil.copytree(base.folder("source", assignment), work, ignore=shutil.ignore_patterns("*.ipynb"))
            for path in sorted(folder.glob("*.ipynb")):
                nb = nbformat.read(path, as_version=4)
                client = NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120)
                client.resources = {"metadata": {"path": str(work)}}
                client.execute()
        bare = time.perf_counter() - started
        print(f"bare nbclient, sequential:        {bare:7.1f} s")

        nbgrader = sum(
            _timed([str(Path(sys.executable).parent / "nbgrader"), "autograde", name, "--force"], plain.root, env)
            for name in assignments
        )
        print(f"nbgrader autograde (sequential):  {nbgrader:7.1f} s")
        course_cmd = [sys.executable, "-m", "grading", "--course", str(mine.root), "autograde"]
        ours = _timed([*course_cmd, "--jobs", str(args.jobs), "--no-progress", "--force"], REPO, env)
        print(f"course autograde --jobs {args.jobs}:       {ours:7.1f} s")

        theirs, our_grades = _grades(plain), _grades(mine)
        differ = _differ(theirs, our_grades)
        print(
            f"grades: {len(theirs)} graded cells from nbgrader, {len(our_grades)} from course; "
            f"{'identical' if not differ else f'{len(differ)} DIFFER'}"
        )
        print(f"speed-up nbgrader / course:       {nbgrader / ours:7.2f}x")
        print(f"nbgrader overhead over bare:      {100 * (nbgrader / bare - 1):+6.0f} %")
        print(
            f"course overhead over bare / {args.jobs}:   {100 * (ours / (bare / args.jobs) - 1):+6.0f} % "
            f"(bare time split over {args.jobs} cores is the floor for {args.jobs} jobs)"
        )
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        if differ:
            for key, (a, b) in sorted(differ.items())[:10]:
                print(f"  {key}: nbgrader {a}, course {b}")
            raise SystemExit(1)


if __name__ == "__main__":
    main()
