"""The hardware-aware proposer: ranks the configs of a space without measuring anything.

For each template family a small performance model estimates a config's time from the space's
own facts (the workload's axes M, N, K, B and dtype, the target's hardware facts: vector width
and registers, cores, SMs) and the numbers of the part that ``target.device_facts`` gives them
(clock, FMA units and caches of the CPU; peak throughput and DRAM bandwidth of the GPU):

- **CPU packed GEMM** (``batch_matmul.x86``, ``dense_pack.x86``): per k step the register tile
  (``yi`` rows x ``xi / lanes`` vectors of accumulators) is bound by the FMA units (two
  256-bit on AVX2 cores, one 512-bit on Zen 4, two on Intel servers), the load ports (one
  broadcast of A per row, B's vectors again for every ``tile_inner`` chunk of rows) and the
  FMA latency (each accumulator's chain waits 4 cycles a step: too few accumulators leave the
  units idle); every parallel task packs its B panel (a gather when B is stored [N, K]), so
  row chunks of few rows pack B again and again; the tasks are dealt to the cores in rounds;
  the output is written to DRAM once.
- **CUDA-core GEMM** (``batch_matmul.cuda``, ``dense_large_batch.cuda``): the thread's register
  tile against its shared-memory reads per k, occupancy from threads, registers and shared
  memory, waves of the grid over the SMs, global traffic against the bandwidth.
- **Tensor cores** (wmma, mma, wgmma): the block tile's global traffic against the tensor-core
  peak (mma.sync feeds Hopper at a part of wgmma's rate), warps and pipeline stages against
  latency, padding, waves.
- **GEMV-like** (``dense_small_batch.cuda``): bytes over the DRAM bandwidth, with the vector
  width and the threads per output as efficiency.

A model's absolute time is rough; the order is what counts, and it is measured: the tuners
benchmark (``python -m tvm_ext.bench.proposer``) reports the rank correlation with measured
time. ``propose(space, k)`` scores every valid config of a small space, or the valid configs
drawn in about a second from a large one, best first; ``tuner.TopKTuner`` measures the top K.
"""
from __future__ import annotations

import functools
import math
import os
from typing import Any, Callable, List, Mapping, Optional, Tuple

import numpy as np

from .target import device_facts

# mma.sync and wmma feed Hopper's tensor cores through the Ampere path: our mma kernels ran
# the large f16 GEMMs at 0.33-0.49x of cuBLAS on the H100, wgmma at 0.85-0.98x.
_MMA_ON_HOPPER = 0.45


def _cpu_part(f: Mapping[str, Any]) -> Mapping[str, Any]:
    """The CPU numbers the x86 model reads (clock_ghz, fma_units, l1d_bytes, l2_bytes,
    dram_gbs): the space's facts carry them (``target.hardware_facts``); a space built from
    other facts gets this host's, with one 512-bit or two narrower FMAs a cycle."""
    if "clock_ghz" in f:
        return f
    host = {key: fact.value for key, fact in device_facts({"kind": "llvm"}).items()}
    return {**host, "fma_units": 1 if f.get("vector_bits", 256) >= 512 else 2}


def _cuda_part(f: Mapping[str, Any]) -> Tuple[float, float, float, float]:
    """(f32 FMA TFLOP/s, f16 tensor TFLOP/s, int8 TOP/s, DRAM TB/s) of the target's GPU: the
    space's facts carry them (``target.hardware_facts``); a space built from other facts gets
    its arch's part (sm_90: an H100 SXM)."""
    if "dram_tbs" not in f:
        f = {key: fact.value for key, fact in
             device_facts({"kind": "cuda", "arch": f"sm_{f.get('sm', 90)}"},
                          detect_gpu=False).items()}
    return (f["peak_f32_tflops"], f["peak_f16_tensor_tflops"], f["peak_int8_tensor_tops"],
            f["dram_tbs"])


# ---- the models: plain knob values + the space's facts -> estimated seconds ----


