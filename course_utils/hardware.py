"""Peak compute and memory bandwidth of common devices, and achieved-vs-peak.

Contract: GPU peaks are vendor datasheet figures for dense math (no sparsity), in
TFLOP/s and GB/s, looked up by the exact name CUDA reports for the device; an unlisted
name gets ``None``, never a neighbour's figures. The CPU peak is an estimate, cores x
clock x FLOPs per cycle per core, where the FLOPs per cycle come from the
microarchitecture when it is known and from the vector extensions otherwise; every
estimate carries the assumptions it rests on, so a notebook can print them. The parsing
is done by pure functions of the text of /proc/cpuinfo and sysfs, testable anywhere.
First written out in notebook 01 ("Run tensors on the GPU").
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "CUDA_NAMES",
    "GPU_PEAKS",
    "CpuInfo",
    "CpuPeak",
    "DevicePeak",
    "VectorUnits",
    "achieved_fraction",
    "bf16_extensions",
    "cpu_clock",
    "cpu_info",
    "cpu_peak_from",
    "estimate_cpu_peak",
    "parse_cpuinfo",
    "peak_bandwidth_gbs",
    "peak_for",
    "peak_for_name",
    "peak_gflops",
    "vector_units",
]


@dataclass(frozen=True)
class DevicePeak:
    """Datasheet peaks of one GPU (dense math, no sparsity)."""

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


# Dense figures. NVIDIA's datasheets print Tensor Core rates "with sparsity" (marked *);
# the dense rate is half of that. Keys are product names; CUDA_NAMES maps the exact
# string torch.cuda.get_device_name() returns to them.
GPU_PEAKS: dict[str, DevicePeak] = {
    # T4 datasheet: FP32 8.1, mixed FP16/FP32 65, 320 GB/s. Turing: no TF32, no bf16.
    "T4": DevicePeak("T4", 8.1, None, 65.0, None, 320.0),
    # V100 datasheet (SXM2, 16 and 32 GB): FP32 15.7, Tensor 125, 900 GB/s. No TF32, no bf16.
    "V100 SXM2": DevicePeak("V100 SXM2", 15.7, None, 125.0, None, 900.0),
    # A100 datasheet: FP32 19.5, TF32 156 (312*), BF16/FP16 312 (624*); bandwidth by model:
    # 40GB PCIe 1,555, 80GB PCIe 1,935, 40GB SXM 1,555, 80GB SXM 2,039 GB/s.
    "A100 SXM4 40GB": DevicePeak("A100 SXM4 40GB", 19.5, 156.0, 312.0, 312.0, 1555.0),
    "A100 SXM4 80GB": DevicePeak("A100 SXM4 80GB", 19.5, 156.0, 312.0, 312.0, 2039.0),
    "A100 PCIe 40GB": DevicePeak("A100 PCIe 40GB", 19.5, 156.0, 312.0, 312.0, 1555.0),
    "A100 PCIe 80GB": DevicePeak("A100 PCIe 80GB", 19.5, 156.0, 312.0, 312.0, 1935.0),
    # A10G (AWS G5): NVIDIA publishes no datasheet. AWS's figures as tabulated by Baseten,
    # "NVIDIA A10 vs A10G for ML model inference": FP32 31.52, TF32 35, BF16/FP16 70,
    # 600 GB/s (the A10's tensor rates, 62.5/125, do not apply to the A10G).
    "A10G": DevicePeak("A10G", 31.52, 35.0, 70.0, 70.0, 600.0),
    # L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*, 300 GB/s.
    "L4": DevicePeak("L4", 30.3, 60.0, 121.0, 121.0, 300.0),
    # L40S datasheet: FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*), 864 GB/s.
    "L40S": DevicePeak("L40S", 91.6, 183.0, 362.05, 362.05, 864.0),
    # H100 datasheet: SXM FP32 67, TF32 989*, BF16/FP16 1,979*, 3.35 TB/s;
    # NVL FP32 60, TF32 835*, BF16/FP16 1,671*, 3.9 TB/s; PCIe (80GB HBM2e, earlier
    # datasheet) FP32 51, TF32 756*, BF16/FP16 1,513*, 2 TB/s.
    "H100 SXM": DevicePeak("H100 SXM", 67.0, 494.5, 989.5, 989.5, 3350.0),
    "H100 NVL": DevicePeak("H100 NVL", 60.0, 417.5, 835.5, 835.5, 3900.0),
    "H100 PCIe": DevicePeak("H100 PCIe", 51.0, 378.0, 756.5, 756.5, 2000.0),
    # H200 datasheet: SXM as H100 SXM in compute, 4.8 TB/s; NVL as H100 NVL, 4.8 TB/s.
    "H200 SXM": DevicePeak("H200 SXM", 67.0, 494.5, 989.5, 989.5, 4800.0),
    "H200 NVL": DevicePeak("H200 NVL", 60.0, 417.5, 835.5, 835.5, 4800.0),
}

# The exact names CUDA reports (cudaDeviceProp.name, as nvidia-smi prints them).
CUDA_NAMES: dict[str, str] = {
    "Tesla T4": "T4",
    "Tesla V100-SXM2-16GB": "V100 SXM2",
    "Tesla V100-SXM2-32GB": "V100 SXM2",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA A10G": "A10G",
    "NVIDIA L4": "L4",
    "NVIDIA L40S": "L40S",
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
}


def peak_for_name(cuda_name: str) -> DevicePeak | None:
    """The datasheet entry for an exact CUDA device name, or ``None`` if it is not listed.

    Names are matched whole: "NVIDIA L40S" is not "NVIDIA L4", and a MIG slice
    ("... MIG 1g.10gb") has no entry because it owns only part of the GPU.

    >>> peak_for_name("NVIDIA H100 PCIe").name
    'H100 PCIe'
    >>> peak_for_name("NVIDIA H100") is None
    True
    """
    product = CUDA_NAMES.get(cuda_name.strip())
    return GPU_PEAKS[product] if product else None


def peak_for(device: torch.device | str) -> DevicePeak | None:
    """The datasheet entry for a CUDA device, or ``None`` if it is not in the table."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return peak_for_name(torch.cuda.get_device_name(device))


