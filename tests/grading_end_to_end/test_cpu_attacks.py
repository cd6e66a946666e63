"""Another job cannot buy or cost a measured grade: notebook 12 graded for real beside hostile neighbours.

Each test grades real submissions of notebook 12 with ``course autograde --jobs 2`` (the
command, as an instructor runs it), on this machine, as issue 23 found them:

* **collusion**: a slow loop's answer raises a System V semaphore while it runs; an
  accomplice graded at the same time starts CPU burners in new sessions, pinned to every
  CPU, that burn only while the semaphore is down (while the baseline is timed), and keeps
  its kernel alive. Before: 8 of 10 points for the slow loop (4.1x).
* **sabotage**: a submission pins 150 burners to the CPUs and keeps its kernel alive; the
  learner graded beside it submits the reference solution. Before: 0 of 10 ("the
  baseline's process was not ready within 300 s"), and ``course autograde`` exited 1.
* **ordinary load**: another grading run on the machine at the same time; a
  ``torch.compile`` answer and a ``DataLoader(num_workers=2)`` answer. Before: the compiled
  answer 0 of 10 as the learner's failure ("not ready within 300 s"), the DataLoader one
  6 of 10 (2 of 10 alone, rounds from 1.7x to 11.9x).

Now each keeps the grade it earns alone, measured (not left for manual grading), and the
command exits 0. The accomplice's own notes show why: the semaphore is not shared (each
kernel has its own IPC namespace) and its burners are refused the measured CPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grading.coursedir import Course
from grading.sandbox import cpus
from grading.sandbox.protections import detect
from tests.support.cpu_attacks import SEMAPHORE_UP, burner_notes, burners, cpu_limit_notes, keep_alive
from tests.support.submissions import graded, score
from tools.capstone_benchmark import COMPILED, NOT_MEASURED, capstone_course, reference_answer, report_of

pytestmark = pytest.mark.slow_grading  # notebook 12 graded end to end, several times: minutes

PROTECTIONS = detect()
ISOLATION = cpus.isolation(PROTECTIONS.level)
NAME = "12_make_this_training_loop_fast"

SLOW_LOOP = (
    SEMAPHORE_UP
    + """
def fast_train(task, device):
    \"\"\"slow_train itself: the accomplice is to make it look fast.\"\"\"
    return slow_train(task, device)
"""
)


def _autograde(course: Course, *options: str) -> subprocess.Popen:
    """``course autograde --jobs 2 [options]`` of ``course``, started (``_finished`` waits for it)."""
    command = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--jobs", "2", *options]
    return subprocess.Popen([*command, "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finished(process: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = process.communicate(timeout=1500)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _measured(course: Course, student: str, points: float) -> str:
    """The student's measured test scored ``points``, from a measurement (not left for manual grading)."""
    got, report = report_of(course, student)
    assert NOT_MEASURED not in report, report
    assert "speedup" in report and got == points, report
    return report


needs_isolation = pytest.mark.skipif(
    ISOLATION.cpuset is None or not PROTECTIONS.namespaces,
    reason="a CPU of its own needs root and cgroup v1: " + "; ".join(PROTECTIONS.missing()),
)


@needs_isolation
def test_collusion_through_a_semaphore_buys_no_speed_points(tmp_path):
    course = capstone_course(
        tmp_path,
        {"slow": SLOW_LOOP, "accomplice": reference_answer()},
        {"accomplice": (burners(8, coordinate=True), keep_alive())},
    )
    done = _finished(_autograde(course))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _measured(course, "slow", points=2)  # correct, and as slow as the baseline: no speed points
    notes = burner_notes(graded(course, NAME, "accomplice"), "accomplice")
    assert notes["count"] == 8 and notes["seen"] == 0  # the slow loop's semaphore never reached it
    assert notes["refused"] > 0  # its burners tried the measured CPU while it was held, and were refused


@needs_isolation
def test_150_burners_beside_a_learner_cost_them_nothing(tmp_path):
    course = capstone_course(
        tmp_path,
        {"victim": reference_answer(), "saboteur": reference_answer()},
        {"saboteur": (burners(150, coordinate=False), keep_alive())},
    )
    done = _finished(_autograde(course))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = _measured(course, "victim", points=10)
    assert "a CPU of its own" in report
    got, max_score = score(course, NAME, "victim")
    assert got == max_score  # the notebook's other tests too: its kernel got its share of the CPUs
    # The attack was real: a cell's time limit counts the CPU time of its kernel and every process it started,
    # so the saboteur's burner cell, which itself only sleeps, is stopped at its CPU-time limit by its 150
    # burners' time (the grading notes say so); on a machine where they stay under it, every burner ran and
    # reported (and a fresh kernel that replays the burner cell starts 150 more).
    stopped = cpu_limit_notes(graded(course, NAME, "saboteur"))
    if stopped:
        assert any("of CPU time" in note for note in stopped), stopped
    else:
        notes = burner_notes(graded(course, NAME, "saboteur"), "saboteur")
        assert notes["count"] >= 150 and notes["count"] % 150 == 0 and notes["pinned"] > 0, notes


DATALOADER = """
from torch.utils.data import DataLoader

from course_utils.capstone import DigitsPixels


def fast_train(task, device):
    \"\"\"Batches from two DataLoader workers; the images are still transformed one at a time (in the workers).\"\"\"
    device = torch.device(device)
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)
    order = task.batch_order().flatten().tolist()
    loader = DataLoader(DigitsPixels(*task.data()), batch_size=task.batch_size, sampler=order, num_workers=2)
    losses = torch.empty(task.steps)
    for step, (images, labels) in enumerate(loader):
        loss = F.cross_entropy(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
"""


@needs_isolation
def test_another_grading_run_at_the_same_time_moves_no_grade(tmp_path):
    """Beside another grading run, the compiled answer keeps its 10 points and the DataLoader one what it earns alone.

    The DataLoader answer's share of the reference's gain depends on the machine (its two
    workers gained 1.4x on one 2-core machine, 2 points; 2.5x on another, 4 points), so it
    is graded alone first, then again (``--force``) while another run grades three answers.
    """
    (tmp_path / "load").mkdir()
    (tmp_path / "graded").mkdir()
    other = capstone_course(tmp_path / "load", {f"other{i}": reference_answer() for i in range(3)})
    course = capstone_course(tmp_path / "graded", {"compiled": COMPILED, "dataloader": DATALOADER})
    alone = _finished(_autograde(course))
    assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
    alone_points, alone_report = report_of(course, "dataloader")
    assert NOT_MEASURED not in alone_report, alone_report
    load = _autograde(other)
    try:
        done = _finished(_autograde(course, "--force"))
    finally:
        loaded = _finished(load)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert loaded.returncode == 0, loaded.stdout[-3000:] + loaded.stderr[-3000:]
    _measured(course, "compiled", points=10)
    beside = _measured(course, "dataloader", points=alone_points)  # its own workers are no disturbance
    assert 2 <= alone_points < 10, beside  # correct, and one image at a time is not the reference's speed
    for student in ("other0", "other1", "other2"):
        _measured(other, student, points=10)
    assert Path(course.root / "gradebook.db").exists()
