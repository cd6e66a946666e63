"""Drive JupyterLab and the course site in headless Chromium, as a learner would (`make browser-test`).

The pieces `tests/notebooks/test_browser.py` asserts on:

* ``LabServer``: `make lab` or `make lab-instructor` started on a free port with a token, in
  an environment of its own (``COURSE_QUICK=1`` so kernels run small sizes; throwaway Jupyter
  runtime, config, settings and workspace folders, so nothing of the user's is read or written).
* ``chromium(...)``: Debian's ``chromium`` (``shutil.which``), driven by Playwright, with
  the flags this machine needs and a fresh profile. Playwright's own browser download is
  never used.
* ``run_notebook(...)``: open one notebook in the lab, run it from JupyterLab's Run menu,
  save it, and report what the page shows: each cell's prompt and output text, the saved
  notebook (for the exact error of each cell), the lab's menus and sidebars, a screenshot.

"Run All Cells" stops at the first cell that raises (JupyterLab sends each cell with
``stop_on_error`` unless the cell is tagged ``raises-exception``:
``@jupyterlab/outputarea`` ``OutputArea.execute``), which is what a learner meets at the
first exercise they have not answered. The runner then selects the first cell that did not
run and uses "Run Selected Cell and All Below", until every code cell has an execution count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from tests.support.paths import ROOT
from tests.support.processes import free_port

TOKEN = "course-browser-test"
# Without the background-networking flags this machine refuses Chromium's connections many at a time.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 1000}
CELL = ".jp-NotebookPanel .jp-Notebook .jp-Cell"  # every cell of the open notebook (one per page)
# User settings of the throwaway labs: every cell attached to the page (the default windowing
# leaves cells outside the viewport out of the DOM), and no "fetch Jupyter news?" pop-up.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}

_CELLS_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')].map(cell => ({
    prompt: (cell.querySelector('.jp-InputPrompt') || {}).textContent || '',
    output: (cell.querySelector('.jp-OutputArea') || {}).textContent || '',
    images: cell.querySelectorAll('.jp-OutputArea img').length,
}))"""
# Ready: every cell attached and the kernel idle (the status bar reads "Python 3 (ipykernel) | Idle").
_READY_JS = """(count) => document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell').length === count
    && /\\|\\s*Idle/.test((document.querySelector('#jp-main-statusbar') || {}).textContent || '')"""
# Done: the cell the command started from has run, nothing is queued or running, the kernel is idle.
_DONE_JS = """(start) => {
    const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')]
        .map(cell => (cell.querySelector('.jp-InputPrompt') || {}).textContent || '');
    const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return /\\[\\d+\\]/.test(prompts[start]) && !prompts.some(p => p.includes('[*]'))
        && indicator !== null && indicator.getAttribute('data-status') === 'idle';
}"""
_CHROME_JS = """() => ({
    menus: [...document.querySelectorAll('#jp-menu-panel .lm-MenuBar-itemLabel')].map(e => e.textContent),
    sidebars: [...document.querySelectorAll('.jp-SideBar .lm-TabBar-tab')].map(e => e.getAttribute('title') || ''),
    toolbar: [...document.querySelectorAll('.jp-NotebookPanel-toolbar .jp-ToolbarButtonComponent')]
        .map(e => e.textContent.trim()).filter(Boolean),
})"""


class BrowserTestError(Exception):
    """Something the browser test needs is missing or did not start; the message says what to do."""


