"""Targets: parsing what users type, matching the targets written in logs, hardware facts.

TVM 0.27 takes targets as dicts (``{"kind": "cuda", "arch": "sm_90"}``); logs of TVM <= 0.19
hold CLI strings (``"llvm -keys=cpu -mcpu=skylake-avx512"``). Both are read here. Matching at
apply time is by kind, and by arch for CUDA when both sides name one (as AutoTVM matched by target
keys): a log tuned on one x86 CPU applies on another, an sm_80 log does not apply to sm_90.
Within what applies, records of the same GPU model (the target's ``model``, e.g. "h200", set from
the visible device) are preferred, as AutoTVM looked up ``-model`` before the target keys.
"""
from __future__ import annotations

import difflib
import functools
import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

from .errors import TvmExtError

_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake",
                "tigerlake", "sapphirerapids", "graniterapids", "emeraldrapids", "rocketlake",
                "znver4", "znver5", "x86-64-v4", "knl", "knm")


def _tvm():
    import tvm  # noqa: PLC0415  (kept lazy: importing tvm costs ~1 s)
    return tvm


def parse_target(spec: Union[str, Dict[str, Any], Any, None]):
    """A ``tvm.target.Target`` from 'llvm', 'cuda', 'cuda:sm_80', a JSON dict string, a dict,
    or a Target. 'llvm' means the host CPU (``Target.from_device``), 'cuda' the visible GPU (or
    sm_90 when there is none)."""
    tvm = _tvm()
    if spec is None:
        return default_target()
    if isinstance(spec, tvm.target.Target):
        return spec
    if isinstance(spec, dict):
        return _make(spec)
    text = str(spec).strip()
    if text.startswith("{"):
        try:
            return _make(json.loads(text))
        except json.JSONDecodeError as err:
            raise TvmExtError(f"target '{text}' is not valid JSON: {err.msg}") from None
    if text == "llvm":
        return host_cpu_target()
    if text == "cuda" or text.startswith("cuda:"):
        if ":" in text:
            return cuda_target(text.split(":", 1)[1])
        arch, model = _visible_gpu() or ("sm_90", None)
        return cuda_target(arch, model)
    if " -" in text:  # legacy CLI string, as in old logs
        return _make(_legacy_to_dict(text))
    raise TvmExtError(f"unknown target '{text}' (use llvm, cuda, cuda:sm_80, or a JSON dict "
                      "such as '{\"kind\": \"cuda\", \"arch\": \"sm_90\"}')")


def _make(d: Dict[str, Any]):
    tvm = _tvm()
    if d.get("kind") == "llvm" and d.get("mcpu"):
        _check_llvm_cpu(str(d["mcpu"]), d.get("mtriple"))
    try:
        return tvm.target.Target(d)
    except Exception as err:  # TVM raises its own error types here
        raise TvmExtError(f"invalid target {json.dumps(d)}: {str(err).splitlines()[-1]}") \
            from None


