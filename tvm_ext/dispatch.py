"""Apply tuned logs at build time.

    with tvm_ext.apply_history_best("bmm.json") as ctx:
        kernel = tvm_ext.build(workload, target)      # tuned config if the log has one
    print(ctx.report())                               # which workloads were tuned / fell back

The context is a ``contextvars`` stack (no module-global state): nested contexts see the
innermost one, and threads/async tasks do not leak into each other. On exit one summary line is
logged (``tvm_ext`` logger), not a warning per kernel.
"""
from __future__ import annotations

import contextvars
import functools
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

import numpy as np

from . import legacy
from . import record as rec
from .codegen import use_host_cores
from .errors import SpaceError, TvmExtError
from .host_memory import host_empty, host_tensor
from .space import ConfigEntity
from .target import describe, parse_target, target_machine
from .task import Task
from .strategy import all_templates, templates_for
from .workload import Workload

logger = logging.getLogger("tvm_ext")
_CURRENT: contextvars.ContextVar = contextvars.ContextVar("tvm_ext_apply", default=None)


@dataclass
class Choice:
    """What ``build`` used for one workload."""

    workload: Workload
    template: str
    config: ConfigEntity
    tuned: bool
    record_cost: Optional[float] = None  # seconds, from the log
    # Knobs the record did not have and no space-file default explains: completed with the
    # fallback's values, so the kernel built is not quite the one the record measured.
    completed: List[str] = field(default_factory=list)
    # For a record written by TVM <= 0.19 whose knobs meant something else: how it was
    # translated into ours (``tvm_ext.legacy``); empty for a record applied as is.
    translated: str = ""
    # For a subgraph task: the record is its anchor matmul's (measured without the epilogue).
    anchor: bool = False
    # The machine the record's time was measured on, where it is not the target's own (no
    # record of this machine applied): its time in the log is that machine's.
    measured_on: str = ""

    @property
    def how(self) -> str:
        if not self.tuned:
            return "fallback"
        how = f"tuned ({self.record_cost * 1e3:.4f} ms in log)"
        if self.anchor:
            how = f"tuned on the anchor matmul ({self.record_cost * 1e3:.4f} ms in log, " \
                  "without the epilogue)"
        if self.measured_on:
            how += f", measured on another machine: {self.measured_on}"
        if self.translated:
            how += f", translated from {self.translated}"
        if self.completed:
            how += f", completed from fallback ({', '.join(self.completed)})"
        return how


@dataclass
class ApplyReport:
    choices: List[Choice] = field(default_factory=list)
    # Records passed over because this target's space rejects their config (e.g. a register
    # tile tuned for AVX-512's 32 vector registers, on an AVX2 host): one line each.
    skipped: List[str] = field(default_factory=list)
    # Records set aside when the logs were read, never applied, counted per reason: templates
    # this version does not have (conv2d in a TopHub log, dense_nopack.x86), impossible costs.
    set_aside: Counter = field(default_factory=Counter)
    # Shape families built into dispatching kernels (``tvm_ext.family``): one description each
    # (the family, its buckets and kernels, its generic kernel).
    families: List[str] = field(default_factory=list)

    @property
    def tuned(self) -> List[Choice]:
        return [c for c in self.choices if c.tuned]

    @property
    def fallback(self) -> List[Choice]:
        return [c for c in self.choices if not c.tuned]

    def summary(self) -> str:
        skipped = (f"; {len(self.skipped)} records skipped (their configs break this target's "
                   "space)") if self.skipped else ""
        aside = f"; {rec.set_aside_line(self.set_aside)}" if self.set_aside else ""
        fams = f"; {len(self.families)} shape families" if self.families else ""
        return (f"tvm_ext: {len(self.tuned)} of {len(self.choices)} kernels used a tuned config, "
                f"{len(self.fallback)} fell back{fams}{skipped}{aside}")

    def __str__(self):
        lines = [self.summary()]
        for c in self.choices:
            lines.append(f"  {c.workload}: {c.template} {c.how}")
        for desc in self.families:
            lines += ["  " + line for line in desc.splitlines()]
        lines += [f"  skipped: {line}" for line in self.skipped]
        lines += [f"  set aside: {n} records: {why}" for why, n in sorted(self.set_aside.items())]
        return "\n".join(lines)


