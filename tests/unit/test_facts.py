"""Hardware facts: the part table, detection (faked here), the host CPU read from a fake sysfs,
the source of every number, hardware_facts' older keys, and what --list-space prints."""
import pytest

from tvm_ext import propose
from tvm_ext import target as tg
from tvm_ext.target import (GPU_PARTS, Fact, cuda_target, device_facts, facts_lines, gpu_model,
                            gpu_part, hardware_facts, parse_target)

H100_PCIE = {"arch": "sm_90", "model": "h100", "name": "NVIDIA H100 PCIe", "num_sms": 114,
             "clock_khz": 1755000, "l2_bytes": 50 << 20, "smem_per_block": 49152,
             "memory_bytes": 85520809984}
A6000 = {"arch": "sm_86", "model": "a6000", "name": "NVIDIA RTX A6000", "num_sms": 84,
         "clock_khz": 1800000, "l2_bytes": 6 << 20, "smem_per_block": 49152,
         "memory_bytes": 51041271808}


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """No GPU is visible unless a test says so (the results must not depend on the host)."""
    monkeypatch.setattr(tg, "_visible_gpu_props", lambda: None)


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """A host CPU described by a fake sysfs tree and /proc/cpuinfo, named znver4 by LLVM."""
    cache = tmp_path / "sys" / "cpu0" / "cache"
    for index, (level, kind, size) in enumerate([("1", "Data", "48K"),
                                                 ("1", "Instruction", "32K"),
                                                 ("2", "Unified", "2048K"),
                                                 ("3", "Unified", "96M")]):
        d = cache / f"index{index}"
        d.mkdir(parents=True)
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(text + "\n")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\ncpu MHz\t\t: 3100.000\n\n"
                       "processor\t: 1\nmodel name\t: Test CPU 9000\ncpu MHz\t\t: 3500.500\n")
    monkeypatch.setattr(tg, "_SYS_CPU", str(tmp_path / "sys"))
    monkeypatch.setattr(tg, "_PROC_CPUINFO", str(cpuinfo))
    monkeypatch.setattr(tg, "_host_cpu_name", lambda: "znver4")
    tg.host_cpu_facts.cache_clear()
    yield tmp_path
    tg.host_cpu_facts.cache_clear()


# ---- the part table ----


