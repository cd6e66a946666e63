"""The repository URL is written once (pyproject.toml) and every link to it agrees."""

from __future__ import annotations

import re
import shutil

import nbformat
import pytest

from tests.support.paths import ROOT
from tools.repo_url import (
    RepoUrlError,
    main,
    mentions,
    repository_url,
    set_repository_url,
    slug,
    url_files,
)

URL = repository_url(ROOT)
SLUG = slug(URL)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RELEASED = sorted((ROOT / "grading" / "course" / "release").glob("*/*.ipynb"))


def _colab_link(stem: str, slug_: str = SLUG) -> str:
    return f"https://colab.research.google.com/github/{slug_}/blob/main/grading/course/release/{stem}/{stem}.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS + RELEASED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_notebook_installs_from_the_repository_and_its_badge_opens_its_own_student_version(path):
    nb = nbformat.read(path, as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    installs = re.findall(r"^ *%pip install .*course-utils.*$", setup.source, re.M)
    assert installs == [f'    %pip install --quiet --no-deps "course-utils @ git+{URL}"'], installs
    assert 'if "google.colab" in sys.modules:' in setup.source
    title = nb.cells[0].source
    assert _colab_link(path.stem) in title, f"{path.name}: the Colab badge does not open its own student version"
    assert (ROOT / "grading" / "course" / "release" / path.stem / f"{path.stem}.ipynb").is_file()


def test_every_link_in_every_file_names_the_same_repository():
    found = {p.relative_to(ROOT).as_posix(): set(mentions(p.read_text())) for p in url_files(ROOT)}
    assert {name: names for name, names in found.items() if names - {SLUG}} == {}
    assert found["README.md"] and found["CONTRIBUTING.md"] == {SLUG}
    assert main([]) == 0


def test_the_readme_course_map_links_every_student_version():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        assert _colab_link(path.stem) in readme, f"README has no Colab link for {path.name}"


def test_a_fork_changes_the_url_once_and_every_link_follows(tmp_path, capsys):
    for relative in ["README.md", "CONTRIBUTING.md", "pyproject.toml", "notebooks", "grading/course/release"]:
        source, target = ROOT / relative, tmp_path / relative
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    before = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}

    with pytest.raises(RepoUrlError, match="not a GitHub repository URL"):
        set_repository_url("https://gitlab.com/me/fork", tmp_path)
    assert {p: p.read_text() for p in before} == before

    changed = set_repository_url("https://github.com/me/my-fork.git", tmp_path)
    assert repository_url(tmp_path) == "https://github.com/me/my-fork"
    assert len(changed) == len(url_files(tmp_path)) + 1  # every file that links, and pyproject.toml
    for path in url_files(tmp_path):
        text = path.read_text()
        assert set(mentions(text)) == {"me/my-fork"} and SLUG not in text
    nb = nbformat.read(tmp_path / "notebooks" / NOTEBOOKS[0].name, as_version=4)  # still valid JSON
    assert _colab_link(NOTEBOOKS[0].stem, "me/my-fork") in nb.cells[0].source
