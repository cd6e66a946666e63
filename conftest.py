"""Repository-wide pytest hooks: every notebook cell really ran, and how long each notebook took.

nbval turns each code cell of ``notebooks/*.ipynb`` into a test item. A notebook whose
cells were skipped (an ``NBVAL_SKIP`` marker, a kernel that died, an item that never
reported) would otherwise look green; this guard fails the session instead. Under
pytest-xdist (``make test`` runs two workers) the controller, which sees every report,
does the check.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import nbformat
import pytest

_expected: dict[str, int] = {}
_passed: Counter[str] = Counter()
_seconds: Counter[str] = Counter()


def _notebook_of(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    return path if path.endswith(".ipynb") else None


def _expect(rootpath: Path, nodeids: list[str]) -> None:
    """Remember how many cells each fully selected notebook has."""
    collected = Counter(nb for nodeid in nodeids if (nb := _notebook_of(nodeid)))
    for notebook, count in collected.items():
        path = Path(rootpath, notebook)
        cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and c.source.strip()]
        if count >= len(cells):  # a -k selection of part of a notebook is not guarded
            _expected[notebook] = len(cells)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""What each pytest-xdist worker sets to its share of the cores, for itself and every kernel it starts."""
THREADS_SET = "COURSE_TEST_THREADS"  # set to the share where this conftest set THREAD_VARIABLES (a test reads it)


def threads_per_worker(cores: int, workers: int) -> int:
    """Each of ``workers`` processes' share of ``cores`` (at least one)."""
    return max(1, cores // max(1, workers))


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker: OpenMP and MKL threads to its share of the cores, unless the caller set either.

    Every worker's notebook kernels would otherwise start one OpenMP thread per core, and
    OpenMP's waiting threads spin: two workers on two cores ran notebooks 06 and 02 side by
    side in 70 s and 59 s, against 20 s and 16 s with one thread each (this machine, 2 cores).
    Kernels and subprocesses inherit the environment; the grader sets its own kernels' threads.
    """
    if not _is_xdist_worker(config):
        return
    if any(name in os.environ for name in THREAD_VARIABLES):
        return  # the caller's choice
    share = str(threads_per_worker(len(os.sched_getaffinity(0)), int(config.workerinput["workercount"])))
    for name in THREAD_VARIABLES:
        os.environ[name] = share
    os.environ[THREADS_SET] = share


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _is_xdist_worker(config):  # with pytest-xdist, the controller checks (below): workers run a share
        _expect(config.rootpath, [item.nodeid for item in items])


SPREAD_FILES = ("tests/notebooks/test_exercises.py", "tests/notebooks/test_wrong_answers.py")
"""Files whose tests each stand alone (each runs a notebook or an exercise of its own, no shared fixture)."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile``, except that the tests of ``SPREAD_FILES`` are shared out one by one.

    A file's tests, and a notebook's cells, stay on one worker (in order, with the file's
    fixtures made once); the files of ``SPREAD_FILES`` would leave one worker with minutes of
    notebook runs while the other idles. (pytest-xdist's own ``--dist loadgroup`` cannot do
    this with pytest 9: it renames items through ``item._nodeid``, which pytest 9 no longer
    reads, so every test becomes a group of its own.)
    """
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesWithSpreadTests(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path in SPREAD_FILES else path

    return FilesWithSpreadTests(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """pytest-xdist's controller: what a worker collected (every worker collects every item)."""
    _expect(Path(node.config.rootpath), ids)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    notebook = _notebook_of(report.nodeid)
    if notebook:
        _seconds[notebook] += report.duration
        if report.when == "call" and report.passed:
            _passed[notebook] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List each notebook's run time (kernel start included), slowest first."""
    if not _seconds:
        return
    terminalreporter.section("notebook run times")
    for notebook, seconds in _seconds.most_common():
        terminalreporter.write_line(f"{seconds:7.1f} s  {notebook}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if some notebook cell did not run and pass."""
    if _is_xdist_worker(session.config):
        return
    short = {nb: (_passed[nb], n) for nb, n in _expected.items() if _passed[nb] < n}
    if short and exitstatus == 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for notebook, (ran, total) in short.items():
            message = f"notebook guard: {notebook}: only {ran} of {total} code cells ran and passed"
            if reporter:
                reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
