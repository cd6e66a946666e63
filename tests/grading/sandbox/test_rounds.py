"""A measured test's round processes share a memory budget with every process they start.

Real round processes in the jail (``grading.sandbox.rounds``, the ``echo`` entry), each given
a small budget; a round runs a shell that starts two Python children which each hold some
memory at once. Past the budget, the round fails as the process's own failure and says why;
under it, the same round passes (an honest answer loses nothing).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from grading.sandbox.memory import support
from grading.sandbox.protections import Limits, Protections, SlotLease, detect
from grading.sandbox.rounds import RoundError, RoundProcess, starter

# Real processes in the jail for seconds: `make test` runs this file, `make test-fast` does not.
pytestmark = pytest.mark.slow

PROTECTIONS = detect()
MiB = 1 << 20
BUDGET = 300 * MiB
ECHO = "grading.sandbox.rounds:echo"
needs_budget = pytest.mark.skipif(
    support(PROTECTIONS.level).hierarchy != "v1", reason="needs root and a writable cgroup v1 memory hierarchy"
)

# Hold ``sys.argv[1]`` MiB, every page written (a zero-filled buffer may never be touched), for a second.
HOLD = "import sys, time; block = b'x' * (int(sys.argv[1]) << 20); time.sleep(1)"


def _two_children(mib: int) -> list[str]:
    """A shell that starts two children holding ``mib`` MiB each at the same time, and waits for both."""
    child = f'{sys.executable} -c "{HOLD}" {mib}'
    return ["sh", "-c", f"{child} & {child}; wait"]


@pytest.fixture
def start() -> Iterator:
    """``start()``: a round process of the ``echo`` entry with a 300 MiB budget, as a grading worker starts one."""
    lease = SlotLease(1, PROTECTIONS.level == "root")
    slot = lease.slots[0]
    try:
        with tempfile.TemporaryDirectory(prefix="rounds-test-") as tmp:
            base = Path(tmp)
            base.chmod(0o711)
            limits = Limits(job_memory_bytes=BUDGET)

            def begin() -> RoundProcess:
                return starter(PROTECTIONS, limits, [], slot, base)({"entry": ECHO}, "answer")

            yield begin
    finally:
        lease.release()


@needs_budget
def test_a_round_whose_processes_go_past_the_budget_together_fails_and_says_so(start):
    with start() as process:
        group = process._memory.group
        assert group is not None and process._memory.limit == BUDGET
        process.wait_ready(60)
        with pytest.raises(RoundError, match=r"went past the job's memory budget \(300 MiB in all\)") as caught:
            process.round({"run": _two_children(200)}, timeout=60)  # 400 MiB together, each far under --memory-gb
        assert not caught.value.timeout
        assert not (group / "cgroup.procs").read_text().split()  # every process of the round killed
    assert not group.exists()  # and its group removed


@needs_budget
def test_the_same_round_under_the_budget_passes(start):
    with start() as process:
        process.wait_ready(60)
        _, message = process.round({"run": _two_children(50), "payload": "fine"}, timeout=60)
    assert message.header["status"] == 0, message.header
    assert bytes(message.arrays["payload"][2]) == b"fine"


def test_below_the_root_level_a_round_has_no_budget_and_runs(tmp_path):
    """Where no memory group can be made (the ``none`` level), the round runs as before, without a budget."""
    tmp_path.chmod(0o711)
    start = starter(Protections("none"), Limits(job_memory_bytes=BUDGET), [], 0, tmp_path)
    with start({"entry": ECHO}, "answer") as process:
        assert not process._memory.active
        process.wait_ready(60)
        _, message = process.round({"payload": "ok"}, timeout=60)
    assert bytes(message.arrays["payload"][2]) == b"ok"
