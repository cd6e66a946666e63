"""Run every course notebook top to bottom on this machine's GPU, one at a time, and keep what it printed.

Usage (from the repository root, with the Python that has your CUDA build of torch)::

    python tools/gpu_check.py                 # every notebook, GPU sizes, results in gpu-check/
    python tools/gpu_check.py -k 07 -k 09     # only notebooks whose name contains 07 or 09
    python tools/gpu_check.py --keep          # and keep the run in notebooks/gpu-runs/ (below)
    make gpu-check GPU_CHECK_ARGS=--keep      # the same as the last line

It needs no ``make install``: the GPU machine's own torch (see ``course_utils.env.SUPPORTED_TORCH``
for the range the notebooks support) plus the few pure-Python packages in ``NEEDED`` below;
``course_utils`` is found through ``PYTHONPATH`` set to the repository root.

**One notebook at a time.** Each notebook runs in a fresh kernel with the problem sizes of the
device (no ``COURSE_QUICK``), one after the other, never two at once: two notebooks on one GPU
make each other's timings lie. Another process on the GPU does the same, so the check looks
(``nvidia-smi --query-compute-apps``, or NVML through ``pynvml`` when there is no nvidia-smi)
before the first notebook, between notebooks and every ``--watch-interval`` seconds while one
runs, and says plainly, before the run and in the summary, which process it saw. Where the
GPU's process list is blind (a container whose nvidia-smi lists not even this run's own kernels)
it says that it cannot tell.

The executed notebooks, each kernel's own stderr and a summary (``summary.json`` and
``summary.md``: per notebook ran or failed, seconds, the first error, any warning text, the
other GPU processes seen) go to one folder (``gpu-check/`` by default).

**Keeping a run** (``--keep``): the run also goes to ``notebooks/gpu-runs/<gpu>-torch<X.Y>-<commit>/``
(``--runs-dir`` for another folder), the kept-run layout that ``tests/notebooks/test_gpu_claims.py``
checks the course's GPU sentences against and the course site shows (``tools/gpu_runs.py``):
the notebooks that ran, ``summary.md``, ``README.md`` (the conditions) and ``run.json``. A
folder of the same name is replaced. It refuses to keep a run during which another process
used the GPU (``--keep-shared`` keeps it anyway, and its README and run.json say so), a run at
``--quick`` sizes, or a run whose commit it cannot tell (``--commit``). Then commit the folder.

On the lent device machine of a development session (CUDA torch, no Jupyter packages, no git
history, at most 8 files back from ``$OUT``): commit the notebooks first (the copy there has no
git, so ``--commit`` names what it runs; add ``+dirty`` if it is not committed), fetch the wheels
here as the device README says (``pip download --only-binary=:all: --python-version 3.12 ...``
of ``nbclient nbformat ipykernel ipywidgets torchao`` and their missing dependencies into an
ignored ``.whl/``), then run, with ``.whl`` carried::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \\
    PYTHONPATH=/tmp/site python3 tools/gpu_check.py --keep --commit <short hash> \\
        --runs-dir /tmp/runs --out /tmp/check; tar -czf $OUT/gpu-check.tgz -C /tmp runs check

and unpack ``runs/<name>/`` of ``gpu-check.tgz`` into ``notebooks/gpu-runs/`` here (``check/``
holds each kernel's stderr). The kept H200 run's six notebooks took 230 s in all (its README); a
command there may run 10 minutes at most, so pick notebooks with ``-k`` if all twelve may not fit.

Exit status: 0 when every notebook ran with no warning (and the run was kept if asked), 1 when
a notebook failed or printed a warning, 2 when the machine cannot run the check (no GPU, a
torch outside the supported range, a missing package, ``--keep`` without a commit), 3 when
``--keep`` was refused because another process used the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = ROOT / "notebooks" / "gpu-runs"

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

# The machine, read in a child process so that this one never holds a CUDA context of its own
# (it would show as a process on the GPU). Keys as in tools/gpu_runs.py's RUN_FIELDS.
_ENVIRONMENT_SCRIPT = r"""
import json, os, platform, sys, importlib.metadata as md
import torch
info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": str(torch.version.cuda)}
try:
    info["torchao"] = md.version("torchao")
