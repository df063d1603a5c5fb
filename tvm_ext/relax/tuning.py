"""Tuning every matmul of a Relax model into one log, through the one tuning driver."""
from __future__ import annotations

from typing import Optional

import tvm

from ..codegen import tir_pipeline
from ..errors import TvmExtError
from ..measure import MeasureOptions
from ..result import error_line
from ..session import make_measurer, tune_task, tune_templates
from ..strategy import templates_for
from ..target import parse_target
from ..task import Task
from .extract import extract_families, extract_tasks


#: Configs ``fast`` tuning measures per kernel: the proposer's best K (Roller measures 20).
FAST_K = 20


def tune_model(mod, target=None, *, trials: Optional[int] = None, log, tuner: str = "xgb",
               seed: int = 0, measurer=None, measure_options=None, min_trials: int = 8,
               callbacks=(), subgraphs: bool = False, fast: bool = False, k: int = FAST_K,
               only=None, views=None):
    """Tune every task of a model into one log. The budget is split by weight: a task's share
    is its call count times its flop count, and every task gets at least ``min_trials``. One
    measurer serves every task (``measurer``, or one made from ``measure_options``).
    ``subgraphs``: the tasks are the matmuls fused with their epilogues, as
    ``build(..., fuse_epilogue=True)`` runs them (``extract_tasks``). A task that several
    templates can build (CUDA cores and tensor cores) is one run over all of them, the budget
    moving to the template that is winning (``tune_templates``; the summary's ``best_template``
    and ``per_template`` say where it went).
    ``fast``: every task gets the proposer's top ``k`` configs, measured in one parallel batch
    per template (``tuner="topk"``, no split by weight; ``trials`` is not used): a good kernel
    per matmul in seconds. ``only``: the workload keys to tune (the others are left out).
    ``views``: the tasks of ``build(..., views=views)`` (``extract_tasks``).
    Returns [(Workload, count, trials, TuneSummary)]."""
    target = parse_target(target)
    if fast:
        if k < 1:
            raise TvmExtError(f"fast tuning measures k >= 1 configs per kernel, got k={k}")
        tuner = "topk"
    elif trials is None or trials < 1:
        raise TvmExtError(f"tune_model needs trials >= 1 (or fast=True), got {trials!r}")
    tasks = [(wl, n) for wl, n in extract_tasks(mod, target, subgraphs=subgraphs, views=views)
             if only is None or wl.key() in only]
    if not tasks:
        raise TvmExtError("the model has no matmul that a tvm_ext template covers")
    weights = [max(n, 1) * wl.flop for wl, n in tasks]
    total = float(sum(weights))
    own = measurer is None
    if fast and measure_options is None and target.kind.name == "llvm":
        # In this process: a CPU kernel builds in a fraction of a second, and a pool's worker
        # processes would start, and compete with the timed runs for the cores.
        measure_options = MeasureOptions(local=True)
    measurer = measurer or make_measurer(target, measure_options)
    out = []
    try:
        for (wl, n), w in zip(tasks, weights):
            budget = k if fast else max(min_trials, int(round(trials * w / total)))
            options = [Task(wl, target, template=t.name) for t in templates_for(wl, target)]
            # fast: each template's top configs in one batch (the parallel builds at once).
            batch = budget if fast else 8
            if len(options) > 1:
                s = tune_templates(options, log, trials=budget, tuner=tuner, seed=seed,
                                   measurer=measurer, callbacks=callbacks, batch_size=batch)
            else:
                s = tune_task(options[0], log, trials=budget, tuner=tuner, seed=seed,
                              measurer=measurer, callbacks=callbacks, batch_size=batch)
            out.append((wl, n, budget, s))
    finally:
        if own and hasattr(measurer, "close"):
            measurer.close()
    return out


