"""MetaSchedule bridge: our spaces as MetaSchedule design spaces, our records as MetaSchedule
database entries (and back).

- ``design_space(task)``: a ``ScheduleFn`` over the *plain* matmul PrimFunc (``plain_module``)
  that draws one ``sample_categorical`` decision per knob (the entity's position), moves a
  pruned combination to the next valid config, and applies the template's schedule. Tune it with
  ``tune(task, trials=..., work_dir=...)`` (``ms.tune_tir``, strategy ``replay-func``, because
  knob values steer Python control flow that a replayed trace cannot re-decide).
- ``export_records(records, work_dir, target)``: best records -> a MetaSchedule JSONDatabase whose
  traces carry the knob decisions, so ``relax.transform.MetaScheduleApplyDatabase`` (or
  ``ms.tir_integration.compile_tir``) applies them to the plain matmuls of a model legalized with
  ``tvm_ext.relax.legalize_as_strategy``.
- ``import_records(database, target)``: MetaSchedule records of our design spaces -> our records.

x86 templates schedule the plain compute by packing B in the schedule (cache_read +
transform_layout) instead of in the compute; CUDA templates' computes are plain already.
Importing MetaSchedule's tuning context imports ``tvm.s_tir.tensor_intrin`` (20-54 s, 7.5 s
in ``ops.common.fast_tvmscript_import``, which ``tune`` imports it in): export and import do not
import it.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import tvm

from .errors import TemplateError
from .result import MeasureResult
from .record import Record, pick_best
from .space import ConfigEntity
from .target import parse_target, target_str
from .task import Task
from .workload import Workload


def plain_module(wl: Workload):
    """The unscheduled matmul PrimFunc every template schedules in MetaSchedule form: int64
    sizes, as ``tvm_ext.relax.legalize_matmul`` gives inside a Relax model, so MetaSchedule's
    database matches the two."""
    from tvm import te  # noqa: PLC0415
    from .ops.common import matmul_compute  # noqa: PLC0415

    def i64(shape):
        return [tvm.tirx.IntImm("int64", d) for d in shape]

    A = te.placeholder(i64(wl.a_shape), wl.dtype, name="A")
    B = te.placeholder(i64(wl.b_shape), wl.dtype, name="B")
    func = te.create_prim_func(matmul_compute(wl, A, B), index_dtype_override="int64")
    return tvm.IRModule({"main": func})


def _apply(sch, task: Task, decisions: Optional[List[int]] = None) -> ConfigEntity:
    digits = []
    for k, (name, knob) in enumerate(task.space.knobs.items()):
        n = len(knob)
        rv = sch.sample_categorical(list(range(n)), [1.0 / n] * n,
                                    decision=None if decisions is None else decisions[k])
        digits.append(int(sch.get(rv)))
    config = task.space.get(_first_valid(task, task.space.index_from_digits(digits)))
    task.template.schedule(sch, config, task.workload, task.facts)
    return config


def _first_valid(task: Task, index: int) -> int:
    """The first valid index at or after ``index`` (wrapping): MetaSchedule stops on an error in
    a design space, so decisions that land on a pruned config map, deterministically, to the
    next valid one (a valid config's own decisions map to itself)."""
    n = len(task.space)
    for step in range(n):
        j = (index + step) % n
        if task.space.is_valid(j):
            return j
    raise ValueError(f"{task.name}: no valid config in the space")


def design_space(task: Task):
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    if not task.template.schedulable:
        raise TemplateError(f"{task.name} writes its kernel itself: it has no schedule for "
                            "MetaSchedule's design space")
    if task.workload.epilogue:
        raise TemplateError(f"{task.workload}: the MetaSchedule bridge holds bare matmuls; a "
                            "subgraph task is tuned with tvm_ext's own tuners")

    def space(sch):
        _apply(sch, task)  # returns None: MetaSchedule keeps sch

    return ms.space_generator.ScheduleFn(space, sch_rules=[], postprocs=[], mutator_probs={})


def _fast_build(mod, target, _params):
    # MetaSchedule's default builder imports every tensor intrinsic in each worker (~27 s).
    return tvm.compile(mod, target=target).mod


def _builder_runner(ms):
    """The builder (our fast build: no tensor-intrinsic import per worker) and runner both
    tuning entry points measure with."""
    return dict(builder=ms.builder.LocalBuilder(f_build=_fast_build),
                runner=ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
                    number=3, repeat=1, min_repeat_ms=20)))


