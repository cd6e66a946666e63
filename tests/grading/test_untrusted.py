"""The instructor's terminal is safe from learner text: names, notes and messages cannot act on it.

A learner controls their notebook's kernelspec name (quoted in a grading note), file and
folder names (student ids, the names in ``collect``'s report) and exception messages; a
roster controls display names. ``course`` prints all of them; none may move the cursor,
erase or forge a line, clear the screen or set the window's title. Each test runs the real
command on a real course and reads everything it wrote.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grading.cli import main
from grading.coursedir import Course
from grading.release import release
from tests.support.paths import FIXTURES

COURSE = Path(sys.executable).parent / "course"

# What a terminal acts on: C0 controls but the newline, DEL, C1 controls, and the characters that
# reorder or hide text (bidi embeddings, overrides and isolates, zero-width marks).
ACTIVE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
# Erase the line, go back to its start, write a line of one's own, clear the screen, set the title, reverse.
HOSTILE = "x\r\x1b[2K\nps1  mallory: 10/10 (forged)\x1b[2J\x1b]0;title\x07\u202e"


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    """The compatibility course with ps1 released (copied by each test)."""
    root = tmp_path_factory.mktemp("terminal") / "course"
    root.mkdir()
    shutil.copytree(FIXTURES / "compat_course" / "source", root / "source")
    release(Course(root))
    return root


def test_collect_prints_hostile_file_names_as_visible_escapes(tmp_path, capsys):
    root = tmp_path / "course"
    shutil.copytree(FIXTURES / "compat_course" / "source", root / "source")  # collect needs no release
    download = tmp_path / "download.zip"
    hostile = f"{HOSTILE}.ipynb"  # no assignment in its name: skipped, and named in the report
    with zipfile.ZipFile(download, "w") as archive:
        archive.writestr("alice_problems.ipynb", b"{}")
        archive.writestr(hostile, b"{}")
    assert main(["--course", str(root), "collect", str(download), "--assignment", "ps1"]) == 0
    captured = capsys.readouterr()
    assert not ACTIVE.search(captured.out + captured.err), captured
    lines = captured.out.splitlines()
    assert any(line.startswith("collected alice/ps1") for line in lines)
    assert not any(line.startswith("ps1  mallory") for line in lines)
    assert r"x\x0d\x1b[2K\x0aps1  mallory: 10/10 (forged)\x1b[2J\x1b]0;title\x07\u202e.ipynb" in captured.out

    only = tmp_path / "only.zip"  # nothing else to collect: the error message quotes the name
    with zipfile.ZipFile(only, "w") as archive:
        archive.writestr(hostile, b"{}")
    assert main(["--course", str(root), "collect", str(only)]) == 1
    captured = capsys.readouterr()
    assert "nothing to collect" in captured.err and r"\x1b]0;title\x07" in captured.err
    assert not ACTIVE.search(captured.out + captured.err), captured


@pytest.mark.slow_grading
def test_autograde_shows_a_hostile_kernel_name_and_student_id_without_acting_on_them(tmp_path, released):
    """The reported forgery: a kernelspec name erased the real score line and printed ``10/10 (forged)``."""
    root = tmp_path / "course"
    shutil.copytree(released, root)
    for student in ("mallory", "eve\x1b[2J\r"):  # the second as nbgrader's own collect could name a folder
        submission = root / "submitted" / student / "ps1"
        shutil.copytree(root / "release" / "ps1", submission)
        (submission / "timestamp.txt").write_text("2026-01-09 12:00:00 UTC")
        path = submission / "problems.ipynb"
        nb = nbformat.read(path, as_version=4)
        nb.metadata.kernelspec = {"name": HOSTILE, "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, path)
    result = subprocess.run(
        [str(COURSE), "--course", str(root), "autograde", "--no-progress", "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert not ACTIVE.search(result.stdout + result.stderr), (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    # The released notebooks, unanswered: 0 of ps1's 10 points, and that line is whole.
    [mallory] = [line for line in lines if line.startswith("ps1  mallory:")]
    assert mallory.startswith("ps1  mallory: 0/10 ")
    assert r"kernel `x\x0d\x1b[2K\x0aps1  mallory: 10/10 (forged)\x1b[2J\x1b]0;title\x07\u202e`" in mallory
    assert any(line.startswith(r"ps1  eve\x1b[2J\x0d: 0/10 ") for line in lines), lines
    assert lines[-1].startswith("graded 2 submissions")
