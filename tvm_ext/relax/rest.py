"""A CPU model's other kernels (the ops around its matmuls), scheduled as TVM's GPU pipeline
schedules them with dlight. TVM's default CPU pipeline compiles them as written: serial loop
nests on one core (in ``python -m tvm_ext.bench.model``'s transformer block: the softmax, the
transposes of attention's heads, a GELU, the residual adds).

``schedule_rest(mod, target)``, the last step of ``build`` before ``tvm.compile`` with TVM's
default pipeline: ``dlight.ApplyDefaultSchedule`` with TVM's CPU rules (``Reduction``: softmax
and the norms; ``GEMV``) and ``Injective`` (TOPI's ``schedule_injective`` for x86), over every
PrimFunc not scheduled yet (ours are).
"""
from __future__ import annotations

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


def schedule_rest(mod, target):
    """``mod`` (a built model before ``tvm.compile``) with its PrimFuncs not scheduled yet
    scheduled: dlight's CPU ``Reduction`` and ``GEMV``, then ``Injective``. Its reshapes are
    made views first (TVM's ``RewriteDataflowReshape``, which ``tvm.compile`` would run next):
    a scheduled reshape is no longer seen as one, and would copy."""
    from tvm import relax  # noqa: PLC0415
    from tvm.s_tir import dlight as dl  # noqa: PLC0415
    with target:
        return tvm.transform.Sequential([
            relax.transform.RewriteDataflowReshape(),
            dl.ApplyDefaultSchedule(dl.cpu.Reduction(), dl.cpu.GEMV(), injective_rule())])(mod)
