"""The project's own documents render as written: every heading a heading, every fence closed.

A fence opened one line too early once turned the README's folder tree into running text
and everything from "Testing" to the end of "The course site" into one code block. Each
document is parsed with markdown-it-py, the CommonMark parser under the course site's MyST.
"""

from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt

from tests.support.paths import ROOT

DOCUMENTS = ["README.md", "CONTRIBUTING.md", "grading/README.md", "jupyter/learner/README.md"]
SECTION = re.compile(r"^(#{2,3}) (.+)$")  # no document of ours writes "## " at the start of a code line


def _parsed(text: str) -> list:
    return MarkdownIt("commonmark").enable("table").parse(text)


def _headings(tokens: list) -> list[tuple[str, str]]:
    return [(t.tag, tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"]


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_section_line_renders_as_a_heading(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    rendered = _headings(_parsed(text))
    written = [(f"h{len(m[1])}", m[2].strip()) for line in text.splitlines() if (m := SECTION.match(line))]
    missing = [title for title in written if title not in rendered]
    assert not missing, f"{name}: these section lines do not render as headings (an unclosed code fence?): {missing}"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_no_fence_marker_is_left_in_running_text(name):
    tokens = _parsed((ROOT / name).read_text(encoding="utf-8"))
    stray = [t.map[0] + 1 for t in tokens if t.type == "inline" and "```" in t.content and t.map]
    assert not stray, f"{name}: a code fence shows as text at line(s) {stray}"


def test_the_readme_shows_the_repository_layout_as_one_block():
    tokens = _parsed((ROOT / "README.md").read_text(encoding="utf-8"))
    blocks = [t.content for t in tokens if t.type == "fence"]
    layout = [b for b in blocks if b.startswith("notebooks/")]
    assert len(layout) == 1, "the layout tree should be one code block that starts with notebooks/"
    for folder in ("notebooks/", "course_utils/", "grading/", "tests/", "tools/", "docs/"):
        assert f"\n{folder}" in "\n" + layout[0], f"{folder} is missing from the layout"
    listed = set(re.findall(r"(\w+\.py)", layout[0].split("\ntools/", 1)[1].split("\ntests/", 1)[0]))
    scripts = {p.name for p in (ROOT / "tools").glob("*.py")} - {"__init__.py"}
    assert scripts <= listed, f"tools/ scripts missing from the layout: {sorted(scripts - listed)}"


@pytest.mark.slow
def test_plain_nbgrader_runs_as_the_grader_guide_says(tmp_path):
    """grading/README.md: activate the environment, then plain nbgrader can create a gradebook (it runs alembic)."""
    import subprocess

    (tmp_path / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.course_id = "docs"\n')
    command = f'. "{ROOT}/.venv/bin/activate" && nbgrader db assignment add ps1 --duedate="2026-01-31 17:00:00 UTC"'
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "gradebook.db").is_file()
    guide = (ROOT / "grading" / "README.md").read_text(encoding="utf-8")
    assert ". .venv/bin/activate" in guide, "the guide should say how to run plain nbgrader"
