"""``dense_mma.cuda`` / ``batch_matmul_mma.cuda``: ldmatrix + mma.sync, cp.async pipeline.

Same grid / warp / fragment tiling as the wmma template, on the PTX-level instructions:
- global -> shared with 16-byte cp.async copies, ``stages``-deep software pipeline over the
  K tiles (stage s loads tile k + s - 1 while tile k is computed), so the loads' latency hides
  behind tensor-core work; stages = 1 is a plain synchronous load;
- shared -> registers with ldmatrix (x4), which also transposes f16 tiles stored [K, M] / [K, N],
  so every layout runs without a transposing copy; int8 has no ldmatrix transpose, so an int8 A
  stored [K, M] is transposed on its way into shared memory;
- the fragment loads of step k1 + 1 are issued before the mma.sync of step k1 (register double
  buffer);
- rows padded by ``offset`` elements against ldmatrix bank conflicts;
- accumulators straight to global when the shape is aligned (``stage_c`` = 0); a padded shape,
  or stage_c = 1, goes through a C tile in shared memory, written out (cropped, cast) by all
  threads with 16-byte reads of the tile;
- f16 -> f16 accumulates in f32 (as cuBLAS does) and casts at the write-back; bf16 inputs
  (bf16 or f32 output) run the same kernel on bf16 ldmatrix / mma.sync intrinsics of our own
  (TVM 0.27 registers f16 and int8 ones only), always accumulating in f32;
- ``raster`` groups the launch order of the blocks for L2 reuse.
One mma tile is 16 x 16 x 16 (f16) or 16 x 16 x 32 (int8): two m16n8k16 / m16n8k32 instructions.

Split-K (``split_k`` of dense_mma): K is cut into slices, each computed by its own blocks (a
grid dimension) into a global buffer of partial sums, which a second kernel adds and casts. For
aligned shapes with small grids only (the space's rule); a fused Relax function, whose compute
is not ours, gets the record's tiles without the split.

Sliced-K (``slice_k`` of dense_mma, CUTLASS's "sliced-K"): the block has ``slice_k`` groups of
warps; each shared-memory K tile holds ``slice_k`` steps of chunk x 16 (int8: x 32), and group
s computes step s of every tile into its own accumulators. The dependent chain of mma.sync on
one accumulator (about 32 cycles each) is ``slice_k`` times shorter, which is what bounds a
small grid over a long K (512 x 16 x 512 on one-warp 16 x 16 tiles: 32 blocks, each a chain of
32 dependent pairs of mma.sync). The groups' partial tiles meet in shared memory, where all
threads add them, cast, and write the output: one kernel. Aligned shapes without a fused
epilogue only (the space's rule).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...template import ScheduleTemplate
from ..common import (CAST_BLOCK, MATMUL_BLOCK, SLICE_SUM_BLOCK, SPLIT_SUM_BLOCK, element_at,
                      f32_acc_dtype, matmul_compute)
from . import intrin
from .fallback import check_tc, fallback_tc
from .tiling import (FRAG, WarpTiling, copy_vec, fragments, has_block, has_epilogue,
                     inline_consumer, lead, mma_k, spread, stage_shared, tile_fragment, tile_grid,
                     transpose)


@dataclass(frozen=True)
class MmaConfig:
    tiling: WarpTiling
    stages: int  # depth of the cp.async pipeline
    offset: int  # shared row padding (elements)
    vec: int  # elements per global -> shared copy
    raster: int = 1  # M tiles per group of the block launch order
    stage_c: int = 0  # write the output through shared memory
    split_k: int = 1  # K slices over blocks (dense_mma only)
    slice_k: int = 1  # K slices over the warps of a block (dense_mma only)

    @staticmethod
    def from_knobs(cfg) -> "MmaConfig":
        return MmaConfig(WarpTiling.from_knobs(cfg), cfg["stages"].val, cfg["offset"].val,
                         cfg["vec"].val, cfg["raster"].val, cfg["stage_c"].val, split_of(cfg),
                         slice_of(cfg))


def _ldmatrix_map(I, rows, cols):
    fn = {(16, 16): I.shared_16x16_to_ldmatrix_32x8_layout,
          (16, 32): I.shared_16x32_to_ldmatrix_32x16_layout,
          (32, 16): I.shared_32x16_to_ldmatrix_32x16_layout}[(rows, cols)]

    def index_map(*x):
        r, c = x[-2], x[-1]
        return (*lead(x), r // rows, c // cols, *fn(r % rows, c % cols))
    return index_map


def mma_compute(wl, split_k=1, slice_k=1, step_k=None):
    """The plain matmul, accumulated in ``f32_acc_dtype`` and cast to out_dtype if that
    differs (the cast block "C_cast" is inlined into the write-back). With ``split_k`` > 1
    (dense only) the K range is cut in ``split_k`` slices: block "C" computes the partial
    products P[s, M, N] of each slice (accumulator dtype, a global buffer; the slice is one more
    grid dimension), and block "C_sum" adds the slices and casts, a second small kernel.
    With ``slice_k`` > 1, ``sliced_compute`` (K steps of ``step_k``)."""
    acc = f32_acc_dtype(wl)
    if split_k > 1:
        return _split_k_compute(wl, split_k, acc)
    if slice_k > 1:
        return sliced_compute(wl, slice_k, step_k, acc)
    return matmul_compute(wl, acc=acc)


def sliced_compute(wl, slices, step, acc):
    """Sliced-K: block "C" computes P[.., s, M, N], the products of K steps s, s + slices,
    s + 2 slices, .. (steps of ``step`` elements: step t covers K from t * step), block
    "C_slices" adds the ``slices`` partial tiles (a reduction over s, in the accumulator
    dtype), and "C_cast" casts where the output dtype differs. The schedule keeps P in shared
    memory and binds s to the block's warps (``tile_grid``'s ``sliced``)."""
    from tvm import te  # noqa: PLC0415
    assert wl.K % (slices * step) == 0, (wl, slices, step)
    A, B, partial = _partial_products(
        wl, wl.K // slices, lambda s, k: (k // step * slices + s) * step + k % step, acc)
    batch = (wl.batch,) if wl.op != "dense" else ()
    P = te.compute(batch + (slices, wl.M, wl.N),
                   lambda *idx: partial(idx[:-3], *idx[-3:]), name=MATMUL_BLOCK)
    r = te.reduce_axis((0, slices), name="s")
    total = te.compute(batch + (wl.M, wl.N),
                       lambda *idx: te.sum(P[idx[:-2] + (r,) + idx[-2:]], axis=r),
                       name=SLICE_SUM_BLOCK)
    if acc == wl.out_dtype:
        return [A, B, total]
    return [A, B, te.compute(total.shape, lambda *i: total(*i).astype(wl.out_dtype),
                             name=CAST_BLOCK)]


def _split_k_compute(wl, split, acc):
    from tvm import te  # noqa: PLC0415
    assert wl.op == "dense" and wl.K % split == 0, (wl, split)
    kc = wl.K // split
    A, B, partial = _partial_products(wl, kc, lambda s, k: s * kc + k, acc)
    P = te.compute((split, wl.M, wl.N), lambda s, i, j: partial((), s, i, j),
                   name=MATMUL_BLOCK)

    def total(i, j):
        v = P[0, i, j]
        for s in range(1, split):
            v = v + P[s, i, j]
        return v.astype(wl.out_dtype)

    return [A, B, te.compute((wl.M, wl.N), total, name=SPLIT_SUM_BLOCK)]


def _partial_products(wl, k_len, k_of, acc):
    """A, B and the body of split-K's and sliced-K's block "C", ``partial(lead, s, i, j)``:
    the products of row i and column j over the K indices ``k_of(s, k)``, k < ``k_len``,
    accumulated in ``acc`` (``lead``: the batch index, or ())."""
    from tvm import te  # noqa: PLC0415
    A = te.placeholder(wl.a_shape, wl.dtype, name="A")
    B = te.placeholder(wl.b_shape, wl.dtype, name="B")
    k = te.reduce_axis((0, k_len), name="k")
    a_at, b_at = element_at(wl, A, B)

    def partial(lead_, s, i, j):
        kk = k_of(s, k)
        return te.sum(a_at(lead_, i, kk).astype(acc) * b_at(lead_, j, kk).astype(acc), axis=k)

    return A, B, partial


def _mma_names(I, wl, acc, store_dtype, scope, c_scope, a_trans):
    short = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int8": "i8",
             "int32": "i32"}
    ind, outd = short[wl.dtype], short[acc]
    dyn = "_dyn" if scope == "shared.dyn" else ""
    ta = "_trans" if a_trans else ""
    tb = "_trans" if wl.transpose_b else ""
    load_a = f"mma_ldmatrix_{ind}_a{ta}{dyn}"
    load_b = f"mma_ldmatrix_{ind}_b{tb}{dyn}"
    compute = f"mma_{ind}{ind}{outd}" + ("_trans_a" if a_trans else "") + \
        ("_trans_b" if wl.transpose_b else "")
    if wl.dtype == "bfloat16":  # TVM registers no bf16 mma intrinsics: ours
        load_a = intrin.register_once("tvm_ext_" + load_a, lambda: intrin.ldmatrix_bf16(
            "A", a_trans, scope))
        load_b = intrin.register_once("tvm_ext_" + load_b, lambda: intrin.ldmatrix_bf16(
            "B", wl.transpose_b, scope))
        compute = intrin.register_once("tvm_ext_" + compute, lambda: intrin.mma_bf16(
            a_trans, wl.transpose_b))
    if wl.dtype == "int8" and dyn:  # TVM registers the int8 loads for static shared only
        load_a = intrin.register_once("tvm_ext_" + load_a, lambda: I.get_ldmatrix_intrin(
            32, "int8", "A", False, scope))
        load_b = intrin.register_once("tvm_ext_" + load_b, lambda: I.get_ldmatrix_intrin(
            32, "int8", "B", wl.transpose_b, scope))
    fill = f"mma_fill_16x16_{outd}"
    # TVM registers the stores to global; ours for the static shared C tile, and for a store
    # to global that casts.
    if c_scope == "global" and acc != store_dtype:
        store = intrin.register_once(f"tvm_ext_mma_store_16x16_{outd}_{short[store_dtype]}"
                                     "_global", lambda: intrin.mma_cast_store(acc, store_dtype))
    elif c_scope == "global":
        store = f"mma_store_16x16_{outd}_global_"
    else:
        store = intrin.register_once(f"tvm_ext_mma_store_16x16_{outd}_shared",
                                     lambda: I.get_mma_store_intrin(acc, 8, "shared", True))
    return load_a, load_b, compute, fill, store


def schedule_mma(sch, wl, config: MmaConfig, *, scope="shared.dyn"):
    I = intrin.load_cuda()
    chunk, stages, offset, vec = config.tiling.chunk, config.stages, config.offset, config.vec
    int8 = wl.dtype == "int8"
    kf = mma_k(wl)
    # split_k > 1 is a property of our compute (block "C_sum"); a fused Relax function has
    # its own compute, and there the config's tiles are applied without the split.
    split = config.split_k > 1 and has_block(sch, SPLIT_SUM_BLOCK)
    sliced = config.slice_k > 1 and has_block(sch, SLICE_SUM_BLOCK)
    # Before blockize hides the consumers:
    epilogue = has_epilogue(sch, sch.get_sblock(MATMUL_BLOCK))
    if sliced and epilogue:
        raise ValueError("slice_k > 1 takes no fused epilogue (the space's rule)")
    c, outer, j0, k0, k1, warp, pad = tile_grid(sch, wl, config.tiling, kf, config.raster,
                                                sliced=sliced)
    nwarps = config.tiling.warps * (config.slice_k if sliced else 1)
    # The accumulator dtype is the matmul block's: f32 for f16 inputs in our compute, f16 in
    # the plain f16 -> f16 PrimFunc of a fused Relax function.
    acc = sch.get(c).writes[0].source.dtype
    # Aligned shapes with stage_c = 0: accumulators straight to global (casting if needed).
    # Padded ones, or stage_c = 1: through a C tile in static shared memory, written out
    # (cropped, cast) by all threads. (Sharing the dynamic buffer of the A/B tiles, as wmma
    # does, trips TVM 0.27's StorageRewrite: it gives the f32 C tile the f16 tile's
    # allocation, and disabling StorageRewrite breaks the warp-memory lowering.)
    # A fused Relax epilogue is inlined into the write-back by the caller: only the staged
    # write-back is a plain loop nest it can be inlined into.
    # What the write-back stores: the output dtype (a cast from acc where they differ), or for
    # split-K and sliced-K the partial sums, in acc.
    # Sliced-K: the partial tiles P[s] of the block stay in static shared memory; block
    # "C_slices" (all threads) adds them in registers, and they go out cast, as vectors.
    store_dtype = acc if split or sliced else wl.out_dtype
    staged = (pad or config.stage_c or epilogue) and not sliced
    c_scope = "shared" if staged or sliced else "global"
    if staged:
        cs = sch.cache_write(outer, 0, "shared")
    if sliced:
        sch.set_scope(outer, 0, "shared")
    c_warp = sch.cache_write(outer, 0, "warp")
    sch.reverse_compute_at(c_warp, warp)
    if staged:
        sch.reverse_compute_at(cs, j0)
        spread(sch, cs, 2, nwarps, 4)  # 16-byte reads of the f32 / int32 tile
    elif sliced:
        _schedule_slice_sum(sch, j0, nwarps, config.tiling)
    elif acc != store_dtype:  # the store to global casts
        inline_consumer(sch, c_warp)
    a_trans = wl.transpose_a and not int8
    for idx in (0, 1):
        transposing = idx == 0 and wl.transpose_a and int8  # no ldmatrix transpose for 8 bits
        stage_shared(sch, outer, idx, scope, k0, nwarps,
                      copy_vec(wl, vec, pad, transposing, async_copy=True),
                      layout=transpose if transposing else None, align=offset, pad=pad)
    if staged:
        inline_consumer(sch, cs)
    a_warp, b_warp = fragments(sch, outer, k1, "warp", "warp")
    # Fragment tiles in the storage order of each operand.
    a_rows, a_cols = (FRAG, kf) if not a_trans else (kf, FRAG)
    b_rows, b_cols = (FRAG, kf) if wl.transpose_b else (kf, FRAG)
    loop_a = tile_fragment(sch, a_warp, a_rows, a_cols)
    loop_b = tile_fragment(sch, b_warp, b_rows, b_cols)
    loop_c = tile_fragment(sch, c_warp, FRAG, FRAG)
    init = sch.decompose_reduction(outer, k0)
    sch.transform_layout(a_warp, ("write", 0), _ldmatrix_map(I, a_rows, a_cols))
    sch.transform_layout(b_warp, ("write", 0), _ldmatrix_map(I, b_rows, b_cols))
    sch.transform_layout(c_warp, ("read", 0), _ldmatrix_map(I, FRAG, FRAG))
    load_a, load_b, compute, fill, store = _mma_names(I, wl, acc, store_dtype, scope, c_scope,
                                                      a_trans)
    sch.tensorize(loop_a, load_a)
    sch.tensorize(loop_b, load_b)
    sch.tensorize(sch.get_loops(c)[-3], compute)
    sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], fill)
    sch.tensorize(loop_c, store)
    # The inner (register) pipeline is expanded first, into prologue, body and epilogue: the
    # outer loop then has 5 children (A copy, B copy, and those three) instead of 3.
    inner = 3 if chunk > 1 else 1
    if chunk > 1:
        sch.annotate(k1, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(k1, "software_pipeline_order", [0, 1, 2])
    if stages > 1:
        sch.annotate(k0, "software_pipeline_stage", [0, 0] + [stages - 1] * inner)
        sch.annotate(k0, "software_pipeline_order", list(range(2 + inner)))
        sch.annotate(k0, "software_pipeline_async_stages", [0])
    if split:
        _schedule_split_sum(sch, nwarps * 32)


def _schedule_slice_sum(sch, j0, nwarps, tiling):
    """Sliced-K's sum in the block: every thread adds the partial tiles of up to 4 outputs in
    registers (block "C_slices", reading the shared P) and writes them out, cast, as one
    vector (block "C_cast", or a copy from registers where the sum needs no cast)."""
    total = sch.get_sblock(SLICE_SUM_BLOCK)
    if has_block(sch, CAST_BLOCK):
        out = sch.get_sblock(CAST_BLOCK)
        sch.set_scope(total, 0, "local")
    else:
        out = sch.cache_write(total, 0, "local")
    sch.reverse_compute_at(total, j0)
    sch.reverse_compute_at(out, j0)
    per_thread = tiling.warps * tiling.wrt * tiling.wct * FRAG * FRAG // (nwarps * 32)
    # Split the columns before fusing (not ``spread``): the registers of a thread's sum are
    # then indexed by the vector lane alone, not by a fused index TVM cannot simplify (which
    # puts them on the stack).
    i, j = sch.get_loops(out)[-2:]
    j, lanes = sch.split(j, [None, min(4, per_thread)])
    _, ty, tx = sch.split(sch.fuse(i, j), [None, nwarps, 32])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(lanes)
    sch.compute_at(total, tx)


def _schedule_split_sum(sch, threads):
    """The split-K sum: one thread per 4 outputs (16-byte reads of each f32 / int32 slice)."""
    blk = sch.get_sblock(SPLIT_SUM_BLOCK)
    fused = sch.fuse(*sch.get_loops(blk))
    bx, tx, v = sch.split(fused, [None, threads, 4])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)


def split_of(cfg):
    """The config's split_k (1 where the space has no such knob: batch_matmul_mma)."""
    return cfg.value("split_k", 1) if cfg is not None else 1


