"""The CPU templates ``batch_matmul.x86`` and ``dense_pack.x86``: one packed GEMM kernel.

Strategy (the one BLAS libraries use, written as a TensorIR schedule):

1. **Pack B** into panels ``B_packed[b, n // xi, k, n % xi]`` so that the micro-kernel reads xi
   consecutive floats of B per k whatever the layout of B (for NT the raw B is K-contiguous and
   would need a gather per element). The panel of one parallel task is packed inside that task
   (``compute_at``), so it stays in L2 and TIR allocates only that panel.
2. **Register micro-kernel**: a ``yi x xi`` tile of C accumulates in registers over the whole
   reduction (``cache_write`` to "local", kept on the stack by ``codegen.stack_tiles`` and
   promoted to vector registers by LLVM; a tile of 1024 bytes or more with nothing after the
   matmul accumulates in C itself, ``_in_place``; ``nt_store``: the local copy, written back
   by non-temporal stores, ``_nt_write_back``); ``xi`` is
   vectorised (a multiple of the vector width), the ``yi`` rows and ``ki`` steps of k are
   unrolled, so each k step is one broadcast of A per row and xi/lanes FMAs per row.
3. **Parallel** over (batch, N tiles, M tiles): one fused loop, as TOPI's x86 templates do.

Knobs (meanings of TVM <= 0.19's x86 templates, so old logs replay):
``tile_y = [yt, yo, yi]`` rows: parallel tiles, micro-tiles per task, rows in registers;
``tile_x = [xt, xo, xi]`` columns likewise, xi = vector/pack width;
``tile_k = [ko, ki]`` reduction, ki unrolled; ``tile_inner = [., r]`` rows of the register tile
updated per k step (r < yi trades register pressure for reloads of B).
batch_matmul.x86's 2-way ``tile_y = [yo, yi]`` and ``tile_x = [xo, xi]`` are the same with
yt = 1, xo = 1.
"""
from __future__ import annotations

import functools
from typing import List, Sequence

from ..template import ScheduleTemplate
from ..workload import DTYPE_BYTES, Workload
from .common import (CROP_BLOCK, MATMUL_BLOCK, TRANSPOSE_BLOCK, element_at, has_block,
                     inline_consumer, inline_producer, largest_factor, loop_with, pad_to_tiles,
                     rebuilt)