def peak_bandwidth_gbs(device: torch.device | str) -> float | None:
    """Datasheet memory bandwidth of a CUDA device in GB/s, or ``None`` where none is listed.

    ``None`` for an unlisted GPU, MPS and the CPU (a CPU's bandwidth depends on its memory
    channels and modules, which no table here knows).
    """
    peak = peak_for(device)
    return peak.bandwidth_gbs if peak else None


# ---------------------------------------------------------------------------- CPU


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the first processor (empty fields where it is silent)."""

    vendor: str = ""
    model_name: str = ""
    family: int | None = None
    model: int | None = None
    flags: frozenset[str] = frozenset()
    arm_part: int | None = None
    mhz: float | None = None


def _int(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse the first processor block of /proc/cpuinfo (x86 and Arm layouts).

    >>> parse_cpuinfo("vendor_id : AuthenticAMD\\ncpu family : 25\\nmodel : 17\\nflags : fma avx2").family
    25
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            continue
        if key == "processor" and fields.get("processor") is not None:
            break  # the next processor's block
        fields.setdefault(key, value.strip())
    implementer = fields.get("CPU implementer", "")
    vendor = fields.get("vendor_id") or (f"Arm implementer {implementer}" if implementer else "")
    mhz = fields.get("cpu MHz")
    try:
        mhz_value = float(mhz) if mhz else None
    except ValueError:
        mhz_value = None
    return CpuInfo(
        vendor=vendor,
        model_name=fields.get("model name", ""),
        family=_int(fields.get("cpu family", "")),
        model=_int(fields.get("model", "")),
        flags=frozenset((fields.get("flags") or fields.get("Features") or "").split()),
        arm_part=_int(fields.get("CPU part", "")),
        mhz=mhz_value,
    )


@dataclass(frozen=True)
class VectorUnits:
    """fp32 FLOPs per cycle per core, and where that number comes from."""

    flops_per_cycle: int
    isa: str
    microarchitecture: str
    assumption: str


# Arm Neoverse cores by MIDR part number (Linux arch/arm64/include/asm/cputype.h):
# N1 and N2 have two 128-bit FMA pipes, V1 two 256-bit SVE pipes (four 128-bit for NEON),
# V2 four 128-bit pipes.
_ARM_CORES: dict[int, tuple[str, int, str]] = {
    0xD0C: ("Arm Neoverse N1", 16, "2 x 128-bit FMA pipes"),
    0xD49: ("Arm Neoverse N2", 16, "2 x 128-bit FMA pipes"),
    0xD40: ("Arm Neoverse V1", 32, "4 x 128-bit FMA pipes"),
    0xD4F: ("Arm Neoverse V2", 32, "4 x 128-bit FMA pipes"),
}


def _fma_flops(pipes: int, bits: int) -> int:
    """fp32 FLOPs per cycle of ``pipes`` FMA units ``bits`` wide (an FMA is 2 FLOPs per lane)."""
    return pipes * (bits // 32) * 2


_SPLIT_512 = "2 x 256-bit FMA pipes: a 512-bit op takes two passes"


def _amd(info: CpuInfo, avx512: bool) -> VectorUnits | None:
    family, model = info.family, info.model or 0
    if family == 23:  # Zen, Zen+ (models 0x00-0x2F) and Zen 2 (0x30 and up)
        if model < 0x30:
            return VectorUnits(_fma_flops(2, 128), "AVX2+FMA", "AMD Zen/Zen+", "2 x 128-bit FMA pipes")
        return VectorUnits(_fma_flops(2, 256), "AVX2+FMA", "AMD Zen 2", "2 x 256-bit FMA pipes")
    if family == 25:  # Zen 3 (AVX2) and Zen 4 (AVX-512 executed on the same 256-bit pipes)
        if avx512:
            return VectorUnits(_fma_flops(2, 256), "AVX-512", "AMD Zen 4", _SPLIT_512)
        return VectorUnits(_fma_flops(2, 256), "AVX2+FMA", "AMD Zen 3", "2 x 256-bit FMA pipes")
    if family == 26 and avx512:  # Zen 5
        # Desktop and server Zen 5 (Ryzen 9000, Ryzen AI Max, EPYC 9005) have 512-bit FP
        # pipes; the mobile APUs Strix Point and Krackan Point (Ryzen AI 300 and PRO,
        # Ryzen Z2) keep 256-bit pipes and split 512-bit operations, as Zen 4 does.
        if re.search(r"Ryzen AI (?!Max)|Ryzen Z2", info.model_name, re.IGNORECASE):
            return VectorUnits(_fma_flops(2, 256), "AVX-512", "AMD Zen 5 (mobile)", _SPLIT_512)
        return VectorUnits(_fma_flops(2, 512), "AVX-512", "AMD Zen 5", "2 x 512-bit FMA pipes")
    return None


def _intel_avx512(info: CpuInfo) -> VectorUnits:
    name = info.model_name
    if "Xeon" not in name:
        # Client cores with AVX-512 (Ice Lake, Tiger Lake, Rocket Lake) fuse their two
        # 256-bit FMA units into one 512-bit unit.
        return VectorUnits(
            _fma_flops(1, 512), "AVX-512", "Intel client core", "1 x 512-bit FMA unit (assumed; Core X-series have two)"
        )
    skylake_sp = info.family == 6 and info.model == 0x55  # Skylake-SP and Cascade Lake
    if skylake_sp and re.search(r"Bronze|Silver|Gold 5\d\d\d", name) and "Gold 5122" not in name:
        return VectorUnits(_fma_flops(1, 512), "AVX-512", "Intel Xeon Scalable (1st/2nd gen)", "1 x 512-bit FMA unit")
    return VectorUnits(
        _fma_flops(2, 512),
        "AVX-512",
        "Intel Xeon",
        "2 x 512-bit FMA units (assumed; first- and second-generation Bronze, Silver and Gold 5xxx have one)",
    )


def vector_units(info: CpuInfo, machine: str = "") -> VectorUnits:
    """fp32 FLOPs per cycle per core, from the microarchitecture where it is known.

    An FMA does a multiply and an add (2 FLOPs) on every fp32 lane of its vector: a
    256-bit unit has 8 lanes, so two 256-bit FMA units give 2 x 8 x 2 = 32 FLOPs per cycle.
    AVX-512 in the flags does not mean 512-bit hardware: AMD Zen 4 runs it on 256-bit pipes.
    ``machine`` (``platform.machine()``) is used only when /proc/cpuinfo has no flags.

    >>> zen4 = CpuInfo(vendor="AuthenticAMD", family=25, model=17, flags=frozenset({"avx2", "fma", "avx512f"}))
    >>> vector_units(zen4).flops_per_cycle, vector_units(zen4).microarchitecture
    (32, 'AMD Zen 4')
    """
    flags = info.flags
    avx512 = "avx512f" in flags
    if info.vendor == "AuthenticAMD":
        units = _amd(info, avx512)
        if units is not None:
            return units
    if avx512 and info.vendor == "GenuineIntel":
        return _intel_avx512(info)
    if avx512:
        return VectorUnits(_fma_flops(2, 512), "AVX-512", "unknown x86", "2 x 512-bit FMA units (assumed)")
    if "avx2" in flags and "fma" in flags:
        return VectorUnits(_fma_flops(2, 256), "AVX2+FMA", "x86 with AVX2", "2 x 256-bit FMA units (assumed)")
    if "avx" in flags:
        return VectorUnits(16, "AVX", "x86 with AVX, no FMA", "one 256-bit add and one 256-bit multiply per cycle")
    if "asimd" in flags or (not flags and machine in {"arm64", "aarch64"}):
        if info.arm_part in _ARM_CORES and info.vendor == "Arm implementer 0x41":
            core, flops, pipes = _ARM_CORES[info.arm_part]
            return VectorUnits(flops, "NEON", core, pipes)
        return VectorUnits(_fma_flops(2, 128), "NEON", "64-bit Arm", "2 x 128-bit FMA pipes (assumed)")
    return VectorUnits(8, "SSE", "x86 baseline", "one 128-bit add and one 128-bit multiply per cycle (assumed)")


# bfloat16 instructions as /proc/cpuinfo names them (x86 flags, Arm "Features"), fastest first:
# AMX tiles multiply bfloat16 matrices (Intel Sapphire Rapids and newer); AVX512-BF16 has
# bfloat16 dot products on 512-bit vectors (Intel Cooper Lake, Sapphire Rapids on; AMD Zen 4 on);
# Arm's BF16 extension (optional from Armv8.2-A, part of Armv8.6-A; Neoverse V1 has it) adds BFDOT and BFMMLA.
_BF16_FLAGS: dict[str, str] = {"amx_bf16": "AMX-BF16", "avx512_bf16": "AVX512-BF16", "bf16": "Arm BF16"}


def bf16_extensions(info: CpuInfo) -> tuple[str, ...]:
    """The bfloat16 instructions a CPU reports, fastest first; empty if it has none.

    Without any of them a CPU converts bfloat16 to float32 to compute, so a matmul limited by
    arithmetic cannot run faster in bfloat16 than in float32 there.

    >>> bf16_extensions(CpuInfo(flags=frozenset({"avx2", "fma", "avx512_bf16"})))
    ('AVX512-BF16',)
    >>> bf16_extensions(CpuInfo(flags=frozenset({"avx2", "fma"})))
    ()
    """
    return tuple(name for flag, name in _BF16_FLAGS.items() if flag in info.flags)


def cpu_info() -> CpuInfo:
    """This machine's /proc/cpuinfo, parsed; empty fields where there is none (macOS, Windows)."""
    return parse_cpuinfo(_read("/proc/cpuinfo") or "")