def slice_of(cfg):
    """The config's slice_k (1 where the space has no such knob: batch_matmul_mma)."""
    return cfg.value("slice_k", 1) if cfg is not None else 1


def _schedule(sch, cfg, wl, facts):
    schedule_mma(sch, wl, MmaConfig.from_knobs(cfg))


def _compute(wl, cfg):
    slices = slice_of(cfg)
    step = cfg["chunk"].val * mma_k(wl) if slices > 1 else None
    return mma_compute(wl, split_of(cfg), slices, step)


# The pipeline's global -> shared copies become cp.async only with this pass option (without it
# they stay synchronous 16-byte loads, and the "async" stages only reorder them).
_PASS_CONFIG = {"tirx.use_async_copy": True}


def _template(op):
    return ScheduleTemplate(
        name=f"{op}_mma.cuda", op=op, target_kind="cuda",
        compute=_compute, schedule=_schedule,
        fallback=lambda space, wl, facts: fallback_tc(space, wl, facts, mma=True),
        check=check_tc, dtypes=("float16", "bfloat16", "int8"),
        priority=3, prepare=intrin.load_cuda, pass_config=_PASS_CONFIG, symbolic=True,
        granular=True, acc_dtype=f32_acc_dtype)


DENSE_MMA = _template("dense")
BATCH_MATMUL_MMA = _template("batch_matmul")