def chromium_path() -> str:
    """Debian's ``chromium`` on PATH (`make browser-test` installs it with apt-get when missing)."""
    path = shutil.which("chromium")
    if path is None:
        raise BrowserTestError(
            "no `chromium` on PATH: run `make browser-test` (it installs Debian's chromium with apt-get "
            "as root), or install it yourself (`apt-get install chromium`)"
        )
    return path


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator:
    """A Playwright browser context on the system Chromium, with a fresh user-data-dir at ``profile``."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium_path(),
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport=VIEWPORT,
        )
        try:
            yield context
        finally:
            await context.close()


@dataclass(eq=False)
class LabServer:
    """A `make lab` / `make lab-instructor` started by ``start_lab`` (compared by identity)."""

    target: str
    port: int
    root: Path  # the folder it serves
    log: Path
    process: subprocess.Popen

    def url(self, path: str) -> str:
        separator = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path}{separator}token={TOKEN}"

    def api(self, path: str, method: str = "GET", timeout: float = 30) -> object:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/{path}", method=method, headers={"Authorization": f"token {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_until_ready(self, timeout: float = 180) -> None:
        """Return once the server answers; raise with its log if it exits or takes longer than ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                tail = self.log.read_text()[-3000:]
                raise BrowserTestError(f"`make {self.target}` exited ({self.process.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                raise BrowserTestError(f"`make {self.target}` did not answer in {timeout:.0f} s; its log: {self.log}")
            with contextlib.suppress(OSError, ValueError):
                self.api("status", timeout=5)
                return
            time.sleep(0.5)

    def saved_notebook(self, relative: str) -> NotebookNode:
        """The notebook as JupyterLab saved it (contents API)."""
        model = self.api(f"contents/{urllib.parse.quote(relative)}?content=1")
        return nbformat.from_dict(model["content"])

    def shut_down_kernel(self, relative: str) -> None:
        """End the session (and its kernel) JupyterLab opened for ``relative``."""
        for session in self.api("sessions"):
            if session.get("path") == relative:
                self.api(f"sessions/{session['id']}", method="DELETE")


@contextlib.contextmanager
def start_lab(target: str, scratch: Path, root: Path, variables: dict[str, str]) -> Iterator[LabServer]:
    """Start ``make TARGET`` (a JupyterLab serving ``root``); stop it and its kernels on exit.

    It may still be starting when this yields: call ``wait_until_ready``. ``scratch`` receives
    the lab's Jupyter runtime, config, settings and workspaces folders and its log. The
    server's environment has ``COURSE_QUICK=1``.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    settings = scratch / "settings"
    for name, values in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    env = {
        **os.environ,
        "COURSE_QUICK": "1",
        "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
        "JUPYTER_CONFIG_DIR": str(scratch / "config"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"),
    }
    port = free_port()
    lab_args = f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.token={TOKEN}"
    log = scratch / f"{target}.log"
    command = ["make", "--no-print-directory", target, f"PORT={port}", f"LAB_ARGS={lab_args}"]
    command += [f"{name}={value}" for name, value in variables.items()]
    with log.open("w") as log_file:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield LabServer(target, port, root, log, process)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class CellSeen:
    """One cell as the page showed it after the run, with the saved notebook's record of it."""

    index: int
    cell: NotebookNode  # from the saved notebook: type, source, metadata, outputs
    prompt: str  # "[7]:", "[ ]:" or "" (markdown)
    output: str  # the text of its output area in the page
    images: int  # images in its output area

    @property
    def ran(self) -> bool:
        return _numbered(self.prompt)

    def describe(self) -> str:
        """``cell 12 (`def flops(...`)`` for messages."""
        first = next((line for line in self.cell.source.splitlines() if line.strip()), "")
        return f"cell {self.index} (`{first[:60]}`)"


@dataclass
class NotebookRun:
    """What running one notebook in the browser showed."""

    relative: str  # path inside the lab's folder
    seconds: float = 0.0
    cells: list[CellSeen] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the runner's own: timeouts, cells that would not run
    lab: dict[str, list[str]] = field(default_factory=dict)  # with inspect_lab: what ``_inspect_lab`` saw
    screenshot: Path | None = None


def _numbered(prompt: str) -> bool:
    """Whether a cell's prompt shows an execution count (``[7]:``), i.e. the cell ran."""
    return re.search(r"\[\d+\]", prompt) is not None


def _needs_run(nb: NotebookNode) -> list[int]:
    """Indexes of the code cells with something to run (JupyterLab does not number an empty cell)."""
    return [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and cell.source.strip()]


async def _menu(page, menu: str, item: str) -> None:
    """Click ``menu`` in the menu bar, then ``item`` in it."""
    await page.locator(f"#jp-menu-panel .lm-MenuBar-itemLabel:text-is('{menu}')").click()
    await page.locator(f".lm-Menu-itemLabel:text-is('{item}')").click()


async def _prompts(page) -> list[str]:
    return [cell["prompt"] for cell in await page.evaluate(_CELLS_JS)]


async def run_notebook(
    context,
    lab: LabServer,
    relative: str,
    screenshot: Path,
    *,
    timeout: float,
    workspace: str,
    inspect_lab: Path | None = None,
) -> NotebookRun:
    """Open ``relative`` in ``lab``, run every cell from the Run menu, save, and record the page.

    ``workspace`` names the JupyterLab workspace of this page (one per page, so that pages
    open side by side do not restore each other's tabs). With ``inspect_lab`` (a screenshot
    path), the lab's menus and sidebars are recorded first (``NotebookRun.lab``).
    """
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    run = NotebookRun(relative)
    start = time.monotonic()
    source = nbformat.read(lab.root / relative, as_version=4)
    to_run = _needs_run(source)
    page = await context.new_page()
    try:
        await page.goto(lab.url(f"lab/workspaces/{workspace}/tree/{urllib.parse.quote(relative)}"))
        await page.wait_for_function(_READY_JS, arg=len(source.cells), timeout=120_000, polling=500)
        if inspect_lab is not None:
            run.lab = await _inspect_lab(page, inspect_lab)
        todo = to_run[:1]
        command = ("Run", "Run All Cells")
        while todo:
            first = todo[0]
            if command[1] != "Run All Cells":
                await page.locator(CELL).nth(first).locator(".jp-InputPrompt").click()
            await _menu(page, *command)
            remaining = timeout - (time.monotonic() - start)
            try:
                await page.wait_for_function(_DONE_JS, arg=first, timeout=max(remaining, 1) * 1000, polling=500)
            except PlaywrightTimeout:
                prompts = await _prompts(page)
                busy = [i for i, p in enumerate(prompts) if "[*]" in p]
                run.problems.append(
                    f"still running after {timeout:.0f} s (cells {busy} show [*]; cell {first} was to run first)"
                )
                break
            prompts = await _prompts(page)
            if not _numbered(prompts[first]):
                run.problems.append(f"cell {first} did not run when asked (prompt {prompts[first]!r})")
                break
            todo = [i for i in to_run if not _numbered(prompts[i])]
            command = ("Run", "Run Selected Cell and All Below")
        await page.keyboard.press("Control+s")
        await page.wait_for_function(
            "() => !document.querySelector('.lm-TabBar-tab.jp-mod-dirty')", timeout=60_000, polling=250
        )
        seen = await page.evaluate(_CELLS_JS)
        saved = await asyncio.to_thread(lab.saved_notebook, relative)
        if len(seen) != len(saved.cells):
            run.problems.append(f"the page shows {len(seen)} cells, the saved notebook has {len(saved.cells)}")
        run.cells = [
            CellSeen(i, cell, shown["prompt"], shown["output"], shown["images"])
            for i, (cell, shown) in enumerate(zip(saved.cells, seen, strict=False))
        ]
        await _scroll_to_subject(page, run.cells)
    finally:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(screenshot))
        run.screenshot = screenshot
        await page.close()
        with contextlib.suppress(OSError, ValueError):
            await asyncio.to_thread(lab.shut_down_kernel, relative)
        run.seconds = time.monotonic() - start
    return run


async def _scroll_to_subject(page, cells: list[CellSeen]) -> None:
    """Scroll the screenshot's subject into view: the first error, else the first figure."""
    errors = [c.index for c in cells if any(o.get("output_type") == "error" for o in c.cell.get("outputs", []))]
    figures = [c.index for c in cells if c.images]
    for index in (errors or figures)[:1]:
        cell = page.locator(CELL).nth(index)
        await cell.evaluate("element => element.scrollIntoView({block: 'center'})")


async def _inspect_lab(page, screenshot: Path) -> dict[str, list[str]]:
    """The lab's menus, sidebar tabs, notebook toolbar buttons and Nbgrader menu items (empty when none).

    The screenshot shows the lab with the Nbgrader menu open where there is one.
    """
    seen = await page.evaluate(_CHROME_JS)
    menu = page.locator("#jp-menu-panel .lm-MenuBar-itemLabel:text-is('Nbgrader')")
    seen["nbgrader_menu"] = []
    if await menu.count():
        await menu.click()
        seen["nbgrader_menu"] = await page.locator(".lm-Menu-content .lm-Menu-itemLabel").all_text_contents()
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(screenshot))
    await page.keyboard.press("Escape")
    return seen
