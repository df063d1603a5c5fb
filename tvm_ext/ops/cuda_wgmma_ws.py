"""Hopper GEMM, warp-specialised and persistent (sm_90a): ``dense_wgmma_ws.cuda`` and
``batch_matmul_wgmma_ws.cuda``.

The ``*_wgmma.cuda`` kernels (``cuda_wgmma.py``) copy their tiles with ``cp.async`` issued by
every thread and compute one output tile per block. This template is the structure of
CUTLASS's sm90 "warp-specialized persistent" GEMM, written in TensorIR from the knobs:

- **TMA.** A and B tiles come global -> shared by the Tensor Memory Accelerator
  (``cp.async.bulk.tensor``), one instruction per 64-wide box, from tensor maps that the
  host function encodes at each call (``runtime.cuTensorMapEncodeTiled``, passed to the
  kernel as ``__grid_constant__`` parameters). The maps use the 128-byte swizzle, so the
  shared tiles have exactly the layout of the cp.async template (``cuda_wgmma``'s module doc:
  K-major ``[block_k / 64][rows][64]``, MN-major ``[rows / 64][block_k][64]``, 16-byte chunks
  XOR-permuted by row) and the same wgmma descriptors read them.
- **Warp specialisation.** Warpgroup 0 is the producer: its thread 0 waits for a ring
  slot to be free (its ``empty`` mbarrier), announces the slot's bytes on its ``full``
  mbarrier (``arrive.expect_tx``) and issues the TMA loads; its registers are given back
  (``setmaxnreg.dec`` to 40). Warpgroups 1..``consumers`` each own 64 rows of the block tile
  (``pingpong`` = 0), or (``pingpong`` = 1) the block tile is 64 rows and the two consumers
  take every other tile, their mainloops in turn (turn mbarriers: every earlier tile's fills
  are consumed before a consumer waits on a full barrier, so its parity names the right
  fill), one's MMAs running while the other stores. They wait on ``full``, issue one
  ``wgmma.m64n{block_n}k16`` per 16 of K, and release the slot (one arrive per consumer
  warpgroup, cooperative, or one, pingpong, on ``empty``) once their MMAs that read it are
  complete (``wgmma_wait`` batches left in flight); they take the registers
  (``setmaxnreg.inc`` to 232). A subgraph task's epilogue is computed in the store
  (``template.epilogue_buffers``).
- **Persistent grid.** ``min(tiles, SMs)`` blocks walk the output tiles ``blockIdx.x +
  i * gridDim.x`` in the grouped order of ``raster`` M tiles (L2 reuse). The ring's stages run
  on across tiles: while the consumers store one tile, the producer already loads the next
  tile's first stages.
- **Write-back** (``staged_store``). 0: each consumer stores its accumulators from registers
  to global memory in 2-element pairs. 1: each consumer writes them (the epilogue computed on
  the way) into its own 64 x block_n tile of shared memory, in the layout of a TMA box with
  the 128-byte swizzle (boxes of 64 rows x 128 bytes, 16-byte chunks XOR-permuted by row: a
  warp's 4-byte stores hit 32 banks), fences the generic-proxy writes for the async proxy
  (``fence.proxy.async``), meets its warpgroup at a named barrier, and one thread issues the
  TMA stores (``cp.async.bulk.tensor ... global.shared::cta.bulk_group``, C's tensor map
  encoded by the host as A's and B's). The stores run on while the consumer computes its
  next tile; before it writes the tile again, that thread waits until they have read it
  (``cp.async.bulk.wait_group.read 0``) and the named barrier tells the warpgroup. The shared
  stores are ``st.shared`` instructions, not buffer stores, so TVM's sync planner (which
  refuses a shared buffer written and read inside the warpgroups' branches) inserts nothing:
  the named barriers are the synchronisation.

- **Clusters** (``cluster`` = 2). Pairs of CTAs launched as a thread-block cluster
  (``clusterCtaIdx.x``: the runtime launches with a cluster dimension) compute two M tiles side
  by side with the same B tile, walking the tiles of clusters together. Each CTA's producer
  loads its own A tile and half of every B box (its outer rows: N rows of a K-major B, K rows
  of an MN-major one) and multicasts that half into both CTAs' slots
  (``cp.async.bulk.tensor ... .multicast::cluster``, CTA mask 0b11), so B crosses L2 once per
  pair. Each full barrier still expects the whole stage's bytes (half of B arrives from the
  other CTA). A slot is refilled only when the consumers of both CTAs have freed it: the empty
  barriers count the arrivals of both, lane r of a consumer warpgroup arriving on CTA r's
  (``mapa`` + ``mbarrier.arrive.shared::cluster``, CTA-scope release as CUTLASS's consumer
  release: the cluster-scope release cost 2x on 8192^3). A cluster barrier after the barriers'
  initialisation (``fence.mbarrier_init.release.cluster``) and one before exit (no CTA leaves
  while the other may still arrive on its barriers). No better on the H100 (8192^3 0.93-0.98x
  without): ``cluster`` = 1 untuned.

- **Stream-K** (``stream_k`` = w > 0; CUTLASS's data-parallel + stream-K hybrid). A persistent
  grid of one block an SM runs ``ceil(tiles / SMs)`` rounds of tiles, the last one partial:
  8192^3 in 128 x 256 tiles is 15.5 waves, so half the SMs idle for the last tile's time.
  Here the grid is one block an SM and the tiles of the last, partial wave (and w - 1 whole
  waves before it) are shared out first, by K steps: the shared tiles' steps are numbered tile
  by tile and dealt in even runs, block b taking ``[b * steps / SMs, (b + 1) * steps / SMs)``
  (``stream_k_start``), then every block computes the same number of whole tiles. A run may
  end a tile that lower blocks began: that partial tile is the first of the run, so each
  block hands over at most one; it stores its accumulators to its slot of a global workspace
  (16 bytes a lane, a warp's 512 bytes contiguous), fences, meets its warpgroup, and one lane
  raises the block's flag (``st.release.gpu``). The block that began the tile (its K step 0)
  finishes it: for each later block that holds part of it (``stream_k_owner``), lane 0 polls
  the flag (``T.cuda.wait_until``: relaxed loads ``SPIN_NS`` apart, closed by an acquire
  load), the warpgroup meets, and every lane adds that slot (``ld.global.cg``, from L2) to its
  accumulators; then the tile is stored as any other, epilogue included. The
  blocks a finisher waits on began their runs with the tile, so they never wait themselves,
  and with one block an SM all of them are resident: no cycle, no deadlock (as CUTLASS, it
  assumes the grid's blocks can all be resident at once). A first small kernel zeroes the
  flags (the workspace is TVM's, not kept between calls). Per consumer warpgroup: each
  takes its own 64 rows, slot and flag. Cooperative consumers of one CTA only (not pingpong,
  not clusters). On the H100: 8192^3 f16 NT 0.6-3% faster, 1024^3 2.3x slower (cd47a06). The
  fallback keeps ``stream_k`` = 0; records choose it.

The mbarrier phases come from one running count of K steps per block (``g``): slot ``g %
stages``, phase ``g // stages % 2``; the producer's first pass over the ring waits on the
parity before the barrier's first phase, which is complete at initialisation. Stream-K's
blocks count their shared steps first, then their whole tiles'.

Measured (``bench --suite gpu``, docs/BENCHMARKS.md): the staged TMA store took attention
scores from 0.36x to 1.00x cuBLAS (H200). Its records in ``logs/cuda_sm90.json`` are those
rows' kernels; without a record it ranks below the cp.async template (measured on these only).

**fp8** (``float8_e4m3fn``, ``float8_e5m2``): wgmma reads fp8 operands K-major only, so
layout NT. The kernel is the 16-bit one on the same bytes: the TMA maps see each operand as
rows of 2-byte columns (K / 2 of them), a stage of block_k = 128 fp8 is one 128-byte swizzle
row as 64 f16 are, and each ``wgmma ... m64nNk32.f32.e4m3.e4m3`` (no transpose operands) takes
the 32 bytes of K that one k16 f16 instruction takes; descriptors and boxes are unchanged.
f32 accumulation; out f32, f16 or bf16, or scaled by the epilogue (``scale:S+cast:float16``).
On the H100 and the H200 its 8192^3 e4m3 -> f16 GEMM runs at 1.02x of ``torch._scaled_mm``.

Scope: as the cp.async template's exact kernel (the 4 layouts, f16 or bf16 in, the input's
dtype or f32 out; fp8 as above; M and N multiples of the block tile, K of ``block_k``), no
shape families (no guarded kernel). The ring, the staged C tiles and the barriers live in one
dynamic shared buffer, whose start must be 1024-byte aligned (the swizzle is a function of the
address): no static shared memory is declared, as in the cp.async template.
"""
from __future__ import annotations

