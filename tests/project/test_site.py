"""The course site's sources (`make site`, ``docs/build_site.py``): what each page will show, without Sphinx.

Building the site runs every notebook (minutes), so `make test` checks the source tree that
``prepare`` writes; `make browser-test` opens the built site in Chromium.
"""

from __future__ import annotations

import copy
import doctest
import html
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tests.support.nbtools import is_solution_cell, nbgrader_meta
from tests.support.paths import ROOT
from tools import gpu_runs
from tools.repo_url import repository_url, slug

_spec = importlib.util.spec_from_file_location("build_site", ROOT / "docs" / "build_site.py")
build_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_site)
kept_runs = importlib.import_module("kept_runs")  # docs/kept_runs.py, on sys.path since build_site is loaded


def _colab(stem: str, root: Path = ROOT) -> str:
    # Written out here, not taken from build_site: the link the README's course map uses.
    return (
        f"https://colab.research.google.com/github/{slug(repository_url(root))}"
        f"/blob/main/grading/course/release/{stem}/{stem}.ipynb"
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site.prepare(tmp_path_factory.mktemp("site"))


def test_the_examples_in_the_builder_hold():
    assert doctest.testmod(build_site).failed == 0


def test_the_course_map_links_every_notebook_its_colab_version_and_the_guide(site):
    index = (site / "index.md").read_text()
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks
    for path in notebooks:
        assert f"]({path.name})" in index, f"the course map does not link {path.name}"
        assert f"[open]({_colab(path.stem)})" in index, f"the course map has no Colab link for {path.stem}"
        assert f"\n{path.stem}\n" in index, f"{path.stem} is not in the table of contents"
    assert "](instructor-guide.md)" in index and "\ninstructor-guide\n" in index
    assert "${" not in index, "a placeholder of docs/index.md was left unfilled"
    guide = (site / "instructor-guide.md").read_text()
    assert guide.startswith((ROOT / "grading" / "README.md").read_text().splitlines()[0])
    assert (site / "_static" / "mathjax" / "MathJax.js").exists() and (site / "conf.py").exists()


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem[:2])
def test_each_page_folds_its_solutions_drops_hidden_tests_and_links_colab(site, path):
    source = nbformat.read(path, as_version=4)
    page = nbformat.read(site / path.name, as_version=4)
    text = "\n".join(cell.source for cell in page.cells)
    assert _colab(path.stem) in page.cells[0].source, "no Colab link to the student version under the title"
    assert "colab-badge.svg" not in text, "the badge is an image from Google: pages must load nothing from outside"
    assert "BEGIN HIDDEN TESTS" not in text
    solutions = [c for c in page.cells if is_solution_cell(c)]
    assert len(solutions) == sum(map(is_solution_cell, source.cells))
    for cell in solutions:
        assert "hide-input" in cell.metadata["tags"], nbgrader_meta(cell)["grade_id"]
        assert cell.metadata["mystnb"]["code_prompt_show"] == "Show the solution"
    assert [c.source for c in page.cells if c.cell_type == "code" and not is_solution_cell(c)] != []


def test_a_new_notebook_is_found_and_a_page_without_badge_or_with_links_gets_them_right(tmp_path):
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "grading").mkdir()
    shutil.copy(ROOT / "pyproject.toml", root)
    (root / "grading" / "README.md").write_text("# Guide\n\nSee [notebook 13](../notebooks/13_x.ipynb#fit).\n")
    nb = new_notebook(
        cells=[
            new_markdown_cell("# 13 · Do a new thing\n\nWhat it does.\n\nSee [the lock](../requirements.lock)."),
            new_code_cell("x = 1"),
        ]
    )
    nbformat.write(nb, root / "notebooks" / "13_x.ipynb")
    nbformat.write(nb, root / "notebooks" / "notes.ipynb")  # not NN_: not a page

    pages = {"notebooks/13_x.ipynb": "13_x.ipynb", "grading/README.md": "instructor-guide.md"}
    page = build_site.site_notebook(nb, "13_x", pages, root)
    head = page.cells[0].source
    assert head.startswith("# 13 · Do a new thing\n\n[Open in Colab](" + _colab("13_x", root))
    assert f"[the lock]({repository_url(root)}/blob/main/requirements.lock)" in head
    assert build_site.notebooks(root) == [root / "notebooks" / "13_x.ipynb"]
    course_map = build_site.course_map(build_site.notebooks(root), root)
    assert "| 13 | [Do a new thing](13_x.ipynb) | What it does. |" in course_map
    guide = build_site.rewrite_links((root / "grading" / "README.md").read_text(), "grading/README.md", pages, root)
    assert "[notebook 13](13_x.ipynb#fit)" in guide


# --- outputs per machine: the kept GPU runs beside the build's own ----------------------------------


