"""Legalization of ``relax.matmul`` with our TOPI compute (the strategy form).

TVM's own legalization is looked up when it is needed (never captured at import), so a
``register_strategy`` call, or another library's registration, is seen as it stands.
"""
from __future__ import annotations

import functools

import tvm
from tvm import relax as _relax

from ..ops.common import matmul_compute
from ..errors import TvmExtError
from ..workload import Workload
from .match import _static_shape, _tensor_type, rewritten, workload_of_call


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


#: Target kinds whose builds (and task extraction) run ``matmuls_as_templates`` first unless
#: told otherwise (``views=``): on the GPU too, where dlight scheduled such matmuls (a block
#: of TVM's frontend on an H200: 0.62 ms by dlight, 0.55 on our fallback kernels in f32; 0.42
#: and 0.15 in f16; ``python -m tvm_ext.bench.model --target cuda``, docs/BENCHMARKS.md).
VIEW_TARGETS = ("llvm", "cuda")


def _ndim(expr) -> int:
    """The number of axes of a tensor expression (-1 where unknown)."""
    return int(getattr(_tensor_type(expr), "ndim", -1))


def views_for(target, views=None) -> bool:
    """Whether a build for ``target`` runs ``matmuls_as_templates``: ``views`` where given, else
    by its kind (``VIEW_TARGETS``)."""
    return bool(views) if views is not None else target.kind.name in VIEW_TARGETS


#: Elementwise ops that ``matmuls_as_templates`` computes on a flattened matmul's result
#: before viewing it in the call's shape (so FuseOps finds them right after the matmul, as a
#: fused epilogue): one operand, or two where the other is a scalar, a vector along the last
#: axis (a bias) or of the result's shape (a residual, viewed flat too).
_UNARY_OPS = ("nn.relu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "exp", "sigmoid", "tanh",
              "astype")
_BINARY_OPS = ("add", "multiply", "subtract", "divide")


