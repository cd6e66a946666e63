"""The gradebook on a PostgreSQL server: every ``course`` step and nbgrader's formgrader on ``postgresql://``.

The test starts a real server of its own (``tests/support/postgres_server.py``: Debian's ``postgresql``
package, ``initdb`` and ``pg_ctl`` in a temporary folder, as the unprivileged user ``nobody``
when run as root, on a free loopback port) and stops it afterwards. The compatibility course
(``fixtures/grading/compat_course``) goes through ``course release``, ``collect``,
``autograde``, manual grading in nbgrader's formgrader (a real Jupyter server, its REST
API), ``feedback`` and ``export`` with ``CourseDirectory.db_url`` on that server; its
gradebook must equal the one the same class gets in SQLite, cell by cell.
"""

from __future__ import annotations

import csv
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from grading.autograde import autograde
from grading.cli import main
from grading.collect import collect
from grading.coursedir import Course
from grading.release import release
from tests.fixtures.grading import compat_students
from tests.support.postgres_server import MISSING, PostgresServer
from tests.support.processes import free_port, stop_process

# A PostgreSQL server of its own: `make grading-test` (and CI) runs this file, `make test` does not.
pytestmark = pytest.mark.slow_grading

A = compat_students.ASSIGNMENT


needs_server = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@pytest.fixture(scope="module")
def postgres():
    folder = Path(tempfile.mkdtemp(prefix="course-postgres-"))
    server = PostgresServer(folder)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _gradebook(course: Course) -> dict[tuple, object]:
    """Everything autograde and the manual grading record, keyed by (student, notebook, cell, what)."""
    found: dict[tuple, object] = {}
    with course.gradebook() as gb:
        assignment = gb.find_assignment(A)
        found["duedate"] = assignment.duedate
        for sub in assignment.submissions:
            found[(sub.student.id, "timestamp")] = sub.timestamp
            for nb in sub.notebooks:
                found[(sub.student.id, nb.name, "late penalty")] = nb.late_submission_penalty
                for grade in nb.grades:
                    for what in ("auto_score", "manual_score", "needs_manual_grade"):
                        found[(sub.student.id, nb.name, grade.cell.name, what)] = getattr(grade, what)
                for comment in nb.comments:
                    found[(sub.student.id, nb.name, comment.cell.name, "comment")] = comment.auto_comment
    return found


class _Formgrader:
    """nbgrader's formgrader in a Jupyter server started in the course directory, used through its REST API."""

    def __init__(self, course: Path):
        self.token, self.port = secrets.token_hex(16), free_port()
        argv = [str(Path(sys.executable).parent / "jupyter"), "server", "--no-browser", "--allow-root"]
        argv += [f"--port={self.port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={self.token}"]
        argv += [f"--ServerApp.root_dir={course}", "--ServerApp.port_retries=0"]
        self.log = (course.parent / "formgrader.log").open("w")
        self.process = subprocess.Popen(argv, cwd=course, stdout=self.log, stderr=subprocess.STDOUT)

    def call(self, method: str, path: str, body: dict | None = None) -> object:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/formgrader/api/{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def wait(self) -> None:
        deadline = time.monotonic() + 90
        while True:
            try:
                self.call("GET", "status")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the formgrader did not start: see {self.log.name}") from None
                time.sleep(0.3)

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()


@needs_server
def test_every_step_and_the_formgrader_work_on_a_postgresql_gradebook(postgres, tmp_path, capsys):
    pg, lite = Course(tmp_path / "pg"), Course(tmp_path / "sqlite")
    for course in (pg, lite):
        shutil.copytree(compat_students.COURSE, course.root)
    with (pg.root / "nbgrader_config.py").open("a") as config:
        config.write(f"\nc.CourseDirectory.db_url = {postgres!r}\n")
    root = ["--course", str(pg.root)]
    assert main([*root, "release", "--duedate", compat_students.DUE]) == 0
    compat_students.build(pg.folder("release", A), tmp_path / "inbox")
    assert main([*root, "collect", str(tmp_path / "inbox")]) == 0
    assert main([*root, "autograde", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "graded 3 submissions, 0 grader errors" in out and "unused-secret" not in out

    release(lite, duedate=compat_students.DUE)  # the same class in SQLite, for comparison
    collect(lite, tmp_path / "inbox")
    assert not autograde(lite, jobs=2, progress=False).errors
    assert not (pg.root / "gradebook.db").exists()  # nothing went to SQLite behind our back
    assert _gradebook(pg) == _gradebook(lite)

    formgrader = _Formgrader(pg.root)
    try:
        formgrader.wait()
        submissions = {s["student"]: s for s in formgrader.call("GET", f"submissions/{A}")}
        assert set(submissions) == {"alice", "bob", "carol"} and submissions["alice"]["needs_manual_grade"]
        [essay] = [n for n in formgrader.call("GET", f"student_notebook_submissions/alice/{A}") if n["name"] == "essay"]
        grades = {g["name"]: g for g in formgrader.call("GET", f"grades?submission_id={essay['id']}")}
        formgrader.call("PUT", f"grade/{grades['q1_answer']['id']}", {"manual_score": 1.5})
    finally:
        formgrader.stop()
    with pg.gradebook() as gb:
        assert gb.find_grade("q1_answer", "essay", A, "alice").manual_score == 1.5

    assert main([*root, "feedback", "--include-ungraded"]) == 0  # some answers still wait for hand grading
    assert "q1_answer" in (pg.folder("feedback", A, "alice") / "essay.html").read_text()
    assert main([*root, "export"]) == 0
    with open(pg.exports / "grades.csv", newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert (rows["bob"]["raw_score"], rows["bob"]["late_penalty"], rows["bob"]["score"]) == ("2", "2", "0")
    assert float(rows["alice"]["raw_score"]) == float(submissions["alice"]["score"]) + 1.5


def test_an_unreachable_database_server_is_a_clear_error_without_its_password(tmp_path, capsys):
    course = Course(tmp_path / "course")
    shutil.copytree(compat_students.COURSE, course.root)
    url = f"postgresql://course:hunter2@127.0.0.1:{free_port()}/gradebook"
    with (course.root / "nbgrader_config.py").open("a") as config:
        config.write(f"\nc.CourseDirectory.db_url = {url!r}\n")
    for step in (["release"], ["export"]):
        assert main(["--course", str(course.root), *step]) == 1
        err = capsys.readouterr().err
        assert "cannot open the gradebook postgresql://course:***@127.0.0.1" in err, err
        assert "hunter2" not in err and "Traceback" not in err
    assert not course.release.exists() and not (course.root / "gradebook.db").exists()
    with (course.root / "nbgrader_config.py").open("a") as config:  # a driver SQLAlchemy cannot load
        config.write("\nc.CourseDirectory.db_url = 'postgresql+nosuchdriver://course@127.0.0.1/gradebook'\n")
    assert main(["--course", str(course.root), "export"]) == 1
    assert "its database driver is missing" in capsys.readouterr().err


def test_the_servers_unix_sockets_are_hidden_from_submissions(tmp_path):
    course = Course(tmp_path / "course")
    course.root.mkdir()
    (course.root / "nbgrader_config.py").write_text(
        "c.CourseDirectory.db_url = 'postgresql://course@/gradebook?host=/srv/pg-sockets'\n"
    )
    hidden = {str(p) for p in course.hidden_paths()}
    assert {str(course.root), "/srv/pg-sockets", "/run/postgresql"} <= hidden
    (course.root / "nbgrader_config.py").write_text("")  # SQLite: the course folder is enough
    assert Course(course.root).hidden_paths() == [course.root]
