"""course_utils.capstone: the task, the slow loop, the correctness check, the timing, the counters and the package.

A fast implementation written here (independently of the notebook's solution) is the
"good submission"; the wrong ones are the mistakes a learner plausibly makes. No test
asserts a speedup: timing is tested with functions whose speed is fixed by ``time.sleep``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch.nn.modules import module as module_hooks
from torch.optim import optimizer as optimizer_hooks
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as dataloader_module

from course_utils.capstone import diagnosis as diagnosis_module
from course_utils.capstone import in_kernel, round_process, transfer
from course_utils.capstone.autocast_watch import as_if_on_cuda, watch_autocast
from course_utils.capstone.baseline import slow_train
from course_utils.capstone.correctness import (
    FINAL_LOSS_TOLERANCE,
    STEP_LOSS_TOLERANCE,
    TEST_ACCURACY_TOLERANCE,
    Agreement,
    check_same_training,
    evaluate,
)
from course_utils.capstone.diagnosis import Diagnosis, diagnose
from course_utils.capstone.in_kernel import CapstoneGrade, grade_fast_train, measure_speedup
from course_utils.capstone.model import CapstoneNet, gelu_by_hand, make_model
from course_utils.capstone.reference import own_work, reference_train
from course_utils.capstone.scoring import (
    CORRECTNESS_POINTS,
    MAX_POINTS,
    MIN_REFERENCE_SPEEDUP,
    SHARE_TIERS,
    Speedup,
    share,
    speed_points,
    tier,
    tier_is_certain,
    tiers_text,
)
from course_utils.capstone.task import (
    GRADED_TASK,
    NUM_TRAIN_IMAGES,
    STD_EPS,
    CapstoneTask,
    DigitsPixels,
    standardize_image,
    stored_digits,
)
from tests.support.paths import ROOT

ORIGINAL_GETITEM = DigitsPixels.__getitem__
ORIGINAL_NEXT_INDEX = dataloader_module._BaseDataLoaderIter._next_index
ORIGINAL_POOL_START = dataloader_module._MultiProcessingDataLoaderIter.__init__
SMALL = CapstoneTask(num_samples=64, epochs=2, batch_size=16, hidden=32)
"""8 steps: cheap enough to train many times."""


def fast_train(task, device, *, amp_dtype=None, lr_scale=1.0, order_task=None, fused=True, read_losses=False):
    """A fast, correct implementation (and, through its options, some wrong ones)."""
    device = torch.device(device)
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr * lr_scale, fused=fused)
    pixels, labels = task.data()
    x = pixels.float() / 16
    images = ((x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + STD_EPS)).to(device)
    labels = labels.to(device)
    losses = torch.empty(task.steps, device=device)
    for step, batch in enumerate((order_task or task).batch_order().to(device)):
        with torch.autocast(device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
        if read_losses:
            print(f"{loss.item():.3f}", end=" ")
    return model, losses


@pytest.fixture(scope="module")
def small_reference():
    return slow_train(SMALL)


# ----------------------------------------------------------------------------- the task


def test_task_batch_order_is_a_fixed_shuffle_per_epoch():
    task = CapstoneTask(num_samples=70, epochs=3, batch_size=16, seed=4)
    order = task.batch_order()
    assert task.steps == 3 * 4 and order.shape == (12, 16) and order.dtype == torch.int64
    for epoch in order.view(3, 64):  # 70 // 16 = 4 batches: 6 samples dropped per epoch
        assert len(set(epoch.tolist())) == 64 and int(epoch.min()) >= 0 and int(epoch.max()) < 70
    assert torch.equal(order, task.batch_order())
    assert not torch.equal(order, replace(task, seed=5).batch_order())
    assert not torch.equal(order[:4], order[4:8])  # each epoch has its own order


def test_task_data_is_stored_pixels_and_copies():
    pixels, labels = GRADED_TASK.data()
    assert pixels.shape == (GRADED_TASK.num_samples, 64) and pixels.dtype == torch.uint8
    assert int(pixels.max()) == 16 and labels.dtype == torch.int64 and set(labels.tolist()) == set(range(10))
    pixels[0] = 0  # the learner may write into what they get: the task is unchanged
    assert int(GRADED_TASK.data()[0][0].sum()) > 0
    assert len(stored_digits()[1]) == NUM_TRAIN_IMAGES
    assert len(stored_digits()[3]) == 449  # a quarter of 1,797, for the test accuracy


@pytest.mark.parametrize(
    "options", [dict(batch_size=0), dict(num_samples=10, batch_size=16), dict(num_samples=5000), dict(epochs=0)]
)
def test_task_rejects_impossible_sizes(options):
    with pytest.raises(ValueError, match="need"):
        CapstoneTask(**options)


def test_standardize_image_and_dataset():
    pixels, labels = SMALL.data()
    image = standardize_image(pixels[3])
    assert image.dtype == torch.float32 and image.shape == (64,)
    assert abs(float(image.mean())) < 1e-5 and abs(float(image.std()) - 1) < 1e-3
    dataset = DigitsPixels(pixels, labels)
    assert len(dataset) == SMALL.num_samples
    x, y = dataset[3]
    assert torch.equal(x, image) and int(y) == int(labels[3])


def test_model_is_seeded_without_touching_the_global_generator():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b = make_model(SMALL), make_model(SMALL, fused_gelu=True)
    assert torch.rand(1).item() == before.item()  # the global RNG did not move
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    assert not torch.equal(make_model(replace(SMALL, seed=1)).fc1.weight, a.fc1.weight)
    x = torch.randn(5, 64)
    torch.testing.assert_close(a(x), b(x))  # the hand-written GELU computes the fused one
    torch.testing.assert_close(gelu_by_hand(x), F.gelu(x, approximate="tanh"))


# ----------------------------------------------------------------------------- the slow loop


@pytest.mark.slow
def test_slow_train_learns_and_matches_an_independent_fast_loop(small_reference):
    model, losses = small_reference
    assert isinstance(model, CapstoneNet) and losses.shape == (SMALL.steps,)
    task = GRADED_TASK
    slow = slow_train(task)
    assert float(slow[1][-4:].mean()) < 0.5 * float(slow[1][:4].mean())
    loss, accuracy = evaluate(slow[0], task)
    assert accuracy > 0.7 and loss < 1.0
    agreement = check_same_training(fast_train(task, "cpu"), slow, task)
    assert agreement.max_step_loss_diff < 1e-4  # float32 both: only summation order differs


# ----------------------------------------------------------------------------- correctness


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("amp_dtype", [torch.bfloat16, torch.float16])
def test_mixed_precision_is_the_same_training(amp_dtype, seed):
    """Autocast changes the numerics, not the training: well inside every tolerance."""
    task = replace(GRADED_TASK, seed=seed)
    agreement = check_same_training(fast_train(task, "cpu", amp_dtype=amp_dtype), slow_train(task), task)
    assert agreement.max_step_loss_diff < STEP_LOSS_TOLERANCE / 2
    assert abs(agreement.train_loss[1] - agreement.train_loss[0]) < FINAL_LOSS_TOLERANCE / 2
    assert abs(agreement.test_accuracy[1] - agreement.test_accuracy[0]) < TEST_ACCURACY_TOLERANCE


def test_for_loop_optimizer_is_the_same_training(small_reference):
    check_same_training(fast_train(SMALL, "cpu", fused=False), small_reference, SMALL)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda t, d: fast_train(t, d, lr_scale=0.8), "loss at step"),
        (lambda t, d: fast_train(t, d, order_task=replace(t, seed=t.seed + 100)), "loss at step"),
        (lambda t, d: fast_train(replace(t, epochs=1), d), r"shape \(8,\)"),
        (lambda t, d: fast_train(replace(t, hidden=48), d), "named and shaped"),
        (lambda t, d: fast_train(t, d)[0], "tuple"),
        (lambda t, d: (fast_train(t, d)[1], fast_train(t, d)[0]), "nn.Module"),
        (lambda t, d: (fast_train(t, d)[0], fast_train(t, d)[1].tolist()), "torch.Tensor"),
        (lambda t, d: (fast_train(t, d)[0], fast_train(t, d)[1] * float("nan")), "not finite"),
        (lambda t, d: (make_model(t), slow_train(t)[1]), "training loss"),  # right curve, untrained model
    ],
)
def test_wrong_trainings_fail_with_a_reason(wrong, message, small_reference):
    with pytest.raises(AssertionError, match=message):
        check_same_training(wrong(SMALL, torch.device("cpu")), small_reference, SMALL)


def test_compiled_wrapper_is_unwrapped(small_reference):
    class Wrapper(torch.nn.Module):  # stands in for torch.compile's OptimizedModule
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

    model, losses = fast_train(SMALL, "cpu")
    check_same_training((Wrapper(model), losses), small_reference, SMALL)


# ----------------------------------------------------------------------------- speed


def test_speed_points_follow_the_tiers():
    assert speed_points(0.0) == 0 and speed_points(SHARE_TIERS[0][0] - 1e-9) == 0
    for line, points in SHARE_TIERS:
        assert speed_points(line) == points
    assert speed_points(1.5) == max(points for _, points in SHARE_TIERS) == MAX_POINTS - CORRECTNESS_POINTS
    lines = [line for line, _ in SHARE_TIERS]
    assert lines == sorted(lines) and lines[0] >= 0.2 and lines[-1] <= 0.85  # the baseline none, the reference all


def test_the_share_counts_the_reference_s_gain_in_factors():
    assert share(1.0, 1.0, 1 / 16) == 0.0 and share(1.0, 1 / 16, 1 / 16) == 1.0
    assert share(1.0, 1 / 4, 1 / 16) == pytest.approx(0.5) and share(1.0, 1 / 8, 1 / 16) == pytest.approx(0.75)
    assert share(1.0, 2.0, 1 / 16) < 0 and share(1.0, 1 / 32, 1 / 16) > 1  # slower than the baseline; faster
    for k in (0.5, 2.0):  # every gain a power of itself elsewhere: the same share
        assert share(1.0, 4.0**-k, 16.0**-k) == pytest.approx(share(1.0, 1 / 4, 1 / 16))
    assert share(1.0, 0.8, 0.9) == share(1.0, 0.8, 1 / MIN_REFERENCE_SPEEDUP)  # a reference that gained too little
    assert "0.25 = 2.0x here: 2" in tiers_text(16.0) and "0.8 = 9.2x here: 8" in tiers_text(16.0)


@pytest.mark.parametrize(
    ("ratios", "decided"),
    [
        ([1.0, 1.1, 0.9], True),  # 3 of 5 below the first tier: the median is too
        ([1.0, 1.1], False),
        ([8.0, 9.0, 30.0], True),  # 3 of 5 in the top tier
        ([2.5, 3.0, 4.0], False),  # 2 in one tier, 1 in the next
        ([1.0, 8.0, 1.1, 8.5], False),
        ([1.0, 8.0, 1.1, 8.5, 9.0], True),
    ],
)
def test_measuring_stops_only_when_the_tier_of_the_median_is_certain(ratios, decided):
    thresholds = [1.5, 2.0, 3.0, 5.0]  # the rule holds for any sorted lines
    assert tier_is_certain(ratios, 5, thresholds) is decided
    if decided:  # whatever the remaining rounds measure, the median lands in the same tier
        median_tier = tier(sorted(ratios)[len(ratios) // 2], thresholds)
        for rest in ([0.1] * (5 - len(ratios)), [100.0] * (5 - len(ratios))):
            full = sorted(ratios + rest)
            assert tier(full[2], thresholds) == median_tier


def recording(name, log, results):
    """A training function that logs the task of each call and returns the right result (computed once per task)."""

    def train(task, device):
        log.append((name, task))
        if task not in results:
            results[task] = slow_train(task)
        return results[task]

    train.__name__ = name
    return train


@pytest.fixture
def scripted_clock(monkeypatch):
    """Replace the timer: each function's run "takes" the seconds given by its name."""
    seconds = {}

    def timed(train, task, device):
        return seconds[train.__name__], train(task, device)

    monkeypatch.setattr(in_kernel, "_timed", timed)
    return seconds


