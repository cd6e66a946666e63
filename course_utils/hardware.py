"""Peak compute and memory bandwidth of common devices, and achieved-vs-peak.

Contract: GPU peaks are vendor datasheet figures for dense math (no sparsity), in
TFLOP/s and GB/s. The CPU peak is an estimate, cores x clock x FLOPs per cycle per
core, from the vector units the CPU reports; it is an upper bound that real kernels
approach but do not reach. First written out in notebook 01 ("Run tensors on the GPU").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_utils.device import device_name

__all__ = [
    "GPU_PEAKS",
    "CpuPeak",
    "DevicePeak",
    "achieved_fraction",
    "cpu_flops_per_cycle",
    "estimate_cpu_peak",
    "peak_for",
    "peak_gflops",
]


@dataclass(frozen=True)
class DevicePeak:
    """Datasheet peaks of one GPU (dense math)."""

    name: str
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    bandwidth_gbs: float

    def tflops(self, dtype: torch.dtype = torch.float32, tf32: bool = False) -> float:
        """Peak TFLOP/s for matmuls in ``dtype`` (``tf32`` for fp32 on Tensor Cores)."""
        if dtype == torch.float32:
            return (self.tf32_tflops or self.fp32_tflops) if tf32 else self.fp32_tflops
        value = {torch.float16: self.fp16_tflops, torch.bfloat16: self.bf16_tflops}.get(dtype)
        if value is None:
            raise ValueError(f"{self.name} has no tensor-core peak for {dtype}")
        return value


# Sources: NVIDIA datasheets (dense figures). Keys are matched against the CUDA
# device name, so "NVIDIA H100 80GB HBM3" finds "H100".
GPU_PEAKS: dict[str, DevicePeak] = {
    "T4": DevicePeak("T4", 8.1, None, 65.0, None, 320.0),
    "V100": DevicePeak("V100 SXM2", 15.7, None, 125.0, None, 900.0),
    "A10G": DevicePeak("A10G", 31.2, 62.5, 125.0, 125.0, 600.0),
    "L4": DevicePeak("L4", 30.3, 60.0, 121.0, 121.0, 300.0),
    "A100": DevicePeak("A100 SXM 80GB", 19.5, 156.0, 312.0, 312.0, 2039.0),
    "H100": DevicePeak("H100 SXM", 67.0, 495.0, 989.0, 989.0, 3350.0),
}


@dataclass(frozen=True)
class CpuPeak:
    """An estimate of a CPU's fp32 peak: cores x GHz x FLOPs per cycle per core."""

    name: str
    cores: int
    ghz: float
    flops_per_cycle: int
    vector_isa: str

    @property
    def gflops(self) -> float:
        """Estimated fp32 peak in GFLOP/s."""
        return self.cores * self.ghz * self.flops_per_cycle

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.cores} cores x {self.ghz:.2f} GHz x {self.flops_per_cycle} "
            f"fp32 FLOPs/cycle ({self.vector_isa}) = {self.gflops:.0f} GFLOP/s"
        )


def cpu_flops_per_cycle(flags: set[str]) -> tuple[int, str]:
    """fp32 FLOPs per cycle per core from the CPU's feature flags.

    Assumes two fused multiply-add units per core (one FMA is 2 FLOPs per lane):
    AVX-512 has 16 fp32 lanes (64 FLOPs/cycle), AVX2 8 lanes (32), SSE 4 lanes
    without FMA (8). Chips with a single 512-bit FMA unit reach half the AVX-512 figure.

    >>> cpu_flops_per_cycle({"avx2", "fma"})
    (32, 'AVX2+FMA')
    """
    if "avx512f" in flags:
        return 64, "AVX-512"
    if "avx2" in flags and "fma" in flags:
        return 32, "AVX2+FMA"
    if "asimd" in flags:  # 64-bit Arm NEON: 4 lanes, typically 2-4 FMA pipes
        return 16, "NEON"
    return 8, "SSE"


def _cpuinfo() -> tuple[set[str], float | None]:
    """Feature flags and nominal clock (GHz) from /proc/cpuinfo, where it exists."""
    flags: set[str] = set()
    ghz: float | None = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                elif key == "cpu MHz" and ghz is None:
                    ghz = float(value) / 1000
    except (OSError, ValueError):
        pass
    return flags, ghz


def estimate_cpu_peak(threads: int | None = None, ghz: float | None = None) -> CpuPeak:
    """Estimate the fp32 peak of the cores torch uses on this CPU.

    ``threads`` defaults to ``torch.get_num_threads()``; ``ghz`` to the clock in
    /proc/cpuinfo (2.5 GHz if unknown).
    """
    flags, cpuinfo_ghz = _cpuinfo()
    flops, isa = cpu_flops_per_cycle(flags)
    cores = threads or torch.get_num_threads()
    return CpuPeak(device_name("cpu"), cores, ghz or cpuinfo_ghz or 2.5, flops, isa)


def peak_for(device: torch.device | str) -> DevicePeak | None:
    """The datasheet entry for a CUDA device, or ``None`` if it is not in the table."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peak in GPU_PEAKS.items():
        if key in name:
            return peak
    return None


def achieved_fraction(achieved: float, peak: float) -> float:
    """Achieved rate as a fraction of the peak rate (same units), in [0, inf)."""
    if peak <= 0:
        raise ValueError("peak must be positive")
    return achieved / peak


def peak_gflops(device: torch.device | str, dtype: torch.dtype = torch.float32, tf32: bool = False) -> float | None:
    """Peak GFLOP/s of ``device`` for matmuls in ``dtype``: datasheet on CUDA, estimate on CPU.

    Returns ``None`` where no figure is known (an unlisted GPU, MPS, or a low-precision
    dtype on the CPU, whose peak depends on extensions such as AMX).
    """
    device = torch.device(device)
    if device.type == "cpu":
        return estimate_cpu_peak().gflops if dtype == torch.float32 else None
    peak = peak_for(device)
    if peak is None:
        return None
    try:
        return peak.tflops(dtype, tf32) * 1000
    except ValueError:
        return None
