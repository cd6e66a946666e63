"""The assignment's other files, zipped to travel with a task and unpacked on the worker.

Contract: ``pack_files(folder, budget)`` zips the files a local grading worker would copy
from ``folder`` into the kernel's working directory (``sandbox.worker._copy_files``'s
choice: notebooks, checkpoints, symbolic links and everything past ``budget`` bytes or its
file count stay out) and returns the zip and what it left out, in that function's words.
``unpack_files(blob, folder)`` recreates the zip in the new ``folder`` and refuses (``ValueError``)
any name that would land outside it.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

__all__ = ["pack_files", "unpack_files"]


def pack_files(folder: str | None, budget: int) -> tuple[bytes, list[str]]:
    """The assignment's other files as a zip, chosen as a local worker would copy them, and what was left out.

    The choice is ``worker._copy_files``'s own, made into a scratch folder that is zipped;
    the left-out list travels in the task, so the learner's note is the same.
    """
    from grading.sandbox.worker import _copy_files

    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="course-pack-") as scratch, zipfile.ZipFile(buffer, "w") as archive:
        skipped = _copy_files(Path(folder), Path(scratch), None, budget) if folder else []
        for path in sorted(Path(scratch).rglob("*")):
            name = path.relative_to(scratch).as_posix()
            if path.is_dir():
                archive.writestr(name + "/", b"")
            else:
                archive.write(path, name)
    return buffer.getvalue(), skipped


def unpack_files(blob: bytes, folder: Path) -> None:
    """Recreate a ``pack_files`` zip in ``folder``; a name that would land outside it is refused."""
    folder.mkdir(parents=True)
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for info in archive.infolist():
            name = PurePosixPath(info.filename)
            if name.is_absolute() or ".." in name.parts or not name.parts:
                raise ValueError(f"refusing a file named {info.filename!r} in the task's files")
            target = folder.joinpath(*name.parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(info))
