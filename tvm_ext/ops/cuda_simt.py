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

Every shape: an axis that its tile does not divide is padded up to the tile (``pad_einsum``):
the zeros are computed inside the shared-memory loads and the crop inside the write-back, so the
kernel reads and writes only the real tensors and needs no other kernel. The spaces keep the
padded flops within 2x the real ones; a shape whose tiles divide it keeps exactly its kernel.

Shared memory: what the kernel allocates per tile is ``rows x stride`` elements, where the
stride of a row (the tile's contiguous axis) is raised by ``storage_align(factor=32, offset)``
to the next 32 * n + offset (a 16-float K row with offset 4 takes 36, not 20), and double
buffering doubles both tiles. The spaces' ``smem_bytes`` let term is exactly that (tests check
it against the lowered kernels), and keeps it within the 48 KB of static shared memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..template import ScheduleTemplate
from .common import CAST_BLOCK, CROP_BLOCK, MATMUL_BLOCK, has_block, largest_factor, padded
from .common import tile_of
from .common import f32_acc_dtype, inline_consumer, inline_producer, matmul_compute
from .common import pad_to_tiles


def simt_compute(wl, cfg, A=None, B=None):
    """The plain matmul, accumulated in ``f32_acc_dtype`` (block "C_cast" where it differs
    from the output's dtype, computed in the write-back); on a family's operands A, B too."""
    return matmul_compute(wl, A, B, acc=f32_acc_dtype(wl))


@dataclass(frozen=True)
class SimtGemmConfig:
    """The knobs of the GEMM schedule, by role."""

    ty: int  # threads along M (threadIdx.y)
    yi: int  # rows of a thread's register tile
    tx: int  # threads along N (threadIdx.x)
    xi: int  # columns of a thread's register tile
    ki: int  # K depth of a shared-memory tile
    vec: int = 1  # elements per global -> shared load
    offset: int = 0  # storage_align offset of the shared rows (0: rows not padded)
    auto_unroll: int = 64
    unroll_explicit: int = 1
    double_buffer: int = 0
    kmajor: int = 0
    interleave_y: int = 1
    interleave_x: int = 1

    @staticmethod
    def from_knobs(cfg) -> "SimtGemmConfig":
        _, ty, yi = cfg["tile_y"].size
        _, tx, xi = cfg["tile_x"].size
        return SimtGemmConfig(
            ty, yi, tx, xi, cfg["tile_k"].size[-1], vec=cfg["vec"].val,
            offset=cfg["offset"].val, auto_unroll=cfg["auto_unroll_max_step"].val,
            unroll_explicit=cfg["unroll_explicit"].val, double_buffer=cfg["double_buffer"].val,
            # Knobs added later: a record without them replays the kernel it was measured with.
            kmajor=cfg.value("kmajor", 0), interleave_y=cfg.value("interleave_y", 1),
            interleave_x=cfg.value("interleave_x", 1))

    def knobs(self):
        """{knob: value}, as a fallback returns them."""
        return {"tile_y": [-1, self.ty, self.yi], "tile_x": [-1, self.tx, self.xi],
                "tile_k": [-1, self.ki], "auto_unroll_max_step": self.auto_unroll,
                "unroll_explicit": self.unroll_explicit, "vec": self.vec, "offset": self.offset,
                "double_buffer": self.double_buffer, "kmajor": self.kmajor,
                "interleave_y": self.interleave_y, "interleave_x": self.interleave_x}

    @property
    def block_m(self):
        return self.ty * self.yi

    @property
    def block_n(self):
        return self.tx * self.xi


