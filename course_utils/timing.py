"""Time a callable correctly and compare variants side by side.

Contract: every measurement warms the callable up, synchronises the device before each
clock read, runs on all the CPU threads torch uses, and reports the median and the
interquartile range of many runs. It is built on ``torch.utils.benchmark.Timer``, with
blocks sized so that ``min_run_time`` holds about ``BLOCKS`` of them on any device.
``compare`` measures several variants in one run, interleaved over rounds so that
drift in machine load hits them alike, and reports ratios to a baseline.
First written out in notebook 01 ("Run tensors on the GPU").
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.utils.benchmark as torch_benchmark

from course_utils.device import device_name, synchronize

__all__ = ["BLOCKS", "NOISY_SPREAD", "Comparison", "Timing", "benchmark", "compare", "format_ratio", "synced_timer"]

BLOCKS = 10
"""How many timed blocks ``benchmark`` fits into ``min_run_time`` (fewer when one call is slower)."""

NOISY_SPREAD = 0.10
"""A row of ``Comparison.table`` is marked noisy when its ``Timing.spread`` exceeds this.

Why 10%: ``compare`` pools about 20 blocks per variant (``BLOCKS`` per round, two rounds).
With the middle half of them spread ±10% around the median, the median itself is uncertain
by about 4% and the ratio of two such rows by about 6% (normal approximation): the ratio's
second decimal is noise, and a ratio between 0.9 and 1.1 may change direction on a rerun.
On a quiet machine a row spreads far less: the kept H200 run's 63 rows have a median spread
of 2.4% (1.9% for its 43 GPU rows), so the mark singles out a disturbed measurement, not
ordinary jitter; a lower bar would mark most rows on a shared CPU and be ignored.
"""

_MAX_CALLS_PER_BLOCK = 2**31 - 1
"""torch's Timer hands the block size to C++ as a 32-bit int."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one benchmarked callable."""

    label: str
    times: tuple[float, ...]
    """Seconds per call, one entry per measured block."""

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.times)

    @property
    def iqr(self) -> float:
        """Interquartile range of the seconds per call (the spread)."""
        if len(self.times) < 2:
            return 0.0
        quartiles = statistics.quantiles(self.times, n=4)
        return quartiles[2] - quartiles[0]

    @property
    def spread(self) -> float:
        """Half the interquartile range over the median: 0.05 means the middle half lies within about ±5%."""
        return self.iqr / 2 / self.median

    def per_second(self, items: float = 1.0) -> float:
        """Throughput: ``items`` processed per call, divided by the median time."""
        return items / self.median

    def __str__(self) -> str:
        return f"{self.label}: {format_seconds(self.median)} ± {format_seconds(self.iqr / 2)} (median ± IQR/2)"


