"""The ``course`` command: release, collect, autograde, feedback, export, validate.

Each subcommand is one step of the instructor's workflow on the course directory
``grading/`` (``--course`` to use another); ``validate`` is the learner's. Run
``course <step> --help`` for the options. Exit status: 0 on success, 1 when something
needs attention (a stale release, a failing visible test, a grader error), 2 on misuse.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course_utils.grading.course import default_course
from course_utils.grading.sandbox import Limits, detect

__all__ = ["main"]


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(
        cell_timeout=args.cell_timeout,
        notebook_timeout=args.notebook_timeout,
        memory_bytes=int(args.memory_gb * (1 << 30)),
    )


def _add_limits(parser: argparse.ArgumentParser) -> None:
    defaults = Limits()
    parser.add_argument("--cell-timeout", type=float, default=defaults.cell_timeout, help="seconds per cell")
    parser.add_argument(
        "--notebook-timeout", type=float, default=defaults.notebook_timeout, help="seconds per notebook"
    )
    parser.add_argument("--memory-gb", type=float, default=defaults.memory_bytes / (1 << 30), help="address space")
    parser.add_argument(
        "--sandbox", choices=["auto", "root", "userns", "none"], default="auto", help="strongest isolation to try"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course", description=__doc__.split("\n\n")[0])
    parser.add_argument("--course", type=Path, help="nbgrader course directory (default: the repository's grading/)")
    parser.add_argument("--notebooks", type=Path, help="source notebooks to release (default: notebooks/)")
    steps = parser.add_subparsers(dest="step", required=True)

    release = steps.add_parser("release", help="generate the student versions into grading/release/")
    release.add_argument("assignments", nargs="*", help="only these (default: every notebook)")
    release.add_argument("--check", action="store_true", help="only report releases that are out of date")

    collect = steps.add_parser("collect", help="import submissions from a folder or an LMS zip")
    collect.add_argument("source", type=Path)
    collect.add_argument("--assignment", help="every file is this assignment (default: read it from the name)")
    collect.add_argument("--student-pattern", help=r"regex with a (?P<student>...) group, e.g. '(?P<student>[^_]+)_'")

    autograde = steps.add_parser("autograde", help="grade every collected submission")
    autograde.add_argument("--jobs", "-j", type=int, default=2, help="notebooks graded at once (default 2)")
    autograde.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    autograde.add_argument("--student", action="append", help="only this student (repeatable)")
    autograde.add_argument("--no-progress", action="store_true")
    _add_limits(autograde)

    feedback = steps.add_parser("feedback", help="HTML feedback per student")
    feedback.add_argument("--assignment", action="append")
    steps.add_parser("export", help="grades as CSV (grades.csv and totals.csv)")

    validate = steps.add_parser("validate", help="run a notebook's visible tests before submitting")
    validate.add_argument("notebook", type=Path)
    _add_limits(validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    course = default_course(args.course, args.notebooks)

    if args.step == "release":
        from course_utils.grading.release import release, stale_releases

        if args.check:
            problems = stale_releases(course)
            print("\n".join(problems) if problems else "releases are up to date")
            return 1 if problems else 0
        for path in release(course, args.assignments or None):
            print(f"released {path}")
        return 0

    if args.step == "collect":
        from course_utils.grading.collect import collect

        report = collect(course, args.source, assignment=args.assignment, student_pattern=args.student_pattern)
        for item in report:
            print(item.note or f"collected {item.student}/{item.assignment} ({item.timestamp:%Y-%m-%d %H:%M} UTC)")
        print(f"{sum(1 for r in report if r.path)} submissions in {course.submitted}")
        return 0

    if args.step == "autograde":
        from course_utils.grading.autograde import autograde

        protections = detect(args.sandbox)
        print(protections.describe(), file=sys.stderr)
        summary = autograde(
            course,
            jobs=args.jobs,
            limits=_limits(args),
            protections=protections,
            assignments=args.assignment,
            students=args.student,
            progress=not args.no_progress,
        )
        for graded in sorted(summary.graded, key=lambda g: (g.submission.assignment, g.submission.student)):
            sub = graded.submission
            first = f" - {graded.notes[0]}" if graded.notes else ""
            print(f"{sub.assignment}  {sub.student}: {graded.score:g}/{graded.max_score:g}{first}")
        print(summary.line())
        return 1 if summary.errors else 0

    if args.step == "feedback":
        from course_utils.grading.report import feedback

        files = feedback(course, args.assignment)
        print(f"{len(files)} feedback files in {course.feedback}")
        return 0

    if args.step == "export":
        from course_utils.grading.report import export

        for path in export(course):
            print(f"wrote {path}")
        return 0

    if args.step == "validate":
        from course_utils.grading.validate import validate

        protections = detect(args.sandbox)
        result = validate(args.notebook, course, _limits(args), protections)
        print(result.text())
        return 0 if result.tests and result.score == result.max_score else 1
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
