"""The learner's workspace: created from the release, never overwriting the learner's work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grading.lab.workspace import MANIFEST, WorkspaceError, main, sync_workspace
from tests.support.paths import ROOT

NB = "01_demo/01_demo.ipynb"
NEW = "01_demo/01_demo.new-release.ipynb"


def _release(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def dirs(tmp_path):
    release = _release(
        tmp_path / "release",
        {NB: "v1", "01_demo/helper.py": "x = 1\n", "01_demo/.ipynb_checkpoints/01_demo-checkpoint.ipynb": "old"},
    )
    return release, tmp_path / "workspace"


def _edit_then_release_v2(release: Path, ws: Path) -> None:
    """The learner saves their work in the notebook, then the course releases v2 of it."""
    sync_workspace(release, ws)
    (ws / NB).write_text("mine")
    _release(release, {NB: "v2"})
    sync_workspace(release, ws)


def test_first_sync_copies_every_assignment_file_and_skips_hidden_ones(dirs):
    release, ws = dirs
    report = sync_workspace(release, ws)
    assert sorted(report.added) == ["01_demo/01_demo.ipynb", "01_demo/helper.py"]
    assert (ws / NB).read_text() == "v1" and (ws / "01_demo/helper.py").read_text() == "x = 1\n"
    assert not (ws / "01_demo/.ipynb_checkpoints").exists()
    assert set(json.loads((ws / MANIFEST).read_text())["copied"]) == {NB, "01_demo/helper.py"}
    assert sync_workspace(release, ws).lines() == []  # a second run has nothing to do


def test_new_assignments_are_added_and_untouched_copies_follow_the_release(dirs):
    release, ws = dirs
    sync_workspace(release, ws)
    _release(release, {NB: "v2", "02_next/02_next.ipynb": "n1"})
    report = sync_workspace(release, ws)
    assert report.added == ["02_next/02_next.ipynb"]
    assert report.updated == [NB]
    assert (ws / NB).read_text() == "v2"


def test_an_edited_notebook_is_kept_and_the_new_release_goes_beside_it_once(dirs):
    release, ws = dirs
    sync_workspace(release, ws)
    (ws / NB).write_text("my answers")
    assert sync_workspace(release, ws).lines() == []  # the release did not change: nothing to say
    _release(release, {NB: "v2"})
    report = sync_workspace(release, ws)
    assert report.kept == [(NB, NEW)] and report.updated == []
    assert (ws / NB).read_text() == "my answers"
    assert (ws / NEW).read_text() == "v2"
    assert "newer release" in report.lines()[0]
    assert sync_workspace(release, ws).kept == [(NB, NEW)]  # reminded while the copy is there
    (ws / NEW).unlink()  # the learner took what they needed
    assert sync_workspace(release, ws).lines() == []
    assert not (ws / NEW).exists()
    assert (ws / NB).read_text() == "my answers"


def test_an_untouched_copy_beside_follows_a_later_release_but_an_edited_one_does_not(dirs):
    release, ws = dirs
    _edit_then_release_v2(release, ws)
    _release(release, {NB: "v3"})
    assert sync_workspace(release, ws).kept == [(NB, NEW)]
    assert (ws / NEW).read_text() == "v3"
    (ws / NEW).write_text("edited the new release too")
    _release(release, {NB: "v4"})
    report = sync_workspace(release, ws)
    assert report.kept_stale == [(NB, NEW)]
    assert (ws / NEW).read_text() == "edited the new release too"
    assert (ws / NB).read_text() == "mine"


def test_a_deleted_copy_comes_back_fresh(dirs):
    release, ws = dirs
    sync_workspace(release, ws)
    (ws / NB).write_text("broken beyond repair")
    (ws / NB).unlink()
    assert sync_workspace(release, ws).added == [NB]
    assert (ws / NB).read_text() == "v1"


def test_adopting_the_new_release_makes_the_file_follow_the_release_again(dirs):
    release, ws = dirs
    _edit_then_release_v2(release, ws)
    (ws / NEW).replace(ws / NB)
    _release(release, {NB: "v3"})
    assert sync_workspace(release, ws).updated == [NB]
    assert (ws / NB).read_text() == "v3"


def test_without_a_manifest_a_differing_file_is_treated_as_the_learners(dirs):
    release, ws = dirs
    _release(ws, {NB: "written before the manifest existed"})
    report = sync_workspace(release, ws)
    assert report.kept == [(NB, NEW)]
    assert (ws / NB).read_text() == "written before the manifest existed"


def test_bad_input_is_a_clear_error_and_touches_nothing(tmp_path, dirs, capsys):
    release, ws = dirs
    with pytest.raises(WorkspaceError, match="make release"):
        sync_workspace(tmp_path / "missing", ws)
    assert not ws.exists()
    sync_workspace(release, ws)
    (ws / MANIFEST).write_text("{not json")
    (ws / NB).write_text("mine")
    assert main(["--release", str(release), "--into", str(ws)]) == 2
    assert "not a workspace manifest" in capsys.readouterr().err
    assert (ws / NB).read_text() == "mine"


def test_the_command_line_reports_each_change(dirs):
    release, ws = dirs
    cmd = [sys.executable, "-m", "grading.lab.workspace", "--release", str(release), "--into", str(ws)]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    assert f"workspace: added    {NB}" in first.stdout
    second = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    assert "is up to date" in second.stdout


def test_the_real_release_makes_a_workspace_of_student_versions(tmp_path):
    """Every release notebook lands in the workspace, and none of them carries a solution."""
    report = sync_workspace(ROOT / "grading" / "course" / "release", tmp_path)
    notebooks = sorted(p for p in report.added if p.endswith(".ipynb"))
    release = ROOT / "grading" / "course" / "release"
    assert notebooks == sorted(p.relative_to(release).as_posix() for p in release.glob("*/*.ipynb"))
    for name in notebooks:
        text = (tmp_path / name).read_text()
        assert "### BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