def _x86_gemm(v: Mapping[str, Any], f: Mapping[str, Any]) -> float:
    lanes, regs, nb = f["vector_lanes"], f["vector_registers"], f["dtype_bytes"]
    M, N, K, B = f["M"], f["N"], f["K"], f.get("B", 1)
    cpu = _cpu_part(f)
    yi, xi = v["tile_y"][-1], v["tile_x"][-1]
    ki = v["tile_k"][-1]
    r = v["tile_inner"][-1] if "tile_inner" in v else yi
    vecs = -(-xi // lanes)
    acc = yi * vecs
    # FMAs of the vector width issued a cycle (Zen 4: one 512-bit on two 256-bit pipes; Intel
    # servers and Zen 5: two 512-bit; AVX2 cores: two 256-bit): target.py's table.
    fma_rate = float(cpu["fma_units"])
    loads = yi + (yi // max(r, 1)) * vecs
    step = max(acc / fma_rate, loads / 2.0, 4.0)  # cycles per k step of the tile
    if not v.get("unroll_k", 1):
        step += 1.0
    step += 2.0 / max(ki, 1)  # the ko loop, once per ki steps
    step *= 1 + 0.5 * max(0, acc + vecs + 1 - regs)  # spilled accumulators
    if vecs & (vecs - 1):
        # A row of 3 (5, 6...) vectors is a vector type LLVM legalises by splitting into
        # scalar parts: measured 8-10x slower than 1, 2 or 4 vectors (dense 128x3072x768).
        step *= 8.0
    if yi * K * nb > cpu["l1d_bytes"]:
        step *= 1.15  # the tile's A rows come from L2
    # The parallel tasks, as the schedules make them, and the B columns each one packs.
    if len(v["tile_y"]) == 2:  # batch_matmul.x86: (batch, column panel of xi, yt row chunks)
        rows, cols = M // int(v.get("yt", 1)), xi
    else:  # dense_pack.x86: (column panels of xo * xi, row chunks of yo * yi)
        rows, cols = v["tile_y"][1] * yi, v["tile_x"][1] * xi
    tasks = B * -(-M // rows) * -(-N // cols)
    panel = K * cols * nb
    if panel > cpu["l2_bytes"]:
        step *= 1.3  # the packed panel does not stay in L2
    cores = max(1, int(f.get("num_cores") or os.cpu_count() or 1))
    busy = min(cores, tasks)
    rounds = -(-tasks // cores)
    compute = B * (M / yi) * (N / xi) * K * step * (rounds * busy / tasks) / busy
    gather = 2.0 if f.get("layout", "NT")[1] == "T" else 1.0  # B stored [N, K]: a gather
    pack = tasks * K * cols * gather / busy
    seconds = (compute + pack) / (cpu["clock_ghz"] * 1e9)
    # The output goes to DRAM once (read for ownership, then written), A and B are read once.
    memory = (2.0 * B * M * N + B * (M + N) * K) * nb / (cpu["dram_gbs"] * 1e9)
    return max(seconds, memory) + 0.2 * min(seconds, memory)


def _x86_gemv(v: Mapping[str, Any], f: Mapping[str, Any]) -> float:
    """dense_gemv.x86: each task streams xi rows of the weight; per kv-wide step, one weight
    vector load and M FMAs into M partial sums (kv / lanes vectors each): bound by DRAM when
    the weight is large, else by the FMA chains' latency and the tasks over the cores."""
    lanes, nb = f["vector_lanes"], f["dtype_bytes"]
    M, N, K = f["M"], f["N"], f["K"]
    cpu = _cpu_part(f)
    xi = v["tile_x"][-1]
    _, ku, kv = v["tile_k"]
    vecs = -(-kv // lanes)
    chains = M * vecs  # independent accumulators: each FMA waits 4 cycles on its own chain
    step = max(4.0 / chains * M * vecs, (M + 1) * vecs / 2.0, M * vecs / float(cpu["fma_units"]))
    if kv % lanes:
        step *= 2.0  # a partial vector: masked or scalar tails
    step += 2.0 / max(ku, 1)  # the ko loop, once per ku steps
    cores = max(1, int(f.get("num_cores") or os.cpu_count() or 1))
    tasks = -(-N // xi)
    busy = min(cores, tasks)
    rounds = -(-tasks // cores)
    cycles = N * (K / kv) * step * (rounds * busy / tasks) / busy + 200.0 * rounds
    seconds = cycles / (cpu["clock_ghz"] * 1e9)
    memory = (N * K + M * K + M * N) * nb / (cpu["dram_gbs"] * 1e9)
    return max(seconds, memory) + 0.2 * min(seconds, memory)


def _occupancy(threads: int, regs_per_thread: int, smem: int, f) -> int:
    """Blocks per SM allowed by threads, registers and shared memory (sm_80/sm_90 limits)."""
    by_threads = 2048 // max(threads, 1)
    by_regs = 65536 // max(threads * max(regs_per_thread, 32), 1)
    by_smem = f.get("max_shared_memory_optin", 232448) // smem if smem else 32
    return max(0, min(by_threads, by_regs, by_smem, 32))


def _waves(blocks: int, per_sm: int, f) -> int:
    """Full waves the grid takes (a grid that fills 1.1 waves takes 2)."""
    return max(1, math.ceil(blocks / (max(1, per_sm) * f["num_sms"])))


def _cuda_simt(v, f) -> float:
    M, N, K, B, nb = f["M"], f["N"], f["K"], f.get("B", 1), f["dtype_bytes"]
    _, ty, yi = v["tile_y"]
    _, tx, xi = v["tile_x"]
    ki = v["tile_k"][-1]
    threads, bm, bn = ty * tx, ty * yi, tx * xi
    blocks = B * -(-M // bm) * -(-N // bn)
    regs = yi * xi + 2 * (yi + xi) + 24
    # The space's own model of the kernel's shared memory (padded rows, both buffers), held
    # to the built kernel by tests/codegen/test_resources; a rough one where it has none.
    smem = f.get("smem_bytes") or \
        (bm + bn) * (ki + v.get("offset", 0)) * nb * (2 if v.get("double_buffer") else 1)
    per_sm = _occupancy(threads, regs, smem, f)
    if per_sm == 0:
        return float("inf")
    fp32, _, _, bw = _cuda_part(f)
    # Per k a thread does yi * xi FMAs and reads yi + xi shared values (16 bytes at a time
    # when the tiles are K-major); a shared read issues at a quarter of the FMA rate.
    lds = (yi + xi) / (4 if v.get("kmajor") else 1)
    ilp = (yi * xi) / (yi * xi + 4 * lds)
    latency = min(1.0, per_sm * threads / 32 / 16)  # warps in flight to hide latency
    per_block = 2.0 * bm * bn * K * f["num_sms"] * per_sm / (fp32 * 1e12 * ilp * latency)
    compute = _waves(blocks, per_sm, f) * per_block
    traffic = B * M * N * K * nb * (1.0 / bn + 1.0 / bm) + B * M * N * nb
    return max(compute, traffic / (bw * 1e12)) * (1.0 if v.get("vec", 1) > 1 else 1.2)


def _tensorcore(v, f, *, kind: str) -> float:
    M, N, K, B, nb = f["M"], f["N"], f["K"], f.get("B", 1), f["dtype_bytes"]
    _, f16_peak, i8_peak, bw = _cuda_part(f)
    peak = (i8_peak if nb == 1 else f16_peak) * 1e12
    if kind == "wgmma":
        bm, bn, bk = 64 * v["warpgroups"], v["block_n"], v["block_k"]
        threads, stages = 128 * v["warpgroups"], v["stages"]
        eff = 0.95 if v.get("wgmma_wait", 1) else 0.8
    else:
        frag_k = 32 if nb == 1 and kind == "mma" else 16
        bm = v["block_row_warps"] * v["warp_row_tiles"] * 16
        bn = v["block_col_warps"] * v["warp_col_tiles"] * 16
        bk = v["chunk"] * frag_k
        threads = v["block_row_warps"] * v["block_col_warps"] * 32
        stages = v.get("stages", 1)
        eff = (_MMA_ON_HOPPER if f.get("sm", 80) >= 90 else 0.8) * (0.7 if kind == "wmma" else 1)
        # The fragments a warp holds: each loaded fragment is reused more, up to 8 of them.
        eff *= min(1.0, (v["warp_row_tiles"] * v["warp_col_tiles"]) / 8) ** 0.5
    mp, np_, kp = -(-M // bm) * bm, -(-N // bn) * bn, -(-K // bk) * bk
    blocks = B * (mp // bm) * (np_ // bn)
    per_sm = _occupancy(threads, 128, (bm + bn) * bk * nb * max(stages, 1), f)
    if per_sm == 0:
        return float("inf")
    eff *= min(1.0, (per_sm * threads / 32 / 8) ** 0.5) * min(1.0, (stages + 1) / 4)
    compute = 2.0 * B * mp * np_ * kp / (peak * eff)
    wave = _waves(blocks, per_sm, f) * per_sm * f["num_sms"] / max(blocks, 1)
    traffic = B * M * N * K * nb * (1.0 / bn + 1.0 / bm) + B * M * N * 4
    split = v.get("split_k", 1)
    if split > 1:  # more blocks on a small grid, plus the partial sums written and re-read
        wave = max(1.0, wave / split)
        traffic += 2 * split * M * N * 4
    return max(compute * min(wave, 4.0), traffic / (bw * 1e12))


def _small_batch(v, f) -> float:
    M, N, K, nb = f["M"], f["N"], f["K"], f["dtype_bytes"]
    _, tx, vec = v["tile_k"]
    ty, yi = v["tile_x"][-1], v["tile_y"][-1]
    bw = _cuda_part(f)[3] * 1e12
    blocks = -(-M // yi) * -(-N // ty)
    eff = min(1.0, vec * nb / 16) * min(1.0, tx / 32) * min(1.0, blocks / (2 * f["num_sms"]))
    # A block reads its yi rows of A and ty columns of B: A is read N / ty times over.
    traffic = (M * K * -(-N // ty) + K * N * -(-M // yi)) * nb
    return traffic / (bw * max(eff, 1e-3))


def model_for(template: str) -> Optional[Callable]:
    """The performance model of a template's family, or None."""
    if template in ("batch_matmul.x86", "dense_pack.x86"):
        return _x86_gemm
    if template == "dense_gemv.x86":
        return _x86_gemv
    if template in ("batch_matmul.cuda", "dense_large_batch.cuda"):
        return _cuda_simt
    if template == "dense_small_batch.cuda":
        return _small_batch
    for kind in ("wgmma", "mma", "tensorcore"):
        if template.endswith(f"_{kind}.cuda"):
            return functools.partial(_tensorcore, kind="wmma" if kind == "tensorcore" else kind)
    return None


# ---- ranking ----


def estimate(space, config) -> float:
    """Estimated seconds of one config (inf where the model says it cannot run; 1.0 for a
    template without a model, so that its order is the space's)."""
    model = model_for(space.template)
    if model is None:
        return 1.0
    values = {name: config[name].value for name in space.knobs}
    for name, knob in space.knobs.items():  # splits with the -1 resolved
        if knob.kind == "sp":
            values[name] = config[name].resolved(knob.length)
    facts = space.facts
    if "smem_bytes" in getattr(space, "lets", {}):
        facts = {**facts, "smem_bytes": space.names_of(config).get("smem_bytes")}
    try:
        return float(model(values, facts))
    except (KeyError, ZeroDivisionError, TypeError, ValueError, IndexError):
        return float("inf")


def scored(space, *, max_configs: int = 20000, draws: int = 16000,
           seed: int = 0) -> List[Tuple[float, int]]:
    """(estimated seconds, index) of every valid config of a space of at most ``max_configs``,
    else of the valid configs among ``draws`` seeded random draws (about a second: a validity
    check costs some 60 us); fastest first. The same space and seed give the same list."""
    if len(space) <= max_configs:
        indices = list(space.valid_indices())
    else:
        picks = np.random.default_rng(seed).integers(len(space), size=draws)
        indices = [i for i in dict.fromkeys(int(i) for i in picks) if space.is_valid(i)]
    out = sorted((estimate(space, space.get(i)), i) for i in indices)
    return [(t, i) for t, i in out if math.isfinite(t)]


def propose(space, k: int, *, exclude=(), **options) -> List[int]:
    """The ``k`` best valid indices by the model, none of ``exclude``."""
    skip = set(exclude)
    return [i for _, i in scored(space, **options) if i not in skip][:k]
