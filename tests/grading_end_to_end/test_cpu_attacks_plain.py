"""The CPU attacks of ``test_cpu_attacks.py`` with plain-Python stand-ins: the same outcomes on every cgroup layout.

Notebook 12's measured test needs torch, which the emulated machine of ``tools/cgroup2_vm.py``
(a kernel that mounts only cgroup v2) takes minutes to import. So the same two attacks are made
here on a course without torch (``tests/support/loop_course.py``): its measured test times a
plain-Python ``fast_sum`` against a loop baseline outside the learner's kernel, in round
processes, as notebook 12's referee does. ``course autograde --jobs 2`` grades two learners at once:

* **collusion**: ``slow`` submits the baseline's own loop, raising a System V semaphore while
  its process runs; ``accomplice`` starts 8 burners pinned to every CPU that burn only while the
  semaphore is down (while the baseline is timed) and keeps its kernel alive; ``slow``'s last
  cell waits until they run, so that its measurement meets them. The loop must earn
  no speed points (2 of 10, as the baseline would), the burners never see the semaphore (each
  kernel and round process has its own IPC namespace) and are refused the measured CPU.
* **sabotage**: ``saboteur`` starts 40 burners pinned to the CPUs and keeps its kernel alive;
  ``victim`` submits the course's answer (its notebook's last cell takes a while, so that it
  is measured while they burn) and keeps every point, measured, not left for manual grading.

``make grading-test`` runs them on this machine's layout (cgroup v1); ``make
grading-test-cgroup2-autograde`` in the machine that mounts only cgroup v2.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys

import pytest

from grading.coursedir import Course
from grading.sandbox import cpus
from grading.sandbox.protections import detect
from tests.support.cpu_attacks import SEMAPHORE_UP, burner_notes, burners, cpu_limit_notes, keep_alive
from tests.support.loop_course import NAME, REFEREE, REFERENCE, loop_course, report_of
from tests.support.submissions import graded, score

pytestmark = pytest.mark.slow_grading  # `course autograde`, twice: a minute here, some 15 in the emulated machine

PROTECTIONS = detect()
ISOLATION = cpus.isolation(PROTECTIONS.level)
REFEREE_CONSTANTS = runpy.run_path(str(REFEREE))
BASELINE, NOT_MEASURED = REFEREE_CONSTANTS["BASELINE"], REFEREE_CONSTANTS["NOT_MEASURED"]
SLOW = SEMAPHORE_UP + BASELINE  # the baseline's loop, the semaphore up while its process lives
IN_VM = os.environ.get("CGROUP2_VM") == "1"
ALIVE = 400 if IN_VM else 100  # seconds the neighbour's kernel stays up: longer than the other's measurement
WAIT = 60 if IN_VM else 10  # seconds the slow learner's last cell waits: its accomplice's burners are up by then
TIMEOUT = 3000 if IN_VM else 900  # seconds for one `course autograde` (emulated: some 50 to 100 times slower)

needs_isolation = pytest.mark.skipif(
    ISOLATION.cpuset is None or not PROTECTIONS.namespaces,
    reason="a CPU of its own needs root and a cpuset (cgroup v1, or v2): " + "; ".join(PROTECTIONS.missing()),
)


def _autograde(course: Course) -> None:
    command = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--jobs", "2"]
    done = subprocess.run([*command, "--no-progress"], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _waits(seconds: int, why: str) -> str:
    """A learner's last cell that sleeps ``seconds``, saying why."""
    return f"import time\ntime.sleep({seconds})  # {why}\n"


def _measured(course: Course, student: str, points: float) -> str:
    """The student's measured test scored ``points``, from a measurement (not left for manual grading)."""
    got, report = report_of(course, student)
    print(f"\n{student}: {got:g} points: {report.strip()}")
    assert NOT_MEASURED not in report, report
    assert "speedup" in report and got == points, report
    return report


@needs_isolation
def test_collusion_through_a_semaphore_buys_no_speed_points(tmp_path):
    course = loop_course(
        tmp_path,
        {"slow": SLOW, "accomplice": REFERENCE},
        {
            "slow": ("", _waits(WAIT, "until the accomplice's burners run")),
            "accomplice": (burners(8, coordinate=True, start_after=1), keep_alive(ALIVE)),
        },
    )
    _autograde(course)
    _measured(course, "slow", points=2)  # right, and as slow as the baseline: no speed points
    notes = burner_notes(graded(course, NAME, "accomplice"), "accomplice")
    print(f"accomplice's burners: {notes}")
    assert notes["count"] == 8 and notes["seen"] == 0  # the slow loop's semaphore never reached them
    assert notes["refused"] > 0  # they tried the measured CPU while it was held, and were refused


@needs_isolation
def test_40_burners_beside_a_learner_cost_them_nothing(tmp_path):
    course = loop_course(
        tmp_path,
        {"victim": REFERENCE, "saboteur": REFERENCE},
        {
            "victim": ("", _waits(WAIT, "the notebook's other work: measured while they burn")),
            "saboteur": (burners(40, coordinate=False, start_after=1), keep_alive(ALIVE)),
        },
    )
    _autograde(course)
    _measured(course, "victim", points=10)
    assert score(course, NAME, "victim") == (11.0, 11.0)  # the plain test too: its kernel got its share of the CPUs
    stopped = cpu_limit_notes(graded(course, NAME, "saboteur"))
    notes = burner_notes(graded(course, NAME, "saboteur"), "saboteur")
    print(f"saboteur's burners: {notes}; stopped: {stopped}")
    assert notes["count"] >= 40 and notes["pinned"] > 0, notes  # the attack was real: every burner ran,
    assert notes["refused"] > 0, notes  # and tried the measured CPU while it was held
    assert all("of CPU time" in note for note in stopped), stopped  # stopped, if at all, by its burners' CPU time
