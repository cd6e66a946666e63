"""course_utils.env, and the promise that importing course_utils changes nothing."""

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import course_utils
from course_utils.env import in_colab, quick_mode, scaled, seed_everything


def test_seed_everything_repeats_all_generators():
    seed_everything(5)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_everything(5)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_in_colab(monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert not in_colab()
    monkeypatch.setitem(sys.modules, "google.colab", object())
    assert in_colab()


def test_quick_mode_and_scaled(monkeypatch):
    monkeypatch.delenv("COURSE_QUICK", raising=False)
    assert not quick_mode()
    assert scaled("cpu", cpu=1, gpu=2, quick=0) == 1
    assert scaled("cuda", cpu=1, gpu=2, quick=0) == 2
    assert scaled(torch.device("mps"), cpu=1, gpu=2) == 2
    monkeypatch.setenv("COURSE_QUICK", "1")
    assert quick_mode()
    assert scaled("cuda", cpu=1, gpu=2, quick=0) == 0
    assert scaled("cuda", cpu=1, gpu=2) == 2


@pytest.mark.slow  # a fresh Python that imports torch (seconds): make test, not make test-fast
def test_import_has_no_side_effects():
    probe = """
import torch
before = (torch.random.get_rng_state().clone(), torch.backends.cudnn.benchmark,
          torch.get_float32_matmul_precision(), torch.get_num_threads(), torch.get_default_dtype())
import course_utils, course_utils.plotting, course_utils.training
after = (torch.random.get_rng_state(), torch.backends.cudnn.benchmark,
         torch.get_float32_matmul_precision(), torch.get_num_threads(), torch.get_default_dtype())
assert torch.equal(before[0], after[0]), "RNG state changed"
assert before[1:] == after[1:], (before[1:], after[1:])
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_every_exported_name_resolves():
    import course_utils

    for name in course_utils.__all__:
        assert getattr(course_utils, name) is not None, name
    assert set(course_utils.__all__) <= set(dir(course_utils))


def test_importing_the_package_does_not_import_torch():
    probe = "import sys, course_utils, grading.cli; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


def test_course_utils_imports_nothing_of_the_grader_nbgrader_or_jupyter():
    """What notebooks import is the learner's package: no grading code, no nbgrader, no Jupyter."""
    import ast

    banned = {"grading", "nbgrader", "nbformat", "nbclient", "jupyter_server", "jupyter_client", "jupyterlab"}
    for path in sorted(Path(course_utils.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            hits = {n.split(".")[0] for n in names} & banned
            assert not hits, f"{path.name} imports {sorted(hits)}"
