"""The environment fingerprint: what decides a grade besides the submission, compared between machines.

Contract: ``environment()`` is this process's fingerprint: the Python implementation and
version, the platform, the version of each distribution in ``PACKAGES`` and a hash of the
``grading`` and ``course_utils`` sources (an edited checkout differs), read from the files on
disk without importing them. ``differences(here, there)`` says what differs between two, in
words; ``refusal(sandbox, level, there, here)`` is why a worker with that fingerprint and
sandbox level may not grade for a coordinator with ``here`` (None when it may). ``LEVELS``
orders the sandbox levels, weakest first.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import platform
import sys
from pathlib import Path

__all__ = ["LEVELS", "PACKAGES", "differences", "environment", "refusal"]

PACKAGES = (
    "torch",
    "numpy",
    "nbgrader",
    "nbformat",
    "nbclient",
    "ipykernel",
    "jupyter-client",
    "course-grading",
    "course-utils",
    "dask",
    "distributed",
    "cloudpickle",
    "msgpack",
)
"""The distributions whose versions a worker must share with the coordinator."""

LEVELS = ("none", "userns", "root")  # sandbox levels, weakest first

_GRADING = Path(__file__).resolve().parents[1]  # the ``grading`` package this module is part of


def _source_hash(folder: Path | None, skip: tuple[str, ...] = ()) -> str:
    """A short hash of every ``.py`` file under ``folder`` (names and contents), ``skip`` folders left out."""
    if folder is None or not folder.is_dir():
        return "not installed"
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder)
        if relative.parts[0] in skip or "__pycache__" in relative.parts:
            continue
        digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _package_folder(name: str) -> Path | None:
    """Where a top-level package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def environment() -> dict[str, str]:
    """What decides a grade besides the submission: interpreter, platform, package versions, grader sources.

    ``grading/course/`` (a course directory, not code) is left out of the grader's hash: a
    course's referee travels with each job.
    """
    found = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": f"{sys.platform} {platform.machine()}",
    }
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["grading source"] = _source_hash(_GRADING, skip=("course",))
    found["course_utils source"] = _source_hash(_package_folder("course_utils"))
    return found


def differences(here: dict[str, str], there: dict[str, str]) -> list[str]:
    """What differs between two ``environment()`` s, in words: ``torch 2.12.0 there, 2.13.0 here``."""
    return [
        f"{key} {there.get(key, 'unknown')} there, {here.get(key, 'unknown')} here"
        for key in sorted(here.keys() | there.keys())
        if here.get(key) != there.get(key)
    ]


def refusal(sandbox: str, level: str, there: dict[str, str], here: dict[str, str]) -> str | None:
    """Why a worker whose environment is ``there`` and sandbox ``level`` may not grade (None when it may).

    ``sandbox`` is the level the instructor asked for: ``"none"`` accepts a worker without one.
    """
    differ = differences(here, there)
    if differ:
        return "its environment differs from this machine's: " + "; ".join(differ)
    if level == "none" and sandbox != "none":
        return (
            "no sandbox works there (neither root nor user namespaces), so a submission could read the "
            "worker's files (its TLS key among them) and reach the Dask scheduler and every worker; run the "
            "worker as root or enable user namespaces, or pass --sandbox none knowingly"
        )
    return None
