"""Recognising matmuls in legalized Relax PrimFuncs, plain or fused with an epilogue.

After ``LegalizeOps``, every PrimFunc whose single block is a matmul (a reduction over one axis
of ``C[.., m, n] += A[..] * B[..]`` with any storage order of A and B, i.e. what ``R.matmul``,
``R.linear`` / ``nn.dense`` and ``topi.nn.batch_matmul`` legalize to) is a batch_matmul or dense
workload. A FuseOps result whose first block is such a matmul and whose other blocks are
elementwise ending in the output is a fused one. (``rewritten``: a mutator applied to every
Relax function of a module, shared by the passes of ``tvm_ext.relax``.)
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import tvm

from ..errors import TvmExtError
from ..ops.common import MATMUL_BLOCK
from ..workload import DTYPES, Workload


def _int(x) -> Optional[int]:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def match_matmul(func) -> Optional[Workload]:
    """The Workload a legalized PrimFunc computes, or None if it is not a plain matmul."""
    from tvm import s_tir  # noqa: PLC0415
    if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) != 3:
        return None
    try:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # noqa: BLE001  (no root block: not a TensorIR function we can read)
        return None
    if len(blocks) != 1:
        return None
    return _match_block(func, sch.get(blocks[0]), fused=False)


def match_fused(func) -> Optional[Tuple[Workload, str, List[str]]]:
    """(Workload, matmul block name, epilogue block names) for a FuseOps result whose first
    block is a matmul (as ``legalize_matmul`` writes it: block ``MATMUL_BLOCK``) and whose
    other blocks are elementwise (bias, activation, cast) ending in the function's output."""
    from tvm import s_tir  # noqa: PLC0415
    if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) < 3:
        return None
    try:
        sch = s_tir.Schedule(func)
        blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # noqa: BLE001
        return None
    if len(blocks) < 2 or blocks[0].name_hint != MATMUL_BLOCK:
        return None
    wl = _match_block(func, blocks[0], fused=True)
    if wl is None:
        return None
    out_shape = [_int(d) for d in blocks[0].writes[0].source.shape]
    for blk in blocks[1:]:
        if any(int(iv.iter_type) != 0 for iv in blk.iter_vars) or len(blk.writes) != 1:
            return None
        if [_int(d) for d in blk.writes[0].source.shape] != out_shape:
            return None
    if not blocks[-1].writes[0].source.same_as(func.params[-1]):
        return None
    return wl, blocks[0].name_hint, [b.name_hint for b in blocks[1:]]


def _match_block(func, block, *, fused: bool, symbolic=None) -> Optional[Workload]:
    kinds = [int(iv.iter_type) for iv in block.iter_vars]  # 0 spatial, 2 reduction
    if kinds.count(2) != 1 or kinds[-1] != 2 or len(kinds) not in (3, 4) or block.init is None:
        return None
    if len(block.reads) != 2 or len(block.writes) != 1:
        return None
    store = block.body  # C[...] = C[...] + (a product): a sum reduction
    if type(store).__name__ != "BufferStore" or type(store.value).__name__ != "Add" or \
            type(store.value.b).__name__ != "Mul":
        return None
    vars_ = [iv.var for iv in block.iter_vars]
    k = vars_[-1]
    out = block.writes[0]
    out_idx = [r.min for r in out.region]
    if len(out_idx) != len(vars_) - 1 or \
            any(not any(v.same_as(x) for v in vars_) for x in out_idx):
        return None
    m, n = out_idx[-2], out_idx[-1]
    a, b = block.reads
    a_idx = [r.min for r in a.region]
    b_idx = [r.min for r in b.region]
    if len(a_idx) < 2 or len(b_idx) < 2:
        return None

    ta, tb = _storage(a_idx, m, k), _storage(b_idx, k, n)
    if ta is None or tb is None:
        return None
    pa, pb, pc = func.params[0], func.params[1], out.source
    if not (a.source.same_as(pa) and b.source.same_as(pb)):
        return None
    if fused == any(out.source.same_as(p) for p in func.params):
        return None  # plain: writes the output param; fused: writes an intermediate
    shape = [_int(d) for d in pc.shape]
    a_shape = [_int(d) for d in pa.shape]
    b_shape = [_int(d) for d in pb.shape]
    if None in shape + a_shape + b_shape:
        if symbolic is not None and not fused:
            symbolic.append(_symbolic_dims(pa, pb, pc, ta + tb))
        return None  # dynamic shapes: not for fixed-shape templates (see match_family)
    dtype, out_dtype = str(pa.dtype), str(pc.dtype)
    if dtype != str(pb.dtype) or dtype not in DTYPES or out_dtype not in DTYPES:
        return None
    K = a_shape[-1] if ta == "N" else a_shape[-2]
    layout = ta + tb
    try:
        if len(shape) == 3:
            if len(a_shape) != 3 or len(b_shape) != 3 or a_shape[0] != b_shape[0]:
                return None  # broadcast batch: not a template workload
            return Workload("batch_matmul", shape[0], shape[1], shape[2], K, dtype, out_dtype,
                            layout)
        if len(a_shape) != 2 or len(b_shape) != 2:
            return None
        return Workload("dense", 1, shape[0], shape[1], K, dtype, out_dtype, layout)
    except TvmExtError:
        return None


