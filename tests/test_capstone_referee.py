"""Notebook 12's speed grade can be earned only by being fast: a corpus of exploits, each graded for real.

Each exploit is an answer to exercise 3 that a motivated learner could write to get speed
points without a faster training loop: by slowing the baseline, stopping or bending the
clock, rebinding the scoring, reusing precomputed inputs or results, taking more cores, or
planting files for later processes. Each is graded by the course's referee
(``grading/course/capstone_referee.py``) exactly as ``course autograde`` grades it: fresh
jailed processes for every timed run, tasks drawn when each run starts, the clock and the
points in the grader's process. The comment on each says what it scored under the grader of
the previous release, which measured inside the learner's kernel: ``grade_fast_train`` of commit
fd42253 on this 2-core machine, each exploit in a fresh process (the issue's figures where it
gives them).

Expected now: no exploit gets speed points. Those that still train correctly keep the
correctness points; their honest speed is half the baseline's (they train twice), and each
slowing of the baseline is large (it would give 5x or more if it worked), so that a noisy
machine cannot decide the test: a 2x ratio would need the noise to be 4x. Those that hand
back a result for other inputs fail correctness and score 0.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import site
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from test_grading_cpus import needs_pressure, start_intruder

from grading.measure import Rounds, Verdict, answers_of
from grading.sandbox.cpus import reserve
from grading.sandbox.protections import GRADING_UID_BASE, Limits, SlotLease, detect
from grading.sandbox.rounds import starter

# Each exploit is graded in fresh jailed processes: `make grading-test` (and CI) runs this file, `make test` does not.
pytestmark = pytest.mark.slow_grading

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "12_make_this_training_loop_fast.ipynb"
ANSWER_IDS = ("ex1_standardize_images", "ex2_train_step", "ex3_fast_train")
PLANTED = "zz_course_exploit.pth"

_spec = importlib.util.spec_from_file_location("capstone_referee", ROOT / "grading" / "course" / "capstone_referee.py")
capstone_referee = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(capstone_referee)

SLOW_CORE = '''
from torch.utils.data import DataLoader

from course_utils.capstone import DigitsPixels

MINE = {"active": False}


def fast_train(task, device):
    """slow_train, twice over: half the baseline's speed, with its model and data marked as ours."""
    _slow_loop(task, device)
    return _slow_loop(task, device)


def _slow_loop(task, device):
    """slow_train, line for line, with its model and data marked as ours."""
    MINE["active"] = True
    try:
        device = torch.device(device)
        model = make_model(task).to(device)
        model.mine = True
        optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)
        order = task.batch_order().flatten().tolist()
        dataset = DigitsPixels(*task.data())
        dataset.mine = True
        samples = iter(DataLoader(dataset, batch_size=1, sampler=order))
        losses = []
        for _ in range(task.steps):
            for parameter in model.parameters():
                parameter.grad = torch.zeros_like(parameter)
            loss = torch.zeros((), device=device)
            for _ in range(task.batch_size):
                image, label = next(samples)
                loss = loss + F.cross_entropy(model(image.to(device)), label.to(device)) / task.batch_size
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return model, torch.tensor(losses)
    finally:
        MINE["active"] = False
'''

EXPLOITS = {
    # Before: 3840x ("yours 0.0 ms"), 10 of 10 points, and it passed the hidden test (the issue).
    "deferred result": '''
class TrainsWhenRead(nn.Module):
    """Returned at once; trains (and fills the losses in place) when the grader first reads the weights."""

    def __init__(self, task, device, losses):
        super().__init__()
        self.__dict__.update(task=task, device=device, losses=losses, trained=None)

    @property
    def _orig_mod(self):
        if self.trained is None:
            slow_train(self.task, self.device)  # (twice: half the baseline's speed)
            model, losses = slow_train(self.task, self.device)
            self.losses.copy_(losses)
            self.__dict__["trained"] = model
        return self.trained


