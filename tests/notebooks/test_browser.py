"""The course as learners and instructors meet it: in JupyterLab, in a real browser, and on the course site.

`make browser-test` (`.ci/run` calls it) sets ``COURSE_BROWSER_TEST=1`` and runs this file;
`make test` skips it. It starts two labs with the Makefile's own targets, each on a
throwaway copy: `make lab` on a new learner workspace (the student versions, the learner's
Jupyter configuration) and `make lab-instructor` on a copy of ``notebooks/`` (the solved
versions). Headless Chromium opens every notebook of each (``tests/support/browser.py`` drives it),
runs every cell from the Run menu and saves. Then:

* in the learner's lab the only cells that show an error are the exercises' solution and
  test cells, and every test cell shows one (nothing is answered yet);
* in the instructor's lab no cell shows an error;
* the learner's lab has no nbgrader instructor tools (Nbgrader menu with Formgrader, Create
  Assignment sidebar) where the instructor's has them, and both have the Validate button;
* the course site (`make site`, in ``build/site/html``) renders its course map and a
  notebook page with figures and math, from local files only, and a notebook page that a
  kept GPU run holds shows that run's outputs beside the build's own, side by side, each
  column naming its machine, torch version and date.

Every page leaves a screenshot in ``build/browser-test/`` (``BROWSER_TEST_SHOTS``), and
``summary.txt`` there lists each notebook's time in the browser. ``BROWSER_TEST_JOBS``
(default 2) notebooks run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import itertools
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.browser import (
    NotebookRun,
    chromium,
    run_notebook,
    start_lab,
)
from tests.support.nbtools import error_of, is_solution_cell, is_test_cell, nbgrader_meta
from tests.support.paths import ROOT
from tools.repo_url import repository_url, slug

RELEASE = ROOT / "grading" / "course" / "release"
STUDENT = sorted(p.relative_to(RELEASE).as_posix() for p in RELEASE.glob("[0-9][0-9]_*/*.ipynb"))
SOLVED = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SITE = ROOT / "build" / "site" / "html"
SHOTS = Path(os.environ.get("BROWSER_TEST_SHOTS", ROOT / "build" / "browser-test"))
JOBS = int(os.environ.get("BROWSER_TEST_JOBS", "2"))
NOTEBOOK_TIMEOUT = 600  # seconds for one notebook in the browser, page load and kernel start included

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_BROWSER_TEST") != "1",
    reason="drives Chromium through every notebook (minutes): `make browser-test`",
)


@dataclass
class BrowserSession:
    learner: dict[str, NotebookRun]  # by path in the workspace
    solved: dict[str, NotebookRun]  # by file name in notebooks/
    learner_lab: dict[str, list[str]]  # menus, sidebars, toolbar, nbgrader_menu (browser._inspect_lab)
    instructor_lab: dict[str, list[str]]


async def _run_everything(learner_lab, instructor_lab, student, solved, profile: Path) -> BrowserSession:
    """Every selected notebook of both labs, ``JOBS`` at a time; the first of each lab also inspects the lab."""
    learner = [(learner_lab, path, SHOTS / "learner" / f"{Path(path).stem}.png") for path in student or STUDENT[:1]]
    instructor = [(instructor_lab, name, SHOTS / "solved" / f"{Path(name).stem}.png") for name in solved or SOLVED[:1]]
    jobs = [job for pair in itertools.zip_longest(learner, instructor) for job in pair if job]  # the labs alternate
    first_of_lab = {learner[0]: SHOTS / "learner-lab.png", instructor[0]: SHOTS / "instructor-lab.png"}
    slots = asyncio.Semaphore(JOBS)

    async def one(number: int, job: tuple) -> NotebookRun:
        lab, relative, shot = job
        async with slots:
            try:
                return await run_notebook(
                    context,
                    lab,
                    relative,
                    shot,
                    timeout=NOTEBOOK_TIMEOUT,
                    workspace=f"run{number}",
                    inspect_lab=first_of_lab.get(job),
                )
            except Exception as error:  # a page that never loaded: report it with the others
                return NotebookRun(relative, problems=[f"the browser run stopped: {type(error).__name__}: {error}"])

    async with chromium(profile) as context:
        runs = await asyncio.gather(*(one(number, job) for number, job in enumerate(jobs)))
    by_job = dict(zip(jobs, runs, strict=True))
    return BrowserSession(
        {job[1]: by_job[job] for job in learner},
        {job[1]: by_job[job] for job in instructor},
        by_job[learner[0]].lab,
        by_job[instructor[0]].lab,
    )


def _write_summary(session: BrowserSession) -> None:
    lines = [f"{'seconds':>8}  lab         notebook"]
    for lab, runs in (("learner", session.learner), ("instructor", session.solved)):
        lines += [f"{run.seconds:8.1f}  {lab:<10}  {path}" for path, run in runs.items()]
    (SHOTS / "summary.txt").write_text("\n".join(lines) + "\n")


def _selected(session: pytest.Session, parameter: str) -> list[str]:
    """The notebooks whose tests this run selected (``-k 05_`` runs notebook 05 only)."""
    chosen = set()
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and parameter in callspec.params:
            chosen.add(callspec.params[parameter])
    return sorted(chosen)


@pytest.fixture(scope="module")
def browser_run(request, tmp_path_factory) -> BrowserSession:
    """Both labs, and every selected notebook run in Chromium (once for the whole module)."""
    assert STUDENT and SOLVED, "no notebooks found in grading/course/release/ or notebooks/"
    student, solved = _selected(request.session, "relative"), _selected(request.session, "name")
    scratch = tmp_path_factory.mktemp("browser")
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    notebooks = scratch / "notebooks"
    shutil.copytree(ROOT / "notebooks", notebooks, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    workspace = scratch / "workspace"  # `make lab` creates it from grading/course/release/
    # Install (or check) .venv once, so that the two labs' `make` do not both reinstall it at once.
    subprocess.run(["make", "--no-print-directory", "install"], cwd=ROOT, check=True, capture_output=True)
    with (
        start_lab("lab", scratch / "learner-lab", workspace, {"WORKSPACE": str(workspace)}) as learner_lab,
        start_lab("lab-instructor", scratch / "instructor-lab", notebooks, {"NOTEBOOK_DIR": str(notebooks)}) as ilab,
    ):
        learner_lab.wait_until_ready()
        ilab.wait_until_ready()
        session = asyncio.run(_run_everything(learner_lab, ilab, student, solved, scratch / "chromium-profile"))
    _write_summary(session)
    return session


def _problems(run: NotebookRun, *, student: bool) -> list[str]:
    """What is wrong with what the page showed: errors outside the exercises, cells that never ran."""
    problems = list(run.problems)
    for seen in run.cells:
        cell = seen.cell
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if not seen.ran:
            problems.append(f"{seen.describe()} never ran (its prompt reads {seen.prompt.strip()!r})")
            continue
        error = error_of(cell)
        exercise = is_solution_cell(cell) or is_test_cell(cell)
        if error and not (student and exercise):
            where = "outside the exercises" if student else "in the solved notebook"
            problems.append(f"{seen.describe()} shows an error {where}: {error}")
        if error and error.split(":")[0] not in seen.output:
            problems.append(f"{seen.describe()}: the saved notebook has {error!r}, the page does not show it")
        if student and is_test_cell(cell) and not error:
            problems.append(f"{seen.describe()}: test {nbgrader_meta(cell).get('grade_id')} passes with no answer")
        for warning in ("DeprecationWarning", "FutureWarning"):
            if warning in seen.output:
                problems.append(f"{seen.describe()} shows a {warning}: {seen.output.strip()[:300]}")
    if not run.cells and not problems:
        problems.append("the page showed no cells")
    return problems


@pytest.mark.parametrize("relative", STUDENT, ids=lambda path: path.split("/")[0])
def test_student_notebook_runs_in_the_learners_lab_with_errors_only_in_the_exercises(browser_run, relative):
    run = browser_run.learner[relative]
    problems = _problems(run, student=True)
    assert not problems, f"{relative} in the learner's lab (screenshot {run.screenshot}):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name", SOLVED, ids=lambda name: name.split(".")[0])
def test_solved_notebook_runs_in_the_instructors_lab_without_errors(browser_run, name):
    run = browser_run.solved[name]
    problems = _problems(run, student=False)
    assert not problems, f"notebooks/{name} (screenshot {run.screenshot}):\n  " + "\n  ".join(problems)


def test_the_learners_lab_has_no_instructor_tools_and_the_instructors_has_them(browser_run):
    learner, instructor = browser_run.learner_lab, browser_run.instructor_lab
    # What nbgrader adds to a lab, seen in the instructor's: the learner's must not show it.
    assert "Nbgrader" in instructor["menus"], instructor["menus"]
    assert "Formgrader" in instructor["nbgrader_menu"], instructor["nbgrader_menu"]
    assert any("Create Assignment" in title for title in instructor["sidebars"]), instructor["sidebars"]
    assert "Nbgrader" not in learner["menus"] and learner["nbgrader_menu"] == []
    assert not any("Create Assignment" in title for title in learner["sidebars"]), learner["sidebars"]
    assert set(instructor["menus"]) - set(learner["menus"]) == {"Nbgrader"}
    assert "Validate" in learner["toolbar"] and "Validate" in instructor["toolbar"]


# --- the course site ---------------------------------------------------------------------------


@contextlib.contextmanager
def _serve(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on a free local port, as GitHub Pages would serve it."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _colab_url(stem: str) -> str:
    return (
        f"https://colab.research.google.com/github/{slug(repository_url(ROOT))}"
        f"/blob/main/grading/course/release/{stem}/{stem}.ipynb"
    )


def _page_with_figures_and_math() -> str:
    """The first notebook page of the built site that has a figure and typeset math (else the first)."""
    pages = [SITE / f"{Path(name).stem}.html" for name in SOLVED]
    for page in pages:
        html = page.read_text(encoding="utf-8") if page.exists() else ""
        if re.search(r'<img[^>]+src="_images/', html) and 'class="math' in html:
            return page.name
    return pages[0].name


# Sphinx marks each formula "math notranslate"; MathJax 2 puts its rendering (span.MathJax) inside it.
_TYPESET_JS = """(() => {
    const math = [...document.querySelectorAll('article .math.notranslate')];
    return {math: math.length, typeset: math.filter(m => m.querySelector('.MathJax, .MathJax_Display')).length,
            mathjax_message: (document.getElementById('MathJax_Message') || {}).textContent || ''};
})()"""


async def _check_site(base: str, profile: Path) -> dict:
    seen: dict = {"requests": []}
    async with chromium(profile) as context:
        page = await context.new_page()
        page.on("request", lambda request: seen["requests"].append(request.url))
        await page.goto(f"{base}/index.html", wait_until="networkidle")
        seen["index_title"] = await page.title()
        seen["index_links"] = await page.eval_on_selector_all("article a", "links => links.map(a => a.href)")
        await page.screenshot(path=str(SHOTS / "site-index.png"), full_page=True)

        name = _page_with_figures_and_math()
        await page.goto(f"{base}/{name}", wait_until="networkidle")
        with contextlib.suppress(Exception):  # an untypeset page is reported below
            await page.wait_for_function(f"() => {_TYPESET_JS}.typeset === {_TYPESET_JS}.math", timeout=60_000)
        seen["page"] = name
        seen["h1"] = await page.locator("article h1").first.text_content()
        seen["page_links"] = await page.eval_on_selector_all("article a", "links => links.map(a => a.href)")
        seen["figures"] = await page.eval_on_selector_all(
            "article .cell_output img", "imgs => imgs.map(img => img.complete && img.naturalWidth > 0)"
        )
        seen.update(await page.evaluate(f"() => {_TYPESET_JS}"))
        seen["solutions"] = await page.locator("article details summary", has_text="solution").count()
        await page.screenshot(path=str(SHOTS / f"site-{Path(name).stem}.png"))
        first_figure = page.locator("article .cell_output img").first
        if await first_figure.count():
            await first_figure.evaluate("element => element.scrollIntoView({block: 'center'})")
            await page.screenshot(path=str(SHOTS / f"site-{Path(name).stem}-figure.png"))
    return seen


def test_the_course_site_renders_its_map_and_a_notebook_page_from_local_files(tmp_path):
    assert (SITE / "index.html").exists(), f"no site in {SITE}: run `make site` first (`make browser-test` does)"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with _serve(SITE) as base:
        seen = asyncio.run(_check_site(base, tmp_path / "chromium-profile"))

    for name in SOLVED:  # the course map links every notebook's page and its Colab version
        stem = Path(name).stem
        assert f"{base}/{stem}.html" in seen["index_links"], f"the course map does not link {stem}.html"
        assert _colab_url(stem) in seen["index_links"], f"the course map has no Colab link for {stem}"
    assert f"{base}/instructor-guide.html" in seen["index_links"], "the course map does not link the instructor guide"

    stem = Path(seen["page"]).stem
    assert seen["h1"] and seen["h1"].strip().startswith(stem[:2]), f"{seen['page']}: title {seen['h1']!r}"
    assert _colab_url(stem) in seen["page_links"], f"{seen['page']} has no Colab link to the student version"
    assert seen["figures"] and all(seen["figures"]), f"{seen['page']}: figures that did not load: {seen['figures']}"
    assert seen["typeset"] == seen["math"], (
        f"{seen['page']}: MathJax typeset {seen['typeset']} of {seen['math']} formulas ({seen['mathjax_message']!r})"
    )
    assert "fail" not in seen["mathjax_message"].lower(), f"{seen['page']}: MathJax says {seen['mathjax_message']!r}"
    assert seen["solutions"], f"{seen['page']}: no folded solution ('Show the solution')"
    outside = sorted({url for url in seen["requests"] if not url.startswith((base, "data:", "blob:", "about:"))})
    assert not outside, f"the site loaded files from outside it (it must work offline): {outside}"


# Each column of the first side-by-side output: its header, where it stands, and whether its figures loaded.
_COLUMNS_JS = """(grid) => [...grid.children].map(column => {
    const box = column.getBoundingClientRect();
    return {head: (column.querySelector('.machine-name') || {}).textContent || '', x: box.x, y: box.y,
            width: box.width, images: [...column.querySelectorAll('img')].map(i => i.complete && i.naturalWidth > 0),
            kept: column.classList.contains('kept-run')};
})"""


# Resolves once every figure of the element has loaded or failed (or after 10 s): then `complete` says which.
_IMAGES_SETTLED_JS = """(element) => Promise.all([...element.querySelectorAll('img')].map(image => image.complete
    ? null : new Promise(done => { image.addEventListener('load', done); image.addEventListener('error', done);
                                    setTimeout(done, 10000); })))"""


async def _check_side_by_side(base: str, profile: Path, stem: str) -> dict:
    seen: dict = {"requests": []}
    async with chromium(profile) as context:
        page = await context.new_page()
        page.on("request", lambda request: seen["requests"].append(request.url))
        await page.goto(f"{base}/{stem}.html", wait_until="networkidle")
        grids = page.locator("div.outputs-by-machine")
        seen["grids"] = await grids.count()
        seen["note"] = await page.locator("article .admonition", has_text="Outputs per machine").count()
        seen["toc"] = await page.locator(".bd-sidebar-secondary .page-toc").count()
        figure = page.locator("div.outputs-by-machine:has(.kept-run img)").first
        grid = figure if await figure.count() else grids.first
        await grid.evaluate("element => element.scrollIntoView({block: 'center'})")
        await grid.evaluate(_IMAGES_SETTLED_JS)  # the figures are lazy: they load once scrolled into view
        seen["columns"] = await grid.evaluate(_COLUMNS_JS)
        await page.screenshot(path=str(SHOTS / f"site-{stem}-machines.png"))
    return seen


def test_the_site_shows_each_kept_gpu_runs_outputs_beside_the_builds_own(tmp_path):
    from tools import gpu_runs

    assert (SITE / "index.html").exists(), f"no site in {SITE}: run `make site` first (`make browser-test` does)"
    run = gpu_runs.kept_runs()[0]
    stem = next(Path(name).stem for name in SOLVED if run.notebook(name[:2]) is not None)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with _serve(SITE) as base:
        seen = asyncio.run(_check_side_by_side(base, tmp_path / "chromium-profile", stem))

    assert seen["grids"] > 0 and seen["note"] == 1, f"{stem}: no outputs per machine ({seen['grids']} grids)"
    assert seen["toc"] == 0, f"{stem}: the page TOC takes the margin the columns need"
    mine, kept = seen["columns"][0], seen["columns"][1]
    assert mine["head"].startswith("This site's build: ") and " · torch " in mine["head"] and not mine["kept"]
    info = run.info
    assert kept["kept"] and f"{info['gpu']} · torch {info['torch']} · {info['date']}" in kept["head"]
    assert f"commit {info['commit']}" in kept["head"]
    assert abs(mine["y"] - kept["y"]) < 2 and mine["x"] + mine["width"] <= kept["x"], "the columns are not side by side"
    assert min(mine["width"], kept["width"]) > 400, f"columns too narrow to read a table: {seen['columns']}"
    assert all(kept["images"]), f"{stem}: a kept figure did not load"
    outside = sorted({url for url in seen["requests"] if not url.startswith((base, "data:", "blob:", "about:"))})
    assert not outside, f"the page loaded files from outside the site (it must work offline): {outside}"
