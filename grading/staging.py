"""The autograded folders: built aside, put in place whole, put back after a kill; and which are stale.

Contract: a submission's ``autograded/<student>/<assignment>/`` folder exists only for a
completed grading. ``lay_out`` builds the new one aside (``staging_folder``,
``.<assignment>.grading``) with the submission's and then the source's other files, as
nbgrader's ``init_assignment`` copies them (``exclude_overwriting`` kept); ``move_into``
puts it in place once every notebook in it is graded, by two renames (the old folder waits
aside as ``.<assignment>.replaced`` between them), and ``recover`` puts the old one back
after a run killed between the renames. So at every moment a learner has one complete
result, old or new. ``stale`` is nbgrader's rule without ``--force``: grade what was never
graded or was submitted again since.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from grading.coursedir import Course
from grading.submissions import Submission, matching_notebooks

__all__ = ["autograded_folder", "lay_out", "move_into", "recover", "staging_folder", "stale"]


def autograded_folder(course: Course, sub: Submission) -> Path:
    """Where the submission's autograded files are, once graded."""
    return course.folder("autograded", sub.assignment, sub.student)


def staging_folder(course: Course, sub: Submission) -> Path:
    """Where a submission's autograded folder is built; renamed into place when all of it is graded.

    So an autograded folder exists only for a completed grading: a run stopped midway
    (Ctrl-C, a kill, a crash) leaves the unfinished ones to the next run, which would
    otherwise skip them as already graded.
    """
    dest = autograded_folder(course, sub)
    return dest.with_name(f".{dest.name}.grading")


def _replaced(dest: Path) -> Path:
    """Where a previous autograded folder waits, for the moment of its replacement, to be removed."""
    return dest.with_name(f".{dest.name}.replaced")


def stale(course: Course, sub: Submission, glob: str = "*") -> bool:
    """nbgrader's rule without --force: grade when never graded or submitted again since.

    With a ``--notebook`` glob, "never graded" means that one of the notebooks it selects
    has no autograded copy (nbgrader's ``init_destination``).
    """
    from nbgrader.utils import parse_utc

    dest = autograded_folder(course, sub)
    recover(dest)  # a run killed while it replaced this result left the previous one aside
    if not dest.exists():
        return True
    if glob != "*" and any(not (dest / f"{name}.ipynb").exists() for name in matching_notebooks(sub.notebooks, glob)):
        return True
    old, new = dest / "timestamp.txt", sub.timestamp
    try:
        return bool(new and old.is_file() and parse_utc(new) > parse_utc(old.read_text().strip()))
    except (ValueError, OverflowError):
        return True


def move_into(staging: Path, dest: Path, whole: bool) -> None:
    """Put a graded submission's staging folder in place of its previous result, if any.

    ``whole`` (every notebook was graded): ``dest`` is swapped for ``staging`` by two renames,
    the old folder removed after; else (``--notebook``) each new file replaces its old one by a
    rename. At every moment the submission has one complete result, old or new; a kill
    between the two renames leaves the old one aside, which ``recover`` puts back.
    """
    if not dest.exists():
        staging.rename(dest)
    elif whole:
        aside = _replaced(dest)
        if aside.exists():
            shutil.rmtree(aside)
        dest.rename(aside)
        staging.rename(dest)
        shutil.rmtree(aside)
    else:
        for path in sorted(staging.rglob("*"), key=lambda p: len(p.parts)):
            target = dest / path.relative_to(staging)
            if path.is_dir():
                target.mkdir(exist_ok=True)
            else:
                path.replace(target)
        shutil.rmtree(staging)


def recover(dest: Path) -> None:
    """After a run killed mid-replacement: the previous result back in place (or its leftover removed)."""
    aside = _replaced(dest)
    if aside.is_dir():
        if dest.exists():
            shutil.rmtree(aside)
        else:
            aside.rename(dest)


def lay_out(course: Course, sub: Submission, exclude: dict[str, list[str]]) -> None:
    """An empty staging folder with the submission's and the source's other files.

    A previous result (``--force``, or a newer submission) stays in place until the new
    one is complete (``move_into``): a run stopped midway leaves every learner a complete
    result, the old one, and a gradebook that still holds its grades.
    """
    staging = staging_folder(course, sub)
    recover(autograded_folder(course, sub))
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    _copy_files(course, sub, staging, exclude)


def _copy_files(course: Course, sub: Submission, dest: Path, exclude: dict[str, list[str]]) -> None:
    """The submission's other files, then the source's over them (nbgrader's ``init_assignment``)."""
    from nbgrader.utils import find_all_files

    ignore = [*course.coursedir.ignore, "*.ipynb"]
    source = course.folder("source", sub.assignment)
    excluded = {str(source / name) for name in exclude.get(sub.assignment, [])}
    for root in (sub.folder, source):
        for name in find_all_files(str(root), ignore):
            if root == source and name in excluded:
                continue
            target = dest / os.path.relpath(name, root)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                target.unlink()
            if not Path(name).is_symlink():
                shutil.copyfile(name, target)