except md.PackageNotFoundError:
    info["torchao"] = "none"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None) \
    if os.path.exists("/proc/cpuinfo") else None
info["cpu"] = f"{cpu or platform.processor() or 'unknown'}, {os.cpu_count()} cores"
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    info["gpu"] = props.name
    info["gpu_memory_mib"] = props.total_memory // 2**20
    info["compute_capability"] = f"{props.major}.{props.minor}"
else:
    info.update(gpu="none", gpu_memory_mib=0, compute_capability="none")
print(json.dumps(info))
"""

__all__ = ["NEEDED", "GpuProcess", "GpuWatch", "NotebookResult", "gpu_processes", "main", "preflight", "run_notebook"]


@dataclass(frozen=True)
class GpuProcess:
    """A process that holds a context on the GPU, as nvidia-smi (or NVML) lists it."""

    pid: int
    name: str
    used_mib: int | None

    def __str__(self) -> str:
        memory = f", {self.used_mib} MiB" if self.used_mib is not None else ""
        return f"pid {self.pid} ({self.name}{memory})"


def _nvidia_smi(*query: str) -> str | None:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        done = subprocess.run([executable, *query], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def gpu_processes() -> list[GpuProcess] | None:
    """The processes on the GPUs (any GPU of the machine), or None when this machine cannot say."""
    text = _nvidia_smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    if text is not None:
        found = []
        for line in text.splitlines():
            parts = [part.strip() for part in line.split(",")]
            if len(parts) >= 3 and parts[0].isdigit():
                found.append(GpuProcess(int(parts[0]), parts[1], int(parts[2]) if parts[2].isdigit() else None))
        return found
    if importlib.util.find_spec("pynvml") is None:
        return None
    import pynvml

    try:
        pynvml.nvmlInit()
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                memory = proc.usedGpuMemory // 2**20 if proc.usedGpuMemory else None
                found.append(GpuProcess(proc.pid, _process_name(proc.pid), memory))
        pynvml.nvmlShutdown()
        return found
    except pynvml.NVMLError:
        return None


def _process_name(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return "?"


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process this machine's /proc shows (empty without /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    return parents


def _is_ours(pid: int, parents: dict[int, int], me: int) -> bool:
    """Whether ``pid`` is this process or one it started (a notebook's kernel)."""
    seen = set()
    while pid not in seen and pid > 1:
        if pid == me:
            return True
        seen.add(pid)
        pid = parents.get(pid, 0)
    return False


class GpuWatch:
    """Who else uses the GPU while the check runs: asked before and after each notebook and every ``interval`` s.

    ``query`` is ``gpu_processes`` (the tests pass a fake). A process that is neither this
    one nor one it started is *another* process; ``others`` maps each notebook (or
    ``"before the run"``) to those seen then. While a notebook runs, a pid that this
    machine's process table does not show (another container, or this run's kernel seen
    from outside a container) is only counted when no kernel of this run is alive, i.e.
    between notebooks. ``blind`` is true when the process list never showed anything, not even
    this run's own kernels: then it cannot tell.
    """

    def __init__(self, query: Callable[[], list[GpuProcess] | None] = gpu_processes, interval: float = 5.0) -> None:
        self.query, self.interval = query, interval
        self.others: dict[str, list[GpuProcess]] = {}
        self.unknown = False  # the query could not answer
        self.listed_any = False  # some process was ever listed (ours or not)
        self._lock = threading.Lock()

    def look(self, when: str, *, kernel_alive: bool, confirm: float = 0.0) -> list[GpuProcess]:
        """Ask; record and return the other processes seen now.

        With ``confirm`` (seconds), a process seen is only counted if it is still listed when
        asked again that much later (a kernel that just shut down may linger a moment).
        """
        others = self._others(kernel_alive)
        if others and confirm > 0:
            time.sleep(confirm)
            still = {p.pid for p in self._others(kernel_alive)}
            others = [p for p in others if p.pid in still]
        with self._lock:
            known = self.others.setdefault(when, [])
            known += [p for p in others if p.pid not in {k.pid for k in known}]
        return others

    def _others(self, kernel_alive: bool) -> list[GpuProcess]:
        found = self.query()
        if found is None:
            self.unknown = True
            return []
        parents, me = _parents(), os.getpid()
        others = []
        for process in found:
            self.listed_any = True
            if _is_ours(process.pid, parents, me):
                continue
            if kernel_alive and process.pid not in parents:
                continue  # not in this machine's process table: perhaps our own kernel, seen from outside
            others.append(process)
        return others

    @contextlib.contextmanager
    def during(self, when: str) -> Iterator[None]:
        """Look every ``interval`` seconds in a background thread until the block ends."""
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(self.interval):
                self.look(when, kernel_alive=True)

        thread = threading.Thread(target=poll, daemon=True) if self.interval > 0 else None
        if thread:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread:
                thread.join()

    def seen(self) -> list[GpuProcess]:
        """Every other process seen, once each."""
        unique: dict[int, GpuProcess] = {}
        for processes in self.others.values():
            for process in processes:
                unique.setdefault(process.pid, process)
        return list(unique.values())

    def verdict(self) -> str:
        """One plain sentence about the other processes on the GPU during the run."""
        seen = [f"{when}: {', '.join(map(str, found))}" for when, found in self.others.items() if found]
        if seen:
            return (
                f"ANOTHER PROCESS USED THE GPU ({'; '.join(seen)}): timings measured beside it are not this GPU's alone"
            )
        if self.unknown:
            return "other processes on the GPU: unknown (neither nvidia-smi nor NVML answered)"
        if not self.listed_any:
            return (
                "other processes on the GPU: unknown (the process list showed none, not even this run's own "
                "kernels: it cannot see processes here)"
            )
        return "other processes on the GPU: none seen"


@dataclass
class NotebookResult:
    """What one notebook did."""

    notebook: str
    status: str  # "ran" or "failed"
    seconds: float
    error: str | None = None  # "cell N: Ename: message" for the first failing cell
    warnings: list[str] = field(default_factory=list)
    other_gpu_processes: list[str] = field(default_factory=list)  # str(GpuProcess) of each seen while it ran

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


def _environment() -> dict:
    """The machine (``RUN_FIELDS`` keys), read in a child Python; the driver from nvidia-smi."""
    done = subprocess.run([sys.executable, "-c", _ENVIRONMENT_SCRIPT], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"gpu-check: could not read the machine's environment:\n{done.stderr[-2000:]}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    driver = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
    info["driver"] = driver.splitlines()[0].strip() if driver else "unknown"
    return info


def write_summary(results: list[NotebookResult], environment: dict, watch_verdict: str, out_dir: Path) -> str:
    """Write summary.json and summary.md into ``out_dir``; return the markdown."""
    (out_dir / "summary.json").write_text(
        json.dumps(
            {
                "environment": environment,
                "one_notebook_at_a_time": True,
                "other_gpu_processes": watch_verdict,
                "notebooks": [asdict(r) for r in results],
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    lines = [
        "# GPU check",
        "",
        ", ".join(f"{key}: {value}" for key, value in environment.items()),
        "",
        f"One notebook at a time, each in a fresh kernel; {watch_verdict}.",
        "",
        "| notebook | result | seconds | first error | warnings | other GPU processes |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        result = "ok" if r.ok else ("FAILED" if r.status == "failed" else "WARNED")
        others = ", ".join(r.other_gpu_processes)
        lines.append(f"| {r.notebook} | {result} | {r.seconds:.1f} | {r.error or ''} | {len(r.warnings)} | {others} |")
    for r in results:
        if r.warnings:
            lines += ["", f"## Warnings in {r.notebook}", "", *(f"- `{w[:300]}`" for w in r.warnings)]
    text = "\n".join(lines) + "\n"
    (out_dir / "summary.md").write_text(text, encoding="utf-8")
    return text


def run_name(gpu: str, torch_version: str, commit: str) -> str:
    """The kept run's folder name: GPU, torch major.minor, commit.

    >>> run_name("NVIDIA H200", "2.11.0+cu130", "d393fde"), run_name("Tesla T4", "2.12.1", "abc1234")
    ('h200-torch2.11-d393fde', 't4-torch2.12-abc1234')
    >>> run_name("NVIDIA GeForce RTX 4090", "2.13.0", "abc1234+dirty")
    'rtx-4090-torch2.13-abc1234-dirty'
    """
    words = [w for w in re.split(r"[^a-z0-9]+", gpu.lower()) if w and w not in {"nvidia", "geforce", "tesla"}]
    major_minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    return f"{'-'.join(words) or 'gpu'}-torch{major_minor}-{re.sub(r'[^A-Za-z0-9]+', '-', commit)}"


def current_commit(root: Path = ROOT) -> str | None:
    """The checkout's short commit, ``+dirty`` when notebooks/ or course_utils/ have uncommitted changes."""
    git = shutil.which("git")
    if git is None:
        return None
    done = subprocess.run([git, "rev-parse", "--short=7", "HEAD"], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        return None
    status = subprocess.run(
        [git, "status", "--porcelain", "--", "notebooks", "course_utils"], cwd=root, capture_output=True, text=True
    )
    dirty = any(line and "notebooks/gpu-runs/" not in line for line in status.stdout.splitlines())
    return done.stdout.strip() + ("+dirty" if dirty else "")


def keep_run(
    results: list[NotebookResult], environment: dict, watch: GpuWatch, out_dir: Path, runs_dir: Path, commit: str
) -> Path:
    """Write the run in the kept-run layout into ``runs_dir/<name>/`` (replacing a folder of that name)."""
    kept = [r for r in results if r.status == "ran"]
    folder = runs_dir / run_name(environment["gpu"], environment["torch"], commit)
    if folder.exists():
        print(f"gpu-check: replacing the kept run {folder}")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for result in kept:
        shutil.copyfile(out_dir / result.notebook, folder / result.notebook)
    shutil.copyfile(out_dir / "summary.md", folder / "summary.md")
    date = datetime.datetime.now(datetime.UTC).date().isoformat()
    info = {
        **{key: environment[key] for key in ("gpu", "gpu_memory_mib", "compute_capability", "driver", "cpu")},
        **{key: environment[key] for key in ("python", "torch", "cuda", "torchao")},
        "commit": commit,
        "date": date,
        "quick": False,
        "one_notebook_at_a_time": True,
        "other_gpu_processes": [str(p) for p in watch.seen()],
        "notebooks": [r.notebook for r in kept],
    }
    (folder / "run.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    failed = [f"{r.notebook} ({r.error})" for r in results if r.status != "ran"]
    numbers = ", ".join(r.notebook[:2] for r in kept)
    readme = [
        f"# Notebooks {numbers} executed on an {environment['gpu']}",
        "",
        f"What the notebooks of commit {commit} printed on a real GPU, kept by `python tools/gpu_check.py --keep` "
        "so that anyone without one can check a sentence against it.",
        "",
        f"- Machine: one {environment['gpu']} ({environment['gpu_memory_mib']:,} MiB, compute capability "
        f"{environment['compute_capability']}, driver {environment['driver']}), CPU {environment['cpu']}, "
        f"Python {environment['python']}, torch {environment['torch']} (CUDA {environment['cuda']}), "
        f"torchao {environment['torchao']}.",
        "- How: one notebook at a time, each in a fresh kernel, problem sizes of the device (no COURSE_QUICK), "
        f"on {date}.",
        f"- {watch.verdict()[0].upper()}{watch.verdict()[1:]}.",
        f"- Result: {len(kept)} of {len(results)} ran to the end"
        + (f"; not kept, because they failed: {'; '.join(failed)}" if failed else "")
        + "; warnings and seconds per notebook in summary.md.",
        "- Timings on a shared machine vary: read a table's `± IQR/2` column (and its `noisy` marks) before a speedup.",
    ]
    (folder / "README.md").write_text("\n".join(readme) + "\n", encoding="utf-8")
    return folder


def main(argv: list[str] | None = None, watch: GpuWatch | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="folder of NN_*.ipynb")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-check", help="where results go (emptied first)")
    parser.add_argument("-k", dest="only", action="append", default=[], help="only notebooks whose name contains this")
    parser.add_argument("--cell-timeout", type=int, default=600, help="seconds per cell (default 600)")
    parser.add_argument("--quick", action="store_true", help="smallest problem sizes (COURSE_QUICK=1)")
    parser.add_argument("--allow-cpu", action="store_true", help="run even without a GPU (to test this script)")
    parser.add_argument("--keep", action="store_true", help="keep the run in --runs-dir (the kept-run layout)")
    parser.add_argument("--runs-dir", type=Path, default=RUNS_DIR, help="where --keep writes (notebooks/gpu-runs)")
    parser.add_argument("--commit", help="the course commit being run (default: git's, +dirty with local changes)")
    parser.add_argument("--keep-shared", action="store_true", help="keep the run even if another process used the GPU")
    parser.add_argument("--watch-interval", type=float, default=5.0, help="seconds between GPU process checks (0: off)")
    args = parser.parse_args(argv)

    problems = preflight(args.allow_cpu)
    commit = args.commit or (current_commit() if args.keep else None)
    if args.keep and args.quick:
        problems.append("--keep keeps runs at the device's problem sizes only: leave out --quick")
    if args.keep and not commit:
        problems.append("--keep needs the commit the notebooks come from: no git here, so pass --commit <short hash>")
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
    watch = watch or GpuWatch(interval=args.watch_interval)
    print("gpu-check: " + ", ".join(f"{k} {v}" for k, v in environment.items()), flush=True)
    print(f"gpu-check: {len(notebooks)} notebook(s), one at a time, each in a fresh kernel", flush=True)
    if others := watch.look("before the run", kernel_alive=False):
        refused = "; this run will not be kept (--keep-shared keeps it)" if args.keep and not args.keep_shared else ""
        print(
            f"gpu-check: ANOTHER PROCESS HOLDS THE GPU NOW: {', '.join(map(str, others))}. "
            f"Timings measured beside it are not this GPU's alone{refused}",
            flush=True,
        )
    elif watch.unknown:
        print("gpu-check: cannot tell which processes use the GPU (neither nvidia-smi nor NVML answered)", flush=True)
    results = []
    for index, path in enumerate(notebooks, 1):
        print(f"[{index}/{len(notebooks)}] {path.name} ...", end=" ", flush=True)
        with watch.during(path.name):
            result = run_notebook(path, args.out, args.cell_timeout, args.quick)
        watch.look(path.name, kernel_alive=False, confirm=2.0)  # the kernel has shut down: what is left is not ours
        result.other_gpu_processes = [str(p) for p in watch.others.get(path.name, [])]
        verdict = "ok" if result.ok else (result.error or f"{len(result.warnings)} warning(s)")
        if result.other_gpu_processes:
            verdict += f"; ANOTHER PROCESS ON THE GPU: {', '.join(result.other_gpu_processes)}"
        print(f"{result.seconds:.1f} s, {verdict}", flush=True)
        results.append(result)
    print(write_summary(results, environment, watch.verdict(), args.out))
    print(f"executed notebooks and summary in {args.out}")
    print(f"gpu-check: {watch.verdict()}")
    if args.keep:
        if watch.seen() and not args.keep_shared:
            print(
                f"gpu-check: NOT KEPT: another process used the GPU during the run "
                f"({', '.join(map(str, watch.seen()))}). Run again on a quiet GPU, or pass --keep-shared "
                "to keep it with that noted in its README.",
                file=sys.stderr,
            )
            return 3
        folder = keep_run(results, environment, watch, args.out, args.runs_dir, commit)
        print(f"gpu-check: kept the run in {folder}: commit it (tests/notebooks/test_gpu_claims.py checks its claims)")
    return 0 if all(r.ok for r in results) else 1


def all_or_any(name: str, patterns: list[str]) -> bool:
    """True when ``patterns`` is empty or ``name`` contains one of them."""
    return not patterns or any(p in name for p in patterns)


if __name__ == "__main__":
    sys.exit(main())
