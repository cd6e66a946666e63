"""The kept GPU runs on the course site: each notebook's outputs per machine, side by side.

A notebook page shows the outputs of the site's own build (this machine's CPU, run by
MyST-NB when the site is built). Below each code cell that a kept GPU run
(``notebooks/gpu-runs/``, read by ``tools/gpu_runs.py``) also printed, the page puts the
outputs side by side, one column per machine, each headed with the machine, its torch
version and the date of its run.

A kept run was made from an older commit, so its cells are matched to today's by cell id
(by identical code where ids are missing), and a column whose cell's code changed since the
run says so and shows the code that printed it (never for solution or test cells, whose code
the site does not show). A kept cell that today's notebook no longer has is not shown; the
page says how many there are.

Two halves:

* ``prepare_page`` (called by ``docs/build_site.py`` while it writes the Sphinx sources) adds a
  note under the page's title, renders each kept cell's outputs to HTML (figures become files
  in ``_static/kept-runs/``) and writes them, by the page's cell index, to a JSON file outside
  the Sphinx sources, so that a new kept run never changes the notebook MyST-NB executes (nor
  its cache key);
* ``setup`` is the Sphinx extension: when a notebook page has been read (and run), it wraps
  each such cell's own output and the kept ones in a grid (``.outputs-by-machine``), heading
  the first column with this machine and the day MyST-NB ran the notebook.
"""

from __future__ import annotations

import base64
import datetime
import difflib
import html
import json
import re
from collections.abc import Callable
from pathlib import Path

from nbformat import NotebookNode
from nbformat.v4 import new_markdown_cell

from tools.gpu_runs import KeptRun

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
IMAGES = {"image/png": "png", "image/jpeg": "jpg"}
GRID_CLASS = "outputs-by-machine"
RUNS_PAGE = "gpu-runs"
SIMILAR = 0.6  # difflib ratio of two cells' words from which they are the same cell, edited
ImageWriter = Callable[[int, str, bytes], str]  # (output index, file extension, bytes) -> the image's URL


def run_target(run: KeptRun) -> str:
    """The run's label on the runs page (also its HTML id).

    >>> from pathlib import Path
    >>> run_target(KeptRun(Path("h200-torch2.11-d393fde"), {}))
    'kept-run-h200-torch2-11-d393fde'
    """
    return "kept-run-" + re.sub(r"[^a-z0-9]+", "-", run.name.lower()).strip("-")


def run_label(run: KeptRun) -> str:
    """``NVIDIA H200 · torch 2.11.0+cu130 · 2026-11-26``."""
    return f"{run.info['gpu']} · torch {run.info['torch']} · {run.info['date']}"


def _same_code(a: str, b: str) -> bool:
    return a.strip() == b.strip()


def _similar(a: str, b: str) -> bool:
    """Close enough to be the same cell, edited: difflib's ratio of their words at least ``SIMILAR``.

    Words (names, keywords, numbers), not characters: as telling, and far faster on long
    cells. On the kept H200 run's notebooks against those of a day later, cells edited in
    place scored 0.67 to 0.69 and unrelated pairs at most 0.35.
    """
    words = re.compile(r"\w+")
    return difflib.SequenceMatcher(None, words.findall(a), words.findall(b), autojunk=False).ratio() >= SIMILAR