def tune(task: Task, *, trials: int, work_dir: str, seed: int = 0, num_trials_per_iter=8):
    """``ms.tune_tir`` over our space; returns the MetaSchedule database."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from .ops.common import import_tensor_intrinsics  # noqa: PLC0415
    import_tensor_intrinsics()  # what its tuning context imports, the fast way
    _unnamed_handlers_off()
    return ms.tune_tir(
        plain_module(task.workload), task.target, work_dir=work_dir,
        max_trials_global=trials, num_trials_per_iter=min(num_trials_per_iter, trials),
        space=design_space(task), strategy="replay-func", cost_model="random",
        num_tuning_cores=1, seed=seed, **_builder_runner(ms))


def _unnamed_handlers_off() -> None:
    """MetaSchedule names every handler of its logger when it sets up a tuning run's logs and
    fails on one without a name (``None.format``); a handler someone else attached (seen after
    a first run in a pytest process) would stop the second run. dictConfig would replace it
    anyway: remove it first."""
    import logging  # noqa: PLC0415
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in list(ms_logger.handlers):
        if handler.get_name() is None:
            ms_logger.removeHandler(handler)


def tune_default(wl: Workload, target, *, trials: int, work_dir: str, seed: int = 0,
                 num_trials_per_iter: int = 16):
    """MetaSchedule on its own, as a TVM user runs it without tvm_ext: ``ms.tune_tir`` on the
    plain matmul with MetaSchedule's default design space for the target (its schedule rules),
    evolutionary search and XGB cost model, ``trials`` measured candidates. Returns (the best
    kernel compiled, its measured seconds). A ``work_dir`` that already holds a finished run of
    at least ``trials`` (``tvm_ext_done.json``) is reused without tuning."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    target = parse_target(target)
    mod = plain_module(wl)
    done = os.path.join(work_dir, "tvm_ext_done.json")
    finished = None
    if os.path.exists(done):
        with open(done) as f:
            finished = json.load(f)
    if finished and finished.get("trials", 0) >= trials and \
            finished.get("workload") == str(wl) and finished.get("target") == target_str(target):
        db = ms.database.JSONDatabase(work_dir=work_dir)
    else:
        from .ops.common import import_tensor_intrinsics  # noqa: PLC0415
        import_tensor_intrinsics()  # what its tuning context imports, the fast way
        _unnamed_handlers_off()
        db = ms.tune_tir(
            mod, target, work_dir=work_dir, max_trials_global=trials,
            num_trials_per_iter=min(num_trials_per_iter, trials), seed=seed,
            **_builder_runner(ms))
        with open(done, "w") as f:
            json.dump({"trials": trials, "workload": str(wl), "target": target_str(target)}, f)
    sch = ms.tir_integration.compile_tir(db, mod, target)
    if sch is None:
        raise TemplateError(f"MetaSchedule found no valid schedule for {wl} in {work_dir}")
    best = db.get_top_k(db.commit_workload(mod), 1)
    secs = float(np.mean([float(x) for x in best[0].run_secs])) if best else float("nan")
    return tvm.compile(sch.mod, target=target), secs


def export_records(records: List[Record], work_dir: str, target) -> int:
    """Best record per workload (for ``target``) into a MetaSchedule JSONDatabase in
    ``work_dir``; returns how many were written."""
    from tvm import s_tir  # noqa: PLC0415
    from tvm.s_tir.meta_schedule import arg_info, database  # noqa: PLC0415
    import os  # noqa: PLC0415
    target = parse_target(target)
    os.makedirs(work_dir, exist_ok=True)
    db = database.JSONDatabase(work_dir=work_dir)
    count = 0
    for rec in pick_best(records, target).values():
        task = Task(rec.workload, target, template=rec.task_name)
        if not task.template.schedulable or rec.workload.epilogue:
            continue  # a kernel template (wgmma), a subgraph task: no plain-matmul trace
        index = task.space.index_of(rec.config)
        if index is None:
            continue  # a config from another version of the space: no decisions to give
        mod = plain_module(rec.workload)
        sch = s_tir.Schedule(mod)
        _apply(sch, task, task.space.digits(index))
        db.commit_tuning_record(database.TuningRecord(
            sch.trace, db.commit_workload(mod), run_secs=[float(c) for c in rec.result.costs],
            target=target, args_info=arg_info.ArgInfo.from_prim_func(mod["main"])))
        count += 1
    return count


def import_records(db, target) -> List[Record]:
    """Our records from a MetaSchedule database filled by ``tune`` or ``export_records``."""
    from .relax import match_matmul  # noqa: PLC0415
    from .strategy import templates_for  # noqa: PLC0415
    target = parse_target(target)
    out = []
    for rec in db.get_all_tuning_records():
        wl = match_matmul(rec.workload.mod["main"])
        decisions = [int(v) for inst, v in rec.trace.decisions.items()
                     if inst.kind.name == "SampleCategorical"]
        if wl is None or not rec.run_secs:
            continue
        for template in templates_for(wl, target, schedulable=True):
            task = Task(wl, target, template=template.name)
            if len(decisions) == len(task.space.knobs) and \
                    all(0 <= d < r for d, r in zip(decisions, task.space.radix)):
                config = task.space.get(_first_valid(task,
                                                     task.space.index_from_digits(decisions)))
                costs = [float(s) for s in rec.run_secs]
                out.append(Record(target_str(target), task.name, wl, config,
                                  MeasureResult(costs, 0, 0.0)))
                break
    return out


__all__ = ["design_space", "export_records", "import_records", "plain_module", "tune"]