@pytest.fixture(scope="module")
def small_results():
    return {}  # task -> slow_train(task), filled as the rounds draw their tasks


TINY = CapstoneTask(num_samples=16, epochs=1, batch_size=8, hidden=8)
"""2 steps: for tests that train many drawn tasks with right answers (too small to tell a wrong training apart:
check_same_training let another draw's training through 12 times in 100; tests of wrong answers use SMALL)."""


def test_measure_speedup_warms_up_then_times_each_round_as_baseline_fast_fast_baseline(small_results, scripted_clock):
    scripted_clock.update(base=1.0, fast=0.25)
    log = []
    fast, base = recording("fast", log, small_results), recording("base", log, small_results)
    speedup = measure_speedup(fast, TINY, rounds=3, baseline=base)
    assert [name for name, _ in log] == ["base", "fast"] + ["base", "fast", "fast", "base"] * 3
    tasks = [task for _, task in log]
    assert all(tasks[2 * pair] == tasks[2 * pair + 1] for pair in range(7))  # both sides of a pair: one task
    drawn = tasks[::2]
    assert len({(t.seed, t.data_seed) for t in drawn}) == 7  # warm-up and every pair: their own seed and data
    assert all(t.data_seed is not None and replace(t, seed=0, data_seed=None) == TINY for t in drawn)
    assert speedup.ratios == (4.0,) * 3 and speedup.ratio == 4.0
    assert "speedup 4.0x (median of 3 rounds" in str(speedup)


