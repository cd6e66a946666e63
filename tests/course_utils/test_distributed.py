"""Unit tests for course_utils.distributed: command line, backend choice, launcher."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest
import torch

from course_utils.distributed import LaunchError, choose_backend, run_command, run_torchrun, torchrun_command
from tests.support.paths import ROOT


def test_choose_backend():
    assert choose_backend(0, 1) == "gloo"
    assert choose_backend(0, 2) == "gloo"
    assert choose_backend(1, 2) == "gloo"  # two processes may not share one GPU under NCCL
    assert choose_backend(2, 2) == "nccl"
    assert choose_backend(8, 4) == "nccl"
    with pytest.raises(ValueError):
        choose_backend(2, 0)


def test_torchrun_command_uses_this_interpreter():
    command = torchrun_command("/tmp/train.py", ["--steps", 3], nproc_per_node=4)
    assert command == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=4",
        "/tmp/train.py",
        "--steps",
        "3",
    ]


def test_run_command_captures_both_streams():
    result = run_command([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert result.returncode == 0
    assert result.stdout.strip() == "out"
    assert result.stderr.strip() == "err"
    assert result.seconds > 0


def test_run_command_failure_shows_output():
    code = "import sys; print('partial result'); sys.exit('something broke')"
    with pytest.raises(LaunchError) as info:
        run_command([sys.executable, "-c", code])
    message = str(info.value)
    assert "exit code 1" in message and "partial result" in message and "something broke" in message
    assert info.value.result.returncode == 1
    assert run_command([sys.executable, "-c", code], check=False).returncode == 1


def test_run_command_timeout_ends_children(tmp_path):
    """A timed-out launcher and the child it started are both gone afterwards."""
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    start = time.perf_counter()
    with pytest.raises(LaunchError, match="timed out") as info:
        run_command([sys.executable, "-c", code], timeout=2.0)
    assert time.perf_counter() - start < 20
    assert "started" in info.value.result.stdout
    child = int(pid_file.read_text())
    deadline = time.perf_counter() + 5
    while time.perf_counter() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), "the grandchild process survived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie that nobody reaped yet is dead too
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.slow  # a fresh Python that imports torch (seconds): make test, not make test-fast
def test_run_torchrun_starts_ranks(tmp_path):
    """One real launch: two workers see their rank, world size and one thread each."""
    script = tmp_path / "ranks.py"
    script.write_text(
        "import os\n"
        "print(f\"rank={os.environ['RANK']} local={os.environ['LOCAL_RANK']} \"\n"
        "      f\"world={os.environ['WORLD_SIZE']} threads={os.environ['OMP_NUM_THREADS']}\")\n"
    )
    result = run_torchrun(script, nproc_per_node=2, timeout=120)
    # both workers write to the same pipe, so their lines may interleave: find, don't split
    lines = sorted(re.findall(r"rank=\d+ local=\d+ world=\d+ threads=\d+", result.stdout))
    assert lines == ["rank=0 local=0 world=2 threads=1", "rank=1 local=1 world=2 threads=1"]
    assert "OMP_NUM_THREADS" not in result.stderr  # we set it, so torchrun prints no notice


def test_launch_error_puts_worker_errors_first():
    """torchrun's own summary is long; the workers' tracebacks ([rankN]: ...) are shown apart."""
    stderr = "[rank1]: RuntimeError: rank 1 gives up\n" + "".join(f"torchrun noise {i}\n" for i in range(100))
    code = f"import sys; sys.stderr.write({stderr!r}); sys.exit(1)"
    with pytest.raises(LaunchError) as info:
        run_command([sys.executable, "-c", code])
    message = str(info.value)
    assert "--- workers' errors ---\n[rank1]: RuntimeError: rank 1 gives up" in message
    assert "torchrun noise 99" in message and "torchrun noise 0\n" not in message


def test_launch_error_shows_a_native_crash_of_a_worker():
    """A C++ abort (gloo's exceptions end so) prints no [rankN]: prefix, and torchrun's summary would push it out."""
    stderr = (
        "terminate called after throwing an instance of 'gloo::IoException'\n"
        "  what():  [pair.cc:598] Connection closed by peer [127.0.0.1]:4242\n"
        + "".join(f"torchrun noise {i}\n" for i in range(100))
    )
    with pytest.raises(LaunchError) as info:
        run_command([sys.executable, "-c", f"import sys; sys.stderr.write({stderr!r}); sys.exit(1)"])
    assert (
        "--- workers' errors ---\nterminate called after throwing an instance of 'gloo::IoException'\n"
        "  what():  [pair.cc:598] Connection closed by peer" in str(info.value)
    )


@pytest.mark.slow
def test_the_training_script_of_notebook_08_runs_on_its_own(tmp_path):
    """The clean script a learner copies (the notebook only runs it through ddp_lab.py) works alone."""
    import nbformat

    notebook = ROOT / "notebooks" / "08_scale_out_with_distributed_data_parallel.ipynb"
    cells = nbformat.read(notebook, as_version=4).cells
    (source,) = [c.source for c in cells if c.source.startswith('%%writefile "{script_path}"')]
    script = tmp_path / "ddp_train.py"
    script.write_text(source.split("\n", 1)[1])
    sizes = ["--samples", 64, "--test-samples", 21, "--features", 8, "--hidden", 16, "--micro-batch", 8]
    args = ["--out", tmp_path, "--backend", "gloo", *sizes, "--accumulate", 2, "--epochs", 1]
    result = run_torchrun(script, args, nproc_per_node=2, timeout=120)
    assert re.search(r"test accuracy \d+/21 = ", result.stdout), result.stdout  # 21 samples, each counted once
    state = torch.load(tmp_path / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]  # no "module."
