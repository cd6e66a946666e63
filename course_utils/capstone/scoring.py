"""From timings to points: ``Speedup`` (paired timings), the speed tiers and the points of notebook 12's exercise 3.

Plain Python, no torch: what the grader's referee needs to turn the rounds it timed into
a grade, and to stop timing once more rounds cannot change it.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CORRECTNESS_POINTS",
    "MAX_POINTS",
    "SPEED_TIERS",
    "Speedup",
    "speed_points",
    "tier_is_certain",
]

SPEED_TIERS: tuple[tuple[float, int], ...] = ((2.0, 2), (3.0, 4), (4.0, 6), (5.0, 8))
"""``(minimum speedup, points)``, best tier that the measured speedup reaches."""
CORRECTNESS_POINTS = 2
MAX_POINTS = CORRECTNESS_POINTS + max(points for _, points in SPEED_TIERS)


def speed_points(ratio: float) -> int:
    """Points for a measured speedup: the best tier of ``SPEED_TIERS`` it reaches, else 0."""
    return max((points for threshold, points in SPEED_TIERS if ratio >= threshold), default=0)


@dataclass(frozen=True)
class Speedup:
    """Paired timings of the baseline and a fast version, one pair per round."""

    baseline_seconds: tuple[float, ...]
    fast_seconds: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        """Baseline time over fast time, per round."""
        return tuple(b / f for b, f in zip(self.baseline_seconds, self.fast_seconds, strict=True))

    @property
    def ratio(self) -> float:
        """The median of the per-round ratios: how many times faster the fast version is."""
        return statistics.median(self.ratios)

    def __str__(self) -> str:
        rounds = ", ".join(f"{r:.1f}" for r in self.ratios)
        return (
            f"speedup {self.ratio:.1f}x (median of {len(self.ratios)} rounds: {rounds}); baseline "
            f"{statistics.median(self.baseline_seconds) * 1e3:.0f} ms, yours "
            f"{statistics.median(self.fast_seconds) * 1e3:.1f} ms per training run"
        )


def tier(ratio: float, thresholds: Sequence[float]) -> int:
    """Index of the tier ``ratio`` falls in: how many of the sorted ``thresholds`` it reaches."""
    return bisect.bisect_right(thresholds, ratio)


def tier_is_certain(ratios: Sequence[float], rounds: int, thresholds: Sequence[float]) -> bool:
    """Whether the median of ``rounds`` ratios must fall in one tier, whatever the rounds still to come.

    It must once more than half of all ``rounds`` ratios already lie in one tier (tiers are
    intervals, and the median of the full set then lies between two of them).
    ``thresholds`` must be sorted.
    """
    tiers = [tier(ratio, thresholds) for ratio in ratios]
    return any(tiers.count(t) > rounds // 2 for t in set(tiers))