def test_with_a_reference_each_round_runs_the_three_forwards_then_backwards(small_results, scripted_clock):
    scripted_clock.update(base=1.0, ref=1 / 16, fast=0.25)
    log = []
    fast, base, ref = (recording(name, log, small_results) for name in ("fast", "base", "ref"))
    speedup = measure_speedup(fast, TINY, rounds=2, baseline=base, reference=ref)
    assert [name for name, _ in log] == ["base", "ref", "fast"] + ["base", "ref", "fast", "fast", "ref", "base"] * 2
    tasks = [task for _, task in log]
    assert all(len({*tasks[3 * i : 3 * i + 3]}) == 1 for i in range(5))  # the three sides of a pass: one task
    assert speedup.reference_ratios == (16.0, 16.0) and speedup.shares == (0.5, 0.5) and speedup.share == 0.5
    text = str(speedup)
    assert "the reference solution 16.0x in the same rounds" in text and "share of its gain 0.50" in text


POSITION_EFFECTS = {
    # (the runs so far, oldest first, each a function's name or "check"), the running function -> its seconds
    "a run right after itself is faster": lambda history, name: 0.7 if history[-1] == name else 1.0,
    "a run right after the other function is faster": lambda history, name: (
        0.7 if history[-1] not in (name, "check") else 1.0
    ),
    "the machine slows down run after run": lambda history, name: 1.0 + 0.05 * len(history),
    "the first run after a check is slower": lambda history, name: 1.3 if history[-1] == "check" else 1.0,
}


