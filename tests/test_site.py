"""The course site's sources (`make site`, ``docs/build_site.py``): what each page will show, without Sphinx.

Building the site runs every notebook (minutes), so `make test` checks the source tree that
``prepare`` writes; `make browser-test` opens the built site in Chromium.
"""

from __future__ import annotations

import doctest
import importlib.util
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from nbtools import is_solution_cell, nbgrader_meta
from repo_url import repository_url, slug

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("build_site", ROOT / "docs" / "build_site.py")
build_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_site)


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
