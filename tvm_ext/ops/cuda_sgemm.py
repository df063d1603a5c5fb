"""f32 GEMM on the CUDA cores, written as CUTLASS's SGEMM: ``dense_sgemm.cuda`` and
``batch_matmul_sgemm.cuda``.

The TensorIR schedule of ``cuda_simt`` (``batch_matmul.cuda``, ``dense_large_batch.cuda``)
stages its tiles in shared memory and pipelines them, but each k step's FMAs wait for that
step's shared loads: on an H100 its f32 8192^3 kernel issued FFMA in 58% of the cycles at 4
warps a scheduler (docs/BENCHMARKS.md, the ncu section). This kernel is written out, thread by
thread, the way CUTLASS's SGEMM (and the "warptiling" kernels after it) is:

- **Block tile** ``block_m`` x ``block_n``, K in steps of ``block_k``; ``block_m * block_n /
  (8 * thread_n)`` threads, each computing an 8 x ``thread_n`` tile of C as sub-tiles of
  4 x 4 spread evenly over the block tile (rows ``4 ty + {0..3}`` and ``+ block_m / 2``;
  columns ``4 tx + {0..3}`` and every ``block_n / (thread_n / 4)`` after). A warp's threads
  then read neighbouring 16-byte words of a shared row: one ``LDS.128`` per 4 values, no bank
  conflicts (A's words are broadcast). ``thread_n`` = 16 is cuBLAS's thread tile (about 220
  registers, one block of 8 warps an SM); 8 needs about 126-150.
- **Shared memory, double-buffered**, both tiles K-major (``[2][block_k][rows + 4]``): a row of
  K holds the block's M (or N) values, so a thread's 4 values are one 16-byte word. An operand
  stored K-contiguous (A [M, K], B [N, K]) is transposed on its way in (4 scalar stores per
  16-byte global load; the 4-float padding of a row keeps them conflict-free); an MN-contiguous
  one is stored as it is loaded (``STS.128``).
- **Global -> registers -> shared, one tile ahead.** At the start of K tile ``kt`` every
  thread issues its 16-byte global loads of tile ``kt + 1`` into registers; they land while the
  tile's FMAs run, and are stored to the other shared buffer before the tile's last k step; one
  ``__syncthreads`` a K tile.
- **Registers double-buffered.** The fragments (8 A and 8 B values) of k step ``k + 1`` are
  loaded while the 64 FMAs of step ``k`` run (the next tile's first step from the other
  buffer), so the FMAs never wait for a shared load.
- **The FMAs** of a k step: the outer product of the 8 A and ``thread_n`` B fragments, row
  by row; ``serpentine`` = 1 runs odd rows right to left (CUTLASS's order: the B register of
  one row's last FMA is the next row's first, from the operand reuse cache), which cut the
  dispatch stalls of register-bank conflicts (8192^3 on the H100: 0.87x -> 0.91x of cuBLAS;
  other orders were slower: 8ebd700).
- ``spread``: ptxas issues a k step's six ``LDS.128`` back to back ahead of its FMAs, and ncu
  counts 10x cuBLAS's "wait" stalls at 8192^3; ``spread`` = 2 loads the words two at a time,
  each pair after a row of FMAs and a ``__syncwarp()`` (above which ptxas does not move shared
  loads). On the H100 it cut the wait stalls, not the times.
- Not ``cp.async``: a ring of 2 to 4 shared buffers filled by cp.async was slower on every
  H100 row (8192^3 0.84-0.86x of cuBLAS against 0.92x: e2a339d).
- ``min_blocks``: ``__launch_bounds__(threads, min_blocks)``, registers capped so that that
  many blocks share an SM (2: 128 registers for 256 threads).
- ``slice_k``: the block's threads in 2 or 4 groups, each computing the whole block tile over
  its own K / slice_k (its own pair of shared buffers, its own loads); after the main loop the
  groups after the first store their partial tiles to shared memory (thread by thread:
  conflict-free), and the first adds them and writes C, epilogue on the way. Where the tiles
  are fewer than the SMs and of 2 warps (the f32 transformer block's projections, 512 x 768:
  96 tiles of 64 x 64 on 132 SMs), each scheduler had at most one warp: 4 slices ran 1.9-2.1x
  faster on the H200 (512 x 768 x 768 at 0.99x cuBLAS, 512 x 768 x 3072 at 0.78x; cuBLAS
  takes 64 x 32 and 128 x 32 tiles there).
- ``cluster_k`` = 2 (sm_90): a tile's K over the 2 CTAs of a thread-block cluster
  (``%cluster_ctarank``), each over its own K / 2 (and its own slices of it). Each leaves its
  partial tile in its shared memory; between two cluster barriers (release / acquire) each
  CTA reads half of the tile's rows from both (``mapa`` + ``ld.shared::cluster``, in rank
  order) and writes them, epilogue on the way; the second barrier keeps a CTA's memory until
  the other has read it. No workspace, no second kernel: twice the CTAs even out a partial
  last wave (the block's projections at batch 8, 1024 x 768: 192 tiles of 64 x 64 put two on
  60 SMs and one on 72, 384 CTAs three on 120; H200, the down projection 0.72x -> 0.95x
  cuBLAS, q/k/v/o 0.94x -> 1.14x). Clusters of 4 (H200) won one row of four by 2%: not offered.
- **Launch order**: one block per tile, ``raster`` M tiles side by side (``grouped_tile``)
  so that a wave's B tiles are shared in L2.
- A subgraph task's elementwise epilogue is computed in the write-back (16-byte stores of C).

Scope: f32 in and out (the f32 rows of the GPU suite), the 4 layouts, M, N and K multiples of
the tiles (no guarded kernel: other shapes keep the TensorIR templates), M >= 128.

Measured (docs/BENCHMARKS.md, H100): 8192^3 0.92x cuBLAS, the gap in the issue rate.
"""
from __future__ import annotations