@pytest.mark.parametrize("name, part", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090")])
def test_part_by_device_name(name, part):
    found = gpu_part(device_name=name)
    assert found.name == part
    assert gpu_part(device_name=name, sm=found.sm) is found
    if found.models:  # the name's model (what a target's "model" holds) finds the same row
        assert gpu_model(name) in found.models


def test_part_by_model_and_arch():
    assert gpu_part(model="h200", sm=90).name == "H200"
    assert gpu_part(model="h100", sm=90).name == "H100 SXM"
    assert gpu_part(model="l40s", sm=89).name == "L40S"
    assert gpu_part(model="4090", sm=89).name == "RTX 4090"
    assert gpu_part(sm=90).name == "H100 SXM" and gpu_part(sm=80).name == "A100 SXM 80GB"
    # sm_89 and sm_86 name many parts: no row without a model or a device.
    assert gpu_part(sm=89) is None and gpu_part(sm=86) is None
    # A row of another arch is never taken: an sm_80 target "h200" is an sm_80 part.
    assert gpu_part(model="h200", sm=80).name == "A100 SXM 80GB"
    assert gpu_part(device_name="NVIDIA H100 PCIe", sm=80).name == "A100 SXM 80GB"
    assert gpu_part(model="nosuchgpu") is None


@pytest.mark.parametrize("part", GPU_PARTS, ids=lambda p: p.name)
def test_table_rows_agree_with_themselves(part):
    """The f32 peak is SMs x FMA lanes x 2 x boost clock (within the datasheets' rounding);
    tensor peaks rise as the precision falls; fp8 only from sm_89 on."""
    fma_per_sm = tg._SM_LIMITS[part.sm][4]
    assert part.f32_tflops == pytest.approx(
        part.num_sms * fma_per_sm * 2 * part.boost_clock_mhz / 1e6, rel=0.01)
    assert part.f32_tflops < part.f16_tensor_tflops <= part.int8_tensor_tops
    assert (part.fp8_tensor_tflops is None) == (part.sm < 89)
    assert 0.5 < part.dram_tbs < 6 and part.l2_bytes >= 40 << 20


# ---- CUDA facts and their sources ----


def test_cuda_facts_from_the_arch():
    f = device_facts(cuda_target("sm_90"))
    assert f["part"] == Fact("H100 SXM", "table by arch")
    assert "device_name" not in f
    assert f["num_sms"] == Fact(132, "table: H100 SXM")
    assert f["boost_clock_mhz"] == Fact(1980, "table: H100 SXM")
    assert f["peak_f32_tflops"] == Fact(67.0, "table: H100 SXM")
    assert f["peak_f16_tensor_tflops"].value == f["peak_bf16_tensor_tflops"].value == 989.5
    assert f["peak_int8_tensor_tops"].value == f["peak_fp8_tensor_tflops"].value == 1979
    assert f["dram_tbs"] == Fact(3.35, "table: H100 SXM")
    assert f["l2_bytes"] == Fact(50 << 20, "table: H100 SXM")
    assert f["shared_memory_per_sm"] == Fact(228 * 1024, "table: sm_90")
    assert f["shared_memory_per_block_optin"] == Fact(227 * 1024, "table: sm_90")
    assert f["registers_per_sm"] == Fact(65536, "table: sm_90")
    assert f["shared_memory_per_block"] == Fact(49152, "target")
    assert f["memory_bytes"] == Fact(None, "default")

    a100 = device_facts(cuda_target("sm_80"))
    assert a100["part"] == Fact("A100 SXM 80GB", "table by arch")
    assert a100["peak_fp8_tensor_tflops"] == Fact(None, "table: A100 SXM 80GB")
    assert a100["shared_memory_per_sm"].value == 164 * 1024
    assert a100["f32_fma_per_clock_per_sm"] == Fact(64, "table: sm_80")


def test_cuda_facts_from_the_model():
    f = device_facts(cuda_target("sm_90", "h200"))
    assert f["part"] == Fact("H200", "table by model")
    assert f["dram_tbs"] == Fact(4.8, "table: H200")
    l40s = device_facts(cuda_target("sm_89", "l40s"))
    assert l40s["part"] == Fact("L40S", "table by model")
    assert l40s["num_sms"] == Fact(142, "table: L40S")
    assert l40s["max_threads_per_sm"] == Fact(1536, "table: sm_89")


def test_cuda_facts_of_an_unknown_part_are_defaults():
    f = device_facts(cuda_target("sm_89"))
    assert f["part"] == Fact(None, "default")
    assert f["num_sms"] == Fact(80, "default") and f["boost_clock_mhz"] == Fact(None, "default")
    assert f["peak_f16_tensor_tflops"] == Fact(312.0, "default (A100 SXM 80GB's)")
    assert f["shared_memory_per_block_optin"] == Fact(99 * 1024, "table: sm_89")
    # An arch between two rows takes the limits of the one below; below them all, defaults.
    assert device_facts(cuda_target("sm_72"))["shared_memory_per_sm"] == \
        Fact(96 * 1024, "table: sm_70")
    assert device_facts({"kind": "cuda", "arch": "sm_61"})["registers_per_sm"].source == \
        "default"


def test_detected_gpu(monkeypatch):
    monkeypatch.setattr(tg, "_visible_gpu_props", lambda: dict(H100_PCIE))
    f = device_facts(cuda_target("sm_90"))
    assert f["part"] == Fact("H100 PCIe", "table by device name")
    assert f["device_name"] == Fact("NVIDIA H100 PCIe", "detected")
    assert f["num_sms"] == Fact(114, "detected")
    assert f["boost_clock_mhz"] == Fact(1755, "detected")
    assert f["memory_bytes"] == Fact(85520809984, "detected")
    assert f["dram_tbs"] == Fact(2.0, "table: H100 PCIe")
    assert f["peak_f16_tensor_tflops"] == Fact(756.5, "table: H100 PCIe")
    # hardware_facts takes the part from the target alone: the same space and proposals on
    # every host, and no CUDA initialised where tasks are made (the builder processes).
    facts = hardware_facts(cuda_target("sm_90"), "float16")
    assert facts["num_sms"] == 132 and facts["dram_tbs"] == 3.35
    assert device_facts(cuda_target("sm_90"), detect_gpu=False)["part"] == \
        Fact("H100 SXM", "table by arch")
    # Not the target's GPU (another arch, another model): nothing detected.
    assert "device_name" not in device_facts(cuda_target("sm_80"))
    h200 = device_facts(cuda_target("sm_90", "h200"))
    assert "device_name" not in h200 and h200["num_sms"] == Fact(132, "table: H200")


def test_detected_gpu_not_in_the_table(monkeypatch):
    monkeypatch.setattr(tg, "_visible_gpu_props", lambda: dict(A6000))
    f = device_facts(cuda_target("sm_86"))
    assert f["part"] == Fact(None, "default")
    assert f["num_sms"] == Fact(84, "detected") and f["l2_bytes"] == Fact(6 << 20, "detected")
    # 84 SMs x 128 FMA x 2 x 1.8 GHz
    assert f["peak_f32_tflops"] == Fact(38.7, "derived")


# ---- the host CPU ----


def test_cpu_facts_from_sysfs(fake_host):
    f = device_facts(parse_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 4}))
    assert f["model_name"] == Fact("Test CPU 9000", "detected")
    assert f["clock_ghz"] == Fact(3.5005, "detected")  # the highest "cpu MHz"
    assert f["l1d_bytes"] == Fact(48 * 1024, "detected")  # the data cache, not instructions
    assert f["l2_bytes"] == Fact(2 << 20, "detected")
    assert f["l3_bytes"] == Fact(96 << 20, "detected")
    assert f["cores"] == Fact(4, "target")
    assert f["vector_bits"] == Fact(512, "table: znver4")
    assert f["vector_registers"] == Fact(32, "table: znver4")
    assert f["fma_units"] == Fact(1, "table: znver4")  # 512-bit ops on two 256-bit pipes
    assert f["peak_f32_gflops_per_core"] == Fact(112.0, "derived")  # 1 x 16 x 2 x 3.5005
    assert f["peak_f32_gflops"] == Fact(448.1, "derived")
    assert f["dram_gbs"] == Fact(10.0, "default")
    facts = hardware_facts(parse_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 4}))
    assert {k: facts[k] for k in ("fma_units", "clock_ghz", "l1d_bytes", "l2_bytes",
                                  "l3_bytes", "dram_gbs")} == \
        {"fma_units": 1, "clock_ghz": 3.5005, "l1d_bytes": 48 * 1024, "l2_bytes": 2 << 20,
         "l3_bytes": 96 << 20, "dram_gbs": 10.0}