from ..template import KernelTemplate, epilogue_buffers, with_epilogue_params
from ..workload import DTYPE_BYTES, FP8
from .common import fallback_raster, kernel_attrs
from .cuda_wgmma import (ROW_K, _wgmma_target, acc_col, acc_row, check_wgmma,
                         descriptor_offsets, grouped_tile, ring_desc_offset)

#: Registers per thread after ``setmaxnreg``: the producer's and the consumers'.
PRODUCER_REGS, CONSUMER_REGS = 40, 232
#: Stream-K: nanoseconds a finisher sleeps between polls of a flag, so that a waiting lane does
#: not keep an L2 slice busy (8192^3 under ncu: 3.5% fewer L2 read sectors than polling without
#: a pause; docs/BENCHMARKS.md).
SPIN_NS = 200


def ws_smem_bytes(consumers, block_n, block_k, stages, pingpong=0, staged_store=0,
                  out_bytes=2, in_bytes=2):
    """Bytes of the kernel's dynamic shared memory: the ring (``in_bytes`` an input element),
    (``staged_store``) a 64 x block_n output tile of ``out_bytes`` elements a consumer, 2
    mbarriers a stage and one a consumer (pingpong's turns)."""
    block_m = 64 if pingpong else 64 * consumers
    return ((block_m + block_n) * block_k * in_bytes * stages
            + staged_store * consumers * 64 * block_n * out_bytes
            + 16 * stages + 8 * consumers)


