"""The root conftest.py's notebook-cell guard fails a run in which a cell did not run (not grading.guard)."""

import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.support.paths import ROOT

pytest_plugins = ["pytester"]


# Real kernels, servers or processes for seconds: `make test` runs this file, `make test-fast` does not.
pytestmark = pytest.mark.slow


def _write(pytester, cells):
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, pytester.path / "demo.ipynb")


WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadfile"]], ids=["serial", "xdist"])


def test_guard_passes_when_every_cell_runs(pytester):  # under xdist: `make test` itself
    _write(pytester, ["x = 1", "assert x == 1"])
    result = pytester.runpytest_subprocess("--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK


@WORKERS
def test_guard_fails_when_a_cell_is_skipped(pytester, workers):
    _write(pytester, ["x = 1", "# NBVAL_SKIP\nassert x == 1"])
    result = pytester.runpytest_subprocess("--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider", *workers)
    result.stdout.fnmatch_lines(["*notebook guard: demo.ipynb: only 1 of 2 code cells ran and passed*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_the_files_whose_tests_are_shared_out_exist():
    """A renamed file in the root conftest's SPREAD_FILES would silently go back to one worker."""
    import conftest

    for path in conftest.SPREAD_FILES:
        assert (ROOT / path).is_file(), path
