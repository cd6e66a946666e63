"""`make lab` starts a JupyterLab server that serves the course notebooks."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _contents(port: int, token: str) -> list[str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/contents", headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return [item["name"] for item in json.load(response)["content"]]


def test_make_lab_serves_the_notebooks(tmp_path):
    port, token = _free_port(), "course-test-token"
    args = f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.token={token}"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    server = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"PORT={port}", f"LAB_ARGS={args}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline, names = time.monotonic() + 90, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                names = _contents(port, token)
                break
            except OSError:
                time.sleep(0.5)
        assert names is not None, "JupyterLab did not answer within 90 s"
        assert "01_run_tensors_on_the_gpu.ipynb" in names
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
