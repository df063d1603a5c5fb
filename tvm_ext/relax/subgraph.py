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


def fuse(mod) -> Tuple[object, Dict[str, str]]:
    """(the model legalized and fused, {fused PrimFunc name: epilogue}) for every fused
    function whose first op is a matmul and whose other ops are a chain of known
    elementwise ops."""
    mod = legalize_as_strategy(mod)
    mod = _relax.transform.AnnotateTIROpPattern()(mod)
    mod = _relax.transform.FuseOps()(mod)
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


def _epilogue_of(mod, f) -> Optional[str]:
    calls = _calls(f)
    if not calls or len(calls) < 2:
        return None
    var, callee, _ = calls[0]
    if match_matmul(mod[callee]) is None:
        return None
    out_shape = _static_shape(var)
    ops = []
    prev = var
    for var, callee, args in calls[1:]:
        name = re.sub(r"\d+$", "", callee.name_hint)
        if args and args[0].same_as(prev):
            others = args[1:]
        elif name in ("add", "multiply") and len(args) == 2 and args[1].same_as(prev):
            others = args[:1]  # x + the chain (a residual written first), x * the chain
        else:
            return None  # not a chain on the matmul's result
        op = _op(mod[callee], name, others, out_shape, _tensor_type(var))
        if op is None:
            return None
        ops.append(op)
        prev = var
    return "+".join(ops)


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
