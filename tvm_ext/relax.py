"""Tuned kernels in whole Relax models.

    import tvm_ext.relax as tr
    tasks = tr.extract_tasks(mod, target)            # [(Workload, count), ...]
    with tvm_ext.apply_history_best("model.json") as ctx:
        ex = tr.build(mod, target)                   # our matmuls, the rest as TVM does it
    print(ctx.report)                                # per kernel: tuned or fallback

After ``LegalizeOps``, every PrimFunc whose single block is a matmul (a reduction over one axis
of ``C[.., m, n] += A[..] * B[..]`` with any storage order of A and B, i.e. what ``R.matmul``,
``R.linear`` / ``nn.dense`` and ``topi.nn.batch_matmul`` legalize to) is recognised as a
batch_matmul or dense workload. ``ApplyTunedKernels`` replaces it by our template's scheduled
PrimFunc (tuned record if the apply context has one, else the fallback) and marks it
``tirx.is_scheduled`` and opaque, so the default pipeline neither fuses it nor reschedules it
(dlight on CUDA); every other kernel goes through TVM's own pipeline. Epilogues (bias, activation)
stay separate kernels.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import tvm
from tvm import relax as _relax

from .dispatch import choose, current
from .errors import TvmExtError
from .template import get_template, templates_for
from .workload import DTYPES, Workload

_OPAQUE = 8  # relax's OpPatternKind.kOpaque: FuseOps leaves the function alone


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
    block is a matmul (as ``legalize_matmul`` writes it: block "C") and whose other blocks are
    elementwise (bias, activation, cast) ending in the function's output."""
    from tvm import s_tir  # noqa: PLC0415
    if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) < 3:
        return None
    try:
        sch = s_tir.Schedule(func)
        blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # noqa: BLE001
        return None
    if len(blocks) < 2 or blocks[0].name_hint != "C":
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


def _match_block(func, block, *, fused: bool) -> Optional[Workload]:
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
        return None  # dynamic shapes: not for fixed-shape templates
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


def _storage(idx, row, col) -> Optional[str]:
    """'N' if the last two indices are (row, col), 'T' if (col, row), else None."""
    if idx[-2].same_as(row) and idx[-1].same_as(col):
        return "N"
    if idx[-2].same_as(col) and idx[-1].same_as(row):
        return "T"
    return None


def _schedule_fused(task, config, func, epilogue: List[str]):
    """The template's schedule on the matmul block of a fused function, its elementwise
    epilogue computed in the matmul's write-back (registers -> output, one pass)."""
    from tvm import s_tir  # noqa: PLC0415
    sch = s_tir.Schedule(func)
    for name in epilogue[:-1]:
        sch.compute_inline(sch.get_sblock(name))
    task.template.schedule(sch, config, task.workload, task.facts)
    sch.reverse_compute_inline(sch.get_sblock(epilogue[-1]))
    return task.launch(sch.mod["main"])


def _call_counts(mod) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit(e):
        if isinstance(e, _relax.Call) and e.op.same_as(call_tir):
            gv = e.args[0]
            counts[gv.name_hint] = counts.get(gv.name_hint, 0) + 1

    for _, f in mod.functions.items():
        if isinstance(f, _relax.Function):
            _relax.analysis.post_order_visit(f, visit)
    return counts


def extract_tasks(mod, target=None) -> List[Tuple[Workload, int]]:
    """Every matmul workload of a model that a template covers on ``target``, with how many
    kernel calls compute it, most frequent (then largest) first."""
    from .target import parse_target  # noqa: PLC0415
    target = parse_target(target)
    mod = _relax.transform.LegalizeOps()(mod)  # a no-op on a legalized module
    counts = _call_counts(mod)
    found: Dict[tuple, List] = {}
    for gv, f in mod.functions.items():
        wl = match_matmul(f)
        if wl is None:
            continue
        try:
            templates_for(wl, target)
        except TvmExtError:
            continue
        entry = found.setdefault(wl.key(), [wl, 0])
        entry[1] += counts.get(gv.name_hint, 0)
    return sorted(((wl, n) for wl, n in found.values()), key=lambda t: (-t[1], -t[0].flop))


