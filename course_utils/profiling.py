"""Profile a few training steps and summarise where each step spends its time.

Contract: nothing happens at import and nothing is written to disk. ``profile_steps``
runs a step function under ``torch.profiler.profile`` with a one-cycle ``schedule``
(skip, warm up, then record) and returns the finished profiler, whose
``key_averages()`` and ``export_chrome_trace`` work as usual. ``label_times`` reads the
``record_function`` labels of a profile as milliseconds per step (from the CPU-side
events: with CUDA recorded, every label also has a GPU-side twin of the same name), and
``plot_label_times`` draws them as one stacked bar per variant. ``flop_rate`` reads the
FLOPs and the time of the matrix products from a profile recorded with ``with_flops=True``.
``sync_debug_warnings`` runs a function under ``torch.cuda.set_sync_debug_mode("warn")``
and returns the warnings it raised instead of printing them (CUDA only); that mode is an
experimental detector that misses some synchronisations, so an empty list proves nothing.
First written out in notebook 10 ("Find the bottleneck with the profiler"), except
``sync_debug_warnings``, which notebook 01 writes out.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch.profiler import DeviceType, ProfilerActivity, profile, schedule

from course_utils.device import synchronize

__all__ = [
    "MATMUL_OPS",
    "flop_rate",
    "label_times",
    "plot_label_times",
    "profile_steps",
    "profiler_activities",
    "sync_debug_warnings",
]

_STEP_KEY = "ProfilerStep*"
"""``key_averages`` groups the ``ProfilerStep#N`` ranges that ``prof.step()`` opens under this key."""

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
"""The matrix-product operators whose FLOPs ``with_flops=True`` counts (2 x m x n x k each)."""


