"""nbgrader's ``Autograde`` converter as a course configures it: its preprocessors split around ``Execute``.

Contract: ``AutogradeConverter(course)`` reads the course's ``nbgrader_config.py`` as
``nbgrader autograde`` does and holds its ``sanitize_preprocessors`` (``sanitize``), its
``autograde_preprocessors`` before ``Execute`` (``before_execute``) and after it
(``after_execute``: the grading worker runs the notebook in ``Execute``'s place), and its
settings ``create_student`` and ``exclude_overwriting`` (``exclude``); ``converter`` is
nbgrader's ``Autograde`` itself (``set_permissions``). ``Execute.enabled = False`` (what
``--no-execute`` sets) is refused with ``refuse_no_execute``'s ``CourseError``.
``default_limits`` takes the cell timeout from the config's ``Execute.timeout``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grading.coursedir import Course
from grading.errors import CourseError
from grading.sandbox.protections import Limits

__all__ = ["AutogradeConverter", "default_limits", "refuse_no_execute"]


def default_limits(course: Course, **overrides: float | None) -> Limits:
    """The sandbox limits, with the cell timeout of the course's config (nbgrader's ``Execute.timeout``).

    ``overrides`` are ``Limits`` fields; a None one keeps its default.
    """
    from nbgrader.preprocessors import Execute

    timeout = Execute(config=course.config).timeout
    values: dict[str, Any] = {"cell_timeout": float(timeout) if timeout and timeout > 0 else Limits().cell_timeout}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Limits(**values)


def refuse_no_execute(option: str) -> CourseError:
    """Why ``course autograde`` refuses nbgrader's ``--no-execute`` rather than ignore it."""
    return CourseError(
        f"{option}: nbgrader would then grade the outputs saved in each submission, which a learner can "
        "write by hand; `course autograde` always runs the notebooks, so it refuses rather than ignore the "
        "option (plain `nbgrader autograde --no-execute` does it)"
    )


def _preprocessors(classes: list[type | str | Callable[..., Any]], parent: Any) -> list[Any]:
    """nbgrader preprocessors from a configured list (classes, import strings or callables)."""
    from traitlets.utils.importstring import import_item

    made = []
    for item in classes:
        item = import_item(item) if isinstance(item, str) else item
        made.append(item(parent=parent) if isinstance(item, type) else item)
    return made


class AutogradeConverter:
    """nbgrader's converter settings for this course, and its preprocessors split around ``Execute``."""

    def __init__(self, course: Course):
        from nbgrader.converters import Autograde
        from nbgrader.preprocessors import Execute

        self.converter: Any = course.configurable(Autograde, coursedir=course.coursedir)
        self.sanitize = _preprocessors(self.converter.sanitize_preprocessors, self.converter)
        steps = _preprocessors(self.converter.autograde_preprocessors, self.converter)
        # nbgrader runs them in order, Execute among them; ours runs in the sandbox in its place.
        split = next((i for i, p in enumerate(steps) if isinstance(p, Execute)), None)
        if split is not None and not steps[split].enabled:
            raise refuse_no_execute("Execute.enabled = False is set in the config (nbgrader's --no-execute)")
        self.before_execute: list[Any] = steps[:split] if split is not None else []
        self.after_execute: list[Any] = steps[split + 1 :] if split is not None else steps
        self.create_student: bool = self.converter.create_student
        self.exclude: dict[str, list[str]] = self.converter.exclude_overwriting
