"""The ``course`` command: release, collect, autograde, hand-grading, extend, feedback, export, validate, cluster-certs.

Each subcommand is one step of the instructor's workflow on an nbgrader course directory:
``--course DIR``, else the current directory when it holds an ``nbgrader_config.py``, else
the repository's ``grading/course/``. ``validate`` is the learner's. Run ``course <step> --help``
for the options. Exit status: 0 on success; 1 when something needs attention (a stale
release, a failing or changed test, a grader error, or nothing to do, with the reason);
2 on misuse.

Text that learners or a roster control (student ids, file names, notes, exception messages,
error messages quoting them) is printed through ``_untrusted`` (one line) or ``_lines`` (a
message of the grader's own lines): every control character shows as a visible escape
(``grading.untrusted.terminal_text``), so such text cannot move the cursor, erase or forge a
line of the output, or set the terminal's title.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grading.coursedir import Course, counted, default_course
from grading.errors import CourseError
from grading.sandbox.protections import Limits, detect
from grading.untrusted import terminal_text

if TYPE_CHECKING:
    from grading.pool import Pool

__all__ = ["main"]


def _untrusted(text: object) -> str:
    """``text`` (learner- or roster-derived) as one line of output, every control character escaped."""
    return terminal_text(text)


def _lines(text: object) -> str:
    """A message made of the grader's own lines, which may quote learner text: each line escaped on its own."""
    return "\n".join(terminal_text(line) for line in str(text).split("\n"))


def _add_limits(parser: argparse.ArgumentParser) -> None:
    defaults = Limits()
    parser.add_argument(
        "--cell-timeout", type=float, help="seconds per cell (default: Execute.timeout of the course's config)"
    )
    parser.add_argument(
        "--notebook-timeout", type=float, default=defaults.notebook_timeout, help="seconds per notebook"
    )
    parser.add_argument("--memory-gb", type=float, default=defaults.memory_bytes / (1 << 30), help="address space")
    parser.add_argument(
        "--job-memory-gb",
        type=float,
        default=defaults.job_memory_bytes / (1 << 30),
        help="memory a job's kernel and every process it starts share (root level, cgroups; 0: no budget)",
    )
    parser.add_argument(
        "--sandbox", choices=["auto", "root", "userns", "none"], default="auto", help="strongest isolation to try"
    )


