"""Subgraph tasks of a Relax model: each matmul fused (TVM's FuseOps) with the elementwise ops
after it, named as the epilogue of a workload (``Workload.epilogue``), so that a record says
which subgraph it measured and the fused kernel is tuned as it will run.

``fuse(mod)`` legalizes with our matmul compute, fuses, and reads each fused function's ops
*before* FuseTIR merges them (the Relax calls still name the legalized PrimFuncs: ``add``,
``gelu``, ``tir_exp``, ``cast``, ...); it returns the fused module and {fused PrimFunc name:
epilogue}. An op this module does not know (or a chain it cannot follow) gives no epilogue: the
function is then served by its anchor matmul's records, and the apply report says so.
"""
from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

import tvm
from tvm import relax as _relax

from .legalize import legalize_as_strategy
from .match import _static_shape, _tensor_type, match_matmul

_UNARY = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "silu": "silu", "exp": "exp",
          "tir_tanh": "tanh", "tir_sigmoid": "sigmoid", "tanh": "tanh", "sigmoid": "sigmoid",
          "tir_exp": "exp"}


def fuse(mod, split_unnamed: bool = False) -> Tuple[object, Dict[str, str]]:
    """(the model legalized and fused, {fused PrimFunc name: epilogue}) for every fused
    function whose first op is a matmul and whose other ops are a chain of known
    elementwise ops. ``split_unnamed`` (a CPU build, whose constant weights are packed once):
    a fused function whose ops cannot all be named and whose weight is a constant is split
    (``_unnamed_split``) into the matmul with the longest named chain after it, and the rest,
    which run after it as they are."""
    mod = legalize_as_strategy(mod)
    mod = _relax.transform.AnnotateTIROpPattern()(mod)
    mod = _relax.transform.FuseOps()(mod)
    if split_unnamed:
        mod = _unnamed_split(mod)
    epilogues = {}
    for gv, f in mod.functions.items():
        if isinstance(f, _relax.Function) and f.attrs is not None and \
                f.attrs.get("Primitive", False):
            epi = _epilogue_of(mod, f)
            if epi:
                epilogues[gv.name_hint] = epi
    mod = tvm.transform.Sequential([_relax.transform.FuseTIR(),
                                    _relax.transform.DeadCodeElimination()])(mod)
    return mod, epilogues


