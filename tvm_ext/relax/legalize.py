"""Legalization of ``relax.matmul`` with our TOPI compute (the strategy form).

TVM's own legalization is looked up when it is needed (never captured at import), so a
``register_strategy`` call, or another library's registration, is seen as it stands.
"""
from __future__ import annotations

import tvm
from tvm import relax as _relax

from ..ops.common import matmul_compute
from .match import _static_shape, workload_of_call
from .prepack import rewritten

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


def linear_as_nt(mod):
    """``mod`` with each ``matmul(x, permute_dims(W))`` of a 2-D W (``nn.Linear`` as frontends
    write it; the transpose's axes reversed) a call of our dense compute on W itself, layout NT
    (``tvm_ext_matmul``; an x of more dims, [B, S, K], reshaped to its rows and the result
    back), and the transposes no longer used removed. Legalized
    as written, the model transposed W at every call (TVM's own transpose kernel) and its
    matmul was a dense NN on the copy: records tuned for the layer (NT) did not apply, and
    dense_swap.x86, which reads an [N, K] weight in place, never did. A CPU build's first
    step (``build``, ``extract_tasks``); a CUDA build keeps the transpose (not measured)."""
    from tvm.relax.expr_functor import PyExprMutator, mutator  # noqa: PLC0415

    matmul, permute = (tvm.ir.Op.get(f"relax.{op}") for op in ("matmul", "permute_dims"))
    changed = []

    @mutator
    class _Linear(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(matmul) or len(call.args) != 2:
                return call
            b = call.args[1]
            src = self.lookup_binding(b) if isinstance(b, _relax.Var) else b
            if not (isinstance(src, _relax.Call) and src.op.same_as(permute)):
                return call
            axes = src.attrs.axes
            if axes is not None and [int(a) for a in axes] != [1, 0]:
                return call
            wl = workload_of_call(call, weight=src.args[0])
            if wl is None:
                return call
            changed.append(wl)
            x = call.args[0]
            lead = _static_shape(x)[:-1]  # (static: workload_of_call took it)
            if len(lead) > 1:  # [B, S, K]: its rows, then the result in x's leading dims
                x = self.builder_.emit(_relax.op.reshape(x, [wl.M, wl.K]))
            out = self.builder_.call_te(lambda a, w: matmul_compute(wl, a, w)[-1], x,
                                        src.args[0], primfunc_name_hint="tvm_ext_matmul")
            if len(lead) > 1:  # (a binding of its own: a view, not a copy, when built)
                out = self.builder_.emit(_relax.op.reshape(self.builder_.emit(out),
                                                           lead + [wl.N]))
            return out

    new = rewritten(_Linear(mod), mod)
    return _relax.transform.DeadCodeElimination()(new) if changed else mod


def register_strategy():
    """Make ``legalize_matmul`` the legalization of relax.matmul for every later build in this
    process (``register_op_attr`` at level 11, above TVM's own level 10)."""
    tvm.ir.register_op_attr("relax.matmul", "FLegalize", legalize_matmul,
                            level=STRATEGY_LEVEL)
