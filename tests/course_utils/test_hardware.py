"""course_utils.hardware: GPU look-up by exact name, the CPU estimate from fake cpuinfo/sysfs."""

import pytest
import torch

from course_utils import hardware
from course_utils.hardware import (
    CUDA_NAMES,
    GPU_PEAKS,
    CpuInfo,
    achieved_fraction,
    cpu_clock,
    cpu_peak_from,
    estimate_cpu_peak,
    parse_cpuinfo,
    peak_for,
    peak_for_name,
    peak_gflops,
    vector_units,
)

# ------------------------------------------------------------------ GPU datasheet table

# (CUDA name, fp32, TF32, bf16, GB/s): dense datasheet figures, typed in from the sources
# cited in hardware.py, not computed from the table under test.
DATASHEET = [
    ("NVIDIA H100 80GB HBM3", 67.0, 494.5, 989.5, 3350.0),
    ("NVIDIA H100 PCIe", 51.0, 378.0, 756.5, 2000.0),
    ("NVIDIA H100 NVL", 60.0, 417.5, 835.5, 3900.0),
    ("NVIDIA H200", 67.0, 494.5, 989.5, 4800.0),
    ("NVIDIA H200 NVL", 60.0, 417.5, 835.5, 4800.0),
    ("NVIDIA A100-SXM4-40GB", 19.5, 156.0, 312.0, 1555.0),
    ("NVIDIA A100-SXM4-80GB", 19.5, 156.0, 312.0, 2039.0),
    ("NVIDIA A100-PCIE-40GB", 19.5, 156.0, 312.0, 1555.0),
    ("NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0, 1935.0),
    ("NVIDIA A10G", 31.52, 35.0, 70.0, 600.0),
    ("NVIDIA L4", 30.3, 60.0, 121.0, 300.0),
    ("NVIDIA L40S", 91.6, 183.0, 362.05, 864.0),
]


@pytest.mark.parametrize(("cuda_name", "fp32", "tf32", "bf16", "bandwidth"), DATASHEET)
def test_each_cuda_name_gets_its_own_datasheet_figures(cuda_name, fp32, tf32, bf16, bandwidth):
    peak = peak_for_name(cuda_name)
    assert peak is not None, cuda_name
    assert peak.tflops(torch.float32) == fp32
    assert peak.tflops(torch.float32, tf32=True) == tf32
    assert peak.tflops(torch.bfloat16) == bf16
    assert peak.bandwidth_gbs == bandwidth


@pytest.mark.parametrize("cuda_name", ["Tesla T4", "Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"])
def test_pre_ampere_gpus_have_no_tf32_and_no_bf16(cuda_name):
    peak = peak_for_name(cuda_name)
    assert peak.tf32_tflops is None
    assert peak.tflops(torch.float32, tf32=True) == peak.fp32_tflops  # TF32 requested, fp32 is what runs
    with pytest.raises(ValueError, match="no tensor-core peak"):
        peak.tflops(torch.bfloat16)
    assert peak_for_name("Tesla T4").tflops(torch.float16) == 65.0
    assert peak_for_name("Tesla V100-SXM2-32GB").tflops(torch.float16) == 125.0


def test_names_are_matched_whole_not_as_substrings():
    assert peak_for_name("NVIDIA L40S").name == "L40S"
    assert peak_for_name("NVIDIA L4").name == "L4"
    assert peak_for_name("NVIDIA L40S").fp32_tflops != peak_for_name("NVIDIA L4").fp32_tflops
    sxm = peak_for_name("NVIDIA H100 80GB HBM3")
    for other in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL"):
        assert peak_for_name(other) != sxm, other
        assert peak_for_name(other).tflops(torch.bfloat16) < sxm.tflops(torch.bfloat16), other
    assert peak_for_name("NVIDIA H100 NVL").bandwidth_gbs == 3900.0  # HBM3 at 3.9 TB/s, more than SXM
    assert peak_for_name("NVIDIA H100 PCIe").bandwidth_gbs == 2000.0
    assert peak_for_name("NVIDIA A100-SXM4-40GB").bandwidth_gbs == 1555.0  # not the 80GB's 2039
    assert peak_for_name("NVIDIA A100-PCIE-40GB").bandwidth_gbs == 1555.0
    for unknown in ("NVIDIA H100", "H100", "NVIDIA L40", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "Some Future GPU", ""):
        assert peak_for_name(unknown) is None, unknown


def test_every_cuda_name_points_at_an_entry():
    assert set(CUDA_NAMES.values()) == set(GPU_PEAKS)


def test_peak_for_reads_the_cuda_name(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    assert peak_for("cuda").name == "T4"
    assert peak_gflops("cuda", torch.float16) == 65_000.0
    assert peak_gflops("cuda", torch.bfloat16) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert peak_gflops("cuda") == 51_000.0
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert peak_for("cuda") is None and peak_gflops("cuda") is None
    assert peak_for("cpu") is None


# ------------------------------------------------------------------ CPU from fake /proc/cpuinfo

EPYC_GENOA = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
cpu MHz\t\t: 2396.400
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw avx512vl

processor\t: 1
vendor_id\t: AuthenticAMD
cpu MHz\t\t: 1500.000
"""

EPYC_MILAN = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7763 64-Core Processor
cpu MHz\t\t: 2445.000
flags\t\t: fpu sse sse2 avx fma avx2
"""

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
cpu MHz\t\t: 800.000
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw amx_tile
"""

CASCADE_LAKE_SILVER = """vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Silver 4210 CPU @ 2.20GHz
flags\t\t: fpu avx fma avx2 avx512f
"""

NEOVERSE_N1 = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


def test_parse_cpuinfo_reads_the_first_processor_only():
    info = parse_cpuinfo(EPYC_GENOA)
    assert (info.vendor, info.family, info.model) == ("AuthenticAMD", 25, 17)
    assert info.model_name == "AMD EPYC 9654 96-Core Processor"
    assert info.mhz == 2396.4
    assert "avx512f" in info.flags
    arm = parse_cpuinfo(NEOVERSE_N1)
    assert (arm.vendor, arm.arm_part, arm.family) == ("Arm implementer 0x41", 0xD0C, None)
    assert "asimd" in arm.flags


@pytest.mark.parametrize(
    ("text", "flops", "microarchitecture"),
    [
        (EPYC_GENOA, 32, "AMD Zen 4"),  # AVX-512 on 256-bit pipes: not 64
        (EPYC_MILAN, 32, "AMD Zen 3"),
        (SAPPHIRE_RAPIDS, 64, "Intel Xeon"),
        (CASCADE_LAKE_SILVER, 32, "Intel Xeon Scalable (1st/2nd gen)"),
        (NEOVERSE_N1, 16, "Arm Neoverse N1"),
    ],
)
def test_flops_per_cycle_from_the_microarchitecture(text, flops, microarchitecture):
    units = vector_units(parse_cpuinfo(text))
    assert (units.flops_per_cycle, units.microarchitecture) == (flops, microarchitecture)
    assert units.assumption


def amd(family, model, name, avx512=True):
    flags = {"avx", "avx2", "fma"} | ({"avx512f"} if avx512 else set())
    return CpuInfo(vendor="AuthenticAMD", family=family, model=model, model_name=name, flags=frozenset(flags))


def test_zen5_desktop_and_server_have_512_bit_pipes_mobile_does_not():
    assert vector_units(amd(26, 0x02, "AMD EPYC 9575F 64-Core Processor")).flops_per_cycle == 64
    assert vector_units(amd(26, 0x44, "AMD Ryzen 9 9950X 16-Core Processor")).flops_per_cycle == 64
    assert vector_units(amd(26, 0x70, "AMD RYZEN AI MAX+ 395 w/ Radeon 8060S")).flops_per_cycle == 64
    assert vector_units(amd(26, 0x70, "AMD Ryzen AI Max+ 395 w/ Radeon 8060S")).flops_per_cycle == 64
    assert vector_units(amd(26, 0x24, "AMD Ryzen AI 9 HX 370 w/ Radeon 890M")).flops_per_cycle == 32
    assert vector_units(amd(26, 0x24, "AMD RYZEN AI 9 HX 370 w/ Radeon 890M")).flops_per_cycle == 32
    assert vector_units(amd(23, 0x01, "AMD EPYC 7601 32-Core Processor", avx512=False)).flops_per_cycle == 16
    assert vector_units(amd(23, 0x31, "AMD EPYC 7742 64-Core Processor", avx512=False)).flops_per_cycle == 32


def test_intel_client_avx512_and_older_isas():
    client = CpuInfo(
        vendor="GenuineIntel",
        family=6,
        model=140,
        model_name="11th Gen Intel(R) Core(TM) i7-1165G7",
        flags=frozenset({"avx2", "fma", "avx512f"}),
    )
    assert vector_units(client).flops_per_cycle == 32
    assert vector_units(CpuInfo(vendor="GenuineIntel", flags=frozenset({"avx2", "fma"}))).flops_per_cycle == 32
    assert vector_units(CpuInfo(vendor="GenuineIntel", flags=frozenset({"avx"}))).flops_per_cycle == 16
    assert vector_units(CpuInfo(flags=frozenset({"sse2"}))).flops_per_cycle == 8


def test_clock_prefers_the_maximum_frequency_and_says_which_it_used():
    genoa = parse_cpuinfo(EPYC_GENOA)
    assert cpu_clock("3700000\n", genoa) == (3.7, "maximum frequency (cpufreq cpuinfo_max_freq)")
    ghz, source = cpu_clock(None, parse_cpuinfo(CASCADE_LAKE_SILVER))
    assert (ghz, source) == (2.2, "nominal clock in the model name")
    ghz, source = cpu_clock(None, parse_cpuinfo(SAPPHIRE_RAPIDS))  # an idle 800 MHz, the last resort
    assert ghz == 0.8 and "current clock" in source
    assert cpu_clock("", CpuInfo()) == (2.5, "assumed 2.5 GHz (no clock information found)")
    assert cpu_clock("garbage", CpuInfo())[0] == 2.5


def test_peak_from_fake_files_is_cores_times_clock_times_flops():
    peak = cpu_peak_from(EPYC_GENOA, "3700000", cores=4)
    assert peak.gflops == pytest.approx(4 * 3.7 * 32)
    text = peak.assumptions()
    for fact in ("AuthenticAMD", "family 25", "model 17", "AMD Zen 4", "AVX-512", "256-bit", "32 fp32", "cpufreq"):
        assert fact in text, fact
    assert "GFLOP/s" in str(peak)


def test_missing_files_give_a_labelled_guess_not_an_error():
    x86 = cpu_peak_from("", None, cores=2, machine="x86_64")
    assert (x86.flops_per_cycle, x86.ghz, x86.name) == (8, 2.5, "x86_64")
    assert "assumed" in x86.assumptions()
    apple = cpu_peak_from("", None, cores=8, machine="arm64")
    assert apple.vector_isa == "NEON" and apple.flops_per_cycle == 16


def test_estimate_reads_this_machine(monkeypatch):
    monkeypatch.setattr(hardware, "_read", lambda path: EPYC_GENOA if path == "/proc/cpuinfo" else None)
    peak = estimate_cpu_peak(threads=3)
    assert (peak.cores, peak.flops_per_cycle, peak.ghz) == (3, 32, pytest.approx(2.3964))
    assert estimate_cpu_peak(threads=3, ghz=2.0).gflops == pytest.approx(3 * 2.0 * 32)
    monkeypatch.undo()
    assert estimate_cpu_peak().cores == torch.get_num_threads()


def test_peak_gflops_cpu():
    assert peak_gflops("cpu") == pytest.approx(estimate_cpu_peak().gflops)
    assert peak_gflops("cpu", torch.bfloat16) is None


def test_achieved_fraction():
    assert achieved_fraction(50.0, 200.0) == 0.25
    with pytest.raises(ValueError):
        achieved_fraction(1.0, 0.0)


def test_peak_bandwidth_reads_the_datasheet_entry(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    assert hardware.peak_bandwidth_gbs("cuda") == 320.0
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert hardware.peak_bandwidth_gbs("cuda") == 4800.0
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert hardware.peak_bandwidth_gbs("cuda") is None
    assert hardware.peak_bandwidth_gbs("cpu") is None


def test_bf16_extensions_fastest_first():
    assert hardware.bf16_extensions(parse_cpuinfo(EPYC_GENOA)) == ()  # its flags line lists no avx512_bf16
    sapphire = CpuInfo(vendor="GenuineIntel", flags=frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}))
    assert hardware.bf16_extensions(sapphire) == ("AMX-BF16", "AVX512-BF16")
    graviton3 = parse_cpuinfo("processor : 0\nFeatures : fp asimd sve bf16 i8mm\nCPU implementer : 0x41\n")
    assert hardware.bf16_extensions(graviton3) == ("Arm BF16",)
    assert hardware.bf16_extensions(CpuInfo()) == ()


def test_cpu_info_reads_this_machine(monkeypatch):
    monkeypatch.setattr(hardware, "_read", lambda path: EPYC_GENOA if path == "/proc/cpuinfo" else None)
    assert hardware.cpu_info() == parse_cpuinfo(EPYC_GENOA)
    monkeypatch.setattr(hardware, "_read", lambda path: None)
    assert hardware.cpu_info() == CpuInfo()