def profiler_activities(device: torch.device | str) -> list[ProfilerActivity]:
    """What to record for work on ``device``: always the CPU, plus CUDA kernels on a GPU.

    Only the device type is read, so this is safe to call on a machine without CUDA.

    >>> profiler_activities("cpu")
    [<ProfilerActivity.CPU: 0>]
    >>> [a.name for a in profiler_activities("cuda:0")]
    ['CPU', 'CUDA']
    """
    activities = [ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return activities


def profile_steps(
    step: Callable[[], object],
    *,
    device: torch.device | str = "cpu",
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    **profile_options: Any,
) -> profile:
    """Run ``step()`` ``wait + warmup + active`` times under the profiler; return it.

    The first ``wait`` steps run unprofiled (lazy initialisation, first allocations),
    the next ``warmup`` steps run with the profiler on but discarded, and the last
    ``active`` steps are recorded, each as a ``ProfilerStep#N`` range. The device is
    synchronised once, after the last step, so its queued kernels are inside the
    record; no step is synchronised otherwise, so a sync the step itself forces stays
    visible. ``profile_options`` go to ``torch.profiler.profile`` (``record_shapes``,
    ``profile_memory``, ``with_stack``, ...). ``acc_events`` defaults to True: with a
    single recording cycle it changes nothing, and torch 2.11 warns that events are
    cleared between cycles on every profiler without it (pytorch/pytorch#180348).

    >>> x = torch.randn(32, 32)
    >>> prof = profile_steps(lambda: x @ x, active=2)
    >>> [e.count for e in prof.key_averages() if e.key == "ProfilerStep*"]
    [2]
    """
    if wait < 0 or warmup < 1 or active < 1:
        raise ValueError(f"need wait >= 0, warmup >= 1 and active >= 1, got {wait}, {warmup}, {active}")
    num_steps = wait + warmup + active
    profile_options.setdefault("acc_events", True)
    with profile(
        activities=profiler_activities(device),
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        **profile_options,
    ) as prof:
        for index in range(num_steps):
            step()
            if index == num_steps - 1:
                synchronize(device)
            prof.step()
    return prof


def label_times(prof: profile, labels: Sequence[str]) -> dict[str, float]:
    """CPU milliseconds per recorded step spent inside each ``record_function`` label.

    A label's time includes everything that ran inside it (its child operators and
    any wait for the device). A label that never ran reads 0.0. Profiles without
    ``ProfilerStep`` ranges count as a single step. Only CPU-side events count: when
    CUDA is recorded, ``key_averages()`` also has a GPU-side row for each label and each
    ``ProfilerStep`` (the range of the kernels launched inside it), whose CPU time is 0.

    >>> from torch.profiler import record_function
    >>> x = torch.randn(32, 32)
    >>> def step():
    ...     with record_function("matmul"):
    ...         x @ x
    >>> times = label_times(profile_steps(step), ["matmul", "missing"])
    >>> times["matmul"] > 0.0, times["missing"]
    (True, 0.0)
    """
    cpu_us: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for event in prof.key_averages():
        if event.device_type == DeviceType.CPU:
            cpu_us[event.key] += event.cpu_time_total
            counts[event.key] += event.count
    steps = counts.get(_STEP_KEY) or 1
    return {label: cpu_us.get(label, 0.0) / 1e3 / steps for label in labels}


def flop_rate(prof: profile, ops: Sequence[str] = MATMUL_OPS) -> tuple[int, float]:
    """``(FLOPs, seconds)`` spent in the operators ``ops``, summed over the whole profile.

    The profile must be recorded with ``with_flops=True``. The seconds are the operators'
    self time where their arithmetic ran: the GPU time of their kernels
    (``self_device_time_total``) when the profile recorded a device, else their self CPU
    time. Divide one by the other for the achieved FLOP/s.

    >>> x = torch.randn(64, 32)
    >>> flops, seconds = flop_rate(profile_steps(lambda: x @ x.T, active=2, with_flops=True))
    >>> flops == 2 * (2 * 64 * 32 * 64), seconds > 0
    (True, True)
    """
    rows = [event for event in prof.key_averages() if event.key in ops]
    flops = sum(event.flops or 0 for event in rows)
    if flops == 0:
        raise ValueError(f"no FLOPs recorded for {list(ops)}: profile with with_flops=True, and run a matmul")
    device_us = sum(event.self_device_time_total for event in rows)
    seconds = (device_us if device_us > 0 else sum(event.self_cpu_time_total for event in rows)) / 1e6
    return flops, seconds


def sync_debug_warnings(fn: Callable[[], object]) -> list[str]:
    """Run ``fn()`` under ``torch.cuda.set_sync_debug_mode("warn")``; return the warnings raised.

    In that mode CUDA warns "called a synchronizing CUDA operation" at the synchronising calls
    it covers. It does not cover all of them: its docs call it experimental (``torch.distributed``
    and ``torch.sparse`` are not covered), and ``torch.cuda.synchronize()`` itself is not flagged
    (c10's ``device_synchronize`` skips the check), so no warning does not mean no sync. The
    first time in a process, switching the mode on also warns that it is a prototype which
    does not yet detect all synchronising operations: that notice is not a detection, so
    count only the messages that start with "called a synchronizing". Every
    warning raised meanwhile is recorded instead of printed and returned as its first
    line, without torch's "(Triggered internally at ...)" suffix, so that a notebook can
    print what was caught. The previous mode is restored afterwards. CUDA only.

    >>> sync_debug_warnings(lambda: torch.ones(3, device="cuda").sum().item())  # doctest: +SKIP
    ['Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations',
     'called a synchronizing CUDA operation']
    """
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return [str(warning.message).splitlines()[0].split(" (Triggered internally at")[0] for warning in caught]


def plot_label_times(
    breakdowns: Mapping[str, Mapping[str, float]],
    *,
    title: str = "Where each step's time goes",
    unit: str = "ms",
) -> tuple[Figure, Axes]:
    """One horizontal stacked bar per variant: time per step inside each label.

    ``breakdowns`` maps a variant name to ``{label: time}`` (``label_times`` output).
    Labels keep the order in which they first appear, with one colour each.
    """
    labels: list[str] = []
    for times in breakdowns.values():
        labels.extend(label for label in times if label not in labels)
    variants = list(breakdowns)
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.5 * len(variants)), layout="constrained")
    left = [0.0] * len(variants)
    colours = plt.get_cmap("tab10")
    for index, label in enumerate(labels):
        widths = [breakdowns[variant].get(label, 0.0) for variant in variants]
        ax.barh(variants, widths, left=left, label=label, color=colours(index % 10))
        left = [start + width for start, width in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel(f"{unit} per step (CPU time inside each label)")
    ax.set_title(title)
    fig.legend(loc="outside right upper", fontsize="small")
    ax.grid(alpha=0.3, axis="x")
    return fig, ax
