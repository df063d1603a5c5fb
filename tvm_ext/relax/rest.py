"""A CPU model's other kernels (the ops around its matmuls), scheduled as TVM's GPU pipeline
schedules them with dlight. TVM's default CPU pipeline compiles them as written: serial loop
nests on one core (in ``python -m tvm_ext.bench.model``'s transformer block: the softmax, the
transposes of attention's heads, a GELU, the residual adds).

``schedule_rest(mod, target)``, the last step of ``build`` before ``tvm.compile`` with TVM's
default pipeline: ``dlight.ApplyDefaultSchedule`` with TVM's CPU rules (``Reduction``: softmax
and the norms; ``GEMV``) and ``Injective`` (TOPI's ``schedule_injective`` for x86), over every
PrimFunc not scheduled yet (ours are).

On CUDA, ``schedule_rest`` gives the row reductions (softmax, the norms) a warp a row
(``warp_rows_rule``) before TVM's pipeline gives the rest dlight's schedules: dlight's
``GeneralReduction`` takes a block of 256 threads a row, half of them idle on attention's rows
of 128, with four block-wide barriers.
"""
from __future__ import annotations

import math

import tvm

#: Elements below which an injective kernel stays on one core (a parallel launch costs a few
#: microseconds; 16K f32 elements are 64 KB).
PARALLEL_MIN = 16384


def injective_rule():
    """The ``Injective`` dlight rule (made here: dlight is imported only when needed)."""
    from tvm.s_tir.dlight.analysis import normalize_prim_func  # noqa: PLC0415
    from tvm.s_tir.dlight.base import try_inline  # noqa: PLC0415
    from tvm.s_tir.dlight.cpu.base import CPUScheduleRule  # noqa: PLC0415
    from tvm.target.codegen import llvm_get_vector_width  # noqa: PLC0415

    class Injective(CPUScheduleRule):
        """Every block inlined into the last (all spatial), its loops fused, then split into a
        parallel loop and, where the output's vectors divide it, a vector of them."""

        def apply(self, func, target, _):
            from tvm import s_tir  # noqa: PLC0415
            if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target):
                return None
            sch = s_tir.Schedule(func)
            infos = normalize_prim_func(sch)
            if not infos or not all(b.is_injective() for b in infos):
                return None
            infos = try_inline(sch, infos)
            if len(infos) != 1:
                return None
            block = infos[0].block_rv
            loops = sch.get_loops(block)
            if not loops:
                return None
            fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
            extent = sch.get(fused).extent
            if not isinstance(extent, tvm.tirx.IntImm):
                return None
            extent = int(extent)
            bits = tvm.DataType(str(sch.get(block).writes[0].source.dtype)).bits
            lanes = max(1, llvm_get_vector_width(target) // bits)
            if lanes > 1 and extent % lanes == 0 and extent >= 2 * lanes:
                fused, vec = sch.split(fused, [None, lanes])
                sch.vectorize(vec)
                extent //= lanes
                if extent * lanes < PARALLEL_MIN:
                    return sch
            elif extent < PARALLEL_MIN:
                return sch
            sch.parallel(fused)
            return sch

    return Injective()


#: A warp's lanes; rows per block of ``warp_rows_rule`` (a warp each).
LANES, WARP_ROWS = 32, 4
#: ``warp_rows_rule`` takes rows of at most this many elements, and, where rows are longer than
#: ``WARP_ROW_SHORT``, at least ``WARP_ROWS_MIN`` rows (fewer warps than that leave the GPU
#: idle: dlight's block of 256 threads a row is then the better schedule).
WARP_ROW_MAX, WARP_ROW_SHORT, WARP_ROWS_MIN = 4096, 1024, 512


def warp_rows_rule():
    """A dlight GPU rule for row reductions (the blocks dlight's ``GeneralReduction`` takes:
    reductions over the trailing axes, then an elementwise block over the same iteration space
    that reads their results by its leading indices: softmax, layer and RMS norms): a warp a
    row, ``WARP_ROWS`` rows a block, each reduction a warp's shuffles (no shared memory, no
    barrier), its result in every lane's registers; each lane takes elements ``LANES`` apart
    (coalesced). None (left to dlight) for other functions, symbolic shapes, rows shorter than
    a warp or longer than ``WARP_ROW_MAX``, or too few long rows (``WARP_ROWS_MIN``)."""
    from tvm import s_tir  # noqa: PLC0415
    from tvm.s_tir.dlight.analysis import normalize_prim_func  # noqa: PLC0415
    from tvm.s_tir.dlight.base import try_inline_contiguous_spatial  # noqa: PLC0415
    from tvm.s_tir.dlight.gpu.base import GPUScheduleRule  # noqa: PLC0415

    def unroll(sch, loop):
        sch.annotate(loop, "pragma_auto_unroll_max_step", 256)
        sch.annotate(loop, "pragma_unroll_explicit", 1)

    class WarpRows(GPUScheduleRule):
        def apply(self, func, target, _):
            if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target):
                return None
            sch = s_tir.Schedule(func)
            try:
                return self._schedule(sch)
            except s_tir.ScheduleError:  # a dependence the rows do not follow: dlight's
                return None

        def _schedule(self, sch):
            infos = try_inline_contiguous_spatial(sch, normalize_prim_func(sch))
            n_s = _row_reduction(sch, infos) if infos and len(infos) >= 2 else 0
            if not n_s:
                return None
            loops = sch.get_loops(infos[-1].block_rv)
            extents = [int(sch.get(loop).extent) for loop in loops]
            row, rows = math.prod(extents[n_s:]), math.prod(extents[:n_s])
            if not LANES <= row <= WARP_ROW_MAX or \
                    (row > WARP_ROW_SHORT and rows < WARP_ROWS_MIN):
                return None
            bx, ty = sch.split(sch.fuse(*loops[:n_s]), [None, WARP_ROWS])
            r, tx = sch.split(sch.fuse(*loops[n_s:]), [None, LANES])
            sch.reorder(tx, r)
            sch.bind(bx, "blockIdx.x")
            sch.bind(ty, "threadIdx.y")
            sch.bind(tx, "threadIdx.x")
            unroll(sch, r)
            for info in reversed(infos[:-1]):  # each reduction in its row's warp
                block = info.block_rv
                for i, _ in enumerate(sch.get(block).writes):
                    sch.set_scope(block, i, "local")  # every lane holds the row's result
                sch.compute_at(block, ty, preserve_unit_loops=True)
                r, tx = sch.split(sch.fuse(*sch.get_loops(block)[-(len(extents) - n_s):]),
                                  [None, LANES])
                sch.reorder(tx, r)
                sch.bind(tx, "threadIdx.x")
                unroll(sch, r)
            return sch

    return WarpRows()