def packed_gemm_compute(wl, xi: int, prepacked: bool = False):
    """TE tensors [A, B, C] of the workload, with B packed into xi-wide panels; ``prepacked``:
    [A, B_packed, C], the panels an input (``prepacked_kernel``; a ragged last panel holds
    zero columns, whose sums the write-back crops)."""
    from tvm import te  # noqa: PLC0415

    if wl.N % xi and not prepacked:
        raise ValueError(f"pack width {xi} does not divide N={wl.N}")
    batched = wl.op != "dense"
    A = te.placeholder(wl.a_shape, wl.dtype, name="A")
    B = te.placeholder(wl.b_shape, wl.dtype, name="B")
    lead = (lambda b: (b,)) if batched else (lambda b: ())
    a_el, b_el = element_at(wl, A, B)

    def a_at(b, m, k):
        return a_el(lead(b), m, k)

    def b_at(b, n, k):
        return b_el(lead(b), n, k)

    nb = wl.batch if batched else 1
    cols = -(-wl.N // xi) * xi
    if prepacked:  # a dense weight packed ahead ([N / xi, K, xi]: pack_weight)
        B = te.placeholder((cols // xi, wl.K, xi), wl.dtype, name="B_packed")

        def p_at(b, z, k, x):
            return B[z, k, x]
    else:
        P = te.compute((nb, wl.N // xi, wl.K, xi),
                       lambda b, z, k, x: b_at(b, z * xi + x, k), name="B_packed")

        def p_at(b, z, k, x):
            return P[b, z, k, x]
    k = te.reduce_axis((0, wl.K), name="k")
    out = wl.out_dtype

    def body(b, i, j):
        return te.sum(a_at(b, i, k).astype(out) * p_at(b, j // xi, k, j % xi).astype(out),
                      axis=k)

    if batched:
        C = te.compute(wl.out_shape, lambda b, i, j: body(b, i, j), name=MATMUL_BLOCK)
    else:
        C = full = te.compute((wl.M, cols), lambda i, j: body(0, i, j), name=MATMUL_BLOCK)
        if cols != wl.N:  # the padded panels' sums, cropped (in the write-back: the schedule)
            C = te.compute(wl.out_shape, lambda i, j: full[i, j], name=CROP_BLOCK)
    return [A, B, C]


def pack_weight(wl, b, xi: int):
    """numpy: the weight ``b`` of a dense workload (``wl.b_shape``: [N, K] for NT, [K, N] for
    NN) as the panels the packed GEMM reads, ``[N / xi, K, xi]`` (``B_packed``), a ragged last
    panel filled with zero columns."""
    import numpy as np  # noqa: PLC0415
    kn = b.T if wl.transpose_b else b  # [K, N]
    cols = -(-wl.N // xi) * xi
    kn = np.pad(kn, ((0, 0), (0, cols - wl.N))) if cols != wl.N else kn
    return np.ascontiguousarray(kn.reshape(wl.K, cols // xi, xi).transpose(1, 0, 2))


def prepackable(template: str, wl, cfg) -> bool:
    """Whether a config has a prepacked kernel: a dense of dense_pack.x86 (plain or a
    subgraph task's) whose register rows and K step divide M and K (a ragged last panel of
    N: zero columns)."""
    return template == "dense_pack.x86" and wl.op == "dense" and \
        wl.M % cfg["tile_y"].size[-1] == 0 and wl.K % cfg["tile_k"].size[-1] == 0


def prepacked_kernel(wl, cfg, lanes: int = 0, prefetch: bool = True):
    """The PrimFunc (A, B_packed, [the epilogue's inputs,] C) of a dense_pack.x86 config whose
    B is packed ahead of time (``pack_weight``: a constant weight, packed once when the model
    is built): the config's kernel without its per-task packing, a subgraph task's epilogue
    (``wl.epilogue``) in its write-back. Only where the register rows and K step divide M
    and K (``prepackable``). ``lanes``: the vector lanes of the dtype (a config with
    ``nt_store`` needs them); ``prefetch``: ``_prefetch_next_panels``."""
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te  # noqa: PLC0415

    from ..template import schedule_with_epilogue, with_epilogue  # noqa: PLC0415

    if not prepackable("dense_pack.x86", wl, cfg):
        raise ValueError(f"no prepacked kernel for {wl} {cfg}")
    tensors, epilogue = with_epilogue(
        wl, packed_gemm_compute(wl.anchor, cfg["tile_x"].size[-1], prepacked=True))
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(tensors)}))
    schedule_with_epilogue(sch, epilogue, lambda: schedule_packed_gemm(
        sch, wl.anchor, tile_y=cfg["tile_y"].size, tile_x=cfg["tile_x"].size,
        tile_k=cfg["tile_k"].size, inner=cfg["tile_inner"].size[-1], prepacked=True,
        lanes=lanes, nt_store=bool(cfg.value("nt_store", 0)), in_place=not prefetch))
    return _prefetch_next_panels(sch, wl, cfg) if prefetch else sch.mod["main"]


#: LLVM's locality of the prepacked kernel's prefetches: 2, into L2 (x86 prefetcht1)
PREFETCH_LOCALITY = 2
#: The most prefetches issued together before a register tile's K loop
PREFETCH_BATCH = 64


def _prefetch_next_panels(sch, wl, cfg):
    """The scheduled prepacked kernel with prefetches of the next column task's panels (xo
    panels [K, xi], contiguous), one cache line after another over the task's register tiles:
    a few before each tile's K loop (``ko``), or at each K step where a tile would take over
    PREFETCH_BATCH lines. Without them a task's first tile waits on memory for its panel
    (lm_head on Zen 5: 80% of the FMA peak, 91% with them); at every K step of gemm2's tasks
    they cost 10 points on an Intel core (``bench.peak --gemm``). The tile accumulates
    in a "local" copy (``in_place`` off): in C, with a prefetch at every K step, LLVM no
    longer kept it in registers."""
    from tvm import tirx  # noqa: PLC0415

    func = sch.mod["main"]
    outer, io, jo, ko = (sch.get(loop) for loop in
                         sch.get_loops(sch.get_sblock(MATMUL_BLOCK + "_update"))[:4])
    B = func.params[1]
    panels, K, xi = (int(d) for d in B.shape)
    xo = cfg["tile_x"].size[-2]
    row_tasks = -(-wl.M // (cfg["tile_y"].size[-2] * cfg["tile_y"].size[-1]))
    col_tasks = int(outer.extent) // row_tasks
    per_line = 64 // DTYPE_BYTES[wl.dtype]
    lines = -(-xo * K * xi // per_line)
    tiles = int(io.extent) * int(jo.extent)
    batched = -(-lines // tiles) <= PREFETCH_BATCH  # else one or more at every K step
    steps = tiles if batched else tiles * int(ko.extent)
    per_step = -(-lines // steps)
    step = io.loop_var * jo.extent + jo.loop_var
    step = step if batched else step * ko.extent + ko.loop_var
    base = tirx.min(outer.loop_var // row_tasks + 1, col_tasks - 1) * (xo * K * xi)

    def prefetch(q):
        line = tirx.min(step * per_step + q, lines - 1)
        flat = tirx.min(base + line * per_line, panels * K * xi - 1)
        at = tirx.BufferLoad(B, [flat // (K * xi), flat // xi % K, flat % xi])
        return tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", tirx.call_intrin(
            "handle", "tirx.address_of", at), 0, PREFETCH_LOCALITY, 1))

    def insert(stmt):
        if isinstance(stmt, tirx.For) and stmt.loop_var.same_as(ko.loop_var):
            q = tirx.Var("q", "int32")
            ahead = tirx.For(q, 0, per_step, tirx.ForKind.UNROLLED, prefetch(q))
            return tirx.SeqStmt([ahead, stmt]) if batched else \
                loop_with(stmt, tirx.SeqStmt([ahead, stmt.body]))
        return rebuilt(stmt, insert)
    return func.with_body(insert(func.body))


def _split_tiles(sch, loop, per_task: int, inner: int):
    """(task, tile in task, in register tile) loops of an M or N loop. An extent that
    ``per_task * inner`` divides splits in three; a symbolic or padded one (a multiple of
    ``inner``) into register tiles first, then ``per_task`` of them per task, so that the
    predicate of a ragged last task stays on the task's tiles, never inside the micro-kernel."""
    from tvm import tirx  # noqa: PLC0415

    extent = sch.get(loop).extent
    if isinstance(extent, tirx.IntImm) and extent.value % (per_task * inner) == 0:
        return sch.split(loop, [None, per_task, inner])
    tiles, ii = sch.split(loop, [None, inner])
    return (*sch.split(tiles, [None, per_task]), ii)


def _pad_tiles(sch, block, per_task, tiles):
    """The tiles the matmul's (M, N, K) loops are padded to: the register tile and the K step.
    Where padding happens at all, a static M or N that its register tile divides but its tasks
    (``per_task`` register tiles) do not is still padded, by the fewest register tiles that a
    multiple of its tile pads it by (``q`` tiles, q the least count of tiles that does not
    divide the axis's): the crop's guard, which replaces the block's predicate when it is
    inlined into the write-back, would not cover the ragged last task of an axis it does not
    crop (TVM keeps one predicate of a block). Padding such an axis to whole tasks instead
    computed up to a task of zero tiles: dense 258x509x132's M ran as 384 rows (1.5x the
    work)."""
    from tvm import tirx  # noqa: PLC0415

    extents = [sch.get(loop).extent for loop in sch.get_loops(block)[-3:]]
    static = [isinstance(e, tirx.IntImm) for e in extents]
    if all(s and e.value % t == 0 for s, e, t in zip(static, extents, tiles)):
        return tuple(tiles)  # nothing to pad (pad_to_tiles leaves the kernel as it is)
    out = list(tiles)
    for axis in (0, 1):
        n, inner, task = extents[axis], tiles[axis], per_task[axis] * tiles[axis]
        if static[axis] and n.value % inner == 0 and n.value % task:
            count = n.value // inner
            out[axis] = inner * next(q for q in range(2, per_task[axis] + 1) if count % q)
    return tuple(out)


def divides(wl, cfg) -> bool:
    """Whether the register tile (yi x xi) and the K step divide M, N and K: the packed
    compute; else the plain matmul, padded up to them in the schedule."""
    return (wl.M % cfg["tile_y"].size[-1] == 0 and wl.N % cfg["tile_x"].size[-1] == 0
            and wl.K % cfg["tile_k"].size[-1] == 0)


def schedule_packed_gemm(sch, wl, tile_y: Sequence[int], tile_x: Sequence[int],
                         tile_k: Sequence[int], inner: int, unroll_k: bool = True,
                         prepacked: bool = False, lanes: int = 0, l1_bytes: int = 0,
                         nt_store: bool = False, in_place: bool = True,
                         transposed: bool = False):
    """tile_y = [yt, yo, yi], tile_x = [xt, xo, xi] (outer sizes may be -1), tile_k = [ko, ki].
    ``prepacked``: B is an input already in panels (``prepacked_kernel``), nothing to pack.
    ``lanes``: the vector lanes of the dtype, for packing a B stored [N, K] by register
    transposes of lanes x lanes blocks (``_transposed_pack``; 0: never); ``l1_bytes``: the
    L1 data cache, above which a padded B stored [N, K] packs across a panel's width;
    ``nt_store``: C written by non-temporal stores (``_nt_write_back``); ``in_place``: False,
    the tile in a "local" copy even where it could accumulate in C (``_in_place``);
    ``transposed``: the kernel's output is the transpose of the matmul's (``dense_swap.x86``),
    its register tile written back column by column, vectorised along its rows."""
    from tvm import tirx  # noqa: PLC0415

    _, yo, yi = tile_y
    _, xo, xi = tile_x
    ki = tile_k[-1]
    c = sch.get_sblock(MATMUL_BLOCK)
    tail = None
    edge = False  # B stored [N, K], padded or in a ragged last task: ``_edge_transposed_pack``
    try:
        pack, plain = None if prepacked else sch.get_sblock("B_packed"), False
    except Exception:  # the plain matmul compute (MetaSchedule, Relax): pack in the schedule
        pack, plain = None, True
    transposable = pack is not None  # the packed compute's pack: its panels' order
    if transposable and wl.transpose_b and not (
            _whole_tasks(sch.get(sch.get_loops(c)[-2]).extent, xo, xi)
            and wl.K % lanes == 0) and _edge_packable(wl, xi, lanes):
        # The packed compute's pack of a ragged last task or of a K of no whole number of
        # blocks: the edge pack (below), its loops in B's order
        batched = wl.op != "dense"
        sch.transform_block_layout(pack, lambda b, z, k, x: (
            (b, z * xi + x, k) if batched else (z * xi + x, k)))
        transposable, edge = False, True
    if plain:
        tail = _split_off_tail(sch, c, wl, tile_y, tile_x, ki, lanes)
        if tail is not None:
            c = sch.get_sblock(MATMUL_BLOCK + "_j0")
        # Extents the tiles do not divide (a shape family's symbolic ones, primes) are padded
        # up to the register tile and the K step: no predicate inside the micro-kernel; the
        # zeros of A are read in it, those of B written into the panel, and the crop is the
        # write-back's (its guard also covers a ragged last task of a padded axis).
        pad_to_tiles(sch, c, _pad_tiles(sch, c, (yo, xo), (yi, xi, ki)))
        pack = sch.cache_read(c, 1, "global")
        batched = wl.op != "dense"
        if wl.transpose_b:  # B[.., n, k] -> panels [.., n // xi, k, n % xi]
            index_map = (lambda b, n, k: (b, n // xi, k, n % xi)) if batched else \
                (lambda n, k: (n // xi, k, n % xi))
        else:  # B[.., k, n]
            index_map = (lambda b, k, n: (b, n // xi, k, n % xi)) if batched else \
                (lambda k, n: (n // xi, k, n % xi))
        if tail is not None:
            # B's rows end inside a panel that only the tail's columns would read: the pack
            # of the main part, in the panels' order, reads whole panels (``_unpadded``)
            sch.transform_layout(pack, ("write", 0), index_map, pad_value=0.0)
            if not _unpadded(sch, pack):  # no padding: its loops are still B's own
                sch.transform_block_layout(pack, index_map)
            transposable = True
        else:
            sch.transform_layout(pack, ("write", 0), index_map)
        if wl.transpose_b and tail is None:
            # Where B itself is not padded, in whole blocks: the pack's loops in the panels'
            # order, as the packed compute's, and its register transposes. A padded B of
            # static sizes, or one whose last task is ragged (packed under a predicate, which
            # the intrinsic cannot take): its whole blocks by transposes too, the rest element
            # by element, in B's order (``_edge_transposed_pack``, below). Else in a vector
            # loop: along K (rows of B loaded whole, their values stored a panel row apart)
            # while a task's panel fits in L1; across the panel's width (gathered loads, whole
            # stores) where it does not (lm_head's fallback: 72.0 -> 33.9 ms).
            whole = _whole_tasks(sch.get(sch.get_loops(c)[-2]).extent, xo, xi)
            transposable = _panel_loops(sch, pack, wl, xi, lanes) and whole
            edge = not transposable and _edge_packable(wl, xi, lanes) and all(
                isinstance(sch.get(loop).extent, tirx.IntImm) for loop in sch.get_loops(pack))
            if transposable or (not edge and wl.K * xi * DTYPE_BYTES[wl.dtype] > l1_bytes > 0):
                sch.transform_block_layout(pack, index_map)
    loops = sch.get_loops(c)
    batch_loops: List = list(loops[:-3])
    i, j, kk = loops[-3:]
    cols = sch.get(j).extent  # the columns this block computes (split: the main part's)
    it, io, ii = _split_tiles(sch, i, yo, yi)
    jt, jo, ji = _split_tiles(sch, j, xo, xi)
    ko, kin = sch.split(kk, [None, ki])
    ii_o, ii_i = sch.split(ii, [None, inner])
    # jt before it: consecutive tasks of one thread share a B panel.
    sch.reorder(*batch_loops, jt, it, io, jo, ko, ii_o, kin, ii_i, ji)
    outer = sch.fuse(*batch_loops, jt, it)
    parallel_unless_tiny(sch, outer, wl)
    # Accumulate the yi x xi tile in registers; write it back once, vectorised (or, for a
    # large tile with nothing after the matmul, in C itself: ``_in_place``); ``nt_store``:
    # written back by non-temporal stores (``_nt_write_back``).
    if nt_store:
        _check_nt_store(sch, c, wl, xi, lanes)
    if nt_store or not (in_place and _in_place(sch, c, yi * xi * DTYPE_BYTES[wl.out_dtype])):
        acc = sch.cache_write(c, 0, "local")
        sch.reverse_compute_at(acc, jo)
        inline_consumer(sch, acc)  # a padded M or N: the crop, in the write-back
        own = [loop for loop in sch.get_loops(acc) if not any(
            sch.get(loop).same_as(sch.get(x)) for x in sch.get_loops(c))] if transposed else []
        if len(own) == 2:  # C[j, i] = tile[i, j]: C's rows along the tile's i
            sch.reorder(own[1], own[0])
            sch.unroll(own[1])  # (each column's lanes taken from the registers)
        last = sch.get_loops(acc)[-1]
        # A one-row, one-column tile has no loops of its own under jo: vectorizing "its last
        # loop" would vectorize jo, around the serial reduction (wrong sums).
        if not sch.get(last).same_as(sch.get(jo)):
            if nt_store:  # one vector loop, which the intrinsic's stores replace whole
                sch.vectorize(last)
            else:
                vectorize_lanes(sch, last, lanes)
        if nt_store:
            _nt_write_back(sch, last, outer, wl, xi, lanes)
    if pack is not None:
        inline_producer(sch, pack)  # a padded N or K: the zeros of B, written into the panel
        _clamp_padded(sch, pack, "B", -2 if wl.transpose_b else -1)  # its N index
        # Pack this task's B panel inside the task (stays in cache; TIR allocates the panel).
        sch.compute_at(pack, outer)
    if has_block(sch, "A_pad"):  # a padded M or K: the zeros of A, read in the micro-kernel
        # (a per-task copy of A's rows instead measured 1.5x slower on 257 x 509 x 131)
        sch.compute_inline(sch.get_sblock("A_pad"))
        _clamp_padded(sch, c, "A", -1 if wl.transpose_a else -2)  # its M index
    # a ragged last task (its columns not a whole number of the task's panels) packs under a
    # predicate, which the intrinsic cannot take
    whole = _whole_tasks(cols, xo, xi)
    transposed = transposable and whole and _transposed_pack(sch, pack, outer, wl, lanes)
    if pack is not None and edge:
        transposed = _edge_transposed_pack(sch, pack, outer, wl, xi, lanes)
    own = sch.get_loops(pack) if pack is not None and not transposed else None
    if own and not sch.get(own[-1]).same_as(sch.get(outer)):  # a 1x1 panel: no loop of its own
        vectorize_lanes(sch, own[-1], lanes)
    sch.unroll(ii_o)
    if unroll_k:
        sch.unroll(kin)
    sch.unroll(ii_i)
    vectorize_lanes(sch, ji, lanes)
    sch.decompose_reduction(c, ko)
    if tail is not None:
        _schedule_tail(sch, tail, lanes)


def vectorize_lanes(sch, loop, lanes: int):
    """Vectorize ``loop``; one of a whole number of vectors that is not a power of two (3:
    48 f32 lanes on AVX-512, 24 on AVX2; 5, 6, 7) as that many vector loops, unrolled. LLVM
    legalizes a <48 x float> by moving single elements through the stack (23 ms against 3.3
    for 8 x 32 on dense 128x3072x768 NT)."""
    from tvm import tirx  # noqa: PLC0415

    extent = sch.get(loop).extent
    if not isinstance(extent, tirx.IntImm):
        # a loop of symbolic extent stays scalar: TVM vectorizes one only for targets with
        # scalable vectors (a shape family's K in the pack of a weight stored [N, K] failed
        # to build: "Failed to vectorize loop with extent (k + 3) // 4 * 4")
        return
    if lanes and extent.value % lanes == 0:
        vectors = extent.value // lanes
        if vectors & (vectors - 1):
            outer, inner = sch.split(loop, [vectors, lanes])
            sch.unroll(outer)
            sch.vectorize(inner)
            return
    sch.vectorize(loop)


#: Fewer flops than this run on the calling thread alone: waking TVM's thread pool costs more
#: than the work (batch_matmul 32x7x7x7, 22 kflop: 2.7 us in parallel, 0.5 alone: ``python -m
#: tvm_ext.bench.shapes``, Zen 5). dense 33x65x129 (553 kflop) stays parallel.
SERIAL_FLOPS = 1 << 17


def parallel_unless_tiny(sch, loop, wl):
    """Mark ``loop`` parallel, unless the workload's flops are under ``SERIAL_FLOPS``."""
    if wl.flop >= SERIAL_FLOPS:
        sch.parallel(loop)


#: The most of N that the columns split off a padded B stored [N, K] may be
#: (``_split_off_tail``): they are computed by a plain vector dot product.
TAIL_SHARE = 1 / 16


def _split_off_tail(sch, c, wl, tile_y, tile_x, ki: int, lanes: int):
    """Split the plain compute's matmul block ``c`` along N into the columns its tasks cover
    whole (block ``C_j0``: B not padded, so packed by register transposes) and the few after
    them (``C_j1``, returned; None where nothing is split). Padding B instead made the whole
    weight pack through the gathering loop (lm_head: 0.95x -> 1.48x numpy split). Only
    where nothing else is padded (M, K and the main part's N divide the tiles: ``pad_einsum``
    does not take a partitioned block), the tail is at most ``TAIL_SHARE`` of N, and nothing
    follows the matmul (a fused epilogue needs one producer)."""
    from tvm import tirx  # noqa: PLC0415

    _, yo, yi = tile_y
    _, xo, xi = tile_x
    loops = sch.get_loops(c)
    m, n, k = (sch.get(loop).extent for loop in loops[-3:])
    if not (_transposes(wl, lanes) and xi % lanes == 0 and xo > 0
            and all(isinstance(e, tirx.IntImm) for e in (m, n, k))):
        return None
    m, n, k, task = m.value, n.value, k.value, xo * xi
    main = n // task * task
    if (main == n or main == 0 or (n - main) > TAIL_SHARE * n or m % yi or k % ki
            or k % lanes or sch.get_consumers(c)):
        return None
    *batch, i, j, kk = loops
    sch.reorder(j, *batch, i)
    sch.loop_partition(j, [main, None])
    for name in ("_j0", "_j1"):  # (j part, *batch, i, k) -> (*batch, i, j part, k)
        block = sch.get_sblock(MATMUL_BLOCK + name)
        part, *outer, _ = sch.get_loops(block)
        sch.reorder(*outer, part)
        _point_regions(sch, block)
    return sch.get_sblock(MATMUL_BLOCK + "_j1")


def _point_regions(sch, c):
    """A block of ``loop_partition`` declares the whole part it covers as its regions (C[0:M,
    0:N0]), which every later primitive would take for each iteration's (a cache of C written
    back whole by every task, a race): the regions it accesses per iteration, from its body,
    as the matmul block had them (its output not among the reads)."""
    from tvm.s_tir.analysis import get_sblock_read_write_region  # noqa: PLC0415

    block = sch.get(c)
    func = sch.mod[sch.func_working_on.name_hint] if sch.func_working_on else sch.mod["main"]
    reads, writes = get_sblock_read_write_region(block, {p: p for p in func.params})
    reads = [r for r in reads if not any(r.source.same_as(w.source) for w in writes)]
    _rewrite_block(sch, c, reads=reads, writes=writes)


def _unpadded(sch, pack) -> bool:
    """The pack of ``_split_off_tail``'s main part, made by ``transform_layout`` with a pad
    value: where B's rows end inside its last panel, ``if_then_else(<in the padding>, 0,
    B[..])`` becomes ``B[..]``, its loops already in the panels' order. The main part reads
    whole panels only, and ``compute_at`` narrows the pack to the panels its task reads, so
    the padding is never computed. Returns whether there was padding (none where N is whole
    panels and only the last task is ragged)."""
    from tvm import tirx  # noqa: PLC0415
    from tvm.ir import Call  # noqa: PLC0415

    block = sch.get(pack)
    store = block.body
    value = store.value
    if not (isinstance(value, Call) and value.op.name.endswith("if_then_else")):
        return False
    _rewrite_block(sch, pack, body=tirx.BufferStore(store.buffer, value.args[2], store.indices))
    return True


def _schedule_tail(sch, tail, lanes: int):
    """The columns ``_split_off_tail`` left: each output a dot product along K in lanes-wide
    vector partial sums (as ``dense_gemv.x86``), rows in parallel, then the lanes' sums. Its N
    loop does not start at 0, and TVM splits no such loop nor computes a block at it (its
    regions come out whole: a "local" accumulator written back whole by every row, a race),
    so the partial sums stay in their own buffer, [lanes, M, tail]."""
    *batch, i, j, k = sch.get_loops(tail)
    ko, kv = sch.split(k, [None, lanes])
    rf = sch.rfactor(kv, 0)
    *batch, i, j, ko, kv = sch.get_loops(rf)
    sch.parallel(sch.fuse(*batch, i) if batch else i)
    sch.vectorize(kv)
    sch.decompose_reduction(rf, ko)


def _clamp_padded(sch, c, name: str, row: int):
    """The padded rows of A (its M index: ``row``) or columns of B (its N index) in block
    ``c`` read as its last row or column instead of as zeros: ``if_then_else(i < M, A[i, k],
    0)`` (the inlined pad) becomes ``A[min(i, M - 1), k]``, so that the micro-kernel (for A)
    or the pack (for B) has no branch per element (LLVM cannot turn a guarded load into a
    select); the padded rows and columns of C are cropped, never written, so what they hold
    does not matter. A padded K keeps its zeros (an inf times a zero would be a NaN)."""
    from tvm import tirx  # noqa: PLC0415
    from tvm.ir import Call, TensorLoad  # noqa: PLC0415

    from .common import conjuncts  # noqa: PLC0415

    changed = []

    def clamp(e):
        if isinstance(e, Call) and e.op.name.endswith("if_then_else") and \
                isinstance(e.args[1], TensorLoad) and e.args[1].source.name == name:
            keep, idx = [], list(e.args[1].indices)
            for cond in conjuncts(e.args[0]):
                if isinstance(cond, tirx.LT) and cond.a.same_as(idx[row]):
                    idx[row] = tirx.max(tirx.min(idx[row], cond.b - 1), 0)
                    changed.append(cond)
                else:
                    keep.append(cond)
            load = tirx.BufferLoad(e.args[1].source, idx)
            if not keep:
                return load
            return tirx.if_then_else(functools.reduce(tirx.And, keep), load, e.args[2])
        if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul)):
            return type(e)(clamp(e.a), clamp(e.b))
        if isinstance(e, tirx.Cast):
            return tirx.Cast(e.dtype, clamp(e.value))
        return e

    block = sch.get(c)
    store = block.body
    value = clamp(store.value)
    if not changed:  # nothing padded along that axis
        return
    _rewrite_block(sch, c, body=tirx.BufferStore(store.buffer, value, store.indices))


def _rewrite_block(sch, rv, *, body=None, reads=None, writes=None):
    """Replace block ``rv`` in the schedule's state by a copy with a new body (a store) or new
    declared regions; everything else (iter vars, init, buffers, annotations) as it was."""
    block = sch.get(rv)
    new = type(block)(block.iter_vars, block.reads if reads is None else reads,
                      block.writes if writes is None else writes, block.name_hint,
                      block.body if body is None else body, block.init, block.alloc_buffers,
                      block.match_buffers, block.annotations)
    sch.state.replace(sch.get_sref(rv), new, {block: new})


def _transposes(wl, lanes: int) -> bool:
    """Whether a B of ``wl`` packs by lanes x lanes register transposes at all: stored [N, K],
    of a dtype the intrinsic has, lanes a power of two."""
    from .x86_intrin import LLVM_TYPES  # noqa: PLC0415
    return lanes >= 2 and not lanes & (lanes - 1) and wl.transpose_b and wl.dtype in LLVM_TYPES


def _panel_loops(sch, pack, wl, xi: int, lanes: int) -> bool:
    """Whether the pack of the plain compute (a Relax or MetaSchedule matmul, or a shape
    padded in the schedule) can be the packed compute's: its loops in the panels' order
    (``transform_block_layout``), so that ``_transposed_pack`` applies. Where B is stored
    [N, K] and is not padded (no "_pad" producer: only M is), in whole lanes x lanes blocks."""
    from tvm import tirx  # noqa: PLC0415

    if not _transposes(wl, lanes) or xi % lanes:
        return False
    if any(sch.get(p).name_hint.endswith("_pad") for p in sch.get_producers(pack)):
        return False
    n, k = [sch.get(loop).extent for loop in sch.get_loops(pack)[-2:]]
    return all(isinstance(e, tirx.IntImm) for e in (n, k)) and n.value % xi == 0 \
        and k.value % lanes == 0


def _transposed_pack(sch, pack, outer, wl, lanes: int) -> bool:
    """Pack a B stored [N, K] (NT) into its panels by lanes x lanes register transposes
    (``x86_intrin.transpose_intrin``: lanes row loads along K, shuffles, lanes row stores)
    instead of a vector loop over the panel's width, which LLVM builds from scalar loads at a
    stride of K. Where the panel's width and its K are whole blocks (the packed compute, or
    the plain one whose B is not padded: ``_panel_loops``); returns whether it did (the
    dense row: 1.16x -> 1.31-1.34x numpy)."""
    from tvm import tirx  # noqa: PLC0415

    from .x86_intrin import transpose_intrin, transpose_ir  # noqa: PLC0415
    if not _transposes(wl, lanes):
        return False
    loops = sch.get_loops(pack)
    at = [n for n, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(outer))]
    own = loops[at[0] + 1:] if at else loops
    if len(own) < 2:  # a panel one column wide has no loop across it (and the task's loop
        return False  # must not be taken for one)
    k, x = own[-2:]
    extents = [sch.get(loop).extent for loop in (k, x)]
    if not all(isinstance(e, tirx.IntImm) and e.value % lanes == 0 for e in extents):
        return False
    ko, ki = sch.split(k, [None, lanes])
    xo, xi = sch.split(x, [None, lanes])
    sch.reorder(ko, xo, ki, xi)
    sch.tensorize(ki, transpose_intrin(wl.dtype, lanes))
    # the intrinsic's body: LLVM IR linked into the kernel's module and inlined there
    _import_llvm(sch, outer, transpose_ir(wl.dtype, lanes))
    return True


def _whole_tasks(cols, xo: int, xi: int) -> bool:
    """Whether ``cols`` columns are a whole number of tasks of ``xo`` panels ``xi`` wide."""
    from tvm import tirx  # noqa: PLC0415
    return isinstance(cols, tirx.IntImm) and xo > 0 and cols.value % (xo * xi) == 0


def _edge_packable(wl, xi: int, lanes: int) -> bool:
    """Whether a B of ``wl`` that the register transposes' intrinsic cannot pack (padded, or
    in a ragged last task) may pack by ``_edge_transposed_pack``: stored [N, K], static sizes,
    a panel of whole blocks and at least one whole block along K."""
    from tvm import tirx  # noqa: PLC0415
    sizes = (wl.N, wl.K)
    return (_transposes(wl, lanes) and xi % lanes == 0
            and all(isinstance(s, (int, tirx.IntImm)) for s in sizes) and int(wl.K) >= lanes)


def _holds_inside(pred, row, n_rows: int) -> bool:
    """Whether block predicate ``pred`` holds wherever the block's row of B, ``row``, is inside
    B (below ``n_rows``): each of its conjuncts ``e < c`` with ``e`` the row plus a constant
    (a ragged last task's ``row < padded N``), so that a block inside B may be copied whole."""
    from tvm import sym, tirx  # noqa: PLC0415

    from .common import conjuncts  # noqa: PLC0415
    if isinstance(pred, tirx.IntImm) and pred.value:
        return True
    analyzer = sym.Analyzer()
    for cond in conjuncts(pred):
        if not (isinstance(cond, tirx.LT) and isinstance(cond.b, tirx.IntImm)):
            return False
        offset = analyzer.canonical_simplify(cond.a - row)
        if not (isinstance(offset, tirx.IntImm) and n_rows - 1 + offset.value < cond.b.value):
            return False
    return True


def _unclamped(e, extent: int):
    """``e`` without the clamp into [0, extent) that ``_clamp_padded`` puts on an index,
    ``max(min(x, extent - 1), 0)``."""
    from tvm import tirx  # noqa: PLC0415
    if isinstance(e, tirx.Max) and isinstance(e.a, tirx.Min) and \
            isinstance(e.b, tirx.IntImm) and e.b.value == 0 and \
            isinstance(e.a.b, tirx.IntImm) and e.a.b.value == extent - 1:
        return e.a.a
    return e


def _edge_transposed_pack(sch, pack, outer, wl, xi: int, lanes: int) -> bool:
    """Pack a padded B stored [N, K] (N past whole panels, K past whole blocks: dense 257x509x131
    NT) into its panels by lanes x lanes register transposes wherever a block lies inside B,
    and element by element (the pack's own body: the clamped rows, the zeros past K) at the
    edges: the blocks of rows past N (the last panel only) and the columns past K's whole
    blocks; also under a ragged last task's predicate where it only drops rows past B
    (``_holds_inside``). As one vector loop along K, LLVM built the padded pack from a scalar
    load and store per element. Rewrites the pack's loops under
    ``outer`` (B's order: the task's rows of B, a whole number of panels, then K) in the
    schedule's state; returns whether it did."""
    from tvm import ir, s_tir, tirx  # noqa: PLC0415
    from tvm.ir import Call, TensorLoad  # noqa: PLC0415
    from tvm.tirx.analysis import undefined_vars  # noqa: PLC0415

    from .common import conjuncts, substitute  # noqa: PLC0415
    from .x86_intrin import transpose_ir, transpose_symbol  # noqa: PLC0415

    loops = sch.get_loops(pack)
    at = [n for n, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(outer))]
    own = loops[at[0] + 1:] if at else []
    if len(own) != 2:
        return False
    rows, ks = sch.get(own[0]), sch.get(own[1])
    realize = ks.body
    if not (isinstance(realize, s_tir.SBlockRealize) and isinstance(rows.extent, tirx.IntImm)
            and rows.extent.value % xi == 0 and isinstance(ks.extent, tirx.IntImm)):
        return False
    block = realize.block
    store = block.body
    if not isinstance(store, tirx.BufferStore) or block.init is not None:
        return False
    bind = dict(zip((iv.var for iv in block.iter_vars), realize.iter_values))
    v_k = [v for v, e in bind.items() if isinstance(e, tirx.Var) and e.same_as(ks.loop_var)]
    v_n = [v for v, e in bind.items()
           if any(u.same_as(rows.loop_var) for u in undefined_vars(e, []))]
    if len(v_k) != 1 or len(v_n) != 1:
        return False
    v_k, v_n = v_k[0], v_n[0]
    # the value: B[.., n, k], its n clamped into B, under a condition that n and k are inside
    # B (the zeros past K): on a block inside B, B[.., n, k] itself
    value = load = store.value
    guarded = isinstance(value, Call) and value.op.name.endswith("if_then_else")
    if guarded:
        load = value.args[1]
    if not isinstance(load, TensorLoad) or len(load.source.shape) < 2:
        return False
    src, dst = load.source, store.buffer
    if not all(isinstance(d, tirx.IntImm) for d in (*src.shape[-2:], dst.shape[-1])):
        return False  # symbolic sizes (a shape family's kernels, a tied axis)
    n_rows, k_cols = (d.value for d in src.shape[-2:])
    inside_b = ((v_n, n_rows), (v_k, k_cols))
    if guarded and not all(
            isinstance(c, tirx.LT) and isinstance(c.b, tirx.IntImm) and
            any(c.a.same_as(v) and c.b.value == size for v, size in inside_b)
            for c in conjuncts(value.args[0])):
        return False
    index = list(load.indices[:-2]) + [_unclamped(load.indices[-2], n_rows),
                                       _unclamped(load.indices[-1], k_cols)]
    if not (index[-1].same_as(v_k) and index[-2].same_as(v_n)) or len(store.indices) < 2 or \
            not store.indices[-2].same_as(v_k) or dst.shape[-1].value != xi or k_cols < lanes:
        return False

    def at_offsets(x, k):  # the pack's iter vars where its loops are at (x, k)
        sub = {rows.loop_var: x, ks.loop_var: k}
        return {v: substitute(e, sub) for v, e in bind.items()}

    def element_loops(name, x0, k0, k_extent):  # the pack's own body over lanes x k_extent
        x, k = tirx.Var("x", "int32"), tirx.Var("k", "int32")
        values = at_offsets(x0 + x, k0 + k)
        copy = s_tir.SBlock(block.iter_vars, block.reads, block.writes,
                            f"{block.name_hint}_{name}", block.body, None, block.alloc_buffers,
                            block.match_buffers, block.annotations)
        sub = {rows.loop_var: x0 + x, ks.loop_var: k0 + k}
        inner = s_tir.SBlockRealize([values[iv.var] for iv in block.iter_vars],
                                    substitute(realize.predicate, sub), copy)
        return tirx.For(x, 0, lanes, tirx.ForKind.SERIAL,
                        tirx.For(k, 0, k_extent, tirx.ForKind.SERIAL, inner))

    def transposed(x0, k0):  # one block by the intrinsic's function
        values = at_offsets(x0, k0)
        src_at = [substitute(e, values) for e in index]
        dst_at = [substitute(e, values) for e in store.indices]
        one = [ir.Range.from_min_extent(e, 1) for e in src_at[:-2]]
        src_region = tirx.BufferRegion(src, one + [ir.Range.from_min_extent(src_at[-2], lanes),
                                                   ir.Range.from_min_extent(src_at[-1], lanes)])
        one = [ir.Range.from_min_extent(e, 1) for e in dst_at[:-2]]
        dst_region = tirx.BufferRegion(dst, one + [ir.Range.from_min_extent(dst_at[-2], lanes),
                                                   ir.Range.from_min_extent(dst_at[-1], lanes)])
        views = [tirx.decl_buffer((lanes, lanes), src.dtype, name,
                                  strides=[tirx.Var(f"{name}_stride", "int32"), 1],
                                  elem_offset=tirx.Var(f"{name}_offset", "int32"),
                                  offset_factor=1) for name in ("S", "D")]
        S, D = views
        call = tirx.call_extern("void", transpose_symbol(src.dtype, lanes), D.access_ptr("w"),
                                tirx.Cast("int64", D.strides[0]), S.access_ptr("r"),
                                tirx.Cast("int64", S.strides[0]))
        body = s_tir.SBlock([], [src_region], [dst_region], f"{block.name_hint}_transposed",
                            tirx.Evaluate(call), None, [],
                            [s_tir.MatchBufferRegion(S, src_region),
                             s_tir.MatchBufferRegion(D, dst_region)])
        return s_tir.SBlockRealize([], tirx.const(True, "bool"), body)

    # Blocks along K outside, across the task's rows inside: the panels are written in order
    # (a panel of 768 x 16 f32 outgrows L1; written in two passes of half its width, dense
    # 63x50257x768's pack measured slower than the gathering loop it replaces there).
    whole_k, row_blocks = k_cols // lanes * lanes, rows.extent.value // lanes
    xb, kb = tirx.Var("xb", "int32"), tirx.Var("kb", "int32")
    row0 = at_offsets(xb * lanes, 0)[v_n]
    inside = row0 + lanes <= n_rows  # the block's rows all within B (all but the last panel)
    if not _holds_inside(realize.predicate, bind[v_n], n_rows):
        return False  # the block's predicate may exclude rows of B
    body = tirx.For(kb, 0, k_cols // lanes, tirx.ForKind.SERIAL, tirx.For(
        xb, 0, row_blocks, tirx.ForKind.SERIAL, tirx.IfThenElse(
            inside, transposed(xb * lanes, kb * lanes),
            element_loops("edge", xb * lanes, kb * lanes, lanes))))
    if ks.extent.value > whole_k:  # K's last columns and its padding
        xr = tirx.Var("xr", "int32")
        rest = tirx.For(xr, 0, row_blocks, tirx.ForKind.SERIAL, element_loops(
            "rest", xr * lanes, whole_k, ks.extent.value - whole_k))
        # one loop in the schedule's tree for the two (its state replaces a loop by a loop)
        body = tirx.For(tirx.Var("p", "int32"), 0, 1, tirx.ForKind.SERIAL,
                        tirx.SeqStmt([body, rest]))
    sch.state.replace(sch.get_sref(own[0]), body, {})
    _import_llvm(sch, outer, transpose_ir(src.dtype, lanes))
    return True


def _import_llvm(sch, loop, ir: str):
    """Import LLVM IR into the kernel's module under ``loop`` (``pragma_import_llvm``), after
    whatever IR is imported there already (a loop holds one such annotation)."""
    key = "pragma_import_llvm"
    had = sch.get(loop).annotations.get(key)
    if had is not None:
        had = had.value if hasattr(had, "value") else str(had)
        sch.unannotate(loop, key)
        ir = had + "\n" + ir
    sch.annotate(loop, key, ir)


def _check_nt_store(sch, c, wl, xi: int, lanes: int):
    """ValueError unless the register tile of matmul block ``c`` can be written back by
    ``_nt_write_back``: nothing follows the matmul (no crop of a padded M or N, no cast, no
    epilogue: the write-back is a plain copy) and the tile's rows are whole vectors (a config
    that asks for it is not built without it)."""
    from .x86_intrin import LLVM_TYPES  # noqa: PLC0415
    if sch.get_consumers(c):
        raise ValueError("nt_store: only for a matmul that nothing follows (no padded M or N, "
                         "no cast, no epilogue)")
    if wl.out_dtype not in LLVM_TYPES or lanes < 1 or xi % lanes:
        raise ValueError(f"nt_store: a row of {xi} {wl.out_dtype} is not whole vectors of "
                         f"{lanes}")


def _nt_write_back(sch, row, outer, wl, xi: int, lanes: int):
    """The register tile's write-back (its vectorised ``row`` loop; the tile in a "local" copy,
    kept in registers by ``codegen.stack_tiles`` whatever its size) by
    ``x86_intrin.nt_store_intrin``: non-temporal stores, which send C to memory without first
    reading each of its lines (the bmm row's 100 MB of C: 18.1 -> 15.1 ms on Zen 4), the tasks of
    ``outer`` ended by a fence (``x86_intrin.FENCE_TASKS``). ``_check_nt_store`` first."""
    from .x86_intrin import FENCE_TASKS, nt_store_intrin, nt_store_ir  # noqa: PLC0415
    sch.tensorize(row, nt_store_intrin(wl.out_dtype, xi))
    _import_llvm(sch, outer, nt_store_ir(wl.out_dtype, xi, lanes))
    sch.annotate(outer, FENCE_TASKS, 1)


#: TVM's runtime::kMaxStackAlloca: a CPU allocation of this many bytes or more is a heap
#: workspace (TVMBackendAllocWorkspace), not a stack array.
MAX_STACK_ALLOCA = 1024


def _in_place(sch, c, tile_bytes: int) -> bool:
    """Whether the register tile accumulates in the output C itself rather than in a "local"
    copy written back at the end: where nothing follows the matmul block (no crop of a padded
    shape, no cast, no fused epilogue) and the tile is MAX_STACK_ALLOCA bytes or more (TVM put
    such a "local" tile in a heap workspace, before ``codegen.stack_tiles``; C, a noalias
    argument, LLVM keeps in registers). It stays: the shipped records were measured with it."""
    return tile_bytes >= MAX_STACK_ALLOCA and not sch.get_consumers(c)


#: The most padding of M (a share of it, 1 / PAD_SHARE) for which the fallback takes the
#: full register tile's rows rather than fewer that divide M (``fallback_tiles``).
PAD_SHARE = 64


def fallback_tiles(wl, facts, pad_m: bool = True):
    """A good untuned tiling from the vector width and register count (no shape constants):
    xi = two vectors, yi as many rows as leave registers for the B vectors and a broadcast
    (padding M up to them where fewer divide it and, with ``pad_m``, where the padding is
    small: the template's fallback weighs that against whole tiles, ``_fallback``),
    ki = 4 (enough unrolled work to hide FMA latency), enough parallel tasks for every core.
    An axis without such a divisor (a prime, 509 columns) is padded up to the tile rather
    than served by one-element tiles (0.04x numpy measured on 257x509x131); a prime K is
    padded where the space allows it (``_padded_k``)."""
    lanes = facts["vector_lanes"]
    regs = facts["vector_registers"]
    xi = largest_factor(wl.N, 2 * lanes, lanes) if wl.N >= lanes else wl.N
    if wl.N >= lanes and xi % lanes:  # no whole vectors divide N: pad to two (one) of them
        xi = 2 * lanes if wl.N >= 2 * lanes else lanes
    vecs = max(1, xi // lanes)
    rows = max(1, min(8, (regs - vecs - 2) // vecs))
    yi = largest_factor(wl.M, rows)
    if 2 * yi <= rows and wl.M > rows:  # few rows divide M: pad it to the register tile
        yi = rows
    elif pad_m and yi < rows and -(-wl.M // rows) * rows - wl.M <= wl.M // PAD_SHARE:
        # the full register tile where it pads M by little: 6 rows of two AVX2 vectors on
        # M = 1024 ran 6% and 11% faster than the 4 that divide it (gemm1, gemm2 on Zen 4)
        yi = rows
    ki = largest_factor(wl.K, 4)  # a prime K: see _padded_k
    col_tiles = -(-wl.N // xi)
    row_tiles = -(-wl.M // yi)
    # Two tasks a core; one where a column panel of B outgrows a core's L2 (a deep K): each
    # task packs its panel, so row tiles split into more tasks pack it more times over (dense
    # 64x64x65536 NN, 8 MB panels on 2 cores: 4 tasks 2.1-2.5 ms, 2 tasks 1.7; ``bench.shapes``)
    l2 = facts.get("l2_bytes", 0)
    deep = l2 and wl.K * xi * DTYPE_BYTES[wl.dtype] > l2
    tasks_wanted = (1 if deep else 2) * facts["num_cores"]
    yt = 1
    while wl.batch * col_tiles * yt < tasks_wanted and row_tiles % (yt * 2) == 0:
        yt *= 2
    return {"yt": yt, "yi": yi, "xi": xi, "ki": ki}


# ---- batch_matmul.x86: TVM <= 0.19's 2-way knobs tile_y = [yo, yi], tile_x = [xo, xi],
# tile_k = [ko, ki]; (batch, column panels) in parallel.

def _packed_compute(wl, cfg):
    """Both templates pack B into panels of the register tile's width: in the compute where
    the tiles divide the shape, else in the schedule, after padding (``pad_to_tiles``)."""
    if divides(wl, cfg):
        return packed_gemm_compute(wl, cfg["tile_x"].size[-1])
    return _plain(wl)


def _bmm_schedule(sch, cfg, wl, facts):
    yi = cfg["tile_y"].size[-1]
    xi = cfg["tile_x"].size[-1]
    yt = cfg.value("yt", 1)
    inner = cfg["tile_inner"].size[-1] if "tile_inner" in cfg else yi
    # One parallel task per (batch, column panel, yt row chunk); the rows of a chunk are walked
    # inside the task, so the packed panel is reused by every row tile of the chunk.
    xc = cfg.value("xc", 1)
    schedule_packed_gemm(sch, wl, tile_y=[yt, -(-wl.M // yi) // yt, yi], tile_x=[-1, xc, xi],
                         tile_k=cfg["tile_k"].size, inner=inner,
                         unroll_k=bool(cfg.value("unroll_k", 1)), lanes=facts["vector_lanes"],
                         l1_bytes=facts.get("l1d_bytes", 0),
                         nt_store=bool(cfg.value("nt_store", 0)))


def _if_allowed(space, values, change):
    """``values`` updated by ``change`` where that breaks none of the space's rules that
    ``values`` keep, else ``values``."""
    changed = {**values, **change}
    try:
        before = set(space.violations(space.config_from_values(values)))
        after = set(space.violations(space.config_from_values(changed)))
    except Exception:  # noqa: BLE001  (a value the space cannot hold: keep ``values``)
        return values
    return changed if after <= before else values


def _padded_k(space, values):
    """``values`` with 4 unrolled K steps instead of 1 (a K without a small divisor, a prime:
    K padded with zeros up to a multiple of 4; 131 -> 132 ran 5% faster), where that breaks
    none of the space's rules that the unpadded tiles keep (they bound the padding)."""
    if values["tile_k"][-1] != 1:
        return values
    return _if_allowed(space, values, {"tile_k": [-1, 4]})


def _fallback(space, wl, facts, padded, whole):
    """A fallback's values, K padded (``_padded_k``): ``whole`` (its register tile's rows
    divide M) with non-temporal stores where C outgrows the last-level cache (the space: from
    the L2s up) and the space allows them, else ``padded`` (the full register tile where it
    pads M by little, ``fallback_tiles``) with ordinary stores (the bmm row on Zen 4: 4 rows
    with them 8% faster than 6 padded rows, those 2% faster than 4 without)."""
    streamed = _if_allowed(space, _padded_k(space, {**whole, "nt_store": 0}), {"nt_store": 1})
    if streamed["nt_store"] and wl.out_bytes > facts["l3_bytes"]:
        return streamed
    return _padded_k(space, {**padded, "nt_store": 0})


#: Bytes of C a row tile writes in one run (``xc`` panels of xi) where C goes out to memory:
#: 4 cache lines. The bmm row (24x2048x512x64 NT, 100 MB of C for 64-deep sums) ran 14.3 ms
#: with 8 x 32 tiles one panel a task and 11.3 ms with two; the small_bmm row (1 MB of C,
#: in L2) 7% slower with two (``--suite cpu --only bmm small_bmm --sweep batch_matmul.x86
#: --set xc=1,2``, 2-core Emerald Rapids).
C_RUN_BYTES = 256


def _bmm_fallback(space, wl, facts):
    return _fallback(space, wl, facts, *(
        _bmm_values(wl, facts, fallback_tiles(wl, facts, pad_m)) for pad_m in (True, False)))


def _bmm_values(wl, facts, t):
    # Column panels per task: runs of C of C_RUN_BYTES where C is larger than the L2 of all
    # the cores, the panels split evenly and enough parallel tasks are left.
    panels, xc = -(-wl.N // t["xi"]), 1
    nbytes = DTYPE_BYTES[wl.out_dtype]
    streamed = wl.out_bytes > facts.get("l2_bytes", 0) * facts["num_cores"]
    while (streamed and xc * t["xi"] * nbytes < C_RUN_BYTES and panels % (2 * xc) == 0
           and wl.batch * panels // (2 * xc) * t["yt"] >= 2 * facts["num_cores"]):
        xc *= 2
    return {"tile_y": [-1, t["yi"]], "tile_x": [-1, t["xi"]], "tile_k": [-1, t["ki"]],
            "yt": t["yt"], "tile_inner": [-1, t["yi"]], "unroll_k": 1, "xc": xc}


BATCH_MATMUL_X86 = ScheduleTemplate(
    name="batch_matmul.x86", op="batch_matmul", target_kind="llvm",
    compute=_packed_compute, schedule=_bmm_schedule, fallback=_bmm_fallback,
    check=lambda wl, facts: None, dtypes=("float32", "float64"), symbolic=True)


# ---- dense_pack.x86: TVM <= 0.19's dense_pack knobs tile_y = [yt, yo, yi],
# tile_x = [xt, xo, xi], tile_k = [ko, ki], tile_inner. The weight may be [N, K] (dense, layout
# NT) or [K, N] (matmul, NN).

def _dense_schedule(sch, cfg, wl, facts, transposed: bool = False):
    schedule_packed_gemm(sch, wl, tile_y=cfg["tile_y"].size, tile_x=cfg["tile_x"].size,
                         tile_k=cfg["tile_k"].size, inner=cfg["tile_inner"].size[-1],
                         lanes=facts["vector_lanes"], l1_bytes=facts.get("l1d_bytes", 0),
                         nt_store=bool(cfg.value("nt_store", 0)), transposed=transposed)


def _dense_fallback(space, wl, facts):
    return _fallback(space, wl, facts, *(_dense_values(wl, fallback_tiles(wl, facts, pad_m),
                                                       2 * facts["num_cores"])
                                         for pad_m in (True, False)))


def _dense_values(wl, t, tasks: int = 1):
    rows = -(-wl.M // t["yi"])
    yo = rows // t["yt"]
    if wl.M % t["yi"]:  # a padded M: ``tasks`` parallel tasks or more with the column
        # panels (GPT-2's LM head swapped: 2 panels, 4 tasks); all its row tiles in one task
        # where the panels give the tasks (``whole_axis``: each panel packed once; ``bench.shapes
        # --only d8`` 0.92 -> 1.04x numpy), else a power of two of them within M (the last task
        # takes the rest)
        yo = max(1, min(yo, rows // -(-tasks // -(-wl.N // t["xi"]))))
        if yo < rows:
            yo = 1 << (yo.bit_length() - 1)
            while yo > 1 and yo * t["yi"] > wl.M:
                yo //= 2
    return {"tile_y": [-1, yo, t["yi"]], "tile_x": [-1, 1, t["xi"]], "tile_k": [-1, t["ki"]],
            "tile_inner": [-1, t["yi"]]}


DENSE_PACK_X86 = ScheduleTemplate(
    name="dense_pack.x86", op="dense", target_kind="llvm",
    compute=_packed_compute, schedule=_dense_schedule, fallback=_dense_fallback,
    check=lambda wl, facts: None, dtypes=("float32", "float64"), symbolic=True)


# ---- dense_swap.x86: dense_pack.x86's kernel on the transposed product, C^T = W A^T (N x M
# x K, the weight its A, A its B; ``swapped``): it packs A into panels and broadcasts the
# weight's rows from where they lie, so a weight much larger than A is read once, never
# packed; its register tile is written back transposed, vectorised along C's rows. The packed
# kernel packs the weight at every call (the dense row 83% of the FMA peak, 91-93% swapped:
# ``bench.peak --gemm``, Zen 5). It takes a weight stored [N, K] (NT, TT; a
# [K, N] one packs by plain copies), an M of whole vectors and an N at least twice M: tuning
# both on dense 1024x3072x1024 NN and ViT's 197x3072x768 NT, dense_pack.x86 won. Its knobs
# are dense_pack.x86's on the view (``Template.view``): tile_y splits N, tile_x splits M.

#: N at least this many times M: the weight is the larger operand (its pack the larger copy).
SWAP_MIN_RATIO = 2


def swapped(wl):
    """The transposed product of a dense workload: C^T = W A^T, a dense N x M x K whose A is
    the weight and whose B is ``wl``'s A (each layout letter flipped, the two exchanged: NT
    stays NT, NN is TT), without ``wl``'s epilogue."""
    flip = {"N": "T", "T": "N"}
    return Workload.create("dense", (wl.N, wl.M, wl.K), wl.dtype, wl.out_dtype,
                           layout=flip[wl.layout[1]] + flip[wl.layout[0]])


def _swap_compute(wl, cfg):
    """[A, W, C] with C[m, n] = C^T[n, m] (``TRANSPOSE_BLOCK``, inlined into the write-back):
    the transposed product's compute, whose placeholder "A" is ``wl``'s weight and "B" its A."""
    from tvm import te  # noqa: PLC0415
    w, a, ct = _packed_compute(swapped(wl), cfg)
    return [a, w, te.compute(wl.out_shape, lambda i, j: ct[j, i], name=TRANSPOSE_BLOCK)]


def _swap_check(wl, facts):
    lanes = facts["vector_lanes"]  # the product's register tile is M wide: whole vectors
    if wl.M < 2 * lanes or wl.M % lanes:
        return f"M={wl.M} is not two or more whole vectors of {lanes} lanes (dense_pack.x86)"
    if wl.N < SWAP_MIN_RATIO * wl.M:
        return f"N={wl.N} < {SWAP_MIN_RATIO} x M={wl.M}: the weight is not the larger " \
               "operand (dense_pack.x86)"
    return None


DENSE_SWAP_X86 = ScheduleTemplate(
    name="dense_swap.x86", op="dense", target_kind="llvm", compute=_swap_compute,
    schedule=lambda sch, cfg, wl, facts: _dense_schedule(sch, cfg, swapped(wl), facts, True),
    fallback=lambda space, wl, facts: _dense_fallback(space, swapped(wl), facts),
    check=_swap_check, dtypes=("float32", "float64"), layouts=("NT", "TT"), priority=1,
    view=swapped, schedulable=False)


# ---- dense_gemv.x86: a matrix-vector product and few rows (M <= 4) against a weight stored
# [N, K] (layout NT, TOPI's dense). The packed GEMM would pack the whole weight for one use of
# each element (a second pass over it: 0.23x numpy at 1x4096x4096); this kernel
# streams each weight row once: every parallel task owns ``xi`` consecutive rows of the weight
# (contiguous memory), and each output is a dot product over K in ``kv``-wide vector partial
# sums (rfactor), ``ku`` vector steps unrolled, added across lanes once at the end. ``rows``
# weight rows are streamed side by side (as OpenBLAS's sgemv_t kernels take 4): each vector of
# A is loaded once for them, and a thread has that many streams of the weight in flight.
# Knobs: tile_x = [xo, xi] (rows of the weight per parallel task), tile_k = [ko, ku, kv], rows.
# Sizes without convenient factors (primes) take tiles that do not divide them: N is padded up
# to whole tasks (rows past N read the weight's last row, their sums are cropped), and K is
# summed in whole kv-vectors up to the last multiple of kv, the rest (fewer than kv) after them
# in the same task (``_gemv_compute``); a K of 4093 no longer sums one float at a time.

GEMV_MAX_M = 4
#: The blocks that sum K's last (K mod kv) products and add them to the vector sums.
GEMV_TAIL_BLOCK, GEMV_SUM_BLOCK = MATMUL_BLOCK + "_tail", MATMUL_BLOCK + "_sum"


def _gemv_compute(wl, cfg, A=None, B=None):
    """[A, B, C]: the plain matmul where the config's tiles divide K and N; else, over N
    padded to whole tasks (rows past N read the weight's last row) and cropped
    (``CROP_BLOCK``), the sums over K's whole kv-vectors (block "C"), those over the rest of K
    (``GEMV_TAIL_BLOCK``) and their sum (``GEMV_SUM_BLOCK``). A batch_matmul's blocks have its
    batch axis first (``batch_matmul_gemv.x86``). A and B: given tensors, or placeholders;
    given ones may have symbolic batch and N (a shape family's kernel: N always padded)."""
    from tvm import te, tirx  # noqa: PLC0415
    _, xi = cfg["tile_x"].size
    kv = cfg["tile_k"].size[-1]
    # N and the batch sizes: the given B's and A's (symbolic in a family), else the workload's
    n = B.shape[-2 if wl.transpose_b else -1] if B is not None else wl.N
    n = int(n) if isinstance(n, (int, tirx.IntImm)) else n
    if wl.K % kv == 0 and isinstance(n, int) and n % xi == 0:
        return _plain(wl, A, B)
    A = A if A is not None else te.placeholder(wl.a_shape, wl.dtype, name="A")
    B = B if B is not None else te.placeholder(wl.b_shape, wl.dtype, name="B")
    a_el, b_el = element_at(wl, A, B)
    whole, out, lead_shape = wl.K // kv * kv, wl.out_dtype, tuple(A.shape[:-2])
    cols = -(-n // xi) * xi if isinstance(n, int) else tirx.floordiv(n + xi - 1, xi) * xi
    padded = not isinstance(n, int) or cols != n
    shape = (*lead_shape, wl.M, cols)  # (B,) M, N padded

    def prod(idx, k):  # a row past N reads the weight's last row (its sum is cropped)
        *lead, i, j = idx
        return a_el(tuple(lead), i, k).astype(out) * \
            b_el(tuple(lead), te.min(j, n - 1) if padded else j, k).astype(out)

    k = te.reduce_axis((0, whole), name="k")
    C = main = te.compute(shape, lambda *idx: te.sum(prod(idx, k), axis=k), name=MATMUL_BLOCK)
    if whole != wl.K:
        t = te.reduce_axis((0, wl.K - whole), name="t")
        rest = te.compute(shape, lambda *idx: te.sum(prod(idx, whole + t), axis=t),
                          name=GEMV_TAIL_BLOCK)
        C = te.compute(shape, lambda *idx: main(*idx) + rest(*idx), name=GEMV_SUM_BLOCK)
    if padded:
        last = C
        C = te.compute((*lead_shape, wl.M, n), lambda *idx: last(*idx), name=CROP_BLOCK)
    return [A, B, C]


#: With fewer vectors of K than this in a row of A, a product of 2 to 4 rows takes the packed
#: kernel by default: the gemv sums each output's lanes at its end, which costs as much as its
#: few vector products (``bench.shapes --versus``: dense 4x4096x64 and batch_matmul
#: 12x4x197x64 ran faster packed, 4x4096x256 and 12x4x197x256 as gemv, 2-core Zen 5). One
#: row of A keeps the gemv: its packed kernel has register tiles of 1 x N.
GEMV_MIN_K_VECTORS = 8


def _gemv_priority(wl, facts):
    """dense_gemv.x86's priority (``Template.rank``): 1, above the packed kernel's 0, but for
    a K of few vectors with M > 1 (``GEMV_MIN_K_VECTORS``): -1."""
    return 1 if wl.M == 1 or wl.K >= GEMV_MIN_K_VECTORS * facts["vector_lanes"] else -1


def _gemv_check(wl, facts):
    # Each row of A and of the weight is read as K contiguous floats: a transposed operand is
    # so only where it is one row (numpy's column vectors: x.T @ W, W @ x).
    if wl.transpose_a and wl.M > 1:
        return f"A stored [K, M] with M={wl.M} > 1 (use {_packed(wl)})"
    if not wl.transpose_b and wl.N > 1:
        return f"a weight stored [K, N] with N={wl.N} > 1 (use " + \
            ("dense" if wl.op == "dense" else "batch_matmul") + "_gemv_nn.x86)"
    if wl.M > GEMV_MAX_M:
        return f"M={wl.M} > {GEMV_MAX_M} (use {_packed(wl)})"
    if wl.epilogue:  # the lanes' sum is a reduction block: no write-back to fuse into
        return "its final sum across the vector lanes takes no epilogue (dense_pack.x86 does)"
    return None


def _gemv_schedule(sch, cfg, wl, facts, transposed: bool = False):
    """The matmul block C[(b,) m, n] = sum_k A[(b,) m, k] * W[(b,) n, k] (``matmul_compute``);
    a batch_matmul's tasks are its batches' tasks side by side. ``transposed``: its outputs
    are written to C^T (``dense_gemv_t.x86``): the pass over K's rest takes them n, then m."""
    from tvm import tirx  # noqa: PLC0415
    _, xi = cfg["tile_x"].size
    _, ku, kv = cfg["tile_k"].size
    rows = cfg.value("rows", 1)
    c = sch.get_sblock(MATMUL_BLOCK)
    k = sch.get_loops(c)[-1]
    ko, kin = sch.split(k, [None, kv])
    rf = sch.rfactor(kin, 0)  # C_rf[kv, (b,) m, n]: the partial sums of each lane
    *lead, i, j, ko, kin = sch.get_loops(rf)
    jo, ji, jr = sch.split(j, [None, xi // rows, rows])
    koo, koi = sch.split(ko, [None, ku])
    # Each vector of A is loaded once for the ``rows`` weight rows, each vector of a weight
    # row once for all M rows of A (M x rows partial sums).
    sch.reorder(jo, ji, koo, koi, i, jr, kin)
    parallel_unless_tiny(sch, sch.fuse(*lead, jo) if lead else jo, wl)
    sch.unroll(i)
    sch.unroll(jr)
    # The lanes' partial sums laid out [(b,) m, n, kv]: each output's kv sums one contiguous
    # vector (as rfactor leaves them, [kv, m, n], a vector of them is strided, and LLVM kept 16
    # such accumulators in memory, gathered and scattered at every step).
    sch.transform_layout(rf, ("write", 0), tirx.IndexMap.from_func(
        lambda *x: [*x[1:], x[0]], ndim=len(lead) + 3, index_dtype="int32"))
    sch.set_scope(rf, 0, "local")  # the kv partial sums of its outputs, in registers
    sch.unroll(koi)
    vectorize_lanes(sch, kin, facts["vector_lanes"])
    sch.decompose_reduction(rf, koo)
    # The sums across the lanes, per output, right after their partial sums (in registers).
    sch.reverse_compute_at(c, ji)
    inner = sch.get_loops(c)[2:]  # under jo, ji: kv, m, n, each where it is more than 1
    if kv > 1 and len(inner) > 1:  # each output's lanes summed in a row: kv innermost
        sch.reorder(*inner[1:], inner[0])
    if has_block(sch, GEMV_TAIL_BLOCK):
        # K's last products (fewer than kv a sum) in a pass of their own after the vector
        # sums, parallel over the outputs: each output's sum of them, added to its vector sum
        # (and cropped) in one block. (TensorIR moves the sum into a task only with both its
        # producers, and the tail's sum only with its consumer: neither can go first.)
        if has_block(sch, CROP_BLOCK):
            sch.compute_inline(sch.get_sblock(GEMV_SUM_BLOCK))
        last = sch.get_sblock(CROP_BLOCK if has_block(sch, CROP_BLOCK) else GEMV_SUM_BLOCK)
        if transposed:
            sch.reorder(*sch.get_loops(last)[-1:-3:-1])
        outputs = sch.fuse(*sch.get_loops(last))
        parallel_unless_tiny(sch, outputs, wl)
        tail = sch.get_sblock(GEMV_TAIL_BLOCK)
        sch.compute_at(tail, outputs)
        sch.set_scope(tail, 0, "local")
    elif has_block(sch, CROP_BLOCK):  # N's padding cropped in the same task, from registers
        sch.set_scope(c, 0, "local")
        sch.reverse_compute_at(sch.get_sblock(CROP_BLOCK), ji)


def _gemv_fallback(space, wl, facts):
    lanes = facts["vector_lanes"]
    # A whole vector of partial sums where K allows (the rest of K after the whole vectors),
    # else a half or a quarter vector.
    kv = next((m for m in (lanes, lanes // 2, lanes // 4) if m and wl.K % m == 0),
              lanes if wl.K >= lanes else largest_factor(wl.K, lanes))
    # 4 vector steps unrolled, or up to the space's 8 where 4 does not divide them (K = 1000
    # in half vectors: 125 steps, 5 at a time rather than 1), else 4 with the last steps
    # guarded (the space's values of ku are K's divisors and powers of two).
    steps = wl.K // kv
    ku = largest_factor(steps, 4)
    ku = ku if ku == 4 else largest_factor(steps, 8)
    ku = ku if wl.K % ku == 0 or ku & (ku - 1) == 0 else min(4, 1 << (steps.bit_length() - 1))
    # Rows per task: enough tasks for 8 per core (load balance), at most 64 rows, a whole
    # number of the most weight rows side by side (up to 8) that the registers allow: the
    # first that breaks none of the space's rules (N = 1000: 40 rows a task, 8 side by side,
    # rather than 50 rows 2 at a time). An N they do not divide is padded to whole tasks of a
    # power of two rows (N = 4093: 64, not 1). A batch's tasks count with its other batches'.
    most = max(1, min(64, wl.batch * wl.N // (8 * facts["num_cores"])))
    for rows in (8, 4, 2, 1):
        xi = rows * largest_factor(wl.N // rows, max(1, most // rows)) if wl.N % rows == 0 \
            else max(rows, 1 << (most.bit_length() - 1))
        values = {"tile_x": [-1, xi], "tile_k": [-1, ku, kv], "rows": rows}
        if rows == 1 or not space.violations(space.config_from_values(values)):
            return values


def _one_size_of(*axes):
    """A gemv template's ``family_check``: its kernels of symbolic extents take one size of
    each of ``axes`` (rows unrolled, vector steps and tails static); the others may vary."""
    def check(family):
        fixed = [a for a in axes if a in family.varying]
        return f"its kernels take one size of {' and '.join(fixed)}" if fixed else None
    return check


#: dense_gemv.x86 and batch_matmul_gemv.x86; as a shape family's kernels: symbolic N and batch
#: (decoding's q . K^T over the cached keys, a weight of any rows), rows padded to whole tasks.
_GEMV = dict(target_kind="llvm", compute=_gemv_compute, schedule=_gemv_schedule,
             fallback=_gemv_fallback, check=_gemv_check, dtypes=("float32", "float64"),
             priority=_gemv_priority, symbolic=True, family_check=_one_size_of("M", "K"),
             family_any_size=True, family_operands=True)

DENSE_GEMV_X86 = ScheduleTemplate(name="dense_gemv.x86", op="dense", **_GEMV)


# ---- batch_matmul_gemv.x86: dense_gemv.x86 on each batch (M <= 4, B stored [batch, N, K]),
# the batches' tasks side by side in one parallel loop. batch_matmul.x86 packed each batch's
# B and took register tiles of M x 1 for N = 1: 16 dot products of 4096 (batch_matmul
# 16x1x1x4096 NT) ran 0.10x numpy (``bench.shapes``, 2-core Zen 5).
BATCH_MATMUL_GEMV_X86 = ScheduleTemplate(name="batch_matmul_gemv.x86", op="batch_matmul",
                                         **_GEMV)


# ---- dense_gemv_t.x86: few columns (N <= 4) against many rows of A, B stored [N, K] (NT): the
# transposed product C^T = B A^T is dense_gemv.x86's (``swapped``: B's N rows are its few
# rows, A its weight, streamed once), its outputs written to C transposed in the same task.
# dense_pack.x86 took register tiles of M x N columns (a value head, nn.Linear(1024, 1), at
# 8192 tokens: dense 8192x1x1024 ran 0.68x numpy, ``bench.shapes``, 2-core Zen 5).
#: The block that copies a B stored [K, N] (N of 2-4) out as N rows of K, ahead of the gemv.
GEMV_T_ROWS_BLOCK = "B_rows"


def _gemv_t_compute(wl, cfg):
    """[A, B, C] with C[m, n] = C^T[n, m] (``TRANSPOSE_BLOCK``): dense_gemv.x86's compute of
    the transposed product, whose placeholder "A" is ``wl``'s B and "B" its A; a B stored
    [K, N] with N > 1 first copied out as N rows of K (``GEMV_T_ROWS_BLOCK``: N x K floats,
    a small copy) that the gemv reads as its rows."""
    from tvm import te  # noqa: PLC0415
    if wl.transpose_b or wl.N == 1:
        b, a, ct = _gemv_compute(swapped(wl), cfg)
    else:
        a = te.placeholder(wl.a_shape, wl.dtype, name="A")
        b = te.placeholder(wl.b_shape, wl.dtype, name="B")
        rows = te.compute((wl.N, wl.K), lambda n, k: b[k, n], name=GEMV_T_ROWS_BLOCK)
        _, _, ct = _gemv_compute(swapped(wl).with_(layout="NT"), cfg, rows, a)
    return [a, b, te.compute(wl.out_shape, lambda i, j: ct[j, i], name=TRANSPOSE_BLOCK)]


def _gemv_t_schedule(sch, cfg, wl, facts):
    """dense_gemv.x86's schedule of the transposed product; its outputs written to C row by
    row of C (m, then n: contiguous stores) where they are computed."""
    _gemv_schedule(sch, cfg, swapped(wl), facts, transposed=True)
    t = sch.get_sblock(TRANSPOSE_BLOCK)
    (last,) = sch.get_producers(t)
    name = sch.get(last).name_hint
    if name == MATMUL_BLOCK:  # the lanes' sums (a reduction): from registers, in the task
        sch.set_scope(last, 0, "local")
        sch.reverse_compute_at(t, sch.get_loops(last)[1])
        last = t
    else:  # N's crop (in the task) or the pass over K's rest (n, then m): C written there
        sch.reverse_compute_inline(t)
    if name != GEMV_SUM_BLOCK and len(sch.get_loops(last)) == 4:  # (task, rows, n, m)
        sch.reorder(*sch.get_loops(last)[:-3:-1])


def _gemv_t_check(wl, facts):
    if wl.transpose_a:  # A's rows are read as K contiguous floats
        return f"A stored [K, M] with M={wl.M} > 1 (use {_packed(wl)})"
    if wl.M <= GEMV_MAX_M:
        return f"M={wl.M} <= {GEMV_MAX_M} (dense_gemv.x86 takes few rows of A)"
    if wl.N > GEMV_MAX_M:
        return f"N={wl.N} > {GEMV_MAX_M} (use {_packed(wl)})"
    return _gemv_check(swapped(wl).with_(layout="NT"), facts)  # (B's rows copied out)


DENSE_GEMV_T_X86 = ScheduleTemplate(
    name="dense_gemv_t.x86", op="dense", target_kind="llvm", compute=_gemv_t_compute,
    schedule=_gemv_t_schedule, fallback=lambda space, wl, facts: _gemv_fallback(
        space, swapped(wl), facts),
    check=_gemv_t_check, dtypes=("float32", "float64"),
    priority=lambda wl, facts: _gemv_priority(swapped(wl), facts), view=swapped,
    schedulable=False)


def _packed(wl) -> str:
    """The packed GEMM template of ``wl``'s op: where the gemv templates send what they refuse."""
    return "dense_pack.x86" if wl.op == "dense" else "batch_matmul.x86"


def _plain(wl, A=None, B=None):
    from .common import matmul_compute  # noqa: PLC0415
    return matmul_compute(wl, A, B)


# ---- dense_gemv_nn.x86: a matrix-vector product and few rows (M <= 8) against a weight stored
# [K, N] (layout NN: numpy's x @ W, a Relax matmul's weight). dense_pack.x86 packed the whole
# weight at every call for one use of each element (1x768x3072: 0.48x numpy). Here the columns
# go in register tiles of ``columns`` (xv: whole vectors); each parallel task owns ``tiles`` of
# them and reads ``ku`` rows of the weight at a time across all of them (contiguous), each
# tile's M x xv sums in registers over those rows and in L1 between them. An N that xv
# does not divide leaves its last columns to a narrow pass of their own, and a block puts C
# together from both. Knobs: columns, tiles, tile_k = [ko, ku].

# A task's sums take at most 16 KB (the space's rule), in L1; those over
# ``codegen.STACK_TILE_BYTES`` are a heap workspace rather than a stack array: the CPU suite's
# gemv_nn row, 1x3072x768, with 16 tiles of 96 columns, 6 KB of sums, ran 0.049 ms, with 2
# tiles 0.048 (the gemv_nn sweep: ``bench --suite cpu --only gemv_nn --sweep
# dense_gemv_nn.x86 --set columns=96,128 tiles=1,2,4,8,16``, 2-core Zen 5).
#: The blocks of N's last (N mod xv) columns and of C put together from both passes.
GEMV_NN_REST_BLOCK, GEMV_NN_JOIN_BLOCK = MATMUL_BLOCK + "_rest", MATMUL_BLOCK + "_join"


#: The most rows of A dense_gemv_nn.x86 takes (dense 7x3000x1000 NN: dense_pack.x86, packing
#: the weight at every call, ran 0.73x numpy on 16 cores).
GEMV_NN_MAX_M = 8


def _gemv_nn_check(wl, facts):
    if wl.transpose_a and wl.M > 1:  # (one row of A: K contiguous floats, x.T @ W)
        return f"A stored [K, M] with M={wl.M} > 1 (use {_packed(wl)})"
    if wl.M > GEMV_NN_MAX_M:
        return f"M={wl.M} > {GEMV_NN_MAX_M} (use {_packed(wl)})"
    if 2 * wl.M + 1 > facts["vector_registers"]:
        return (f"M={wl.M} rows of sums, their broadcasts and a weight vector need more than "
                f"the {facts['vector_registers']} vector registers (use {_packed(wl)})")
    if wl.N < facts["vector_lanes"]:
        return f"N={wl.N} is less than a vector (use {_packed(wl)})"
    if wl.epilogue:
        return f"takes no epilogue ({_packed(wl)} does)"
    return None


def _gemv_nn_compute(wl, cfg, A=None, B=None):
    """[A, B, C]: the plain matmul where the tile's columns divide N; else the sums of N's
    whole tiles (block "C"), those of its last columns (``GEMV_NN_REST_BLOCK``), and C put
    together from both (``GEMV_NN_JOIN_BLOCK``). A and B: given tensors (a shape family's,
    of symbolic batch and K), or placeholders."""
    from tvm import te, tirx  # noqa: PLC0415
    xv = cfg.value("columns", 64)
    if wl.N % xv == 0:
        return _plain(wl, A, B)
    A = A if A is not None else te.placeholder(wl.a_shape, wl.dtype, name="A")
    B = B if B is not None else te.placeholder(wl.b_shape, wl.dtype, name="B")
    a_el, b_el = element_at(wl, A, B)
    whole, out, lead = wl.N // xv * xv, wl.out_dtype, tuple(A.shape[:-2])
    depth = A.shape[-2 if wl.transpose_a else -1]  # K (symbolic in a family)

    def dot(name, cols, first):
        k = te.reduce_axis((0, depth), name="k")
        return te.compute((*lead, wl.M, cols), lambda *x: te.sum(
            a_el(x[:-2], x[-2], k).astype(out) * b_el(x[:-2], first + x[-1], k).astype(out),
            axis=k), name=name)

    main, rest = dot(MATMUL_BLOCK, whole, 0), dot(GEMV_NN_REST_BLOCK, wl.N - whole, whole)
    C = te.compute((*lead, wl.M, wl.N), lambda *x: tirx.if_then_else(
        x[-1] < whole, main(*x), rest(*x[:-1], tirx.max(x[-1] - whole, 0))),
        name=GEMV_NN_JOIN_BLOCK)
    return [A, B, C]


def _gemv_nn_schedule(sch, cfg, wl, facts):
    """The matmul block C[m, n] = sum_k A[m, k] * W[k, n] (``matmul_compute``)."""
    lanes = facts["vector_lanes"]
    xc, xv = cfg.value("tiles", 1), cfg.value("columns", 64)
    _, ku = cfg["tile_k"].size
    c = sch.get_sblock(MATMUL_BLOCK)
    *lead, i, j, k = sch.get_loops(c)  # (a batch_matmul's batch: its tasks beside the others)
    jo, jc, jv = sch.split(j, [None, xc, xv])
    ko, ki = sch.split(k, [None, ku])
    # ku rows of the weight at a time across all the task's tiles (xc x xv floats of each
    # row, contiguous; gemv_nn: one tile of 96 columns a task 0.079 ms, 2 to 16 0.048-0.050,
    # the sweep above). The task's sums stay in L1, each tile's in registers over its ku rows.
    sch.reorder(jo, ko, jc, ki, i, jv)
    jo = sch.fuse(*lead, jo) if lead else jo
    parallel_unless_tiny(sch, jo, wl)
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.unroll(ki)
    sch.unroll(i)
    vectorize_lanes(sch, jv, lanes)
    vectorize_lanes(sch, sch.get_loops(acc)[-1], lanes)
    sch.decompose_reduction(c, ko)
    if has_block(sch, GEMV_NN_REST_BLOCK):
        # N's last columns (fewer than xv): one narrow tile sweeping K, its sums in registers,
        # in parallel over its whole vectors; then C put together from both (a pass over C).
        r = sch.get_sblock(GEMV_NN_REST_BLOCK)
        *rl, _, rj, rk = sch.get_loops(r)
        cols = wl.N % xv
        racc = sch.cache_write(r, 0, "local")
        if cols % lanes == 0:
            rjo, rjv = sch.split(rj, [None, lanes])
            sch.reorder(rjo, rk, rjv)
            parallel_unless_tiny(sch, rl[0] if rl else rjo, wl)  # (batches: in parallel)
            sch.reverse_compute_at(racc, rjo)
            sch.vectorize(rjv)
        else:
            sch.reorder(rk, rj)
            if rl:
                parallel_unless_tiny(sch, rl[0], wl)
        sch.decompose_reduction(r, rk)
        join = sch.get_sblock(GEMV_NN_JOIN_BLOCK)
        parallel_unless_tiny(sch, sch.fuse(*sch.get_loops(join)), wl)


def _gemv_nn_fallback(space, wl, facts):
    lanes, cores, nb = facts["vector_lanes"], facts["num_cores"], DTYPE_BYTES[wl.out_dtype]
    ku = largest_factor(wl.K, 8)
    ku = ku if ku >= 4 else min(8, 1 << (wl.K.bit_length() - 1))
    # Of the configs the space allows (sums in registers and L1, N's rest narrow), tiles of
    # whole vectors that divide N's whole vectors, and tasks of a power of two tiles shared
    # evenly by the cores (TVM gives each core a run of ceil(tasks / cores) tasks: gemv_nn's
    # 24 tiles of 128 columns in 3 tasks on 2 cores ran 0.074 ms, in 12 0.051, the gemv_nn
    # sweep above): the longest run of each row a task reads (up to 8 KB), then the widest
    # tile.
    best = None
    for v in (v for v in range(1, 9) if (wl.N // lanes) % v == 0):
        tiles = wl.N // (v * lanes)
        for t in (1, 2, 4, 8, 16):
            values = {"columns": v * lanes, "tiles": t, "tile_k": [-1, ku]}
            cfg = space.config_from_values(values)
            if cfg.index is None or space.violations(cfg) or t > 1 and \
                    wl.batch * tiles % (t * cores) and wl.batch * tiles // t < 4 * cores:
                continue
            key = (min(t * v * lanes * nb, 8192), v, -t)
            best = max(best, (key, values)) if best else (key, values)
    return best[1] if best else {"columns": lanes, "tiles": 1, "tile_k": [-1, ku]}


#: dense_gemv_nn.x86 and batch_matmul_gemv_nn.x86; as a shape family's kernels: symbolic K and
#: batch (decoding's P . V over the cached values; K's last rows under a guard).
_GEMV_NN = dict(target_kind="llvm", compute=_gemv_nn_compute, schedule=_gemv_nn_schedule,
                fallback=_gemv_nn_fallback, check=_gemv_nn_check, dtypes=("float32", "float64"),
                layouts=("NN", "TN"), priority=1, symbolic=True,
                family_check=_one_size_of("M", "N"), family_any_size=True,
                family_operands=True)

DENSE_GEMV_NN_X86 = ScheduleTemplate(name="dense_gemv_nn.x86", op="dense", **_GEMV_NN)


# batch_matmul_gemv_nn.x86: dense_gemv_nn.x86 on each batch (M <= 8, B stored [batch, K, N]:
# attention's probabilities times V at decoding), the batches' tasks side by side.
# batch_matmul.x86 packed each batch's B: 32x1x128x4096 (32 heads over 4096 tokens) ran 0.69x
# numpy (``bench.shapes``, 2-core Zen 5).
BATCH_MATMUL_GEMV_NN_X86 = ScheduleTemplate(name="batch_matmul_gemv_nn.x86",
                                            op="batch_matmul", **_GEMV_NN)