@tvm.transform.module_pass(opt_level=0, name="tvm_ext.ApplyTunedKernels")
class ApplyTunedKernels:
    """Schedule the legalized matmul PrimFuncs with our templates (see module doc)."""

    def __init__(self, target=None):
        from .target import parse_target  # noqa: PLC0415
        self.target = parse_target(target)
        self.replaced: List[Tuple[str, Workload, str, bool]] = []

    def transform_module(self, mod, _ctx):
        updates = {}
        for gv, f in mod.functions.items():
            if not isinstance(f, tvm.tirx.PrimFunc) or f.attrs is not None and \
                    f.attrs.get("tirx.is_scheduled", False):
                continue
            wl, fused = match_matmul(f), None
            if wl is None:
                fused = match_fused(f)
                if fused is None:
                    continue
                wl = fused[0]
            try:
                task, choice = choose(wl, self.target, schedulable=fused is not None)
            except TvmExtError:
                continue  # no template for this dtype/target: TVM's pipeline handles it
            if fused is None:
                new = task.instantiate(choice.config)["main"]
            else:
                new = _schedule_fused(task, choice.config, f, fused[2])
            new = new.without_attr("global_symbol")
            for key, value in (f.attrs.items() if f.attrs is not None else []):
                if key != "global_symbol":
                    new = new.with_attr(key, value)
            new = new.with_attr("tirx.is_scheduled", True).with_attr("op_pattern", _OPAQUE) \
                .with_attr("tvm_ext.template", task.name)
            updates[gv] = new
            self.replaced.append((gv.name_hint, wl, task.name, choice.tuned))
        for gv, f in updates.items():
            mod[gv] = f
        return mod


def tune_model(mod, target=None, *, trials: int, log, tuner: str = "xgb", seed: int = 0,
               measurer=None, min_trials: int = 8, callbacks=()):
    """Tune every task of a model into one log. The budget is split by weight: a task's share
    is its call count times its flop count, and every task gets at least ``min_trials``.
    Returns [(Workload, count, trials, TuneSummary)]."""
    from . import record  # noqa: PLC0415
    from .target import parse_target  # noqa: PLC0415
    from .task import Task  # noqa: PLC0415
    from .tuner import XGBTuner, make_tuner, tune  # noqa: PLC0415
    target = parse_target(target)
    tasks = extract_tasks(mod, target)
    if not tasks:
        raise TvmExtError("the model has no matmul that a tvm_ext template covers")
    weights = [max(n, 1) * wl.flop for wl, n in tasks]
    total = float(sum(weights))
    out = []
    for (wl, n), w in zip(tasks, weights):
        budget = max(min_trials, int(round(trials * w / total)))
        task = Task(wl, target)
        t = make_tuner(tuner, task.space, seed=seed)
        if isinstance(t, XGBTuner):
            t.loop_features = task.loop_features
        if measurer is None:
            from .measure.pool import PoolMeasurer  # noqa: PLC0415
            loaders = 4 if target.kind.name == "cuda" else 1  # CUDA compiles at load
            with PoolMeasurer(runners_per_device=loaders) as m:
                s = tune(task, t, m, n_trial=budget,
                         callbacks=[record.LogWriter(log), *callbacks])
        else:
            s = tune(task, t, measurer, n_trial=budget,
                     callbacks=[record.LogWriter(log), *callbacks])
        out.append((wl, n, budget, s))
    return out


def load_model(path: str):
    """An IRModule from a Python file that defines ``mod`` or ``get_model()``."""
    import runpy  # noqa: PLC0415
    try:
        ns = runpy.run_path(path)
    except FileNotFoundError:
        raise TvmExtError(f"model file {path} does not exist") from None
    except Exception as err:  # noqa: BLE001  (the user's file failed: say where)
        raise TvmExtError(f"model file {path} failed: {type(err).__name__}: {err}") from None
    mod = ns["get_model"]() if callable(ns.get("get_model")) else ns.get("mod")
    if not isinstance(mod, tvm.IRModule):
        raise TvmExtError(f"model file {path} must define an IRModule 'mod' or 'get_model()'")
    return mod


