"""The root conftest gives each pytest-xdist worker, and every kernel it starts, its share of the cores."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_an_xdist_worker_and_what_it_starts_use_its_share_of_the_cores():
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None:
        pytest.skip("runs under pytest-xdist only (make test, make test-fast)")
    set_here = "COURSE_TEST_THREADS" in os.environ  # (the conftest's mark)
    if not set_here and ("OMP_NUM_THREADS" in os.environ or "MKL_NUM_THREADS" in os.environ):
        pytest.skip("the caller set OMP_NUM_THREADS or MKL_NUM_THREADS: the conftest leaves them as they are")
    share = str(max(1, len(os.sched_getaffinity(0)) // int(workers)))
    child = "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])"
    seen = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout.split()
    assert seen == [share, share]