@functools.lru_cache(maxsize=None)
def _check_llvm_cpu(cpu: str, triple: Optional[str]) -> None:
    """Refuse a CPU that LLVM does not know for the triple (default: the host's). LLVM itself
    would only print some 40 lines at the first build and then compile for a generic CPU. A
    triple whose architecture this LLVM lacks is not checked (asking LLVM about it prints)."""
    from tvm.target import codegen  # noqa: PLC0415
    triple = str(triple or codegen.llvm_get_system_triple())
    if triple.split("-")[0] not in set(codegen.llvm_get_targets()):
        return
    if codegen.llvm_is_valid_cpu(cpu, triple):
        return
    known = [str(c) for c in codegen.llvm_get_cpu_archlist(
        _tvm().target.Target({"kind": "llvm", "mtriple": triple}))]
    close = difflib.get_close_matches(cpu, known, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else \
        f"LLVM knows {len(known)} CPUs for it; this host is {codegen.llvm_get_system_cpu()}"
    raise TvmExtError(f"unknown LLVM CPU -mcpu={cpu} for {triple} ({hint})")


@functools.lru_cache(maxsize=None)
def host_cores() -> int:
    """The physical cores this process may run on: its CPU affinity, with the hyper-threads of
    one core counted once (their second thread adds little to a GEMM that fills the FMA
    ports)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return max(1, (os.cpu_count() or 2) // 2)
    cores = set()
    for cpu in cpus:
        base = f"{_SYS_CPU}/cpu{cpu}/topology"
        try:
            with open(f"{base}/physical_package_id") as f:
                package = f.read().strip()
            with open(f"{base}/core_id") as f:
                cores.add((package, f.read().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


def cpu_threads() -> int:
    """The threads tvm_ext's CPU kernels run on: ``TVM_NUM_THREADS`` where the user set it,
    else ``host_cores()`` (see ``codegen.use_host_cores``)."""
    try:
        return max(1, int(os.environ.get("TVM_NUM_THREADS", "")))
    except ValueError:
        return host_cores()


def host_cpu_target():
    tvm = _tvm()
    t = tvm.target.Target.from_device(tvm.cpu())
    d = dict(t.export())
    # The threads the kernels run on: part of what a record's time was measured with.
    d["num-cores"] = cpu_threads()
    return _make({k: v for k, v in d.items() if k in ("kind", "mcpu", "mtriple", "mattr",
                                                       "num-cores", "keys")})


def cuda_target(arch: str = "sm_90", model: Optional[str] = None):
    """A CUDA target with the attributes MetaSchedule / dlight / our constraints read; ``model``
    (e.g. "h100") names the GPU for log look-up and changes no code."""
    d = {"kind": "cuda", "arch": arch, "max_threads_per_block": 1024,
         "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
         "registers_per_block": 65536}
    if model:
        d["model"] = model
    return _make(d)


def gpu_model(device_name: str) -> Optional[str]:
    """"NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA A100-SXM4-80GB" -> "a100",
    "NVIDIA GeForce RTX 4090" -> "4090": the first word of the name holding a digit."""
    for word in re.split(r"[\s\-_]+", device_name):
        if any(c.isdigit() for c in word):
            return word.lower()
    return None


@functools.lru_cache(maxsize=None)
def _visible_gpu():
    """(arch, model) of CUDA device 0, or None."""
    if os.environ.get("TVM_EXT_NO_GPU"):
        return None
    try:
        tvm = _tvm()
        dev = tvm.cuda(0)
        if dev.exist:
            return "sm_" + dev.compute_version.replace(".", ""), gpu_model(dev.device_name)
    except Exception:  # no CUDA runtime in this TVM build / no driver
        return None
    return None


def gpu_visible() -> bool:
    return _visible_gpu() is not None


def device_memory(target) -> Optional[int]:
    """Bytes of memory of the device that runs ``target`` on this host: the host's RAM for
    llvm, CUDA device 0's global memory when a GPU is visible; None where not known."""
    if target_info(target)["kind"] == "cuda":
        return _visible_gpu_memory()
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows) or no such name
        return None


@functools.lru_cache(maxsize=None)
def _visible_gpu_memory() -> Optional[int]:
    if not gpu_visible():
        return None
    try:
        memory = _tvm().cuda(0).total_global_memory  # None where the runtime does not say
    except Exception:  # noqa: BLE001  (a runtime without the attribute: the check is skipped)
        return None
    return int(memory) if memory else None


def default_target():
    """CUDA (with the GPU's model) when a GPU is visible, else the host CPU."""
    found = _visible_gpu()
    return cuda_target(*found) if found else host_cpu_target()


def _legacy_to_dict(text: str) -> Dict[str, Any]:
    toks = shlex.split(text)
    d: Dict[str, Any] = {"kind": toks[0]}
    for tok in toks[1:]:
        if not tok.startswith("-"):
            continue
        k, _, v = tok.lstrip("-").partition("=")
        if k == "keys":
            d["keys"] = v.split(",")
        elif k in ("mcpu", "arch", "mtriple", "model", "mattr"):
            d[k] = v.split(",") if k == "mattr" else v
    return d


def target_info(target: Union[str, Dict[str, Any], Any]) -> Dict[str, Any]:
    """{kind, arch, mcpu, keys} from a Target, a dict, JSON text or a legacy CLI string."""
    d = _target_dict(target)
    kind = str(d.get("kind", ""))
    cores = d.get("num-cores")
    return {"kind": kind, "arch": d.get("arch"), "mcpu": d.get("mcpu"),
            "model": d.get("model") or None, "keys": list(d.get("keys", [])),
            "num_cores": int(cores) if isinstance(cores, (int, str)) and str(cores).isdigit()
            else None}


def target_str(target) -> str:
    """The target as written into records (TVM 0.27's JSON form)."""
    return target if isinstance(target, str) else str(target)  # str(Target) is its JSON


def target_matches(record_target, target) -> bool:
    """Does a record made for ``record_target`` apply to ``target``?"""
    a, b = target_info(record_target), target_info(target)
    if a["kind"] != b["kind"]:
        return False
    if a["kind"] == "cuda" and a["arch"] and b["arch"]:
        return _base_arch(a["arch"]) == _base_arch(b["arch"])
    return True


def _base_arch(arch: str) -> str:
    return str(arch).rstrip("a")  # sm_90a and sm_90 run the same non-wgmma code


def target_model(target) -> Optional[str]:
    """The GPU model a target (or a record's target) names, if any."""
    model = target_info(target)["model"]
    return None if model in (None, "unknown") else str(model)