def _unnamed_split(mod):
    """``mod`` (after FuseOps) with each call of a fused function whose epilogue cannot be
    named (``_epilogue_of``), whose first op is a matmul of a constant weight, split: the
    matmul and the longest named chain after it stay one fused function (a kernel whose weight
    is packed once), the other ops are the caller's calls after it. Such a function's kernel
    was a schedule of the fused blocks, which packed the weight at every call (a division by
    a tensor, a LayerScale's product with a vector, ...)."""
    plans = {}
    for gv, f in mod.functions.items():
        if not (isinstance(f, _relax.Function) and f.attrs is not None and
                f.attrs.get("Primitive", False)) or _epilogue_of(mod, f):
            continue
        calls = _anchored_calls(mod, f)
        if calls is None or len(calls[0][2]) < 2 or \
                not any(calls[0][2][1].same_as(p) for p in f.params):
            continue
        n = len(_named_chain(mod, calls))
        inner = [v for v, _, _ in calls[:n]]  # (a later op reading one: no prefix function)
        if any(a.same_as(v) for _, _, args in calls[n + 1:] for a in args for v in inner):
            n = 0
        if n < len(calls) - 1:  # (an op after the named ones: always, as it is not named)
            plans[gv] = (f, calls, n)
    if not plans:
        return mod
    bb = _relax.BlockBuilder(mod)
    prefixes = {}

    def prefix_of(gv):
        """The fused function of the matmul and its named chain (None: the matmul alone)."""
        if gv not in prefixes:
            f, calls, n = plans[gv]
            prefixes[gv] = None
            if n:
                kept = calls[:n + 1]
                used = [p for p in f.params
                        if any(a.same_as(p) for _, _, args in kept for a in args)]
                bindings = _bindings(f)[:n + 1]
                out = _relax.Var(bindings[-1].var.name, _tensor_type(bindings[-1].var))
                bindings[-1] = _relax.VarBinding(out, bindings[-1].value)  # its output
                body = _relax.SeqExpr([_relax.DataflowBlock(bindings)], out)
                func = _relax.Function(used, body, _tensor_type(out), True, f.attrs)
                func = _relax.utils.copy_with_new_vars(func)  # its own vars, not ``f``'s
                name = "fused_" + "_".join(c.name_hint for _, c, _ in kept)
                prefixes[gv] = (bb.add_func(func, name), used)
        return prefixes[gv]

    def split(binding, dataflow: bool):
        value = binding.value
        new_var = _relax.DataflowVar if dataflow else _relax.Var
        if not (isinstance(value, _relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) and
                value.op in plans):
            return [binding]
        f, calls, n = plans[value.op]
        args = dict(zip(f.params, value.args))
        weight = args[calls[0][2][1]]
        if not isinstance(weight, tvm.ir.expr.Constant):
            return [binding]  # a weight computed at run time: packed at every call anyway
        out, names = [], dict(args)
        first = 0
        if n:
            gv, used = prefix_of(value.op)
            var = new_var(calls[n][0].name, _tensor_type(calls[n][0]))
            out.append(_relax.VarBinding(var, _relax.Call(gv, [args[p] for p in used])))
            names[calls[n][0]] = var
            first = n + 1
        bindings = _bindings(f)
        for i in range(first, len(calls)):
            b = bindings[i]
            var = binding.var if i == len(calls) - 1 else \
                new_var(b.var.name, _tensor_type(b.var))
            tup = _relax.Tuple([names.get(a, a) for a in calls[i][2]])
            out.append(_relax.VarBinding(var, _relax.Call(
                b.value.op, [b.value.args[0], tup], b.value.attrs, b.value.ty_args)))
            names[b.var] = var
        return out

    for gv, func in list(mod.functions.items()):
        if not isinstance(func, _relax.Function) or gv in plans or \
                (func.attrs is not None and func.attrs.get("Primitive", False)):
            continue
        blocks = []
        for block in func.body.blocks:
            dataflow = isinstance(block, _relax.DataflowBlock)
            new = [nb for b in block.bindings for nb in split(b, dataflow)]
            blocks.append(type(block)(new) if len(new) != len(block.bindings) else block)
        if any(not a.same_as(b) for a, b in zip(blocks, func.body.blocks)):
            bb.update_func(gv, _relax.Function(func.params, _relax.SeqExpr(
                blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs))
    return _relax.transform.DeadCodeElimination()(bb.get())


def _bindings(f) -> list:
    """The bindings of a fused function's body, every block's, in order (``_calls``'s)."""
    return [b for block in f.body.blocks for b in block.bindings]


def _named_chain(mod, calls) -> list:
    """The epilogue ops named (``_op``) of the longest chain on the matmul's result that
    ``calls`` (``_calls``, the matmul first) hold after the matmul, up to the first op that is
    not on the chain or has no name."""
    out_shape = _static_shape(calls[0][0])
    ops, prev = [], calls[0][0]
    for var, callee, args in calls[1:]:
        name = re.sub(r"\d+$", "", callee.name_hint)
        if args and args[0].same_as(prev):
            others = args[1:]
        elif name in ("add", "multiply") and len(args) == 2 and args[1].same_as(prev):
            others = args[:1]  # x + the chain (a residual written first), x * the chain
        else:
            break  # not a chain on the matmul's result
        op = _op(mod[callee], name, others, out_shape, _tensor_type(var))
        if op is None:
            break
        ops.append(op)
        prev = var
    return ops


def _calls(f):
    call_tir = tvm.ir.Op.get("relax.call_tir")
    out = []
    for block in f.body.blocks:
        for b in block.bindings:
            v = b.value
            if not (isinstance(v, _relax.Call) and v.op.same_as(call_tir)):
                return None
            out.append((b.var, v.args[0], list(v.args[1].fields)))
    return out


def _anchored_calls(mod, f) -> Optional[list]:
    """``_calls(f)`` where the first is a matmul and ops follow it; else None."""
    calls = _calls(f)
    if not calls or len(calls) < 2 or match_matmul(mod[calls[0][1]]) is None:
        return None
    return calls


def _epilogue_of(mod, f) -> Optional[str]:
    calls = _anchored_calls(mod, f)
    if calls is None:
        return None
    ops = _named_chain(mod, calls)
    return "+".join(ops) if len(ops) == len(calls) - 1 else None


def _op(prim, name, others, out_shape, out_type) -> Optional[str]:
    if name in _UNARY and not others:
        return _UNARY[name]
    if name == "add" and len(others) == 1:
        shape = _static_shape(others[0])
        if shape is not None and out_shape and shape == out_shape[-1:]:
            return "bias"
        if shape is not None and shape == out_shape:
            return "residual"
        return None
    if name in ("cast", "astype") and not others:
        return f"cast:{out_type.dtype}"
    if name == "multiply" and not others:
        value = _scalar_factor(prim)
        return f"scale:{value!r}" if value is not None and value > 0 else None
    if name == "multiply" and len(others) == 1 and _static_shape(others[0]) == out_shape:
        return "mul"  # a gated MLP: silu(x W_gate) * (x W_up)
    return None


def _scalar_factor(prim) -> Optional[float]:
    """c of an elementwise PrimFunc ``out = x * c`` (c a float constant), else None."""
    from tvm import s_tir  # noqa: PLC0415
    try:
        sch = s_tir.Schedule(prim)
        (block,) = sch.get_child_blocks(sch.get_sblock("root"))
        value = sch.get(block).body.value
        return float(value.b.value)
    except Exception:  # noqa: BLE001  (another shape of function: not a scale)
        return None