@pytest.mark.parametrize("effect", POSITION_EFFECTS)
def test_the_baseline_against_itself_reads_1x_whatever_a_runs_place_is_worth(effect, small_results, monkeypatch):
    """Issue 22: on the H200 the kernel's measure read 1.3x for the baseline against itself (rounds 1.3, 0.9, 1.4)."""
    history: list[str] = []
    base, same = recording("base", [], small_results), recording("same", [], small_results)

    def logged(train):
        def run(task, device):
            result = train(task, device)
            history.append(train.__name__)
            return result

        run.__name__ = train.__name__
        return run

    def timed(train, task, device):
        seconds = POSITION_EFFECTS[effect](history, train.__name__)
        return seconds, train(task, device)

    def check(*args, **kwargs):
        history.append("check")
        return check_same_training(*args, **kwargs)

    monkeypatch.setattr(in_kernel, "_timed", timed)
    monkeypatch.setattr(in_kernel, "check_same_training", check)
    speedup = measure_speedup(logged(same), TINY, rounds=3, baseline=logged(base))
    assert speedup.ratio == pytest.approx(1.0), speedup.ratios


@pytest.mark.slow
@pytest.mark.parametrize(("fast_seconds", "rounds_run"), [(1.0, 3), (0.1, 3)])
def test_measure_speedup_stops_early_once_decided(small_results, scripted_clock, fast_seconds, rounds_run):
    scripted_clock.update(base=1.0, fast=fast_seconds, ref=0.1)
    thresholds = tuple(line for line, _ in SHARE_TIERS)
    fast, base, ref = (recording(name, [], small_results) for name in ("fast", "base", "ref"))
    speedup = measure_speedup(fast, TINY, rounds=5, thresholds=thresholds, baseline=base, reference=ref)
    assert len(speedup.shares) == rounds_run  # 3 of 5 rounds in one tier decide the median
    assert len(measure_speedup(fast, TINY, rounds=5, baseline=base).ratios) == 5  # no thresholds: all rounds


def test_measure_speedup_catches_a_run_that_reuses_an_earlier_result(small_results, scripted_clock):
    scripted_clock.update(base=1.0, cheat=0.01)
    kept = []

    def cheat(task, device):  # trains once (the warm-up), then hands back that run
        if not kept:
            kept.append(slow_train(task))
        return kept[0]

    with pytest.raises(AssertionError, match=r"round 1\)"):
        measure_speedup(cheat, SMALL, rounds=3, baseline=recording("base", [], small_results))