def _limits(course: Course, args: argparse.Namespace) -> Limits:
    from grading.converter import default_limits

    return default_limits(
        course,
        cell_timeout=args.cell_timeout,
        notebook_timeout=args.notebook_timeout,
        memory_bytes=int(args.memory_gb * (1 << 30)),
        job_memory_bytes=int(args.job_memory_gb * (1 << 30)),
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--course",
        type=Path,
        help="nbgrader course directory (default: the current one if it has nbgrader_config.py, else grading/course/)",
    )
    parser.add_argument("--notebooks", type=Path, help="this repository's course only: notebooks to release")
    steps = parser.add_subparsers(dest="step", required=True)

    release = steps.add_parser("release", help="generate the student versions of source/ into release/")
    release.add_argument("assignments", nargs="*", help="only these (default: every assignment)")
    release.add_argument("--check", action="store_true", help="only report releases that are out of date")
    release.add_argument("--duedate", help="record this due date in the gradebook, e.g. '2026-01-31 17:00:00 UTC'")

    collect = steps.add_parser("collect", help="import submissions (nbgrader's submitted/ layout, a folder, a zip)")
    collect.add_argument("source", type=Path)
    collect.add_argument("--assignment", help="every file is this assignment (default: read it from the names)")
    collect.add_argument("--student-pattern", help=r"regex with a (?P<student>...) group, e.g. '(?P<student>[^_]+)_'")

    autograde = steps.add_parser("autograde", help="grade the collected submissions")
    autograde.add_argument("--jobs", "-j", type=int, help="notebooks graded at once on this machine (default 2)")
    autograde.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="grade on this Dask cluster: the scheduler's address (tls://host:8786) or its scheduler file",
    )
    autograde.add_argument(
        "--tls-certs",
        type=Path,
        metavar="DIR",
        help="the folder `course cluster-certs` made (default: cluster-certs/ in the course directory, if any; "
        "else Dask's distributed.comm.tls configuration)",
    )
    autograde.add_argument(
        "--allow-plain-tcp",
        action="store_true",
        help="grade over plain tcp:// beyond this machine: only on a private network that nothing but the "
        "grading machines and yours can reach (tcp:// has no authentication)",
    )
    autograde.add_argument(
        "--scheduler-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="wait this long to reach the scheduler and for its first worker (default 30)",
    )
    autograde.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    autograde.add_argument("--student", action="append", help="only this student (repeatable)")
    autograde.add_argument("--force", action="store_true", help="regrade submissions graded before")
    autograde.add_argument(
        "--notebook", help="only the notebooks this glob matches, e.g. 'p1*' (default: CourseDirectory.notebook_id, *)"
    )
    autograde.add_argument(
        "--no-execute", action="store_true", help="refused: course always runs the notebooks (nbgrader's flag)"
    )
    autograde.add_argument("--no-progress", action="store_true")
    _add_limits(autograde)

    feedback = steps.add_parser(
        "feedback", help="HTML feedback per student (manual grades included; hidden tests hidden)"
    )
    feedback.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    feedback.add_argument("--student", action="append", help="only this student (repeatable)")
    shown = feedback.add_mutually_exclusive_group()
    shown.add_argument(
        "--show-hidden-tests", action="store_true", help="show hidden tests' code in full (they are hidden by default)"
    )
    shown.add_argument(
        "--hide-hidden-tests", action="store_true", help="the default: leave hidden tests' code out (kept for scripts)"
    )
    feedback.add_argument(
        "--include-ungraded",
        action="store_true",
        help="also give feedback on submissions still waiting for hand grading (their scores are incomplete)",
    )

    export = steps.add_parser(
        "export", help="grades of the assignments graded so far as CSV; with --roster or --lms an LMS import file"
    )
    export.add_argument("--roster", type=Path, help="a CSV of the class, e.g. Canvas's gradebook export")
    export.add_argument("--match-column", default="SIS Login ID", help="roster column holding the student ids")
    export.add_argument(
        "--assignment", action="append", help="only this assignment (repeatable; default: every one graded so far)"
    )
    export.add_argument(
        "--lms",
        choices=["canvas", "moodle"],
        help="the import file to write: canvas.csv (needs --roster; the default with one) or moodle.csv",
    )

    extend = steps.add_parser(
        "extend",
        help="give learners more time for an assignment (nbgrader's extensions, which its late penalty reads)",
        description="extend ASSIGNMENT STUDENT... (--days N | --hours N | --until WHEN | --remove), or --list",
    )
    extend.add_argument("assignment", nargs="?", help="the assignment (with --list: only its extensions)")
    extend.add_argument("students", nargs="*", metavar="student", help="the learners' ids, as in submitted/")
    length = extend.add_mutually_exclusive_group()
    length.add_argument("--days", type=float, help="this many days after the assignment's due date")
    length.add_argument("--hours", type=float, help="this many hours after the assignment's due date")
    length.add_argument("--until", help="the learners' new due date, e.g. '2026-02-03 17:00:00 UTC'")
    length.add_argument("--remove", action="store_true", help="take their extensions away")
    length.add_argument("--list", action="store_true", help="list the extensions in force")

    hand = steps.add_parser(
        "hand-grading", help="grade written answers from files: export what needs a person, import the scores"
    )
    hand_steps = hand.add_subparsers(dest="action", required=True)
    hand_out = hand_steps.add_parser("export", help="CSV files of the cells waiting for a person")
    hand_out.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    hand_out.add_argument("--student", action="append", help="only this student (repeatable)")
    hand_out.add_argument("--all", action="store_true", help="also the cells graded by hand before, for a second look")
    hand_out.add_argument("--parts", type=int, default=1, help="split each assignment's learners into N files")
    hand_in = hand_steps.add_parser("import", help="scores and comments from filled-in files: all of them, or nothing")
    hand_in.add_argument("files", type=Path, nargs="+")

    certs = steps.add_parser(
        "cluster-certs",
        help="make the course's certificate authority and TLS certificates for a Dask cluster, print the commands",
    )
    certs.add_argument("--out", type=Path, help="where (default: cluster-certs/ in the course directory)")
    certs.add_argument("--scheduler-host", default="SCHEDULER-HOST", help="the scheduler's address, for the commands")
    certs.add_argument("--days", type=int, default=365, help="how long the certificates are valid (365)")
    certs.add_argument("--replace", action="store_true", help="make a new authority where one exists")

    validate = steps.add_parser("validate", help="check a notebook before submitting (as nbgrader validate)")
    validate.add_argument("notebook", type=Path)
    validate.add_argument("--json", action="store_true", help="print the verdict as JSON")
    _add_limits(validate)
    return parser


def _release(course: Course, args: argparse.Namespace) -> int:
    from grading.release import release, stale_releases

    if args.check:
        problems = stale_releases(course)
        print(_lines("\n".join(problems)) if problems else "releases are up to date")
        return 1 if problems else 0
    for path in release(course, args.assignments or None, duedate=args.duedate):
        print(f"released {_untrusted(path)}")
    return 0


