"""The CUDA-core (SIMT) templates: ``batch_matmul.cuda`` and ``dense_large_batch.cuda`` (one GEMM
schedule), and ``dense_small_batch.cuda`` (a cross-thread reduction over K, further down).

TOPI's structure (TVM <= 0.19 batch_matmul.cuda), in TensorIR:

- grid: blockIdx.z = batch, blockIdx.y / blockIdx.x = tiles of M / N;
  block: threadIdx.y x threadIdx.x threads, each owning a yi x xi register tile;
- per ``ko`` step, A and B tiles of ``ki`` depth are staged in shared memory by all threads
  (fused, split over the threads, vectorised by ``vec`` so a thread issues 16-byte loads),
  rows padded by ``offset`` elements against bank conflicts (``storage_align``);
- per ``ki`` step each thread loads its yi values of A and xi of B into registers and does
  yi * xi FMAs; the accumulators are written back once;
- ``double_buffer`` = 1 pipelines the shared-memory stage: the next ``ko`` tile is fetched
  while the current one is computed (TIR software pipelining, two stages);
- ``auto_unroll_max_step`` / ``unroll_explicit`` as TOPI (pragma on the outer loop).

- ``kmajor`` = 1 stores both shared tiles K-major ([k][m], [k][n]; a K-contiguous operand is
  transposed on its way in), so a thread's yi (xi) register values are contiguous and read with
  16-byte loads instead of strided scalar ones.
- ``interleave_y`` / ``interleave_x`` = 2 cut a thread's yi x xi tile into 2 sub-tiles along
  that axis, placed half a block tile apart (CUTLASS's SGEMM thread layout: an 8x8 tile is 2x2
  sub-tiles of 4x4, 64 rows / columns apart). Neighbouring threads then read neighbouring
  16-byte words of a K-major shared row, so a warp's LDS.128 has no bank conflict, where a
  contiguous 8-wide tile puts threads 32 bytes apart (2-way conflicts); the output rows of a
  thread are written as vectors. The sub-tiles are TIR virtual threads (``vthread``), which
  InjectVirtualThread unrolls into the thread's code: the shared loads, which do not depend on
  them, stay single.

Knobs (TOPI names): tile_y = [by, ty, yi], tile_x = [bx, tx, xi], tile_k = [ko, ki],
auto_unroll_max_step, unroll_explicit; new: vec, offset, double_buffer, kmajor, interleave_y,
interleave_x.
"""
from __future__ import annotations

from ..template import ScheduleTemplate
from .common import MATMUL_BLOCK, largest_factor, plain_compute