def stream_k_plan(tiles, k_steps, sms, waves):
    """(tiles whose K steps are shared out, whole tiles a block after them) of ``stream_k`` =
    ``waves``: the tiles of the last, partial wave of ``sms`` blocks and ``waves`` - 1 whole
    waves before it where there are as many; None where the tiles fill whole waves (nothing to
    balance) or the shared steps are fewer than the blocks."""
    rem = tiles % sms
    if not rem:
        return None
    sk_tiles = rem + min(waves - 1, tiles // sms) * sms
    if sk_tiles * k_steps < sms:
        return None
    return sk_tiles, (tiles - sk_tiles) // sms


def stream_k_start(b, steps, grid, div):
    """Stream-K: the first of block b's shared K steps, of ``steps`` numbered tile by tile
    (step gk is K step gk % KT of shared tile gk // KT) and dealt to ``grid`` blocks in even
    runs; ``div``: floor or truncating division (never-negative operands)."""
    return div(b * steps, grid)


def stream_k_owner(gk, steps, grid, div):
    """Stream-K: the block whose run holds shared step gk (the last b with
    ``stream_k_start(b) <= gk``)."""
    return div((gk + 1) * grid - 1, steps)


def wgmma_ws_gemm(wl, *, consumers: int, block_n: int, block_k: int, stages: int,
                  wgmma_wait: int, raster: int, num_sms: int, pingpong: int = 0,
                  staged_store: int = 0, cluster: int = 1, stream_k: int = 0, target=None):
    """The PrimFunc of one config (see the module doc)."""
    from tvm import tirx  # noqa: PLC0415
    from tvm.script import tirx as T  # noqa: PLC0415

    batch, M, N, K = wl.batch, wl.M, wl.N, wl.K
    BM, BN, BK, S = (64 if pingpong else 64 * consumers), block_n, block_k, stages
    fp8 = wl.dtype in FP8
    if fp8:  # K-major fp8 operands as pairs of bytes: the 16-bit kernel's tiles, byte for byte
        assert wl.layout == "NT"
        K, BK = K // 2, BK // 2
    assert M % BM == 0 and N % BN == 0 and K % BK == 0 and BK % ROW_K == 0
    assert 0 <= wgmma_wait <= 1 and cluster in (1, 2)
    threads = 128 * (consumers + 1)
    KT = K // BK
    CL = cluster  # CTAs a cluster: M tiles side by side, sharing (multicasting) B's tile
    nbm, nbn = M // BM, N // BN
    assert nbm % CL == 0
    nbm_c = nbm // CL  # the M tiles of clusters
    per_batch = nbm_c * nbn
    tiles = batch * per_batch  # a cluster's tiles (CL block tiles each)
    grid_c = min(tiles, max(1, num_sms // CL))  # clusters
    grid = grid_c * CL
    iters = (tiles + grid_c - 1) // grid_c
    plan = stream_k_plan(tiles, KT, num_sms, stream_k) if stream_k else None
    sk = plan is not None
    if sk:  # stream-K: every SM a block; the first sk_tiles tiles' K steps shared out evenly
        assert CL == 1 and not pingpong
        grid = grid_c = num_sms
        sk_tiles, dp_iters = plan
        sk_steps = sk_tiles * KT
    group = max(1, min(raster, nbm_c))
    a_elems, b_elems = BM * BK, BN * BK
    ring_elems = S * (a_elems + b_elems)
    n_acc = BN // 2
    out = wl.out_dtype  # the matmul's; the kernel writes the epilogue's (final_dtype)
    extras, epi = epilogue_buffers(wl)
    ind = wl.dtype
    lanes16 = "uint16" if fp8 else ind  # the TMA maps' and the ring's element
    trans_a, trans_b = int(wl.transpose_a), int(not wl.transpose_b)  # wgmma's: 1 = MN-major
    shape = getattr(T.ptx.wgmma.mma_async.sync.aligned, f"m64n{BN}k{32 if fp8 else 16}").f32
    if fp8:  # e4m3 / e5m2: K-major only, no transpose operands
        f8 = "e4m3" if ind == "float8_e4m3fn" else "e5m2"
        mma, trans = getattr(getattr(shape, f8), f8), ()
    else:
        mma = shape.bf16.bf16 if ind == "bfloat16" else shape.f16.f16
        trans = (trans_a, trans_b)
    is_bmm = wl.op == "batch_matmul"
    lead = (batch,) if is_bmm else ()
    a_shape = lead + ((wl.K, M) if wl.transpose_a else (M, wl.K))
    b_shape = lead + ((N, wl.K) if wl.transpose_b else (wl.K, N))
    c_shape = lead + (M, N)
    a_km, b_km = not wl.transpose_a, wl.transpose_b  # K-major: A [M, K], B [N, K]
    lbo_a, sbo_a = descriptor_offsets(a_km, BK)
    lbo_b, sbo_b = descriptor_offsets(b_km, BK)
    stage_bytes = (a_elems + b_elems) * 2
    rank = 3 if is_bmm else 2
    tma = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global"
           ".mbarrier::complete_tx::bytes")

    def map_args(kmajor, rows, cols, R, eb=2):
        """(dims, byte strides, box) of the tensor map of a tensor of ``eb``-byte elements
        stored [rows][cols] (innermost last), tiles of R rows (M or N): boxes of 128 bytes
        of the columns x R rows (K-major operands, C), or (MN-major) 64 rows x BK of K."""
        dims = [cols, rows] + ([batch] if is_bmm else [])
        strides = [cols * eb] + ([rows * cols * eb] if is_bmm else [])
        box = [128 // eb, R if kmajor else BK] + ([1] if is_bmm else [])
        return dims, strides, box

    a_rows, a_cols = a_shape[-2:]
    b_rows, b_cols = b_shape[-2:]
    if fp8:  # columns of 2 bytes (K-major: the columns are K)
        a_cols, b_cols = a_cols // 2, b_cols // 2
    a_map = map_args(a_km, a_rows, a_cols, BM)
    b_map = map_args(b_km, b_rows, b_cols, BN)
    # a cluster's CTAs each load 1/CL of every B box (its outer rows: N rows K-major, K rows
    # MN-major) and multicast it to all of them
    b_outer = (BN if b_km else BK) // CL
    b_map[2][1] = b_outer

    def desc_offset(slot, R, r0, kk, kmajor):
        return ring_desc_offset(slot, R, r0, kk, kmajor, BK)

    def nboxes(kmajor, R):
        """TMA boxes of a tile: 64 of K (K-major) or 64 rows (MN-major) each."""
        return BK // ROW_K if kmajor else R // ROW_K

    def box(kmajor, R, q):
        """(element offset in a slot, row offset, k offset) of TMA box q of a tile."""
        if kmajor:
            return q * R * ROW_K, 0, q * ROW_K
        return q * BK * ROW_K, q * ROW_K, 0

    def cidx(bz, bm, bn, r0, lane, j, h, v):
        """C's index of element v of accumulator pair (j, h) of a consumer's lane."""
        return (bz,) * is_bmm + (bm * BM + r0 + acc_row(lane, h), bn * BN + acc_col(lane, j, v))

    def coords(kmajor, r, k, bz):
        c = [k, r] if kmajor else [r, k]
        return c + ([bz] if is_bmm else [])

    fin = wl.final_dtype
    ob = DTYPE_BYTES[fin]
    c_box = 128 // ob  # columns of a C box: 128 bytes, the 128-byte swizzle's row
    c_elems = 64 * BN  # one consumer's staged tile
    c_map = map_args(True, M, N, 64, ob)
    c_store = (f"cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group")
    c_st = "st.shared.v2.f32" if ob == 4 else "st.shared.v2.b16"
    ring_bytes = ring_elems * 2

    def c_off(cw, row, col):
        """Element offset in the staged C of (row, col) of consumer cw's 64 x BN tile: boxes
        of 64 rows x c_box columns, 16-byte chunks XOR-permuted by row (128-byte swizzle)."""
        per = 16 // ob
        return (cw * c_elems + col // c_box * 64 * c_box + row * c_box
                + ((col % c_box // per) ^ (row % 8)) * per + col % per)

    attrs = kernel_attrs(_wgmma_target(target))
    st = bool(staged_store)
    # the ring, the staged C tiles, then the barriers
    dyn_bytes = ws_smem_bytes(consumers, BN, BK, S, pingpong, staged_store, ob)
    bar_off = (ring_bytes + staged_store * consumers * c_elems * ob) // 8
    pp = bool(pingpong)
    empty_count = (1 if pp else consumers) * CL  # arrivals that free a slot (all CTAs')
    n_order = consumers if pp else 0  # the pingpong consumers' turn barriers

    def mine(i, cw):
        """Whether consumer cw computes the block's tile i (pingpong: every other one)."""
        return i % consumers == cw if pp else T.bool(True)

    def row0(cw):  # the first row of the block tile that consumer cw computes
        return 0 if pp else cw * 64

    def tile_of(t, crank):
        """(M tile, N tile, batch) of the block's tile t: in each batch, the grouped order of
        the clusters' tiles, CL M tiles each (the CTA of rank ``crank`` takes one)."""
        bm, bn = grouped_tile(tirx.truncmod(t, per_batch), group, nbm_c, nbn, tirx.truncdiv,
                              tirx.truncmod)
        return (bm * CL + crank if CL > 1 else bm), bn, tirx.truncdiv(t, per_batch)

    def tile(bx, i):
        """The block's i-th tile of clusters."""
        return bx // CL + i * grid_c if CL > 1 else bx + i * grid

    def signals(lane):
        """The consumer lanes that free a slot: lane 0, or (cluster) lane r in CTA r."""
        return lane == 0 if CL == 1 else lane < CL

    @T.macro
    def release(bar, peer, lane):
        """Free a ring slot: one arrival on its empty barrier, in every CTA of the cluster
        (their producers multicast into this CTA's slot): lane r arrives on CTA r's, as
        CUTLASS's consumer release (release semantics at CTA scope, the default)."""
        if CL > 1:
            T.ptx["mapa.shared::cluster.u32"](
                peer[0], T.cuda.cvta_generic_to_shared(bar), T.Cast("uint32", lane))
            T.ptx["mbarrier.arrive.shared::cluster.b64"](peer[0])
        else:
            T.ptx.mbarrier.arrive.shared.b64(bar, T.uint32(1))

    @T.macro
    def encode(tmap, dtype, data, dims):
        """The host's encoding of one tensor map: ``dims`` is ``map_args``'s (sizes, byte
        strides, box); unit element strides, no interleave, 128-byte swizzle, 128-byte L2
        promotion, no out-of-bounds fill."""
        T.call_packed("runtime.cuTensorMapEncodeTiled", tmap, dtype, rank, data,
                      *dims[0], *dims[1], *dims[2], *([1] * rank), 0, 3, 2, 0)

    def sk_start(b):
        return stream_k_start(b, sk_steps, grid, tirx.truncdiv)

    def sk_end(b):
        return sk_start(b + 1)

    def sk_owner(gk):
        return stream_k_owner(gk, sk_steps, grid, tirx.truncdiv)

    def part_at(b, cw, q, lane):
        """Stream-K: the element offset of a lane's 4 accumulators q in block b's slot."""
        return (((b * consumers + cw) * (n_acc // 4) + q) * 128 + lane) * 4

    @T.macro
    def produce(g, t, kt, smem, bars, A_map, B_map, crank):
        """The producer's K step g (of the block's running count): k tile kt of tile t into
        ring slot g % S, once the consumers freed it."""
        slot = T.meta_var(tirx.truncmod(g, S))
        bm, bn, bz = T.meta_var(tile_of(t, crank))
        # (cluster: freed by the consumers of every CTA it feeds)
        T.cuda.mbarrier_wait(T.address_of(bars[S + slot]),
                             tirx.truncmod(tirx.truncdiv(g, S), 2) ^ 1)
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(
            T.address_of(bars[slot]), T.uint32(stage_bytes))
        for q in T.unroll(nboxes(a_km, BM)):
            off, r0, k0 = T.meta_var(box(a_km, BM, q))
            T.ptx[tma](T.address_of(smem[slot * a_elems + off]),
                       T.address_of(A_map),
                       *coords(a_km, bm * BM + r0, kt * BK + k0, bz),
                       T.address_of(bars[slot]))
        for q in T.unroll(nboxes(b_km, BN)):
            off, r0, k0 = T.meta_var(box(b_km, BN, q))
            if CL > 1:  # this CTA's part of the box, to every CTA
                T.ptx[tma + ".multicast::cluster"](
                    T.address_of(smem[S * a_elems + slot * b_elems + off
                                      + crank * b_outer * ROW_K]),
                    T.address_of(B_map),
                    *coords(b_km, bn * BN + r0 + crank * b_outer * b_km,
                            kt * BK + k0 + crank * b_outer * (1 - b_km),
                            bz),
                    T.address_of(bars[slot]), T.uint16((1 << CL) - 1))
            else:
                T.ptx[tma](T.address_of(smem[S * a_elems + slot * b_elems
                                             + off]),
                           T.address_of(B_map),
                           *coords(b_km, bn * BN + r0, kt * BK + k0, bz),
                           T.address_of(bars[slot]))

    @T.macro
    def consume(g, kt, acc, da, db, bars, peer, lane, r0):
        """A consumer's K step g (kt: its place in the tile's run of steps): wait for the
        slot's fill, one wgmma a 16 of K, and free the slot (or, wgmma_wait, the one before)."""
        slot = T.meta_var(tirx.truncmod(g, S))
        T.cuda.mbarrier_wait(T.address_of(bars[slot]),
                             tirx.truncmod(tirx.truncdiv(g, S), 2))
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // 16):
            mma(*[acc[j] for j in range(n_acc)],
                da[0] + T.uint64(desc_offset(slot, BM, 0, kk, a_km)
                                 + r0 // 64 * (64 * ROW_K // 8 if a_km
                                               else 64 * BK // 8)),
                db[0] + T.uint64(desc_offset(slot, BN, 0, kk, b_km)),
                T.bool(True), 1, 1, *trans)
        T.ptx.wgmma.commit_group.sync.aligned()
        T.ptx.wgmma.wait_group.sync.aligned(wgmma_wait)
        if wgmma_wait == 0:
            if signals(lane):
                release(T.address_of(bars[S + slot]), peer, lane)
        else:
            if signals(lane) and kt > 0:
                release(T.address_of(bars[S + tirx.truncmod(g + S - 1, S)]),
                        peer, lane)

    @T.macro
    def drain(g, bars, peer, lane):
        """After a tile's last K step g: its MMAs complete and (wgmma_wait) its slot freed."""
        if wgmma_wait > 0:
            T.ptx.wgmma.wait_group.sync.aligned(0)
            if signals(lane):
                release(T.address_of(bars[S + tirx.truncmod(g, S)]), peer, lane)

    @T.macro
    def mainloop(g0, n, acc, da, db, bars, peer, lane, r0):
        """A consumer's run of ``n`` K steps of one tile from step ``g0`` of the block's
        running count, then its drain."""
        for kt in T.serial(n):
            consume(g0 + kt, kt, acc, da, db, bars, peer, lane, r0)
        drain(g0 + n - 1, bars, peer, lane)

    @T.macro
    def write_back(t, acc, cst, C, C_map, bars, lane, cw, r0, crank):
        """Tile t's accumulators through the epilogue to C (pingpong: after handing the
        mainloop's turn to the other consumer)."""
        bm, bn, bz = T.meta_var(tile_of(t, crank))
        if pp:
            if lane == 0:
                T.ptx.mbarrier.arrive.shared.b64(
                    T.address_of(bars[2 * S + tirx.truncmod(cw + 1, consumers)]),
                    T.uint32(1))
        if st:
            # the staged tile: free once this consumer's last TMA store has read
            # it; written (swizzled, conflict-free), made visible to the async
            # proxy, and stored by TMA while the next tile's mainloop runs
            if lane == 0:
                T.ptx["cp.async.bulk.wait_group.read"](0)
            T.ptx["bar.sync"](T.uint32(1) + T.Cast("uint32", cw), T.uint32(128))
            for j in T.unroll(BN // 8):
                for h in T.unroll(2):
                    T.ptx[c_st](
                        T.address_of(cst[c_off(cw, acc_row(lane, h),
                                               acc_col(lane, j, 0))]),
                        *[epi(T.Cast(out, acc[j * 4 + h * 2 + v]),
                              cidx(bz, bm, bn, r0, lane, j, h, v))
                          for v in range(2)])
            T.ptx["fence.proxy.async.shared::cta"]()
            T.ptx["bar.sync"](T.uint32(1) + T.Cast("uint32", cw), T.uint32(128))
            if lane == 0:
                for q in T.unroll(BN // c_box):
                    T.ptx[c_store](
                        T.address_of(C_map),
                        *coords(True, bm * BM + r0, bn * BN + q * c_box, bz),
                        T.address_of(cst[cw * c_elems + q * 64 * c_box]))
                T.ptx["cp.async.bulk.commit_group"]()
        else:
            for j in T.unroll(BN // 8):
                for h in T.unroll(2):
                    for v in T.vectorized(2):
                        idx = T.meta_var(cidx(bz, bm, bn, r0, lane, j, h, v))
                        C[idx] = epi(T.Cast(out, acc[j * 4 + h * 2 + v]), idx)

    @T.macro
    def hand_over(b, acc, part, flag, lane, cw):
        """Stream-K: block b's partial sums of the tile that a lower block stores, into its
        slot of the workspace (16-byte stores, a warp's 512 bytes contiguous); then, after a
        fence and the warpgroup's barrier, its flag (a release store)."""
        for q in T.unroll(n_acc // 4):
            T.ptx["st.global.v4.f32"](T.address_of(part[part_at(b, cw, q, lane)]),
                                      *[acc[q * 4 + v] for v in range(4)])
        T.cuda.thread_fence()
        T.ptx["bar.sync"](T.uint32(1) + T.Cast("uint32", cw), T.uint32(128))
        if lane == 0:
            T.ptx["st.release.gpu.global.b32"](T.address_of(flag[b * consumers + cw]),
                                               T.int32(1))

    @T.macro
    def take_over(b, acc, part, flag, fl, tmp, lane, cw):
        """Stream-K: wait for block b's flag (lane 0 polls it with relaxed loads, a
        ``SPIN_NS`` sleep between polls, and closes with an acquire load; the warpgroup waits
        at its barrier), then add its partial sums (read from L2)."""
        if lane == 0:
            T.cuda.wait_until(fl, T.address_of(flag[b * consumers + cw]), fl[0] != 0,
                              backoff_ns=SPIN_NS)
        T.ptx["bar.sync"](T.uint32(1) + T.Cast("uint32", cw), T.uint32(128))
        for q in T.unroll(n_acc // 4):
            T.ptx["ld.global.cg.v4.f32"](*[tmp[v] for v in range(4)],
                                         T.address_of(part[part_at(b, cw, q, lane)]))
            for v in T.unroll(4):
                acc[q * 4 + v] = acc[q * 4 + v] + tmp[v]

    @T.prim_func(check_well_formed=False)  # checked by with_epilogue_params
    def kernel(A: T.Buffer(a_shape, ind), B: T.Buffer(b_shape, ind),
               C: T.Buffer(c_shape, fin)):
        T.func_attr(attrs)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        encode(A_map, lanes16, A.data, a_map)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        encode(B_map, lanes16, B.data, b_map)
        C_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        if st:
            encode(C_map, fin, C.data, c_map)
        if sk:  # the blocks' partial sums, and their flags (zeroed by a kernel of their own)
            part = T.alloc_buffer((grid * consumers * 64 * BN,), "float32", scope="global")
            flag = T.alloc_buffer((grid * consumers,), "int32", scope="global")
            with T.launch_thread("blockIdx.x", 1):
                fz = T.launch_thread("threadIdx.x", grid * consumers)
                flag[fz] = 0
        if CL > 1:
            crank = T.launch_thread("clusterCtaIdx.x", CL)
        else:
            crank = T.meta_var(0)
        bx = T.launch_thread("blockIdx.x", grid)
        tx = T.launch_thread("threadIdx.x", threads)
        pool = T.alloc_buffer((dyn_bytes,), "uint8", scope="shared.dyn")
        smem = T.decl_buffer((ring_elems,), lanes16, data=pool.data, scope="shared.dyn")
        cst = T.decl_buffer((consumers * c_elems,), fin, data=pool.data,
                            elem_offset=ring_bytes // ob, scope="shared.dyn")
        bars = T.decl_buffer((2 * S + consumers,), "uint64", data=pool.data,
                             elem_offset=bar_off, scope="shared.dyn")
        acc = T.alloc_buffer((n_acc,), "float32", scope="local")
        da = T.alloc_buffer((1,), "uint64", scope="local")
        db = T.alloc_buffer((1,), "uint64", scope="local")
        peer = T.alloc_buffer((1,), "uint32", scope="local")  # a cluster CTA's barrier
        if sk:
            fl = T.alloc_buffer((1,), "int32", scope="local")  # a flag read
            tmp = T.alloc_buffer((4,), "float32", scope="local")  # 4 partial sums read
        wg = T.meta_var(tx // 128)
        lane = T.meta_var(tx % 128)
        if tx == 0:
            for s in T.unroll(S):
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[s]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[S + s]),
                                               T.uint32(empty_count))
            for c in T.unroll(n_order):
                T.ptx.mbarrier.init.shared.b64(T.address_of(bars[2 * S + c]), T.uint32(1))
            T.ptx["fence.proxy.async.shared::cta"]()
            if CL > 1:
                T.ptx["fence.mbarrier_init.release.cluster"]()
        if CL > 1:  # every CTA's barriers are initialised before any arrives or multicasts
            T.cuda.cluster_sync()
        else:
            T.cuda.cta_sync()
        if wg == 0:
            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
            if tx == 0:
                if sk:
                    for u in T.serial(sk_end(bx) - sk_start(bx)):  # this block's shared steps
                        gk = T.meta_var(sk_start(bx) + u)
                        produce(u, tirx.truncdiv(gk, KT), tirx.truncmod(gk, KT),
                                smem, bars, A_map, B_map, crank)
                    for i in T.serial(dp_iters):
                        for kt in T.serial(KT):
                            produce(sk_end(bx) - sk_start(bx) + i * KT + kt,
                                    sk_tiles + bx + i * grid, kt, smem, bars, A_map, B_map,
                                    crank)
                else:
                    for i in T.serial(iters):
                        t = T.meta_var(tile(bx, i))
                        if t < tiles:
                            for kt in T.serial(KT):
                                produce(i * KT + kt, t, kt, smem, bars, A_map, B_map, crank)
        else:
            T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
            cw = T.meta_var(wg - 1)  # this consumer: its 64 rows, or (pingpong) its tiles
            r0 = T.meta_var(row0(cw))
            T.cuda.wgmma.encode_matrix_descriptor(da.data, T.address_of(smem[0]),
                                                  lbo_a, sbo_a, 3)
            T.cuda.wgmma.encode_matrix_descriptor(db.data, T.address_of(smem[S * a_elems]),
                                                  lbo_b, sbo_b, 3)
            if sk:
                s0 = T.meta_var(sk_start(bx))
                s1 = T.meta_var(sk_end(bx))
                # this block's segments of the shared tiles: the first may end one that lower
                # blocks began (its partial sum goes to the workspace), the last may begin
                # one that higher blocks end (it adds their partial sums and stores the tile)
                for q in T.serial(tirx.truncdiv(s1 - 1, KT) - tirx.truncdiv(s0, KT) + 1):
                    t = T.meta_var(tirx.truncdiv(s0, KT) + q)
                    k0 = T.meta_var(T.max(s0, t * KT) - t * KT)
                    k1 = T.meta_var(T.min(s1, t * KT + KT) - t * KT)
                    for j in T.unroll(n_acc):
                        acc[j] = T.float32(0)
                    mainloop(t * KT + k0 - s0, k1 - k0, acc, da, db, bars, peer, lane, r0)
                    if k0 > 0:
                        hand_over(bx, acc, part, flag, lane, cw)
                    else:
                        for c in T.serial(T.if_then_else(k1 < KT,
                                                         sk_owner(t * KT + KT - 1) - bx, 0)):
                            take_over(bx + 1 + c, acc, part, flag, fl, tmp, lane, cw)
                        write_back(t, acc, cst, C, C_map, bars, lane, cw, r0, crank)
                for i in T.serial(dp_iters):
                    for j in T.unroll(n_acc):
                        acc[j] = T.float32(0)
                    mainloop(s1 - s0 + i * KT, KT, acc, da, db, bars, peer, lane, r0)
                    write_back(sk_tiles + bx + i * grid, acc, cst, C, C_map, bars, lane, cw, r0,
                               crank)
            else:
                for i in T.serial(iters):
                    t = T.meta_var(tile(bx, i))
                    if t < tiles and mine(i, cw):
                        for j in T.unroll(n_acc):
                            acc[j] = T.float32(0)
                        if pp:
                            # mainloops in turn: every earlier tile's K steps were consumed,
                            # so a full barrier's parity names this tile's fill, not an older
                            T.cuda.mbarrier_wait(T.address_of(bars[2 * S + cw]),
                                                 tirx.truncmod(i // consumers, 2) ^ (cw == 0))
                        mainloop(i * KT, KT, acc, da, db, bars, peer, lane, r0)
                        write_back(t, acc, cst, C, C_map, bars, lane, cw, r0, crank)
            if st:
                if lane == 0:
                    T.ptx["cp.async.bulk.wait_group"](0)
        if CL > 1:  # no CTA leaves while another may still arrive on its barriers
            T.cuda.cluster_sync()

    return with_epilogue_params(kernel, extras)


def kernel_from_config(wl, cfg, facts, target, sizes=None):
    assert sizes is None, "the warp-specialised template has no shape-family kernel"
    # the knobs are its parameters
    return wgmma_ws_gemm(wl, **cfg.values_dict(), num_sms=facts["num_sms"], target=target)


def fallback_ws(space, wl, facts):
    """Untuned, from the H200 sweep of docs/BENCHMARKS.md (``--sweep wgmma_ws.cuda``): the
    output staged and stored by TMA (where it is 2 or 4 bytes an element), 128 x 256 tiles of
    two cooperative consumers where K is deep (8192^3: 1.11x cuBLAS), 128 x 128 where it is
    shallow and the output dominates (the attention scores, K = 128: 1.00x against 0.93x),
    64-row tiles where the 128-row ones would leave SMs idle (1024^3: 1.04x against 0.83x,
    then 1.19x tuned: one consumer, a batch of MMAs left in flight, 6 stages) or M is an odd
    multiple of 64 (pingpong); as many stages (up to 4) as the shared memory holds, each K
    step's MMAs finished before its slot is freed."""
    ob = DTYPE_BYTES[wl.final_dtype]
    staged = int(ob >= 2)
    # block tiles, largest first (at equal area the wider N); the first that divides the
    # shape into 3/4 of a wave of tiles or more, else the smallest that divides it
    shapes = [(0, 256), (0, 128), (1, 256), (1, 128), (0, 64), (1, 64)]
    if wl.K < 512:
        shapes = [(p, b) for p, b in shapes if b < 256]
    fit = [(p, b) for p, b in shapes if wl.M % (64 if p else 128) == 0 and wl.N % b == 0]
    pingpong, bn = next((p, b) for p, b in fit + [(1, 64)]
                        if p == 1 and b == 64 or
                        4 * wl.batch * (wl.M // (64 if p else 128)) * (wl.N // b)
                        >= 3 * facts["num_sms"])
    bm = 64 if pingpong else 128
    consumers, wait, most = 2, 0, 4
    if pingpong and wl.batch * (wl.M // 64) * (wl.N // bn) <= facts["num_sms"]:
        # a tile a block: one consumer (pingpong's second would idle), a batch of MMAs in
        # flight and a deeper ring (H200 1024^3: 4.6 us against 5.4 for pingpong, wait 0)
        consumers, pingpong, wait, most = 1, 0, 1, 6

    ib = DTYPE_BYTES[wl.dtype]
    bk = 128 // ib  # a 128-byte row of the swizzle a stage

    def fits(s, st):
        return ws_smem_bytes(consumers, bn, bk, s, pingpong, st, ob, ib) \
            <= facts["max_shared_memory_optin"]
    if not any(fits(s, staged) for s in (4, 3, 2)):
        staged = 0
    stages = next((s for s in range(most, 2, -1) if fits(s, staged)), 2)
    return {"consumers": consumers, "pingpong": pingpong, "block_n": bn, "block_k": bk,
            "stages": stages, "wgmma_wait": wait if stages >= 3 else 0,
            "staged_store": staged,
            "raster": fallback_raster(wl, facts, bm, bn, below_column=True)}


def check_ws(wl, facts):
    """check_wgmma, and for fp8 inputs wgmma's rule: both operands K-major (layout NT), K a
    multiple of 128 (a stage's 128-byte rows)."""
    why = check_wgmma(wl, facts)
    if why or wl.dtype not in FP8:
        return why
    if wl.layout != "NT":
        return f"wgmma reads fp8 operands K-major only: layout NT (A [M, K], B [N, K]), " \
               f"not {wl.layout}"
    if wl.K % 128:
        return f"fp8 K must be a multiple of 128 (got {wl.K})"
    return None


def _template(op):
    return KernelTemplate(
        name=f"{op}_wgmma_ws.cuda", op=op, target_kind="cuda", kernel=kernel_from_config,
        fallback=fallback_ws, check=check_ws, dtypes=("float16", "bfloat16", *FP8), priority=3,
        epilogues=True)


DENSE_WGMMA_WS = _template("dense")
BATCH_MATMUL_WGMMA_WS = _template("batch_matmul")