def _collect(course: Course, args: argparse.Namespace) -> int:
    from grading.collect import collect

    report = collect(course, args.source, assignment=args.assignment, student_pattern=args.student_pattern)
    for item in report:
        when = f" ({item.timestamp:%Y-%m-%d %H:%M} UTC)" if item.timestamp else ""
        print(_untrusted(item.note) or f"collected {_untrusted(item.student)}/{_untrusted(item.assignment)}{when}")
    written = sum(1 for r in report if r.path)
    print(f"{counted(written, 'submission')} written to {course.submitted}" if written else "nothing new to collect")
    return 0


def _security(course: Course, args: argparse.Namespace) -> Any:  # distributed.Security | None
    """The instructor's TLS side: ``--tls-certs``, else the course's ``cluster-certs/``, else Dask's configuration."""
    from grading.certificates import FOLDER_NAME, Certificates, security

    folder = args.tls_certs or course.root / FOLDER_NAME
    if Certificates(folder).complete():
        return security(folder)
    if args.tls_certs is not None:
        raise CourseError(f"no certificates in {folder}: `course cluster-certs --out {folder}` makes them")
    from distributed.security import Security

    configured = Security()  # Dask's own configuration (distributed.comm.tls.*)
    return configured if getattr(configured, "tls_client_cert", None) else None  # set from the configuration


def _cluster_certs(course: Course, args: argparse.Namespace) -> int:
    from grading.certificates import FOLDER_NAME, instructions, make_certificates

    folder = args.out or course.root / FOLDER_NAME
    files = make_certificates(folder, course.course_id, days=args.days, replace=args.replace)
    print(instructions(files, args.scheduler_host, args.days))
    return 0


def _pool(course: Course, args: argparse.Namespace) -> Pool:
    """Where the notebooks run (not yet started): this machine's grading workers, or a Dask cluster's."""
    if args.scheduler:
        from grading.cluster import ClusterPool, DaskMissing

        try:
            security = _security(course, args)
        except ImportError as error:
            raise DaskMissing() from error
        return ClusterPool(
            args.scheduler,
            args.sandbox,
            course.hidden_paths(),
            timeout=args.scheduler_timeout,
            security=security,
            allow_plain=args.allow_plain_tcp,
        )
    from grading.sandbox.workers import WorkerPool

    return WorkerPool(args.jobs or 2, detect(args.sandbox), Limits(), course.hidden_paths())


def _autograde(course: Course, args: argparse.Namespace) -> int:
    if args.no_execute:
        from grading.converter import refuse_no_execute

        raise refuse_no_execute("--no-execute")
    with _pool(course, args) as pool:  # local workers start while we import; a cluster is checked first
        print(_lines(pool.describe()), file=sys.stderr)
        from grading.autograde import autograde

        summary = autograde(
            course,
            limits=_limits(course, args),
            assignments=args.assignment,
            students=args.student,
            force=args.force,
            progress=not args.no_progress,
            pool=pool,
            notebooks=args.notebook,
        )
    for note in summary.ignored:
        print(f"not graded: {_untrusted(note)}")
    for graded in summary.graded:
        sub = graded.submission
        late = f" (late penalty -{graded.late_penalty:g})" if graded.late_penalty else ""
        manual = " [needs manual grading]" if graded.needs_manual_grade else ""
        first = f" - {_untrusted(graded.notes[0])}" if graded.notes else ""
        score = f"{graded.score - graded.late_penalty:g}/{graded.max_score:g}"
        print(f"{_untrusted(sub.assignment)}  {_untrusted(sub.student)}: {score}{late}{manual}{first}")
    print(summary.line())
    return 1 if summary.errors else 0


def _feedback(course: Course, args: argparse.Namespace) -> int:
    from grading.feedback import feedback

    hide = not args.show_hidden_tests
    files = feedback(
        course, args.assignment, students=args.student, hide_hidden_tests=hide, include_ungraded=args.include_ungraded
    )
    if files.waiting:
        who = ", ".join(f"{_untrusted(s)} ({_untrusted(a)})" for s, a in files.waiting)
        count = counted(len(files.waiting), "submission")
        if args.include_ungraded:
            print(f"warning: {count} still waiting for hand grading, given feedback anyway (their scores count "
                  f"only what is graded so far): {who}")  # fmt: skip
        else:
            print(
                f"left out: {count} still waiting for hand grading: {who}; grade them with `course hand-grading "
                "export` and `import`, or in the formgrader, then run `course feedback` again "
                "(--include-ungraded gives feedback now)"
            )
    if hide:
        print(
            "hidden tests are hidden: each hidden-test region shows as one comment line "
            "(--show-hidden-tests shows them)"
        )
    else:
        print("warning: hidden tests are shown in full: every learner who gets these pages can read them")
    print(f"{counted(len(files), 'feedback file')} in {course.feedback}")
    return 0


