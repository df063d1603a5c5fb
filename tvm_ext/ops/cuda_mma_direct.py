"""Small tensor-core GEMMs with no shared-memory staging: ``dense_mma_direct.cuda`` and
``batch_matmul_mma_direct.cuda``.

Where the whole GEMM is a few microseconds (512x16x512, a decode step's 16 x 4096 x 4096), the
time is a chain of latencies, not throughput: the mma template (``cuda_tensorcore``) copies
each K tile global -> shared (``cp.async``), waits at a barrier, reads it into fragments
(``ldmatrix``) and only then multiplies. This kernel loads the fragments from global memory
straight into the mma.sync operand registers, with 16-byte loads:

- **The K permutation.** A sum over K may take its terms in any order, as long as A and B take
  the same one. In ``mma.sync.m16n8k16`` (f16, bf16) and ``m16n8k32`` (int8) lane ``4 g + t``
  holds, of its A rows g and g + 8 and its B column g, the same two 4-byte K slots ("lo":
  a0 / a1 / b0, "hi": a2 / a3 / b1), t choosing which. Here lane ``4 g + t`` loads 16
  contiguous bytes (4 words) of each of its rows (and of its B column, B stored [N, K]) at
  byte ``16 t`` of a 64-byte K group; words 0 and 1 fill the lo and hi slots of the group's
  first mma, words 2 and 3 those of its second. Every element of the group meets its partner
  exactly once; one 16-byte load of each row feeds two MMAs, and no lane exchanges anything.
- **Warps.** A warp computes ``warp_m`` x ``warp_n`` mma tiles (16 x 8 each) over its share of
  K; a block is ``block_warps_m`` x ``block_warps_n`` such warp tiles, times ``slice_k`` warps
  along K (CUTLASS's sliced-K): slice s takes the s-th contiguous part of K, and the slices'
  accumulators meet in shared memory (16-byte ``st.shared`` by lanes in order: no bank
  conflicts; one barrier), where slice 0 adds them and writes C (with a subgraph task's
  epilogue) in pairs of columns.
- **Loads ahead.** Each warp's K share is ``unroll`` groups a batch; the next batch's loads are
  issued before this batch's MMAs (two register buffers; the batch loop is unrolled, so the
  buffers stay in registers).

Scope: both operands K-major (dense NT: A [M, K], B [N, K]; batch_matmul NT), f16 / bf16 ->
f32 or the input dtype (f32 accumulation), int8 -> int32; M a multiple of the block's rows, N
of its columns, K of 64 bytes x ``slice_k`` x ``unroll``; no shape families.

Measured (docs/BENCHMARKS.md, H100): faster than the mma template on 512x16x512 and 512x32x512
f16 (2.07-2.12x cuBLAS against 2.01-2.03x; those two records are shipped), slower on the other
small rows. Priority 0: it runs where a record names it.
"""
from __future__ import annotations

from ..template import KernelTemplate, epilogue_buffers, with_epilogue_params
from ..workload import DTYPE_BYTES
from .common import kernel_attrs

#: Input dtype -> (mma shape, operand type, accumulator type, accumulator dtype, outputs).
_MMA = {"float16": ("m16n8k16", "fp16", "fp32", "float32", ("float32", "float16")),
        "bfloat16": ("m16n8k16", "bf16", "fp32", "float32", ("float32", "bfloat16")),
        "int8": ("m16n8k32", "int8", "int32", "int32", ("int32",))}

#: Words (4 bytes) of a row in one K group: 4 lanes x one 16-byte load.
GROUP_WORDS = 16


def direct_regs(warp_m, warp_n, unroll):
    """32-bit registers of a thread's operand buffers (two batches) and accumulators."""
    return 2 * unroll * (8 * warp_m + 4 * warp_n) + 4 * warp_m * warp_n


def direct_smem_bytes(warp_m, warp_n, block_warps_m, block_warps_n, slice_k):
    """Shared memory of the slices' sum: the accumulators of every slice but the first."""
    return (slice_k - 1) * block_warps_m * block_warps_n * warp_m * warp_n * 128 * 4