def target_machine(target) -> Optional[str]:
    """The machine a record's time was measured on, as far as its target says: the GPU model
    for CUDA; for llvm the CPU (``mcpu``) and the threads its kernels ran on (``num-cores``: a
    time measured on 1 thread does not rank kernels for 2); None where the target does not
    say."""
    info = target_info(target)
    if info["kind"] == "cuda":
        return target_model(target)
    if not info["mcpu"]:
        return None
    return info["mcpu"] + (f" x{info['num_cores']}" if info["num_cores"] else "")


def describe(target) -> str:
    info = target_info(target)
    extra = info["arch"] or info["mcpu"]
    text = f"{info['kind']} {extra}" if extra else info["kind"]
    model = target_model(target)
    return f"{text} ({model})" if model else text


# ---- hardware facts: detected where possible, else a table of known parts ----
#
# ``device_facts(target)`` says what the hardware a target names can do, each number with its
# source; ``hardware_facts(target, dtype)`` is what spaces, constraints, fallbacks and the
# proposer read (its first keys are older than the table and keep their values: spaces and
# shipped records depend on them); ``facts_lines`` prints them for ``tune --list-space``.


class Fact(NamedTuple):
    """A number about the hardware and where it came from: "detected" (read from the visible
    device or this host), "table: H100 SXM" (the part table below), "table: sm_90" (the limits
    of the compute capability), "table: znver4" (the CPU tables), "target" (the target's own
    attributes), "derived" (computed from other facts) or "default" (nothing better known)."""
    value: Any
    source: str


@dataclass(frozen=True)
class GpuPart:
    """One GPU's datasheet numbers. Tensor-core peaks are dense (the datasheets' figures marked
    "with sparsity" are twice these) and accumulate in f32, as our GEMMs do; bf16 runs at the
    f16 rate on every part here. ``f32_tflops`` counts an FMA on the CUDA cores as 2 FLOP."""
    name: str
    sm: int
    models: Tuple[str, ...]   # what gpu_model() makes of the part's device names
    device_name: str          # a regular expression over the CUDA device name
    num_sms: int
    boost_clock_mhz: int
    f32_tflops: float
    f16_tensor_tflops: float
    int8_tensor_tops: float
    fp8_tensor_tflops: Optional[float]  # None: the part has no fp8 tensor cores
    dram_tbs: float
    l2_bytes: int


_MB = 1 << 20

GPU_PARTS: Tuple[GpuPart, ...] = (
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP32 67 TFLOPS; FP16/BF16 tensor
    # 1,979, FP8 3,958, INT8 3,958 TOPS, all "with sparsity"; 3.35 TB/s. SMs and L2: the
    # H100 Tensor Core GPU Architecture whitepaper (132 SMs, 50 MB). Boost 1980 MHz, the
    # driver's max SM clock: 132 SMs x 128 FMA x 2 x 1.98 GHz = 66.9 TFLOPS.
    GpuPart("H100 SXM", 90, ("h100",), r"H100(?!.*(PCIe|NVL))", 132, 1980,
            67.0, 1979 / 2, 3958 / 2, 3958 / 2, 3.35, 50 * _MB),
    # The same datasheet, H100 PCIe column: FP32 51; FP16 1,513*, FP8 3,026*, INT8 3,026*;
    # 2 TB/s. 114 SMs, boost 1755 MHz (114 x 128 x 2 x 1.755 GHz = 51.2), 50 MB L2.
    GpuPart("H100 PCIe", 90, (), r"H100.*PCIe", 114, 1755,
            51.0, 1513 / 2, 3026 / 2, 3026 / 2, 2.0, 50 * _MB),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: FP32 67; FP16 1,979*, FP8
    # 3,958*, INT8 3,958*; 4.8 TB/s (141 GB HBM3e). The H100 SXM's die, SMs and clock; its L2
    # is not on the datasheet: an H200 of the project's GPU machine reported 132 SMs, 1980 MHz
    # and 60 MiB of L2 through TVM's device API (2026-11-23).
    GpuPart("H200", 90, ("h200",), r"H200", 132, 1980,
            67.0, 1979 / 2, 3958 / 2, 3958 / 2, 4.8, 60 * _MB),
    # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: FP32 19.5; FP16/BF16 tensor
    # 312 (624*), INT8 624 (1,248*); 2,039 GB/s; no fp8. 108 SMs, boost 1410 MHz, 40 MB L2:
    # the A100 Tensor Core GPU Architecture whitepaper (108 x 64 x 2 x 1.41 GHz = 19.5).
    GpuPart("A100 SXM 80GB", 80, ("a100",), r"A100(?!.*40GB)", 108, 1410,
            19.5, 312.0, 624.0, None, 2.039, 40 * _MB),
    # The same datasheet, A100 40GB SXM: 1,555 GB/s; otherwise the 80GB part.
    GpuPart("A100 SXM 40GB", 80, (), r"A100.*40GB", 108, 1410,
            19.5, 312.0, 624.0, None, 1.555, 40 * _MB),
    # NVIDIA L40S datasheet: FP32 91.6; FP16/BF16 tensor 362.05 (733*), FP8 733 (1,466*),
    # INT8 733 (1,466*); 864 GB/s GDDR6; 568 tensor cores = 142 SMs; boost 2520 MHz
    # (142 x 128 x 2 x 2.52 GHz = 91.6). L2 is not on the datasheet: the AD102's 96 MB (Ada
    # whitepaper; 96 MiB measured on the L40, arXiv 2606.22588). A visible device says its own.
    GpuPart("L40S", 89, ("l40s",), r"L40S", 142, 2520,
            91.6, 362.05, 733.0, 733.0, 0.864, 96 * _MB),
    # NVIDIA Ada GPU Architecture whitepaper, appendix table of the GeForce RTX 4090: 128 SMs,
    # boost 2520 MHz, FP32 82.6; dense tensor FP16 with FP32 accumulate 165.2 (GeForce runs it
    # at half the FP16-accumulate rate), FP8 with FP32 accumulate 330.3, INT8 660.6; 1008 GB/s;
    # 72 MB L2.
    GpuPart("RTX 4090", 89, ("4090",), r"4090", 128, 2520,
            82.6, 165.2, 660.6, 330.3, 1.008, 72 * _MB),
)

