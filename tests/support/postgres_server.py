"""A real PostgreSQL server on 127.0.0.1 for the tests and the benchmarks: Debian's ``initdb`` and ``pg_ctl``.

The server runs in a folder of its own (data, log, socket), on a free loopback port, as the
unprivileged user ``nobody`` when we are root (``initdb`` refuses root), with ``trust``
authentication and ``fsync=off`` (a test server: nothing in it must survive a crash).
``stop()`` stops it; the caller deletes the folder.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.processes import free_port


def server_binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest ``/usr/lib/postgresql/N/bin``."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    versions = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if (p.parent / "pg_ctl").is_file()]
    return max(versions, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, default=None)


BIN = server_binaries()
MISSING = (
    None
    if BIN is not None and sys.platform.startswith("linux")
    else "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
    "`apt-get install postgresql` on Debian (.ci/run installs it when missing)"
)


class PostgresServer:
    """A PostgreSQL server in ``folder``; ``start()`` returns the URL of a database ``gradebook`` in it."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None

    def run(self, *argv: str) -> None:
        assert BIN is not None, MISSING
        owner = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []} if self.user else {}
        result = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.folder, capture_output=True, text=True, timeout=120, **owner
        )
        assert result.returncode == 0, f"{argv[0]} failed:\n{result.stdout}\n{result.stderr}"

    def start(self) -> str:
        (self.folder / "sockets").mkdir(parents=True)
        if self.user:
            for path in (self.folder, self.folder / "sockets"):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        self.run("initdb", "-D", "data", "-U", "course", "--auth=trust", "--no-sync", "--encoding=UTF8", "--no-locale")
        options = f"-p {self.port} -k {self.folder / 'sockets'} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.run("pg_ctl", "-D", "data", "-l", "server.log", "-w", "-t", "60", "-o", options, "start")
        return self.create_database("gradebook")

    def create_database(self, name: str) -> str:
        """A new, empty database (nbgrader creates the tables, not the database); its URL."""
        import psycopg

        with psycopg.connect(f"postgresql://course@127.0.0.1:{self.port}/postgres", autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://course:unused-secret@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if (self.folder / "data" / "postmaster.pid").exists():
            self.run("pg_ctl", "-D", "data", "-m", "fast", "-w", "stop")
