"""course_utils.timing, with a fake asynchronous device that only does its work on sync."""

import re
import statistics
import time
from types import SimpleNamespace

import pytest
import torch

from course_utils.timing import (
    BLOCKS,
    NOISY_SPREAD,
    Comparison,
    Timing,
    benchmark,
    compare,
    format_ratio,
    format_seconds,
    synced_timer,
)


class FakeAsyncDevice:
    """Queues work like a GPU: calls return at once, ``sync`` performs what was queued."""

    def __init__(self, seconds_per_call: float) -> None:
        self.seconds_per_call = seconds_per_call
        self.queued = 0
        self.syncs = 0
        self.calls = 0

    def launch(self) -> None:
        self.calls += 1
        self.queued += 1

    def sync(self) -> None:
        self.syncs += 1
        time.sleep(self.queued * self.seconds_per_call)
        self.queued = 0


def test_benchmark_waits_for_queued_work():
    fake = FakeAsyncDevice(seconds_per_call=0.002)
    timing = benchmark(fake.launch, sync=fake.sync, min_run_time=0.05)
    # Every queued call is paid for inside the timed region: at least 2 ms per call.
    assert timing.median >= 0.002 * 0.95
    assert fake.queued == 0


def test_naive_timing_misses_queued_work():
    """The failure benchmark() avoids: without a sync, the launch is all you measure."""
    fake = FakeAsyncDevice(seconds_per_call=0.01)
    start = time.perf_counter()
    fake.launch()
    naive = time.perf_counter() - start
    assert naive < 0.01 <= (benchmark(fake.launch, sync=fake.sync, min_run_time=0.05).median * 1.05)


class FakeClock:
    """Simulated time: a call costs ``call_s``, a synchronisation ``sync_s`` (a GPU's, even when idle)."""

    def __init__(self, call_s: float, sync_s: float) -> None:
        self.call_s, self.sync_s = call_s, sync_s
        self.now = 0.0
        self.calls = 0

    def call(self) -> None:
        self.calls += 1
        self.now += self.call_s

    def sync(self) -> None:
        self.now += self.sync_s

    def read(self) -> float:
        return self.now


def test_torch_blocked_autorange_times_one_block_when_the_clock_syncs_slowly(monkeypatch):
    """Why benchmark sizes blocks itself: torch's rule makes one block outgrow min_run_time."""
    clock = FakeClock(call_s=1e-3, sync_s=50e-6)
    monkeypatch.setattr("course_utils.timing.time", SimpleNamespace(perf_counter=clock.read))
    timer = torch.utils.benchmark.Timer("fn()", globals={"fn": clock.call}, timer=synced_timer(clock.sync))
    assert len(timer.blocked_autorange(min_run_time=0.2).times) == 1


@pytest.mark.parametrize(
    ("call_s", "sync_s", "min_run_time"),
    [(1e-3, 50e-6, 0.2), (10e-6, 50e-6, 0.2), (2.7e-3, 20e-6, 0.5), (1e-7, 5e-6, 0.01), (1e-3, 0.0, 0.05)],
)
def test_benchmark_times_several_blocks_even_when_syncing_is_slow(monkeypatch, call_s, sync_s, min_run_time):
    clock = FakeClock(call_s, sync_s)
    monkeypatch.setattr("course_utils.timing.time", SimpleNamespace(perf_counter=clock.read))
    timing = benchmark(clock.call, sync=clock.sync, min_run_time=min_run_time)
    assert len(timing.times) >= BLOCKS // 2
    assert timing.median == pytest.approx(call_s, rel=0.02)  # the block's final sync, shared by its calls
    assert clock.now < 1.5 * min_run_time  # the block-size probe costs little on top


def test_benchmark_times_one_call_per_block_when_a_call_is_slow(monkeypatch):
    clock = FakeClock(call_s=0.3, sync_s=50e-6)
    monkeypatch.setattr("course_utils.timing.time", SimpleNamespace(perf_counter=clock.read))
    timing = benchmark(clock.call, sync=clock.sync, min_run_time=0.2, warmup=1)
    assert len(timing.times) == 1 and timing.median == pytest.approx(0.3, rel=1e-3)
    assert clock.calls == 1 + 1 + 1  # warm-up, the probe, one block


