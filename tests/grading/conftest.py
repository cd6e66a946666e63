"""Fixtures the grader's unit tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


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