# The part an arch names when nothing else does: tvm_ext's targets were measured on these.
# Other archs (sm_86, sm_89: many parts with little in common) get defaults.
_ARCH_PART = {90: "H100 SXM", 80: "A100 SXM 80GB"}
# Where no part is known, the proposer's long-standing stand-in: the A100 SXM 80GB's numbers,
# with the SM count hardware_facts has always guessed.
_DEFAULT_PART = "A100 SXM 80GB"
_DEFAULT_SMS = 80

# The limits of each compute capability: CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability" (shared memory per SM and the most one block may opt
# in to, KB; 32-bit registers per SM; resident threads per SM) and "Arithmetic Instructions"
# (32-bit floating-point multiply-adds per clock per SM). An arch not listed takes the nearest
# one below it.
_SM_LIMITS = {
    70: (96, 96, 65536, 2048, 64),
    75: (64, 64, 65536, 1024, 64),
    80: (164, 163, 65536, 2048, 64),
    86: (100, 99, 65536, 1536, 128),
    87: (164, 163, 65536, 2048, 128),
    89: (100, 99, 65536, 1536, 128),
    90: (228, 227, 65536, 2048, 128),
    100: (228, 227, 65536, 2048, 128),
    120: (128, 99, 65536, 1536, 128),
}

# FMA units per core at the target's vector width (one FMA of vector_bits each a cycle).
# Intel 64 and IA-32 Architectures Optimization Reference Manual: Haswell and the client cores
# after it have two 256-bit FMA units (ports 0 and 1); Xeon Scalable (Skylake-SP and later
# servers; a few low SKUs have one) two 512-bit units (ports 0+1 fused, and port 5); Ice Lake,
# Tiger Lake and Rocket Lake client cores one 512-bit unit (ports 0+1 fused); Knights Landing
# two VPUs. AMD Software Optimization Guides: Zen 1 has two 128-bit FMA pipes (one 256-bit FMA a
# cycle), Zen 2 and 3 two 256-bit, Zen 4 runs a 512-bit op on both of its 256-bit pipes (one
# 512-bit FMA a cycle), Zen 5 two 512-bit pipes (the mobile parts' 256-bit datapath halves it).
# First match by prefix of -mcpu wins.
_FMA_UNITS = (
    (("skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "sapphirerapids",
      "emeraldrapids", "graniterapids", "diamondrapids", "knl", "knm", "znver5"), 2),
    (("znver4", "icelake-client", "tigerlake", "rocketlake", "cannonlake"), 1),
    (("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
      "lunarlake", "pantherlake", "znver2", "znver3"), 2),
    (("znver1",), 1),
)

# Where this host's CPU is described (tests point these at a fake tree).
_SYS_CPU = "/sys/devices/system/cpu"
_PROC_CPUINFO = "/proc/cpuinfo"


def _target_dict(target) -> Dict[str, Any]:
    """A target's attributes: a Target's export, a dict, JSON text or a legacy CLI string."""
    if isinstance(target, dict):
        return target
    if isinstance(target, str):
        t = target.strip()
        if t.startswith("{"):
            try:
                return json.loads(t)
            except json.JSONDecodeError:
                return {"kind": t}
        return _legacy_to_dict(t) if t else {"kind": ""}
    return dict(target.export())


def _sm_of(arch: Optional[str]) -> int:
    return int("".join(c for c in str(arch or "sm_90") if c.isdigit()) or 90)


