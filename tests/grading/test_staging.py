"""The autograded folders: built aside, put in place whole, put back after a kill midway; which are stale.

A course in ``tmp_path`` (no gradebook is needed): ``source/ps1`` with a data file, and
alice's submission with a notebook, a file of her own and a ``timestamp.txt``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grading.coursedir import Course
from grading.staging import autograded_folder, lay_out, move_into, recover, staging_folder, stale
from grading.submissions import Submission


@pytest.fixture
def course(tmp_path) -> Course:
    course = Course(tmp_path / "c")
    source = course.folder("source", "ps1")
    (source / "data").mkdir(parents=True)
    (source / "problems.ipynb").write_text("instructor's")
    (source / "data" / "points.csv").write_text("instructor's data")
    (source / "config.txt").write_text("instructor's config")
    return course


def _submit(course: Course, stamp: str = "2026-01-09 12:00:00 UTC", *notebooks: str) -> Submission:
    folder = course.folder("submitted", "ps1", "alice")
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for name in notebooks or ("problems",):
        (folder / f"{name}.ipynb").write_text("alice's")
    (folder / "data" / "points.csv").write_text("alice's data")
    (folder / "config.txt").write_text("alice's config")
    (folder / "notes.md").write_text("alice's notes")
    (folder / "timestamp.txt").write_text(stamp)
    return Submission("alice", "ps1", folder)


def _graded(course: Course, sub: Submission, text: str, stamp: str = "2026-01-09 12:00:00 UTC") -> Path:
    """A completed earlier grading: an autograded folder with its notebook and timestamp."""
    dest = autograded_folder(course, sub)
    dest.mkdir(parents=True)
    (dest / "problems.ipynb").write_text(text)
    (dest / "timestamp.txt").write_text(stamp)
    return dest


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_lay_out_builds_aside_with_the_submissions_files_then_the_sources_over_them(course):
    sub = _submit(course)
    old = _graded(course, sub, "old result")
    lay_out(course, sub, {})
    staging = staging_folder(course, sub)
    assert staging == autograded_folder(course, sub).with_name(".ps1.grading")
    assert _files(staging) == {
        "config.txt": "instructor's config",  # the source's files win, as in nbgrader's init_assignment
        "data/points.csv": "instructor's data",
        "notes.md": "alice's notes",
        "timestamp.txt": "2026-01-09 12:00:00 UTC",
    }  # and no notebook: the graded ones are written later
    assert _files(old) == {"problems.ipynb": "old result", "timestamp.txt": "2026-01-09 12:00:00 UTC"}


def test_exclude_overwriting_keeps_the_submissions_own_file(course):
    sub = _submit(course)
    lay_out(course, sub, {"ps1": ["config.txt"], "ps2": ["data/points.csv"]})
    files = _files(staging_folder(course, sub))
    assert files["config.txt"] == "alice's config"
    assert files["data/points.csv"] == "instructor's data"


def test_lay_out_starts_from_an_empty_staging_folder(course):
    sub = _submit(course)
    staging = staging_folder(course, sub)
    staging.mkdir(parents=True)
    (staging / "problems.ipynb").write_text("half-graded by a killed run")
    lay_out(course, sub, {})
    assert not (staging / "problems.ipynb").exists()


def test_a_whole_grading_replaces_the_old_result_and_leaves_nothing_aside(course):
    sub = _submit(course)
    dest = _graded(course, sub, "old result")
    (dest / "gone.txt").write_text("only in the old result")
    lay_out(course, sub, {})
    (staging_folder(course, sub) / "problems.ipynb").write_text("new result")
    move_into(staging_folder(course, sub), dest, whole=True)
    assert _files(dest)["problems.ipynb"] == "new result" and "gone.txt" not in _files(dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["ps1"]


def test_a_first_grading_is_renamed_into_place(course):
    sub = _submit(course)
    lay_out(course, sub, {})
    (staging_folder(course, sub) / "problems.ipynb").write_text("graded")
    move_into(staging_folder(course, sub), autograded_folder(course, sub), whole=True)
    assert _files(autograded_folder(course, sub))["problems.ipynb"] == "graded"
    assert not staging_folder(course, sub).exists()


def test_grading_some_notebooks_replaces_only_their_files(course):
    sub = _submit(course, "2026-01-09 12:00:00 UTC", "problems", "essay")
    dest = _graded(course, sub, "old problems")
    (dest / "essay.ipynb").write_text("old essay")
    staging = staging_folder(course, sub)
    (staging / "sub").mkdir(parents=True)
    (staging / "problems.ipynb").write_text("new problems")
    (staging / "sub" / "x.txt").write_text("new file")
    move_into(staging, dest, whole=False)
    files = _files(dest)
    assert files["problems.ipynb"] == "new problems" and files["essay.ipynb"] == "old essay"
    assert files["sub/x.txt"] == "new file" and not staging.exists()


def test_a_run_killed_between_the_two_renames_leaves_the_old_result_which_comes_back(course, monkeypatch):
    sub = _submit(course)
    dest = _graded(course, sub, "old result")
    lay_out(course, sub, {})
    staging = staging_folder(course, sub)
    (staging / "problems.ipynb").write_text("new result")
    real_rename = Path.rename

    def killed_at_the_second_rename(self, target):
        if self == staging:
            raise KeyboardInterrupt  # the run dies after the old result went aside
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", killed_at_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        move_into(staging, dest, whole=True)
    monkeypatch.undo()
    assert not dest.exists()
    aside = dest.with_name(".ps1.replaced")
    assert _files(aside)["problems.ipynb"] == "old result"  # the complete old result, waiting aside

    recover(dest)
    assert _files(dest)["problems.ipynb"] == "old result" and not aside.exists()


def test_the_next_run_finds_the_old_result_back_before_deciding(course):
    """``stale`` recovers first: the old result is back, so a submission graded before is not regraded."""
    sub = _submit(course)
    dest = _graded(course, sub, "old result")
    dest.rename(dest.with_name(".ps1.replaced"))  # killed mid-replacement
    assert stale(course, sub) is False
    assert _files(dest)["problems.ipynb"] == "old result"


def test_a_leftover_aside_beside_a_complete_result_is_removed(course):
    sub = _submit(course)
    dest = _graded(course, sub, "new result")
    aside = dest.with_name(".ps1.replaced")
    aside.mkdir()
    (aside / "problems.ipynb").write_text("old result")
    recover(dest)
    assert not aside.exists() and _files(dest)["problems.ipynb"] == "new result"


def test_stale_means_never_graded_or_submitted_again_since(course):
    sub = _submit(course, "2026-01-09 12:00:00 UTC")
    assert stale(course, sub) is True  # never graded
    _graded(course, sub, "graded", stamp="2026-01-09 12:00:00 UTC")
    assert stale(course, sub) is False  # graded, same submission
    newer = _submit_again(course, "2026-01-10 08:00:00 UTC")
    assert stale(course, newer) is True
    older = _submit_again(course, "2026-01-08 08:00:00 UTC")
    assert stale(course, older) is False
    garbled = _submit_again(course, "last tuesday")
    assert stale(course, garbled) is True  # cannot tell: graded again, as nbgrader would not skip it


def _submit_again(course: Course, stamp: str) -> Submission:
    folder = course.folder("submitted", "ps1", "alice")
    (folder / "timestamp.txt").write_text(stamp)
    return Submission("alice", "ps1", folder)


def test_with_a_notebook_glob_a_selected_notebook_never_graded_is_stale(course):
    sub = _submit(course, "2026-01-09 12:00:00 UTC", "problems", "essay")
    _graded(course, sub, "graded")  # problems only
    assert stale(course, sub, "problems") is False
    assert stale(course, sub, "ess*") is True
    assert stale(course, sub) is False  # without a glob: the folder exists and the submission is not newer
