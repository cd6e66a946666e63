"""Run every notebook, solutions and hidden tests in, on another torch release: what breaks or warns there.

Learners on Colab meet the torch release Colab ships, often newer than this course's pin. This
script builds a virtual environment with ``torch==VERSION`` and everything else as pinned in
``requirements.lock``, installs this checkout's ``course_utils`` and grader into it (editable),
runs each ``notebooks/NN_*.ipynb`` top to bottom with nbclient in quick mode (every exercise's
solution and its visible and hidden tests run too), and prints, per notebook, its time, every
error and every line it wrote to stderr that is not one of the known lines a CUDA build of
torch prints on a machine without a GPU. Exit status 1 when a notebook errs or warns.

    .venv/bin/python tools/newer_torch_check.py 2.15.0 [--venv /tmp/torch-2.15.0] [--notebooks 02 11]

It downloads torch from PyPI (the CUDA build on Linux, several GB with its CUDA libraries; a
machine whose pip is capped to older releases by a constraints file is told to ignore it for
this environment only). A measurement for maintainers, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a CUDA build of torch prints on a machine without a GPU or CUDA runtime, and the
# profiler's progress lines (which the grader also drops): not the notebook's doing.
KNOWN = re.compile(
    r"No CUDA runtime is found|gpuGetDeviceCount failed|^(USDT|STAGE):|Kernel is running over TCP|^\s*$"
    r"|\[__recompiles\]|\[__graph_breaks\]"  # notebook 11 turns these logs on to show them
)


def _venv(version: str, folder: Path) -> Path:
    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # a local cap on torch releases does not apply here
    pins = [line for line in (ROOT / "requirements.lock").read_text().splitlines() if not line.startswith("torch==")]
    lock = folder / "requirements-without-torch.txt"
    lock.write_text("\n".join(pins) + "\n")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={version}"], check=True, env=env)
    subprocess.run([*pip, "--no-deps", "-r", str(lock)], check=True, env=env)
    subprocess.run(
        [*pip, "--no-deps", "--no-build-isolation", "-e", str(ROOT), "-e", str(ROOT / "grading")], check=True
    )
    subprocess.run(
        [str(python), "-m", "ipykernel", "install", "--prefix", str(folder), "--name", "python3"], check=True
    )
    return python


_RUN_ONE = """
import json, os, sys, time
import nbformat
from nbclient import NotebookClient
os.environ["COURSE_QUICK"] = "1"
nb = nbformat.read(sys.argv[1], 4)
start = time.perf_counter()
NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
               resources={"metadata": {"path": os.path.dirname(sys.argv[1])}}).execute()
found = []
for index, cell in enumerate(nb.cells):
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            found.append([index, "error", output.get("ename", "") + ": " + output.get("evalue", "")])
        elif output.get("output_type") == "stream" and output.get("name") == "stderr":
            found.append([index, "stderr", output.get("text", "")])
print(json.dumps({"seconds": time.perf_counter() - start, "found": found}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the torch release, e.g. 2.15.0")
    parser.add_argument("--venv", type=Path, help="where the environment goes (default /tmp/torch-VERSION)")
    parser.add_argument("--notebooks", nargs="*", help="only these numbers, e.g. 02 11 (default: all)")
    args = parser.parse_args()
    python = _venv(args.version, args.venv or Path(f"/tmp/torch-{args.version}"))
    torch = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    print(f"torch {torch.stdout.strip()} in {python.parent.parent}")
    problems = 0
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if args.notebooks and path.name[:2] not in args.notebooks:
            continue
        done = subprocess.run([str(python), "-c", _RUN_ONE, str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{path.name}: the run failed\n{done.stderr[-2000:]}")
            problems += 1
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        shown = []
        for index, kind, text in result["found"]:
            lines = [line for line in text.splitlines() if not KNOWN.search(line)]
            if kind == "error" or lines:
                shown.append(f"  cell {index} {kind}: {' | '.join(lines or [text])[:400]}")
        print(f"{path.name}: {result['seconds']:.0f} s, {'ok' if not shown else f'{len(shown)} problem(s)'}")
        for line in shown:
            print(line)
        problems += len(shown)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