def match_family(func):
    """(Family, {axis: var name}) for a legalized plain matmul PrimFunc whose sizes hold
    ``tir.Var``s (a symbolic sequence length, batch): every such axis is of any size (``?``)
    in the family, the others fixed. None for anything else (a fixed-shape matmul included,
    and a size that is an expression of vars rather than a var)."""
    from tvm import s_tir  # noqa: PLC0415
    if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) != 3:
        return None
    try:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # noqa: BLE001
        return None
    if len(blocks) != 1:
        return None
    found: list = []
    _match_block(func, sch.get(blocks[0]), fused=False, symbolic=found)
    return found[0] if found and found[0] is not None else None


def _symbolic_dims(pa, pb, pc, layout):
    """The family of a matmul whose buffers' sizes are ints or vars (None otherwise)."""
    from ..workload import AXES, Dim, Family  # noqa: PLC0415
    a_shape, b_shape, c_shape = list(pa.shape), list(pb.shape), list(pc.shape)
    if len(c_shape) not in (2, 3) or len(a_shape) != len(c_shape) or \
            len(b_shape) != len(c_shape):
        return None
    lead = len(c_shape) - 2
    if lead and not (_same(a_shape[0], c_shape[0]) and _same(b_shape[0], c_shape[0])):
        return None  # a broadcast batch: not a template workload
    size = {"B": c_shape[0] if lead else 1, "M": c_shape[-2], "N": c_shape[-1],
            "K": a_shape[-1] if layout[0] == "N" else a_shape[-2]}
    dims, names = [], {}
    for axis in AXES:
        v = size[axis]
        if _int(v) is not None:
            dims.append(Dim(str(_int(v)), (_int(v),)))
        elif isinstance(v, tvm.tirx.Var):
            dims.append(Dim("?", None))
            names[axis] = v.name
        else:
            return None
    dtype, out_dtype = str(pa.dtype), str(pc.dtype)
    if dtype != str(pb.dtype) or dtype not in DTYPES or out_dtype not in DTYPES:
        return None
    try:
        return Family("batch_matmul" if lead else "dense", tuple(dims), dtype, out_dtype,
                      layout), names
    except TvmExtError:
        return None


def _same(x, y) -> bool:
    return x.same_as(y) or (_int(x) is not None and _int(x) == _int(y))


def _storage(idx, row, col) -> Optional[str]:
    """'N' if the last two indices are (row, col), 'T' if (col, row), else None."""
    if idx[-2].same_as(row) and idx[-1].same_as(col):
        return "N"
    if idx[-2].same_as(col) and idx[-1].same_as(row):
        return "T"
    return None


def _tensor_type(expr):
    return getattr(expr, "ty", None) or getattr(expr, "struct_info", None)


def _static_shape(expr) -> Optional[List[int]]:
    try:
        return [int(d) for d in _tensor_type(expr).shape.values]
    except (AttributeError, TypeError, ValueError):
        return None


def workload_of_call(call, weight=None, layout_b: str = "N") -> Optional[Workload]:
    """The Workload of an ``R.matmul`` call with static shapes that a template covers.
    Without ``weight``: its operands as written (a dense of 2-D ones, a batch_matmul of 3-D
    ones with one batch). ``weight``: the tensor of which the call's B is a view (B itself,
    or W of ``permute_dims(W)`` swapping its last two axes, ``layout_b`` "T"): the workload of
    the call on it with leading axes flattened (``matmul_view``)."""
    a, b = call.args[0], call.args[1] if weight is None else weight
    sa, sb = _static_shape(a), _static_shape(b)
    if sa is None or sb is None:
        return None
    dtype = str(_tensor_type(a).dtype)
    out_dtype = str(getattr(call.attrs, "out_dtype", "") or "")
    out_dtype = dtype if out_dtype in ("", "void") else out_dtype
    if str(_tensor_type(b).dtype) != dtype:
        return None
    if weight is None and (len(sa) != len(sb) or len(sa) not in (2, 3) or
                           (len(sa) == 3 and sa[0] != sb[0])):
        return None  # as written: no view
    return matmul_view(sa, sb, layout_b if weight is not None else "N", dtype, out_dtype)


def matmul_view(sa, sb, layout_b: str, dtype: str, out_dtype: str) -> Optional[Workload]:
    """The template workload of ``matmul(a, b)`` for static shapes ``sa``, ``sb`` (b stored
    transposed in its last two axes when ``layout_b`` is "T") once leading axes are viewed
    flat: a 2-D b takes every row of a (a dense of prod(sa[:-1]) rows: a transformer's [B, S,
    K] activations times a weight), and a b of a's leading axes is a batch of their product
    (attention's [B, H, S, D] products). None where the sizes disagree or a broadcasts."""
    if len(sa) < 2 or len(sb) < 2:
        return None
    n, k = (sb[-2], sb[-1]) if layout_b == "T" else (sb[-1], sb[-2])
    if sa[-1] != k:
        return None
    try:
        if len(sb) == 2:
            return Workload("dense", 1, math.prod(sa[:-1]), n, k, dtype, out_dtype,
                            "N" + layout_b)
        if len(sa) == len(sb) and sa[:-2] == sb[:-2]:
            return Workload("batch_matmul", math.prod(sa[:-2]), sa[-2], n, k, dtype,
                            out_dtype, "N" + layout_b)
    except TvmExtError:
        return None
    return None


def rewritten(rewriter, mod):
    """The module of ``rewriter`` (a PyExprMutator made on ``mod``) with each Relax function
    of ``mod`` visited by it."""
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()
