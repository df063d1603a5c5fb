"""THE tuning driver: one way to run a tuning job, used by the CLI, ``tvm_ext.relax`` and the
bench.

    summary = tune_task(task, "log.json", trials=64, tuner="xgb", resume=True,
                        transfer=["other_shapes.json"], measure_options=MeasureOptions())

``tune_task`` makes the tuner (XGB gets loop-structure features of the scheduled kernel), warm-
starts it from ``transfer`` logs, with ``resume`` feeds it what ``log`` already holds for this
task (never measured twice), makes the measurer (unless one is given) and runs ``tune_loop``,
appending every measured batch to ``log``. ``prepare`` does the first half alone (the CLI's
dry run shows the tuner's first proposals without measuring).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

from . import record
from .errors import TvmExtError
from .measure import LocalMeasurer, MeasureOptions, PoolMeasurer
from .result import MeasureErrorNo
from .tuner import Tuner, XGBTuner, make_tuner, warm_start
from .tuner.features import task_loop_features

logger = logging.getLogger("tvm_ext")

# Error numbers that are a property of the config, not of the run that measured it: a record
# with one of them (or none) is not measured again on --resume.
CONFIG_ERRORS = frozenset({MeasureErrorNo.NO_ERROR, MeasureErrorNo.INSTANTIATION_ERROR,
                           MeasureErrorNo.COMPILE_HOST, MeasureErrorNo.COMPILE_DEVICE,
                           MeasureErrorNo.WRONG_ANSWER})

# Runner processes per GPU; they take turns on the device's lock. Loading a library cost ~0 s
# with TVM_CUDA_COMPILE_MODE=nvcc on an H100 host (2026-11-25; NVRTC's mode not measured).
# A runner whose kernel killed it is restarted while the others go on.
CUDA_LOADERS_PER_DEVICE = 4


@dataclass
class TuneSummary:
    trials: int = 0
    errors: int = 0
    best_cost: float = float("inf")
    best_config: object = None
    best_gflops: float = 0.0
    elapsed: float = 0.0
    history: List[float] = field(default_factory=list)  # best GFLOP/s after each trial
    improved_at: int = 0  # the trial that found the best
    best_template: Optional[str] = None  # (tune_templates) the template of the best config
    # (tune_templates) each template's own summary, in the order the templates were given
    per_template: Dict[str, "TuneSummary"] = field(default_factory=dict)


@dataclass
class Prepared:
    """A tuner ready for a task, and what it was given before measuring anything."""

    tuner: Tuner
    transferred: List[tuple] = field(default_factory=list)  # (log, records used)
    resumed: Optional[int] = None  # configs of this task already in the log (with resume)
    retry: int = 0  # configs of the log whose failure came from the run, measured again


def make_measurer(target, options: Optional[MeasureOptions] = None):
    """The measurer ``options`` ask for: in-process with ``local``, else a PoolMeasurer (with
    ``CUDA_LOADERS_PER_DEVICE`` loaders per GPU for CUDA targets unless the options say)."""
    options = options or MeasureOptions()
    if options.local:
        return LocalMeasurer(options.run)
    if target.kind.name == "cuda" and options.runners_per_device == 1:
        options = replace(options, runners_per_device=CUDA_LOADERS_PER_DEVICE)
    measurer = PoolMeasurer(options)
    measurer.warm(target)  # its processes start while the tuner ranks its first configs
    return measurer


def prepare(task, *, tuner: Union[str, Tuner] = "xgb", seed: int = 0, log=None,
            resume: bool = False, transfer: Sequence = ()) -> Prepared:
    """The tuner for ``task``: made by name (or given), warm-started from the records of the
    ``transfer`` logs (paths or record lists), and with ``resume`` told the configs of this task
    that ``log`` holds. A log that holds no record for the task's target is refused
    (LogError) before anything is measured."""
    t = make_tuner(tuner, task.space, seed=seed) if isinstance(tuner, str) else tuner
    if isinstance(t, XGBTuner) and t.loop_features is None:
        t.loop_features = task_loop_features(task)
    prepared = Prepared(t)
    for src in transfer:
        records = record.load(src) if isinstance(src, (str, Path)) else list(src)
        prepared.transferred.append(
            (src, warm_start(t, task, record.for_target(records, task.target))))
    if log is not None and Path(log).exists():
        records = record.load(log)  # a corrupt middle line: LogError, nothing written
        record.check_target(records, task.target, log)
        if resume:
            previous = [r for r in record.for_target(records, task.target)
                        if r.key() == task.workload.key() and r.task_name == task.name]
            # A config counts as measured where its result belongs to the config (a time, or
            # an error of its own); a failure of the run (device, timeouts, unknown, e.g. from
            # a zero repeat or a negative timeout of an older version) is measured again.
            indexed = [(task.space.index_of(r.config), r) for r in previous]
            # one point per config: its last time in the log (``tune --confirm`` and
            # ``rerank`` measure configs again)
            known = list({i: r.result.mean for i, r in indexed
                          if i is not None and r.result.error_no in CONFIG_ERRORS}.items())
            t.load_history([i for i, _ in known], [c for _, c in known])
            prepared.resumed = len(known)
            measured = {i for i, _ in known}
            prepared.retry = len({i for i, r in indexed if i is not None} - measured)
    elif resume:
        prepared.resumed = 0
    return prepared


def check_loop_options(*, n_trial, batch_size, early_stopping, names=None) -> None:
    """TvmExtError (one line) for a loop option below 1; ``names`` maps an option to how the
    caller spells it (the CLI's flags)."""
    for name, value in (("n_trial", n_trial), ("batch_size", batch_size),
                        ("early_stopping", early_stopping)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise TvmExtError(f"{(names or {}).get(name, name)} must be >= 1, "
                              f"got {value!r}")


def tune_loop(task, tuner: Tuner, measurer, *, n_trial: int, batch_size: int = 8,
              early_stopping: Optional[int] = None, stop_at_cost: Optional[float] = None,
              callbacks: Sequence[Callable] = ()) -> TuneSummary:
    """Ask, measure, tell until ``n_trial`` configs are measured, the space is exhausted,
    ``early_stopping`` trials pass without a better config, or (``stop_at_cost``, seconds) a
    config at least that fast is found. Each callback is called as ``cb(task, configs, results)``
    after every batch (log writer, progress line)."""
    check_loop_options(n_trial=n_trial, batch_size=batch_size, early_stopping=early_stopping)
    summary = TuneSummary()
    start = time.time()
    while summary.trials < n_trial:
        if not _run_batch(task, tuner, measurer, summary, min(batch_size, n_trial - summary.trials),
                          callbacks, start):
            break
        if early_stopping and summary.trials - summary.improved_at >= early_stopping:
            logger.info("tvm_ext: early stop after %d trials without improvement",
                        early_stopping)
            break
        if stop_at_cost is not None and summary.best_cost <= stop_at_cost:
            break
    summary.elapsed = time.time() - start
    return summary


def _run_batch(task, tuner: Tuner, measurer, summary: TuneSummary, n: int, callbacks,
               start: float) -> bool:
    """Ask ``tuner`` for up to ``n`` configs, measure them, tell the tuner, update ``summary``
    and call the callbacks; False when the tuner has nothing left to propose."""
    indices = tuner.ask(n)
    if not indices:
        return False
    configs = [task.config(i) for i in indices]
    results = measurer.measure(task, configs)
    tuner.tell(indices, [r.mean for r in results])
    for cfg, res in zip(configs, results):
        summary.trials += 1
        if not res.ok:
            summary.errors += 1
        elif res.mean < summary.best_cost:
            summary.best_cost, summary.best_config = res.mean, cfg
            summary.best_gflops = task.flop / res.mean / 1e9
            summary.improved_at = summary.trials
        summary.history.append(summary.best_gflops)
    summary.elapsed = time.time() - start
    for cb in callbacks:
        cb(task, configs, results)
    return True


def tune_task(task, log=None, *, trials: int, tuner: Union[str, Tuner, Prepared] = "xgb",
              seed: int = 0, resume: bool = False, transfer: Sequence = (), measurer=None,
              measure_options: Optional[MeasureOptions] = None, batch_size: int = 8,
              early_stopping: Optional[int] = None, stop_at_cost: Optional[float] = None,
              callbacks: Sequence[Callable] = ()) -> TuneSummary:
    """Tune ``task`` for ``trials`` configs into ``log`` (appended to; None: no log). A
    ``measurer`` given is used and left open; otherwise one is made from ``measure_options``
    and closed at the end. ``tuner`` may be a name, a Tuner, or ``prepare``'s result."""
    own = measurer is None
    measurer = measurer or make_measurer(task.target, measure_options)
    try:
        if hasattr(measurer, "warm"):  # builders ready for the task while the tuner ranks
            measurer.warm(task.target, task=task)
        prepared = tuner if isinstance(tuner, Prepared) else \
            prepare(task, tuner=tuner, seed=seed, log=log, resume=resume, transfer=transfer)
        writers = [record.LogWriter(log)] if log is not None else []
        return tune_loop(task, prepared.tuner, measurer, n_trial=trials, batch_size=batch_size,
                         early_stopping=early_stopping, stop_at_cost=stop_at_cost,
                         callbacks=[*writers, *callbacks])
    finally:
        if own and hasattr(measurer, "close"):
            measurer.close()


#: The exploration weight of ``tune_templates``: a template at 70% of the leader's best after
#: one batch still gets batches while the leader has had fewer than about ten.
EXPLORE = 0.25


def tune_templates(tasks: Sequence, log=None, *, trials: int,
                   tuner: Union[str, Callable] = "xgb", seed: int = 0, resume: bool = False,
                   transfer: Sequence = (), measurer=None,
                   measure_options: Optional[MeasureOptions] = None, batch_size: int = 8,
                   early_stopping: Optional[int] = None, explore: float = EXPLORE,
                   callbacks: Sequence[Callable] = (), on_batch=None) -> TuneSummary:
    """One tuning run over several templates of ONE workload (``tasks``: one Task per template,
    highest priority first), the budget moving to the template that is winning.

    Every template first gets one batch: its tuner's first proposals (the proposer's best for
    topk and xgb). After that, each batch goes to the template with the highest
    ``r + explore * sqrt(ln B / b)`` (UCB1 over the templates): ``r`` is the template's best
    speed over the best of all templates (0 while it has no valid config), ``b`` its batches so
    far, ``B`` all batches. A template whose tuner has nothing left to propose drops out.
    ``tuner``: a name, or a callable ``task -> Tuner``. ``on_batch(task, n)`` is called before
    each batch (the CLI says which template it measures). Returns the combined TuneSummary:
    ``best_template`` and ``per_template`` (each template's own summary) tell where the budget
    went and what it found."""
    import math  # noqa: PLC0415
    tasks = list(tasks)
    if not tasks:
        raise TvmExtError("tune_templates needs at least one task")
    keys = {t.workload.key() for t in tasks}
    if len(keys) > 1 or len({t.name for t in tasks}) < len(tasks):
        raise TvmExtError("tune_templates tunes one workload on distinct templates; got "
                          + ", ".join(f"{t.name} for {t.workload}" for t in tasks))
    check_loop_options(n_trial=trials, batch_size=batch_size, early_stopping=early_stopping)
    own = measurer is None
    measurer = measurer or make_measurer(tasks[0].target, measure_options)
    try:
        for t in tasks if hasattr(measurer, "warm") else ():
            measurer.warm(t.target, task=t)  # builders ready while the tuners rank
        tuners = [prepare(t, tuner=tuner if isinstance(tuner, str) else tuner(t), seed=seed,
                          log=log, resume=resume, transfer=transfer).tuner for t in tasks]
    except BaseException:
        if own and hasattr(measurer, "close"):
            measurer.close()
        raise
    writers = [record.LogWriter(log)] if log is not None else []
    total = TuneSummary()
    parts = {t.name: TuneSummary() for t in tasks}
    batches = {t.name: 0 for t in tasks}
    live = list(range(len(tasks)))
    start = time.time()
    first = min(batch_size, max(1, trials // len(tasks)))

    def step(i: int, n: int) -> None:
        task = tasks[i]
        if on_batch is not None:
            on_batch(task, n)
        part = parts[task.name]
        before = part.trials
        if not _run_batch(task, tuners[i], measurer, part, n, [*writers, *callbacks], start):
            live.remove(i)
            return
        batches[task.name] += 1
        for k in range(before, part.trials):  # the combined curve, trial by trial
            total.trials += 1
            gflops = part.history[k]
            if gflops > total.best_gflops:
                total.best_gflops, total.improved_at = gflops, total.trials
            total.history.append(total.best_gflops)
        if part.best_cost < total.best_cost:
            total.best_cost, total.best_config = part.best_cost, part.best_config
            total.best_template = task.name

    try:
        for i in list(live):  # one batch each, highest priority first
            if total.trials >= trials:
                break
            step(i, min(first, trials - total.trials))
        while total.trials < trials and live:
            if early_stopping and total.trials - total.improved_at >= early_stopping:
                logger.info("tvm_ext: early stop after %d trials without improvement",
                            early_stopping)
                break
            n_all = sum(batches.values())
            lead = max(total.best_gflops, 1e-30)

            def bound(i: int) -> float:
                name = tasks[i].name
                b = batches[name]
                if b == 0:
                    return float("inf")
                return parts[name].best_gflops / lead + explore * math.sqrt(math.log(n_all) / b)

            step(max(live, key=bound), min(batch_size, trials - total.trials))
    finally:
        if own and hasattr(measurer, "close"):
            measurer.close()
    total.errors = sum(p.errors for p in parts.values())
    total.elapsed = time.time() - start
    total.per_template = parts
    return total
