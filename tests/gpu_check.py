"""Run every course notebook top to bottom on this machine's GPU and summarise what happened.

Usage (from the repository root, with the Python that has your CUDA build of torch)::

    python tests/gpu_check.py                 # every notebook, GPU sizes
    python tests/gpu_check.py -k 07 -k 09     # only notebooks whose name contains 07 or 09
    make gpu-check                            # the same as the first line

It needs no ``make install``: the GPU machine's own torch (see ``course_utils.env.SUPPORTED_TORCH``
for the range the notebooks support) plus the few pure-Python packages in ``NEEDED`` below;
``course_utils`` is found through ``PYTHONPATH`` set to the repository root.

Each notebook runs in a fresh kernel with the problem sizes of the device (no ``COURSE_QUICK``).
The executed notebooks, each kernel's own stderr and a summary (``summary.json`` and
``summary.md``: per notebook ran or failed, seconds, the first error and any warning text) go
to one folder (``gpu-check/`` by default). The exit status is 1 if any notebook failed or
printed a warning, 2 if the machine cannot run the check at all (no GPU, a torch outside the
supported range, a missing package), 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Import name -> what to install (pinned as in requirements.lock) when it is missing.
NEEDED: dict[str, str] = {
    "nbclient": "nbclient==0.11.0",
    "nbformat": "nbformat==5.11.1",
    "ipykernel": "ipykernel==7.4.0",
    "matplotlib": "matplotlib==3.11.2",
    "sklearn": "scikit-learn==1.9.1",
    "tqdm": "tqdm==4.70.1",
    "ipywidgets": "ipywidgets==8.1.9",  # tqdm.auto draws its progress bars with them
    "torchao": "torchao==0.18.0",
}

# What counts as warning text on a kernel's stderr: Python warnings (``UserWarning: ...``), the
# C++ warnings torch writes itself (``[W1122 17:45:00.1 ProcessGroupNCCL.cpp:...]``), and the
# warnings and errors of torch's Python logs (``W1122 17:45:00.1 123 torch/_dynamo/...]``).
WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning\b|^\s*(\[rank\d+\]:)?\[?[WE]\d{4} \d\d:\d\d:\d\d")

__all__ = ["NEEDED", "NotebookResult", "main", "preflight", "run_notebook", "warning_lines"]


@dataclass
class NotebookResult:
    """What one notebook did."""

    notebook: str
    status: str  # "ran" or "failed"
    seconds: float
    error: str | None = None  # "cell N: Ename: message" for the first failing cell
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ran" and not self.warnings


def warning_lines(text: str) -> list[str]:
    """The lines of ``text`` that are warnings.

    >>> warning_lines("step 1\\n/x.py:3: UserWarning: careful\\n  warnings.warn(msg)\\n")
    ['/x.py:3: UserWarning: careful']
    """
    return [line.rstrip() for line in text.splitlines() if WARNING_LINE.search(line)]


def preflight(allow_cpu: bool) -> list[str]:
    """Reasons this Python cannot run the check (empty when it can)."""
    problems = []
    missing = [pin for name, pin in NEEDED.items() if importlib.util.find_spec(name) is None]
    if missing:
        problems.append("missing packages: python -m pip install " + " ".join(missing))
    if importlib.util.find_spec("torch") is None:
        return [*problems, "torch is not installed: install a CUDA build of torch first"]
    import torch

    sys.path.insert(0, str(ROOT))
    from course_utils.env import SUPPORTED_TORCH, torch_version_supported

    if not torch_version_supported(torch.__version__):
        (lo, hi) = SUPPORTED_TORCH
        problems.append(
            f"torch {torch.__version__} is outside the range the notebooks support ({lo[0]}.{lo[1]} to {hi[0]}.{hi[1]})"
        )
    if not torch.cuda.is_available() and not allow_cpu:
        problems.append(
            f"no CUDA device is visible to torch {torch.__version__} "
            f"(CUDA build: {torch.version.cuda or 'no, this is a CPU build'})"
        )
    return problems


def run_notebook(path: Path, out_dir: Path, cell_timeout: int, quick: bool) -> NotebookResult:
    """Execute ``path`` in a fresh kernel; save the executed copy and the kernel's stderr in ``out_dir``."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("COURSE_QUICK", None)
    if quick:
        env["COURSE_QUICK"] = "1"
    client = NotebookClient(
        nb, timeout=cell_timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    log_path = out_dir / f"{path.stem}.stderr.txt"
    error = None
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            client.execute(env=env, stderr=log)
        except CellExecutionError as exc:
            error = f"{exc.ename}: {exc.evalue}"
        except (CellTimeoutError, DeadKernelError) as exc:
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    seconds = time.monotonic() - started
    if error is not None:
        failing = next((i for i, c in enumerate(nb.cells) if _error_output(c)), None)
        error = f"cell {failing}: {error}" if failing is not None else error
    nbformat.write(nb, out_dir / path.name)
    warnings = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                warnings += [f"cell {index}: {line}" for line in warning_lines(output.get("text", ""))]
    warnings += [f"kernel stderr: {line}" for line in warning_lines(log_path.read_text(encoding="utf-8"))]
    return NotebookResult(path.name, "failed" if error else "ran", round(seconds, 1), error, warnings)


def _error_output(cell) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def _environment() -> dict[str, str]:
    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": str(torch.version.cuda)}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        info["compute capability"] = f"{major}.{minor}"
    return info


def write_summary(results: list[NotebookResult], environment: dict[str, str], out_dir: Path) -> str:
    """Write summary.json and summary.md into ``out_dir``; return the markdown."""
    (out_dir / "summary.json").write_text(
        json.dumps({"environment": environment, "notebooks": [asdict(r) for r in results]}, indent=2) + "\n",
        encoding="utf-8",
    )
    lines = [
        "# GPU check",
        "",
        ", ".join(f"{key}: {value}" for key, value in environment.items()),
        "",
        "| notebook | result | seconds | first error | warnings |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        result = "ok" if r.ok else ("FAILED" if r.status == "failed" else "WARNED")
        lines.append(f"| {r.notebook} | {result} | {r.seconds:.1f} | {r.error or ''} | {len(r.warnings)} |")
    for r in results:
        if r.warnings:
            lines += ["", f"## Warnings in {r.notebook}", "", *(f"- `{w[:300]}`" for w in r.warnings)]
    text = "\n".join(lines) + "\n"
    (out_dir / "summary.md").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="folder of NN_*.ipynb")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-check", help="where results go (emptied first)")
    parser.add_argument("-k", dest="only", action="append", default=[], help="only notebooks whose name contains this")
    parser.add_argument("--cell-timeout", type=int, default=600, help="seconds per cell (default 600)")
    parser.add_argument("--quick", action="store_true", help="smallest problem sizes (COURSE_QUICK=1)")
    parser.add_argument("--allow-cpu", action="store_true", help="run even without a GPU (to test this script)")
    args = parser.parse_args(argv)

    problems = preflight(args.allow_cpu)
    if problems:
        print("gpu-check cannot run here:\n" + "\n".join(f"- {p}" for p in problems), file=sys.stderr)
        return 2
    notebooks = sorted(p for p in args.notebooks.glob("[0-9][0-9]_*.ipynb") if all_or_any(p.name, args.only))
    if not notebooks:
        print(f"gpu-check: no notebook in {args.notebooks} matches {args.only or 'NN_*.ipynb'}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.iterdir():
        if old.is_file():
            old.unlink()
    environment = _environment()
    print("gpu-check: " + ", ".join(f"{k} {v}" for k, v in environment.items()), flush=True)
    results = []
    for index, path in enumerate(notebooks, 1):
        print(f"[{index}/{len(notebooks)}] {path.name} ...", end=" ", flush=True)
        result = run_notebook(path, args.out, args.cell_timeout, args.quick)
        verdict = "ok" if result.ok else (result.error or f"{len(result.warnings)} warning(s)")
        print(f"{result.seconds:.1f} s, {verdict}", flush=True)
        results.append(result)
    print(write_summary(results, environment, args.out))
    print(f"executed notebooks and summary in {args.out}")
    return 0 if all(r.ok for r in results) else 1


def all_or_any(name: str, patterns: list[str]) -> bool:
    """True when ``patterns`` is empty or ``name`` contains one of them."""
    return not patterns or any(p in name for p in patterns)


if __name__ == "__main__":
    sys.exit(main())
