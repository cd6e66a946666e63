"""course_utils.plotting: each function draws what it is given and returns (figure, axes)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from course_utils.plotting import plot_curves, plot_speedups, plot_vs_batch_size
from course_utils.timing import Comparison, Timing


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_plot_speedups_one_bar_per_variant():
    comparison = Comparison({"a": Timing("a", (2.0,)), "b": Timing("b", (1.0,))}, baseline="a", hardware="CPU X")
    _fig, ax = plot_speedups(comparison)
    widths = [bar.get_width() for bar in ax.patches]
    assert widths == [1.0, 2.0]
    assert "CPU X" in ax.get_title()


def test_plot_curves_draws_each_curve():
    _fig, ax = plot_curves({"with": [3, 2, 1], "without": [3, 3]}, logy=True, title="t")
    assert [line.get_label() for line in ax.get_lines()] == ["with", "without"]
    assert list(ax.get_lines()[1].get_ydata()) == [3, 3]
    assert ax.get_yscale() == "log"


def test_plot_vs_batch_size_log_axes():
    _fig, ax = plot_vs_batch_size([1, 2, 4], {"model": [10.0, 19.0, 35.0]})
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "batch size"
    assert list(ax.get_lines()[0].get_xdata()) == [1, 2, 4]