def test_measure_speedup_fails_on_the_warm_up_before_timing_anything(small_results, scripted_clock):
    log = []
    base = recording("base", log, small_results)

    def stored_images_only(task, device):  # ignores task.data_seed: right only on tasks without one
        return slow_train(replace(task, data_seed=None), device)

    # SMALL, not TINY: TINY let this answer through 2 draws in 20; SMALL caught it in 100 of 100.
    with pytest.raises(AssertionError, match=r"fast_train \(warm-up, on weights and images drawn for it\)"):
        measure_speedup(stored_images_only, SMALL, rounds=3, baseline=base)
    assert len(log) == 1  # the baseline's warm-up, and nothing timed


def test_timed_synchronises_and_measures_wall_time(monkeypatch):
    syncs = []
    monkeypatch.setattr(in_kernel, "synchronize", lambda device: syncs.append(device))
    seconds, result = in_kernel._timed(lambda task, device: time.sleep(0.01) or "done", SMALL, torch.device("cpu"))
    assert result == "done" and seconds >= 0.01 and len(syncs) == 2  # before both clock reads


def test_speedup_is_the_median_of_per_round_ratios():
    speedup = Speedup(baseline_seconds=(1.0, 1.0, 2.0), fast_seconds=(0.1, 0.5, 0.2))
    assert speedup.ratios == (10.0, 2.0, 10.0) and speedup.ratio == 10.0
    with pytest.raises(ValueError, match="reference"):
        speedup.share  # noqa: B018 (no reference timed: no share)
    shared = Speedup((1.0, 1.0, 1.0), (0.5, 0.25, 0.1), (1 / 16, 1 / 4, 1 / 16))
    assert shared.shares == pytest.approx((0.25, 1.0, 0.830482)) and shared.share == pytest.approx(0.830482)


def test_the_reference_is_the_notebook_s_solution():
    """``reference_train`` is notebook 12's solution of exercise 3, statement for statement."""
    import ast
    import inspect
    import json
    import re

    path = ROOT / "notebooks" / "12_make_this_training_loop_fast.ipynb"
    cells = json.loads(path.read_text())["cells"]
    cell = next(c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "ex3_fast_train")
    solution = re.sub(r"\n?\s*### (BEGIN|END) SOLUTION", "", "".join(cell["source"]))

    def statements(source: str) -> list[str]:
        (function,) = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
        body = [node for node in function.body if not isinstance(node, ast.Expr)]  # the docstring
        body = [node for node in body if not isinstance(node, (ast.ImportFrom, ast.AugAssign))]  # STD_EPS; calls
        return [ast.dump(node) for node in body]

    assert statements(solution) == statements(inspect.getsource(reference_train))


@pytest.mark.slow
def test_an_answer_that_runs_the_reference_is_refused():
    own_work(fast_train)(SMALL, "cpu")  # an answer of its own passes
    with pytest.raises(AssertionError, match="runs the course's reference_train"):
        own_work(reference_train)(SMALL, "cpu")
    with pytest.raises(AssertionError, match="runs the course's reference_train"):
        grade_fast_train(lambda task, device: reference_train(task, device), task=SMALL)


# ----------------------------------------------------------------------------- diagnosis


def no_hooks_left():
    return (
        not module_hooks._global_forward_pre_hooks
        and not optimizer_hooks._global_optimizer_post_hooks
        and DigitsPixels.__getitem__ is ORIGINAL_GETITEM
        and dataloader_module._BaseDataLoaderIter._next_index is ORIGINAL_NEXT_INDEX
        and dataloader_module._MultiProcessingDataLoaderIter.__init__ is ORIGINAL_POOL_START
    )


def test_diagnose_names_every_mistake_of_the_slow_loop():
    found = diagnose(slow_train, SMALL)
    assert found.optimizer_steps == SMALL.steps
    assert found.first_layer_calls == SMALL.steps * SMALL.batch_size
    assert found.items_fetched == SMALL.steps * SMALL.batch_size
    assert found.backward_into_existing_grads == SMALL.steps
    assert found.images_standardized == SMALL.steps * SMALL.batch_size  # each item, as it is fetched
    assert found.host_syncs == SMALL.steps + 1  # loss.item() per step, order.tolist() once
    assert found.optimizer_implementation == "for-loop" and not found.autocast_used
    text = "\n".join(found.mistakes())
    for words in ("per-sample loop", "one image at a time", "host syncs", "writing zeros", "GELU", "one parameter"):
        assert words in text
    assert len(found.mistakes()) == 6  # the images' transform is named once, with the items that made it
    assert no_hooks_left()


def test_diagnose_finds_nothing_in_a_fast_loop():
    found = diagnose(fast_train, SMALL)
    assert found.mistakes() == [] and found.first_layer_calls == SMALL.steps
    assert found.host_syncs == 0 and found.optimizer_implementation == "fused"
    assert "8 optimizer steps" in found.summary()
    assert no_hooks_left()