def mma_direct(wl, *, warp_m: int, warp_n: int, block_warps_m: int, block_warps_n: int,
               slice_k: int, unroll: int, target=None):
    """The PrimFunc of one config (see the module doc)."""
    from tvm.script import tirx as T  # noqa: PLC0415

    batch, M, N, K = wl.batch, wl.M, wl.N, wl.K
    shape, ab, cb, acc_t, _ = _MMA[wl.dtype]
    KW = K * DTYPE_BYTES[wl.dtype] // 4  # words of a row
    WM, WN = 16 * warp_m, 8 * warp_n  # a warp's tile
    BM, BN = WM * block_warps_m, WN * block_warps_n  # a block's
    assert M % BM == 0 and N % BN == 0 and KW % (GROUP_WORDS * slice_k * unroll) == 0
    share = KW // slice_k  # words of K a slice takes
    NB = share // (GROUP_WORDS * unroll)  # batches of a warp
    W = block_warps_m * block_warps_n  # warp tiles of a block
    threads = 32 * W * slice_k
    nbm, nbn = M // BM, N // BN
    blocks = batch * nbm * nbn
    MN = warp_m * warp_n
    is_bmm = wl.op == "batch_matmul"
    lead = (batch,) if is_bmm else ()
    a_shape, b_shape, c_shape = lead + (M, K), lead + (N, K), lead + (M, N)
    extras, epi = epilogue_buffers(wl)
    red_words = (slice_k - 1) * W * MN * 128
    st_v4 = "st.shared.v4.f32" if acc_t == "float32" else "st.shared.v4.s32"
    attrs = kernel_attrs(target)

    @T.macro
    def load(Aw, Bw, fa, fb, buf, j, arow, bcol, kw0):
        """Batch j of a lane's words: 4 of each of its A rows and B columns a group."""
        for u in T.unroll(unroll):
            kw = T.meta_var(kw0 + (j * unroll + u) * GROUP_WORDS)
            for mi in T.unroll(warp_m):
                for h in T.unroll(2):
                    for v in T.vectorized(4):
                        fa[buf, u, mi, h, v] = Aw[(arow + mi * 16 + h * 8) * KW + kw + v]
            for ni in T.unroll(warp_n):
                for v in T.vectorized(4):
                    fb[buf, u, ni, v] = Bw[(bcol + ni * 8) * KW + kw + v]

    @T.macro
    def multiply(fa, fb, am, bf, acc, buf):
        """The batch's MMAs: two a group (words 0 / 1, then 2 / 3, as the lo / hi slots). The
        operands are copied into ``am`` / ``bf`` (register moves that nvcc removes): TVM
        retypes a local buffer read only by 16-byte loads (``fa``, ``fb``) as an array of
        ``uint4``, which the mma's element offsets would then misaddress."""
        for u in T.unroll(unroll):
            for s in T.unroll(2):
                for mi in T.unroll(warp_m):
                    am[0] = fa[buf, u, mi, 0, 2 * s]
                    am[1] = fa[buf, u, mi, 1, 2 * s]
                    am[2] = fa[buf, u, mi, 0, 2 * s + 1]
                    am[3] = fa[buf, u, mi, 1, 2 * s + 1]
                    for ni in T.unroll(warp_n):
                        bf[0] = fb[buf, u, ni, 2 * s]
                        bf[1] = fb[buf, u, ni, 2 * s + 1]
                        T.evaluate(T.ptx_legacy.mma(
                            shape, "row", "col", ab, ab, cb, am.data, 0, bf.data, 0,
                            acc.data, (mi * warp_n + ni) * 4, False, dtype=acc_t))

    @T.prim_func(check_well_formed=False)  # checked by with_epilogue_params
    def kernel(A: T.Buffer(a_shape, wl.dtype), B: T.Buffer(b_shape, wl.dtype),
               C: T.Buffer(c_shape, wl.final_dtype)):
        T.func_attr(attrs)
        bx = T.launch_thread("blockIdx.x", blocks)
        tid = T.launch_thread("threadIdx.x", threads)
        Aw = T.decl_buffer((batch * M * KW,), "uint32", data=A.data)
        Bw = T.decl_buffer((batch * N * KW,), "uint32", data=B.data)
        fa = T.alloc_buffer((2, unroll, warp_m, 2, 4), "uint32", scope="local")
        fb = T.alloc_buffer((2, unroll, warp_n, 4), "uint32", scope="local")
        am = T.alloc_buffer((4,), "uint32", scope="local")
        bf = T.alloc_buffer((2,), "uint32", scope="local")
        acc = T.alloc_buffer((MN * 4,), acc_t, scope="local")
        if slice_k > 1:  # the slices' accumulators
            red = T.alloc_buffer((red_words,), acc_t, scope="shared")
        warp = T.meta_var(tid // 32)
        lane = T.meta_var(tid % 32)
        sl = T.meta_var(warp // W)  # this warp's slice of K
        w = T.meta_var(warp % W)  # its warp tile
        bz = T.meta_var(bx // (nbm * nbn))
        bm = T.meta_var(bx % (nbm * nbn) // nbn)
        bn = T.meta_var(bx % nbn)
        row0 = T.meta_var(bm * BM + w // block_warps_n * WM)
        col0 = T.meta_var(bn * BN + w % block_warps_n * WN)
        arow = T.meta_var(bz * M + row0 + lane // 4)
        bcol = T.meta_var(bz * N + col0 + lane // 4)
        kw0 = T.meta_var(sl * share + lane % 4 * 4)
        for i in T.unroll(MN * 4):
            acc[i] = T.Cast(acc_t, 0)
        load(Aw, Bw, fa, fb, 0, 0, arow, bcol, kw0)
        for j in T.unroll(NB):
            if j + 1 < NB:  # the next batch's loads, in flight under this batch's MMAs
                load(Aw, Bw, fa, fb, (j + 1) % 2, j + 1, arow, bcol, kw0)
            multiply(fa, fb, am, bf, acc, j % 2)
        if slice_k > 1:
            # the other slices' accumulators, lane by lane in 16-byte words (st.shared: the
            # barrier below is the only synchronisation)
            if sl > 0:
                for mn in T.unroll(MN):
                    T.ptx[st_v4](
                        T.address_of(red[(((sl - 1) * W + w) * MN + mn) * 128 + lane * 4]),
                        *[acc[mn * 4 + v] for v in range(4)])
            T.tvm_storage_sync("shared")
        if sl == 0:
            if slice_k > 1:
                for s in T.unroll(slice_k - 1):
                    for mn in T.unroll(MN):
                        for v in T.vectorized(4):
                            acc[mn * 4 + v] = acc[mn * 4 + v] + red[
                                ((s * W + w) * MN + mn) * 128 + lane * 4 + v]
            for mi in T.unroll(warp_m):
                for ni in T.unroll(warp_n):
                    for h in T.unroll(2):
                        for v in T.vectorized(2):
                            idx = T.meta_var((bz,) * is_bmm + (
                                row0 + mi * 16 + h * 8 + lane // 4,
                                col0 + ni * 8 + lane % 4 * 2 + v))
                            C[idx] = epi(T.Cast(wl.out_dtype,
                                                acc[(mi * warp_n + ni) * 4 + h * 2 + v]), idx)

    return with_epilogue_params(kernel, extras)


def kernel_from_config(wl, cfg, facts, target, sizes=None):
    assert sizes is None, "the direct mma template has no shape-family kernel"
    return mma_direct(wl, **cfg.values_dict(), target=target)  # the knobs are its parameters


def fallback_direct(space, wl, facts):
    """Untuned: a warp as wide as N allows (up to 4 mma tiles, 32 columns) and 16 rows; as
    many K slices (up to 8) as the K groups allow; each warp's groups in batches of up to 4,
    as its registers allow."""
    warp_n = next(n for n in (4, 2, 1) if wl.N % (8 * n) == 0)
    for slices in (8, 4, 2, 1):
        for unroll in (4, 2, 1):
            cfg = {"warp_m": 1, "warp_n": warp_n, "block_warps_m": 1, "block_warps_n": 1,
                   "slice_k": slices, "unroll": unroll}
            if not space.violations(space.config_from_values(cfg)):
                return cfg
    return cfg


def check_direct(wl, facts):
    """Why the template does not apply (None when it does)."""
    if facts.get("sm", 0) < 80:
        return f"needs sm_80 or newer (target is sm_{facts.get('sm')})"
    outs = _MMA[wl.dtype][4]
    if wl.out_dtype not in outs:
        return f"{wl.dtype} -> {wl.out_dtype} (supported: {', '.join(outs)})"
    kbytes = wl.K * DTYPE_BYTES[wl.dtype]
    if wl.M % 16 or wl.N % 8 or kbytes % 64:
        return (f"M must be a multiple of 16, N of 8 and K of 64 bytes (got {wl.M}x{wl.N}x"
                f"{wl.K} {wl.dtype}): the kernel has no guarded tiles")
    return None


def _template(op):
    return KernelTemplate(
        name=f"{op}_mma_direct.cuda", op=op, target_kind="cuda", kernel=kernel_from_config,
        fallback=fallback_direct, check=check_direct, dtypes=tuple(_MMA), layouts=("NT",),
        priority=0, epilogues=True)


DENSE_MMA_DIRECT = _template("dense")
BATCH_MATMUL_MMA_DIRECT = _template("batch_matmul")