def test_cpu_facts_of_another_cpu_say_they_are_this_hosts(fake_host):
    f = device_facts(parse_target({"kind": "llvm", "mcpu": "skylake-avx512",
                                   "num-cores": 16}))
    assert f["l2_bytes"] == Fact(2 << 20, "detected on this host (znver4)")
    assert f["fma_units"] == Fact(2, "table: skylake-avx512")  # two 512-bit FMA units
    assert f["peak_f32_gflops"].value == pytest.approx(2 * 16 * 2 * 3.5005 * 16, abs=0.1)


@pytest.mark.parametrize("mcpu, bits, units", [
    ("haswell", 256, 2), ("znver3", 256, 2), ("znver1", 256, 1), ("znver5", 512, 2),
    ("icelake-client", 512, 1), ("icelake-server", 512, 2), ("sapphirerapids", 512, 2)])
def test_fma_units(mcpu, bits, units):
    f = device_facts({"kind": "llvm", "mcpu": mcpu})
    assert f["vector_bits"].value == bits
    assert f["fma_units"] == Fact(units, f"table: {mcpu}")


def test_cpu_facts_without_sysfs(fake_host, monkeypatch):
    monkeypatch.setattr(tg, "_SYS_CPU", str(fake_host / "nothing"))
    monkeypatch.setattr(tg, "_PROC_CPUINFO", str(fake_host / "nothing"))
    tg.host_cpu_facts.cache_clear()
    f = device_facts({"kind": "llvm"})
    assert f["clock_ghz"] == Fact(3.0, "default")
    assert f["l1d_bytes"] == Fact(32 * 1024, "default")
    assert f["l2_bytes"] == Fact(512 * 1024, "default")
    assert f["fma_units"] == Fact(2, "default") and f["vector_bits"] == Fact(128, "default")


