"""Fixtures the grader's unit tests share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from grading.coursedir import Course
from grading.release import release
from tests.support.paths import FIXTURES

COMPAT_DUE = "2026-01-10 17:00:00 UTC"  # the compatibility course's due date, as released for these tests


@pytest.fixture(scope="module")
def _gradebook_head_read_in_process() -> Iterator[None]:
    """A new nbgrader gradebook is stamped with ``alembic heads`` run as a process (seconds): read it in-process."""
    from alembic.script import ScriptDirectory
    from nbgrader import api
    from nbgrader.dbutil import ALEMBIC_DIR

    head = ScriptDirectory(ALEMBIC_DIR).get_current_head()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api, "get_alembic_version", lambda: head)
        yield


@pytest.fixture(scope="module")
def compat_released(tmp_path_factory, _gradebook_head_read_in_process) -> Course:
    """The compatibility course (tests/fixtures/compat_course) released once per module, due ``COMPAT_DUE``."""
    course = Course(tmp_path_factory.mktemp("released") / "compat")
    shutil.copytree(FIXTURES / "compat_course", course.root)
    release(course, duedate=COMPAT_DUE)
    return course


@pytest.fixture
def compat_course(compat_released, tmp_path) -> Course:
    """A copy of ``compat_released`` of the test's own, to write grades into."""
    copy = Course(tmp_path / "compat")
    shutil.copytree(compat_released.root, copy.root)
    return copy