from ..template import KernelTemplate, epilogue_buffers, with_epilogue_params
from .common import busiest_sm_blocks, fallback_raster, grid_blocks, kernel_attrs
from .cuda_wgmma import grouped_tile

#: Floats of padding after each K row of a shared tile: the transposing stores of a
#: K-contiguous operand (threads of a warp on 2 or 4 rows of K) fall in distinct banks.
PAD = 4


#: Bytes of static shared memory a CUDA block may declare.
STATIC_SMEM = 48 * 1024


def sgemm_smem_bytes(block_m, block_n, block_k, slice_k=1, cluster_k=1):
    """Shared memory of a config (static up to ``STATIC_SMEM``, else dynamic): two K-major
    buffers of each tile for each slice of K, the partial tiles of all slices but the first,
    and (``cluster_k`` > 1) the CTA's own partial tile, read by its cluster."""
    return slice_k * 2 * block_k * (block_m + PAD + block_n + PAD) * 4 + \
        (slice_k - 1 + (cluster_k > 1)) * block_m * block_n * 4


def sgemm(wl, *, block_m: int, block_n: int, block_k: int, raster: int, min_blocks: int = 1,
          thread_n: int = 8, serpentine: int = 0, spread: int = 0, slice_k: int = 1,
          cluster_k: int = 1, target=None):
    """The PrimFunc of one config (see the module doc)."""
    from tvm import tirx  # noqa: PLC0415
    from tvm.script import tirx as T  # noqa: PLC0415

    batch, M, N, K = wl.batch, wl.M, wl.N, wl.K
    BM, BN, BK = block_m, block_n, block_k
    assert M % BM == 0 and N % BN == 0 and K % BK == 0 and BK % 4 == 0
    TN = thread_n  # a thread's columns: TN / 4 sub-tiles of 4, BN / (TN / 4) apart
    TXN, TYM = BN // TN, BM // 8  # threads along N, along M
    per_slice = TXN * TYM  # the threads of one slice of K (all of the block's without slices)
    SK = slice_k
    threads = per_slice * SK
    SN = TN // 4
    HM, HN = BM // 2, BN // SN  # the next sub-tile's offset
    SA, SB = BM + PAD, BN + PAD  # shared row strides
    CK = cluster_k  # CTAs of a cluster, each over its own K / CK
    assert K % (BK * SK * CK) == 0 and 8 % CK == 0
    KT = K // (BK * SK * CK)  # the K tiles of each slice
    nbm, nbn = M // BM, N // BN
    per_batch = nbm * nbn
    tiles = batch * per_batch
    group = max(1, min(raster, nbm))
    is_bmm = wl.op == "batch_matmul"
    lead = (batch,) if is_bmm else ()
    a_shape = lead + ((K, M) if wl.transpose_a else (M, K))
    b_shape = lead + ((N, K) if wl.transpose_b else (K, N))
    c_shape = lead + (M, N)
    a_kc, b_kc = not wl.transpose_a, bool(wl.transpose_b)  # K-contiguous operands
    na, nb = BM * BK // (4 * per_slice), BN * BK // (4 * per_slice)  # 16-byte loads a thread
    assert na * 4 * per_slice == BM * BK and nb * 4 * per_slice == BN * BK
    extras, epi = epilogue_buffers(wl)
    # spread: the next k step's fragment loads in groups of ``spread`` 16-byte words (A's 2,
    # then B's SN), each group after a row of FMAs; 0: all of them before the FMAs
    spread_on = bool(spread)
    assert not spread or -(-(2 + SN) // spread) <= 8, "a group after each of the 8 rows at most"
    fin = wl.final_dtype

    def gidx(bz, kc, r, k):
        """Global index of (row r of the M / N axis, k) of an operand (K-contiguous or not)."""
        return (bz,) * is_bmm + ((r, k) if kc else (k, r))

    def where(kc, R, q, tid):
        """(row, k) in the tile of the 4 elements of a thread's q-th 16-byte load: 4 of K
        (K-contiguous) or 4 rows (MN-contiguous)."""
        f = tid + q * per_slice
        if kc:
            return f // (BK // 4), f % (BK // 4) * 4
        return f % (R // 4) * 4, f // (R // 4)

    def tile_of(t):
        bm, bn = grouped_tile(tirx.truncmod(t, per_batch), group, nbm, nbn, tirx.truncdiv,
                              tirx.truncmod)
        return bm, bn, tirx.truncdiv(t, per_batch)

    # Static shared memory up to 48 KB (every config before 128 x 256 x 16 tiles), dynamic
    # (opt-in, up to the SM's) beyond: 128 x 256 x 16 is cuBLAS's f32 tile on sm_90.
    smem_scope = "shared" if sgemm_smem_bytes(BM, BN, BK, SK, CK) <= STATIC_SMEM \
        else "shared.dyn"
    attrs = kernel_attrs(target)

    @T.macro
    def to_regs(X, g, kc, R, n, row0, k0, tid, bz):
        """An operand's ``n`` 16-byte global loads of its K tile at ``k0`` into registers."""
        for q in T.unroll(n):
            r, kk = T.meta_var(where(kc, R, q, tid))
            for c in T.vectorized(4):
                g[q * 4 + c] = X[gidx(bz, kc, row0 + r + c * (1 - kc), k0 + kk + c * kc)]

    @T.macro
    def fragments(X, f, S, slot, st, k, t0, apart, parts, at=0):
        """A thread's fragment of k step ``k`` from shared buffer ``st`` (flat [2][BK][S])
        into register slot ``slot`` from its element ``at``: ``parts`` 16-byte words,
        ``apart`` elements apart from ``t0``."""
        for h in T.unroll(parts):
            for c in T.vectorized(4):
                f[slot, at + h * 4 + c] = X[st * BK * S + k * S + t0 + h * apart + c]

    @T.macro
    def word(As, Bs, fa, fb, ta, tb, w, slot, st, k):
        """Word ``w`` of a thread's fragments of k step ``k`` (A's 2 words from ``ta``, then
        B's SN from ``tb``) from shared buffer ``st`` into register slot ``slot``."""
        if w < 2:
            fragments(As, fa, SA, slot, st, k, ta + w * HM, 0, 1, w * 4)
        else:
            fragments(Bs, fb, SB, slot, st, k, tb + (w - 2) * HN, 0, 1, (w - 2) * 4)

    @T.macro
    def to_shared(X, g, kc, R, n, S, tid, st):
        """An operand's registers (its tile's global loads, ``n`` of 16 bytes) into its shared
        buffer ``X`` (rows of ``S``), buffer ``st``: 4 scalar stores a 16-byte load where the
        operand is K-contiguous (transposed on the way), else one 16-byte store. ``st.shared``
        instructions, which TVM's sync planner does not see (it would add a second barrier a
        K tile): the kernel's own barriers order them."""
        for q in T.unroll(n):
            r, kk = T.meta_var(where(kc, R, q, tid))
            if kc:
                for c in T.unroll(4):
                    T.ptx["st.shared.f32"](T.address_of(X[st * BK * S + (kk + c) * S + r]),
                                           g[q * 4 + c])
            else:
                T.ptx["st.shared.v4.f32"](T.address_of(X[st * BK * S + kk * S + r]),
                                          *[g[q * 4 + v] for v in range(4)])

    def sliced(tid):
        """(the thread's slice of K, its index among that slice's threads, the slice's first
        k); without slices (0, tid, 0), the kernel as it was before the knob."""
        if SK == 1:
            return 0, tid, 0
        sl = tirx.truncdiv(tid, per_slice)
        return sl, tirx.truncmod(tid, per_slice), sl * (KT * BK)

    def buf(sl, st):
        """The index of buffer ``st`` (0 or 1) of a slice of K's pair (flat [SK][2][BK][S])."""
        return st if SK == 1 else sl * 2 + st

    @T.macro
    def write_back(C, acc, bm, bn, bz, tx, ty, rows, row0):
        """The thread's outputs of its rows ``row0 ..`` (``rows`` of its 8, from ``acc``'s
        first rows) x TN, epilogue on the way, in 16-byte stores."""
        for i in T.unroll(rows):
            for w in T.unroll(SN):
                for c in T.vectorized(4):
                    idx = T.meta_var((bz,) * is_bmm + (
                        bm * BM + ty * 4 + (row0 + i) // 4 * HM + (row0 + i) % 4,
                        bn * BN + tx * 4 + w * HN + c))
                    C[idx] = epi(T.Cast(wl.out_dtype, acc[i, w * 4 + c]), idx)

    RC = 8 // CK  # cluster_k: the rows of its 8 that a thread sums over the cluster and writes

    @T.macro
    def cluster_barrier():
        """The cluster's barrier: arrive (release) and wait (acquire), as instructions that
        order memory (TVM's ``cluster_sync`` is an asm without a memory clobber: the compiler
        could move the partial tile's shared stores across it)."""
        T.ptx["barrier.cluster.arrive.release.aligned"]()
        T.ptx["barrier.cluster.wait.acquire.aligned"]()

    @T.macro
    def cluster_sum(C, acc, own, ra, tmp, bm, bn, bz, tx, ty, t, crank, first):
        """cluster_k: every CTA's partial tile (its ``first`` threads', the sum of its slices
        of K) into its shared memory (``own``, thread by thread: a warp's words contiguous);
        after the cluster's barrier each CTA sums its share of the tile's rows (a thread's
        rows ``crank * RC ..``) over the cluster's CTAs in rank order (``mapa`` + 4-byte
        ``ld.shared::cluster``; 16-byte words were slower on the H200 for the fallbacks'
        tiles) and writes them; a second barrier keeps every CTA's memory until the others
        have read it. Every thread meets both barriers."""
        if first:
            for i in T.unroll(8):
                for j in T.unroll(TN):
                    own[(i * TN + j) * per_slice + t] = acc[i, j]
        cluster_barrier()
        if first:
            for p in T.unroll(CK):
                T.ptx["mapa.shared::cluster.u32"](
                    ra[p], T.cuda.cvta_generic_to_shared(
                        T.address_of(own[crank * (RC * TN * per_slice) + t])), T.uint32(p))
            for i in T.unroll(RC):
                for j in T.unroll(TN):
                    acc[i, j] = T.float32(0)
                    for p in T.unroll(CK):
                        T.ptx["ld.shared::cluster.f32"](
                            tmp[0], ra[p] + T.uint32((i * TN + j) * per_slice * 4))
                        acc[i, j] = acc[i, j] + tmp[0]
            write_back(C, acc, bm, bn, bz, tx, ty, RC, crank * RC)
        cluster_barrier()

    @T.prim_func(check_well_formed=False)  # checked by with_epilogue_params
    def kernel(A: T.Buffer(a_shape, "float32"), B: T.Buffer(b_shape, "float32"),
               C: T.Buffer(c_shape, fin)):
        T.func_attr(attrs)
        if CK > 1:  # the CTAs of a cluster: one tile, each over its own K / CK
            crank = T.launch_thread("clusterCtaIdx.x", CK)
        else:
            crank = T.meta_var(0)
        bx = T.launch_thread("blockIdx.x", tiles * CK)
        tid = T.launch_thread("threadIdx.x", threads)
        # __launch_bounds__(threads, min_blocks): registers capped so that min_blocks fit
        T.attr({"tirx.launch_bounds_min_blocks_per_sm": min_blocks})
        # flat, so that buffer compaction keeps the padded row strides; a pair of buffers of
        # each operand for each slice of K
        As = T.alloc_buffer((SK * 2 * BK * SA,), "float32", scope=smem_scope)
        Bs = T.alloc_buffer((SK * 2 * BK * SB,), "float32", scope=smem_scope)
        ga = T.alloc_buffer((na * 4,), "float32", scope="local")
        gb = T.alloc_buffer((nb * 4,), "float32", scope="local")
        fa = T.alloc_buffer((2, 8), "float32", scope="local")
        fb = T.alloc_buffer((2, TN), "float32", scope="local")
        acc = T.alloc_buffer((8, TN), "float32", scope="local")
        # slice_k: the slice of K of this thread (its group of per_slice threads), its place
        # in the tile, its buffers and its first K tile
        sl, t, k_slice = T.meta_var(sliced(tid))
        k_base = T.meta_var(k_slice if CK == 1 else crank * (K // CK) + k_slice)
        tx = T.meta_var(t % TXN)
        ty = T.meta_var(t // TXN)
        bm, bn, bz = T.meta_var(tile_of(bx if CK == 1 else bx // CK))
        if CK > 1:
            own = T.alloc_buffer((8 * TN * per_slice,), "float32", scope=smem_scope)
            ra = T.alloc_buffer((CK,), "uint32", scope="local")
            tmp = T.alloc_buffer((1,), "float32", scope="local")  # a word of a CTA's tile
        else:
            own, ra, tmp = T.meta_var((None, None, None))
        for i in T.unroll(8):
            for j in T.unroll(TN):
                acc[i, j] = T.float32(0)
        # tile 0: global -> registers -> shared buffer 0
        to_regs(A, ga, a_kc, BM, na, bm * BM, k_base, t, bz)
        to_regs(B, gb, b_kc, BN, nb, bn * BN, k_base, t, bz)
        to_shared(As, ga, a_kc, BM, na, SA, t, buf(sl, 0))
        to_shared(Bs, gb, b_kc, BN, nb, SB, t, buf(sl, 0))
        T.tvm_storage_sync("shared")
        fragments(As, fa, SA, 0, buf(sl, 0), 0, ty * 4, HM, 2)
        fragments(Bs, fb, SB, 0, buf(sl, 0), 0, tx * 4, HN, SN)
        for kt in T.serial(KT):
            cur = T.meta_var(buf(sl, tirx.truncmod(kt, 2)))
            nxt = T.meta_var(buf(sl, 1 - tirx.truncmod(kt, 2)))
            if kt + 1 < KT:  # the next tile's global loads, in flight under this tile's FMAs
                to_regs(A, ga, a_kc, BM, na, bm * BM, k_base + (kt + 1) * BK, t, bz)
                to_regs(B, gb, b_kc, BN, nb, bn * BN, k_base + (kt + 1) * BK, t, bz)
            for k in T.unroll(BK):
                if k == BK - 1 and kt + 1 < KT:
                    # the next tile into the other buffer (read by nobody since the last
                    # barrier), then the one barrier of this tile
                    to_shared(As, ga, a_kc, BM, na, SA, t, nxt)
                    to_shared(Bs, gb, b_kc, BN, nb, SB, t, nxt)
                    T.tvm_storage_sync("shared")
                # the fragments of the next k step (the next tile's first from the other
                # buffer), loaded while this step's FMAs run
                if not spread:
                    if k < BK - 1:
                        fragments(As, fa, SA, (k + 1) % 2, cur, k + 1, ty * 4, HM, 2)
                        fragments(Bs, fb, SB, (k + 1) % 2, cur, k + 1, tx * 4, HN, SN)
                    elif kt + 1 < KT:
                        fragments(As, fa, SA, 0, nxt, 0, ty * 4, HM, 2)
                        fragments(Bs, fb, SB, 0, nxt, 0, tx * 4, HN, SN)
                for i in T.unroll(8):
                    for jj in T.unroll(TN):
                        # serpentine: odd rows right to left (the last B register reused)
                        j = T.meta_var(jj + serpentine * (i % 2) * (TN - 1 - 2 * jj))
                        acc[i, j] = acc[i, j] + fa[k % 2, i] * fb[k % 2, j]
                    if spread_on and i * spread < 2 + SN:
                        # this row's group of the next k step's words, after a warp fence that
                        # ptxas does not move them above (see the module doc). One condition,
                        # not if / elif on k: TVM 0.27's lowering of an elif under these
                        # unrolled loops guarded the first branch's loads by the second's
                        # condition (wrong answers on the H100).
                        T.evaluate(T.call_extern("void", "__syncwarp"))
                        # the next step's from this buffer; the last step's: the next
                        # tile's first, from the other (where there is a next tile)
                        for q in T.unroll(max(spread, 1)):
                            if i * spread + q < 2 + SN and (k < BK - 1 or kt + 1 < KT):
                                word(As, Bs, fa, fb, ty * 4, tx * 4, i * spread + q,
                                     (k + 1) % 2, T.if_then_else(k < BK - 1, cur, nxt),
                                     T.if_then_else(k < BK - 1, k + 1, 0))
        if SK > 1:
            # the slices after the first put their partial tiles in shared memory (thread by
            # thread: a warp's stores fall in distinct banks); the first adds them to its own
            red = T.alloc_buffer(((SK - 1) * 8 * TN * per_slice,), "float32",
                                 scope=smem_scope)
            if sl > 0:
                for i in T.unroll(8):
                    for j in T.unroll(TN):
                        red[(((sl - 1) * 8 + i) * TN + j) * per_slice + t] = acc[i, j]
            T.tvm_storage_sync("shared")
            if sl == 0:
                for s in T.unroll(SK - 1):
                    for i in T.unroll(8):
                        for j in T.unroll(TN):
                            acc[i, j] = acc[i, j] + red[((s * 8 + i) * TN + j) * per_slice + t]
                if CK == 1:
                    write_back(C, acc, bm, bn, bz, tx, ty, 8, 0)
            if CK > 1:
                cluster_sum(C, acc, own, ra, tmp, bm, bn, bz, tx, ty, t, crank, sl == 0)
        elif CK > 1:
            cluster_sum(C, acc, own, ra, tmp, bm, bn, bz, tx, ty, t, crank, True)
        else:
            write_back(C, acc, bm, bn, bz, tx, ty, 8, 0)

    return with_epilogue_params(kernel, extras)


def kernel_from_config(wl, cfg, facts, target, sizes=None):
    assert sizes is None, "the SGEMM template has no shape-family kernel"
    return sgemm(wl, **cfg.values_dict(), target=target)  # the knobs are its parameters


def fallback_sgemm(space, wl, facts):
    """From the H100 sweeps of docs/BENCHMARKS.md (``--sweep sgemm.cuda``): 8 x 8 thread tiles
    (2 x 2 sub-tiles) with the serpentine FMA order, block_k 16 where K allows (else 8); the
    largest block tile that gives 3/4 of a wave of blocks or more, not 128 x 128 where K is
    under 512 (the seed bmm, K = 64: 64 x 128 1.25x cuBLAS, 128 x 128 0.89-1.06x), unless a
    smaller tile gives the busiest SM a fifth less of the output (``_busiest``); two blocks
    an SM (registers capped at 128) where the tiles make several waves (8192^3: 0.91x against
    0.84x), one where they make about one (1024^3: 1.04x against 0.99x); K over a cluster of
    2 CTAs where that gives the busiest SM a fifth less of the work, then K in slices where
    its warps are few."""
    shapes = [(128, 128), (64, 128), (128, 64), (64, 64)]
    if wl.K < 512:
        shapes = shapes[1:]
    fit = [(m, n) for m, n in shapes if wl.M % m == 0 and wl.N % n == 0] or [(64, 64)]
    tiles = {(m, n): grid_blocks(wl, m, n) for m, n in fit}
    bm, bn = next((t for t in fit if 4 * tiles[t] >= 3 * facts["num_sms"]),
                  max(fit, key=lambda t: tiles[t]))
    # The tiles' last wave: the block's up projection (512x3072x768, H200) in 192 tiles of
    # 64 x 128 puts two on 60 SMs and one on 72 (82.9 us); 384 of 64 x 64 put three on 120
    # (59.0 us with K in 2 slices, 1.11x cuBLAS)
    smaller = [t for t in fit if t[0] * t[1] < bm * bn
               and 5 * _busiest(wl, t, facts) <= 4 * _busiest(wl, (bm, bn), facts)]
    if smaller:
        bm, bn = min(smaller, key=lambda t: (_busiest(wl, t, facts), -t[0] * t[1]))
    waves = tiles[(bm, bn)] / (2 * facts["num_sms"])
    bk = 16 if wl.K % 16 == 0 else 8
    # K over a cluster of 2 CTAs (sm_90; each CTA 8 K tiles or more) where it gives the
    # busiest SM a fifth less of the work: the block's down projection at batch 8
    # (1024x768x3072, H200) in 192 tiles of 64 x 64 put two on 60 SMs and one on 72 (156.6 us
    # with K in 2 slices); 384 CTAs of half its K put three on 120 (119.0 us)
    ck = 2 if (facts.get("sm", 0) >= 90 and wl.K % (bk * 2) == 0 and wl.K // (bk * 2) >= 8
               and 5 * _busiest(wl, (bm, bn), facts, 2)
               <= 4 * _busiest(wl, (bm, bn), facts)) else 1
    # Tiles of fewer than 4 warps that leave the busiest SM under 8 warps: K in slices (the
    # fewest of 2, 4 that give it 8, else the most K allows), so that an SM's four schedulers
    # have warps to issue (the block's projections on the H200: 96 tiles of 64 x 64 on 132
    # SMs, 4 slices 1.9-2.1x faster than none, 2 slices 1.8-1.9x; the up projection's 384
    # tiles, three an SM: 2 slices 59.0 us, 4 66.4, none 77.2)
    threads = bm * bn // 64
    warps = busiest_sm_blocks(ck * tiles[(bm, bn)], facts) * threads // 32
    slices = [s for s in (2, 4) if threads < 128 and warps < 8 and threads * s <= 256
              and wl.K % (bk * s * ck) == 0 and wl.K // (bk * s * ck) >= 4]
    sk = next((s for s in slices if warps * s >= 8), max(slices, default=1))
    return {"block_m": bm, "block_n": bn, "thread_n": 8, "block_k": bk,
            "min_blocks": 2 if waves >= 2 else 1, "serpentine": 1, "slice_k": sk,
            "cluster_k": ck, "raster": fallback_raster(wl, facts, bm, bn, below_column=True)}


def _busiest(wl, tile, facts, ctas: int = 1) -> float:
    """Work of the SM that takes the most blocks of the grid of ``tile``-sized tiles, each
    tile's K over ``ctas`` blocks (``cluster_k``): its blocks' outputs, each over K / ctas."""
    return busiest_sm_blocks(ctas * grid_blocks(wl, *tile), facts) * tile[0] * tile[1] / ctas


def check_sgemm(wl, facts):
    if wl.M % 64 or wl.N % 64 or wl.K % 8:
        return f"M and N must be multiples of 64 and K of 8 (got {wl.M}, {wl.N}, {wl.K}); " \
               "other shapes take the TensorIR templates"
    if wl.M < 128:
        return f"M = {wl.M} < 128: the small-M templates serve it"
    return None


def early_launch(wl, names, facts) -> bool:
    """Programmatic dependent launch only for a grid of at most one block an SM. Launched
    early, a kernel's blocks are placed while the kernel before it still holds part of the
    GPU. The f32 block's up projection (then 192 blocks of 64 x 128, up to 3 an SM) after the
    output projection (96 blocks on 132 SMs) took 117.6 us with it and 83.2 without on the
    H200: what its blocks piling up 3 deep on the 36 SMs left free (not 2 deep, as launched
    on an idle GPU) would cost; the placement itself was not observed. Grids within one block
    an SM, where launch latency matters, keep it (the whole block 0.345 ms with, 0.355
    without). A cluster's CTAs are blocks of the grid (``cluster_k``)."""
    return grid_blocks(wl, names["block_m"], names["block_n"]) * names.get("cluster_k", 1) \
        <= facts["num_sms"]


def _template(op):
    return KernelTemplate(
        name=f"{op}_sgemm.cuda", op=op, target_kind="cuda", kernel=kernel_from_config,
        fallback=fallback_sgemm, check=check_sgemm, dtypes=("float32",), priority=2,
        epilogues=True, early_launch=early_launch)


DENSE_SGEMM = _template("dense")
BATCH_MATMUL_SGEMM = _template("batch_matmul")