def _tensor_type(expr):
    return getattr(expr, "ty", None) or getattr(expr, "struct_info", None)


def _static_shape(expr) -> Optional[List[int]]:
    try:
        return [int(d) for d in _tensor_type(expr).shape.values]
    except (AttributeError, TypeError, ValueError):
        return None


def workload_of_call(call) -> Optional[Workload]:
    """The Workload of an ``R.matmul`` call with static shapes that a template covers."""
    a, b = call.args[0], call.args[1]
    sa, sb = _static_shape(a), _static_shape(b)
    if sa is None or sb is None:
        return None
    dtype = str(_tensor_type(a).dtype)
    out_dtype = str(getattr(call.attrs, "out_dtype", "") or "")
    out_dtype = dtype if out_dtype in ("", "void") else out_dtype
    try:
        if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0] and sa[2] == sb[1]:
            return Workload("batch_matmul", sa[0], sa[1], sb[2], sa[2], dtype, out_dtype, "NN")
        if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0]:
            return Workload("dense", 1, sa[0], sb[1], sa[1], dtype, out_dtype, "NN")
    except TvmExtError:
        return None
    return None


_DEFAULT_MATMUL_LEGALIZE = None


def legalize_matmul(bb, call):
    """FLegalize for ``relax.matmul``: our TOPI compute (the plain matmul every template and the
    MetaSchedule bridge schedule) where a workload fits, TVM's own legalization elsewhere."""
    from .ops.gemm_cuda import simt_gemm_compute  # noqa: PLC0415
    wl = workload_of_call(call)
    if wl is None:
        return _DEFAULT_MATMUL_LEGALIZE(bb, call)
    return bb.call_te(lambda a, b: simt_gemm_compute(wl, a, b)[-1], call.args[0], call.args[1],
                      primfunc_name_hint="tvm_ext_matmul")


def legalize_as_strategy(mod):
    """LegalizeOps with ``legalize_matmul`` for relax.matmul (this call only: no global
    registration)."""
    return _relax.transform.LegalizeOps(customize_legalize_map={
        "relax.matmul": legalize_matmul})(mod)


def register_strategy():
    """Make ``legalize_matmul`` the legalization of relax.matmul for every later build in this
    process (``register_op_attr`` at level 11, above TVM's own level 10)."""
    tvm.ir.register_op_attr("relax.matmul", "FLegalize", legalize_matmul, level=11)


def _remember_default():
    global _DEFAULT_MATMUL_LEGALIZE
    _DEFAULT_MATMUL_LEGALIZE = tvm.ir.Op.get("relax.matmul").get_attr("FLegalize")


_remember_default()


def build(mod, target=None, *, relax_pipeline="default", strategy: bool = False,
          fuse_epilogue: bool = False):
    """LegalizeOps (with ``legalize_matmul`` for relax.matmul when ``strategy``), our kernels for
    the matmuls (under the current ``apply_history_best``, if any), then ``tvm.compile`` with
    TVM's pipeline for everything else. ``fuse_epilogue`` (implies ``strategy``) first fuses
    each matmul with the elementwise ops after it (TVM's FuseOps) and computes them in our
    kernel's write-back."""
    from .target import parse_target  # noqa: PLC0415
    target = parse_target(target)
    if fuse_epilogue:
        mod = tvm.transform.Sequential([
            _relax.transform.AnnotateTIROpPattern(), _relax.transform.FuseOps(),
            _relax.transform.FuseTIR(), _relax.transform.DeadCodeElimination()])(
                legalize_as_strategy(mod))
    else:
        mod = legalize_as_strategy(mod) if strategy else _relax.transform.LegalizeOps()(mod)
    apply = ApplyTunedKernels(target)
    mod = apply(mod)
    config = {}
    for _, _, name, _ in apply.replaced:  # e.g. the tensor-core templates' options
        config.update(get_template(name).pass_config)
    from .task import pass_options  # noqa: PLC0415
    with pass_options(config):
        return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)


__all__ = ["ApplyTunedKernels", "build", "current", "extract_tasks", "legalize_as_strategy",
           "legalize_matmul", "load_model", "match_matmul", "register_strategy", "tune_model",
           "workload_of_call"]