def cpu_clock(max_freq_khz: str | None, info: CpuInfo) -> tuple[float, str]:
    """The clock (GHz) to put in the peak estimate, and where it came from.

    Prefers the maximum frequency from cpufreq (sysfs ``cpuinfo_max_freq``, in kHz), then
    the nominal clock printed in the model name ("@ 2.40GHz"), then the current clock in
    /proc/cpuinfo (which an idle laptop may report as 800 MHz), then an assumed 2.5 GHz.

    >>> cpu_clock("3700000", CpuInfo())
    (3.7, 'maximum frequency (cpufreq cpuinfo_max_freq)')
    """
    if max_freq_khz and max_freq_khz.strip().isdigit() and int(max_freq_khz) > 0:
        return int(max_freq_khz) / 1e6, "maximum frequency (cpufreq cpuinfo_max_freq)"
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", info.model_name)
    if nominal:
        return float(nominal.group(1)), "nominal clock in the model name"
    if info.mhz:
        return info.mhz / 1000, "current clock in /proc/cpuinfo (can be below the maximum)"
    return 2.5, "assumed 2.5 GHz (no clock information found)"


@dataclass(frozen=True)
class CpuPeak:
    """An estimate of a CPU's fp32 peak: cores x GHz x FLOPs per cycle per core."""

    name: str
    cores: int
    ghz: float
    flops_per_cycle: int
    vector_isa: str
    microarchitecture: str = "unknown"
    assumption: str = ""
    clock_source: str = "given"
    identity: str = ""

    @property
    def gflops(self) -> float:
        """Estimated fp32 peak in GFLOP/s."""
        return self.cores * self.ghz * self.flops_per_cycle

    def assumptions(self) -> str:
        """The facts and assumptions behind the estimate, one per line."""
        lines = [
            f"CPU: {self.name}" + (f" ({self.identity})" if self.identity else ""),
            f"vector units: {self.microarchitecture}, {self.vector_isa}, {self.assumption}"
            f" -> {self.flops_per_cycle} fp32 FLOPs/cycle/core",
            f"clock: {self.ghz:.2f} GHz, {self.clock_source}",
            f"cores: {self.cores} (the threads torch uses)",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.cores} cores x {self.ghz:.2f} GHz x {self.flops_per_cycle} "
            f"fp32 FLOPs/cycle ({self.vector_isa}) = {self.gflops:.0f} GFLOP/s"
        )