def test_diagnose_counts_reads_in_your_code_not_inside_torch(capsys):
    printing = diagnose(lambda t, d: fast_train(t, d, read_losses=True), SMALL)
    assert printing.host_syncs == SMALL.steps  # one .item() per step, in this file
    for_loop = diagnose(lambda t, d: fast_train(t, d, fused=False), SMALL)
    assert for_loop.host_syncs == 0  # Adam's for-loop reads its CPU step counters: not yours
    assert for_loop.optimizer_implementation == "for-loop"
    assert any("one parameter at a time" in m for m in for_loop.mistakes())
    with_autocast = diagnose(lambda t, d: fast_train(t, d, amp_dtype=torch.bfloat16), SMALL)
    assert with_autocast.autocast_used


def test_diagnose_sees_gradients_zeroed_in_place():
    def zeroing(task, device):
        model = make_model(task, fused_gelu=True)
        optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)
        images = torch.stack([standardize_image(p) for p in task.data()[0]])
        for batch in task.batch_order():
            optimizer.zero_grad(set_to_none=False)
            F.cross_entropy(model(images[batch]), task.data()[1][batch]).backward()
            optimizer.step()
        return model, torch.zeros(task.steps)

    found = diagnose(zeroing, SMALL)
    assert found.backward_into_existing_grads == SMALL.steps - 1  # the first backward finds None
    assert any("writing zeros" in m for m in found.mistakes())


def loader_train(task, device, *, workers=2):
    """The per-sample loop fixed with a DataLoader of whole batches from worker processes, started in every call."""
    model = make_model(task, fused_gelu=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)
    order = task.batch_order().flatten().tolist()
    loader = DataLoader(DigitsPixels(*task.data()), batch_size=task.batch_size, sampler=order, num_workers=workers)
    losses = torch.empty(task.steps)
    for step, (images, labels) in enumerate(loader):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses


@pytest.mark.slow
def test_diagnose_names_a_worker_pool_started_in_every_call_and_the_images_its_workers_transform(small_reference):
    """Issue 23: such an answer earned no speed point, and the report said "mistakes left: none found"."""
    check_same_training(loader_train(SMALL, "cpu"), small_reference, SMALL)  # the same training
    found = diagnose(loader_train, SMALL)
    assert found.worker_pools_started == 1 and found.worker_processes_started == 2
    assert found.worker_items_fetched == SMALL.steps * SMALL.batch_size  # counted as the indices leave
    assert found.items_fetched == 0 and found.images_standardized == 0  # none of it in this process
    text = "\n".join(found.mistakes())
    assert "worker pool started inside the training function (2 new processes" in text
    assert "transformed one at a time, in the DataLoader's workers (16 items per step" in text
    assert "2 DataLoader worker processes started" in found.summary()
    assert no_hooks_left()


def test_diagnose_does_not_count_a_loader_that_fetches_batches_in_this_process():
    found = diagnose(lambda t, d: loader_train(t, d, workers=0), SMALL)
    assert found.worker_pools_started == found.worker_items_fetched == 0
    assert found.items_fetched == SMALL.steps * SMALL.batch_size  # on the main thread: the old counter
    (mistake,) = [m for m in found.mistakes() if "one image at a time on the main thread" in m]
    # issue 31: this loader was called "a DataLoader fetching single items"
    assert "a DataLoader handing out batches of 16" in mistake and "single items" not in mistake
    assert found.loader_fetches == SMALL.steps and found.loader_items == SMALL.steps * SMALL.batch_size


def test_diagnose_tells_single_items_from_batches_and_from_indexing_by_hand():
    single = "\n".join(diagnose(slow_train, SMALL).mistakes())
    assert "a DataLoader fetching single items" in single

    def by_hand(task, device):
        dataset = DigitsPixels(*task.data())
        for batch in task.batch_order():
            torch.stack([dataset[int(i)][0] for i in batch])
        return fast_train(task, device)

    assert "each its own dataset[i] call" in "\n".join(diagnose(by_hand, SMALL).mistakes())


def test_diagnose_names_images_standardised_one_by_one_before_training():
    def stacked(task, device):
        model = make_model(task, fused_gelu=True)
        optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)
        pixels, labels = task.data()
        images = torch.stack([standardize_image(p) for p in pixels])  # one image at a time, once
        losses = torch.empty(task.steps)
        for step, batch in enumerate(task.batch_order()):
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses[step] = loss.detach()
        return model, losses

    found = diagnose(stacked, SMALL)
    assert found.images_standardized == SMALL.num_samples and found.items_fetched == 0
    assert found.mistakes() == [
        "each image standardised on its own (64 standardize_image calls in this run, one per image): standardise "
        "the whole set once, in a few whole-tensor operations (exercise 1), and index it (notebook 03)"
    ]


