"""Unit tests for course_utils.profiling."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import warnings
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest
import torch
from torch.autograd.profiler_util import EventList, FunctionEvent
from torch.profiler import DeviceType, ProfilerActivity, record_function

import course_utils.profiling
from course_utils.profiling import flop_rate, label_times, plot_label_times, profile_steps, profiler_activities


def test_activities_by_device_type():
    assert profiler_activities("cpu") == [ProfilerActivity.CPU]
    assert profiler_activities(torch.device("cuda", 1)) == [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    assert profiler_activities("mps") == [ProfilerActivity.CPU]


@pytest.mark.parametrize(("wait", "warmup", "active"), [(0, 1, 1), (1, 1, 3), (2, 2, 2)])
def test_profile_steps_runs_every_step_and_records_the_active_ones(wait, warmup, active, tmp_path):
    calls = []
    x = torch.randn(16, 16)

    def step():
        calls.append(len(calls))
        with record_function("work"):
            x @ x

    prof = profile_steps(step, wait=wait, warmup=warmup, active=active)
    assert len(calls) == wait + warmup + active
    counts = {event.key: event.count for event in prof.key_averages()}
    assert counts["ProfilerStep*"] == active
    assert counts["work"] == active
    trace_path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace_path))
    events = json.loads(trace_path.read_text())["traceEvents"]
    recorded = sorted(int(e["name"].split("#")[1]) for e in events if e["name"].startswith("ProfilerStep#"))
    assert recorded == list(range(wait + warmup, wait + warmup + active))


def test_profile_steps_passes_options_and_rejects_bad_schedules():
    x = torch.randn(8, 8)
    prof = profile_steps(lambda: x @ x, record_shapes=True)
    shapes = [e.input_shapes for e in prof.key_averages(group_by_input_shape=True) if e.key == "aten::mm"]
    assert [[8, 8], [8, 8]] in shapes
    with pytest.raises(ValueError, match="warmup"):
        profile_steps(lambda: None, warmup=0)
    with pytest.raises(ValueError, match="active"):
        profile_steps(lambda: None, active=0)


def test_profile_steps_keeps_events_of_its_one_cycle_without_a_warning(monkeypatch):
    """torch 2.11 warns "Profiler clears events" on every profile without acc_events=True (#180348)."""
    seen = []
    real_profile = course_utils.profiling.profile

    def spy(**options):
        seen.append(options)
        return real_profile(**options)

    monkeypatch.setattr(course_utils.profiling, "profile", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profile_steps(lambda: torch.ones(4) + 1)
    profile_steps(lambda: None, acc_events=False)
    assert [options["acc_events"] for options in seen] == [True, False]


def test_label_times_are_per_step_and_cover_children():
    x = torch.randn(64, 64)

    def step():
        with record_function("outer"), record_function("inner"):
            for _ in range(3):
                x @ x

    prof = profile_steps(step, active=4)
    times = label_times(prof, ["outer", "inner", "absent"])
    assert list(times) == ["outer", "inner", "absent"]
    assert times["absent"] == 0.0
    assert times["outer"] >= times["inner"] > 0.0
    totals = {e.key: e.cpu_time_total for e in prof.key_averages()}
    assert times["inner"] == pytest.approx(totals["inner"] / 1e3 / 4)


def cuda_like_profile(gpu_rows_last: bool) -> SimpleNamespace:
    """Two steps recorded with ProfilerActivity.CUDA, built from real FunctionEvents.

    As on a GPU, each label and each ProfilerStep is a CPU-side range and also a GPU-side
    range (``gpu_user_annotation``) over the kernels launched inside it, with no CPU time.
    """

    def event(index, name, start_us, end_us, device_type):
        return FunctionEvent(
            id=index,
            name=name,
            thread=1,
            start_us=start_us,
            end_us=end_us,
            use_device="cuda",
            device_type=device_type,
            is_user_annotation=True,
            trace_name=name,
            stack=[],
        )

    cpu, gpu = [], []
    for step in range(2):
        t = 1000.0 * step
        cpu += [event(10 * step, "ProfilerStep*", t, t + 900, DeviceType.CPU)]
        cpu += [event(10 * step + 1, "data", t, t + 500, DeviceType.CPU)]
        cpu += [event(10 * step + 2, "forward", t + 500, t + 600, DeviceType.CPU)]
        gpu += [event(10 * step + 5, "ProfilerStep*", t + 550, t + 950, DeviceType.CUDA)]
        gpu += [event(10 * step + 6, "data", t + 550, t + 551, DeviceType.CUDA)]
        gpu += [event(10 * step + 7, "forward", t + 600, t + 950, DeviceType.CUDA)]
    events = EventList(cpu + gpu if gpu_rows_last else gpu + cpu, use_device="cuda")
    events._build_tree()
    return SimpleNamespace(key_averages=events.key_averages)


@pytest.mark.parametrize("gpu_rows_last", [True, False])
def test_label_times_read_the_cpu_side_of_labels_recorded_with_cuda(gpu_rows_last):
    prof = cuda_like_profile(gpu_rows_last)
    rows = [(e.key, e.device_type) for e in prof.key_averages()]
    assert ("data", DeviceType.CPU) in rows and ("data", DeviceType.CUDA) in rows  # the trap is there
    assert label_times(prof, ["data", "forward", "absent"]) == {"data": 0.5, "forward": 0.1, "absent": 0.0}


def test_plot_label_times_stacks_one_bar_per_variant():
    fig, ax = plot_label_times({"slow": {"data": 3.0, "model": 1.0}, "fast": {"data": 0.5, "model": 1.0, "log": 0.1}})
    assert [t.get_text() for t in ax.get_yticklabels()] == ["slow", "fast"]
    widths = sorted(round(p.get_width(), 6) for p in ax.patches)
    assert widths == [0.0, 0.1, 0.5, 1.0, 1.0, 3.0]
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["data", "model", "log"]
    plt.close(fig)


def test_flop_rate_counts_two_m_n_k_per_matrix_product_and_their_own_time():
    a, b = torch.randn(48, 32), torch.randn(32, 80)
    model = torch.nn.Linear(80, 8)  # one addmm: 48 x 80 x 8

    def step():
        with torch.no_grad():
            model(a @ b)
            torch.relu(a)  # no FLOPs counted, not a matrix product

    prof = profile_steps(step, active=3, with_flops=True)
    flops, seconds = flop_rate(prof)
    assert flops == 3 * (2 * 48 * 32 * 80 + 2 * 48 * 80 * 8)
    products = [e for e in prof.key_averages() if e.key in ("aten::mm", "aten::addmm")]
    assert seconds == pytest.approx(sum(e.self_cpu_time_total for e in products) / 1e6)
    assert flop_rate(prof, ops=("aten::mm",))[0] == 3 * 2 * 48 * 32 * 80


def test_flop_rate_uses_kernel_time_when_the_profile_has_a_device():
    """On a GPU the products' own CPU time is launch overhead: their kernels' time counts."""
    rows = [
        SimpleNamespace(key="aten::addmm", flops=4_000, self_cpu_time_total=50.0, self_device_time_total=2.0),
        SimpleNamespace(key="aten::mm", flops=6_000, self_cpu_time_total=70.0, self_device_time_total=3.0),
        SimpleNamespace(key="aten::mul", flops=100, self_cpu_time_total=9.0, self_device_time_total=1.0),
    ]
    fake = SimpleNamespace(key_averages=lambda: rows)
    assert flop_rate(fake) == (10_000, pytest.approx(5e-6))


def test_flop_rate_needs_with_flops():
    x = torch.randn(8, 8)
    with pytest.raises(ValueError, match="with_flops=True"):
        flop_rate(profile_steps(lambda: x @ x))


class FakeSyncDebugMode:
    """torch.cuda's sync debug mode as CUDA runs it: a prototype notice once, then a warning per sync."""

    def __init__(self) -> None:
        self.mode, self.history, self.noticed = 0, [], False

    def set(self, mode) -> None:
        if not self.noticed:  # TORCH_WARN_ONCE in torch/csrc/cuda/Module.cpp
            self.noticed = True
            warnings.warn(
                "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
                "operations (Triggered internally at /pytorch/torch/csrc/cuda/Module.cpp:1003.)",
                stacklevel=2,
            )
        self.mode = {"default": 0, "warn": 1, "error": 2}.get(mode, mode)
        self.history.append(self.mode)

    def get(self) -> int:
        return self.mode

    def item(self) -> float:
        if self.mode == 1:  # TORCH_WARN in c10/cuda/CUDAFunctions.cpp
            warnings.warn("called a synchronizing CUDA operation (Triggered internally at c10.cpp:1.)", stacklevel=2)
        return 1.0


def test_sync_debug_warnings_returns_what_the_mode_caught_and_restores_it(monkeypatch, recwarn):
    fake = FakeSyncDebugMode()
    fake.mode = 2  # a mode set before: restored afterwards
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", fake.set)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", fake.get)
    first = course_utils.profiling.sync_debug_warnings(fake.item)
    assert first == [
        "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations",
        "called a synchronizing CUDA operation",
    ]
    assert course_utils.profiling.sync_debug_warnings(fake.item) == ["called a synchronizing CUDA operation"]
    assert course_utils.profiling.sync_debug_warnings(lambda: None) == []
    assert fake.history == [1, 2, 1, 2, 1, 2]
    assert len(recwarn) == 0  # nothing left for stderr

    def fails():
        fake.item()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        course_utils.profiling.sync_debug_warnings(fails)
    assert fake.mode == 2