class ApplyHistoryBest:
    """Best records of one or more logs (paths or Record lists), by workload and target."""

    def __init__(self, logs: Union[str, os.PathLike, Sequence, None] = None):
        self.records: List[rec.Record] = []
        self.paths: List[str] = []  # the logs read (shape families read their libraries)
        self.report = ApplyReport()
        if logs is None:
            logs = []
        elif isinstance(logs, (str, os.PathLike)):
            logs = [logs]
        for item in logs:
            if isinstance(item, rec.Record):
                self.records.append(item)
            else:
                self.paths.append(os.fspath(item))
                records, set_aside = rec.load_log(item)
                self.records.extend(records)
                self.report.set_aside.update(set_aside)
        # Records of templates this version does not have (e.g. dense_nopack.x86 from an old
        # AutoTVM log) cannot be replayed; they are set aside and counted, not fatal.
        known = {t.name for t in all_templates()}
        self.report.set_aside.update(f"{r.task_name} (no such template)" for r in self.records
                                     if r.task_name not in known)
        self.records = [r for r in self.records if r.task_name in known]
        self._token = None

    def query(self, workload: Workload, target) -> List[rec.Record]:
        """The valid records for this workload whose target applies, best first (see
        ``record.ranked_for``: the target's own machine first)."""
        return rec.ranked_for(self.records, workload, target)

    def __enter__(self):
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc):
        _CURRENT.reset(self._token)
        if self.report.choices or self.report.set_aside or self.report.families:
            logger.info(self.report.summary())


def apply_history_best(logs) -> ApplyHistoryBest:
    return ApplyHistoryBest(logs)


def current() -> Optional[ApplyHistoryBest]:
    return _CURRENT.get()


class Kernel:
    """A compiled kernel and how it was chosen. ``kernel(a, b, c)`` runs it on TVM tensors;
    ``kernel.run(a_np, b_np)`` takes and returns numpy arrays."""

    def __init__(self, task: Task, choice: Choice, executable):
        self.task, self.choice, self.executable = task, choice, executable
        # CPU kernels run on every core this process may use (see codegen.use_host_cores).
        self.threads = use_host_cores() if task.target.kind.name == "llvm" else None

    @property
    def module(self):
        return self.executable.mod

    @property
    def device(self):
        import tvm  # noqa: PLC0415
        return tvm.cuda(0) if self.task.target.kind.name == "cuda" else tvm.cpu(0)

    @functools.cached_property
    def function(self):
        """The kernel's entry, looked up once: a lookup by name (``module["main"]``) is an FFI
        call of microseconds, which every call of a sub-millisecond kernel would pay."""
        return self.module["main"]

    def __call__(self, *tensors):
        self.function(*tensors)

    def run(self, a: np.ndarray, b: np.ndarray, *extras: np.ndarray) -> np.ndarray:
        """The output for A, B (and a subgraph task's epilogue inputs: bias, residual)."""
        dev = self.device
        wl = self.task.workload
        out = host_empty(wl.out_shape, wl.final_dtype, dev)
        self(*(host_tensor(x, dev) for x in (a, b, *extras)), out)
        return out.numpy()

    def time(self, a: np.ndarray, b: np.ndarray, *extras: np.ndarray, number=10,
             repeat=5) -> float:
        """Median seconds per run."""
        dev = self.device
        wl = self.task.workload
        args = (*(host_tensor(x, dev) for x in (a, b, *extras)),
                host_empty(wl.out_shape, wl.final_dtype, dev))
        timer = self.module.time_evaluator("main", dev, number=number, repeat=repeat)
        return float(np.median(timer(*args).results))


class NotApplied(Exception):
    """``record_config``: why a record does not apply (the text that follows its label)."""


def record_config(best: rec.Record, workload: Workload, target, *, schedulable: bool = False,
                  followed: bool = False):
    """(task, RecordFit, legacy meaning) of a record applied to ``workload`` on ``target``: its
    template's task (``followed``: that of a fused function, as ``choose``), its knobs as they
    meant in the TVM version that wrote it, completed and checked against the space's rules;
    ``NotApplied`` with the reason where it does not apply."""
    try:
        task = Task(workload, target, template=best.task_name, followed=followed)
    except TvmExtError as err:  # e.g. a record of a template that takes no epilogue
        raise NotApplied(f": {err}") from None
    if schedulable and not task.template.schedulable:
        raise NotApplied(f": {task.name} writes its own kernel, which a fused Relax function "
                         "cannot take (it gets a template with a schedule)")
    try:  # what the record's knobs meant in the TVM version that wrote it
        meaning = legacy.translate(best, task.space)
    except SpaceError as err:  # no space of this template for the shape
        raise NotApplied(f": {err}") from None
    if not meaning.applies:
        raise NotApplied(f" (TVM {best.tvm_version or 'unknown'}): {meaning.reason}")
    config = best.config if meaning.values is None else \
        task.space.config_from_values(meaning.values, fallback=False)
    fit = task.fit_record(config)
    if fit.problems:
        raise NotApplied(f": {'; '.join(fit.problems)}")
    return task, fit, meaning