def test_the_examples_in_the_kept_runs_module_hold():
    assert doctest.testmod(kept_runs).failed == 0 and doctest.testmod(gpu_runs).failed == 0


def test_each_page_a_kept_run_holds_gets_its_outputs_cell_by_cell_and_says_when_code_changed(site):
    runs = gpu_runs.kept_runs()
    assert runs, "no kept run in notebooks/gpu-runs/"
    index = (site / "index.md").read_text()
    assert "](gpu-runs.md)" in index and "\ngpu-runs\n" in index
    assert "NVIDIA H200 · torch 2.11.0+cu130 · 2026-11-26" in (site / "gpu-runs.md").read_text()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        data = json.loads((site.parent / "kept-runs" / f"{path.stem}.json").read_text())
        page = nbformat.read(site / path.name, as_version=4)
        holding = [run for run in runs if run.notebook(path.stem[:2])]
        notes = [c for c in page.cells if c.cell_type == "markdown" and "Outputs per machine" in c.source]
        if not holding:
            assert not data.get("cells") and not notes, f"{path.stem}: kept outputs but no kept run"
            continue
        assert len(notes) == 1 and page.cells.index(notes[0]) == 1, f"{path.stem}: no note under the title"
        assert data["cells"] and " · torch " in data["this_machine"]
        stored = {cell.id: cell for cell in nbformat.read(path, as_version=4).cells}  # with its hidden tests
        for index_text, columns in data["cells"].items():
            cell = stored[page.cells[int(index_text)].id]
            assert cell.cell_type == "code" and 1 <= len(columns) <= len(holding)
            for column in columns:
                run = next(run for run in holding if kept_runs.run_label(run) in column)
                assert f"commit {run.info['commit']}" in column
                kept_code = {c.source.strip() for c in run.notebook(path.stem[:2]).cells if c.cell_type == "code"}
                if "code changed since that run" not in column:  # then today's code is the run's, verbatim
                    assert cell.source.strip() in kept_code, f"{path.stem} cell {index_text}: new code, old output"
                elif old := re.search(r"<summary>The code then</summary><pre>(.*?)</pre>", column, re.S):
                    assert html.unescape(old[1]).strip() != cell.source.strip()


def _kept_repo(tmp_path: Path) -> tuple[gpu_runs.KeptRun, nbformat.NotebookNode]:
    """Notebook 13 today, and a kept run of an older version of it."""
    solution = {"nbgrader": {"solution": True, "grade": False, "grade_id": "ex1", "locked": False}}
    today = new_notebook(
        cells=[
            new_markdown_cell("# 13 · X\n\nIntro.", id="title"),
            new_code_cell("print('same')", id="same"),
            new_code_cell("print('new code')", id="changed"),
            new_code_cell("print('a cell added since')", id="added"),
            new_code_cell("unrelated = [x ** 3 for x in range(10)]", id="removed-elsewhere"),
            new_code_cell("def answer(x):\n    total = x + 1\n    return total * 2", id="solution", metadata=solution),
        ]
    )

    def printed(text: str) -> list:
        return [nbformat.v4.new_output("stream", name="stdout", text=text)]

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    figure = nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})
    then = new_notebook(
        cells=[
            new_markdown_cell("# 13 · X", id="title"),
            new_code_cell("print('same')", id="same", outputs=printed("<b>on the GPU</b>\n")),
            new_code_cell("print('old code')", id="changed", outputs=printed("old output\n")),
            new_code_cell(
                "def answer(x):\n    total = x + 1\n    return total * 3  # the old solution",
                id="solution",
                metadata=solution,
                outputs=printed("solved\n"),
            ),
            new_code_cell("plot()", id="removed", outputs=[figure]),
            new_code_cell("summary_table()", id="removed-elsewhere", outputs=printed("a table\n")),
        ]
    )
    folder = tmp_path / "gpu-runs" / "t4-torch2.12-abc1234"
    folder.mkdir(parents=True)
    nbformat.write(then, folder / "13_x.ipynb")
    info = {
        "gpu": "Tesla T4",
        "gpu_memory_mib": 15360,
        "compute_capability": "7.5",
        "driver": "550",
        "cpu": "x",
        "python": "3.12",
        "torch": "2.12.0+cu126",
        "cuda": "12.6",
        "torchao": "0.18.0",
        "commit": "abc1234",
        "date": "2026-11-20",
        "quick": False,
        "one_notebook_at_a_time": True,
        "other_gpu_processes": [],
        "notebooks": ["13_x.ipynb"],
    }
    (folder / "run.json").write_text(json.dumps(info))
    (folder / "README.md").write_text("# A T4 run\n")
    return gpu_runs.read_run(folder), today