def test_diagnose_removes_its_counters_when_training_fails():
    def broken(task, device):
        slow_train(replace(task, num_samples=16, epochs=1))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        diagnose(broken, SMALL)
    assert no_hooks_left()


def test_on_cuda_host_syncs_come_from_the_sync_debug_mode(monkeypatch):
    """The CUDA branch without a GPU: the debug mode is switched on, its warnings counted, the
    learner's own mode (here "error", 2) put back."""
    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 2)
    diagnosis = Diagnosis(device_type="cuda")
    with diagnosis_module._counting(diagnosis, torch.device("cuda")):
        for _ in range(3):
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
        torch.ones(2).sum().item()  # a read on the CPU: not what is counted on CUDA
    assert modes == ["warn", 2]
    assert diagnosis.host_syncs == 3
    assert no_hooks_left()


def test_autocast_is_a_note_only_where_bf16_tensor_cores_exist():
    base = dict(optimizer_steps=4, first_layer_calls=4, optimizer_implementation="fused")
    assert Diagnosis(device_type="cpu", **base).notes() == []
    assert Diagnosis(device_type="cuda", **base).notes() == []  # a T4, say
    ampere = Diagnosis(device_type="cuda", bf16_tensor_cores=True, **base)
    assert ampere.mistakes() == [] and len(ampere.notes()) == 1 and "autocast" in ampere.notes()[0]
    assert Diagnosis(device_type="cuda", bf16_tensor_cores=True, autocast_used=True, **base).notes() == []
    assert "no torch.optim optimizer step" in Diagnosis(device_type="cpu").mistakes()[0]


# ----------------------------------------------------------------------------- the grade


def test_grade_reports_correctness_speed_and_mistakes():
    grade = CapstoneGrade(
        agreement=Agreement(0.01, (0.3, 0.31), (0.85, 0.86)),
        speedup=Speedup((1.0, 1.0, 1.0), (0.5, 0.25, 0.2), (1 / 16, 1 / 16, 1 / 16)),
        diagnosis=Diagnosis(
            device_type="cpu", optimizer_steps=2, first_layer_calls=64, optimizer_implementation="fused"
        ),
        device_type="cpu",
    )
    assert grade.points == CORRECTNESS_POINTS + speed_points(0.5)
    text = str(grade)
    assert "speedup 4.0x" in text and "per-sample loop" in text and f"points: {grade.points} of {MAX_POINTS}" in text
    assert "your share of its gain 0.50" in text and "0.8 = 9.2x here: 8" in text


def test_a_slow_answer_without_a_recognised_mistake_is_not_told_none_found():
    diagnosis = Diagnosis(device_type="cpu", optimizer_steps=2, first_layer_calls=2, optimizer_implementation="fused")
    agreement = Agreement(0.01, (0.3, 0.31), (0.85, 0.86))
    reference = (0.1, 0.1, 0.1)
    slow = str(CapstoneGrade(agreement, Speedup((1.0, 1.0, 1.0), (0.9, 0.8, 0.7), reference), diagnosis, "cpu"))
    assert "none found" not in slow and "none that the counters recognise, yet the speed earns 0 of 8" in slow
    fast = str(CapstoneGrade(agreement, Speedup((1.0, 1.0, 1.0), (0.1, 0.1, 0.1), reference), diagnosis, "cpu"))
    assert "mistakes left: none found" in fast


def test_grade_fast_train_checks_correctness_before_timing():
    calls = []

    def wrong(task, device):
        calls.append(task.seed)
        return fast_train(task, device, lr_scale=0.5)

    with pytest.raises(AssertionError, match="loss at step"):
        grade_fast_train(wrong, task=SMALL)
    assert calls == [SMALL.seed]  # failed on the first run, nothing timed


@pytest.mark.slow
def test_grade_fast_train_end_to_end():
    grade = grade_fast_train(fast_train, task=SMALL, rounds=3)  # the training agrees, or this raises
    assert 0 < grade.speedup.ratio < float("inf") and 0 < grade.speedup.reference_ratio < float("inf")
    assert 1 <= len(grade.speedup.shares) <= 3 and grade.diagnosis.mistakes() == []
    assert "mistakes left: none" in str(grade)  # "found", or "that the counters recognise" if it was slow


