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
from typing import Any, Dict, Optional, Union

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
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
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
    if isinstance(target, dict):
        d = target
    elif isinstance(target, str):
        t = target.strip()
        if t.startswith("{"):
            try:
                d = json.loads(t)
            except json.JSONDecodeError:
                d = {"kind": t}
        else:
            d = _legacy_to_dict(t) if t else {"kind": ""}
    else:
        d = dict(target.export())
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


def hardware_facts(target, dtype: str = "float32") -> Dict[str, Any]:
    """Facts that spaces, constraints and fallbacks may use (no device needed)."""
    info = target_info(target)
    bits = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8,
            "uint8": 8, "int32": 32}.get(dtype, 32)
    if info["kind"] == "cuda":
        d = dict(target.export()) if not isinstance(target, (str, dict)) else {}
        arch = info["arch"] or "sm_90"
        sm = int("".join(c for c in arch if c.isdigit()) or 90)
        return {"kind": "cuda", "sm": sm, "dtype_bytes": bits // 8,
                "warp_size": int(d.get("thread_warp_size", 32)),
                "max_threads_per_block": int(d.get("max_threads_per_block", 1024)),
                "max_shared_memory_per_block": int(d.get("max_shared_memory_per_block", 49152)),
                # Opt-in dynamic shared memory is 227 KB on sm_90, 163 KB on sm_80, 99 KB sm_86.
                "max_shared_memory_optin": {90: 232448, 80: 166912}.get(sm, 101376),
                "registers_per_block": int(d.get("registers_per_block", 65536)),
                "registers_per_thread": 255,
                # SMs of the parts we target: H100/H200 132, A100 108; others: a middle guess.
                "num_sms": {90: 132, 80: 108}.get(sm, 80)}
    mcpu = str(info["mcpu"] or "")
    d = dict(target.export()) if not isinstance(target, (str, dict)) else {}
    mattr = [str(x) for x in d.get("mattr", [])]
    avx512 = mcpu.startswith(_AVX512_CPUS) or "+avx512f" in mattr
    width = 512 if avx512 else 256 if (mcpu or "+avx2" in mattr) else 128
    return {"kind": info["kind"], "vector_bits": width, "vector_lanes": max(1, width // bits),
            "vector_registers": 32 if avx512 else 16, "dtype_bytes": bits // 8,
            "num_cores": int(d.get("num-cores", os.cpu_count() or 1))}
