"""Legalization of ``relax.matmul`` with our TOPI compute (the strategy form).

TVM's own legalization is looked up when it is needed (never captured at import), so a
``register_strategy`` call, or another library's registration, is seen as it stands.
"""
from __future__ import annotations

import tvm
from tvm import relax as _relax

from ..ops.common import matmul_compute
from .match import workload_of_call

#: ``register_op_attr`` level of ours: above TVM's own (10).
STRATEGY_LEVEL = 11


def _tvm_matmul_legalize():
    """TVM's own legalization of relax.matmul: the function it registers at level 10 (the
    registered attribute may be ours, once ``register_strategy`` ran)."""
    from tvm.relax.transform.legalize_ops import linear_algebra  # noqa: PLC0415
    return linear_algebra._matmul


def legalize_matmul(bb, call):
    """FLegalize for ``relax.matmul``: our TOPI compute (the plain matmul every template and the
    MetaSchedule bridge schedule) where a workload fits, TVM's own legalization elsewhere."""
    wl = workload_of_call(call)
    if wl is None:
        return _tvm_matmul_legalize()(bb, call)
    return bb.call_te(lambda a, b: matmul_compute(wl, a, b)[-1], call.args[0], call.args[1],
                      primfunc_name_hint="tvm_ext_matmul")


def legalize_as_strategy(mod):
    """LegalizeOps with ``legalize_matmul`` for relax.matmul (this call only: no global
    registration)."""
    return _relax.transform.LegalizeOps(customize_legalize_map={
        "relax.matmul": legalize_matmul})(mod)


def register_strategy():
    """Make ``legalize_matmul`` the legalization of relax.matmul for every later build in this
    process (``register_op_attr`` at level 11, above TVM's own level 10)."""
    tvm.ir.register_op_attr("relax.matmul", "FLegalize", legalize_matmul,
                            level=STRATEGY_LEVEL)
