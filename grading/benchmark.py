"""Benchmark: grade one class with plain ``nbgrader autograde`` and with ``course autograde --jobs 2``.

Run with ``make grade-benchmark`` (or ``.venv/bin/python grading/benchmark.py``). It builds
a throwaway course from one notebook (the grading tests' fixture assignment by default,
``--notebook notebooks/NN_slug.ipynb`` for a real one), a class of ``--students`` ordinary
submissions (correct, one answer wrong, blank, in turn), and then, from identical copies:

1. runs every submission bare with nbclient, one after the other (the floor: executing
   the notebooks and nothing else);
2. ``nbgrader autograde`` (sequential, nbgrader's own sandbox-free execution);
3. ``course autograde --jobs N`` (rebuilt notebooks, jailed kernels, N workers).

It checks that both graders give every test cell of every student the same score, and
prints the wall times, the ratio nbgrader / course, and each grader's overhead over bare
execution. It is a measurement, not a test: nothing is asserted about the speed. The
machine is named, and its load average printed, because both change the figures.
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
sys.path.insert(0, str(REPO))

from course_utils.grading.course import Course  # noqa: E402
from course_utils.grading.release import release  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "grading" / "notebooks" / "90_grade_fixture_tensors.ipynb"
NBGRADER_CONFIG = """c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "optimization-course"
c.Execute.timeout = 120
"""


def _class(source: Path, released: nbformat.NotebookNode, students: int) -> dict[str, bytes]:
    """Ordinary submissions: correct, one wrong answer, blank, in turn."""
    solved = nbformat.read(source, as_version=4)
    for cell in solved.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            cell.source = re.sub(r"\n\s*### (BEGIN|END) SOLUTION", "", cell.source)
    wrong = nbformat.from_dict(nbformat.reads(nbformat.writes(solved), as_version=4))
    answers = [c for c in wrong.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    stub = next(c for c in released.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    answers[0].source = stub.source
    kinds = [nbformat.writes(solved), nbformat.writes(wrong), nbformat.writes(released)]
    return {f"student{i:02d}": kinds[i % 3].encode() for i in range(students)}


def _scores(course: Course) -> dict[tuple[str, str], float | None]:
    with course.gradebook() as gb:
        return {
            (grade.student.id, grade.cell.name): grade.auto_score
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebook", type=Path, default=FIXTURE)
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["COURSE_QUICK"] = "1"  # the grader's kernels use quick sizes; give nbgrader and bare runs the same
    name = args.notebook.stem
    with tempfile.TemporaryDirectory(prefix="grade-benchmark-") as tmp:
        notebooks = Path(tmp) / "notebooks"
        notebooks.mkdir()
        shutil.copy(args.notebook, notebooks / args.notebook.name)
        base = Course(root=Path(tmp) / "base", notebooks=notebooks)
        release(base)
        (base.root / "nbgrader_config.py").write_text(NBGRADER_CONFIG)
        released = nbformat.read(base.notebook(base.release, name), as_version=4)
        for student, data in _class(args.notebook, released, args.students).items():
            folder = base.submitted / student / name
            folder.mkdir(parents=True)
            (folder / f"{name}.ipynb").write_bytes(data)
            (folder / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
        plain, mine = Course(Path(tmp) / "plain", notebooks), Course(Path(tmp) / "mine", notebooks)
        shutil.copytree(base.root, plain.root)
        shutil.copytree(base.root, mine.root)

        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        print(f"class: {args.students} submissions of {name}")
        started = time.perf_counter()
        for student in sorted(os.listdir(base.submitted)):
            nb = nbformat.read(base.notebook(base.submitted, name, student), as_version=4)
            NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
        bare = time.perf_counter() - started
        print(f"bare nbclient, sequential:        {bare:7.1f} s")

        nbgrader = _timed(
            [str(Path(sys.executable).parent / "nbgrader"), "autograde", name, "--force"], plain.root, env
        )
        print(f"nbgrader autograde (sequential):  {nbgrader:7.1f} s")
        course_cmd = [sys.executable, "-m", "course_utils.grading.cli", "--course", str(mine.root)]
        course_cmd += ["--notebooks", str(notebooks), "autograde", "--jobs", str(args.jobs), "--no-progress"]
        ours = _timed(course_cmd, REPO, env)
        print(f"course autograde --jobs {args.jobs}:       {ours:7.1f} s")

        theirs, our_scores = _scores(plain), _scores(mine)
        differ = {
            k: (theirs.get(k), our_scores.get(k))
            for k in theirs.keys() | our_scores.keys()
            if theirs.get(k) != our_scores.get(k)
        }
        print(
            f"grades: {len(theirs)} test-cell scores from nbgrader, {len(our_scores)} from course; "
            f"{'identical' if not differ else f'{len(differ)} DIFFER'}"
        )
        print(f"speed-up nbgrader / course:       {nbgrader / ours:7.2f}x")
        print(f"nbgrader overhead over bare:      {100 * (nbgrader / bare - 1):+6.0f} %")
        print(
            f"course overhead over bare / {args.jobs}:   {100 * (ours / (bare / args.jobs) - 1):+6.0f} % "
            f"(bare time split over {args.jobs} cores is the floor for {args.jobs} jobs)"
        )
        if differ:
            for key, (a, b) in sorted(differ.items())[:10]:
                print(f"  {key}: nbgrader {a}, course {b}")
            raise SystemExit(1)


if __name__ == "__main__":
    main()