def schedule_simt_gemm(sch, wl, config: SimtGemmConfig):
    ty_n, yi_n, tx_n, xi_n, ki_n = config.ty, config.yi, config.tx, config.xi, config.ki
    vec, offset, kmajor = config.vec, config.offset, config.kmajor
    interleave = (config.interleave_y, config.interleave_x)
    c = sch.get_sblock(MATMUL_BLOCK)
    # An axis the block tile does not divide is padded up to it: an aligned shape is left as it
    # is, so its kernel does not change.
    pad = pad_to_tiles(sch, c, (config.block_m, config.block_n, ki_n))
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
        while pad and width > 1 and wl.N % width:
            width //= 2  # a padded N: an output row starts at a multiple of the vector only so
        if width > 1:
            _, v = sch.split(sch.get_loops(acc)[-1], [None, width])
            sch.vectorize(v)
    if pad or has_block(sch, CAST_BLOCK):
        inline_consumer(sch, acc)  # the crop of the padded tile and the cast, in the write-back
    n_above = len(batch_loops) + 5 + len(outer_y) + len(outer_x)  # loops down to ko
    # Shared-memory staging of the A and B tiles of one ko step, loaded by all threads.
    for idx in (0, 1):
        sh = sch.cache_read(c, idx, "shared")
        if kmajor and _k_contiguous(wl, idx):  # store the tile [k][m] / [k][n]
            sch.transform_layout(sh, ("write", 0), lambda *x: (*x[:-2], x[-1], x[-2]))
        sch.compute_at(sh, ko)
        # Loops of extent 1 vanish at compute_at: fuse whatever is left below ko.
        inner = sch.get_loops(sh)[n_above:]  # below [batch], by, bx, [vy, vx,] ty, tx, ko
        if not inner:  # a tile of one element (a 1 x 1 x 1 matmul): a loop to bind
            inner = [sch.add_unit_loop(sh)]
        fused = sch.fuse(*inner) if len(inner) > 1 else inner[0]
        _, f_ty, f_tx, f_v = sch.split(fused, [None, ty_n, tx_n, vec])
        sch.bind(f_ty, "threadIdx.y")
        sch.bind(f_tx, "threadIdx.x")
        sch.vectorize(f_v)
        if offset:
            sch.storage_align(sh, 0, axis=-2, factor=32, offset=offset)
        if pad:
            inline_producer(sch, sh)  # zeros outside the operand, computed in the copy
    # Register copies of A and B per ki step; from K-major tiles a thread's yi (xi) values are
    # contiguous, read with vector loads of up to 16 bytes.
    for idx, n in ((0, yi_n), (1, xi_n)):
        loc = sch.cache_read(c, idx, "local")
        sch.compute_at(loc, ki)
        width = _register_vec(n // interleave[idx], wl) if kmajor else 1
        # A vector load needs a row stride that is a multiple of it: a 16-half load from rows
        # padded to 32 * n + 4 halves is not one, and TVM 0.27 writes that gather of 8 halves as
        # make_uint4 of 8 values, which nvcc rejects; such rows are read 4 halves at a time.
        # (f32 strides, 32 * n + 0 / 4 / 8 floats, are always multiples of 4.)
        stride = shared_stride(config.block_m if idx == 0 else config.block_n, offset)
        while width > 1 and stride % width:
            width //= 2
        if width > 1:
            _, v = sch.split(sch.get_loops(loc)[-1], [None, width])
            sch.vectorize(v)
    sch.annotate(by, "pragma_auto_unroll_max_step", config.auto_unroll)
    sch.annotate(by, "pragma_unroll_explicit", config.unroll_explicit)
    if config.double_buffer:
        # Stages: shared loads of tile ko+1 (stage 0) overlap the compute of tile ko (stage 1).
        sch.annotate(ko, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
    sch.decompose_reduction(c, ko)


def shared_stride(row, offset):
    """Elements between the rows of a shared tile whose rows hold ``row`` elements, as
    ``storage_align(factor=32, offset)`` lays them out: the next 32 * n + offset (the spaces'
    ``a_stride`` / ``b_stride`` let terms)."""
    return row + (32 + offset - row % 32) % 32 if offset else row


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
    schedule_simt_gemm(sch, wl, SimtGemmConfig.from_knobs(cfg))


# ---- untuned configs ----

def _valid(space, values):
    """Whether {knob: value} is a config of ``space`` (every value one of its knob's candidates)
    that its constraints accept."""
    cfg = space.config_from_values(values)
    return cfg.index is not None and space.is_valid(cfg)


def fallback_tiles(wl, facts, space=None):
    """Untuned tiles from the target and the layout, not from one shape: 16x16 threads; a
    register tile of 4x4, or 8x4 when B is stored [N, K] (both operands K-contiguous: 0.72 ms
    against 2.08 ms for 4x4 on the 24x16384x512x64 bmm on an H100, see ``_SMEM_SAVING``,
    while 4x4 won on NN matmuls: 0.072 vs 0.111 ms at 1024^3, 33.1 vs 48.3 ms at 8192^3);
    smaller where the grid would not give every SM a block; 64-byte shared rows (ki = 16 f32 /
    32 f16) padded by 16 bytes against bank conflicts, double-buffered; 16-byte loads where the
    tile allows.

    That rule takes divisors of M, N and K. Where its config is not one of the ``space``'s valid
    ones, the same tiles with less shared memory come next (``_SMEM_SAVING``), then
    ``padded_fallback`` (tiles that need not divide the axes)."""
    first = _divisor_fallback(wl, facts)
    if space is None or _valid(space, first.knobs()):
        return first.knobs()
    for change in _SMEM_SAVING:
        config = replace(first, **change)
        if _valid(space, config.knobs()):
            return config.knobs()
    return padded_fallback(wl, facts, space).knobs()


# The divisor rule's tiles with less shared memory, in the order tried. Its 8x4 f32 tile of
# K-contiguous operands (16x16 threads, a 128 x 64 block) has 16-float rows padded to a stride of
# 36: 54 KB double-buffered, over the 48 KB of static shared memory (ptxas refuses it). Stored
# K-major, its rows are 128 + 4 and 64 + 4 floats: 25 KB. Measured on an H100 (24x16384x512x64
# f32 NT bmm / 4096^3 f32 NT dense): K-major with the rows' sub-tiles interleaved 0.72 / 3.66 ms,
# K-major 0.84 / 3.70, single-buffered 1.36 / 6.52, no row padding 2.49 / 13.6, the 4x4 tile
# 2.08 / 10.8 (the tuned record of the bmm: 0.72 ms).
_SMEM_SAVING = ({"kmajor": 1, "interleave_y": 2}, {"kmajor": 1}, {"double_buffer": 0},
                {"kmajor": 1, "double_buffer": 0})


def _divisor_fallback(wl, facts) -> SimtGemmConfig:
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
    return SimtGemmConfig(ty, yi, tx, xi, ki, vec=vec, offset=16 // nbytes, auto_unroll=512,
                          unroll_explicit=1, double_buffer=1)


def padded_fallback(wl, facts, space) -> SimtGemmConfig:
    """The divisor rule's kind of tiles without divisors: register tiles 8x4 / 4x4 down to 1x1,
    16x16 threads down to one, K depths of 64 bytes down to 4 elements, each with the widest
    vector loads, 16-byte row padding and double buffering; the first that the space accepts
    in the order of a rough time estimate (ties: the divisor rule's order of preference):

        padded flops x (shared reads per FMA (yi + xi) / (yi * xi)
                        + 8 x global reads per FMA of the block (bm + bn) / (bm * bn)
                        + 2 / ki for the barriers of each K step)
                     / the share of the SMs the grid fills / (threads / 128, at most 1)

    The weights are guesses that rank square, SM-filling tiles with little padding first; the
    tuner finds the real best."""
    nbytes, sms = facts["dtype_bytes"], facts["num_sms"]
    first = (8, 4) if wl.transpose_b else (4, 4)
    regs = list(dict.fromkeys((first, (4, 4), (4, 2), (2, 2), (2, 1), (1, 1))))
    kis = [k for k in dict.fromkeys((64 // nbytes, 32 // nbytes, 16, 8, 4)) if k <= 32]
    if wl.K < 4:
        kis.append(wl.K)  # a K shorter than any tile depth is one step (the space's exception)
    # A tiny M or N is also covered whole by threads (a block of fewer than 32 threads is valid
    # only where it covers the whole output).
    tys = list(dict.fromkeys((16, 8, 4, 2, 1) + ((wl.M,) if wl.M <= 32 else ())))
    txs = list(dict.fromkeys((16, 32, 64, 8, 4, 2, 1) + ((wl.N,) if wl.N <= 64 else ())))
    ranked = []
    for yi, xi in regs:
        for ty in tys:
            for tx in txs:
                bm, bn = ty * yi, tx * xi
                fill = min(1.0, wl.batch * -(-wl.M // bm) * -(-wl.N // bn) / sms)
                for ki in kis:
                    flops = padded(wl.M, bm) * padded(wl.N, bn) * padded(wl.K, ki)
                    per_fma = (yi + xi) / (yi * xi) + 8 * (bm + bn) / (bm * bn) + 2 / ki
                    cost = flops * per_fma / fill / min(1.0, ty * tx / 128)
                    ranked.append((cost, len(ranked), (ty, yi, tx, xi, ki)))
    for _, _, (ty, yi, tx, xi, ki) in sorted(ranked):
        for vec in [v for v in (8, 4, 2, 1) if v * nbytes <= 16]:
            config = SimtGemmConfig(ty, yi, tx, xi, ki, vec=vec, offset=16 // nbytes,
                                    auto_unroll=512, unroll_explicit=1, double_buffer=1)
            if _valid(space, config.knobs()):
                return config
    return SimtGemmConfig.from_knobs(_any_valid(space, wl))


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
# LowerCrossThreadReduction; with coalesce_n a tree in shared memory, or the sums staged there
# for warps' shuffles: ``transposed_sum``). TOPI's dense_small_batch.cuda had tile_k = [., tx];
# ours adds the vector width, ty columns and yi rows per block.
#
# Every shape: axes that the tiles do not divide are padded (pad_einsum; the zeros are computed in
# the register loads, the crop guards the final store). Predicated tiles (a split that does not
# divide, with idle rows and columns) gave wrong sums on an H100: the predicate reaches the
# cross-thread reduction's shuffles and barriers, so every thread of a padded tile takes part.

#: K steps a small-batch kernel unrolls where its K loop is symbolic (a family's) or padded.
SYMBOLIC_K_UNROLL = 4


@dataclass(frozen=True)
class SmallBatchConfig:
    tx: int  # threads along K per column (the cross-thread reduction)
    vec: int  # contiguous K elements per thread and step (one vector load)
    ty: int  # output columns per block (threadIdx.y; threadIdx.x with coalesce_n)
    yi: int  # output rows per thread
    # 1: the columns on threadIdx.x and the K split on threadIdx.y (a B stored [K, N]: a
    # warp reads a row of B's columns at once); the sum swaps them (``transposed_sum``)
    coalesce_n: int = 0

    @staticmethod
    def from_knobs(cfg) -> "SmallBatchConfig":
        _, tx, vec = cfg["tile_k"].size
        return SmallBatchConfig(tx, vec, cfg["tile_x"].size[-1], cfg["tile_y"].size[-1],
                                cfg.value("coalesce_n", 0))

    def knobs(self):
        return {"tile_k": [-1, self.tx, self.vec], "tile_x": [-1, self.ty],
                "tile_y": [-1, self.yi], "coalesce_n": self.coalesce_n}


def schedule_small_batch(sch, cfg, wl, facts):
    from tvm import tirx  # noqa: PLC0415
    config = SmallBatchConfig.from_knobs(cfg)
    tx_n, vec, ty_n, yi_n = config.tx, config.vec, config.ty, config.yi
    c = sch.get_sblock(MATMUL_BLOCK)
    pad = pad_to_tiles(sch, c, (yi_n, ty_n, tx_n * vec))
    crop = has_block(sch, CROP_BLOCK)  # (M or N padded; else at most K)
    *batch, i, j, k = sch.get_loops(c)  # a batched workload: the batch on blockIdx.z
    by, yi = sch.split(i, [None, yi_n])
    bx, ty = sch.split(j, [None, ty_n])
    ko, tx, kv = sch.split(k, [None, tx_n, vec])
    sch.reorder(*batch, by, bx, ty, tx, ko, kv, yi)
    rf = sch.rfactor(tx, factor_axis=0)
    *r_b, r_by, r_bx, r_ty, r_tx, r_ko, r_kv, r_yi = sch.get_loops(rf)
    if r_b:
        sch.bind(r_b[0], "blockIdx.z")
    sch.bind(r_by, "blockIdx.y")
    sch.bind(r_bx, "blockIdx.x")
    k_threads, n_threads = ("threadIdx.y", "threadIdx.x") if config.coalesce_n else \
        ("threadIdx.x", "threadIdx.y")
    sch.bind(r_ty, n_threads)
    sch.bind(r_tx, k_threads)
    sch.set_scope(rf, 0, "local")  # per-thread partial sums live in registers
    # Vector loads of this thread's vec consecutive K elements of A rows and the B column.
    for idx in (0, 1):
        contiguous_k = (not wl.transpose_a) if idx == 0 else wl.transpose_b
        loc = sch.cache_read(rf, idx, "local")
        sch.compute_at(loc, r_ko)
        if contiguous_k and vec > 1 and wl.K % vec == 0:  # (else coalesce_n's A: scalars)
            sch.vectorize(sch.get_loops(loc)[-1])
        if pad:
            inline_producer(sch, loc)  # zeros beyond K, computed in the register load
    sch.unroll(r_kv)
    sch.unroll(r_yi)
    if not isinstance(sch.get(r_ko).extent, tirx.IntImm) or wl.K % (tx_n * vec):
        # K's steps of a family's kernel (a symbolic count) or of a padded K (guarded loads)
        # 4 at a time, unrolled (the last ones guarded), so that several steps' loads are in
        # flight, as nvcc has them for a static K unguarded (P . V at K = 4001, 32 K threads
        # of one element: 22.2 us rolled, 11.1 unrolled; H200)
        r_ko, inner = sch.split(r_ko, [None, SYMBOLIC_K_UNROLL])
        sch.unroll(inner)
    if transposed_sum(config):
        # The K threads' partial sums through shared memory laid out [K thread][column], its
        # rows 32 * n + 1 words apart: written by warps of consecutive columns, read back by
        # warps of consecutive K threads, neither with bank conflicts; then each column's
        # sum is a warp's shuffles (the columns on threadIdx.y, the K threads on threadIdx.x).
        # TVM's allreduce over threadIdx.y is a tree in shared memory indexed column * tx +
        # K thread: 32-way conflicts at each of its log2(tx) steps.
        staged = sch.cache_read(c, 0, "shared")
        sch.reverse_compute_at(staged, r_tx)
        sch.storage_align(staged, 0, axis=0, factor=32, offset=1)
        sch.reverse_compute_at(c, r_bx)
        r, *i, j = sch.get_loops(c)[2 + len(r_b):]
        sch.reorder(*i, j, r)
        sch.bind(j, k_threads)
        sch.bind(r, n_threads)
        if i:  # one row of partial sums staged at a time (yi: a rolled loop, nvcc unrolls it)
            sch.compute_at(staged, i[0])
            ks, cols = sch.get_loops(staged)[-2:]
            sch.bind(ks, k_threads)
            sch.bind(cols, n_threads)
    else:
        sch.reverse_compute_at(c, r_ty)
        if tx_n > 1:  # (one thread a column, for a K of a few elements: nothing to combine)
            # under (blockIdx.z,) blockIdx.y, blockIdx.x, threadIdx.y: tx [, yi]
            below = sch.get_loops(c)[3 + len(r_b):]
            if len(below) == 2:
                sch.reorder(below[1], below[0])
            sch.bind(below[0], k_threads)  # the cross-thread reduction over tx
    cast = has_block(sch, CAST_BLOCK)
    if crop and cast:  # cropped, then cast: one block
        sch.reverse_compute_inline(sch.get_sblock(CAST_BLOCK))
    if crop or cast:
        # The padded output tile is the reduction's result in registers; the crop (or the
        # cast) writes the rows and columns inside M x N after the reduction loop (TIR allows
        # no other block under it), where TVM folds it into the allreduce's own write: one
        # guarded store.
        sch.set_scope(c, 0, "local")
        loops = sch.get_loops(c)
        sch.reverse_compute_at(sch.get_sblock(CROP_BLOCK if crop else CAST_BLOCK),
                               loops[-2] if tx_n > 1 else loops[-1])
    # No auto-unroll pragma here: TIR's allreduce lowering fails once the loop around the
    # cross-thread reduction is unrolled (seen with yi > 1); kv and yi are unrolled explicitly.
    sch.decompose_reduction(rf, r_ko)


def transposed_sum(config: SmallBatchConfig) -> bool:
    """coalesce_n with as many K threads as columns (> 1): the block's sums are staged in
    shared memory and taken by warps (``schedule_small_batch``)."""
    return bool(config.coalesce_n) and config.tx == config.ty > 1


def _coalesce(wl, ty: int) -> int:
    """The fallbacks' ``coalesce_n``: 1 for a B stored [K, N] and more than one column a
    block (the space's rule), else 0."""
    return int(not wl.transpose_b and ty > 1)


def fallback_small_batch(wl, facts, space=None):
    """16-byte loads, 64 threads along K (two warps' shuffles plus one shared exchange) and 4
    columns a block, all rows of M (<= 8) a thread; a short K more columns, up to 32 and 512
    threads a block (blocks of 64 threads reading 1 KB each finished faster than the GPU
    launched them: 32x1x4096x128 f16 5.5x faster at 32 columns). A B stored [K, N]:
    columns on threadIdx.x (``coalesce_n``), 32 (else 16) K threads, 16 bytes of K each where
    at most 1/16 of K is padded (P . V 32x1x128x4096: 0.08x -> 1.53x cuBLAS); a bucket kernel a
    K step dividing its granule. Divisors, or round sizes padded where none is useful
    (``tile_of``: N = 4001 had 1 column a block); where that is no valid config of the
    ``space``, ``padded_small_batch``."""
    coalesce = _coalesce(wl, wl.N)  # (N > 1: the columns of a block can be more than one)
    symbolic = space is not None and space.facts.get("symbolic")
    granule = space.facts.get("granule_k", 1) if symbolic else 1
    vec = math.gcd(wl.K, 16 // facts["dtype_bytes"])  # (a power of two)
    if coalesce and granule > 1:  # (a bucket kernel: a K step dividing its granule, unpadded)
        k = math.gcd(wl.K, granule)
        tx = 32 if k % 32 == 0 else 16 if k % 16 == 0 else largest_factor(k, 32)
        vec = math.gcd(k // tx, vec, 8)
    elif coalesce:
        tx = tile_of(wl.K, 32, pow2=True)  # (K padded where 16 does not divide it)
        vec = max((v for v in (8, 4, 2) if v * facts["dtype_bytes"] <= 16 and
                   padded(wl.K, tx * v) <= wl.K * 17 / 16), default=1)  # (1/16 padded at most)
    else:
        tx = tile_of(wl.K // vec, 64, pow2=True)
    ty = tile_of(wl.N, 32 if coalesce else 4 if tx >= 64 else min(32, 512 // tx))
    config = SmallBatchConfig(tx, vec, ty, tile_of(wl.M, 8), _coalesce(wl, ty))
    if space is None or _valid(space, config.knobs()):
        return config.knobs()
    return padded_small_batch(wl, facts, space).knobs()


def padded_small_batch(wl, facts, space) -> SmallBatchConfig:
    """The divisor rule's preferences (16-byte vectors, 64 threads along K, 4 columns, up to 8
    rows) without divisors: the first candidate the space accepts in the order of padded flops
    (M's and N's padding too; in sixteenths of the real flops, rounded up: an exact fit first,
    then 1008 of K = 1000 in 16 scalar steps alike with 1024 in 64 x 4-wide ones), then of that
    preference. All rows of a small M are one thread's; a small N may be one block's."""
    nbytes = facts["dtype_bytes"]
    tys = list(dict.fromkeys((4, 2, 8, 1, 16, 32) + ((wl.N,) if wl.N <= 32 else ())))
    yis = list(dict.fromkeys(((wl.M,) if wl.M <= 8 else ()) + (8, 4, 2, 1) +
                             ((wl.M,) if wl.M <= 16 else ())))
    real = wl.M * wl.N * wl.K
    ranked = []
    for vec in [v for v in (8, 4, 2, 1) if v * nbytes <= 16]:
        for tx in (64, 32, 128, 16, 256, 8, 4, 2, 1):
            for ty in tys:
                for yi in yis:
                    flops = padded(wl.M, yi) * padded(wl.N, ty) * padded(wl.K, tx * vec)
                    ranked.append((-(-16 * flops // real), len(ranked),
                                   SmallBatchConfig(tx, vec, ty, yi)))
    for _, _, config in sorted(ranked, key=lambda r: r[:2]):
        config = replace(config, coalesce_n=_coalesce(wl, config.ty))
        if _valid(space, config.knobs()):
            return config
    return SmallBatchConfig.from_knobs(_any_valid(space, wl))


def _any_valid(space, wl):
    """A valid config of the space drawn with a fixed seed: the last resort of the fallbacks,
    for a shape that none of their candidates fits."""
    import numpy as np  # noqa: PLC0415

    picks = space.random_valid(np.random.default_rng(0), 1, max_draws=200000)
    if not picks:
        raise ValueError(f"{space.template}: no valid config found for {wl}")
    return space.get(picks[0])


BATCH_MATMUL_CUDA = ScheduleTemplate(
    name="batch_matmul.cuda", op="batch_matmul", target_kind="cuda",
    compute=simt_compute, family_operands=True, schedule=schedule_from_config,
    fallback=lambda space, wl, facts: fallback_tiles(wl, facts, space),
    check=lambda wl, facts: None, dtypes=("float32", "float16"), symbolic=True)

# The same GEMM without the batch.
DENSE_LARGE_BATCH_CUDA = ScheduleTemplate(
    name="dense_large_batch.cuda", op="dense", target_kind="cuda",
    compute=simt_compute, family_operands=True, schedule=schedule_from_config,
    fallback=lambda space, wl, facts: fallback_tiles(wl, facts, space),
    check=lambda wl, facts: None, dtypes=("float32", "float16"), symbolic=True)

_SMALL_BATCH = dict(
    target_kind="cuda", compute=simt_compute, family_operands=True,
    schedule=schedule_small_batch, dtypes=("float32", "float16"),
    fallback=lambda space, wl, facts: fallback_small_batch(wl, facts, space))

DENSE_SMALL_BATCH_CUDA = ScheduleTemplate(
    name="dense_small_batch.cuda", op="dense", priority=1, **_SMALL_BATCH,
    check=lambda wl, facts: None if wl.M <= 64 else f"M={wl.M} > 64 (use dense_large_batch)")


# ---- batch_matmul_small_batch.cuda: dense_small_batch.cuda's kernel on each batch (the batch
# on blockIdx.z): decoding's attention, one row of q against a cache of keys, is a batch of
# matrix-vector products. On batch_matmul.cuda (its M x N tiles, each thread's sums over the
# whole K) torch.bmm / ours was 0.67 on the f16 family 32x1x128..4096:128x128 NT and 0.08 on
# P . V 32x1x128x4096 (H200, docs/BENCHMARKS.md).

#: The most rows of A for which batch_matmul_small_batch.cuda is the default.
SMALL_BATCH_DEFAULT_M = 8


def _small_batch_check(wl, facts):
    if wl.M > 64:
        return f"M={wl.M} > 64 (use batch_matmul.cuda)"
    if wl.batch > 65535:  # (blockIdx.z)
        return f"a batch of {wl.batch} > 65535"
    return None


def _small_batch_priority(wl, facts):
    """1 (the default) for few rows (``SMALL_BATCH_DEFAULT_M``); else -1 (tunable)."""
    return 1 if wl.M <= SMALL_BATCH_DEFAULT_M else -1


BATCH_MATMUL_SMALL_BATCH_CUDA = ScheduleTemplate(
    name="batch_matmul_small_batch.cuda", op="batch_matmul", check=_small_batch_check,
    priority=_small_batch_priority, symbolic=True, granular=True, **_SMALL_BATCH)