def cpu_peak_from(
    cpuinfo_text: str, max_freq_khz: str | None, cores: int, ghz: float | None = None, machine: str = ""
) -> CpuPeak:
    """Estimate the fp32 peak from the text of /proc/cpuinfo and cpufreq's maximum (pure).

    ``ghz`` overrides the clock; ``machine`` is ``platform.machine()``.

    >>> amd = "vendor_id : AuthenticAMD\\ncpu family : 25\\nmodel : 17\\nmodel name : AMD EPYC 9654\\n"
    >>> cpu_peak_from(amd + "flags : fma avx2 avx512f", "3700000", cores=2).gflops
    236.8
    """
    info = parse_cpuinfo(cpuinfo_text)
    units = vector_units(info, machine)
    clock, source = (ghz, "given") if ghz else cpu_clock(max_freq_khz, info)
    identity = ", ".join(
        part
        for part in (
            info.vendor,
            f"family {info.family}" if info.family is not None else "",
            f"model {info.model}" if info.model is not None else "",
            f"part {info.arm_part:#x}" if info.arm_part is not None else "",
        )
        if part
    )
    return CpuPeak(
        name=info.model_name or machine or "unknown CPU",
        cores=cores,
        ghz=clock,
        flops_per_cycle=units.flops_per_cycle,
        vector_isa=units.isa,
        microarchitecture=units.microarchitecture,
        assumption=units.assumption,
        clock_source=source,
        identity=identity,
    )


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return None


def estimate_cpu_peak(threads: int | None = None, ghz: float | None = None) -> CpuPeak:
    """Estimate the fp32 peak of the cores torch uses on this CPU.

    ``threads`` defaults to ``torch.get_num_threads()``; ``ghz`` to the clock chosen by
    ``cpu_clock`` (maximum frequency first). Reads /proc/cpuinfo and
    /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq where they exist.
    """
    return cpu_peak_from(
        _read("/proc/cpuinfo") or "",
        _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"),
        cores=threads or torch.get_num_threads(),
        ghz=ghz,
        machine=platform.machine(),
    )


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
