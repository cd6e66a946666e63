"""Unit tests for course_utils.profiling."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

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
