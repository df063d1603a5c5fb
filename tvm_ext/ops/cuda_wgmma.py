"""Hopper GEMM on wgmma (sm_90): ``dense_wgmma.cuda`` and ``batch_matmul_wgmma.cuda``.

mma.sync, which the ``*_mma.cuda`` schedules tensorize, is the Ampere instruction: on an H100 our
mma kernels stay under half of cuBLAS on large f16 GEMMs. Hopper's tensor cores are fed by
``wgmma.mma_async``, a warpgroup-wide (128 threads) asynchronous MMA that reads both operands
from shared memory through 64-bit matrix descriptors. TVM 0.27 has no schedule primitive or
tensor intrinsic for it, but its TVMScript has the instruction (``T.ptx.wgmma``) and the
descriptor encoder (``T.cuda.wgmma.encode_matrix_descriptor``). So this template writes the
kernel itself in TensorIR, from the knobs, in the structure of CUTLASS's sm90 multistage GEMM
(without warp specialisation or TMA):

- a block computes a ``64 * warpgroups`` x ``block_n`` tile of C. Each warpgroup owns 64 rows
  and issues one ``wgmma.m64n{block_n}k16`` per 16 of K, accumulating in f32 registers
  (``block_n / 2`` per thread);
- A and B tiles, ``block_k`` deep, go global -> shared through a ring of ``stages`` buffers,
  copied by all threads with 16-byte ``cp.async``. The shared layout is wgmma's K-major layout
  with the 128-byte swizzle: rows of 64 f16 (128 bytes) whose 16-byte chunks are permuted by
  XOR with ``row % 8``, 8-row groups 1024 bytes apart (the descriptor's stride offset), and a
  ``block_k`` of 128 stored as two such [rows][64] tiles. A warp copies 4 whole rows (128
  contiguous bytes each), and the XOR spreads a row's chunks over all banks. (The plain,
  unswizzled core-matrix layout measured 2.5-3.5x slower on the H100: L2-bound at 96%.)
  The K step inside a 128-byte row moves the descriptor's start address by 32 bytes, and the
  hardware applies the swizzle to the address, as CUTLASS does. An operand stored with K
  outermost (A of TN / TT, B of NN / TN) is MN-major: its tile is [rows / 64][block_k][64],
  each k-row of 64 M or N elements swizzled the same way, 64-row atoms ``block_k * 128``
  bytes apart (the leading offset) and 8-k-row groups 1024 bytes apart (the stride offset),
  and wgmma reads it with its transpose flag;
- ``wgmma_wait`` is how many wgmma batches stay in flight while the next K tile is waited for
  (0: each tile's MMAs finish before the next tile; 1: one batch overlaps, which costs one
  stage of prefetch distance: tile ``ko + stages - 1 - wgmma_wait`` is loaded at step ``ko``);
- ``raster`` groups the block launch order by that many M tiles (L2 reuse, as in dense_mma);
- the accumulators (the wgmma D fragment: thread ``t`` of a warpgroup holds rows
  ``16 * (t // 32) + (t % 32) // 4`` and ``+ 8``, columns ``8 * j + 2 * (t % 4)`` and ``+ 1``)
  are cast to the output dtype and stored in pairs from registers (``stage_c = 0``), or
  (``stage_c = 1``) through a C tile in shared memory, padded 16 bytes a row, that reuses the
  ring's bytes and is written out in 16-byte coalesced rows.

The ring must start on a 1024-byte boundary (the swizzle is a function of the address): it is
the kernel's only dynamic shared buffer besides the C tile, which TVM places after it or on it.

PTX's wgmma needs the arch-specific target ``sm_90a``. A kernel of this template carries the
task's target, with arch sm_90a, as its own ``target`` attribute, so it builds in a module
for sm_90 too, and CUDA compiles it for sm_90a.

A subgraph task's epilogue (``Workload.epilogue``: bias, residual, activations, scale, cast) is
computed in the write-back, on the value cast to the matmul's output dtype, by the same ops as
``epilogue_compute``'s blocks (``template.epilogue_value``); its inputs are the kernel's
parameters between B and C (``template.epilogue_buffers``, ``with_epilogue_params``).

Scope: the 4 layouts, f16 or bf16 inputs (wgmma's .f16 / .bf16 operands: the same 2-byte
tiles, swizzle and descriptors), an output of the input's dtype or f32, M, N and K multiples
of the block tile (the space's rule; ``check`` asks for multiples of 64); a shape family's
kernel of symbolic extents (``sizes``) is guarded where its tiles overhang M and N, for
families whose every M and N is a multiple of 64 (``family_check``). Other workloads (int8,
unaligned shapes, other GPUs) keep the mma.sync template.
"""
from __future__ import annotations