def gpu_part(*, device_name: Optional[str] = None, model: Optional[str] = None,
             sm: Optional[int] = None) -> Optional[GpuPart]:
    """The part table's row for a CUDA device name ("NVIDIA H100 80GB HBM3"), else a model
    ("h200", as ``gpu_model`` makes it), else an arch (90, 80); None where none fits. A row
    of another arch than ``sm`` is never taken."""
    return _find_part(device_name, model, sm)[0]


def _find_part(device_name, model, sm) -> Tuple[Optional[GpuPart], str]:
    fits = [p for p in GPU_PARTS if sm is None or p.sm == sm]
    if device_name:
        for p in fits:
            if re.search(p.device_name, device_name, re.IGNORECASE):
                return p, "device name"
    if model:
        for p in fits:
            if str(model).lower() in p.models:
                return p, "model"
    name = _ARCH_PART.get(sm) if sm is not None else None
    if name:
        return _part_named(name), "arch"
    return None, ""


def _part_named(name: str) -> GpuPart:
    return next(p for p in GPU_PARTS if p.name == name)


@functools.lru_cache(maxsize=None)
def _visible_gpu_props() -> Optional[Dict[str, Any]]:
    """What TVM's device API says of CUDA device 0 (None where no GPU is visible; a property
    the runtime does not give is None)."""
    found = _visible_gpu()
    if found is None:
        return None
    props: Dict[str, Any] = {"arch": found[0], "model": found[1]}
    dev = _tvm().cuda(0)
    for key, attr in (("name", "device_name"), ("num_sms", "multi_processor_count"),
                      ("clock_khz", "max_clock_rate"), ("l2_bytes", "l2_cache_size_bytes"),
                      ("smem_per_block", "max_shared_memory_per_block"),
                      ("memory_bytes", "total_global_memory")):
        try:
            props[key] = getattr(dev, attr)
        except Exception:  # noqa: BLE001  (a runtime without the attribute: not detected)
            props[key] = None
    return props


