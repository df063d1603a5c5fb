"""What tuning costs: per workload, XGB from scratch (a fresh log, no transfer) on the template of
the shipped best record, until a config reaches ``fraction`` of that record's speed."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import List, Optional


@dataclass
class CostRow:
    """Trials and wall time the XGB tuner took from scratch to reach 90% of a shipped record."""
    name: str
    template: str
    shipped_ms: float
    trials: int
    wall_s: float
    best_ms: float
    reached_trial: Optional[int] = None
    reached_s: Optional[float] = None


class _Reach:
    """A tuning callback: the trial number and the seconds since ``start`` at which a measured
    cost first fell to ``goal`` (seconds) or below."""

    def __init__(self, goal: float):
        self.goal, self.trials, self.start = goal, 0, time.time()
        self.at = None

    def __call__(self, task, configs, results):
        for res in results:
            self.trials += 1
            if self.at is None and res.ok and res.mean <= self.goal:
                self.at = (self.trials, time.time() - self.start)


def run_tuning_cost(suite, target, *, log: str, trials: int, seed: int = 0,
                    fraction: float = 0.9) -> List[CostRow]:
    """XGB from scratch per workload until ``fraction`` of the shipped best record's speed."""
    import tempfile  # noqa: PLC0415

    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..measure import MeasureOptions  # noqa: PLC0415
    from ..session import make_measurer, prepare, tune_task  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    cuda = target.kind.name == "cuda"
    # As `python -m tvm_ext.tune` measures by default: parallel builds and (make_measurer's
    # choice for CUDA) 4 loaders per GPU; on the CPU in-process, as the builds are short and a
    # pool would compete with the timed runs for the cores. One measurer for all workloads, so
    # its processes start once.
    measurer = make_measurer(target, MeasureOptions(local=not cuda, n_parallel=os.cpu_count()))
    rows = []
    try:
        for name, wl in suite.items():
            with apply_history_best([log]):
                _, shipped = choose(wl, target)
            if not shipped.tuned:
                print(f"  {name}: no record in {log}: skipped", flush=True)
                continue
            task = Task(wl, target, template=shipped.template)
            # The tuner is made before the clock starts: its start-up is not tuning cost.
            prepared = prepare(task, tuner="xgb", seed=seed)
            goal = shipped.record_cost / fraction
            with tempfile.TemporaryDirectory() as tmp:
                reach = _Reach(goal)
                s = tune_task(task, os.path.join(tmp, "scratch.json"), trials=trials,
                              tuner=prepared, measurer=measurer, batch_size=16 if cuda else 8,
                              stop_at_cost=goal, callbacks=[reach])
            row = CostRow(name, shipped.template, shipped.record_cost * 1e3, s.trials,
                          s.elapsed, s.best_cost * 1e3, *(reach.at or (None, None)))
            rows.append(row)
            print(f"  {name}: {s.trials} trials in {s.elapsed:.0f} s, best {row.best_ms:.4g} ms"
                  f" vs shipped {row.shipped_ms:.4g} ms: " +
                  (f"{fraction:.0%} at trial {row.reached_trial} ({row.reached_s:.0f} s)"
                   if reach.at else f"{fraction:.0%} not reached"), flush=True)
    finally:
        if hasattr(measurer, "close"):
            measurer.close()
    return rows


def print_cost_table(rows: List[CostRow], *, trials: int):
    print(f"{'workload':<16} {'template':<24} {'shipped ms':>11} {'best ms':>10} "
          f"{'trials':>7} {'wall s':>7}  90% of shipped reached at")
    for r in rows:
        at = f"trial {r.reached_trial}, {r.reached_s:.0f} s" if r.reached_trial else \
            f"not within {trials} trials"
        print(f"{r.name:<16} {r.template:<24} {r.shipped_ms:>11.4g} {r.best_ms:>10.4g} "
              f"{r.trials:>7} {r.wall_s:>7.0f}  {at}")