@tvm.transform.module_pass(opt_level=0, name="tvm_ext.ApplyFastTuning")
class ApplyFastTuning:
    """Fast tuning as a step of a Relax pipeline (as Fast-dlight's ``ApplyFastTuning``): on a
    legalized module, each matmul PrimFunc is tuned with the proposer's top ``k`` configs into
    ``log`` (records already there for a workload are kept and not measured again), then
    replaced by our scheduled kernel with the best record (``ApplyTunedKernels``).

        fast = tvm_ext.relax.ApplyFastTuning(target, "model.json")
        mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), fast])(mod)
        with tvm_ext.codegen.pass_options(fast.pass_config):  # the kernels' TVM options
            ex = tvm.compile(mod, target, tir_pipeline=fast.tir_pipeline)

    ``results`` holds ``tune_model``'s rows (none where the log had every workload already);
    ``pass_config`` the TVM pass options the kernels need at compile time (the tensor-core
    templates'; none on the CPU); ``tir_pipeline`` the TIR pipeline that compiles them as they
    were measured (on a CPU ``codegen.cpu_pipeline``: register tiles on the stack, tasks of
    non-temporal stores fenced; TVM's default elsewhere)."""

    def __init__(self, target=None, log="tvm_ext_fast.json", *, k: int = FAST_K,
                 measure_options=None):
        self.target, self.log, self.k = parse_target(target), log, k
        self.measure_options = measure_options
        self.results = []
        self.pass_config: dict = {}
        self.tir_pipeline = tir_pipeline(self.target)

    def transform_module(self, mod, _ctx):
        from pathlib import Path  # noqa: PLC0415

        from .. import record  # noqa: PLC0415
        from ..dispatch import apply_history_best  # noqa: PLC0415
        from ..strategy import get_template  # noqa: PLC0415
        from .apply import ApplyTunedKernels  # noqa: PLC0415
        done, self.results = set(), []
        if Path(self.log).exists():
            done = {r.key() for r in record.for_target(record.load(self.log), self.target)
                    if r.result.ok}
        todo = [wl for wl, _ in extract_tasks(mod, self.target) if wl.key() not in done]
        if todo:
            self.results = tune_model(mod, self.target, log=self.log, fast=True, k=self.k,
                                      measure_options=self.measure_options,
                                      only={wl.key() for wl in todo})
        with apply_history_best(str(self.log)) if Path(self.log).exists() else _nothing():
            apply = ApplyTunedKernels(self.target)
            mod = apply(mod)
        self.pass_config = dict(apply.pass_config)
        for _, _, name, _ in apply.replaced:
            self.pass_config.update(get_template(name).pass_config)
        return mod


def _nothing():
    import contextlib  # noqa: PLC0415
    return contextlib.nullcontext()


def tune_model_families(mod, target=None, *, sizes, trials: int, log, max_kernels: int = 8,
                        tuner: str = "xgb", seed: int = 0, measure_options=None,
                        progress=None):
    """Tune the shape families of a model's symbolic matmuls into ``log``: ``sizes`` maps a
    size var's name to the values it takes ({"n": "1..2048:16"}); a family whose every
    varying axis is named there is tuned (``trials`` per representative shape) as that range,
    and its library serves the model's matmul (``build`` under ``apply_history_best(log)``).
    Returns [(Family tuned, call count, Library, FamilyReport)]; families with an unnamed
    size var are left out (they get the generic kernel)."""
    from ..family import tune_family  # noqa: PLC0415
    from ..workload import AXES, Dim  # noqa: PLC0415
    target = parse_target(target)
    out = []
    for fam, names, count in extract_families(mod, target):
        if any(names[a] not in sizes for a in fam.varying):
            continue
        dims = tuple(Dim.parse(sizes[names[a]], a) if a in names else d
                     for a, d in zip(AXES, fam.dims))
        ranged = type(fam)(fam.op, dims, fam.dtype, fam.out_dtype, fam.layout)
        library, report = tune_family(ranged, target, log, trials=trials,
                                      max_kernels=max_kernels, tuner=tuner, seed=seed,
                                      measure_options=measure_options, progress=progress)
        out.append((ranged, count, library, report))
    return out


def load_model(path: str):
    """An IRModule from a Python file that defines ``mod`` or ``get_model()``."""
    import runpy  # noqa: PLC0415
    try:
        ns = runpy.run_path(path)
    except FileNotFoundError:
        raise TvmExtError(f"model file {path} does not exist") from None
    except Exception as err:  # noqa: BLE001  (the user's file failed: say where)
        raise TvmExtError(f"model file {path} failed: {_one_line(err)}") from None
    if callable(ns.get("get_model")):
        try:
            mod = ns["get_model"]()
        except Exception as err:  # noqa: BLE001  (the user's function failed, as above)
            raise TvmExtError(f"model file {path}: get_model() failed: {_one_line(err)}") \
                from None
    else:
        mod = ns.get("mod")
    if not isinstance(mod, tvm.IRModule):
        raise TvmExtError(f"model file {path} must define an IRModule 'mod' or 'get_model()'")
    return mod


def _one_line(err: BaseException) -> str:
    """``Type: message`` on one line (TVM's errors span many)."""
    return f"{type(err).__name__}: {error_line(err, 300)}"