def _row_reduction(sch, infos) -> int:
    """The number of leading spatial axes where ``infos`` (dlight's block infos, contiguous
    spatial blocks inlined) are reductions over the same static space, leading axes spatial and
    trailing axes reduced, then one elementwise block over that space that reads each
    reduction's result at its own leading indices; else 0."""
    kind = infos[0].dom_kind()
    n_s = len(kind) - len(kind.lstrip("S"))
    if n_s == 0 or n_s == len(kind) or kind != "S" * n_s + "R" * (len(kind) - n_s):
        return 0
    last = infos[-1]
    if any(b.dom_kind() != kind for b in infos[:-1]) or not last.is_injective() or \
            len(last.dom_kind()) != len(kind):
        return 0
    spaces = []
    for info in (infos[0], last):
        extents = [sch.get(loop).extent for loop in sch.get_loops(info.block_rv)]
        if len(extents) != len(kind) or \
                not all(isinstance(e, tvm.tirx.IntImm) for e in extents):
            return 0
        spaces.append([int(e) for e in extents])
    if spaces[0] != spaces[1]:
        return 0
    block = sch.get(last.block_rv)
    lead = [iv.var for iv in block.iter_vars[:n_s]]
    reduced = {w.source for info in infos[:-1] for w in sch.get(info.block_rv).writes}
    for read in block.reads:
        if read.source in reduced:
            if len(read.region) != n_s or not all(
                    r.min.same_as(v) and int(r.extent) == 1 for r, v in zip(read.region, lead)):
                return 0
    return n_s


def schedule_rest(mod, target):
    """``mod`` (a built model before ``tvm.compile``) with its PrimFuncs not scheduled yet
    scheduled. On a CPU: dlight's CPU ``Reduction`` and ``GEMV``, then ``Injective``; its
    reshapes are made views first (TVM's ``RewriteDataflowReshape``, which ``tvm.compile``
    would run next): a scheduled reshape is no longer seen as one, and would copy. On CUDA: the
    row reductions a warp a row (``warp_rows_rule``); TVM's pipeline schedules the rest."""
    from tvm import relax  # noqa: PLC0415
    from tvm.s_tir import dlight as dl  # noqa: PLC0415
    rules = (warp_rows_rule(),) if target.kind.name == "cuda" else \
        (dl.cpu.Reduction(), dl.cpu.GEMV(), injective_rule())
    with target:
        return tvm.transform.Sequential([
            relax.transform.RewriteDataflowReshape(),
            dl.ApplyDefaultSchedule(*rules)])(mod)