# ---- hardware_facts: the older keys keep their values ----

CPU_KEYS = ["kind", "vector_bits", "vector_lanes", "vector_registers", "dtype_bytes",
            "num_cores"]
CUDA_KEYS = ["kind", "sm", "dtype_bytes", "warp_size", "max_threads_per_block",
             "max_shared_memory_per_block", "max_shared_memory_optin", "registers_per_block",
             "registers_per_thread", "num_sms"]


@pytest.mark.parametrize("spec, dtype, expected", [
    ({"kind": "llvm", "mcpu": "znver3", "num-cores": 8}, "float32",
     {"kind": "llvm", "vector_bits": 256, "vector_lanes": 8, "vector_registers": 16,
      "dtype_bytes": 4, "num_cores": 8}),
    ({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 16}, "float32",
     {"kind": "llvm", "vector_bits": 512, "vector_lanes": 16, "vector_registers": 32,
      "dtype_bytes": 4, "num_cores": 16}),
    ({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, "float64",
     {"kind": "llvm", "vector_bits": 512, "vector_lanes": 8, "vector_registers": 32,
      "dtype_bytes": 8, "num_cores": 2}),
    ({"kind": "llvm", "mcpu": "x86-64", "mattr": ["+avx512f"], "num-cores": 3}, "float32",
     {"kind": "llvm", "vector_bits": 512, "vector_lanes": 16, "vector_registers": 32,
      "dtype_bytes": 4, "num_cores": 3}),
])
def test_cpu_hardware_facts_keep_their_values(spec, dtype, expected, fake_host):
    facts = hardware_facts(parse_target(spec), dtype)
    assert list(facts) == CPU_KEYS + ["fma_units", "clock_ghz", "l1d_bytes", "l2_bytes",
                                      "l3_bytes", "dram_gbs"]
    assert {k: facts[k] for k in CPU_KEYS} == expected


@pytest.mark.parametrize("arch, dtype, expected, part", [
    ("sm_90", "float16",
     {"kind": "cuda", "sm": 90, "dtype_bytes": 2, "warp_size": 32,
      "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
      "max_shared_memory_optin": 232448, "registers_per_block": 65536,
      "registers_per_thread": 255, "num_sms": 132},
     {"peak_f32_tflops": 67.0, "peak_f16_tensor_tflops": 989.5,
      "peak_int8_tensor_tops": 1979.0, "dram_tbs": 3.35}),
    ("sm_80", "int8",
     {"kind": "cuda", "sm": 80, "dtype_bytes": 1, "warp_size": 32,
      "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
      "max_shared_memory_optin": 166912, "registers_per_block": 65536,
      "registers_per_thread": 255, "num_sms": 108},
     {"peak_f32_tflops": 19.5, "peak_f16_tensor_tflops": 312.0,
      "peak_int8_tensor_tops": 624.0, "dram_tbs": 2.039}),
    ("sm_89", "float32",
     {"kind": "cuda", "sm": 89, "dtype_bytes": 4, "warp_size": 32,
      "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
      "max_shared_memory_optin": 101376, "registers_per_block": 65536,
      "registers_per_thread": 255, "num_sms": 80},
     {"peak_f32_tflops": 19.5, "peak_f16_tensor_tflops": 312.0,
      "peak_int8_tensor_tops": 624.0, "dram_tbs": 2.039}),
])
def test_cuda_hardware_facts_keep_their_values(arch, dtype, expected, part):
    facts = hardware_facts(cuda_target(arch), dtype)
    assert list(facts) == CUDA_KEYS + list(part)
    assert facts == {**expected, **part}


def test_hardware_facts_never_ask_the_gpu(monkeypatch):
    def probe():
        raise AssertionError("hardware_facts asked the visible GPU")
    monkeypatch.setattr(tg, "_visible_gpu_props", probe)
    assert hardware_facts(cuda_target("sm_90", "h200"), "float16")["dram_tbs"] == 4.8
    assert propose._cuda_part({"sm": 90})[3] == 3.35


def test_the_proposer_reads_the_table():
    """propose has no numbers of its own: the space's facts carry the part's, and a space built
    without them gets target.py's for its arch."""
    h200 = hardware_facts(cuda_target("sm_90", "h200"), "float16")
    assert propose._cuda_part(h200) == (67.0, 989.5, 1979.0, 4.8)
    assert propose._cuda_part({"sm": 80}) == (19.5, 312.0, 624.0, 2.039)
    assert propose._cpu_part({"vector_bits": 512})["fma_units"] == 1
    assert propose._cpu_part({"vector_bits": 256})["fma_units"] == 2
    assert not hasattr(propose, "_CUDA_PARTS") and not hasattr(propose, "cpu_facts")


# ---- what --list-space prints ----


def test_facts_lines_cuda():
    lines = facts_lines(cuda_target("sm_90"), "float16")
    assert lines == [
        "hardware facts of cuda sm_90:",
        "  part: H100 SXM [table by arch]; no GPU of it visible",
        "  132 SMs, boost 1980 MHz [table: H100 SXM]",
        "  peak: f32 FMA 67 TFLOP/s, f16/bf16 tensor 989.5, int8 1979 TOP/s, "
        "fp8 1979 TFLOP/s [table: H100 SXM]",
        "  memory: DRAM 3.35 TB/s, L2 50 MiB [table: H100 SXM]",
        "  per SM: 228 KiB shared, 227 KiB opt-in a block, 65536 registers, 2048 threads, "
        "128 f32 FMA/clock [table: sm_90]",
        "  roofline, float16 GEMM: 989.5 TFLOP/s over 3.35 TB/s, ridge at 295 FLOP/byte "
        "[derived]"]
    a100 = "\n".join(facts_lines(cuda_target("sm_80"), "int8"))
    assert "no fp8 [table: A100 SXM 80GB]" in a100
    assert "roofline, int8 GEMM: 624 TFLOP/s over 2.039 TB/s" in a100


def test_facts_lines_detected_gpu(monkeypatch):
    monkeypatch.setattr(tg, "_visible_gpu_props", lambda: dict(H100_PCIE))
    lines = facts_lines(cuda_target("sm_90", "h100"), "float32")
    assert lines[1] == "  part: H100 PCIe [table by device name] on NVIDIA H100 PCIe [detected]"
    assert lines[2] == "  114 SMs, boost 1755 MHz [detected]"
    assert lines[4] == "  memory: DRAM 2 TB/s [table: H100 PCIe], L2 50 MiB [detected]"
    assert lines[-1].startswith("  roofline, float32 GEMM: 51 TFLOP/s over 2 TB/s")


def test_facts_lines_cpu(fake_host):
    lines = facts_lines(parse_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 4}))
    assert lines == [
        "hardware facts of llvm znver4:",
        "  cpu: Test CPU 9000 [detected], 4 cores [target]",
        "  vector: 512-bit, 32 registers, 1 FMA unit a core [table: znver4]",
        "  clock 3.50 GHz, L1d 48 KiB, L2 2 MiB, L3 96 MiB [detected]",
        "  peak f32: 112 GFLOP/s a core, 448.1 in all [derived]; DRAM 10 GB/s [default]",
        "  roofline, float32 GEMM: 448.1 GFLOP/s over 10 GB/s, ridge at 45 FLOP/byte "
        "[derived]"]
    # A dtype without a known peak prints no roofline.
    assert not any("roofline" in line for line in
                   facts_lines(parse_target({"kind": "llvm", "mcpu": "znver4"}), "int8"))
