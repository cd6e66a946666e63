"""End to end: release a throwaway course, collect a hostile class from an LMS zip, autograde
it on two workers, then check every score, the feedback, the CSV and that nothing escaped.

The class is ``tests/fixtures/grading/grading_cases.py``: correct, blank and partial
notebooks, broken files, and one submission per attack (endless loops, output floods,
memory and disk exhaustion, killed kernels, leftover processes, patched comparisons,
suppressed tracebacks, snooping on instructor files, network). ``EXPECTED`` there is the
table of the scores asserted here.
"""

from __future__ import annotations

import csv
import os
import socket
import threading
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from grading.autograde import autograde
from grading.collect import collect
from grading.coursedir import Course
from grading.export import export
from grading.feedback import feedback
from grading.release import release
from grading.sandbox.protections import Limits, MiB, detect
from tests.fixtures.grading import grading_cases as cases
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.slow_grading  # tests/grading_end_to_end/ is `make grading-test`

# Tight limits keep the class within the suite's budget; the hostile cases hit them on purpose.
TEST_LIMITS = Limits(
    cell_timeout=6,
    notebook_timeout=90,
    memory_bytes=3 << 30,
    processes=64,
    file_bytes=16 * MiB,
    disk_bytes=64 * MiB,
    output_bytes=50_000,
)
PROTECTIONS = detect()


class Listener:
    """Counts connections to the port the network case tries, from outside the sandbox."""

    def __init__(self, port: int):
        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind(("127.0.0.1", port))
        except OSError:
            self.sock = None
            return
        self.sock.listen()
        self.sock.settimeout(0.5)
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        if self.sock is not None:
            self.stop = True
            self.thread.join()
            self.sock.close()


def _sleepers() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == b"sleep\x00313\x00":
                found.append(entry.name)
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course")
    course = Course(root=tmp / "grading", notebooks=FIXTURES / "notebooks")
    release(course)
    released = nbformat.read(_notebook(course, "release"), as_version=4)
    download = tmp / "lms_download.zip"
    with zipfile.ZipFile(download, "w") as archive:
        for name, data in cases.build_all(released).items():
            archive.writestr(f"{name}_{cases.ASSIGNMENT}.ipynb", data)
    collected = collect(course, download)
    # secrets the snooping case looks for: in the instructor's files and in another student's submission
    (course.folder("source", cases.ASSIGNMENT) / f"{cases.CANARY}.txt").write_text("solutions")
    (course.folder("submitted", cases.ASSIGNMENT, "correct") / f"{cases.CANARY}-other.txt").write_text("work")
    listener = Listener(cases.NETWORK_PORT)
    started = time.monotonic()
    try:
        summary = autograde(course, jobs=2, limits=TEST_LIMITS, protections=PROTECTIONS, progress=False)
    finally:
        listener.close()
    seconds = time.monotonic() - started
    finished = time.clock_gettime(time.CLOCK_BOOTTIME)  # /proc's start times count from boot
    print(f"\nautograded {len(summary.graded)} submissions in {seconds:.1f} s ({PROTECTIONS.level} sandbox)")
    feedback_files = feedback(course)
    grades_csv, totals_csv = export(course).files
    return {
        "course": course,
        "collected": collected,
        "summary": summary,
        "finished": finished,
        "listener": listener,
        "feedback": feedback_files,
        "grades": grades_csv,
        "totals": totals_csv,
    }


def _notebook(course: Course, step: str, student: str = ".") -> Path:
    return course.folder(step, cases.ASSIGNMENT, student) / f"{cases.ASSIGNMENT}.ipynb"


def _by_student(graded) -> dict:
    return {g.submission.student: g for g in graded["summary"].graded}


def test_every_submission_collected(graded):
    assert sorted(c.student for c in graded["collected"] if c.path) == sorted(cases.EXPECTED)


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_score_and_note(graded, case):
    result = _by_student(graded)[case.name]
    notes = " ".join(result.notes)
    assert result.max_score == 4
    assert result.score == case.score, f"{case.name} ({case.why}): got {result.score}, notes: {notes}"
    if case.note:
        assert case.note in notes, f"{case.name}: notes should mention {case.note!r}: {notes}"
    assert not result.grader_error, notes


def test_no_grader_errors_and_summary(graded):
    summary = graded["summary"]
    assert not summary.errors
    assert summary.line().startswith(f"graded {len(cases.CASES)} submissions, 0 grader errors")


def _outputs(course: Course, student: str) -> str:
    nb = nbformat.read(_notebook(course, "autograded", student), as_version=4)
    return "\n".join(str(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.skipif(not PROTECTIONS.namespaces, reason="; ".join(PROTECTIONS.missing()))
def test_sandbox_held(graded):
    course = graded["course"]
    snoop = _outputs(course, "snoops_instructor_files")
    assert "snooping done" in snoop and "READ" not in snoop and "WROTE" not in snoop, snoop
    network = _outputs(course, "opens_network")
    assert "blocked" in network and "CONNECTED" not in network, network
    assert graded["listener"].connections == 0
    assert "process limit hit" in _outputs(course, "leaves_processes")
    disk = _outputs(course, "fills_disk")
    written = int(disk.split("disk full after ")[1].split()[0])
    assert written <= TEST_LIMITS.disk_bytes // MiB, disk


def _started(entry: Path) -> float:
    """When process ``entry`` (a /proc folder) started, in seconds since boot."""
    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def test_nothing_left_running(graded):
    assert not _sleepers(), "processes started by a submission survived grading"
    uids = set(graded["summary"].uids)
    assert bool(uids) == (PROTECTIONS.level == "root")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid, started = entry.stat().st_uid, _started(entry)
            except OSError:
                continue
            # A grading user is leased again once this run has released it (another test, under pytest-xdist):
            # only a process that started while this run held it is a leftover.
            assert uid not in uids or started > graded["finished"], (
                f"process {entry.name} of grading user {uid} left behind"
            )


def test_flood_is_capped(graded):
    path = _notebook(graded["course"], "autograded", "floods_output")
    assert path.stat().st_size < 20 * TEST_LIMITS.output_bytes
    assert "output truncated by the grader" in path.read_text()


def test_feedback_per_student_with_notes(graded):
    files = {p.parts[-3]: p for p in graded["feedback"]}
    assert sorted(files) == sorted(cases.EXPECTED)
    html = files["os_exit"].read_text()
    assert "Grading notes" in html and "exited with status 3" in html


def test_csv_export(graded):
    with open(graded["grades"], newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert {name: float(row["score"]) for name, row in rows.items()} == cases.EXPECTED
    assert all(row["assignment"] == cases.ASSIGNMENT and row["max_score"] == "4" for row in rows.values())
    with open(graded["totals"], newline="") as handle:
        totals = {row["student"]: row for row in csv.DictReader(handle)}
    assert {name: float(row["total"]) for name, row in totals.items()} == cases.EXPECTED