from typing import Optional

from ..template import KernelTemplate, epilogue_buffers, with_epilogue_params
from .common import blocks_by_shared_memory, fallback_raster, grid_blocks, kernel_attrs

#: The 128-byte swizzle: one shared row holds 64 f16 of K; 8 rows make a 1024-byte atom.
ROW_K = 64


def descriptor_offsets(kmajor, block_k):
    """(leading, stride) byte offsets of a 128-byte-swizzled operand's descriptor, in 16-byte
    units. K-major: 8-row groups 1024 bytes apart; the leading offset is unused (1). MN-major:
    64-row atoms ``block_k * 128`` bytes apart (leading), 8-k-row groups 1024 bytes (stride)."""
    return (1, 1024 // 16) if kmajor else (block_k * 128 // 16, 1024 // 16)


def check_wgmma(wl, facts) -> Optional[str]:
    if facts.get("sm") != 90:
        return f"wgmma is an sm_90 instruction (target sm_{facts.get('sm')})"
    if wl.M % 64 or wl.N % 64 or wl.K % ROW_K:
        return f"M, N and K must be multiples of 64 (got {wl.M}x{wl.N}x{wl.K})"
    return None


def ring_desc_offset(slot, R, r0, kk, kmajor, block_k):
    """Descriptor start of K step kk (16 deep) of rows r0.. (a multiple of 64) of ring slot
    ``slot`` of an operand tile of R rows, in 16-byte units from the operand's slot 0. K-major:
    the [rows][64] tile holding the step, then 32 bytes per step inside its 128-byte rows.
    MN-major: the [block_k][64] tile of rows r0.., then 16 k-rows (2048 bytes) per step."""
    if kmajor:
        return (slot * R * block_k + (kk * 16 // ROW_K * R + r0) * ROW_K) // 8 + kk % 4 * 2
    return (slot * R * block_k + r0 * block_k) // 8 + kk * 16 * ROW_K // 8


def acc_row(lane, h):
    """Row in its warpgroup's 64 of accumulator pair (j, h) of lane ``lane`` (0..127): the
    wgmma D fragment."""
    return lane // 32 * 16 + lane % 32 // 4 + h * 8


def acc_col(lane, j, v):
    """Column of element v of that pair."""
    return j * 8 + lane % 4 * 2 + v


def grouped_tile(t, group, nbm, nbn, div, mod):
    """(M tile, N tile) of the t-th block tile in the grouped launch order: ``group`` M tiles
    side by side (the last group may hold fewer), column by column, so that they share the B
    tiles in L2; ``div``/``mod``: floor or truncating division (never-negative operands)."""
    from tvm import tirx  # noqa: PLC0415
    first = div(t, group * nbn) * group
    rows = tirx.min(nbm - first, group)
    return first + mod(mod(t, group * nbn), rows), div(mod(t, group * nbn), rows)


def _wgmma_target(target):
    """The task's target with arch sm_90a (a kernel attribute; the module keeps its own);
    None without one."""
    import tvm  # noqa: PLC0415
    if target is None:
        return None
    d = dict(target.export())
    d["arch"] = "sm_90a"
    d.pop("host", None)
    return tvm.target.Target(d, host=target.host or "llvm")


def wgmma_gemm(wl, *, warpgroups: int, block_n: int, block_k: int, stages: int,
               wgmma_wait: int, raster: int, stage_c: int, target=None, sizes=None):
    """The PrimFunc of one config (see the module doc). ``sizes`` (None: the exact kernel of
    ``wl``, its tiles dividing M and N) makes the guarded kernel of a shape family: {axis:
    extent} for the batch, M and N axes it gives (PrimExprs: symbolic), the workload's size
    for the others; tiles may overhang M and N, whose sizes must be multiples of 8 (the
    space and ``family_check`` ask for 64: whole 64-row wgmma tiles of the fallbacks and the
    space's tilings). Its grid counts tiles rounded up; a load past the last row reads it
    again (K-major operand), past the last 8-row chunk that chunk (MN-major): their products
    land in rows and columns that are never stored, so the copy loop has no predicate; the
    stores past them are skipped. K is never symbolic."""
    from tvm import tirx  # noqa: PLC0415
    from tvm.script import tirx as T  # noqa: PLC0415

    guarded = sizes is not None
    sizes = sizes or {}
    batch, M, N = (sizes.get(a, v) for a, v in (("B", wl.batch), ("M", wl.M), ("N", wl.N)))
    K = wl.K
    BM, BN, BK, S = 64 * warpgroups, block_n, block_k, stages
    threads = 128 * warpgroups
    KT = K // BK
    dist = S - 1 - wgmma_wait  # prefetch distance in K tiles
    assert dist >= 1 and K % BK == 0 and BK % ROW_K == 0
    if guarded:
        nbm, nbn = (M + BM - 1) // BM, (N + BN - 1) // BN  # ints or PrimExprs
        group = raster  # the last group may hold fewer M tiles (rows = min(...) below)
    else:
        assert M % BM == 0 and N % BN == 0
        nbm, nbn = M // BM, N // BN
        group = max(1, min(raster, nbm))
    a_elems, b_elems = BM * BK, BN * BK
    chunks_a, chunks_b = a_elems // 8, b_elems // 8  # 16-byte chunks of a tile
    n_acc = BN // 2
    out = wl.out_dtype  # the matmul's; the kernel writes the epilogue's (final_dtype)
    extras, epi = epilogue_buffers(wl)
    ind = wl.dtype  # float16 or bfloat16: the same kernel, wgmma's .f16 or .bf16 operands
    out_vec = 16 // (2 if out in ("float16", "bfloat16") else 4)
    c_pad = out_vec  # 16 bytes a row: the 8 rows a warp writes start 4 banks apart
    staged = bool(stage_c)
    trans_a, trans_b = int(wl.transpose_a), int(not wl.transpose_b)  # wgmma's: 1 = MN-major
    shape = getattr(T.ptx.wgmma.mma_async.sync.aligned, f"m64n{BN}k16").f32
    mma = shape.bf16.bf16 if ind == "bfloat16" else shape.f16.f16
    lead = (batch,) if wl.op == "batch_matmul" else ()
    a_shape = lead + ((K, M) if wl.transpose_a else (M, K))
    b_shape = lead + ((N, K) if wl.transpose_b else (K, N))
    c_shape = lead + (M, N)

    def bidx(b, *idx):
        return (b,) + idx if lead else idx

    def chunk(q, R, kmajor):
        """(row, k, element offset in the tile) of the 16-byte chunk q of an operand tile of R
        rows (M or N) in copy order. K-major ([rows][K] in memory): [BK / 64][R][64], the 8
        chunks of row r permuted by XOR with r % 8. MN-major ([K][rows] in memory):
        [R / 64][BK][64], the 8 chunks of k-row k permuted by XOR with k % 8."""
        if kmajor:
            c, r, kb = q % 8, q // 8 % R, q // (8 * R)
            return r, kb * ROW_K + c * 8, (kb * R + r) * ROW_K + tirx.bitwise_xor(c, r % 8) * 8
        c, k, rb = q % 8, q // 8 % BK, q // (8 * BK)
        return rb * ROW_K + c * 8, k, (rb * BK + k) * ROW_K + tirx.bitwise_xor(c, k % 8) * 8

    def desc_offset(slot, R, r0, kk, kmajor):
        return ring_desc_offset(slot, R, r0, kk, kmajor, BK)

    def frag_row(wg, lane, h):  # row in the block tile of accumulator pair (j, h) of a lane
        return wg * 64 + acc_row(lane, h)

    a_km, b_km = not wl.transpose_a, wl.transpose_b  # K-major: A [M, K], B [N, K]
    # The tile of a block: its index and the grid are never negative, so a symbolic grid
    # divides without floor division's sign fix-ups.
    div, mod = (tirx.truncdiv, tirx.truncmod) if guarded else \
        (lambda a, b: a // b, lambda a, b: a % b)
    lbo_a, sbo_a = descriptor_offsets(a_km, BK)
    lbo_b, sbo_b = descriptor_offsets(b_km, BK)

    def gidx(b, kmajor, r, k, size):
        """The global index of (row, k) of an operand; guarded, a row past ``size`` reads the
        last one (K-major), a chunk of 8 rows past it the last 8 (MN-major)."""
        if guarded:
            r = tirx.min(r, size - (1 if kmajor else 8))
        return bidx(b, r, k) if kmajor else bidx(b, k, r)

    attrs = kernel_attrs(_wgmma_target(target))

    @T.macro
    def load(smem, A, B, bz, bm, bn, tx, slot, kt):
        # K tile kt of A and B -> ring slot `slot`, one 16-byte cp.async per chunk and thread
        for c in T.unroll(chunks_a // threads):
            r, k, off = T.meta_var(chunk(c * threads + tx, BM, a_km))
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(smem[slot * a_elems + off]),
                T.address_of(A[gidx(bz, a_km, bm * BM + r, kt * BK + k, M)]), 16)
        for c in T.unroll(chunks_b // threads):
            r, k, off = T.meta_var(chunk(c * threads + tx, BN, b_km))
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(smem[S * a_elems + slot * b_elems + off]),
                T.address_of(B[gidx(bz, b_km, bn * BN + r, kt * BK + k, N)]), 16)

    @T.prim_func(check_well_formed=False)  # checked by with_epilogue_params
    def kernel(A: T.Buffer(a_shape, ind), B: T.Buffer(b_shape, ind),
               C: T.Buffer(c_shape, wl.final_dtype)):
        T.func_attr(attrs)
        pid = T.launch_thread("blockIdx.x", nbm * nbn)
        bz = T.launch_thread("blockIdx.z", batch)
        tx = T.launch_thread("threadIdx.x", threads)
        smem = T.alloc_buffer((S * (a_elems + b_elems),), ind, scope="shared.dyn")
        acc = T.alloc_buffer((n_acc,), "float32", scope="local")
        da = T.alloc_buffer((1,), "uint64", scope="local")
        db = T.alloc_buffer((1,), "uint64", scope="local")
        cs = T.alloc_buffer((BM * (BN + c_pad),), out, scope="shared.dyn")  # 1-D: keeps the pad
        # grouped launch order: `group` M tiles side by side share the B tiles in L2
        bm, bn = T.meta_var(grouped_tile(pid, group, nbm, nbn, div, mod))
        wg = T.meta_var(tx // 128)
        lane = T.meta_var(tx % 128)
        for i in T.unroll(n_acc):
            acc[i] = T.float32(0)

        # 128-byte swizzle (3)
        T.cuda.wgmma.encode_matrix_descriptor(da.data, T.address_of(smem[0]), lbo_a, sbo_a, 3)
        T.cuda.wgmma.encode_matrix_descriptor(db.data, T.address_of(smem[S * a_elems]),
                                              lbo_b, sbo_b, 3)
        # prologue: tiles 0 .. dist-1 (one commit group each)
        for p in T.unroll(dist):
            if p < KT:
                load(smem, A, B, bz, bm, bn, tx, p, p)
            T.ptx["cp.async.commit_group"]()
        for ko in T.serial(KT):
            T.ptx["cp.async.wait_group"](dist - 1)
            T.cuda.cta_sync()
            # refill the slot of tile ko + dist (its previous tile's MMAs are complete)
            if ko + dist < KT:
                load(smem, A, B, bz, bm, bn, tx, (ko + dist) % S, ko + dist)
            T.ptx["cp.async.commit_group"]()
            T.ptx.wgmma.fence.sync.aligned()
            for kk in T.unroll(BK // 16):
                mma(*[acc[i] for i in range(n_acc)],
                    da[0] + T.uint64(desc_offset(ko % S, BM, wg * 64, kk, a_km)),
                    db[0] + T.uint64(desc_offset(ko % S, BN, 0, kk, b_km)),
                    T.bool(True), 1, 1, trans_a, trans_b)
            T.ptx.wgmma.commit_group.sync.aligned()
            T.ptx.wgmma.wait_group.sync.aligned(wgmma_wait)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        if staged:
            # registers -> padded C tile in shared memory -> 16-byte coalesced rows of C
            T.cuda.cta_sync()
            for j in T.unroll(BN // 8):
                for h in T.unroll(2):
                    for v in T.vectorized(2):
                        cs[frag_row(wg, lane, h) * (BN + c_pad) + acc_col(lane, j, v)] = \
                            T.Cast(out, acc[j * 4 + h * 2 + v])
            T.cuda.cta_sync()
            for c in T.unroll(BM * BN // out_vec // threads):
                row = T.meta_var(bm * BM + (c * threads + tx) // (BN // out_vec))
                col = T.meta_var(bn * BN + (c * threads + tx) % (BN // out_vec) * out_vec)
                if guarded:
                    if row < M and col < N:
                        for v in T.vectorized(out_vec):
                            C[bidx(bz, row, col + v)] = epi(
                                cs[(c * threads + tx) // (BN // out_vec) * (BN + c_pad)
                                   + (c * threads + tx) % (BN // out_vec) * out_vec + v],
                                bidx(bz, row, col + v))
                else:
                    for v in T.vectorized(out_vec):
                        C[bidx(bz, row, col + v)] = epi(
                            cs[(c * threads + tx) // (BN // out_vec) * (BN + c_pad)
                               + (c * threads + tx) % (BN // out_vec) * out_vec + v],
                            bidx(bz, row, col + v))
        else:
            for j in T.unroll(BN // 8):
                for h in T.unroll(2):
                    row = T.meta_var(bm * BM + frag_row(wg, lane, h))
                    col = T.meta_var(bn * BN + acc_col(lane, j, 0))
                    if guarded:
                        if row < M and col < N:
                            for v in T.vectorized(2):
                                C[bidx(bz, row, col + v)] = epi(
                                    T.Cast(out, acc[j * 4 + h * 2 + v]), bidx(bz, row, col + v))
                    else:
                        for v in T.vectorized(2):
                            C[bidx(bz, row, col + v)] = epi(
                                T.Cast(out, acc[j * 4 + h * 2 + v]), bidx(bz, row, col + v))

    return with_epilogue_params(kernel, extras)


def kernel_from_config(wl, cfg, facts, target, sizes=None):
    return wgmma_gemm(wl, warpgroups=cfg["warpgroups"].val, block_n=cfg["block_n"].val,
                      block_k=cfg["block_k"].val, stages=cfg["stages"].val,
                      wgmma_wait=cfg["wgmma_wait"].val, raster=cfg["raster"].val,
                      stage_c=cfg["stage_c"].val, target=target, sizes=sizes)


def family_check(family) -> Optional[str]:
    """Why the guarded kernel cannot serve a shape family (None when it can): every size of
    M and N a multiple of 64 (its clamps and guards need multiples of 8; 64 keeps every
    size a whole number of the smallest tiles, so the bucket kernels take them as 64 * t),
    K fixed."""
    if "K" in family.varying:
        return "its K is fixed in the kernel (the family's K varies)"
    for a in ("M", "N"):
        if a in family.varying and family.granule(a) % 64:
            return f"every {a} must be a multiple of 64 (granule {family.granule(a)})"
    return None


def fallback_wgmma(space, wl, facts):
    """Untuned: the largest block tile (up to 128 x 256) whose grid still fills 90% of the SMs,
    else (no tile does) the smallest, whose grid fills the most; 64-deep K tiles in as many
    stages (up to 4) as the shared memory holds (but see below), one wgmma batch in flight, and
    the C tile staged through shared memory. (Taking the largest tile where none fills the SMs left
    transformer-sized GEMMs on a few blocks: f16 512x768x3072, 12 blocks of 128 x 256 on the
    H200's 132 SMs, 38 us against cuBLAS's 5; ``bench.model --target cuda --profile``,
    docs/BENCHMARKS.md.) A grid of at most one block an SM takes the first ring, from 4 x 64
    deep up, of the space that one SM holds only once (``one_block_an_sm``), so that it keeps
    its early launch (``early_launch``); not a shape family's kernel, whose grid follows the
    shapes it is called on."""
    best = None
    for wg, bn in ((2, 256), (2, 128), (1, 128), (1, 64)):  # tiles from the largest
        if wl.M % (64 * wg) or wl.N % bn:
            continue
        best = (wg, bn)
        if grid_blocks(wl, 64 * wg, bn) >= 0.9 * facts["num_sms"]:
            break
    wg, bn = best
    stages = min(4, facts["max_shared_memory_optin"] // ((64 * wg + bn) * ROW_K * 2))
    values = {"warpgroups": wg, "block_n": bn, "block_k": ROW_K, "stages": stages,
              "wgmma_wait": 1, "raster": fallback_raster(wl, facts, 64 * wg, bn), "stage_c": 1}
    if grid_blocks(wl, 64 * wg, bn) <= facts["num_sms"] and not space.facts.get("symbolic"):
        for block_k, stages in ((ROW_K, 4), (ROW_K, 5), (2 * ROW_K, 3), (2 * ROW_K, 4),
                                (2 * ROW_K, 5)):
            deeper = {**values, "block_k": block_k, "stages": stages}
            cfg = space.config_from_values(deeper)
            if not space.violations(cfg) and one_block_an_sm(space.names_of(cfg), facts):
                return deeper
    return values


def one_block_an_sm(names, facts) -> bool:
    """Whether an SM holds at most one block of a config (``names``: its knobs and let terms):
    its shared memory, the ring or the C tile on its bytes, more than half the SM's."""
    return blocks_by_shared_memory(max(names["ab_smem_bytes"], names["c_smem_bytes"]),
                                   facts) == 1


def early_launch(wl, names, facts) -> bool:
    """Programmatic dependent launch, but not for a grid of at most one block an SM whose
    blocks an SM holds two or more of. Launched early, a grid's blocks are placed while the
    kernel before it still holds part of the GPU, and such blocks can pile up on the SMs
    left free instead of taking one SM each: the f16 block's down projection (512x768x3072,
    96 blocks of 64 x 64 on 132 SMs, a 64 KB ring: 3 an SM) after the up projection (192
    blocks) took 19.4 us in the block launched early, 13.8 with ``TVM_EXT_PDL=0``, and 10.2
    launched early with a 128 KB ring (one an SM; H200, CUDA graphs, docs/BENCHMARKS.md).
    Grids of more blocks than SMs keep it (the up projection 8.0 us with it, 8.3 without)."""
    return grid_blocks(wl, names["block_m"], names["block_n"]) > facts["num_sms"] or \
        one_block_an_sm(names, facts)


def _template(op):
    return KernelTemplate(
        name=f"{op}_wgmma.cuda", op=op, target_kind="cuda", kernel=kernel_from_config,
        fallback=fallback_wgmma, check=check_wgmma, dtypes=("float16", "bfloat16"), priority=4,
        symbolic=True, granular=True, family_check=family_check, epilogues=True,
        early_launch=early_launch)


DENSE_WGMMA = _template("dense")
BATCH_MATMUL_WGMMA = _template("batch_matmul")
