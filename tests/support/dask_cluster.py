"""A real Dask cluster on 127.0.0.1 for the tests and the benchmark: ``dask scheduler`` and ``dask worker`` processes.

What an instructor starts by hand (``grading/README.md``, Grading on a cluster), here as
subprocesses of the caller: a scheduler that writes its scheduler file, and workers of one
thread each (``--nthreads 1``), without a nanny so that killing a worker's process is a
machine that died. With ``tls`` (a folder made by ``course cluster-certs``) every process
speaks mutual TLS with the course's certificates, started with the flags the command prints
(each worker then listens for TLS on every interface, as there); without it, plain ``tcp://``
with every process on the loopback interface (``--host 127.0.0.1``), as ``grading/README.md``
starts a cluster of this machine alone. Every process keeps the HTTP server Dask starts even
with ``--no-dashboard`` on 127.0.0.1 (``--dashboard-address``). ``env`` and ``worker_args``
are added to every worker's environment and command line; ``host`` is the scheduler's
interface. ``stop()`` ends every process it started, by its id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.processes import stop_process

DASK = Path(sys.executable).parent / "dask"


class DaskCluster:
    """A scheduler and ``workers`` single-thread workers, started in ``folder`` (logs and scheduler file there)."""

    def __init__(
        self,
        folder: Path,
        workers: int = 2,
        *,
        tls: Path | None = None,
        env: dict[str, str] | None = None,
        worker_args: list[str] | None = None,
        host: str = "127.0.0.1",
    ):
        self.folder = folder
        self.initial = workers
        self.tls = tls
        self.env = env or {}
        self.worker_args = worker_args or []
        self.host = host  # the scheduler's interface ("0.0.0.0": every one, as `dask scheduler` without --host)
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

    @property
    def security(self):  # -> distributed.Security | None
        """The instructor's side of the cluster's TLS (None for plain TCP)."""
        if self.tls is None:
            return None
        from grading.certificates import security

        return security(self.tls)

    def _tls_args(self, role: str) -> list[str]:
        """``--tls-ca-file``, ``--tls-cert`` and ``--tls-key`` of ``role``, as ``course cluster-certs`` prints them."""
        if self.tls is None:
            return []
        return ["--tls-ca-file", str(self.tls / "ca.pem"), "--tls-cert", str(self.tls / f"{role}.pem"),
                "--tls-key", str(self.tls / f"{role}-key.pem")]  # fmt: skip

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        host = f"tls://{self.host}" if self.tls else self.host
        argv = [str(DASK), "scheduler", "--host", host, "--port", "0", "--dashboard-address", "127.0.0.1:0",
                "--no-dashboard", *self._tls_args("scheduler")]  # fmt: skip
        self.scheduler = self._spawn([*argv, "--scheduler-file", str(self.scheduler_file)], "scheduler", self.env)
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
        argv += ["--no-nanny", "--dashboard-address", "127.0.0.1:0", "--no-dashboard", "--name", name,
                 "--local-directory", str(self.folder / name)]  # fmt: skip
        argv += [] if self.tls else ["--host", "127.0.0.1"]  # plain TCP: nothing but this machine reaches it
        self.workers[name] = self._spawn([*argv, *self._tls_args("worker"), *self.worker_args], name,
                                         {**self.env, **(env or {})})  # fmt: skip
        return self.workers[name]

    def _spawn(self, argv: list[str], name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.folder / f"{name}.log").open("w")
        return subprocess.Popen(  # in its folder: nothing of the caller's working directory lands on its path
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=self.folder
        )

    def wait_for(self, count: int, timeout: float = 90) -> None:
        """Until exactly ``count`` workers are connected to the scheduler."""
        from distributed import Client

        with Client(self.address, timeout=30, set_as_default=False, security=self.security) as client:
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