def test_the_notebook_states_the_grading_constants():
    """Notebook 12 writes the tolerances and tiers into its prose: they must be these."""
    import json

    path = ROOT / "notebooks" / "12_make_this_training_loop_fast.ipynb"
    cells = json.loads(path.read_text())["cells"]
    prose = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert f"each within {STEP_LOSS_TOLERANCE:g} of the baseline's" in prose
    assert f"training loss within {FINAL_LOSS_TOLERANCE:g}" in prose
    assert f"test accuracy within {TEST_ACCURACY_TOLERANCE * 100:g} percentage points" in prose
    assert "| share of the reference's gain at least | " + " | ".join(f"{t:g}" for t, _ in SHARE_TIERS) + " |" in prose
    assert "| points | " + " | ".join(str(p) for _, p in SHARE_TIERS) + " |" in prose
    assert f"Correctness** ({CORRECTNESS_POINTS} points" in prose and f"({MAX_POINTS} points)" in prose


def _imported_names(source: str) -> set[str]:
    import ast

    lines = [line.replace("%pip", "pass  #") for line in source.splitlines()]  # the Colab %pip line
    names = set()
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return names


def test_a_timed_round_process_has_the_names_the_notebooks_setup_cell_imports():
    """The grader runs a learner's answers after ANSWER_IMPORTS, in place of the notebook's setup cell."""
    import json

    path = ROOT / "notebooks" / "12_make_this_training_loop_fast.ipynb"
    setup = next("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    assert _imported_names(setup) - {"sys"} == _imported_names(round_process.ANSWER_IMPORTS)


def test_a_result_crosses_to_the_grader_as_checked_float32_arrays():
    model, losses = fast_train(SMALL, "cpu")
    arrays = transfer.result_arrays((model, losses), SMALL)
    assert {name for name in arrays} == {f"param:{n}" for n, _ in model.named_parameters()} | {"losses"}
    back_model, back_losses = transfer.result_from_arrays(arrays, SMALL)
    check_same_training((back_model, back_losses), (model, losses), SMALL)
    short = {**arrays, "losses": ("float32", (SMALL.steps - 1,), arrays["losses"][2][:-4])}
    with pytest.raises(AssertionError, match="losses should have shape"):
        transfer.result_from_arrays(short, SMALL)
    with pytest.raises(AssertionError, match=r"plain torch\.Tensor"):
        transfer.result_arrays((model, losses.as_subclass(_Subclass)), SMALL)


class _Subclass(torch.Tensor):
    pass


def test_watch_autocast_sees_regions_backward_and_steps_and_puts_everything_back():
    from torch.amp.autocast_mode import autocast

    model = make_model(SMALL)
    optimizer = torch.optim.Adam(model.parameters())
    enter, backward = autocast.__enter__, torch.autograd.backward
    with watch_autocast() as use:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 64)).sum()
            loss.backward()
        optimizer.step()
    assert use.regions == [("cpu", torch.bfloat16, True)]
    assert use.backward_under_autocast == [True] and use.step_under_autocast == [False]
    assert autocast.__enter__ is enter and torch.autograd.backward is backward
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with watch_autocast() as use, torch.autocast(as_if_on_cuda(torch.ones(1)).device.type):
            pass
    assert [device for device, _, _ in use.regions] == ["cuda"]


def test_the_package_keeps_what_notebook_12_imports_from_it_and_no_more():
    """A released notebook imports these from ``course_utils.capstone``; everything else from its module."""
    import ast
    import json
    import re

    import course_utils.capstone as package

    path = ROOT / "notebooks" / "12_make_this_training_loop_fast.ipynb"
    cells = json.loads(path.read_text())["cells"]
    imported = set()
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            imported |= set(re.findall(r"course_utils\.capstone\.(\w+)", source))
            continue
        lines = [line.replace("%pip", "pass  #") for line in source.splitlines()]
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ImportFrom) and node.module == "course_utils.capstone":
                imported |= {alias.name for alias in node.names}
    assert imported <= set(package.__all__), imported - set(package.__all__)
    assert all(hasattr(package, name) for name in package.__all__)
    assert set(package.__all__) - imported == {"DigitsPixels"}  # slow_train's Dataset, which its printed source uses


def test_the_referee_names_an_entry_that_exists():
    import importlib

    from course_utils.capstone import referee

    module, _, function = referee.ENTRY.partition(":")
    assert getattr(importlib.import_module(module), function) is round_process.timed_rounds