def test_kept_outputs_are_matched_by_cell_and_never_shown_as_todays(tmp_path):
    run, today = _kept_repo(tmp_path)
    static = tmp_path / "src" / "_static" / "kept-runs"
    page, data = kept_runs.prepare_page(copy.deepcopy(today), today, "13_x", [run], static)
    cells = data["cells"]
    # The note went in under the title: today's cells 1 ("same"), 2 ("changed") and 5 (the solution) are 2, 3 and 6.
    assert [c.id for c in page.cells if c.cell_type == "code"] == [
        "same",
        "changed",
        "added",
        "removed-elsewhere",
        "solution",
    ]
    # Not the cell added since, nor the one whose id the run's notebook gave another cell (ids are not trusted).
    assert sorted(cells, key=int) == ["2", "3", "6"]
    note = page.cells[1].source
    assert "Outputs per machine" in note and "Tesla T4 · torch 2.12.0+cu126 · 2026-11-20" in note
    assert "2 of the Tesla T4 run's cells with output" in note  # the figure's cell and summary_table()
    same, changed, solution = cells["2"][0], cells["3"][0], cells["6"][0]
    assert "&lt;b&gt;on the GPU&lt;/b&gt;" in same and "<b>" not in same  # printed text is text
    assert "code changed" not in same and "kept run, commit abc1234" in same
    assert "code changed since that run" in changed and "print(&#x27;old code&#x27;)" in changed
    assert "old output" in changed and "new code" not in changed
    assert "code changed since that run" in solution and "old solution" not in solution, "a solution leaked"
    assert data["images"] == [] and not static.exists()  # the only figure was in the removed cell

    today.cells.append(new_code_cell("plot()", id="removed"))  # the cell is back: its figure is a file
    _, data = kept_runs.prepare_page(copy.deepcopy(today), today, "13_x", [run], static)
    (image,) = data["images"]
    assert Path(image).read_bytes().startswith(b"\x89PNG") and Path(image).is_relative_to(static)
    assert 'src="_static/kept-runs/t4-torch2.12-abc1234/13_x-cell4-0.png"' in data["cells"]["7"][0]


def test_a_page_no_run_holds_is_left_alone(tmp_path):
    run, today = _kept_repo(tmp_path)
    page, data = kept_runs.prepare_page(copy.deepcopy(today), today, "14_y", [run], tmp_path / "static")
    assert data == {} and page == today


def test_sphinx_puts_the_builds_output_and_the_kept_ones_side_by_side(tmp_path):
    """The extension on a real Sphinx build of one small page (its outputs stored, not run)."""
    from sphinx.cmd.build import build_main

    src, out, data_dir = tmp_path / "src", tmp_path / "html", tmp_path / "kept-runs"
    src.mkdir()
    data_dir.mkdir()
    (src / "conf.py").write_text(
        'extensions = ["myst_nb", "kept_runs"]\nnb_execution_mode = "off"\n'
        f"kept_runs_data = {str(data_dir)!r}\nhtml_theme = 'basic'\n"
    )
    cpu = nbformat.v4.new_output("stream", name="stdout", text="on this CPU: 12 ms\n")
    nb = new_notebook(cells=[new_markdown_cell("# Page"), new_code_cell("run()", outputs=[cpu]), new_code_cell("x")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "index.ipynb")
    column = '<div class="machine-output kept-run"><p class="machine-name">Tesla T4</p><pre>on the T4: 3 ms</pre></div>'
    (data_dir / "index.json").write_text(json.dumps({"cells": {"1": [column]}, "this_machine": "Test CPU · torch 9"}))
    assert build_main(["-q", "-b", "html", "-W", str(src), str(out)]) == 0
    page = (out / "index.html").read_text()
    grid = page[page.index('class="outputs-by-machine') :]
    this_build = grid.index("This site&#x27;s build: Test CPU · torch 9 · ")
    assert this_build < grid.index("on this CPU: 12 ms") < grid.index("Tesla T4") < grid.index("on the T4: 3 ms")
    assert page.count('class="outputs-by-machine') == 1, "only the cell a kept run printed"


def test_a_notebook_whose_run_failed_is_run_again_by_the_next_build(tmp_path):
    src, reports = tmp_path / "src", tmp_path / "html" / "reports"
    src.mkdir()
    reports.mkdir(parents=True)
    for name in ("06_x", "07_y"):
        (src / f"{name}.ipynb").write_text("{}")
        os.utime(src / f"{name}.ipynb", (1_000_000, 1_000_000))
    (reports / "06_x.err.log").write_text("CellTimeoutError")
    assert build_site.retry_failed_runs(tmp_path, src) == ["06_x.ipynb"]
    assert (src / "06_x.ipynb").stat().st_mtime > 1_000_000 == (src / "07_y.ipynb").stat().st_mtime
    assert not (reports / "06_x.err.log").exists()
