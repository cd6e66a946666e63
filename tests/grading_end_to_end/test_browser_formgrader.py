"""The formgrader in real Chromium runs nothing a learner wrote (`make browser-test`).

A class (alice honest, mallory hostile: ``tests/support/hostile_html.py``) is graded with ``course
autograde``; then the instructor's Jupyter server is started as grading/README.md's
"Manual grading" says (in the course directory, ``JUPYTER_CONFIG_PATH`` on
``jupyter/instructor``), on 127.0.0.1, a free port and a token, and headless Chromium
opens the formgrader's view of each of mallory's notebooks, as an instructor grading by hand.

Mallory's scripts, had any run, would set ``data-pwned`` on the page's ``<html>``, load an
image from a server this test listens on (the "beacon"), and ask the Jupyter server for a
terminal with the instructor's cookie and ``_xsrf`` token (the attack that gave its author
full marks and ran ``id`` as root). The test asserts: no mark, no beacon request, no
terminal (``/api/terminals`` empty), the gradebook exactly as autograde left it, while
the page shows mallory's ``<script>`` as text and her PNG plot as an image.

``visit`` is the whole scenario, so it can be run against the code before this defence
(``config_path=None`` and an autograded notebook written without ``make_safe_to_read``):
there the mark is set and the beacon is hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from tests.support.browser import TOKEN, chromium
from tests.support.hostile_html import MARK, PNG, build_hostile_class, hostile_notebook, written_answer
from tests.support.paths import ROOT
from tests.support.processes import free_port

INSTRUCTOR_CONFIG = ROOT / "jupyter" / "instructor"

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_BROWSER_TEST") != "1",
    reason="starts a Jupyter server and drives Chromium: `make browser-test`",
)


@contextlib.contextmanager
def beacon() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server recording every request: (its URL, the paths it was asked for)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/beacon", hits
    finally:
        server.shutdown()
        server.server_close()


def grades(course) -> dict[tuple, object]:
    """Every score and comment of the gradebook, keyed by (student, notebook, cell, what)."""
    found: dict[tuple, object] = {}
    with course.gradebook() as gb:
        for sub in gb.find_assignment("ps1").submissions:
            for nb in sub.notebooks:
                for grade in nb.grades:
                    key = (sub.student.id, nb.name, grade.cell.name)
                    found[(*key, "auto")] = grade.auto_score
                    found[(*key, "manual")] = grade.manual_score
                    found[(*key, "extra")] = grade.extra_credit
                for comment in nb.comments:
                    found[(sub.student.id, nb.name, comment.cell.name, "comment")] = comment.manual_comment
    return found


@contextlib.contextmanager
def instructor_server(course_root: Path, scratch: Path, config_path: Path | None) -> Iterator[int]:
    """``cd COURSE && JUPYTER_CONFIG_PATH=jupyter/instructor .venv/bin/jupyter lab`` on 127.0.0.1; yields its port."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
        "JUPYTER_CONFIG_DIR": str(scratch / "config"),
        "JUPYTERLAB_SETTINGS_DIR": str(scratch / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"),
    }
    env.pop("JUPYTER_CONFIG_PATH", None)
    if config_path is not None:
        env["JUPYTER_CONFIG_PATH"] = str(config_path)
    port = free_port()
    command = [str(ROOT / ".venv" / "bin" / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1"]
    command += [f"--port={port}", f"--ServerApp.token={TOKEN}"]
    command += ["--allow-root"] if os.getuid() == 0 else []
    log = scratch / "jupyter.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            command, cwd=course_root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                api(port, "status")
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not answer in 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def api(port: int, path: str) -> object:
    import json

    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/{path}", headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


async def _open(port: int, submission_ids: list[str], profile: Path, shots: Path | None) -> list[dict]:
    seen = []
    async with chromium(profile) as context:
        page = await context.new_page()
        # as an instructor does: JupyterLab first (its login cookie and ``_xsrf`` token), then the formgrader
        await page.goto(f"http://127.0.0.1:{port}/lab?token={TOKEN}", wait_until="load", timeout=60_000)
        for submission in submission_ids:
            url = f"http://127.0.0.1:{port}/formgrader/submissions/{submission}/"
            await page.goto(url, wait_until="load", timeout=60_000)
            await page.wait_for_timeout(3000)  # time for any script, handler or late load to act
            plots = await page.evaluate(
                "(png) => [...document.images].filter(i => i.src.includes(png) && i.naturalWidth > 0).length",
                PNG[:40],
            )
            seen.append(
                {
                    "mark": await page.evaluate(f"document.documentElement.getAttribute('{MARK}')"),
                    "text": await page.evaluate("document.body.innerText"),
                    "plots": plots,
                    "title": await page.title(),
                }
            )
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(shots / f"formgrader-{submission}.png"), full_page=True)
    return seen


def visit(course, scratch: Path, hits: list[str], config_path: Path | None, shots: Path | None = None) -> dict:
    """Open each of mallory's notebooks in the formgrader; what the page and the server show afterwards."""
    with course.gradebook() as gb:
        ids = [gb.find_submission_notebook(name, "ps1", "mallory").id for name in ("essay", "problems")]
    before = grades(course)
    with instructor_server(course.root, scratch / "server", config_path) as port:
        pages = asyncio.run(_open(port, ids, scratch / "profile", shots))
        terminals = api(port, "terminals")
    return {"pages": pages, "terminals": terminals, "hits": list(hits), "grades_kept": grades(course) == before}


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    from grading.autograde import autograde

    tmp = tmp_path_factory.mktemp("formgrader")
    with beacon() as (url, hits):
        course = build_hostile_class(tmp, url)["course"]
        summary = autograde(course, jobs=1, progress=False)
        assert not summary.errors, summary.line()
        yield {"course": course, "hits": hits, "tmp": tmp, "beacon": url}


def test_the_formgrader_runs_no_learner_script(hostile_class):
    shots = Path(os.environ.get("BROWSER_TEST_SHOTS", ROOT / "build" / "browser-test"))
    seen = visit(hostile_class["course"], hostile_class["tmp"], hostile_class["hits"], INSTRUCTOR_CONFIG, shots)
    essay, problems = seen["pages"]
    assert [page["mark"] for page in seen["pages"]] == [None, None]
    assert seen["hits"] == []
    assert seen["terminals"] == []
    assert seen["grades_kept"]
    assert "My answer: y is x plus three." in essay["text"]
    assert "<script>document.documentElement" in essay["text"]  # the instructor reads what mallory wrote
    assert essay["plots"] >= 1  # her PNG plot shows
    assert 'ValueError: <img src=x onerror="document' in problems["text"]


def test_the_instructor_config_protects_a_notebook_graded_without_this_grader(hostile_class):
    """Layer two: an autograded notebook that never went through ``make_safe_to_read`` (plain nbgrader's).

    Mallory's essay is put back as plain nbgrader writes it (her answer as she wrote it, her
    outputs with their scripts and an image ``width`` that leaves its attribute): the server's
    ``jupyter/instructor`` configuration alone must keep it inert.
    """
    course = hostile_class["course"]
    path = course.folder("autograded", "ps1", "mallory") / "essay.ipynb"
    kept = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    url = hostile_class["beacon"]
    next(
        c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "q1_answer"
    ).source = written_answer(url)
    nb.cells.append(hostile_notebook(url).cells[2])
    try:
        path.write_text(nbformat.writes(nb))
        seen = visit(course, hostile_class["tmp"] / "plain", hostile_class["hits"], INSTRUCTOR_CONFIG)
    finally:
        path.write_bytes(kept)
    assert [page["mark"] for page in seen["pages"]] == [None, None]
    assert seen["hits"] == [] and seen["terminals"] == [] and seen["grades_kept"]
    assert "<script>document.documentElement" in seen["pages"][0]["text"]
