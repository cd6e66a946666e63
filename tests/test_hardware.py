"""course_utils.hardware: peak tables, the CPU estimate, and GPU look-ups faked on CPU."""

import pytest
import torch

from course_utils.hardware import (
    GPU_PEAKS,
    achieved_fraction,
    cpu_flops_per_cycle,
    estimate_cpu_peak,
    peak_for,
    peak_gflops,
)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [({"avx512f", "avx2", "fma"}, 64), ({"avx2", "fma"}, 32), ({"avx2"}, 8), ({"asimd"}, 16), (set(), 8)],
)
def test_flops_per_cycle(flags, expected):
    assert cpu_flops_per_cycle(flags)[0] == expected


def test_cpu_estimate_is_cores_times_clock_times_flops():
    peak = estimate_cpu_peak(threads=3, ghz=2.0)
    assert peak.cores == 3
    assert peak.gflops == pytest.approx(3 * 2.0 * peak.flops_per_cycle)
    assert "GFLOP/s" in str(peak)
    assert estimate_cpu_peak().cores == torch.get_num_threads()


def test_datasheet_figures():
    assert GPU_PEAKS["H100"].tflops(torch.bfloat16) == 989.0
    assert GPU_PEAKS["H100"].tflops(torch.float32) == 67.0
    assert GPU_PEAKS["H100"].tflops(torch.float32, tf32=True) == 495.0
    assert GPU_PEAKS["T4"].tflops(torch.float16) == 65.0
    assert GPU_PEAKS["T4"].tflops(torch.float32, tf32=True) == 8.1  # no TF32 before Ampere
    with pytest.raises(ValueError):
        GPU_PEAKS["T4"].tflops(torch.bfloat16)


def test_peak_for_matches_cuda_name(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    assert peak_for("cuda").name == "T4"
    assert peak_gflops("cuda", torch.float16) == 65_000.0
    assert peak_gflops("cuda", torch.bfloat16) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert peak_for("cuda") is None and peak_gflops("cuda") is None
    assert peak_for("cpu") is None


def test_peak_gflops_cpu():
    assert peak_gflops("cpu") == pytest.approx(estimate_cpu_peak().gflops)
    assert peak_gflops("cpu", torch.bfloat16) is None


def test_achieved_fraction():
    assert achieved_fraction(50.0, 200.0) == 0.25
    with pytest.raises(ValueError):
        achieved_fraction(1.0, 0.0)