def match_cells(source: NotebookNode, kept: NotebookNode) -> dict[int, int]:
    """Today's code cell index -> the kept run's code cell index, for the cells that are the same cell.

    The two lists of code cells are aligned in order (difflib): identical code matches; in a
    stretch that differs, a cell matches the next kept cell of similar code (``SIMILAR``). Cell
    ids are not trusted: a notebook's ids may be positions, reused by other cells after an edit.

    >>> from nbformat.v4 import new_code_cell as c, new_notebook as nb
    >>> today = nb(cells=[c("a = 1"), c("print(a + 1)"), c("brand_new()"), c("plot(a)")])
    >>> then = nb(cells=[c("a = 1"), c("print(a + 2)"), c("removed_since()"), c("plot(a)")])
    >>> match_cells(today, then)
    {0: 0, 3: 3, 1: 1}
    """
    mine = [i for i, cell in enumerate(source.cells) if cell.cell_type == "code"]
    theirs = [i for i, cell in enumerate(kept.cells) if cell.cell_type == "code"]
    codes = [source.cells[i].source.strip() for i in mine], [kept.cells[j].source.strip() for j in theirs]
    matched: dict[int, int] = {}
    blocks = difflib.SequenceMatcher(None, *codes, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, _ in blocks:
        if tag == "equal":
            matched.update({mine[i1 + k]: theirs[j1 + k] for k in range(i2 - i1)})
    for tag, i1, i2, j1, j2 in blocks:
        if tag != "replace":
            continue
        j = j1
        for i in range(i1, i2):
            twin = next((k for k in range(j, j2) if _similar(codes[0][i], codes[1][k])), None)
            if twin is not None:
                matched[mine[i]] = theirs[twin]
                j = twin + 1
    return matched


def _text(text: str | list[str]) -> str:
    return ANSI.sub("", "".join(text) if isinstance(text, list) else text)


def _pre(text: str, kind: str) -> str:
    return (
        f'<div class="output {kind} highlight-none notranslate"><div class="highlight"><pre>'
        f"{html.escape(text)}</pre></div></div>"
    )


def outputs_html(outputs: list, image_path: ImageWriter, alt: str) -> str:
    """The outputs of one cell as HTML: text escaped; figures as files (``image_path`` writes one, gives its URL)."""
    parts: list[str] = []
    streams: list[tuple[str, str]] = []  # consecutive stream outputs merged, as MyST-NB does (nb_merge_streams)

    def flush() -> None:
        for name in ("stdout", "stderr"):
            text = "".join(t for n, t in streams if n == name)
            if text:
                parts.append(_pre(text, "stream" if name == "stdout" else "stderr"))
        streams.clear()

    for k, output in enumerate(outputs):
        kind = output.get("output_type")
        if kind == "stream":
            streams.append((output.get("name", "stdout"), _text(output.get("text", ""))))
            continue
        flush()
        if kind == "error":
            parts.append(_pre(_text("\n".join(output.get("traceback", [])) or output.get("evalue", "")), "error"))
            continue
        data = output.get("data", {})
        image = next((mime for mime in IMAGES if mime in data), None)
        if image is not None:
            url = image_path(k, IMAGES[image], base64.b64decode(data[image]))
            parts.append(f'<img src="{html.escape(url)}" alt="{html.escape(alt)}" loading="lazy">')
        elif "text/plain" in data:
            parts.append(_pre(_text(data["text/plain"]), "text_plain"))
    flush()
    return "\n".join(parts)


def _graded(cell: NotebookNode) -> bool:
    """A solution or test cell: its code (hidden tests, solutions) is not for the site."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade"))


def kept_column(run: KeptRun, today: NotebookNode, then: NotebookNode, image_path: ImageWriter) -> str:
    """One kept run's column for one cell."""
    label = html.escape(run_label(run))
    anchor = f"{RUNS_PAGE}.html#{run_target(run)}"
    head = (
        f'<p class="machine-name">{label} <a class="machine-run" href="{anchor}">kept run, commit '
        f"{html.escape(run.info['commit'])}</a></p>"
    )
    note = ""
    if not _same_code(today.source, then.source):
        note = (
            '<p class="machine-note code-changed">This cell\'s code changed since that run: below is what the '
            f"code of commit {html.escape(run.info['commit'])} printed, not today's.</p>"
        )
        if not _graded(then):
            note += f"<details><summary>The code then</summary><pre>{html.escape(then.source)}</pre></details>"
    body = outputs_html(then.get("outputs", []), image_path, f"what the cell printed on the {run.info['gpu']}")
    return f'<div class="machine-output kept-run">{head}{note}{body}</div>'


def prepare_page(
    page: NotebookNode, source: NotebookNode, stem: str, runs: list[KeptRun], static: Path
) -> tuple[NotebookNode, dict]:
    """``page`` with the note about its kept runs, and the columns to place (``{"cells": {index: [html]}}``).

    ``source`` is the notebook as stored (``page`` is the site's version of it, same cell ids);
    figures are written under ``static`` (the site's ``_static/kept-runs``).
    """
    number = stem[:2]
    holding = [run for run in runs if run.notebook(number) is not None]
    if not holding:
        return page, {}
    written: list[Path] = []
    columns: dict[int, list[str]] = {}
    unmatched: dict[str, int] = {}
    by_id = {cell.get("id"): i for i, cell in enumerate(source.cells) if cell.get("id")}
    for run in holding:
        then = run.notebook(number)
        matched = match_cells(source, then)
        kept_with_output = {i for i, c in enumerate(then.cells) if c.cell_type == "code" and c.get("outputs")}
        unmatched[run.name] = len(kept_with_output - set(matched.values()))
        for page_index, cell in enumerate(page.cells):
            source_index = by_id.get(cell.get("id"))
            if cell.cell_type != "code" or source_index not in matched or matched[source_index] not in kept_with_output:
                continue
            kept_index = matched[source_index]

            def image_path(k: int, extension: str, data: bytes, run=run, kept_index=kept_index) -> str:
                path = static / run.name / f"{stem}-cell{kept_index}-{k}.{extension}"
                path.parent.mkdir(parents=True, exist_ok=True)
                if not path.exists() or path.read_bytes() != data:
                    path.write_bytes(data)
                written.append(path)
                return path.relative_to(static.parent.parent).as_posix()

            column = kept_column(run, source.cells[source_index], then.cells[kept_index], image_path)
            columns.setdefault(page_index, []).append(column)
    at = _after_title(page)
    page.cells.insert(at, new_markdown_cell(_note(holding, unmatched)))
    shifted = {index + (index >= at): html_ for index, html_ in columns.items()}
    return page, {"cells": {str(i): c for i, c in shifted.items()}, "images": [p.as_posix() for p in written]}


def _after_title(page: NotebookNode) -> int:
    """Where the note goes: after the first markdown cell (the title, the Colab link, the summary)."""
    first = next((i for i, cell in enumerate(page.cells) if cell.cell_type == "markdown"), -1)
    return first + 1


def _note(runs: list[KeptRun], unmatched: dict[str, int]) -> str:
    names = "; ".join(f"{{ref}}`{run_label(run)} <{run_target(run)}>` (commit {run.info['commit']})" for run in runs)
    lost = [
        f"{count} of the {run.info['gpu']} run's cells with output" for run in runs if (count := unmatched[run.name])
    ]
    gone = f" Not shown: {', '.join(lost)}, which this notebook no longer has." if lost else ""
    return (
        f"```{{admonition}} Outputs per machine\n:class: note outputs-note\n"
        f"Below each code cell that a kept GPU run also printed, this page shows the outputs side by side: "
        f"this site's own build first, then {names}. A kept run printed what the notebook's code *of its commit* "
        f"printed; where a cell's code changed since, its column says so.{gone}\n```"
    )


# --- the Sphinx extension ---------------------------------------------------------------------------


def _built_on(env, docname: str) -> str:
    """The day MyST-NB ran the notebook (from its cache record), or today's."""
    data = getattr(env, "nb_metadata", {}).get(docname, {}).get("exec_data") or {}
    mtime = data.get("mtime")
    day = datetime.datetime.fromtimestamp(mtime, datetime.UTC) if mtime else datetime.datetime.now(datetime.UTC)
    return day.date().isoformat()


def place_columns(app, doctree) -> None:
    """``doctree-read``: put each listed cell's own output and the kept runs' columns side by side."""
    from docutils import nodes

    docname = app.env.docname
    data_file = Path(app.config.kept_runs_data) / f"{docname}.json"
    if not data_file.is_file():
        return
    app.env.note_dependency(str(data_file))
    data = json.loads(data_file.read_text(encoding="utf-8"))
    cells = data.get("cells", {})
    if not cells:
        return
    head = html.escape(f"This site's build: {data['this_machine']} · {_built_on(app.env, docname)}")
    for cell in list(doctree.findall(nodes.container)):
        if cell.get("nb_element") != "cell_code" or str(cell.get("cell_index")) not in cells:
            continue
        output = next((child for child in cell.children if child.get("nb_element") == "cell_code_output"), None)
        mine = nodes.container(classes=["machine-output", "this-build"])
        mine += nodes.raw("", f'<p class="machine-name">{head}</p>', format="html")
        if output is None:
            mine += nodes.raw("", '<p class="machine-note">Nothing printed here.</p>', format="html")
        else:
            cell.remove(output)
            mine += output
        grid = nodes.container(classes=[GRID_CLASS])
        grid += mine
        for column in cells[str(cell["cell_index"])]:
            grid += nodes.raw("", column, format="html")
        cell += grid


def setup(app) -> dict:
    app.add_config_value("kept_runs_data", "", "env")
    app.connect("doctree-read", place_columns)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
