"""Tuning every matmul of a Relax model into one log, through the one tuning driver."""
from __future__ import annotations

import tvm

from ..errors import TvmExtError
from ..result import error_line
from ..session import make_measurer, tune_task, tune_templates
from ..strategy import templates_for
from ..target import parse_target
from ..task import Task
from .extract import extract_families, extract_tasks


def tune_model(mod, target=None, *, trials: int, log, tuner: str = "xgb", seed: int = 0,
               measurer=None, measure_options=None, min_trials: int = 8, callbacks=(),
               subgraphs: bool = False):
    """Tune every task of a model into one log. The budget is split by weight: a task's share
    is its call count times its flop count, and every task gets at least ``min_trials``. One
    measurer serves every task (``measurer``, or one made from ``measure_options``).
    ``subgraphs``: the tasks are the matmuls fused with their epilogues, as
    ``build(..., fuse_epilogue=True)`` runs them (``extract_tasks``). A task that several
    templates can build (CUDA cores and tensor cores) is one run over all of them, the budget
    moving to the template that is winning (``tune_templates``; the summary's ``best_template``
    and ``per_template`` say where it went).
    Returns [(Workload, count, trials, TuneSummary)]."""
    target = parse_target(target)
    tasks = extract_tasks(mod, target, subgraphs=subgraphs)
    if not tasks:
        raise TvmExtError("the model has no matmul that a tvm_ext template covers")
    weights = [max(n, 1) * wl.flop for wl, n in tasks]
    total = float(sum(weights))
    own = measurer is None
    measurer = measurer or make_measurer(target, measure_options)
    out = []
    try:
        for (wl, n), w in zip(tasks, weights):
            budget = max(min_trials, int(round(trials * w / total)))
            options = [Task(wl, target, template=t.name) for t in templates_for(wl, target)]
            if len(options) > 1:
                s = tune_templates(options, log, trials=budget, tuner=tuner, seed=seed,
                                   measurer=measurer, callbacks=callbacks)
            else:
                s = tune_task(options[0], log, trials=budget, tuner=tuner, seed=seed,
                              measurer=measurer, callbacks=callbacks)
            out.append((wl, n, budget, s))
    finally:
        if own and hasattr(measurer, "close"):
            measurer.close()
    return out


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