def schedule_simt_gemm(sch, wl, tile_y, tile_x, tile_k, *, vec=1, offset=0,
                       auto_unroll=64, unroll_explicit=1, double_buffer=0, kmajor=0,
                       interleave=(1, 1)):
    _, ty_n, yi_n = tile_y
    _, tx_n, xi_n = tile_x
    ki_n = tile_k[-1]
    c = sch.get_sblock(MATMUL_BLOCK)
    loops = sch.get_loops(c)
    batch_loops = list(loops[:-3])
    i, j, k = loops[-3:]
    by, outer_y, ty, yi = _thread_split(sch, i, ty_n, yi_n, interleave[0])
    bx, outer_x, tx, xi = _thread_split(sch, j, tx_n, xi_n, interleave[1])
    ko, ki = sch.split(k, [None, ki_n])
    sch.reorder(*batch_loops, by, bx, *outer_y, *outer_x, ty, tx, ko, ki, yi, xi)
    if batch_loops:
        sch.bind(batch_loops[0], "blockIdx.z")
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    for v, tag in ((outer_y, "vthread.y"), (outer_x, "vthread.x")):
        if v:
            sch.bind(v[0], tag)
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, tx)
    if outer_y or outer_x:
        # The sub-tile rows are written with vector stores (a row of xi / 2 contiguous values).
        width = _register_vec(xi_n // interleave[1], wl, wl.out_dtype)
        if width > 1:
            _, v = sch.split(sch.get_loops(acc)[-1], [None, width])
            sch.vectorize(v)
    n_above = len(batch_loops) + 5 + len(outer_y) + len(outer_x)  # loops down to ko
    # Shared-memory staging of the A and B tiles of one ko step, loaded by all threads.
    for idx in (0, 1):
        sh = sch.cache_read(c, idx, "shared")
        if kmajor and _k_contiguous(wl, idx):  # store the tile [k][m] / [k][n]
            sch.transform_layout(sh, ("write", 0), lambda *x: (*x[:-2], x[-1], x[-2]))
        sch.compute_at(sh, ko)
        # Loops of extent 1 vanish at compute_at: fuse whatever is left below ko.
        inner = sch.get_loops(sh)[n_above:]  # below [batch], by, bx, [vy, vx,] ty, tx, ko
        fused = sch.fuse(*inner) if len(inner) > 1 else inner[0]
        _, f_ty, f_tx, f_v = sch.split(fused, [None, ty_n, tx_n, vec])
        sch.bind(f_ty, "threadIdx.y")
        sch.bind(f_tx, "threadIdx.x")
        sch.vectorize(f_v)
        if offset:
            sch.storage_align(sh, 0, axis=-2, factor=32, offset=offset)
    # Register copies of A and B per ki step; from K-major tiles a thread's yi (xi) values are
    # contiguous, read with vector loads of up to 16 bytes.
    for idx, n in ((0, yi_n), (1, xi_n)):
        loc = sch.cache_read(c, idx, "local")
        sch.compute_at(loc, ki)
        width = _register_vec(n // interleave[idx], wl) if kmajor else 1
        if width > 1:
            _, v = sch.split(sch.get_loops(loc)[-1], [None, width])
            sch.vectorize(v)
    sch.annotate(by, "pragma_auto_unroll_max_step", auto_unroll)
    sch.annotate(by, "pragma_unroll_explicit", unroll_explicit)
    if double_buffer:
        # Stages: shared loads of tile ko+1 (stage 0) overlap the compute of tile ko (stage 1).
        sch.annotate(ko, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
    sch.decompose_reduction(c, ko)


def _thread_split(sch, loop, threads, per_thread, interleave):
    """(block, [vthread], thread, register) loops of one output axis. An interleaved axis gets a
    virtual-thread loop above the threads, so a thread's sub-tiles lie threads * per_thread /
    interleave apart; otherwise the list is empty."""
    if interleave > 1:
        b, v, t, r = sch.split(loop, [None, interleave, threads, per_thread // interleave])
        return b, [v], t, r
    b, t, r = sch.split(loop, [None, threads, per_thread])
    return b, [], t, r


def _k_contiguous(wl, idx):
    """Whether operand ``idx`` (0 = A, 1 = B) is stored with K innermost."""
    return not wl.transpose_a if idx == 0 else wl.transpose_b


def _register_vec(n, wl, dtype=None):
    """Elements of ``dtype`` (default: the inputs') per vector access of an n-element register
    tile row (16 bytes at most)."""
    dtype = dtype or wl.dtype
    width = 16 // (2 if dtype == "float16" else 4 if dtype == "float32" else 8)
    while width > 1 and n % width:
        width //= 2
    return width


def schedule_from_config(sch, cfg, wl, facts):
    schedule_simt_gemm(
        sch, wl, cfg["tile_y"].size, cfg["tile_x"].size, cfg["tile_k"].size,
        vec=cfg["vec"].val, offset=cfg["offset"].val,
        auto_unroll=cfg["auto_unroll_max_step"].val, unroll_explicit=cfg["unroll_explicit"].val,
        double_buffer=cfg["double_buffer"].val,
        kmajor=cfg.value("kmajor", 0),
        interleave=(cfg.value("interleave_y", 1), cfg.value("interleave_x", 1)))


def fallback_tiles(wl, facts):
    """Untuned tiles from the target and the layout, not from one shape: 16x16 threads; a
    register tile of 4x4, or 8x4 when B is stored [N, K] (both operands K-contiguous: measured
    on an H100 at 1.36 ms against 2.08 ms for 4x4 on the 24x16384x512x64 bmm, while 4x4 won on
    NN matmuls: 0.072 vs 0.111 ms at 1024^3, 33.1 vs 48.3 ms at 8192^3); smaller where the grid
    would not give every SM a block; 64-byte shared rows (ki = 16 f32 / 32 f16) padded by 16
    bytes against bank conflicts, double-buffered; 16-byte loads where the tile allows."""
    sms, nbytes = facts["num_sms"], facts["dtype_bytes"]
    ty = largest_factor(wl.M, 16)
    tx = largest_factor(wl.N, 256 // ty)  # small M (gemv-like): the threads go along N
    yi = xi = 1
    first = (8, 4) if wl.transpose_b else (4, 4)
    for y, x in (first, (4, 4), (4, 2), (2, 2), (2, 1), (1, 1)):
        if wl.M % (ty * y) or wl.N % (tx * x):
            continue
        blocks = wl.batch * (wl.M // (ty * y)) * (wl.N // (tx * x))
        if blocks >= sms or (y, x) == (1, 1):
            yi, xi = y, x
            break
    ki = largest_factor(wl.K, 64 // nbytes)
    vec = 16 // nbytes
    while vec > 1 and not vec_ok(wl, [-1, ty, yi], [-1, tx, xi], ki, vec):
        vec //= 2
    return {"tile_y": [-1, ty, yi], "tile_x": [-1, tx, xi], "tile_k": [-1, ki],
            "auto_unroll_max_step": 512, "unroll_explicit": 1, "vec": vec,
            "offset": 16 // nbytes, "double_buffer": 1}


def inner_extents(wl, tile_y, tile_x, ki):
    """Contiguous extent of the A and B shared tiles (what a vector load may span)."""
    rows = tile_y[1] * tile_y[2]
    cols = tile_x[1] * tile_x[2]
    return (rows if wl.transpose_a else ki), (ki if wl.transpose_b else cols)


def vec_ok(wl, tile_y, tile_x, ki, vec):
    threads = tile_y[1] * tile_x[1]
    a_in, b_in = inner_extents(wl, tile_y, tile_x, ki)
    a_all = tile_y[1] * tile_y[2] * ki
    b_all = tile_x[1] * tile_x[2] * ki
    return vec == 1 or (a_in % vec == 0 and b_in % vec == 0 and a_all % (threads * vec) == 0
                        and b_all % (threads * vec) == 0)


# ---- dense_small_batch.cuda: cross-thread reduction over K (gemv-like shapes) ----
#
# Few rows (M <= 64) leave too little parallelism in M x N tiles; instead each block owns ty
# output columns for yi rows, and the tx threads of a column split K: every thread accumulates
# its share (vec contiguous elements per step, loaded as one vector) in registers, then the tx
# partial sums are combined by a cross-thread reduction (warp shuffles; TIR's rfactor +
# LowerCrossThreadReduction). TOPI's dense_small_batch.cuda had tile_k = [., tx]; ours adds the
# vector width, ty columns and yi rows per block.

def schedule_small_batch(sch, cfg, wl, facts):
    _, tx_n, vec = cfg["tile_k"].size
    _, ty_n = cfg["tile_x"].size
    _, yi_n = cfg["tile_y"].size
    c = sch.get_sblock(MATMUL_BLOCK)
    loops = sch.get_loops(c)
    if len(loops) == 4:  # a batched workload: fold the batch into blockIdx.z
        raise ValueError("dense_small_batch.cuda is for dense (no batch)")
    i, j, k = loops
    by, yi = sch.split(i, [None, yi_n])
    bx, ty = sch.split(j, [None, ty_n])
    ko, tx, kv = sch.split(k, [None, tx_n, vec])
    sch.reorder(by, bx, ty, tx, ko, kv, yi)
    rf = sch.rfactor(tx, factor_axis=0)
    r_by, r_bx, r_ty, r_tx, r_ko, r_kv, r_yi = sch.get_loops(rf)
    sch.bind(r_by, "blockIdx.y")
    sch.bind(r_bx, "blockIdx.x")
    sch.bind(r_ty, "threadIdx.y")
    sch.bind(r_tx, "threadIdx.x")
    sch.set_scope(rf, 0, "local")  # per-thread partial sums live in registers
    # Vector loads of this thread's vec consecutive K elements of A rows and the B column.
    for idx in (0, 1):
        contiguous_k = (not wl.transpose_a) if idx == 0 else wl.transpose_b
        loc = sch.cache_read(rf, idx, "local")
        sch.compute_at(loc, r_ko)
        if contiguous_k and vec > 1:
            sch.vectorize(sch.get_loops(loc)[-1])
    sch.unroll(r_kv)
    sch.unroll(r_yi)
    sch.reverse_compute_at(c, r_ty)
    below = sch.get_loops(c)[3:]  # under blockIdx.y, blockIdx.x, threadIdx.y: tx [, yi]
    if len(below) == 2:
        sch.reorder(below[1], below[0])
    sch.bind(below[0], "threadIdx.x")  # the cross-thread reduction over tx
    # No auto-unroll pragma here: TIR's allreduce lowering fails once the loop around the
    # cross-thread reduction is unrolled (seen with yi > 1); kv and yi are unrolled explicitly.
    sch.decompose_reduction(rf, r_ko)


def fallback_small_batch(wl, facts):
    """16-byte loads, 64 threads along K (two warps: the reduction needs both warps' shuffles
    plus one shared exchange) and 4 columns per block, all rows of M (<= 8) per thread."""
    vec = largest_factor(wl.K, 16 // facts["dtype_bytes"])
    tx = largest_factor(wl.K // vec, 64)
    return {"tile_k": [-1, tx, vec], "tile_x": [-1, largest_factor(wl.N, 4)],
            "tile_y": [-1, largest_factor(wl.M, 8)]}


BATCH_MATMUL_CUDA = ScheduleTemplate(
    name="batch_matmul.cuda", op="batch_matmul", target_kind="cuda",
    compute=plain_compute, schedule=schedule_from_config,
    fallback=lambda space, wl, facts: fallback_tiles(wl, facts),
    check=lambda wl, facts: None, dtypes=("float32", "float16"))

# The same GEMM without the batch.
DENSE_LARGE_BATCH_CUDA = ScheduleTemplate(
    name="dense_large_batch.cuda", op="dense", target_kind="cuda",
    compute=plain_compute, schedule=schedule_from_config,
    fallback=lambda space, wl, facts: fallback_tiles(wl, facts),
    check=lambda wl, facts: None, dtypes=("float32", "float16"))

DENSE_SMALL_BATCH_CUDA = ScheduleTemplate(
    name="dense_small_batch.cuda", op="dense", target_kind="cuda",
    compute=plain_compute, schedule=schedule_small_batch,
    fallback=lambda space, wl, facts: fallback_small_batch(wl, facts),
    check=lambda wl, facts: None if wl.M <= 64 else f"M={wl.M} > 64 (use dense_large_batch)",
    dtypes=("float32", "float16"), priority=1)
