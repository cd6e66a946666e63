"""tools/gpu_check.py, the one-command GPU check, exercised on the CPU with tiny notebooks."""

from __future__ import annotations

import json
import os

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

from course_utils.env import SUPPORTED_TORCH, torch_version_supported
from tools import gpu_check, gpu_runs
from tools.gpu_check import GpuProcess, GpuWatch


def _write(folder, name, *sources):
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), folder / name)


@pytest.mark.slow
def test_runs_every_notebook_and_reports_failures_and_warnings(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    _write(notebooks, "01_fine.ipynb", "import course_utils\nprint('hello')")
    _write(notebooks, "02_warns.ipynb", "import warnings\nwarnings.warn('old API', FutureWarning)")
    _write(notebooks, "03_fails.ipynb", "x = 1", "1 / 0", "print('never runs')")
    _write(notebooks, "notes.ipynb", "raise SystemExit  # not a course notebook: not run")
    out = tmp_path / "out"

    status = gpu_check.main(["--notebooks", str(notebooks), "--out", str(out), "--allow-cpu", "--quick"])

    assert status == 1
    summary = json.loads((out / "summary.json").read_text())
    rows = {row["notebook"]: row for row in summary["notebooks"]}
    assert sorted(rows) == ["01_fine.ipynb", "02_warns.ipynb", "03_fails.ipynb"]
    assert rows["01_fine.ipynb"]["status"] == "ran" and rows["01_fine.ipynb"]["warnings"] == []
    assert rows["02_warns.ipynb"]["status"] == "ran"
    assert any("FutureWarning: old API" in w for w in rows["02_warns.ipynb"]["warnings"])
    assert rows["03_fails.ipynb"]["status"] == "failed"
    assert rows["03_fails.ipynb"]["error"].startswith("cell 1: ZeroDivisionError")
    executed = nbformat.read(out / "03_fails.ipynb", as_version=4)
    assert executed.cells[1].outputs[0]["ename"] == "ZeroDivisionError"
    assert "| 03_fails.ipynb | FAILED |" in (out / "summary.md").read_text()
    assert summary["environment"]["torch"] == torch.__version__


@pytest.mark.slow
def test_exit_status_zero_when_everything_ran_cleanly(tmp_path):
    _write(tmp_path, "01_fine.ipynb", "print(1 + 1)")
    assert gpu_check.main(["--notebooks", str(tmp_path), "--out", str(tmp_path / "o"), "--allow-cpu"]) == 0


def test_no_matching_notebook_is_an_error_not_a_pass(tmp_path, capsys):
    _write(tmp_path, "01_fine.ipynb", "pass")
    status = gpu_check.main(["--notebooks", str(tmp_path), "--out", str(tmp_path / "o"), "--allow-cpu", "-k", "99"])
    assert status == 2
    assert "no notebook" in capsys.readouterr().err


def test_refuses_to_run_without_a_gpu_or_with_missing_packages(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(gpu_check.NEEDED, "surely_not_installed_pkg", "surely-not-installed-pkg==1.0")
    status = gpu_check.main(["--notebooks", str(tmp_path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert status == 2
    assert "pip install surely-not-installed-pkg==1.0" in err
    if not torch.cuda.is_available():
        assert "no CUDA device" in err


def test_torch_outside_the_supported_range_is_refused(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")
    assert any("outside the range" in p for p in gpu_check.preflight(allow_cpu=True))


@pytest.mark.parametrize(
    ("version", "supported"),
    [("2.11.0+cu130", True), ("2.12.1", True), ("2.13.0", True), ("2.15.0+cu132", True), ("2.10.2", False),
     ("2.16.0.dev20261201", False)],
)
def test_supported_torch_range(version, supported):
    assert torch_version_supported(version) is supported


def test_the_pinned_torch_is_inside_the_supported_range():
    assert torch_version_supported(torch.__version__)
    assert SUPPORTED_TORCH[1] >= tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def test_warning_lines_cover_python_and_cpp_warnings():
    text = (
        "epoch 1 done\n"
        "/x.py:3: UserWarning: careful\n"
        "[rank0]:[W1122 17:45:00.1 ProcessGroupNCCL.cpp:5023] Warning: barrier() using device ...\n"
        "[W1122 17:45:00.2 init.cpp:12] Warning: something\n"
        "W1122 20:19:43.365000 3676 torch/_dynamo/convert_frame.py:1743] [0/3] hit config.recompile_limit (3)\n"
        "V1122 20:19:43.200000 3676 torch/_dynamo/guards.py:4760] [0/1] [__recompiles] Recompiling function f\n"
        "100%|##########| 10/10 [00:01<00:00]\n"
    )
    assert len(gpu_check.warning_lines(text)) == 4


# --- one notebook at a time, and who else is on the GPU ----------------------------------------------

FAKE_H200 = {
    "python": "3.12.3",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "torchao": "0.18.0",
    "cpu": "Fake Xeon, 16 cores",
    "gpu": "NVIDIA H200",
    "gpu_memory_mib": 143771,
    "compute_capability": "9.0",
    "driver": "580.159.04",
}
STRANGER = GpuProcess(pid=2**22 + 17, name="python3", used_mib=20480)  # above Linux's pid_max: in no process table


class FakeGpu:
    """Answers like nvidia-smi: this run's kernels (children of this process) and, when told, a stranger."""

    def __init__(self, stranger_from: int | None = None, show_own: bool = True) -> None:
        self.calls = 0
        self.stranger_from = stranger_from  # the call from which the stranger is listed (None: never)
        self.show_own = show_own

    def __call__(self) -> list[GpuProcess]:
        self.calls += 1
        me = os.getpid()
        own = [GpuProcess(pid, "python3", 500) for pid, parent in gpu_check._parents().items() if parent == me]
        stranger = [STRANGER] if self.stranger_from is not None and self.calls >= self.stranger_from else []
        return (own if self.show_own else []) + stranger


@pytest.fixture
def fake_h200(monkeypatch):
    monkeypatch.setattr(gpu_check, "_environment", lambda: dict(FAKE_H200))


def _notebooks(tmp_path, *names):
    folder = tmp_path / "notebooks"
    folder.mkdir(parents=True)
    for name in names:
        _write(folder, name, "import time\ntime.sleep(0.6)\nprint('done')")
    return folder


@pytest.mark.slow
def test_a_quiet_run_is_kept_in_the_kept_run_layout_one_notebook_at_a_time(tmp_path, fake_h200, capsys):
    notebooks = _notebooks(tmp_path, "01_a.ipynb", "02_b.ipynb")
    runs = tmp_path / "runs"
    fake = FakeGpu()
    argv = ["--notebooks", str(notebooks), "--out", str(tmp_path / "o"), "--allow-cpu", "--keep"]
    argv += ["--runs-dir", str(runs), "--commit", "abc1234"]
    assert gpu_check.main(argv, watch=GpuWatch(fake, interval=0.1)) == 0
    out = capsys.readouterr().out
    assert "2 notebook(s), one at a time, each in a fresh kernel" in out
    assert "other processes on the GPU: none seen" in out
    assert fake.calls >= 1 + 2 * 3, "asked before the run, while each notebook ran, and after each"
    run = gpu_runs.read_run(runs / "h200-torch2.11-abc1234")  # the layout tools/gpu_runs.py reads
    assert run.info["one_notebook_at_a_time"] and run.info["other_gpu_processes"] == []
    assert run.info["notebooks"] == ["01_a.ipynb", "02_b.ipynb"] and run.info["commit"] == "abc1234"
    assert run.notebook("02").cells[0].outputs[0]["text"] == "done\n"
    readme = (run.folder / "README.md").read_text()
    assert "one notebook at a time" in readme and "driver 580.159.04" in readme and "none seen" in readme
    assert "One notebook at a time" in (run.folder / "summary.md").read_text()

    # Run again: the folder of the same name is replaced, not merged.
    (run.folder / "03_old.ipynb").write_text("{}")
    argv[argv.index(str(notebooks))] = str(_notebooks(tmp_path / "again", "01_a.ipynb"))
    assert gpu_check.main(argv, watch=GpuWatch(FakeGpu(), interval=0.1)) == 0
    assert sorted(p.name for p in run.folder.glob("*.ipynb")) == ["01_a.ipynb"]


@pytest.mark.slow
def test_another_process_on_the_gpu_is_said_before_and_in_the_summary_and_the_run_is_not_kept(
    tmp_path, fake_h200, capsys
):
    notebooks = _notebooks(tmp_path, "01_a.ipynb")
    runs = tmp_path / "runs"
    argv = ["--notebooks", str(notebooks), "--out", str(tmp_path / "o"), "--allow-cpu", "--keep"]
    argv += ["--runs-dir", str(runs), "--commit", "abc1234"]
    status = gpu_check.main(argv, watch=GpuWatch(FakeGpu(stranger_from=1), interval=0.1))
    captured = capsys.readouterr()
    assert status == 3 and not runs.exists()
    assert f"ANOTHER PROCESS HOLDS THE GPU NOW: pid {STRANGER.pid} (python3, 20480 MiB)" in captured.out
    assert "this run will not be kept" in captured.out
    assert "NOT KEPT: another process used the GPU" in captured.err
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "ANOTHER PROCESS USED THE GPU (before the run: pid" in summary
    assert "| 01_a.ipynb | ok |" in summary and f"pid {STRANGER.pid} (python3, 20480 MiB) |" in summary

    # Told to keep it anyway, it keeps it and says so.
    status = gpu_check.main([*argv, "--keep-shared"], watch=GpuWatch(FakeGpu(stranger_from=3), interval=0.1))
    assert status == 0
    run = gpu_runs.read_run(runs / "h200-torch2.11-abc1234")
    assert run.info["other_gpu_processes"] == [str(STRANGER)]
    assert "ANOTHER PROCESS USED THE GPU (01_a.ipynb: pid" in (run.folder / "README.md").read_text()


@pytest.mark.slow
def test_a_process_list_that_never_shows_this_runs_own_kernels_is_called_blind(tmp_path, fake_h200, capsys):
    notebooks = _notebooks(tmp_path, "01_a.ipynb")
    argv = ["--notebooks", str(notebooks), "--out", str(tmp_path / "o"), "--allow-cpu"]
    assert gpu_check.main(argv, watch=GpuWatch(FakeGpu(show_own=False), interval=0.1)) == 0
    assert "unknown (the process list showed none, not even this run's own kernels" in capsys.readouterr().out
    silent = GpuWatch(lambda: None, interval=0)
    assert silent.look("before the run", kernel_alive=False) == []
    assert silent.verdict() == "other processes on the GPU: unknown (neither nvidia-smi nor NVML answered)"


def test_this_process_and_its_children_are_never_another_process():
    me = os.getpid()
    parents = gpu_check._parents()
    assert gpu_check._is_ours(me, parents, me)
    assert not gpu_check._is_ours(os.getppid(), parents, me)
    watch = GpuWatch(lambda: [GpuProcess(me, "python", 1), GpuProcess(os.getppid(), "bash", 1)], interval=0)
    assert watch.look("now", kernel_alive=True) == [GpuProcess(os.getppid(), "bash", 1)]
    # While a kernel runs, a pid this machine cannot see may be that kernel seen from outside a container.
    assert GpuWatch(lambda: [STRANGER], interval=0).look("now", kernel_alive=True) == []
    assert GpuWatch(lambda: [STRANGER], interval=0).look("now", kernel_alive=False) == [STRANGER]


def test_keep_needs_a_commit_and_the_devices_sizes(tmp_path, monkeypatch, capsys):
    _write(tmp_path, "01_fine.ipynb", "pass")
    monkeypatch.setattr(gpu_check, "current_commit", lambda root=None: None)
    argv = ["--notebooks", str(tmp_path), "--out", str(tmp_path / "o"), "--allow-cpu", "--keep"]
    assert gpu_check.main(argv) == 2
    assert "pass --commit" in capsys.readouterr().err
    assert gpu_check.main([*argv, "--commit", "abc1234", "--quick"]) == 2
    assert "leave out --quick" in capsys.readouterr().err


def test_the_nvidia_smi_answer_is_read(monkeypatch):
    answer = "1234, python3, 2048\n5678, /usr/bin/python, [N/A]\n"
    monkeypatch.setattr(gpu_check, "_nvidia_smi", lambda *query: answer)
    assert gpu_check.gpu_processes() == [GpuProcess(1234, "python3", 2048), GpuProcess(5678, "/usr/bin/python", None)]
    monkeypatch.setattr(gpu_check, "_nvidia_smi", lambda *query: "")
    assert gpu_check.gpu_processes() == []