def _export(course: Course, args: argparse.Namespace) -> int:
    from grading.export import export

    result = export(
        course, roster=args.roster, match_column=args.match_column, assignments=args.assignment, lms=args.lms
    )
    if result.left_out:
        names = ", ".join(_untrusted(a) for a in result.left_out)
        print(f"left out (released, nothing graded yet): {names}")
    for path in result.files:
        print(f"wrote {path}")
    for warning in result.warnings:
        print(f"warning: {_untrusted(warning)}")
    return 0


def _extend(course: Course, args: argparse.Namespace) -> int:
    from grading.extensions import extensions, grant, remove

    if args.list:
        if args.students:
            raise CourseError("--list takes an assignment at most, no students")
        found = extensions(course, args.assignment)
        for extension in found:
            graded = "" if extension.graded else " (not graded yet)"
            print(_untrusted(extension.line()) + graded)
        print(f"{counted(len(found), 'extension')} in force" if found else "no extensions")
        return 0
    if not args.assignment or not args.students:
        raise CourseError("name the assignment and at least one student: course extend ASSIGNMENT STUDENT... --days N")
    if args.remove:
        done = remove(course, args.assignment, args.students)
    elif args.days is None and args.hours is None and args.until is None:
        raise CourseError("say how long: --days N, --hours N, --until 'YYYY-MM-DD HH:MM:SS TZ', or --remove")
    else:
        done = grant(course, args.assignment, args.students, days=args.days, hours=args.hours, until=args.until)
    for extension in done:
        print(_untrusted(extension.line()))
    new = [e.student for e in done if e.new_student]
    if new:
        print(f"note: not in the gradebook before (no submission graded yet), added: {_untrusted(', '.join(new))}; "
              "check the ids against submitted/ and the roster")  # fmt: skip
    again = [e.student for e in done if e.graded]
    if again:
        who = " ".join(f"--student {_untrusted(s)}" for s in again)
        print(
            f"already graded: their late penalty changes when graded again: "
            f"course autograde --force --assignment {_untrusted(args.assignment)} {who}"
        )
    return 0


def _hand_grading(course: Course, args: argparse.Namespace) -> int:
    from grading.handgrade import export_hand_grading, import_hand_grading

    if args.action == "export":
        paths = export_hand_grading(course, args.assignment, args.student, everything=args.all, parts=args.parts)
        for path in paths:
            print(f"wrote {_untrusted(path)}")
        return 0
    print(import_hand_grading(course, args.files).line())
    return 0


def _validate(course: Course, args: argparse.Namespace) -> int:
    from grading.validate import validate

    if not args.notebook.is_file():
        raise CourseError(f"no notebook at {args.notebook}")
    result = validate(args.notebook, course, _limits(course, args), detect(args.sandbox))
    # JSON escapes every control and non-ASCII character itself; the text's messages are the learner's.
    print(json.dumps(result.to_dict(), indent=1) if args.json else _lines(result.text()))
    return 0 if result.ok else 1


_STEPS = {
    "release": _release,
    "collect": _collect,
    "autograde": _autograde,
    "feedback": _feedback,
    "export": _export,
    "validate": _validate,
    "extend": _extend,
    "hand-grading": _hand_grading,
    "cluster-certs": _cluster_certs,
}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    # jsonschema (under nbformat) imports rfc3987_syntax, if installed, to check "iri" formats that no
    # notebook schema uses; building its grammar costs about 1.5 s of CPU per process. The command and
    # its workers do without it (jsonschema then skips that format check).
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None in sys.modules blocks an import
    parser = _parser()
    args = parser.parse_args(argv)
    if args.step == "autograde" and args.scheduler and args.jobs is not None:
        parser.error("--jobs is for this machine; on a cluster each Dask worker thread grades one notebook at a time")
    if args.step == "autograde" and not args.scheduler and (args.tls_certs or args.allow_plain_tcp):
        parser.error("--tls-certs and --allow-plain-tcp are for a cluster (--scheduler)")
    in_main_thread = threading.current_thread() is threading.main_thread()
    # A kill stops the run as Ctrl-C does: the jobs in flight are killed, nothing waits for them.
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main_thread else None
    try:
        course = default_course(args.course, args.notebooks)
        if args.course is not None and not course.root.is_dir() and args.step != "release":
            raise CourseError(f"no course directory at {course.root}")
        return _STEPS[args.step](course, args)
    except CourseError as error:
        print(f"course {args.step}: {_lines(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        rest = "; run it again to grade the rest (finished submissions are kept)" if args.step == "autograde" else ""
        print(f"course {args.step}: interrupted{rest}", file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
