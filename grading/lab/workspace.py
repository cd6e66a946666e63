"""The learner's workspace: their own copy of the student notebooks, kept in step with the release.

Contract: ``sync_workspace(release, workspace)`` copies every file of every assignment
folder in ``release`` (``grading/course/release/NN_slug/...``: the notebook and whatever else the
assignment ships) to the same place under ``workspace`` and records the SHA-256 of each
copy in ``workspace/.course-workspace.json``. Run again, it

* copies what is new in the release, and what the learner deleted (deleting a copy and
  syncing again is how a learner gets a fresh one);
* replaces a copy whose bytes are still exactly what was copied, when the release changed
  (the learner never touched it, so nothing of theirs is lost);
* never replaces a file whose bytes differ from what was copied (the learner's work, whether
  they edited it or JupyterLab saved it after they ran it): when the release changed, the
  new release goes beside it as ``NN_slug.new-release.ipynb`` (once per release: a learner
  who has taken what they need deletes it), and the report says so while it is there.

Nothing outside ``workspace`` is written, and nothing in it is deleted. Hidden files and
folders of the release (``.ipynb_checkpoints``) are not copied.

From the command line (what ``make lab`` runs)::

    python -m grading.lab.workspace                      # grading/course/release -> workspace/
    python -m grading.lab.workspace --into /tmp/ws       # a throwaway copy (browser test)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from grading.errors import CourseError

__all__ = ["MANIFEST", "NEW_RELEASE", "SyncReport", "WorkspaceError", "main", "new_release_path", "sync_workspace"]

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ".course-workspace.json"
NEW_RELEASE = ".new-release"


class WorkspaceError(CourseError):
    """A problem the learner can fix (no release, a manifest that is not ours); ``main`` prints it, exit 2."""


@dataclass
class SyncReport:
    """What one sync did, as paths relative to the workspace."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (learner's file, new release beside it)
    kept_stale: list[tuple[str, str]] = field(default_factory=list)  # as kept, but the copy beside is edited too

    def lines(self) -> list[str]:
        """One line per thing the learner should know about."""
        out = [f"added    {p}" for p in self.added]
        out += [f"updated  {p} (you had not changed it)" for p in self.updated]
        out += [
            f"kept     {mine}: yours. A newer release of it is beside it, {theirs}; "
            "copy your answers over, or delete yours and run `make lab` again for a fresh copy"
            for mine, theirs in self.kept
        ]
        out += [
            f"kept     {mine}: yours, and {theirs} is edited too; "
            f"delete {theirs} and run `make lab` again to receive the newest release"
            for mine, theirs in self.kept_stale
        ]
        return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _release_files(release: Path) -> Iterator[Path]:
    """Files of every assignment folder, relative to ``release``, hidden ones skipped."""
    for path in sorted(release.rglob("*")):
        relative = path.relative_to(release)
        if path.is_file() and len(relative.parts) > 1 and not any(p.startswith(".") for p in relative.parts):
            yield relative


def new_release_path(relative: Path) -> Path:
    """Where the newer release of a learner-edited file goes: ``NN_slug.new-release.ipynb``."""
    return relative.with_name(relative.stem + NEW_RELEASE + relative.suffix)


def _read_manifest(workspace: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The ``copied`` and ``offered`` tables: relative path -> SHA-256 of the release bytes."""
    path = workspace / MANIFEST
    if not path.exists():
        return {}, {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        copied, offered = ({str(k): str(v) for k, v in data.get(name, {}).items()} for name in ("copied", "offered"))
    except (OSError, ValueError, AttributeError) as error:
        raise WorkspaceError(f"{path} is not a workspace manifest ({error}); move it away to start over") from None
    return copied, offered


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def sync_workspace(release: Path, workspace: Path) -> SyncReport:
    """Bring ``workspace`` up to date with ``release``; see the module docstring."""
    release, workspace = Path(release), Path(workspace)
    files = list(_release_files(release)) if release.is_dir() else []
    if not files:
        raise WorkspaceError(f"no assignments in {release}: run `make release` first (it writes the student versions)")
    workspace.mkdir(parents=True, exist_ok=True)
    copied, offered = _read_manifest(workspace)
    report = SyncReport()
    for relative in files:
        key, source, target = relative.as_posix(), release / relative, workspace / relative
        latest = _sha256(source)
        current = _sha256(target) if target.exists() else None
        untouched = current in {copied.get(key), offered.get(key)}  # bytes we put there (beside, then moved over)
        if current is None or (untouched and current != latest):
            # new, deleted by the learner, or release bytes they never changed: nothing of theirs is lost
            _copy(source, target)
            (report.added if current is None else report.updated).append(key)
            copied[key] = latest
        elif current == latest:
            copied[key] = latest
        elif copied.get(key) != latest:  # the learner's work, and the release moved on
            _offer_beside(source, workspace, relative, latest, copied, offered, report)
    manifest = {"copied": copied, "offered": offered}
    partial = workspace / (MANIFEST + ".partial")  # written whole, then swapped in: never half a manifest
    partial.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(workspace / MANIFEST)
    return report


def _offer_beside(
    source: Path,
    workspace: Path,
    relative: Path,
    latest: str,
    copied: dict[str, str],
    offered: dict[str, str],
    report: SyncReport,
) -> None:
    """Put the newer release beside the learner's file (once per release), never over anything edited."""
    key = relative.as_posix()
    beside = new_release_path(relative)
    beside_key, target = beside.as_posix(), workspace / beside
    current = _sha256(target) if target.exists() else None
    if offered.get(key) == latest:  # offered before: remind while the copy is there, else they dealt with it
        if current is not None:
            report.kept.append((key, beside_key))
        return
    if current is not None and current not in {latest, copied.get(beside_key)}:
        report.kept_stale.append((key, beside_key))
        return
    _copy(source, target)
    copied[beside_key] = offered[key] = latest
    report.kept.append((key, beside_key))


def main(argv: list[str] | None = None) -> int:
    """``python -m grading.lab.workspace [--into DIR] [--release DIR]``; exit 2 on a problem."""
    parser = argparse.ArgumentParser(
        prog="python -m grading.lab.workspace", description="Create or update the learner's workspace."
    )
    parser.add_argument(
        "--into", type=Path, default=REPO_ROOT / "workspace", help="workspace folder (default: workspace/)"
    )
    parser.add_argument(
        "--release",
        type=Path,
        default=REPO_ROOT / "grading" / "course" / "release",
        help="student versions (default: grading/course/release/)",
    )
    args = parser.parse_args(argv)
    try:
        report = sync_workspace(args.release, args.into)
    except (WorkspaceError, OSError) as error:
        print(f"workspace: {error}", file=sys.stderr)
        return 2
    for line in report.lines():
        print(f"workspace: {line}")
    if not report.lines():
        print(f"workspace: {args.into} is up to date with {args.release}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
