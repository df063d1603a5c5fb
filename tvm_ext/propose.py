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
  the output is written to DRAM once (without reading its lines first under ``nt_store``).
- **GPU GEMMs** (CUDA cores, wmma, mma, wgmma): a grid of blocks on the SMs, each a software
  pipeline over its K tiles (``_grid_time``): the SM's shared units (FMA or tensor pipe as its
  warps can issue to it, shared-memory wavefronts with their bank conflicts) against one block's
  chain of load latency over its prefetch distance, occupancy from threads, registers (spills)
  and shared memory, waves, DRAM traffic as the launch order re-reads A and B (L2), the
  write-back's sectors, split-K's second kernel. Its constants are physical (clocks, bytes a
  clock) and its fit was checked on configs it was not fitted to (docs/BENCHMARKS.md).
- **GEMV-like** (``*_small_batch.cuda``): bytes over the DRAM bandwidth, with the vector
  width and the threads per output as efficiency.

A model's absolute time is rough; the order is what counts, and it is measured: the tuners
benchmark (``python -m tvm_ext.bench.proposer``) reports the rank correlation with measured
time. ``propose(space, k)`` scores every valid config of a small space, or the valid configs
drawn in about a second from a large one, best first, with the template's fallback for the
workload ranked first (a top-k run never ends slower than the untuned build);
``tuner.TopKTuner`` measures the top K.
"""
from __future__ import annotations

import functools
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .ops.common import blocks_by_shared_memory, busiest_sm_blocks
from .ops.cuda_mma_direct import direct_regs, direct_smem_bytes
from .ops.cuda_sgemm import sgemm_smem_bytes
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
    # Register tiles over M and N padded up to them (an axis they do not divide).
    # ... and K up to ki (zeros of A and B read, as the packed panel holds them).
    kp = -(-K // max(ki, 1)) * max(ki, 1)
    compute = B * -(-M // yi) * -(-N // xi) * kp * step * (rounds * busy / tasks) / busy
    gather = 2.0 if f.get("layout", "NT")[1] == "T" else 1.0  # B stored [N, K]: a gather
    pack = tasks * kp * cols * gather / busy
    seconds = (compute + pack) / (cpu["clock_ghz"] * 1e9)
    # The output goes to DRAM once (read for ownership, then written; ``nt_store``: written
    # without the read), A and B are read once.
    c_passes = 1.0 if v.get("nt_store") else 2.0
    memory = (c_passes * B * M * N + B * (M + N) * K) * nb / (cpu["dram_gbs"] * 1e9)
    return max(seconds, memory) + 0.2 * min(seconds, memory)


def _x86_gemv(v: Mapping[str, Any], f: Mapping[str, Any]) -> float:
    """dense_gemv.x86: each task streams xi rows of the weight, ``rows`` side by side; per
    kv-wide step of a weight row, one weight vector load, M FMAs into M partial sums (kv / lanes
    vectors each) and the M vectors of A, loaded once for the rows side by side: bound by DRAM
    when the weight is large, else by the FMA chains' latency and the tasks over the cores. A
    thread that streams one row at a time draws less of DRAM's bandwidth than one with several
    streams in flight (1x4096x4096 on a 2-core Zen 4: 4 rows side by side 1.2x faster than
    one, AVX2 code; docs/BENCHMARKS.md)."""
    lanes, nb = f["vector_lanes"], f["dtype_bytes"]
    M, N, K = f["M"], f["N"], f["K"]
    cpu = _cpu_part(f)
    xi = v["tile_x"][-1]
    _, ku, kv = v["tile_k"]
    rows = int(v.get("rows", 1))
    vecs = -(-kv // lanes)
    chains = M * vecs * rows  # independent accumulators: each FMA waits 4 cycles on its chain
    step = max(4.0 / chains * M * vecs, (1.0 + M / rows) * vecs / 2.0,
               M * vecs / float(cpu["fma_units"]))
    if kv % lanes:
        step *= 2.0  # a partial vector: masked or scalar tails
    step += 2.0 / max(ku, 1)  # the ko loop, once per ku steps
    cores = max(1, int(f.get("num_cores") or os.cpu_count() or 1))
    batch = f.get("B", 1)  # batch_matmul_gemv.x86: every batch's tasks in one loop
    tasks = batch * -(-N // xi)
    busy = min(cores, tasks)
    rounds = -(-tasks // cores)
    cycles = batch * N * (K / kv) * step * (rounds * busy / tasks) / busy + 200.0 * rounds
    seconds = cycles / (cpu["clock_ghz"] * 1e9)
    memory = batch * (N * K + M * K + M * N) * nb / (cpu["dram_gbs"] * 1e9) * \
        (1.0 + 0.2 / rows)
    return max(seconds, memory) + 0.2 * min(seconds, memory)


def _x86_gemv_nn(v: Mapping[str, Any], f: Mapping[str, Any]) -> float:
    """dense_gemv_nn.x86: each task reads ku rows of the weight at a time across its tiles of
    ``columns``; per row and tile, M x vectors FMAs into as many sums (chains of ku FMAs each),
    the sums to and from L1 between blocks of ku rows where a task holds several
    tiles. Bound by the busiest core's tiles or by memory, which streams less well where a
    task reads a short run of each row (the CPU suite's gemv_nn row on a 2-core Zen 5: 384 B of
    each row a task 0.079 ms, 768 B or more 0.048-0.050; docs/BENCHMARKS.md)."""
    lanes, nb = f["vector_lanes"], f["dtype_bytes"]
    M, N, K = f["M"], f["N"], f["K"]
    cpu = _cpu_part(f)
    xv, xc, ku = int(v["columns"]), int(v.get("tiles", 1)), v["tile_k"][-1]
    vecs = -(-xv // lanes)
    cores = max(1, int(f.get("num_cores") or os.cpu_count() or 1))
    batch = f.get("B", 1)  # batch_matmul_gemv_nn.x86: every batch's tasks in one loop
    per_batch = max(1, N // xv)
    tiles = batch * per_batch
    tasks = batch * -(-per_batch // xc)
    busiest = min(tiles, -(-tasks // cores) * xc)
    block = max(4.0 * ku, ku * M * vecs / float(cpu["fma_units"])) + \
        (2.0 * M * vecs if xc > 1 else 0.0)
    cycles = busiest * -(-K // ku) * block + batch * (N % xv) * K * M / lanes * 4.0
    seconds = cycles / (cpu["clock_ghz"] * 1e9)
    run = min(per_batch, xc) * xv * nb  # bytes of each row a task reads in one go
    share = busiest * min(cores, tiles) / tiles  # the busiest core's bytes over an even share
    memory = batch * (N * K + M * K + M * N) * nb / (cpu["dram_gbs"] * 1e9) * \
        (1.0 + 128.0 / run) * share
    return max(seconds, memory) + 0.2 * min(seconds, memory)


# ---- GPU kernels: blocks on the SMs, each a software pipeline over its K tiles ----
#
# Every GEMM template here runs the same way: a grid of blocks, each looping over K tiles that
# it copies global -> shared memory ``dist`` tiles ahead of the one it computes. Three limits
# set a kernel's time, and the models give each a physical number:
# - the SM's shared units (tensor or FMA pipe, shared-memory bandwidth) do the blocks' work,
#   the blocks resident on an SM taking turns;
# - one block's chain of dependent steps: a K tile waits for its load, which was issued
#   ``dist`` tiles earlier, so a block whose tiles are small or whose prefetch is short waits on
#   latency whatever its work (few, long-K blocks: small problems, split-K's reason to exist);
# - DRAM: A and B as often as the blocks running together re-read them (the launch order's
#   L2 reuse), the output as its stores write it (a partial 32-byte sector costs a whole one).
# A kernel launch and its drain cost a few microseconds whatever the config.

#: Cycles from issuing a tile's global loads to its data in shared memory, under load: from
#: L2 where the kernel's operands fit in it (a CUDA graph replaying a kernel finds them there),
#: else from DRAM.
_L2_LATENCY = 400.0
_DRAM_LATENCY = 1000.0
#: Cycles a K step costs a block beyond its work: the barrier and the wait on the copies.
_STEP_CYCLES = 60.0
#: Seconds a launch costs a kernel in a CUDA graph, with its first loads and its drain; a
#: second kernel launched as the first one's dependent (split-K's sum) costs a gap and its
#: own drain: on an H100 (2026-11-25), every split-K config of the 512 x {16,32,64} x 512
#: GEMMs ran 2.0-2.6 us, the unsplit records 1.3-1.7 us (0.3 us here put 19 split-K configs
#: in their top 20, at 0.61-0.84x the records).
_LAUNCH_S = 1.5e-6
_SECOND_KERNEL_S = 1.2e-6
#: Bytes a clock one SM's shared memory serves (32 banks of 4 bytes).
_SMEM_BYTES_PER_CLOCK = 128.0
#: Bytes a clock one SM reads from L2 (in 32-byte sectors).
_L2_BYTES_PER_CLOCK = 64.0
#: Bytes a clock an SM stores to global memory in full 32-byte sectors.
_STORE_BYTES_PER_CLOCK = 64.0
#: Bytes a clock an SM reads from the shared memory of another SM of its cluster (an assumed
#: quarter of its own shared memory's 128: not measured alone).
_DSMEM_BYTES_PER_CLOCK = 32.0
#: Part of the shorter of compute and DRAM time that does not overlap the longer one.
_OVERLAP = 0.2


@functools.lru_cache(maxsize=None)
def _gpu_clock_and_l2(sm: int) -> Tuple[float, int]:
    """(boost clock in Hz, L2 bytes) of the arch's part (the spaces' facts do not carry them)."""
    facts = device_facts({"kind": "cuda", "arch": f"sm_{sm}"}, detect_gpu=False)
    mhz = facts.get("boost_clock_mhz")
    l2 = facts.get("l2_bytes")
    return ((mhz.value if mhz and mhz.value else 1500) * 1e6,
            int(l2.value) if l2 and l2.value else 40 << 20)


def _occupancy(threads: int, regs_per_thread: int, smem: int, f) -> int:
    """Blocks per SM allowed by threads, registers (allocated 8 a thread at a time; a block
    that needs more than the SM's 64K gets what fits and spills, see ``_spill``) and shared
    memory (the SM's 228 KB, 1 KB of it reserved per block) on sm_80 / sm_90."""
    regs = min(-(-max(regs_per_thread, 32) // 8) * 8, 65536 // max(threads, 1) // 8 * 8)
    by_threads = 2048 // max(threads, 1)
    by_regs = 65536 // max(threads * regs, 1)
    return max(0, min(by_threads, by_regs, blocks_by_shared_memory(smem, f), 32))


def _spill(threads: int, regs_per_thread: int) -> float:
    """How much slower a block whose threads need more registers than they can have (255, or
    64K over the block's threads) runs: its accumulators go to local memory."""
    have = min(255, 65536 // max(threads, 1))
    return 1.0 if regs_per_thread <= have else 1.0 + 2.0 * (regs_per_thread - have) / have


def _operand_bytes(f, *, bm: int, bn: int, blocks_at_once: int, raster: int,
                   nbytes: int) -> float:
    """DRAM bytes of A and B: each wave of blocks running together reads the A rows and B
    columns of its tiles once (they meet in L2 while they stream through K together); the
    launch order decides how many distinct ones a wave touches (``raster`` M tiles side by
    side, else whole rows of the grid). At least A and B once; whole when they fit in L2."""
    M, N, K, B = f["M"], f["N"], f["K"], f.get("B", 1)
    unique = B * (M + N) * K * nbytes
    _, l2 = _gpu_clock_and_l2(f.get("sm", 90))
    nbm, nbn = -(-M // bm), -(-N // bn)
    grid = nbm * nbn
    if 2 * unique / B <= l2 or blocks_at_once >= grid:
        return unique
    w = max(1, blocks_at_once)
    if raster > 1:
        rows = raster * -(-w // (raster * nbn)) if w > raster * nbn else min(raster, w)
        cols = min(nbn, -(-w // raster))
    else:
        rows, cols = -(-w // nbn), min(nbn, w)
    per_wave = (min(rows, nbm) * bm + cols * bn) * K * nbytes
    return max(unique, B * grid / w * per_wave)


def _grid_time(f, *, blocks: int, per_sm: int, k_tiles: int, work: float, alone: float,
               dist: int, epilogue: float, dram_bytes: float, kernels: int = 1) -> float:
    """Seconds of a kernel of ``blocks`` blocks (``per_sm`` can share an SM), each ``k_tiles``
    K steps of a pipeline that loads ``dist`` tiles ahead (0: a step waits for its own load).
    ``work``: SM cycles of one block's K step where blocks share the SM (its tensor or FMA pipe
    and shared memory); ``alone``: the same for a block alone on an SM (what its own warps can
    issue); ``epilogue``: cycles of a block's write-back; ``dram_bytes``: what the kernel moves
    to and from DRAM; ``kernels``: launches (split-K's sum is a second kernel)."""
    clock, l2 = _gpu_clock_and_l2(f.get("sm", 90))
    nb = f["dtype_bytes"]
    footprint = f.get("B", 1) * ((f["M"] + f["N"]) * f["K"] * nb + f["M"] * f["N"] * 4)
    latency = _L2_LATENCY if footprint <= l2 / 2 else _DRAM_LATENCY
    n = busiest_sm_blocks(blocks, f)
    p = max(1, min(per_sm, n))
    rounds = -(-n // p)
    step = max(alone, latency / dist) if dist > 0 else latency + alone
    chain = latency + k_tiles * (step + _STEP_CYCLES) + epilogue
    shared = (n / rounds) * (k_tiles * work + epilogue)  # the blocks of a round take turns
    compute = rounds * max(chain, shared) / clock
    memory = dram_bytes / (_cuda_part(f)[3] * 1e12)
    return (max(compute, memory) + _OVERLAP * min(compute, memory) + _LAUNCH_S
            + (kernels - 1) * _SECOND_KERNEL_S)


def _wavefronts(addresses: List[int], width: int) -> int:
    """Shared-memory wavefronts of one warp-wide load: ``addresses`` (in 4-byte words, one per
    thread) each read ``width`` words. A load of 8 (16) bytes is served a half (quarter) warp
    at a time; each part takes as many wavefronts as the most distinct words in one of the 32
    banks (threads reading the same word share it)."""
    group = 32 // width
    total = 0
    for start in range(0, 32, group):
        banks: dict = {}
        for a in addresses[start:start + group]:
            for w in range(width):
                banks.setdefault((a + w) % 32, set()).add(a + w)
        total += max(len(words) for words in banks.values())
    return total


def _simt_reads(v, f, *, bm: int, bn: int, ki: int) -> Tuple[float, float]:
    """(load instructions, wavefronts) of a warp's shared-memory reads per k step of the
    CUDA-core GEMM, from where its 32 threads' register values lie (``ops/cuda_simt.py``): a
    warp is ``tx`` threads along N (threadIdx.x, fastest) by 32 / tx along M; a tile stored
    with its rows along M (N) gives a thread's yi (xi) values side by side, read up to 16
    bytes at a time where the config stores the tiles K-major; rows are padded to a stride of
    32n + offset elements. Threads of one row of the warp read the same A words (a
    broadcast); the B words of neighbouring threads lie xi (interleaved: xi / 2) apart."""
    _, ty, yi = v["tile_y"]
    _, tx, xi = v["tile_x"]
    nb = f["dtype_bytes"]
    layout = f.get("layout", "NT")
    kmajor, offset = v.get("kmajor", 0), v.get("offset", 0)
    loads = waves = 0.0
    for n, along_n, inner, block, along_rows in (
            (yi, False, v.get("interleave_y", 1), bm, layout[0] == "T" or kmajor),
            (xi, True, v.get("interleave_x", 1), bn, layout[1] == "N" or kmajor)):
        sub = n // inner
        width = 1
        if kmajor:
            width = 16 // nb
            while width > 1 and sub % width:
                width //= 2
        row = block if along_rows else ki
        stride = row + (32 + offset - row % 32) % 32 if offset else row
        while width > 1 and stride % width:
            width //= 2
        words = max(1, width * nb // 4)
        addresses = []
        for t in range(32):
            idx = t % tx if along_n else t // tx
            pos = idx * sub  # the first value of the thread's first sub-tile
            addresses.append((pos if along_rows else pos * stride) * nb // 4)
        count = -(-n // width)
        loads += count
        waves += count * _wavefronts(addresses, words)
    return loads, waves


def _cuda_simt(v, f) -> float:
    """batch_matmul.cuda / dense_large_batch.cuda: ty x tx threads, each a yi x xi register
    tile, A and B tiles of depth ki staged in shared memory (see ops/cuda_simt.py).

    Per k a thread issues yi * xi FMAs and its shared loads; the SM issues 4 warp
    instructions and serves one shared-memory wavefront a clock, so small register tiles are
    bound by their loads and strided ones by bank conflicts (``_simt_reads``). A scheduler
    needs about 8 independent FMAs in flight (its warps' register tiles) to hide the
    latency of the loads that feed them. The block copies its tiles with ``vec``-wide loads:
    rows of a K-contiguous operand only ki elements long use part of each 32-byte sector."""
    M, N, K, B, nb = f["M"], f["N"], f["K"], f.get("B", 1), f["dtype_bytes"]
    _, ty, yi = v["tile_y"]
    _, tx, xi = v["tile_x"]
    ki = v["tile_k"][-1]
    threads, bm, bn = ty * tx, ty * yi, tx * xi
    warps = max(1, threads // 32)
    mp, np_, kp = -(-M // bm) * bm, -(-N // bn) * bn, -(-K // ki) * ki
    blocks = B * (mp // bm) * (np_ // bn)
    regs = yi * xi + 2 * (yi + xi) + 24
    # The space's own model of the kernel's shared memory (padded rows, both buffers), held
    # to the built kernel by tests/codegen/test_resources; a rough one where it has none.
    smem = f.get("smem_bytes") or \
        (bm + bn) * (ki + v.get("offset", 0)) * nb * (2 if v.get("double_buffer") else 1)
    per_sm = _occupancy(threads, regs, smem, f)
    if per_sm == 0:
        return float("inf")
    loads, waves = _simt_reads(v, f, bm=bm, bn=bn, ki=ki)
    fmas = yi * xi
    # The copy: one load and one shared store per vec elements and thread; a K-contiguous
    # operand's tile rows are ki elements of global memory (sectors of 32 bytes).
    vec = v.get("vec", 1)
    copy = (bm + bn) * ki / (32 * vec)  # warp instructions of each kind
    layout = f.get("layout", "NT")
    sectors = sum(rows * ki * nb / min(1.0, ki * nb / 32) if contiguous_k else rows * ki * nb
                  for rows, contiguous_k in ((bm, layout[0] == "N"), (bn, layout[1] == "T")))
    fill = max(sectors / _L2_BYTES_PER_CLOCK, (bm + bn) * ki * nb / _SMEM_BYTES_PER_CLOCK)

    def issue(warps_on_sm: int) -> float:
        return min(1.0, max(1, warps_on_sm // 4) * fmas / 8) * min(4, warps_on_sm) / 4

    def cycles(warps_on_sm: int) -> float:
        per_warp = ki * (fmas + loads) + 2 * copy
        return max(warps * per_warp / 4 / issue(warps_on_sm), warps * ki * waves + fill)

    spill = _spill(threads, regs)
    work, alone = cycles(warps * per_sm) * spill, cycles(warps) * spill
    # The write-back: a thread's xi values of a row are xi apart from its neighbour's, each
    # store a scalar (or a vector of an interleaved sub-row).
    inner = xi // v.get("interleave_x", 1)
    width = min(4, inner) if v.get("interleave_x", 1) > 1 else 1
    eff = min(1.0, width / inner) if inner > 1 else 1.0
    ob = _out_bytes(f)
    epilogue = bm * bn * ob / (_STORE_BYTES_PER_CLOCK * max(eff, 0.125))
    at_once = min(blocks, per_sm * f["num_sms"])
    dram = _operand_bytes(f, bm=bm, bn=bn, blocks_at_once=at_once, raster=1, nbytes=nb) \
        + B * M * N * ob
    return _grid_time(f, blocks=blocks, per_sm=per_sm, k_tiles=kp // ki, work=work,
                      alone=alone, dist=1 if v.get("double_buffer") else 0, epilogue=epilogue,
                      dram_bytes=dram)


def _tensor_rate(f, nb: int) -> float:
    """Multiply-adds a clock one SM's tensor cores do at the dtype's peak (wgmma on Hopper)."""
    _, f16_peak, i8_peak, _ = _cuda_part(f)
    clock, _ = _gpu_clock_and_l2(f.get("sm", 90))
    return (i8_peak if nb == 1 else f16_peak) * 1e12 / 2 / (f["num_sms"] * clock)


def _out_bytes(f) -> int:
    return {"float16": 2, "bfloat16": 2, "int8": 1, "float64": 8}.get(
        f.get("out_dtype", "float32"), 4)


def _wgmma(v, f) -> float:
    """dense_wgmma / batch_matmul_wgmma: a block of ``warpgroups`` x 64 rows and block_n
    columns, one m64n{block_n}k16 per 16 of K per warpgroup, operands from a swizzled ring of
    ``stages`` shared buffers filled by cp.async (see ops/cuda_wgmma.py).

    Per K tile the tensor cores and shared memory are the limit: wgmma reads its A (64 x 16)
    and B (block_n x 16) from shared memory for every instruction, and the copies write the
    tiles there, 128 bytes a clock in all: a 128 x 256 tile just keeps the tensor cores fed,
    a 64 x 64 one needs twice the bandwidth (measured on the H200: 8192^3 at 1.0, 1.16, 1.31,
    1.54, 1.61, 1.87x the time of 128 x 256 for 128 x 128, 64 x 256, 64 x 128, 128 x 64,
    64 x 64; the bandwidth model says 1.0, 1.25, 1.25, 1.5, 1.75, 2.0). ``wgmma_wait`` = 0
    drains the tensor pipe every tile; = 1 keeps a batch in flight but loads one tile less
    ahead. The accumulators take block_n / 2 registers a thread: a 256-wide tile leaves room
    for one block an SM."""
    M, N, K, B, nb = f["M"], f["N"], f["K"], f.get("B", 1), f["dtype_bytes"]
    wg, bn, bk, stages = v["warpgroups"], v["block_n"], v["block_k"], v["stages"]
    wait = v.get("wgmma_wait", 1)
    bm, threads = 64 * wg, 128 * wg
    ob = _out_bytes(f)
    blocks = B * -(-M // bm) * -(-N // bn)
    ring = (bm + bn) * bk * nb * stages
    c_tile = bm * (bn + 16 // ob) * ob if v.get("stage_c") else 0
    per_sm = _occupancy(threads, bn // 2 + 40, max(ring, c_tile), f)
    if per_sm == 0:
        return float("inf")
    math_cycles = bm * bn * bk / _tensor_rate(f, nb)
    feed = (bk // 16) * wg * (64 + bn) * 16 * nb + (bm + bn) * bk * nb  # wgmma reads + fills
    work = max(math_cycles, feed / _SMEM_BYTES_PER_CLOCK)
    alone = work + (0.0 if wait else _WGMMA_DRAIN)
    # The write-back: staged, two barriers and 16-byte rows; else the accumulator pairs from
    # registers (4 bytes of an f16 pair: half of each 32-byte sector a warp's store touches).
    c_bytes = bm * bn * ob
    eff = 1.0 if v.get("stage_c") or ob >= 4 else 0.5
    epilogue = c_bytes / (_STORE_BYTES_PER_CLOCK * eff) + (2 * _STEP_CYCLES if v.get("stage_c")
                                                            else 0.0)
    at_once = min(blocks, per_sm * f["num_sms"])
    dram = _operand_bytes(f, bm=bm, bn=bn, blocks_at_once=at_once, raster=v.get("raster", 1),
                          nbytes=nb) + B * M * N * ob / eff
    return _grid_time(f, blocks=blocks, per_sm=per_sm, k_tiles=-(-K // bk), work=work,
                      alone=alone, dist=stages - 1 - wait, epilogue=epilogue, dram_bytes=dram)


def _wgmma_ws(v, f) -> float:
    """dense_wgmma_ws / batch_matmul_wgmma_ws (ops/cuda_wgmma_ws.py), ranked as the cp.async
    wgmma kernel of the same block tile, stages and write-back (from registers, or staged in
    shared memory: ``staged_store``): a proxy. What differs is not modelled (TMA, the producer
    warpgroup, the persistent grid, pingpong's overlap of one consumer's stores with the
    other's MMAs, the TMA store running on under the next tile); on the H100 the two kernels
    of a 128 x 256 tile differed by 7% on 8192^3 and 2-3x where the output dominates (both
    storing from registers). A 2-CTA cluster (B multicast) ranks 1% behind the same config
    without: on the H100 it measured 0.93-0.98x of it on 8192^3 and 0.99-1.05x on the
    attention scores (docs/BENCHMARKS.md), so it breaks ties, not more."""
    tile = {"warpgroups": 1 if v.get("pingpong") else v["consumers"], "block_n": v["block_n"],
            "block_k": v["block_k"], "stages": v["stages"], "wgmma_wait": v["wgmma_wait"],
            "raster": v.get("raster", 1), "stage_c": v.get("staged_store", 0)}
    t = _wgmma(tile, f) * (1.0 + 0.01 * (v.get("cluster", 1) - 1))
    if v.get("stream_k"):
        # the tiles' work spread evenly over the SMs (no partial last wave), plus the kernel
        # that zeroes the flags and one hand-over of partial sums (written, flagged, read)
        # before a shared tile is stored: on the H100, 8192^3 ran 0.6-3% faster and 1024^3 (a
        # tile an SM, every tile shared) 2.3x slower (docs/BENCHMARKS.md)
        bm = 64 * tile["warpgroups"]
        tiles = f.get("B", 1) * (f["M"] // bm) * (f["N"] // v["block_n"])
        waves = tiles / f["num_sms"]
        clock, _ = _gpu_clock_and_l2(f.get("sm", 90))
        hand_over = 2 * _L2_LATENCY / clock + bm * v["block_n"] * 4 * 2 / (
            _STORE_BYTES_PER_CLOCK * clock)
        t = t * waves / busiest_sm_blocks(tiles, f) + _SECOND_KERNEL_S + hand_over * v["stream_k"]
    return t


def _sgemm(v, f) -> float:
    """dense_sgemm / batch_matmul_sgemm (ops/cuda_sgemm.py): bound by the FFMA issue rate.
    A block of block_m x block_n outputs (threads of 8 x thread_n) runs K / block_k steps of
    block_m * block_n * block_k FMAs, its next tile's loads one step ahead in registers. An SM
    holds the blocks its registers allow (per thread about 126 for 8 x 8 tiles with block_k 8,
    150 with 16, 220 for 8 x 16; 128 under min_blocks 2) and its shared memory. The share of
    the FFMA pipe a scheduler keeps busy is what the H100 measured (docs/BENCHMARKS.md,
    ``--sweep sgemm.cuda`` and ncu): 8 x 8 tiles 0.87 at 4 warps a scheduler, 0.91 in the
    serpentine order; 8 x 16 tiles 0.91 at 2; proportionally less under one warp a scheduler
    (one warp's 64 or 128 independent FMAs a k step hide the latencies; 1024^3: 64 x 128
    tiles of 4 warps, one block an SM, ran 1.8x faster than 128 x 128 tiles on half the
    SMs). ``slice_k`` groups of threads each run K / slice_k of the block's tile (a K step is
    one tile of each slice: more warps, as many FMAs a step, fewer steps), and the partial
    tiles go through shared memory once. ``cluster_k`` CTAs a tile (a thread-block cluster)
    each run K / cluster_k: as many more blocks on the grid, each with fewer K steps, and a
    partial tile stored and read back from the cluster's shared memory."""
    M, N, K, B = f["M"], f["N"], f["K"], f.get("B", 1)
    bm, bn, bk, tn = v["block_m"], v["block_n"], v["block_k"], v["thread_n"]
    sk, ck = v.get("slice_k", 1), v.get("cluster_k", 1)
    threads = bm * bn // (8 * tn) * sk
    regs = 128 if v.get("min_blocks", 1) >= 2 else 220 if tn == 16 else 126 if bk == 8 else 150
    smem = f.get("smem_bytes") or sgemm_smem_bytes(bm, bn, bk, sk, ck)  # the space's
    per_sm = max(1, min(65536 // (threads * regs), 233472 // smem, 2048 // threads))
    blocks = B * -(-M // bm) * -(-N // bn) * ck  # cluster_k: a tile's CTAs
    rate = 0.91 if tn == 16 else 0.87 + 0.04 * v.get("serpentine", 0)

    # the warps a scheduler needs to keep its FFMA pipe busy: 2 of 8 x 16 tiles (on the H200,
    # 64 x 64 tiles in 4 slices ran 2.1x slower with 8 x 16 threads, one warp a scheduler, than
    # with 8 x 8, two), 1 of 8 x 8
    full = 2.0 if tn == 16 else 1.0

    def cycles(warps_per_scheduler):  # SM cycles of one block's K step
        return bm * bn * bk * sk / (128.0 * rate * min(1.0, warps_per_scheduler / full))
    on_sm = min(per_sm, busiest_sm_blocks(blocks, f))
    # the SM's pipe, shared by its blocks
    work = cycles(on_sm * threads / 128.0) * _busiest_scheduler(on_sm * threads // 32, full)
    alone = cycles(threads / 128.0) * _busiest_scheduler(threads // 32, full)
    # the write-back, after the slices' partial tiles were stored to and read from shared
    # memory (128 bytes a clock)
    epilogue = bm * bn * 4 / _STORE_BYTES_PER_CLOCK + (sk - 1) * bm * bn * 4 * 2 / 128.0
    if ck > 1:  # the partial tile stored, the cluster's read back (remote: 32 bytes a clock)
        epilogue += bm * bn * 4 / 128.0 + bm * bn * 4 / _DSMEM_BYTES_PER_CLOCK
    # DRAM: the operands as the waves in the launch order read them, C; and the blocks' reads
    # of L2 (A once per column of tiles, B once per row) at 0.6 of their bytes (L2 serves
    # about 1.7x DRAM's bandwidth)
    l2_reads = B * (M * K * -(-N // bn) + K * N * -(-M // bm)) * 4
    dram = (_operand_bytes(f, bm=bm, bn=bn, blocks_at_once=min(blocks, per_sm * f["num_sms"]),
                           raster=v.get("raster", 1), nbytes=4)
            + B * M * N * 4 + 0.6 * l2_reads)
    return _grid_time(f, blocks=blocks, per_sm=per_sm, k_tiles=-(-K // (bk * sk * ck)),
                      work=work, alone=alone, dist=1, epilogue=epilogue, dram_bytes=dram)


def _busiest_scheduler(warps: int, full: float) -> float:
    """How much longer an SM's FMA pipe takes for ``warps`` warps than with them spread evenly
    over its 4 schedulers: warps go to them in turn, block after block, so the busiest holds
    ceil(warps / 4), issuing at min(1, its warps / ``full``) of its rate (H200, the f32 block's
    up projection: 3 blocks of 2 warps an SM, 2 on two schedulers and 1 on the others, took
    77.2 us; 3 of 4 warps, K in 2 slices, 3 on each, 59.0: docs/BENCHMARKS.md)."""
    even, busy = warps / 4.0, -(-warps // 4)
    return (busy / min(1.0, busy / full)) / (even / min(1.0, even / full))


#: Cycles from one mma.sync to the next that accumulates into its registers (Ampere's
#: HMMA.16816 latency, about 32 cycles; the Hopper path is no shorter).
_MMA_LATENCY = 32.0
#: Cycles the tensor pipe drains when a tile's wgmma batch is waited for before the next one.
_WGMMA_DRAIN = 200.0


def _mma(v, f, *, kind: str) -> float:
    """dense_mma / dense_tensorcore (wmma) and their batch_matmul twins: warps of
    warp_row_tiles x warp_col_tiles 16 x 16 fragments, loaded from shared memory by ldmatrix
    (wmma: load_matrix_sync) for every ``frag_k`` of K, the tiles filled by cp.async
    ``stages`` deep (wmma: synchronous copies).

    mma.sync feeds Hopper's tensor cores at a part of wgmma's rate (``_MMA_ON_HOPPER``); a
    warp's independent mma instructions (2 per fragment) and the warps on each of the SM's
    4 schedulers keep them busy; a block of 1 warp uses one scheduler. Shared rows a multiple
    of 128 bytes apart put ldmatrix's 8 rows in the same banks (``offset`` pads them).
    ``split_k`` slices K over more blocks at the price of the partial sums (written and read
    again in f32) and a second kernel. ``slice_k`` gives the block that many groups of warps,
    each computing its own steps of every (``slice_k`` times deeper) shared K tile: the
    dependent mma chain of a warp is that many times shorter, at the price of more warps on
    the schedulers and the partial tiles added through shared memory before the write-back."""
    M, N, K, B, nb = f["M"], f["N"], f["K"], f.get("B", 1), f["dtype_bytes"]
    brw, bcw, wrt, wct = (v["block_row_warps"], v["block_col_warps"], v["warp_row_tiles"],
                          v["warp_col_tiles"])
    frag_k = 32 if nb == 1 and kind == "mma" else 16
    slices = v.get("slice_k", 1)
    # bk: a warp's K per tile; bt: the block's shared K tile (slices x bk).
    bm, bn, bk = brw * wrt * 16, bcw * wct * 16, v["chunk"] * frag_k
    bt = bk * slices
    warps = brw * bcw * slices
    split = v.get("split_k", 1)
    stages = v.get("stages", 1) if kind == "mma" else 1
    offset = v.get("offset", 0)
    ob = _out_bytes(f)
    mp, np_ = -(-M // bm) * bm, -(-N // bn) * bn
    k_slice = -(-K // (bt * split)) * bt
    blocks = B * (mp // bm) * (np_ // bn) * split
    frags = wrt * wct
    regs = 8 * frags + 8 * (wrt + wct) + 32
    a_stride = bt + ((32 + offset - bt % 32) % 32 if offset else 0)
    ab_smem = f.get("ab_smem_bytes") or (bm + bn) * a_stride * nb * max(stages, 1)
    c_smem = f.get("c_smem_bytes") or 0
    per_sm = _occupancy(warps * 32, regs, ab_smem + c_smem, f)
    if per_sm == 0:
        return float("inf")
    spill = _spill(warps * 32, regs)
    rate = _tensor_rate(f, nb) * (_MMA_ON_HOPPER if f.get("sm", 80) >= 90 else 1.0)
    rate *= 0.7 if kind == "wmma" else 1.0
    # ldmatrix reads 8 rows of 16 bytes at once: rows 128 * n bytes apart share their banks.
    row = a_stride * nb
    conflict = 8 // min(8, 128 // math.gcd(int(row), 128))
    feed = ((bk // frag_k) * warps * (wrt + wct) * 512 * conflict + (bm + bn) * bt * nb)
    vec_bytes = v.get("vec", 16 // nb) * nb
    if vec_bytes < 16:  # narrower copies: more instructions and shared-memory wavefronts
        feed += (bm + bn) * bt * nb * (16 / vec_bytes - 1) / 2

    # One mma.sync (m16n8k16, int8 m16n8k32) takes a scheduler mma_cycles at the tensor
    # rate; a warp's 2 per fragment and frag_k are independent, the next frag_k's wait for
    # them (_MMA_LATENCY). The warps on a scheduler interleave their instructions.
    mma_cycles = 16 * 8 * frag_k / (rate / 4)

    def tile_cycles(warps_on_sm: int) -> float:
        """Cycles the SM's mma of one K tile of every resident block take."""
        per_scheduler = -(-warps_on_sm // 4)
        return bk // frag_k * max(_MMA_LATENCY, per_scheduler * 2 * frags * mma_cycles)

    # The tile's bytes come from L2 into the SM at its port's rate.
    fill = (bm + bn) * bt * nb / _L2_BYTES_PER_CLOCK
    smem = feed / _SMEM_BYTES_PER_CLOCK
    work = max(tile_cycles(warps * per_sm) / per_sm, smem, fill) * spill
    alone = max(tile_cycles(warps), smem, fill) * spill
    # The write-back: from registers, an f32 / int32 pair is 8 bytes (4 threads fill a
    # sector); a casting f16 store writes 2 bytes per thread and pair, a quarter of it.
    staged = v.get("stage_c", 0) or mp != M or np_ != N
    c_bytes = bm * bn * (4 if split > 1 else ob)
    eff = 1.0 if staged or split > 1 or ob >= 4 else 0.25
    epilogue = c_bytes / (_STORE_BYTES_PER_CLOCK * eff) + (2 * _STEP_CYCLES if staged else 0.0)
    if slices > 1:  # the partial tiles written to shared memory and read back, a barrier
        eff = 1.0
        epilogue = c_bytes / _STORE_BYTES_PER_CLOCK + 2 * slices * bm * bn * 4 \
            / _SMEM_BYTES_PER_CLOCK + 2 * _STEP_CYCLES
    at_once = min(blocks, per_sm * f["num_sms"])
    dram = _operand_bytes(f, bm=bm, bn=bn, blocks_at_once=max(1, at_once // split),
                          raster=v.get("raster", 1), nbytes=nb) + B * M * N * ob / eff
    if split > 1:
        dram += 2 * split * B * M * N * 4
    return _grid_time(f, blocks=blocks, per_sm=per_sm, k_tiles=k_slice // bt, work=work,
                      alone=alone, dist=stages - 1, epilogue=epilogue, dram_bytes=dram,
                      kernels=2 if split > 1 else 1)


def _mma_direct(v, f) -> float:
    """dense_mma_direct / batch_matmul_mma_direct: each warp loads its operands from global
    memory into mma.sync registers (no shared memory, no barrier but the slices' sum), a batch
    of ``unroll`` 64-byte K groups ahead of the batch it multiplies. A block's chain is the
    first load's latency, then its batches (bounded by the loads of a batch into the SM and
    the dependent MMAs of a group), then the slices' partial tiles through shared memory. A
    block re-reads A for each of its N tiles and B for each M tile: from L2 where they fit."""
    M, N, K, B, nb = f["M"], f["N"], f["K"], f.get("B", 1), f["dtype_bytes"]
    wm, wn, u, slices = v["warp_m"], v["warp_n"], v["unroll"], v["slice_k"]
    bm, bn = 16 * wm * v["block_warps_m"], 8 * wn * v["block_warps_n"]
    tiles = v["block_warps_m"] * v["block_warps_n"]
    warps = tiles * slices
    blocks = B * (M // bm) * (N // bn)
    groups = K * nb // 64 // slices  # a warp's 64-byte K groups
    batches = max(1, groups // u)
    regs = direct_regs(wm, wn, u) + 24  # and the addresses
    smem = direct_smem_bytes(wm, wn, v["block_warps_m"], v["block_warps_n"], slices)
    per_sm = _occupancy(warps * 32, regs, smem, f)
    if per_sm == 0:
        return float("inf")
    rate = _tensor_rate(f, nb) * (_MMA_ON_HOPPER if f.get("sm", 80) >= 90 else 1.0)
    mma_cycles = 16 * 8 * (64 // nb // 2) / (rate / 4)  # one m16n8 mma of a group's half
    per_batch = 2 * u * wm * wn  # a warp's MMAs of a batch

    def batch_cycles(warps_on_sm: int) -> float:
        per_scheduler = -(-warps_on_sm // 4)
        # each accumulator's 2 * u MMAs of a batch depend on one another
        return max(2 * u * _MMA_LATENCY, per_scheduler * per_batch * mma_cycles)

    fill = warps * u * 64 * (16 * wm + 8 * wn) / _L2_BYTES_PER_CLOCK  # a batch's bytes
    work = max(batch_cycles(warps * per_sm) / per_sm, fill)
    alone = max(batch_cycles(warps), fill)
    ob = _out_bytes(f)
    epilogue = bm * bn * ob / _STORE_BYTES_PER_CLOCK
    if slices > 1:
        epilogue += 2 * (slices - 1) * bm * bn * 4 / _SMEM_BYTES_PER_CLOCK + 2 * _STEP_CYCLES
    at_once = min(blocks, per_sm * f["num_sms"])
    dram = _operand_bytes(f, bm=bm, bn=bn, blocks_at_once=max(1, at_once), raster=1,
                          nbytes=nb) + B * M * N * ob
    return _grid_time(f, blocks=blocks, per_sm=per_sm, k_tiles=batches, work=work,
                      alone=alone, dist=1, epilogue=epilogue, dram_bytes=dram)


def _small_batch(v, f) -> float:
    M, N, K, B, nb = f["M"], f["N"], f["K"], f.get("B", 1), f["dtype_bytes"]
    _, tx, vec = v["tile_k"]
    ty, yi = v["tile_x"][-1], v["tile_y"][-1]
    bw = _cuda_part(f)[3] * 1e12
    blocks = B * -(-M // yi) * -(-N // ty)
    if f.get("layout", "NT")[1] == "T":  # B's rows K-contiguous: vec-wide loads along K
        width = min(1.0, vec * nb / 16) * min(1.0, tx / 32)
    else:  # B stored [K, N]: a warp's columns side by side (coalesce_n), else one a sector
        width = min(1.0, ty * nb / 32) if v.get("coalesce_n") else nb / 32
    # blocks of few threads launch slower than they run (decoding's q . K^T, 64 threads: 5.5x)
    eff = width * min(1.0, tx * ty / 256) * min(1.0, blocks / (2 * f["num_sms"]))
    # A block reads its yi rows of A and ty columns of B: A is read N / ty times over.
    traffic = B * (M * K * -(-N // ty) + K * N * -(-M // yi)) * nb
    return traffic / (bw * max(eff, 1e-3))


def model_for(template: str) -> Optional[Callable]:
    """The performance model of a template's family, or None."""
    if template in ("batch_matmul.x86", "dense_pack.x86", "dense_swap.x86"):
        return _x86_gemm
    if template in ("dense_gemv.x86", "dense_gemv_t.x86", "batch_matmul_gemv.x86"):
        return _x86_gemv
    if template in ("dense_gemv_nn.x86", "batch_matmul_gemv_nn.x86"):
        return _x86_gemv_nn
    if template in ("batch_matmul.cuda", "dense_large_batch.cuda"):
        return _cuda_simt
    if template in ("dense_small_batch.cuda", "batch_matmul_small_batch.cuda"):
        return _small_batch
    if template.endswith("_wgmma.cuda"):
        return _wgmma
    if template.endswith("_wgmma_ws.cuda"):
        return _wgmma_ws
    if template.endswith("_mma_direct.cuda"):
        return _mma_direct
    if template.endswith("_sgemm.cuda"):
        return _sgemm
    for kind in ("mma", "tensorcore"):
        if template.endswith(f"_{kind}.cuda"):
            return functools.partial(_mma, kind="wmma" if kind == "tensorcore" else kind)
    return None


# ---- ranking ----

#: Let terms of the spaces that the models read: the shared memory the kernels allocate.
_SHARED_MEMORY_LETS = ("smem_bytes", "ab_smem_bytes", "c_smem_bytes")


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
    lets = [name for name in _SHARED_MEMORY_LETS if name in getattr(space, "lets", {})]
    if lets:  # the space's own model of the kernel's shared memory
        names = space.names_of(config)
        facts = {**facts, **{name: names.get(name) for name in lets}}
    try:
        return float(model(values, facts))
    except (KeyError, ZeroDivisionError, TypeError, ValueError, IndexError):
        return float("inf")


#: Configs of a sampled space that ``climb`` starts from.
CLIMBS = 8


def scored(space, *, max_configs: int = 20000, draws: int = 16000, seed: int = 0,
           climbs: int = CLIMBS) -> List[Tuple[float, int]]:
    """(estimated seconds, index) of every valid config of a space of at most ``max_configs``,
    else of the valid configs among ``draws`` seeded random draws (about a second: a validity
    check costs some 60 us) and of the end points of ``climb``-ing from the best ``climbs``
    of them; fastest first. The same space and seed give the same list."""
    if len(space) <= max_configs:
        seen = {i: estimate(space, space.get(i)) for i in space.valid_indices()}
    else:
        picks = np.random.default_rng(seed).integers(len(space), size=draws)
        seen = {i: estimate(space, space.get(i))
                for i in dict.fromkeys(int(i) for i in picks) if space.is_valid(i)}
        if model_for(space.template) is not None:  # without a model every estimate is 1.0
            climb(space, seen, starts=climbs)
    return [(t, i) for t, i in sorted((t, i) for i, t in seen.items()) if math.isfinite(t)]


def climb(space, seen: Dict[int, float], *, starts: int, max_steps: int = 32) -> None:
    """Hill-climb a sampled space: from each of the ``starts`` best configs of ``seen``
    ({index: estimate}), move to the best valid config that differs in one knob while that
    lowers (estimate, index): a tie moves to the lower index, so no walk cycles and a climb
    ends within ``max_steps``; the end points join ``seen``.

    16000 random draws meet about 3% of the 552960-config mma space of dense 512x16x512 and
    miss its best estimates, among them the shipped record's. Only the end points join: with
    every config met on the way, one optimum's neighbours filled the top 20 (on an H100,
    2026-11-25: dense 1024^3 f32 and 16x4096x4096 f16 at 0.94x and 0.87x of their records;
    0.98x and 1.11x in the session before, which did not climb)."""
    invalid = set()
    met: Dict[int, float] = dict(seen)
    ranked = sorted((t, i) for i, t in seen.items() if math.isfinite(t))
    for _, index in ranked[:starts]:
        for _ in range(max_steps):
            digits, best = space.digits(index), (met[index], index)
            for pos, radix in enumerate(space.radix):
                for d in range(radix):
                    if d == digits[pos]:
                        continue
                    j = space.index_from_digits(digits[:pos] + [d] + digits[pos + 1:])
                    if j in invalid:
                        continue
                    if j not in met:
                        if not space.is_valid(j):
                            invalid.add(j)
                            continue
                        met[j] = estimate(space, space.get(j))
                    best = min(best, (met[j], j))
            if best[1] == index:
                break
            index = best[1]
        seen[index] = met[index]


#: Estimates this close (relative) are one tie: configs the model cannot tell apart.
_TIE = 1e-3
#: Places a tie takes before the next estimates get theirs (a quarter of top-k's K = 20).
PER_TIE = 5


def propose(space, k: int, *, exclude=(), per_tie: int = PER_TIE, **options) -> List[int]:
    """The ``k`` best valid indices, none of ``exclude``: the template's fallback for the
    workload first (where the task that built the space knows it), then the model's ranking.
    So a top-k run never ends slower than the kernel an untuned build gets.

    Configs with the same estimate (knobs the model has no term for) take at most
    ``per_tie`` places before the next estimates get theirs: k
    measurements of one tie explore nothing (dense 257x509x131 on the CPU: the first 20
    estimates were one tie of 64 x 4 row tiles, and 128 x 2 ones, 26th, ran 8% faster);
    the places left when every tie is capped go to the ties' next members, in rank order."""
    skip = set(exclude)
    lead = space.fallback_index() if getattr(space, "fallback_index", None) else None
    first = [lead] if lead is not None and lead not in skip else []
    ranked = [(t, i) for t, i in scored(space, **options) if i not in skip and i not in first]
    cap = max(1, per_tie)
    picked, deferred, tie_start, in_tie = [], [], None, 0
    for t, i in ranked:
        if len(first) + len(picked) >= k:
            break
        if tie_start is None or t > tie_start * (1 + _TIE):
            tie_start, in_tie = t, 0
        if in_tie < cap:
            picked.append(i)
            in_tie += 1
        else:
            deferred.append(i)
    picked += deferred[:max(0, k - len(first) - len(picked))]
    return (first + picked)[:k]
