"""Consistent matplotlib figures: speedup bars, curves, and curves against batch size.

Contract: each function draws one figure, returns ``(figure, axes)``, and neither shows
nor saves it (Jupyter displays a returned figure; scripts call ``savefig``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from course_utils.timing import Comparison

__all__ = ["plot_curves", "plot_speedups", "plot_vs_batch_size"]


def plot_speedups(comparison: Comparison, title: str = "") -> tuple[Figure, Axes]:
    """Horizontal bars of each variant's speedup over the baseline (1x marked)."""
    speedups = comparison.speedups()
    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.45 * len(speedups)), layout="constrained")
    names = list(speedups)
    bars = ax.barh(names, [speedups[name] for name in names], color="tab:blue")
    ax.bar_label(bars, labels=[f"{speedups[name]:.2f}x" for name in names], padding=3)
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.invert_yaxis()
    ax.set_xlabel(f"speedup over '{comparison.baseline}' (higher is faster)")
    ax.set_title(title or (f"Measured on {comparison.hardware}" if comparison.hardware else "Speedup"))
    ax.margins(x=0.15)
    return fig, ax


def plot_curves(
    curves: Mapping[str, Sequence[float]],
    *,
    xlabel: str = "step",
    ylabel: str = "loss",
    title: str = "",
    logy: bool = False,
    x: Sequence[float] | None = None,
) -> tuple[Figure, Axes]:
    """One line per named curve (loss curves, per-layer statistics, ...)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
    for label, values in curves.items():
        xs = list(x) if x is not None else list(range(len(values)))
        ax.plot(xs[: len(values)], list(values), label=label)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig, ax


def plot_vs_batch_size(
    batch_sizes: Sequence[int],
    values: Mapping[str, Sequence[float]],
    *,
    ylabel: str = "samples / s",
    title: str = "",
) -> tuple[Figure, Axes]:
    """Curves against batch size on log-log axes with the batch sizes as ticks."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
    for label, ys in values.items():
        ax.plot(batch_sizes, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(batch_sizes), [str(b) for b in batch_sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if len(values) > 1:
        ax.legend()
    return fig, ax