def format_seconds(seconds: float) -> str:
    """Format a duration with a unit that keeps three significant digits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_ratio(speedup: float) -> str:
    """A speedup in words: ``2.10x faster``, ``1.24x slower`` (never ``0.81x``), ``1.00x`` when equal to 3 digits.

    >>> format_ratio(2.1), format_ratio(1 / 1.24), format_ratio(1 / 230.4), format_ratio(0.999)
    ('2.10x faster', '1.24x slower', '230x slower', '1.00x')
    """
    factor = speedup if speedup >= 1 else 1 / speedup
    text = f"{factor:.2f}" if factor < 10 else f"{factor:.1f}" if factor < 100 else f"{factor:.0f}"
    if text == "1.00":
        return "1.00x"
    return f"{text}x {'faster' if speedup > 1 else 'slower'}"


def synced_timer(sync: Callable[[], None]) -> Callable[[], float]:
    """A clock that first waits for the device, so a reading includes queued work."""

    def read_clock() -> float:
        sync()
        return time.perf_counter()

    return read_clock


class _SeveralBlocksTimer(torch_benchmark.Timer):
    """torch's ``Timer``, whose ``blocked_autorange`` times ``BLOCKS`` blocks, not one.

    torch grows a block until reading the clock costs at most 0.01% of it
    (``Timer._estimate_block_size``). A clock that first synchronises a GPU costs tens of
    microseconds, so a block then outgrows ``min_run_time`` and ``blocked_autorange``
    returns a single block: no spread, and a median of one. This timer sizes a block to
    ``min_run_time / BLOCKS`` instead, from a probe block net of the clock's own cost
    (the median of five empty blocks). It is only built with the current thread count,
    so the probe needs no thread setting of its own.
    """

    def _estimate_block_size(self, min_run_time: float) -> int:
        budget = min_run_time / BLOCKS
        overhead = statistics.median(self._timeit(0) for _ in range(5))
        number = 1
        while True:
            work = self._timeit(number) - overhead
            if work >= budget / 10 or number * 10 > _MAX_CALLS_PER_BLOCK:
                break
            number *= 10
        per_call = max(work, 1e-9) / number
        return max(1, min(int(budget / per_call), _MAX_CALLS_PER_BLOCK))


def _sync_for(device: torch.device | str | None, sync: Callable[[], None] | None) -> Callable[[], None]:
    if sync is not None:
        return sync
    if device is None:
        return lambda: None
    return lambda: synchronize(device)


def benchmark(
    fn: Callable[[], object],
    *,
    device: torch.device | str | None = None,
    label: str = "",
    min_run_time: float = 0.2,
    warmup: int = 2,
    sync: Callable[[], None] | None = None,
) -> Timing:
    """Time ``fn()`` correctly: warm up, synchronise ``device``, repeat, take the median.

    After ``warmup`` calls, ``fn`` runs in blocks of equal size, about ``BLOCKS`` of them
    within ``min_run_time`` (one call per block when a call takes longer than
    ``min_run_time / BLOCKS``); each block is timed between two clock reads, each read
    right after a synchronisation. ``Timing.times`` holds the seconds per call of each
    block. ``sync`` replaces the device synchronisation (tests pass a fake that counts calls).

    >>> x = torch.randn(64, 64)
    >>> timing = benchmark(lambda: x @ x, device="cpu", label="matmul", min_run_time=0.01)
    >>> timing.median > 0
    True
    """
    sync_fn = _sync_for(device, sync)
    for _ in range(warmup):
        fn()
    sync_fn()
    timer = _SeveralBlocksTimer(
        stmt="fn()",
        globals={"fn": fn},
        timer=synced_timer(sync_fn),
        num_threads=torch.get_num_threads(),
        label=label,
    )
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(label=label, times=tuple(measurement.times))


@dataclass
class Comparison:
    """Timings of several variants measured in one run, with ratios to a baseline."""

    timings: dict[str, Timing]
    baseline: str
    hardware: str = ""
    items_per_call: float | None = None
    notes: list[str] = field(default_factory=list)

    def speedup(self, name: str) -> float:
        """How many times faster ``name`` is than the baseline (above 1 means faster)."""
        return self.timings[self.baseline].median / self.timings[name].median

    def speedups(self) -> dict[str, float]:
        """``speedup`` of every variant, baseline included (1.0)."""
        return {name: self.speedup(name) for name in self.timings}

    def table(self) -> str:
        """A plain-text table: median, spread, throughput, and speed against the baseline per variant.

        A slowdown reads as one (``1.24x slower``, not ``0.81x``); a row whose spread
        exceeds ``NOISY_SPREAD`` is marked ``noisy``, and a legend line under the table says
        what that means and what to do.
        """
        width = max(len(name) for name in [*self.timings, "variant"])
        header = f"{'variant':<{width}}  {'median':>10}  {'± IQR/2':>10}"
        if self.items_per_call:
            header += f"  {'items/s':>10}"
        header += "  vs baseline"
        ratios = {
            name: "baseline" if name == self.baseline else format_ratio(self.speedup(name)) for name in self.timings
        }
        ratio_width = max(len(ratio) for ratio in ratios.values())
        lines = [f"on {self.hardware}" if self.hardware else "", header]
        for name, timing in self.timings.items():
            row = f"{name:<{width}}  {format_seconds(timing.median):>10}  {format_seconds(timing.iqr / 2):>10}"
            if self.items_per_call:
                row += f"  {timing.per_second(self.items_per_call):>10.3g}"
            row += f"  {ratios[name]:<{ratio_width}}"
            lines.append((row + ("  noisy" if timing.spread > NOISY_SPREAD else "")).rstrip())
        if any(timing.spread > NOISY_SPREAD for timing in self.timings.values()):
            lines.append(
                f"noisy: the middle half of its timings spread more than ±{NOISY_SPREAD:.0%} around the median; "
                "rerun the cell, or give compare() more rounds or min_run_time, before trusting its ratio"
            )
        return "\n".join(line for line in lines if line)

    def __str__(self) -> str:
        return self.table()


def compare(
    variants: Mapping[str, Callable[[], object]],
    *,
    device: torch.device | str | None = None,
    baseline: str | None = None,
    min_run_time: float = 0.2,
    rounds: int = 2,
    items_per_call: float | None = None,
    sync: Callable[[], None] | None = None,
) -> Comparison:
    """Benchmark several variants side by side and report speedups over ``baseline``.

    Each round times every variant once, in order, so slow drifts in machine load
    affect all variants alike; the per-call times of all rounds are pooled.
    ``baseline`` defaults to the first variant.

    >>> x = torch.randn(32, 32)
    >>> result = compare({"a": lambda: x + x, "b": lambda: x * 2}, device="cpu", min_run_time=0.01)
    >>> sorted(result.speedups())
    ['a', 'b']
    """
    if not variants:
        raise ValueError("compare() needs at least one variant")
    baseline = baseline or next(iter(variants))
    if baseline not in variants:
        raise ValueError(f"baseline {baseline!r} is not one of {list(variants)}")
    pooled: dict[str, list[float]] = {name: [] for name in variants}
    per_round = min_run_time / max(rounds, 1)
    for round_index in range(max(rounds, 1)):
        for name, fn in variants.items():
            timing = benchmark(
                fn,
                device=device,
                label=name,
                min_run_time=per_round,
                warmup=2 if round_index == 0 else 1,
                sync=sync,
            )
            pooled[name].extend(timing.times)
    return Comparison(
        timings={name: Timing(name, tuple(times)) for name, times in pooled.items()},
        baseline=baseline,
        hardware=device_name(device) if device is not None else "",
        items_per_call=items_per_call,
    )
