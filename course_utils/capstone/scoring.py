"""From timings to points: ``Speedup``, the tiers of shares of the reference's gain, and notebook 12's speed points.

Plain Python, no torch: what the grader's referee (``course_utils.capstone.referee``) and
``grade_fast_train`` need to turn the rounds they timed into a grade, and to stop timing
once more rounds cannot change it.

The rule. Every round times three trainings of the same tasks: the baseline
(``slow_train``), the course's reference solution (``reference_train``) and the answer.
Speedups over the baseline depend on the machine (a CPU core and a GPU are overhead-bound
in different proportions), so the points do not read an answer's speedup on its own: they
read how much of the reference's gain, *measured in the same round on the same machine*,
the answer reaches, counted in factors (a logarithmic scale, since fixes multiply)::

    share = ln(baseline time / answer time) / ln(baseline time / reference time)

0 is the baseline's speed, 1 the reference's; with the reference at 16x, an answer at 4x
is half-way (0.5) and one at 8x three quarters (0.75). The share of a measurement is the
median of its rounds' shares, and ``SHARE_TIERS`` turn it into points. Where every fix
gains a power of what it gains elsewhere (``s`` becomes ``s ** k`` for answer and
reference alike), the share does not move, so the same lessons earn the same points on
any hardware.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CORRECTNESS_POINTS",
    "MAX_POINTS",
    "MIN_REFERENCE_SPEEDUP",
    "SHARE_TIERS",
    "Speedup",
    "mistake_lines",
    "share",
    "speed_points",
    "tier_is_certain",
    "tiers_text",
]

SHARE_TIERS: tuple[tuple[float, int], ...] = ((0.25, 2), (0.4, 4), (0.8, 8))
"""``(minimum share of the reference's gain, points)``: the best tier that the measured share reaches.

Where the lines sit, and why (measured on the course's 2-core grading machine, where the
reference runs about 12x faster than the baseline; ``tools/capstone_benchmark.py``): the
baseline itself is at 0; batching alone (the per-sample loop gone, every other mistake
kept) at about 0.5 and batching through ``DataLoader(batch_size=16)`` at about 0.7, the
half-way answers, both in the middle tier; the reference at 1 and ``torch.compile`` of it
at about 0.95, full marks. Each answer sits at least 0.1 from every line (a factor of
1.3 in speed at 12x), where one measurement's shares spread by about 0.03.
"""
CORRECTNESS_POINTS = 2
MAX_POINTS = CORRECTNESS_POINTS + max(points for _, points in SHARE_TIERS)
MIN_REFERENCE_SPEEDUP = 2.0
"""Below this, the reference gained too little over the baseline for a share to mean anything."""


def share(baseline_seconds: float, fast_seconds: float, reference_seconds: float) -> float:
    """How much of the reference's gain over the baseline ``fast_seconds`` reaches, counted in factors (see above).

    0 at the baseline's time, 1 at the reference's, negative when slower than the
    baseline, above 1 when faster than the reference. The reference's speedup is taken as
    at least ``MIN_REFERENCE_SPEEDUP`` (a round where it gained less says too little).
    """
    reference = max(baseline_seconds / reference_seconds, MIN_REFERENCE_SPEEDUP)
    return math.log(baseline_seconds / fast_seconds) / math.log(reference)


def speed_points(measured_share: float) -> int:
    """Points for a measured share of the reference's gain: the best tier of ``SHARE_TIERS`` it reaches, else 0."""
    return max((points for line, points in SHARE_TIERS if measured_share >= line), default=0)


def tiers_text(reference_ratio: float | None = None) -> str:
    """The tiers in words; with the reference's measured speedup, the speedup each line then asks for."""
    parts = []
    for line, points in SHARE_TIERS:
        needed = f" = {max(reference_ratio, MIN_REFERENCE_SPEEDUP) ** line:.1f}x here" if reference_ratio else ""
        parts.append(f"{line:g}{needed}: {points}")
    return "shares of the reference's gain " + ", ".join(parts)


@dataclass(frozen=True)
class Speedup:
    """Timings of one measurement, one per round and side: the baseline, the fast version, and the reference.

    ``reference_seconds`` may be empty (``measure_speedup`` without a reference, as when
    the baseline is timed against itself): then there is no share.
    """

    baseline_seconds: tuple[float, ...]
    fast_seconds: tuple[float, ...]
    reference_seconds: tuple[float, ...] = ()

    @property
    def ratios(self) -> tuple[float, ...]:
        """Baseline time over fast time, per round."""
        return tuple(b / f for b, f in zip(self.baseline_seconds, self.fast_seconds, strict=True))

    @property
    def ratio(self) -> float:
        """The median of the per-round ratios: how many times faster the fast version is."""
        return statistics.median(self.ratios)

    @property
    def reference_ratios(self) -> tuple[float, ...]:
        """Baseline time over the reference's time, per round."""
        return tuple(b / r for b, r in zip(self.baseline_seconds, self.reference_seconds, strict=True))

    @property
    def reference_ratio(self) -> float:
        """The median of the reference's per-round speedups."""
        return statistics.median(self.reference_ratios)

    @property
    def shares(self) -> tuple[float, ...]:
        """The share of the reference's gain (``share``), per round."""
        if not self.reference_seconds:
            raise ValueError("no share without the reference's timings")
        return tuple(
            share(b, f, r)
            for b, f, r in zip(self.baseline_seconds, self.fast_seconds, self.reference_seconds, strict=True)
        )

    @property
    def share(self) -> float:
        """The median of the per-round shares: what the points are decided by."""
        return statistics.median(self.shares)

    def __str__(self) -> str:
        rounds = ", ".join(f"{r:.1f}" for r in self.ratios)
        speed = f"speedup {self.ratio:.1f}x (median of {len(self.ratios)} rounds: {rounds})"
        per_run = f"baseline {statistics.median(self.baseline_seconds) * 1e3:.0f} ms"
        if not self.reference_seconds:
            return f"{speed}; {per_run}, yours {statistics.median(self.fast_seconds) * 1e3:.1f} ms per training run"
        reference = ", ".join(f"{r:.1f}" for r in self.reference_ratios)
        shares = ", ".join(f"{s:.2f}" for s in self.shares)
        return (
            f"{speed}; the reference solution {self.reference_ratio:.1f}x in the same rounds ({reference}); "
            f"your share of its gain {self.share:.2f} (rounds: {shares}); {per_run}, reference "
            f"{statistics.median(self.reference_seconds) * 1e3:.1f} ms, yours "
            f"{statistics.median(self.fast_seconds) * 1e3:.1f} ms per training run"
        )


def tier(value: float, thresholds: Sequence[float]) -> int:
    """Index of the tier ``value`` falls in: how many of the sorted ``thresholds`` it reaches."""
    return bisect.bisect_right(thresholds, value)


def tier_is_certain(values: Sequence[float], rounds: int, thresholds: Sequence[float]) -> bool:
    """Whether the median of ``rounds`` values must fall in one tier, whatever the rounds still to come.

    It must once more than half of all ``rounds`` values already lie in one tier (tiers are
    intervals, and the median of the full set then lies between two of them).
    ``thresholds`` must be sorted.
    """
    tiers = [tier(value, thresholds) for value in values]
    return any(tiers.count(t) > rounds // 2 for t in set(tiers))


def mistake_lines(mistakes: list[str], speed: int, speed_max: int) -> list[str]:
    """The report's lines on the mistakes left in an answer that earned ``speed`` of ``speed_max`` points.

    Both reports use it: the grader's (``referee``) and the learner's own check (``in_kernel``).
    """
    if mistakes:
        return ["mistakes left:", *(f"  - {mistake}" for mistake in mistakes)]
    if speed < speed_max:
        return [
            f"mistakes left: none that the counters recognise, yet the speed earns {speed} of {speed_max}: "
            "profile fast_train as section 3 profiles slow_train"
        ]
    return ["mistakes left: none found"]
