"""Constant weights packed once, when the model is built (issue 25). A CPU matmul of
``dense_pack.x86`` packs its B into panels inside each parallel task at every call (a [K, N]
weight read once and written once more per call). Where B is a constant of the Relax function
(e.g. weights bound with ``BindParams``), ``prepack_constant_weights`` packs it here, with
numpy, into the panels of the kernel's config (``pack_weight``), and calls that config's kernel
without its packing (``prepacked_kernel``) instead: a plain matmul, or one fused with an
epilogue that its subgraph task names, where the fused function takes the kernel's parameters
(A, B, the epilogue's inputs, in its order), so that the kernel computes it in its write-back.
Only where the register rows and K step divide M and K (panels that overhang N get zero
columns); fused functions whose epilogue is unnamed keep packing.

``constants_on_huge_pages`` then moves every large constant of a CPU model (packed here or not)
onto huge pages (``host_memory``), where the measurers put a kernel's operands: a model built
in memory runs on its constants' own tensors.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

import tvm
from tvm import relax

from .match import rewritten


#: The template whose kernels take a weight packed ahead (``prepacked_kernel``). A matmul of a
#: constant weight takes its records (else its fallback) where ``IN_PLACE`` is the default:
#: dense_swap.x86 never packs the weight but reads it at every call, and ran 1-5 points of
#: the FMA peak below the prepacked kernel (2-core Zen 5; 12 on the 16-core Emerald Rapids
#: VM, GPT-2's LM head; ``bench.peak --gemm``, docs/BENCHMARKS.md). (dense_gemv.x86, a few
#: rows, keeps its weight.)
PREPACK_TEMPLATE = "dense_pack.x86"
IN_PLACE = ("dense_swap.x86",)


def prepack_template(wl, target):
    """PREPACK_TEMPLATE where a matmul ``wl`` (plain or a subgraph task's) of a constant weight
    should take it rather than its default template (one of ``IN_PLACE``, which
    PREPACK_TEMPLATE also serves), else None."""
    from ..errors import TvmExtError  # noqa: PLC0415
    from ..strategy import templates_for  # noqa: PLC0415
    try:
        names = [t.name for t in templates_for(wl, target)]
    except TvmExtError:  # no template: TVM's pipeline handles it
        return None
    return PREPACK_TEMPLATE if names[0] in IN_PLACE and PREPACK_TEMPLATE in names else None


def _constant_weight(call):
    """The arguments of a ``call_tir`` whose second argument is a constant (x, the constant
    weight, then a fused epilogue's inputs, if any), else None."""
    if not call.op.same_as(tvm.ir.Op.get("relax.call_tir")):
        return None
    args = call.args[1]
    fields = list(args.fields) if isinstance(args, tvm.ir.expr.Tuple) else []
    if len(fields) < 2 or not isinstance(fields[1], tvm.ir.expr.Constant):
        return None
    return fields


def constant_weight_calls(mod) -> set:
    """Names of the PrimFuncs that a Relax function of ``mod`` calls (``call_tir``) with a
    constant second argument: the matmuls (plain or fused) whose weight
    ``prepack_constant_weights`` can pack."""
    from tvm.relax.expr_functor import PyExprVisitor, visitor  # noqa: PLC0415

    names = set()

    @visitor
    class _Find(PyExprVisitor):
        def visit_call_(self, call):
            super().visit_call_(call)
            if _constant_weight(call) is not None:
                names.add(call.args[0].name_hint)

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            _Find().visit_expr(func)
    return names


def prepack_constant_weights(mod, kernels: Dict[str, Tuple[object, object]], mark: Callable):
    """``mod`` with each ``call_tir`` of a dense_pack.x86 kernel (``kernels``: {PrimFunc name:
    (task, config)} of the functions ``ApplyTunedKernels`` replaced by a task's kernel, plain
    matmuls and fused ones that take their subgraph task's parameters) whose weight is a
    constant replaced by a call of the prepacked kernel on the packed constant (and the
    epilogue's inputs as they were); ``mark(new, old, template)`` gives the new PrimFunc the
    attributes of the one it stands for (``apply._mark``). Returns (module, names of the
    matmuls prepacked)."""
    from tvm.relax.expr_functor import PyExprMutator, mutator  # noqa: PLC0415

    from ..ops.x86_gemm import pack_weight, prepackable, prepacked_kernel  # noqa: PLC0415

    done = []

    @mutator
    class _Prepack(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            fields = _constant_weight(call)
            gv = call.args[0] if fields is not None else None
            if gv is None or gv.name_hint not in kernels:
                return call
            task, cfg = kernels[gv.name_hint]
            wl = task.workload
            if not prepackable(task.name, wl, cfg):
                return call
            packed = pack_weight(wl, fields[1].value.numpy(), cfg["tile_x"].size[-1])
            func = mark(prepacked_kernel(wl, cfg, task.facts["vector_lanes"])
                        .without_attr("global_symbol"),
                        self.builder_.get()[gv], task.name)
            new_gv = self.builder_.add_func(func, f"{gv.name_hint}_prepacked")
            done.append(gv.name_hint)
            return relax.call_tir(new_gv, relax.Tuple([fields[0], relax.const(packed),
                                                       *fields[2:]]), call.ty_args[0])

    return rewritten(_Prepack(mod), mod), done


def constants_on_huge_pages(mod):
    """``mod`` with each constant of its Relax functions of ``host_memory.MIN_BYTES`` or more
    copied onto huge pages (``host_tensor``), as numpy's large arrays and the measurers'
    operands are. The VM of a model built in memory reads a constant's own tensor; one loaded
    from a file gets TVM's allocation. Returns (module, number of constants moved)."""
    from tvm.relax.expr_functor import PyExprMutator, mutator  # noqa: PLC0415

    from ..host_memory import host_tensor, large_on_cpu  # noqa: PLC0415
    moved = {}  # {data address of a constant: the constant on huge pages}

    @mutator
    class _Rehome(PyExprMutator):
        def visit_generic_const_(self, const):
            value = const.value  # a tensor, or a scalar of a GenericConst
            # (sized from its shape: no copy of a small constant)
            if not isinstance(value, tvm.runtime.Tensor) or \
                    not large_on_cpu(value.shape, value.dtype, value.device):
                return const
            if value.data_ptr() in moved:  # one constant used twice: one copy
                return moved[value.data_ptr()]
            moved[value.data_ptr()] = relax.const(host_tensor(value.numpy()))
            return moved[value.data_ptr()]

    return rewritten(_Rehome(mod), mod), len(moved)
