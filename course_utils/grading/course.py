"""Where the nbgrader course directory keeps what, and the nbgrader API bound to it.

Contract: a ``Course`` is a plain description of paths (nothing is created on
construction). ``grading/`` mirrors nbgrader's example course: ``source/``, ``release/``,
``submitted/``, ``autograded/``, ``feedback/`` and ``gradebook.db``; only ``release/`` and
the config are tracked. The assignment name is the notebook's stem, and each assignment
holds one notebook of the same name.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from traitlets.config import Config

__all__ = ["COURSE_ID", "Course", "default_course"]

COURSE_ID = "optimization-course"
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Course:
    """An nbgrader course directory and the folder of source notebooks it releases."""

    root: Path
    notebooks: Path | None = None

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def release(self) -> Path:
        return self.root / "release"

    @property
    def submitted(self) -> Path:
        return self.root / "submitted"

    @property
    def autograded(self) -> Path:
        return self.root / "autograded"

    @property
    def feedback(self) -> Path:
        return self.root / "feedback"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def db_path(self) -> Path:
        return self.root / "gradebook.db"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.db_path}"

    def notebook(self, folder: Path, assignment: str, student: str | None = None) -> Path:
        """``folder/[student/]assignment/assignment.ipynb``."""
        base = folder / student if student else folder
        return base / assignment / f"{assignment}.ipynb"

    def assignments(self) -> list[str]:
        """Assignments that have a source notebook, sorted."""
        if not self.source.is_dir():
            return []
        return sorted(p.name for p in self.source.iterdir() if (p / f"{p.name}.ipynb").is_file())

    def protect(self) -> None:
        """Keep the instructor's files private to their owner (a second wall behind the sandbox)."""
        for folder in (self.source, self.submitted, self.autograded, self.feedback, self.exports):
            if folder.is_dir():
                folder.chmod(0o700)
        if self.db_path.exists():
            self.db_path.chmod(0o600)

    def config(self) -> Config:
        """nbgrader configuration for this course (the same as ``grading/nbgrader_config.py``)."""
        config = Config()
        config.CourseDirectory.root = str(self.root)
        config.CourseDirectory.course_id = COURSE_ID
        config.CourseDirectory.db_url = self.db_url
        config.Execute.timeout = 60
        config.Application.log_level = logging.WARNING
        return config

    def gradebook(self):  # -> nbgrader.api.Gradebook
        """nbgrader's gradebook of this course (use it as a context manager)."""
        from nbgrader.api import Gradebook

        _put_venv_on_path()
        return Gradebook(self.db_url, COURSE_ID)

    def api(self):  # -> nbgrader.apps.NbGraderAPI (imported lazily: nbgrader is slow to import)
        """nbgrader's Python API bound to this course."""
        _put_venv_on_path()
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        config = self.config()
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        api.log.setLevel(logging.WARNING)
        return api


def _put_venv_on_path() -> None:
    """nbgrader's gradebook runs ``alembic`` by name: make the running environment's scripts findable."""
    scripts = str(Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def default_course(root: Path | str | None = None, notebooks: Path | str | None = None) -> Course:
    """The repository's course: ``grading/`` releasing ``notebooks/`` (both overridable)."""
    grading = Path(root).resolve() if root else REPO_ROOT / "grading"
    source = Path(notebooks).resolve() if notebooks else REPO_ROOT / "notebooks"
    return Course(root=grading, notebooks=source)