def fast_train(task, device):
    losses = torch.zeros(task.steps)
    return TrainsWhenRead(task, device, losses), losses
''',
    # Before: 34.6x with batching alone (the issue); with the baseline's loop twice over, as here, 3.4x, 6 of 10 points.
    "hook that slows the baseline's model": SLOW_CORE
    + """
import time
from torch.nn.modules.module import register_module_forward_pre_hook


def _slow_theirs(module, args):
    if isinstance(module, CapstoneNet) and not getattr(module, "mine", False):
        time.sleep(0.002)


register_module_forward_pre_hook(_slow_theirs)
""",
    # Before: 331.1x, 10 of 10 points.
    "thread holding the GIL while slow_train runs": SLOW_CORE
    + """
import sys
import threading
import time


def _hog():
    main = threading.main_thread().ident
    while True:
        frame, names = sys._current_frames().get(main), set()
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        if "slow_train" in names:
            deadline = time.perf_counter() + 0.005
            while time.perf_counter() < deadline:
                pass
        else:
            time.sleep(0.001)


threading.Thread(target=_hog, daemon=True).start()
""",
    # Before: 3.3x, 6 of 10 points.
    "DigitsPixels.__getitem__ patched": SLOW_CORE
    + """
import time

_getitem = DigitsPixels.__getitem__


def _slow_getitem(self, index):
    if not getattr(self, "mine", False):
        time.sleep(0.002)
    return _getitem(self, index)


DigitsPixels.__getitem__ = _slow_getitem
""",
    # Before: 7.0x, 10 of 10 points.
    "torch.tanh patched": SLOW_CORE
    + """
import time

_tanh = torch.tanh


def _slow_tanh(*args, **kwargs):
    if not MINE["active"]:
        time.sleep(0.002)
    return _tanh(*args, **kwargs)


torch.tanh = _slow_tanh
""",
    # Before: "speedup 1.0x -> points 10" (the issue).
    "scoring rebound": """
import course_utils.capstone.scoring as capstone

capstone.speed_points = lambda ratio: 8
capstone.SPEED_TIERS = ((0.0, 8),)
capstone.CORRECTNESS_POINTS = 10


def fast_train(task, device):
    slow_train(task, device)  # twice: half the baseline's speed
    return slow_train(task, device)
""",
    # Before: 5.6x, 10 of 10 points.
    "clock bent while the baseline is timed": SLOW_CORE
    + """
import sys
import time

_clock = time.perf_counter


def _bent_clock():
    frame = sys._getframe(1)
    while frame is not None:
        train = frame.f_locals.get("train")
        if train is not None:
            return _clock() * (10 if getattr(train, "__name__", "") == "slow_train" else 1)
        frame = frame.f_back
    return _clock()


time.perf_counter = _bent_clock
""",
    # Before: 0.5x, 2 of 10 points: no gain, the baseline ran in the same process with the same threads.
    "more threads and every core": SLOW_CORE
    + """
import os

os.environ["OMP_NUM_THREADS"] = "64"
torch.set_num_threads(max(os.cpu_count() or 1, 2))
try:
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
except OSError:
    pass  # refused in the grader's processes
""",
    # Before: at the userns and none levels, a .pth written into the environment ran in every
    # later Python process of the instructor's, the grader included; now the environment is read-only.
    "a .pth planted for later processes": SLOW_CORE
    + f"""
import os
import site
import sys

for folder in site.getsitepackages() + [sys.prefix]:
    try:
        with open(os.path.join(folder, "{PLANTED}"), "w") as planted:
            planted.write("import time; time.sleep(0.5)\\n")
    except OSError:
        pass
""",
    # Before: 14.6x, 10 of 10 points (task.data() ignored the seed, so the images could be standardised once).
    "standardised images cached": """
from course_utils.capstone import STD_EPS

_pixels, _labels = GRADED_TASK.data()
_x = _pixels.float() / 16.0
_IMAGES = (_x - _x.mean(dim=1, keepdim=True)) / (_x.std(dim=1, keepdim=True) + STD_EPS)


def fast_train(task, device):
    model = make_model(task, fused_gelu=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)
    losses = torch.empty(task.steps)
    for step, batch in enumerate(task.batch_order()):
        loss = F.cross_entropy(model(_IMAGES[batch]), _labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
""",
    # Before: 57012.3x, 10 of 10 points (the rounds' seeds were 1 + r: every result could be trained in advance).
    "results trained in advance": """
_ANSWERS = {seed: slow_train(replace(GRADED_TASK, seed=seed)) for seed in range(6)}


def fast_train(task, device):
    return _ANSWERS[task.seed % 6]
""",
    # No equivalent before (there was no protocol): a result for other inputs, written into the
    # grader's pipe before the timed task has even arrived.
    "result written before the task arrives": """
import os
import stat
import struct
import threading
import time
import json

from course_utils.capstone.transfer import result_arrays

_early = {}


def _send_early():
    time.sleep(1.0)  # the grader has the "ready" by now
    arrays = result_arrays(_early["result"], _early["task"])
    header = {"kind": "result", "arrays": [[n, d, list(s), len(b)] for n, (d, s, b) in arrays.items()]}
    encoded = json.dumps(header).encode()
    frame = struct.pack(">I", len(encoded)) + encoded + b"".join(b for _, _, b in arrays.values())
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, frame)
        except OSError:
            pass


def fast_train(task, device):
    if not _early:
        _early.update(task=task, result=slow_train(task, device))
        threading.Thread(target=_send_early, daemon=True).start()
        return _early["result"]
    time.sleep(3600)  # the grader already has "the result"
""",
    # No equivalent before: bytes that are not a message, written into the grader's pipe.
    "garbage written into the grader's pipe": SLOW_CORE
    + """
import os
import stat
import threading
import time


def _garble():
    time.sleep(0.05)
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"\\x00\\x00\\x00\\x05[1,2]" + b"\\xff" * 64)
        except OSError:
            pass


_train = fast_train


def fast_train(task, device):
    threading.Thread(target=_garble, daemon=True).start()
    return _train(task, device)
""",
}
"""Exploits that still train each task correctly: 2 points, no speed points."""
STILL_CORRECT = {
    "deferred result",
    "hook that slows the baseline's model",
    "thread holding the GIL while slow_train runs",
    "DigitsPixels.__getitem__ patched",
    "torch.tanh patched",
    "scoring rebound",
    "clock bent while the baseline is timed",
    "more threads and every core",
    "a .pth planted for later processes",
}


@pytest.fixture(scope="module")
def solutions() -> dict[str, str]:
    """The notebook's own answers to exercises 1 to 3."""
    return answers_of(nbformat.read(NOTEBOOK, as_version=4), ANSWER_IDS)


def grade(answers: dict[str, str], rounds: int = 1, *, disturbed: bool = False):
    """The referee's verdict (or the AssertionError that fails the test) on ``answers``, in ``rounds`` rounds.

    As a grading worker measures: on a leased slot's CPU, held for the measurement. With
    ``disturbed``, as on a machine that refuses real-time priority while another user's
    process is pinned to that CPU.
    """
    protections = detect()
    root = protections.level == "root"
    lease = SlotLease(1, root)
    slot = lease.slots[0]
    capstone_referee.ROUNDS, before = rounds, capstone_referee.ROUNDS
    try:
        with (
            tempfile.TemporaryDirectory(prefix="referee-test-") as tmp,
            reserve(protections.level, slot, GRADING_UID_BASE + slot if root else None, wait=600) as held,
        ):
            base = Path(tmp)
            base.chmod(0o711)
            if disturbed:
                held = dataclasses.replace(held, realtime=False)
                burner = start_intruder(600, held.cpu)
            start = starter(protections, Limits(), [], slot, base, held)
            try:
                return capstone_referee.referee(Rounds(answers, start, time.monotonic() + 600, held.describe()))
            except AssertionError as failure:
                return failure
            finally:
                if disturbed:
                    burner.kill()
                    burner.wait()
    finally:
        capstone_referee.ROUNDS = before
        lease.release()


@pytest.mark.parametrize("name", sorted(EXPLOITS))
def test_an_exploit_earns_no_speed_points(solutions, name):
    outcome = grade({**solutions, "ex3_fast_train": EXPLOITS[name]})
    if name in STILL_CORRECT:
        assert not isinstance(outcome, AssertionError), outcome
        assert outcome.points == 2, outcome.report  # correct, and as slow as the baseline it copies
        assert "measured by the grader, outside your notebook" in outcome.report
    else:
        assert isinstance(outcome, AssertionError), f"{name} was not caught: {outcome}"
        why = "broke the protocol" if "garbage" in name else "loss at step|training loss"
        assert re.search(why, str(outcome)), outcome
    for folder in [*site.getsitepackages(), sys.prefix]:
        assert not (Path(folder) / PLANTED).exists(), f"a submission wrote {PLANTED} into {folder}"


def test_the_reference_solution_is_correct_and_graded_on_its_speed(solutions):
    outcome = grade(solutions)
    assert not isinstance(outcome, AssertionError), outcome
    assert outcome.points >= 2 and "mistakes left: none" in outcome.report and "  - " not in outcome.report


def _verdict(answer_seconds: list[float], mistakes: list[str]) -> str:
    """The report of a measurement whose rounds timed the baseline at 1 s and the answer at ``answer_seconds``."""
    referee = capstone_referee._Referee(Rounds({}, lambda setup, side: None, time.monotonic() + 60))
    referee.agreement, referee.other_checked = "losses within 0.001 of the baseline's", True
    referee.seconds = {"baseline": [1.0] * len(answer_seconds), "answer": answer_seconds}
    referee.diagnosis = {"summary": "2 optimizer steps", "mistakes": mistakes}
    return referee.verdict().report


def test_a_slow_answer_without_a_recognised_mistake_is_not_told_none_found():
    """Issue 23: a slow answer the counters found nothing in read "mistakes left: none found" (0 speed points)."""
    slow = _verdict([0.9, 0.8, 0.7], [])
    assert "none found" not in slow and "none that the counters recognise, yet the speedup earns 0 of 8" in slow
    assert "mistakes left: none found" in _verdict([0.1, 0.1, 0.1], [])
    listed = _verdict([0.9, 0.8, 0.7], ["a per-sample loop"])
    assert "mistakes left:\n  - a per-sample loop" in listed and "none" not in listed


def test_an_answer_that_needs_a_cell_of_the_notebook_says_so(solutions):
    needs_task = "def fast_train(task, device):\n    return slow_train(task, device)\n\nprint(task)\n"
    outcome = grade({**solutions, "ex3_fast_train": needs_task})
    assert isinstance(outcome, AssertionError)
    assert "NameError: name 'task' is not defined" in str(outcome) and "in the grader's process" in str(outcome)


@needs_pressure
def test_a_measurement_other_work_keeps_disturbing_keeps_its_correctness_points_and_says_so(solutions):
    """Every timed run loses half its CPU to another user's process: not measured, never the learner's failure."""
    outcome = grade(solutions, rounds=5, disturbed=True)
    assert isinstance(outcome, Verdict), outcome
    assert outcome.needs_manual_grade and outcome.points == 2, outcome.report
    assert "correct: " in outcome.report and "speed: NOT MEASURED" in outcome.report
    left_out = f"left out of the medians ({capstone_referee.DISTURBED_RUNS + 1} timed runs)"
    assert left_out in outcome.report and "other work took" in outcome.report
