"""Repository-wide pytest hooks: every notebook cell really ran, and how long each notebook took.

nbval turns each code cell of ``notebooks/*.ipynb`` into a test item. A notebook whose
cells were skipped (an ``NBVAL_SKIP`` marker, a kernel that died, an item that never
reported) would otherwise look green; this guard fails the session instead. Under
pytest-xdist (``make test`` runs two workers) the controller, which sees every report,
does the check.
"""

from __future__ import annotations

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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _is_xdist_worker(config):  # with pytest-xdist, the controller checks (below): workers run a share
        _expect(config.rootpath, [item.nodeid for item in items])
    _group_by_file(items)


def _group_by_file(items: list[pytest.Item]) -> None:
    """Keep each file's tests on one pytest-xdist worker, except those marked ``independent``.

    ``make test`` distributes with ``--dist loadgroup``: a notebook's cells, and a file's
    module-scoped fixtures (a graded course, a cluster), must stay on one worker, so every
    test is grouped by its file. A file whose tests each stand alone (each runs a whole
    notebook, say) is marked ``independent`` and its tests are shared out one by one, so no
    worker is left with all of them.
    """
    for item in items:
        if item.get_closest_marker("independent") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


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
