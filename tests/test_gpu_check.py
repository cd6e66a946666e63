"""tests/gpu_check.py, the one-command GPU check, exercised on the CPU with tiny notebooks."""

from __future__ import annotations

import json

import gpu_check
import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

from course_utils.env import SUPPORTED_TORCH, torch_version_supported


def _write(folder, name, *sources):
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), folder / name)


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
    [("2.11.0+cu130", True), ("2.12.1", True), ("2.13.0", True), ("2.10.2", False), ("2.14.0.dev20261101", False)],
)
def test_supported_torch_range(version, supported):
    assert torch_version_supported(version) is supported


def test_the_pinned_torch_is_inside_the_supported_range():
    assert torch_version_supported(torch.__version__)
    assert SUPPORTED_TORCH[1] == tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


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
