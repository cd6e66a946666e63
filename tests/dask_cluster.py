"""A real Dask cluster on 127.0.0.1 for the tests and the benchmark: ``dask scheduler`` and ``dask worker`` processes.

What an instructor starts by hand (``grading/README.md``, Grading on a cluster), here as
subprocesses of the caller: a scheduler that writes its scheduler file, and workers of one
thread each (``--nthreads 1``), without a nanny so that killing a worker's process is a
machine that died. ``stop()`` ends every process it started, by its id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from processes import stop_process

DASK = Path(sys.executable).parent / "dask"


class DaskCluster:
    """A scheduler and ``workers`` single-thread workers, started in ``folder`` (logs and scheduler file there)."""

    def __init__(self, folder: Path, workers: int = 2):
        self.folder = folder
        self.initial = workers
        self.scheduler_file = folder / "scheduler.json"
        self.scheduler: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}

    def __enter__(self) -> DaskCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return json.loads(self.scheduler_file.read_text())["address"]

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
        self.scheduler = self._spawn([*argv, "--scheduler-file", str(self.scheduler_file)], "scheduler")
        deadline = time.monotonic() + 60
        while not self.scheduler_file.is_file():
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dask scheduler did not start: {(self.folder / 'scheduler.log').read_text()}")
            time.sleep(0.1)
        for index in range(self.initial):
            self.add_worker(f"worker{index}")
        self.wait_for(self.initial)

    def add_worker(self, name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start one more ``dask worker --nthreads 1`` (``env`` added to its environment)."""
        argv = [str(DASK), "worker", "--scheduler-file", str(self.scheduler_file), "--nthreads", "1"]
        argv += ["--no-nanny", "--no-dashboard", "--name", name, "--local-directory", str(self.folder / name)]
        self.workers[name] = self._spawn(argv, name, env)
        return self.workers[name]

    def _spawn(self, argv: list[str], name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.folder / f"{name}.log").open("w")
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    def wait_for(self, count: int, timeout: float = 90) -> None:
        """Until exactly ``count`` workers are connected to the scheduler."""
        from distributed import Client

        with Client(self.address, timeout=30, set_as_default=False) as client:
            deadline = time.monotonic() + timeout
            while len(client.scheduler_info(n_workers=-1)["workers"]) != count:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the cluster did not reach {count} workers: see the logs in {self.folder}")
                time.sleep(0.2)

    def stop_worker(self, name: str, sig: int = signal.SIGTERM) -> None:
        stop_process(self.workers.pop(name), sig)

    def stop(self) -> None:
        for name in list(self.workers):
            self.stop_worker(name)
        if self.scheduler is not None:
            stop_process(self.scheduler)
            self.scheduler = None
