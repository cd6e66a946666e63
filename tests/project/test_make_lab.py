
"""`make lab` serves the learner's workspace without instructor tools; `make lab-instructor` serves notebooks/.

Each test starts the real Makefile target on a free port (the learner's lab on a workspace
in a temporary folder), then asks the running server what a browser would get: the files
it lists, the page config JupyterLab hands to the browser (which plugins are disabled),
nbgrader's formgrader URL, and the Validate button's endpoint (what the button posts).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grading.lab.validate_button import nbgrader_answer
from grading.validate import CellVerdict, Validation
from tests.support.paths import ROOT
from tests.support.processes import free_port

TOKEN = "course-test-token"
INSTRUCTOR_PLUGINS = {
    "@jupyter/nbgrader:menu",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:assignment-list",
}


# Real kernels, servers or processes for seconds: `make test` runs this file, `make test-fast` does not.
pytestmark = pytest.mark.slow


class Lab:
    def __init__(self, port: int) -> None:
        self.port = port

    def request(self, path: str, method: str = "GET", timeout: float = 10) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/{path}",
            method=method,
            data=b"" if method == "POST" else None,
            headers={"Authorization": f"token {TOKEN}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def json(self, path: str, method: str = "GET", timeout: float = 10):
        status, body = self.request(path, method, timeout)
        assert status == 200, f"{path}: HTTP {status} {body[:300]!r}"
        return json.loads(body)

    def names(self, folder: str = "") -> list[str]:
        return [item["name"] for item in self.json(f"api/contents/{folder}")["content"]]

    def disabled_plugins(self) -> set[str]:
        """The plugins the page config JupyterLab hands the browser turns off."""
        status, body = self.request("lab")
        assert status == 200
        match = re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>', body, re.S)
        assert match, "no page config in /lab"
        return set(json.loads(match.group(1))["disabledExtensions"])


@contextlib.contextmanager
def _make(target: str, tmp_path: Path, *variables: str) -> Iterator[Lab]:
    port = free_port()
    args = f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.token={TOKEN}"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    log = (tmp_path / f"{target}.log").open("w")
    server = subprocess.Popen(
        ["make", "--no-print-directory", target, f"PORT={port}", f"LAB_ARGS={args}", *variables],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lab = Lab(port)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"make {target} exited:\n{(tmp_path / f'{target}.log').read_text()[-2000:]}"
            assert time.monotonic() < deadline, "JupyterLab did not answer within 90 s"
            with contextlib.suppress(OSError):
                if lab.request("api/status")[0] == 200:
                    break
            time.sleep(0.5)
        yield lab
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


def _graded_cell(grade_id: str, source: str):
    cell = new_code_cell(source)
    cell.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": grade_id,
        "locked": True,
        "points": 1,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    return cell


def test_make_lab_serves_the_learners_workspace_without_instructor_tools(tmp_path):
    workspace = tmp_path / "ws"
    # A learner who solved notebook 10's exercises: a test that writes profiler lines to stderr
    # passes with `course validate`, fails with plain `nbgrader validate`.
    probe = new_notebook(
        cells=[
            _graded_cell("passes", "assert 1 + 1 == 2"),
            _graded_cell("fails", "assert 1 + 1 == 3, 'one and one make two'"),
            _graded_cell(
                "profiler_stderr",
                "import sys\nprint("
                "'USDT:2026-11-22 00:56:43 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start', file=sys.stderr)",
            ),
        ]
    )
    with _make("lab", tmp_path, f"WORKSPACE={workspace}") as lab:
        assignments = sorted(p.name for p in (ROOT / "grading" / "course" / "release").iterdir() if p.is_dir())
        assert sorted(lab.names()) == assignments
        first = assignments[0]
        assert f"{first}.ipynb" in lab.names(first)
        assert "### BEGIN SOLUTION" not in (workspace / first / f"{first}.ipynb").read_text()

        disabled = lab.disabled_plugins()
        assert disabled >= INSTRUCTOR_PLUGINS
        assert "@jupyter/nbgrader:validate-assignment" not in disabled
        assert lab.request("formgrader")[0] == 404
        assert lab.json("nbgrader_version?version=0.9.6")["success"] is True

        nbformat.write(probe, workspace / "probe.ipynb")
        answer = lab.json("assignments/validate?path=probe.ipynb", method="POST", timeout=120)
        assert lab.request("assignments/validate?path=../outside.ipynb", method="POST")[0] == 403

    course = subprocess.run(
        [sys.executable, "-m", "grading", "validate", str(workspace / "probe.ipynb")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert course.returncode == 1, course.stderr
    assert "PASS  passes" in course.stdout and "PASS  profiler_stderr" in course.stdout
    assert "FAIL  fails (1 pt): AssertionError: one and one make two" in course.stdout
    assert answer["success"] is True
    [failed] = answer["value"]["failed"]  # the button fails exactly what the command fails
    assert failed["source"] == "fails (1 pt)"
    assert "one and one make two" in failed["error"]
    assert "visible tests: 2 / 3 points" in failed["error"] and "visible tests: 2 / 3 points" in course.stdout

    plain = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), "validate", str(workspace / "probe.ipynb")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    # plain nbgrader fails the profiler test too: the discrepancy the Validate button must not show
    assert "VALIDATION FAILED ON 2 CELL(S)" in plain.stdout and "profiler_start" in plain.stdout, plain.stdout


def test_make_lab_instructor_serves_the_solved_notebooks_with_every_nbgrader_tool(tmp_path):
    with _make("lab-instructor", tmp_path) as lab:
        assert "01_run_tensors_on_the_gpu.ipynb" in lab.names()
        assert not INSTRUCTOR_PLUGINS & lab.disabled_plugins()
        assert lab.request("formgrader")[0] != 404


def test_the_validate_answer_reads_like_nbgraders_dialog():
    """Pass: an empty result (nbgrader's 'Success!'); fail: one entry per failing test, unanswered
    written answer or changed locked cell; nothing graded: an error."""
    passed = Validation(cells=[CellVerdict("ex1_tests", "test", 2.0, "pass"), _answered("essay")])
    assert nbgrader_answer(passed) == {"success": True, "value": {}}
    failed = Validation(
        cells=[
            CellVerdict("ex1_tests", "test", 2.0, "pass"),
            CellVerdict("ex2_tests", "test", 3.0, "fail", "AssertionError: <b>x</b>"),
            CellVerdict("essay", "written answer", 1.0, "unanswered"),
        ],
        changed=["ex1_tests"],
        notes=["a note"],
    )
    answer = nbgrader_answer(failed)
    assert answer["success"] is True
    assert [entry["source"] for entry in answer["value"]["failed"]] == [
        "ex1_tests (locked cell)",
        "ex2_tests (3 pt)",
        "essay (1 pt)",
    ]
    changed, test, essay = answer["value"]["failed"]
    assert "grading uses the original" in changed["error"]
    assert "&lt;b&gt;x&lt;/b&gt;" in test["error"]  # the dialog sets innerHTML: escape
    assert essay["error"].startswith("you did not provide a response")
    assert "note: a note" in essay["error"] and "visible tests: 2 / 5 points" in essay["error"]
    nothing = nbgrader_answer(Validation(notes=["Cannot validate: the file is not valid JSON."]))
    assert nothing["success"] is False and "not valid JSON" in nothing["value"]


def _answered(grade_id: str) -> CellVerdict:
    return CellVerdict(grade_id, "written answer", 1.0, "answered")
