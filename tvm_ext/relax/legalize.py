"""Legalization of ``relax.matmul`` with our TOPI compute (the strategy form).

TVM's own legalization is looked up when it is needed (never captured at import), so a
``register_strategy`` call, or another library's registration, is seen as it stands.
"""
from __future__ import annotations

import tvm
from tvm import relax as _relax

from ..ops.common import matmul_compute
from .match import _static_shape, rewritten, workload_of_call

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


def parallel_matmuls_combined(mod):
    """``mod`` with the matmuls of one activation by constant weights (``nn.Linear``'s
    ``matmul(x, permute_dims(W))``, or a [K, N] weight as ONNX stores it), each with a constant
    bias [N] added or none, computed as one: the weights (and biases) concatenated here, once,
    along N, the result's slices (``strided_slice`` over the last axis, which FuseOps fuses into
    what reads them) in place of each. Attention's q, k and v projections become one matmul of
    three times the tiles: on a GPU, 96 tiles of 64 x 64 each left 36 of 132 SMs idle, three
    launches in a row. Matmuls whose results meet in one elementwise op (directly or after a
    unary ones: LLaMA's silu(gate(x)) * up(x)) are left apart: their product is one's fused
    epilogue (``mul``). TVM's ``CombineParallelMatmul`` takes weights that are parameters only.
    The first step of ``matmuls_as_templates``."""
    import numpy as np  # noqa: PLC0415
    ops = {name: tvm.ir.Op.get(f"relax.{name}") for name in
           ("matmul", "permute_dims", "add") + _UNARY_OPS + _BINARY_OPS}

    def is_op(expr, name):
        return isinstance(expr, _relax.Call) and expr.op.same_as(ops[name])

    def weight(b, values):
        """(W as [K, N] numpy, layout) of a constant matmul operand, else None."""
        b = values.get(b, b) if isinstance(b, _relax.Var) else b
        if is_op(b, "permute_dims"):
            w = values.get(b.args[0], b.args[0]) if isinstance(b.args[0], _relax.Var) \
                else b.args[0]
            axes = b.attrs.axes
            if isinstance(w, tvm.ir.expr.Constant) and len(w.value.shape) == 2 and \
                    (axes is None or [int(a) for a in axes] == [1, 0]):
                return w.value.numpy(), "T"  # stored [N, K]
            return None
        if isinstance(b, tvm.ir.expr.Constant) and len(b.value.shape) == 2:
            return b.value.numpy(), "N"
        return None

    def combine(block):
        values = {b.var: b.value for b in block.bindings}
        uses = {}
        for b in block.bindings:
            for v in _relax.analysis.free_vars(b.value):
                uses.setdefault(v, []).append(b)
        groups = {}
        for b in block.bindings:
            v = b.value
            if not (is_op(v, "matmul") and len(v.args) == 2 and
                    isinstance(v.args[0], _relax.Var)):
                continue
            w = weight(v.args[1], values)
            shape = _static_shape(b.var)
            if w is None or shape is None or _static_shape(v.args[0]) is None:
                continue
            key = (v.args[0], w[1], str(w[0].dtype), str(v.attrs.out_dtype))
            groups.setdefault(key, []).append((b, w[0]))
        plan = {}
        for (x, layout, _, _), members in groups.items():
            if len(members) < 2:
                continue
            items = []
            for b, w in members:
                users = uses.get(b.var, [])
                add = users[0] if len(users) == 1 and is_op(users[0].value, "add") else None
                bias = None
                if add is not None:
                    other = [a for a in add.value.args if not a.same_as(b.var)]
                    c = values.get(other[0], other[0]) if len(other) == 1 and \
                        isinstance(other[0], _relax.Var) else (other[0] if other else None)
                    n = w.shape[0] if layout == "T" else w.shape[1]
                    if isinstance(c, tvm.ir.expr.Constant) and tuple(c.value.shape) == (n,):
                        bias = c.value.numpy()
                items.append((b, w, add if bias is not None else None, bias))
            if any(i[2] is None for i in items):  # biases of all, or none combined
                items = [(b, w, None, None) for b, w, _, _ in items]
            if _meet(items, uses, is_op):
                continue
            plan[items[0][0].var] = (x, layout, items)
        if not plan:
            return block
        out, drop, sliced = [], set(), {}
        for (x, layout, items) in plan.values():
            for b, _, add, _ in items:
                if add is not None:
                    drop.add(b.var)
        for b in block.bindings:
            if b.var in plan:
                x, layout, items = plan[b.var]
                ws = [w for _, w, _, _ in items]
                ns = [w.shape[0] if layout == "T" else w.shape[1] for w in ws]
                weight_all = _relax.const(np.concatenate(ws, axis=0 if layout == "T" else 1))
                rhs = _relax.op.permute_dims(weight_all) if layout == "T" else weight_all
                call = _relax.Call(b.value.op, [x, rhs], b.value.attrs)
                combined = _relax.DataflowVar(f"{b.var.name}_combined",
                                              _combined_type(b.var, sum(ns)))
                out.append(_relax.VarBinding(combined, call))
                if items[0][3] is not None:
                    biased = _relax.DataflowVar(f"{b.var.name}_combined_bias",
                                                _combined_type(b.var, sum(ns)))
                    out.append(_relax.VarBinding(biased, _relax.op.add(combined, _relax.const(
                        np.concatenate([i[3] for i in items])))))
                    combined = biased
                start = 0
                for (mb, _, add, _), n in zip(items, ns):
                    sliced[(add or mb).var] = _relax.op.strided_slice(
                        combined, axes=[len(_static_shape(mb.var)) - 1], begin=[start],
                        end=[start + n])
                    start += n
            if b.var in drop:
                continue
            out.append(_relax.VarBinding(b.var, sliced[b.var]) if b.var in sliced else b)
        return _relax.DataflowBlock(out)

    changed = False
    new = _relax.BlockBuilder(mod)
    for gv, func in mod.functions.items():
        if not isinstance(func, _relax.Function) or not isinstance(func.body, _relax.SeqExpr):
            continue
        blocks = [combine(b) if isinstance(b, _relax.DataflowBlock) else b
                  for b in func.body.blocks]
        if any(not a.same_as(b) for a, b in zip(blocks, func.body.blocks)):
            changed = True
            new.update_func(gv, _relax.Function(func.params, _relax.SeqExpr(
                blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs))
    return _relax.transform.Normalize()(new.get()) if changed else mod


def _combined_type(var, n):
    """The tensor type of ``var`` (a matmul's result) with its last axis ``n`` long."""
    from .match import _tensor_type  # noqa: PLC0415
    t = _tensor_type(var)
    return _relax.TensorType(_static_shape(var)[:-1] + [n], t.dtype)


def _meet(items, uses, is_op) -> bool:
    """Whether the results of two of ``items`` ((matmul binding, weight, bias add or None,
    bias)) are read by one binary elementwise op, directly or after unary elementwise ops."""
    seen = {}
    for i, (b, _, add, _) in enumerate(items):
        var = (add or b).var
        reach, users = set(), list(uses.get(var, []))
        for user in users:
            if any(is_op(user.value, name) for name in _BINARY_OPS):
                reach.add(user.var)
            elif any(is_op(user.value, name) for name in _UNARY_OPS):
                users.extend(u for u in uses.get(user.var, []) if u not in users)
        for r in reach:
            if seen.setdefault(r, i) != i:
                return True
    return False


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
                ndim = len(_static_shape(src.args[0]) or ())
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

    combined = parallel_matmuls_combined(mod)
    new = rewritten(_Views(combined), combined)
    return _relax.transform.DeadCodeElimination()(new) if changed else combined


def register_strategy():
    """Make ``legalize_matmul`` the legalization of relax.matmul for every later build in this
    process (``register_op_attr`` at level 11, above TVM's own level 10)."""
    tvm.ir.register_op_attr("relax.matmul", "FLegalize", legalize_matmul,
                            level=STRATEGY_LEVEL)