def test_synced_timer_syncs_then_reads():
    events = []
    clock = synced_timer(lambda: events.append("sync"))
    events.append("read")
    clock()
    assert events == ["read", "sync"]


def test_benchmark_syncs_before_every_clock_read(monkeypatch):
    events = []

    def fake_perf_counter():
        events.append("clock")
        return float(len(events))

    monkeypatch.setattr("course_utils.timing.time", SimpleNamespace(perf_counter=fake_perf_counter))
    benchmark(lambda: events.append("fn"), sync=lambda: events.append("sync"), warmup=3, min_run_time=0.01)
    assert events[:4] == ["fn", "fn", "fn", "sync"]  # warm-up, then wait for it to finish
    clock_reads = [i for i, event in enumerate(events) if event == "clock"]
    assert len(clock_reads) >= 2
    assert all(events[i - 1] == "sync" for i in clock_reads), "a clock read without a sync just before it"
    assert events.count("fn") > 3  # the timed calls happened between the reads


def test_benchmark_uses_all_torch_threads(monkeypatch):
    seen = {}
    original = torch.utils.benchmark.Timer.__init__

    def spy(self, *args, **kwargs):
        seen["num_threads"] = kwargs.get("num_threads")
        original(self, *args, **kwargs)

    monkeypatch.setattr(torch.utils.benchmark.Timer, "__init__", spy)
    benchmark(lambda: None, min_run_time=0.01)
    assert seen["num_threads"] == torch.get_num_threads()