def _cuda_facts(d: Mapping[str, Any], detect_gpu: bool) -> Dict[str, Fact]:
    arch = str(d.get("arch") or "sm_90")
    sm = _sm_of(arch)
    model = d.get("model") if d.get("model") not in (None, "", "unknown") else None
    seen = _visible_gpu_props() if detect_gpu else None
    if seen is not None and not (_base_arch(seen["arch"]) == _base_arch(arch)
                                 and (model is None or str(model).lower() == seen["model"])):
        seen = None  # the visible GPU is not the one this target is for
    part, how = _find_part(seen and seen.get("name"), model, sm)
    facts: Dict[str, Fact] = {}
    if part is not None:
        facts["part"] = Fact(part.name, f"table by {how}")
        table = f"table: {part.name}"
    else:
        facts["part"] = Fact(None, "default")
        table = f"default ({_DEFAULT_PART}'s)"
        part = _part_named(_DEFAULT_PART)
    if seen is not None and seen.get("name"):
        facts["device_name"] = Fact(str(seen["name"]), "detected")
    facts["sm"] = Fact(sm, "target")

    def detected(key, fallback: Fact, scale=1) -> Fact:
        value = seen.get(key) if seen is not None else None
        return Fact(int(value) // scale, "detected") if value else fallback

    known = facts["part"].value is not None
    facts["num_sms"] = detected("num_sms", Fact(part.num_sms, table) if known
                                else Fact(_DEFAULT_SMS, "default"))
    facts["boost_clock_mhz"] = detected("clock_khz", Fact(part.boost_clock_mhz, table)
                                        if known else Fact(None, "default"), 1000)
    below = [a for a in _SM_LIMITS if a <= sm]
    limits_arch = max(below) if below else min(_SM_LIMITS)
    smem_sm, smem_optin, regs, threads, fma = _SM_LIMITS[limits_arch]
    limits = f"table: sm_{limits_arch}" if below else "default"
    if known:
        f32 = Fact(part.f32_tflops, table)
    elif facts["num_sms"].source == "detected" and facts["boost_clock_mhz"].value:
        f32 = Fact(round(facts["num_sms"].value * fma * 2
                         * facts["boost_clock_mhz"].value / 1e6, 1), "derived")
    else:
        f32 = Fact(part.f32_tflops, table)
    facts["peak_f32_tflops"] = f32
    facts["peak_f16_tensor_tflops"] = Fact(part.f16_tensor_tflops, table)
    facts["peak_bf16_tensor_tflops"] = Fact(part.f16_tensor_tflops, table)
    facts["peak_int8_tensor_tops"] = Fact(part.int8_tensor_tops, table)
    facts["peak_fp8_tensor_tflops"] = Fact(part.fp8_tensor_tflops, table)
    facts["dram_tbs"] = Fact(part.dram_tbs, table)
    facts["l2_bytes"] = detected("l2_bytes", Fact(part.l2_bytes, table) if known
                                 else Fact(None, "default"))
    facts["memory_bytes"] = detected("memory_bytes", Fact(None, "default"))
    facts["shared_memory_per_sm"] = Fact(smem_sm * 1024, limits)
    facts["shared_memory_per_block_optin"] = Fact(smem_optin * 1024, limits)
    facts["shared_memory_per_block"] = detected(
        "smem_per_block", Fact(int(d.get("max_shared_memory_per_block", 49152)), "target"))
    facts["registers_per_sm"] = Fact(regs, limits)
    facts["max_threads_per_sm"] = Fact(threads, limits)
    facts["f32_fma_per_clock_per_sm"] = Fact(fma, limits)
    return facts


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def host_cpu_facts() -> Dict[str, Fact]:
    """This host's CPU: its name and clock (the highest "cpu MHz" of /proc/cpuinfo), and the
    sizes of its data caches (sysfs ``cpu0/cache/index*/``: a level's unified or data cache);
    common values ("default") where they cannot be read."""
    facts = {"model_name": Fact(None, "default"), "clock_ghz": Fact(3.0, "default"),
             "l1d_bytes": Fact(32 * 1024, "default"), "l2_bytes": Fact(512 * 1024, "default"),
             "l3_bytes": Fact(16 << 20, "default")}
    text = _read_text(_PROC_CPUINFO) or ""
    try:
        mhz = [float(line.split(":")[1]) for line in text.splitlines()
               if line.startswith("cpu MHz")]
    except (IndexError, ValueError):
        mhz = []
    if mhz:
        facts["clock_ghz"] = Fact(max(mhz) / 1000, "detected")
    names = [line.split(":", 1)[1].strip() for line in text.splitlines()
             if line.startswith("model name") and ":" in line]
    if names:
        facts["model_name"] = Fact(names[0], "detected")
    base = f"{_SYS_CPU}/cpu0/cache"
    for index in range(8):
        level, kind, size = (_read_text(f"{base}/index{index}/{name}")
                             for name in ("level", "type", "size"))
        if level is None or kind is None or size is None:
            continue
        level, kind, size = level.strip(), kind.strip(), size.strip()
        if level in ("1", "2", "3") and kind != "Instruction" and size[:-1].isdigit():
            scale = {"K": 1024, "M": 1 << 20}.get(size[-1], 1)
            key = "l1d_bytes" if level == "1" else f"l{level}_bytes"
            facts[key] = Fact(int(size[:-1]) * scale, "detected")
    return facts


@functools.lru_cache(maxsize=None)
def _host_cpu_name() -> Optional[str]:
    try:
        from tvm.target import codegen  # noqa: PLC0415
        return str(codegen.llvm_get_system_cpu())
    except Exception:  # noqa: BLE001  (an LLVM-less TVM: the host is not named)
        return None


def _cpu_vector(mcpu: str, mattr) -> Tuple[int, int, str]:
    """(vector bits, vector registers, source) of an x86 target: AVX-512 for the CPUs that have
    it or ``+avx512f``, AVX2 for any other named CPU or ``+avx2``, else SSE."""
    avx512 = mcpu.startswith(_AVX512_CPUS) or "+avx512f" in mattr
    width = 512 if avx512 else 256 if (mcpu or "+avx2" in mattr) else 128
    if mcpu.startswith(_AVX512_CPUS) or any(mcpu.startswith(n) for n, _ in _FMA_UNITS):
        source = f"table: {mcpu}"
    elif "+avx512f" in mattr or "+avx2" in mattr:
        source = "target"
    else:
        source = "default"
    return width, 32 if avx512 else 16, source


def _cpu_fma_units(mcpu: str, vector_bits: int) -> Fact:
    for names, units in _FMA_UNITS:
        if mcpu.startswith(names):
            return Fact(units, f"table: {mcpu}")
    # Unknown: two FMA units up to 256 bits (every x86 core with FMA since 2013 but Zen 1),
    # one 512-bit FMA a cycle (the cautious case of the AVX-512 parts).
    return Fact(1 if vector_bits >= 512 else 2, "default")


def _cpu_facts(d: Mapping[str, Any]) -> Dict[str, Fact]:
    mcpu = str(d.get("mcpu") or "")
    mattr = [str(x) for x in d.get("mattr", [])]
    bits, regs, vector_source = _cpu_vector(mcpu, mattr)
    host_name = _host_cpu_name()
    on_host = not mcpu or mcpu == host_name
    facts: Dict[str, Fact] = {"cpu": Fact(mcpu or None, "target" if mcpu else "default")}
    for key, fact in host_cpu_facts().items():
        if fact.source == "detected" and not on_host:
            fact = Fact(fact.value, f"detected on this host ({host_name})")
        facts[key] = fact
    cores = d.get("num-cores")
    facts["cores"] = Fact(int(cores), "target") if str(cores).isdigit() \
        else Fact(host_cores(), "detected")
    facts["vector_bits"] = Fact(bits, vector_source)
    facts["vector_registers"] = Fact(regs, vector_source)
    facts["fma_units"] = _cpu_fma_units(mcpu, bits)
    per_core = facts["fma_units"].value * (bits // 32) * 2 * facts["clock_ghz"].value
    facts["peak_f32_gflops_per_core"] = Fact(round(per_core, 1), "derived")
    facts["peak_f32_gflops"] = Fact(round(per_core * facts["cores"].value, 1), "derived")
    # What a few cores stream from DRAM: a typical server figure, not read.
    facts["dram_gbs"] = Fact(10.0, "default")
    return facts


def device_facts(target, *, detect_gpu: bool = True) -> Dict[str, Fact]:
    """What the hardware a target names can do, each number with its source (see ``Fact``).

    CUDA: the part (by the visible device's name where that GPU is the target's, else the
    target's ``model``, else its arch: sm_90 an H100 SXM, sm_80 an A100 SXM), its SMs, boost
    clock, peak f32 FMA and tensor-core throughput per dtype, DRAM bandwidth and L2, and the
    arch's shared memory, registers and threads per SM. A visible GPU of the target's arch
    (and model) gives its SMs, clock, L2, memory and shared memory per block.
    CPU: cores, vector width and registers, FMA units per core, clock, L1d/L2/L3 (this host's,
    read from /proc and sysfs), peak f32 GFLOP/s per core and in all, DRAM bandwidth.
    ``detect_gpu=False`` leaves the GPU alone: the part is the target's (model, else arch)."""
    d = _target_dict(target)
    if str(d.get("kind", "")) == "cuda":
        return _cuda_facts(d, detect_gpu)
    return _cpu_facts(d)


# The device facts hardware_facts carries beyond its first keys (the proposer reads them).
_MERGED = {"cuda": ("peak_f32_tflops", "peak_f16_tensor_tflops", "peak_int8_tensor_tops",
                    "dram_tbs"),
           "cpu": ("fma_units", "clock_ghz", "l1d_bytes", "l2_bytes", "l3_bytes", "dram_gbs")}


def hardware_facts(target, dtype: str = "float32") -> Dict[str, Any]:
    """Facts that spaces, constraints, fallbacks and the proposer may use (no device needed):
    the first keys from the target (their values are fixed: spaces and records depend on them),
    then numbers of the part from ``device_facts``: for CUDA the table's row for the target's
    model or arch, never the visible GPU's (a space and its proposals depend on the target
    alone, and the builder processes that make tasks never initialise CUDA)."""
    info = target_info(target)
    # (workload.DTYPE_BYTES in bits: target sits beside workload in the layers, not above it)
    bits = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8,
            "uint8": 8, "int32": 32, "float8_e4m3fn": 8, "float8_e5m2": 8}.get(dtype, 32)
    if info["kind"] == "cuda":
        d = dict(target.export()) if not isinstance(target, (str, dict)) else {}
        arch = info["arch"] or "sm_90"
        sm = int("".join(c for c in arch if c.isdigit()) or 90)
        facts = {"kind": "cuda", "sm": sm, "dtype_bytes": bits // 8,
                 "warp_size": int(d.get("thread_warp_size", 32)),
                 "max_threads_per_block": int(d.get("max_threads_per_block", 1024)),
                 "max_shared_memory_per_block": int(d.get("max_shared_memory_per_block",
                                                          49152)),
                 # Opt-in dynamic shared memory is 227 KB on sm_90, 163 KB on sm_80, 99 KB sm_86.
                 "max_shared_memory_optin": {90: 232448, 80: 166912}.get(sm, 101376),
                 "registers_per_block": int(d.get("registers_per_block", 65536)),
                 "registers_per_thread": 255,
                 # SMs of the parts we target: H100/H200 132, A100 108; others: a middle guess.
                 "num_sms": {90: 132, 80: 108}.get(sm, 80)}
        merged = _MERGED["cuda"]
    else:
        mcpu = str(info["mcpu"] or "")
        d = dict(target.export()) if not isinstance(target, (str, dict)) else {}
        mattr = [str(x) for x in d.get("mattr", [])]
        width, regs, _ = _cpu_vector(mcpu, mattr)
        facts = {"kind": info["kind"], "vector_bits": width,
                 "vector_lanes": max(1, width // bits), "vector_registers": regs,
                 "dtype_bytes": bits // 8,
                 "num_cores": int(d.get("num-cores", os.cpu_count() or 1))}
        merged = _MERGED["cpu"]
    part = device_facts(target, detect_gpu=False)
    facts.update((key, part[key].value) for key in merged)
    return facts


def _size(n: Optional[int]) -> str:
    if not n:
        return "?"
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _num(x: Optional[float]) -> str:
    return "?" if x is None else f"{x:.4g}"


def _group(facts: Mapping[str, Fact], items) -> str:
    """'a, b, c [source]' where the facts share a source, else 'a [s1], b [s2]'."""
    parts = [(text(facts[key].value), facts[key].source) for key, text in items
             if key in facts]
    if len({source for _, source in parts}) == 1:
        return ", ".join(t for t, _ in parts) + f" [{parts[0][1]}]"
    return ", ".join(f"{t} [{source}]" for t, source in parts)


def facts_lines(target, dtype: str = "float32") -> List[str]:
    """The hardware facts of ``target`` as a short block of lines with their sources, for
    ``tune --list-space``; the last line is the roofline of a ``dtype`` GEMM."""
    f = device_facts(target)
    head = f"hardware facts of {describe(target)}:"
    if str(_target_dict(target).get("kind", "")) == "cuda":
        part = f["part"]
        name = part.value or f"an unknown sm_{f['sm'].value} part"
        seen = f" on {f['device_name'].value} [detected]" if "device_name" in f else \
            "; no GPU of it visible"
        lines = [head, f"  part: {name} [{part.source}]{seen}",
                 "  " + _group(f, [("num_sms", lambda v: f"{_num(v)} SMs"),
                                   ("boost_clock_mhz", lambda v: f"boost {_num(v)} MHz")]),
                 "  peak: " + _group(f, [
                     ("peak_f32_tflops", lambda v: f"f32 FMA {_num(v)} TFLOP/s"),
                     ("peak_f16_tensor_tflops", lambda v: f"f16/bf16 tensor {_num(v)}"),
                     ("peak_int8_tensor_tops", lambda v: f"int8 {_num(v)} TOP/s"),
                     ("peak_fp8_tensor_tflops",
                      lambda v: "no fp8" if v is None else f"fp8 {_num(v)} TFLOP/s")]),
                 "  memory: " + _group(f, [("dram_tbs", lambda v: f"DRAM {_num(v)} TB/s"),
                                           ("l2_bytes", lambda v: f"L2 {_size(v)}")]),
                 "  per SM: " + _group(f, [
                     ("shared_memory_per_sm", lambda v: f"{_size(v)} shared"),
                     ("shared_memory_per_block_optin", lambda v: f"{_size(v)} opt-in a block"),
                     ("registers_per_sm", lambda v: f"{v} registers"),
                     ("max_threads_per_sm", lambda v: f"{v} threads"),
                     ("f32_fma_per_clock_per_sm", lambda v: f"{v} f32 FMA/clock")])]
        peak_key = {"float16": "peak_f16_tensor_tflops", "bfloat16": "peak_bf16_tensor_tflops",
                    "int8": "peak_int8_tensor_tops", "uint8": "peak_int8_tensor_tops",
                    "float8_e4m3fn": "peak_fp8_tensor_tflops",
                    "float8_e5m2": "peak_fp8_tensor_tflops",
                    "float32": "peak_f32_tflops"}.get(dtype)
        peak = f[peak_key].value if peak_key else None
        roof = (peak, "TFLOP/s", f["dram_tbs"].value, "TB/s")
    else:
        lines = [head,
                 "  cpu: " + _group(f, [("model_name", lambda v: v or "?"),
                                        ("cores", lambda v: f"{v} cores")]),
                 "  vector: " + _group(f, [
                     ("vector_bits", lambda v: f"{v}-bit"),
                     ("vector_registers", lambda v: f"{v} registers"),
                     ("fma_units", lambda v: f"{v} FMA unit{'s' if v != 1 else ''} a core")]),
                 "  " + _group(f, [("clock_ghz", lambda v: f"clock {v:.2f} GHz"),
                                   ("l1d_bytes", lambda v: f"L1d {_size(v)}"),
                                   ("l2_bytes", lambda v: f"L2 {_size(v)}"),
                                   ("l3_bytes", lambda v: f"L3 {_size(v)}")]),
                 "  peak f32: " + _group(f, [
                     ("peak_f32_gflops_per_core", lambda v: f"{_num(v)} GFLOP/s a core"),
                     ("peak_f32_gflops", lambda v: f"{_num(v)} in all")])
                 + "; " + _group(f, [("dram_gbs", lambda v: f"DRAM {_num(v)} GB/s")])]
        scale = {"float32": 1.0, "float64": 0.5}.get(dtype)
        peak = f["peak_f32_gflops"].value * scale if scale else None
        roof = (peak, "GFLOP/s", f["dram_gbs"].value, "GB/s")
    if roof[0]:
        lines.append(f"  roofline, {dtype} GEMM: {_num(roof[0])} {roof[1]} over "
                     f"{_num(roof[2])} {roof[3]}, ridge at {roof[0] / roof[2]:.0f} FLOP/byte "
                     "[derived]")
    return lines