def choose(workload: Workload, target, *, schedulable: bool = False,
           followed: bool = False, template: Optional[str] = None) -> tuple:
    """(Task, Choice) for a workload: the best applicable record of the current context,
    else the fallback config of the highest-priority template. ``schedulable``: only templates
    with a TensorIR schedule (a Relax function with a fused epilogue needs one). ``followed``:
    the kernel is a fused Relax function whose matmul is followed by ops the workload does not
    name (an epilogue no workload takes, served by its anchor's records): its tasks' spaces see
    it (``Task(followed=True)``), so that a record or a fallback that needs nothing after the
    matmul (``nt_store`` = 1) breaks a rule of the space and is passed over or not chosen.
    ``template``: only that template's records, else its fallback (a Relax matmul whose
    constant weight is prepacked takes dense_pack.x86's).

    A record applies only as measured: each of its knobs a value of this target's space, and
    the config within the space's rules; otherwise it is passed over and listed in the
    report's ``skipped`` with the reason. A record that lacks a knob no space-file default
    explains is completed from the fallback and ranks after every fully measured record."""
    target = parse_target(target)
    ctx = current()
    choice = completed = None
    # A subgraph task (a matmul with an epilogue) takes the records of its own subgraph first,
    # then those of its anchor matmul (measured without the epilogue: marked as such).
    candidates = [(r, False) for r in (ctx.query(workload, target) if ctx else [])]
    mine = target_machine(target)  # a record of another machine is named in the report
    if workload.epilogue and ctx is not None:
        candidates += [(r, True) for r in ctx.query(workload.anchor, target)]
    if template is not None:
        candidates = [(r, anchor) for r, anchor in candidates if r.task_name == template]
    for best, anchor in candidates:
        label = f"{workload}: {best.task_name} record " \
                f"{'of the anchor matmul ' if anchor else ''}tuned on {describe(best.target)}"
        try:
            task, fit, meaning = record_config(best, workload, target, schedulable=schedulable,
                                               followed=followed)
        except NotApplied as why:
            ctx.report.skipped.append(f"{label}{why}")
            continue
        machine = target_machine(best.target)
        found = (task, Choice(workload, task.name, fit.config, True, best.result.mean,
                              fit.completed, meaning.reason if meaning.values else "", anchor,
                              machine if machine and mine and machine != mine else ""))
        if not fit.completed:
            task, choice = found
            break
        completed = completed or found
    if choice is None and completed is not None:
        task, choice = completed
    if choice is None:
        task = Task(workload, target, followed=followed, template=template or templates_for(
            workload, target, schedulable=schedulable)[0].name)
        choice = Choice(workload, task.name, task.fallback_config(), False)
    if ctx is not None:
        ctx.report.choices.append(choice)
    return task, choice


def applied_table(records: Sequence[rec.Record], target=None) -> List[str]:
    """What ``build`` would apply for each workload of ``records``, one line each (on
    ``target``, else on each record's own target), then a line per record passed over: the
    ``--best`` listing, which therefore never shows a record that build would not use."""
    lines: List[str] = []
    with ApplyHistoryBest(list(records)) as ctx:
        done = set()
        for r in sorted(ctx.records, key=lambda r: (str(r.key()), r.result.mean)):
            on = target if target is not None else r.target
            key = (describe(on), r.key())
            if key in done or not r.result.ok:
                continue
            done.add(key)
            try:
                task, choice = choose(r.workload, parse_target(on))
            except TvmExtError as err:
                lines.append(f"{r.workload}  [{describe(on)}]  not applicable here: {err}")
                continue
            cfg = " ".join(f"{k}={v!r}" for k, v in choice.config.items())
            if choice.tuned:
                gf = r.workload.flop / choice.record_cost / 1e9
                lines.append(f"{r.workload}  [{describe(on)}]  {choice.template}  "
                             f"{choice.record_cost * 1e3:.4f} ms  {gf:.1f} GFLOP/s  {cfg}"
                             + (f"  ({choice.how.split(', ', 1)[1]})" if ", " in choice.how
                                else ""))
            else:
                lines.append(f"{r.workload}  [{describe(on)}]  no record applies: "
                             f"{choice.template} fallback")
        lines += [f"passed over: {line}" for line in ctx.report.skipped]
        lines += [f"set aside: {n} records: {why}" for why, n in
                  sorted(ctx.report.set_aside.items())]
    return lines


def build(workload: Workload, target=None) -> Kernel:
    """Compile a workload with its best known config (see ``apply_history_best``)."""
    task, choice = choose(workload, target)
    return Kernel(task, choice, task.build(choice.config))


__all__ = ["ApplyHistoryBest", "ApplyReport", "Choice", "Kernel", "apply_history_best", "build",
           "choose", "current"]