def test_benchmark_on_cuda_device_uses_cuda_sync(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    benchmark(lambda: None, device="cuda", warmup=1, min_run_time=0.01)
    assert calls and all(d == torch.device("cuda") for d in calls)


def test_timing_statistics():
    timing = Timing("x", (1.0, 2.0, 3.0, 4.0, 100.0))
    assert timing.median == 3.0
    assert timing.iqr > 0
    assert timing.per_second(6) == 2.0
    assert Timing("one", (2.0,)).iqr == 0.0
    assert "x:" in str(timing)


def test_compare_ratios_and_table():
    comparison = Comparison(
        {"slow": Timing("slow", (2.0, 2.0)), "fast": Timing("fast", (0.5, 0.5))},
        baseline="slow",
        hardware="Test CPU",
        items_per_call=10,
    )
    assert comparison.speedups() == {"slow": 1.0, "fast": 4.0}
    table = comparison.table()
    assert "Test CPU" in table and "4.00x faster" in table and "items/s" in table


def _rows(table: str) -> dict[str, str]:
    """Each variant's line of a table (after the header), by name."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("variant"))
    return {line.split("  ")[0].strip(): line for line in lines[start + 1 :] if not line.startswith("noisy:")}


def test_a_slowdown_reads_as_one_never_as_a_fraction():
    """Issue 22: 230x slower printed as "0.00x" and 1.24x slower as "0.81x"."""
    comparison = Comparison(
        {
            "on the device": Timing("on the device", (1e-3,) * 8),
            "default": Timing("default", (1.24e-3,) * 8),
            "on the CPU": Timing("on the CPU", (0.230,) * 8),
            "reduce-overhead": Timing("reduce-overhead", (0.476e-3,) * 8),
            "same": Timing("same", (1.0004e-3,) * 8),
        },
        baseline="on the device",
    )
    rows = _rows(comparison.table())
    assert rows["on the device"].endswith("baseline")
    assert rows["default"].endswith("1.24x slower")
    assert rows["on the CPU"].endswith("230x slower")
    assert rows["reduce-overhead"].endswith("2.10x faster")
    assert rows["same"].endswith("1.00x")
    assert not re.search(r"\b0\.\d+x", comparison.table())
    assert comparison.speedup("on the CPU") == pytest.approx(1e-3 / 0.230)  # the numbers stay numbers


def test_the_baseline_row_is_named_wherever_it_stands():
    comparison = Comparison({"a": Timing("a", (1.0,)), "b": Timing("b", (2.0,))}, baseline="b")
    rows = _rows(comparison.table())
    assert rows["b"].endswith("baseline") and rows["a"].endswith("2.00x faster")


@pytest.mark.parametrize(
    ("speedup", "text"),
    [(2.1, "2.10x faster"), (10.04, "10.0x faster"), (1 / 1.234, "1.23x slower"), (1 / 3694, "3694x slower")],
)
def test_format_ratio(speedup, text):
    assert format_ratio(speedup) == text


def _spread_of(timing: Timing) -> float:
    # Written out, not Timing.spread: the quartiles of statistics.quantiles (exclusive method), halved, over the median.
    q1, _, q3 = statistics.quantiles(timing.times, n=4)
    return (q3 - q1) / 2 / statistics.median(timing.times)


def test_a_row_whose_spread_is_large_is_marked_noisy_with_a_legend():
    quiet = Timing("quiet", (1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00, 1.01))
    noisy = Timing("jumpy", (1.0, 0.7, 1.3, 1.0, 0.75, 1.25, 1.0, 1.1))
    assert _spread_of(quiet) < NOISY_SPREAD < _spread_of(noisy)
    assert quiet.spread == pytest.approx(_spread_of(quiet)) and noisy.spread == pytest.approx(_spread_of(noisy))
    table = Comparison({"quiet": quiet, "jumpy": noisy}, baseline="quiet").table()
    rows = _rows(table)
    assert rows["jumpy"].endswith("  noisy") and "noisy" not in rows["quiet"]
    legend = table.splitlines()[-1]
    assert legend.startswith("noisy:") and "±10%" in legend and "rerun" in legend and "rounds" in legend
    calm = Comparison({"quiet": quiet, "again": quiet}, baseline="quiet").table()
    assert "noisy" not in calm, "no legend without a noisy row"


def test_the_noisy_mark_starts_just_above_the_threshold():
    def timing_with_spread(spread: float) -> Timing:
        # Four blocks: quantiles(n=4) of (1-a, 1, 1, 1+a) are 1-0.75a and 1+0.75a, so the spread is 0.75a.
        a = spread / 0.75
        return Timing("x", (1 - a, 1.0, 1.0, 1 + a))

    at, above = timing_with_spread(NOISY_SPREAD * 0.999), timing_with_spread(NOISY_SPREAD * 1.01)
    assert "noisy" not in Comparison({"base": at}, baseline="base").table()
    assert "noisy" in Comparison({"base": above}, baseline="base").table()


def test_columns_line_up_even_when_every_name_is_shorter_than_the_header():
    table = Comparison({"a": Timing("a", (2e-3,)), "b": Timing("b", (1e-3,))}, baseline="a").table()
    header, *rows = table.splitlines()
    end = header.index("median") + len("median")
    assert all(row[end - 2 : end] == "ms" for row in rows), table


def test_compare_runs_every_variant_and_checks_baseline():
    counts = {"a": 0, "b": 0}

    def make(name):
        def fn():
            counts[name] += 1

        return fn

    result = compare({"a": make("a"), "b": make("b")}, device="cpu", min_run_time=0.02, rounds=2)
    assert set(result.timings) == {"a", "b"} and result.baseline == "a"
    assert counts["a"] > 2 and counts["b"] > 2
    assert result.hardware
    with pytest.raises(ValueError, match="baseline"):
        compare({"a": make("a")}, baseline="zzz")
    with pytest.raises(ValueError):
        compare({})


def test_sleep_is_measured_correctly():
    timing = benchmark(lambda: time.sleep(0.003), min_run_time=0.05)
    assert timing.median >= 0.003


@pytest.mark.parametrize(("seconds", "text"), [(2.5, "2.5 s"), (0.0015, "1.5 ms"), (2e-6, "2 µs"), (5e-9, "5 ns")])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text