def matmuls_as_templates(mod):
    """``mod`` with each ``relax.matmul`` that a template covers only once its operands are
    viewed otherwise a call of our matmul compute on those views (``tvm_ext_matmul``;
    ``match.matmul_view``): a B that is ``permute_dims(W)`` swapping W's last two axes
    (``nn.Linear``, attention's ``q @ k^T``) is W itself, layout NT, and the transposes no
    longer used are removed; an A of [B, S, K] times a 2-D weight (a transformer's
    activations, ``nn.Linear`` or a [K, N] weight as ONNX's MatMul stores it) is a dense of its
    B * S rows; operands of equal leading axes ([B, H, S, D]) a batch_matmul of their product.
    Views are reshapes (``vm.builtin.reshape``: nothing copied), the result viewed back after
    the elementwise ops that follow it (``_UNARY_OPS``, ``_BINARY_OPS``: a fused epilogue).
    Legalized as written, such a matmul was TVM's own unscheduled loop nest on the CPU (the
    transformer block of ``python -m tvm_ext.bench.model``: 6.6-7.4 s built by TVM's own
    pipeline, 19-21 ms by ours, 2-core Zen 5), dlight's on a GPU, or a transpose of W at every
    call before a dense NN (NT records never applied). The first step of ``build`` and
    ``extract_tasks`` where ``views_for`` says so."""
    from tvm.relax.expr_functor import PyExprMutator, mutator  # noqa: PLC0415

    ops = {name: tvm.ir.Op.get(f"relax.{name}") for name in
           ("matmul", "permute_dims", "reshape") + _UNARY_OPS + _BINARY_OPS}
    changed, flat = [], []  # flat: vars of our results before they are viewed back

    def is_op(expr, name):
        return isinstance(expr, _relax.Call) and expr.op.same_as(ops[name])

    @mutator
    class _Views(PyExprMutator):
        def source(self, expr):
            """The value ``expr`` is bound to (through aliases)."""
            while isinstance(expr, _relax.Var):
                value = self.lookup_binding(expr)
                if value is None:
                    return expr
                expr = value
            return expr

        def weight(self, b):
            """(the tensor B views, its layout): W of a permute_dims swapping W's last two
            axes, else B."""
            src = self.source(b)
            if is_op(src, "permute_dims"):
                ndim = _ndim(src.args[0])
                axes = src.attrs.axes
                swap = list(range(ndim - 2)) + [ndim - 1, ndim - 2]
                if ndim >= 2 and ([int(a) for a in axes] == swap if axes is not None
                                  else ndim == 2):
                    return src.args[0], "T"
            return b, "N"

        def viewed_back(self, expr):
            """(our flat result, the shape it is viewed in) where ``expr`` is such a view."""
            src = self.source(expr)
            if is_op(src, "reshape") and any(src.args[0].same_as(v) for v in flat):
                return src.args[0], _static_shape(src)
            return None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if is_op(call, "matmul") and len(call.args) == 2:
                return self.matmul(call)
            if any(is_op(call, name) for name in _UNARY_OPS + _BINARY_OPS):
                return self.sunk(call)
            return call

        def matmul(self, call):
            a, (w, layout_b) = call.args[0], self.weight(call.args[1])
            sa, sw = _static_shape(a), _static_shape(w)
            if sa is None or sw is None:
                return self.symbolic(call, a, w, layout_b)
            wl = workload_of_call(call, weight=w, layout_b=layout_b)
            if wl is None or (layout_b == "N" and len(sa) == len(sw) == len(wl.a_shape)):
                return call  # as written: LegalizeOps takes it (or TVM's own, no template)
            changed.append(wl)
            if len(sa) != len(wl.a_shape):
                a = self.builder_.emit(_relax.op.reshape(a, wl.a_shape))
            if len(sw) != len(wl.b_shape):
                w = self.builder_.emit(_relax.op.reshape(w, wl.b_shape))
            out = self.builder_.call_te(lambda x, y: matmul_compute(wl, x, y)[-1], a, w,
                                        primfunc_name_hint="tvm_ext_matmul")
            shape = sa[:-1] + [wl.N] if len(sw) == 2 else sa[:-2] + [wl.M, wl.N]
            if shape == list(wl.out_shape):
                return out
            return self.viewed(self.builder_.emit(out), shape)

        def symbolic(self, call, a, w, layout_b):
            """A matmul of sizes that hold vars (a sequence length) on operands of the same
            leading axes (a batch): ``a @ permute_dims(w)`` (decoding's q . k^T over the cached
            keys) as our matmul on w, layout NT (a shape family's kernel reads w's rows as
            they are, no transpose at every call); more than one leading axis ([B, H, S, D]:
            q . k^T and p . v) viewed as one batch, the result viewed back. Else (2-D: a
            weight, whose transpose TVM folds when it is a constant) as written."""
            ta, tw = _tensor_type(a), _tensor_type(w)
            nd = _ndim(a)
            if nd < 3 or nd != _ndim(w) or (layout_b == "N" and nd == 3) or \
                    str(ta.dtype) != str(tw.dtype) or not all(
                        tvm.sym.Analyzer().can_prove_equal(x, y)
                        for x, y in zip(ta.shape.values[:-2], tw.shape.values[:-2])):
                return call
            dtype, out_dtype = str(ta.dtype), str(getattr(call.attrs, "out_dtype", "") or "")
            out_dtype = dtype if out_dtype in ("", "void") else out_dtype
            try:  # the op, dtypes and layout (the compute takes its sizes from a and w)
                wl = Workload("batch_matmul", 1, 1, 1, 1, dtype, out_dtype, "N" + layout_b)
            except TvmExtError:
                return call
            changed.append(wl)
            lead, (m, k) = ta.shape.values[:-2], ta.shape.values[-2:]
            n = tw.shape.values[-2 if layout_b == "T" else -1]
            if nd > 3:  # the leading axes as one batch (views)
                bsz = functools.reduce(lambda x, y: x * y, lead)
                a = self.builder_.emit(_relax.op.reshape(a, [bsz, m, k]))
                w = self.builder_.emit(_relax.op.reshape(
                    w, [bsz, n, k] if layout_b == "T" else [bsz, k, n]))
            out = self.builder_.call_te(lambda x, y: matmul_compute(wl, x, y)[-1], a, w,
                                        primfunc_name_hint="tvm_ext_matmul")
            return _relax.op.reshape(self.builder_.emit(out), [*lead, m, n]) if nd > 3 else out

        def sunk(self, call):
            """An elementwise op on a viewed-back result computed on the flat result, then
            viewed back: one operand, or two where the other is a scalar, a bias [N], or of the
            result's shape (a residual, viewed flat; or a second such result)."""
            args = list(call.args)
            found = {i: self.viewed_back(x) for i, x in enumerate(args)}
            found = {i: v for i, v in found.items() if v is not None}
            if not found or len(args) > 2 or len({tuple(v[1]) for v in found.values()}) > 1 or \
                    len({tuple(_static_shape(v[0])) for v in found.values()}) > 1:
                return call  # (two results of one view shape may be flat in two ways)
            src, shape = next(iter(found.values()))
            new = [found[i][0] if i in found else x for i, x in enumerate(args)]
            if len(args) == 2 and len(found) == 1:
                j = 1 - next(iter(found))  # the other operand
                so = _static_shape(args[j])
                if so is None or so not in ([], [1], shape[-1:], shape):
                    return call
                if so == shape:  # a residual: viewed flat too
                    new[j] = self.builder_.emit(_relax.op.reshape(args[j], _static_shape(src)))
            return self.viewed(
                self.builder_.emit(_relax.Call(call.op, new, call.attrs, call.ty_args)), shape)

        def viewed(self, out, shape):
            """Our flat result ``out`` (a bound var) viewed in ``shape``, remembered as flat
            (``viewed_back``)."""
            flat.append(out)
            # (a binding of its own: a view when built; as a block's output value, a copy)
            return self.builder_.emit(_relax.op.reshape(out, shape))

    new = rewritten(_Views(mod), mod)
    return _relax.transform.DeadCodeElimination()(new) if changed else mod


def register_strategy():
    """Make ``legalize_matmul`` the legalization of relax.matmul for every later build in this
    process (``register_op_attr`` at level 11, above TVM's own level 10)."""
    tvm.ir.register_op_attr("relax.matmul", "FLegalize", legalize_matmul,
                            level=STRATEGY_LEVEL)
