"""The tuner comparison: best GFLOP/s against trials for random, GA, XGB from a random first plan
(AutoTVM's), XGB from the proposer's first plan (tvm_ext's default), XGB with transfer and top-k
(the proposer's ranking measured in order), replayed from a full measurement of the
batch_matmul.x86 space of TUNER_WORKLOAD (each tuner sees real costs; many seeds are cheap)."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..errors import TvmExtError
from ..workload import Workload

TUNER_WORKLOAD = Workload.create("batch_matmul", (4, 256, 256, 256))
TUNER_CHECKPOINTS = (8, 16, 32, 64, 128, 256)


def run_tuners(space_log: str, *, transfer_logs: Sequence[str] = (), seeds=(0, 1, 2),
               budget: int = 64, random_budget: int = 256, plot: Optional[str] = None):
    """Each tuner's best-so-far curve per seed ({label: [history per seed]}), tuned through
    ``session.tune_task`` against a ReplayMeasurer of ``space_log``; prints the table at
    TUNER_CHECKPOINTS and, with ``plot``, draws the curves."""
    from .. import record  # noqa: PLC0415
    from ..measure.replay import ReplayMeasurer  # noqa: PLC0415
    from ..session import tune_task  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    task = Task(TUNER_WORKLOAD, host_cpu_target())
    replay = ReplayMeasurer(space_log)
    measured = [r for r in replay.records if r.key() == TUNER_WORKLOAD.key() and r.result.ok]
    valid = sum(1 for _ in task.space.valid_indices())
    if len(measured) < valid:
        raise TvmExtError(f"{space_log} holds {len(measured)} of the {valid} valid configs of "
                          f"{TUNER_WORKLOAD}: measure the whole space first (--tuner grid)")
    optimum = max(TUNER_WORKLOAD.flop / r.result.mean / 1e9 for r in measured)
    # All transfer logs as one record list: one warm start, normalised per workload, as the
    # curves were drawn; loaded once, not once per seed.
    transfer = [[r for p in transfer_logs for r in record.load(p)]]
    curves = {}
    from ..tuner import make_tuner  # noqa: PLC0415
    for label, tuner, trials, use_transfer in (("random", "random", random_budget, False),
                                               ("ga", "ga", budget, False),
                                               ("xgb-random-start", "xgb0", budget, False),
                                               ("xgb", "xgb", budget, False),
                                               ("xgb+transfer", "xgb", budget, True),
                                               ("topk", "topk", budget, False)):
        curves[label] = []
        for seed in seeds:
            # AutoTVM's start (a random first plan) is an option of our XGB tuner.
            t = make_tuner("xgb", task.space, seed=seed, seed_with_proposer=False) \
                if tuner == "xgb0" else tuner
            # No log (the costs are replayed), the replay measurer given: nothing to close.
            s = tune_task(task, None, trials=trials, tuner=t, seed=seed,
                          transfer=transfer if use_transfer else (), measurer=replay,
                          batch_size=8)
            curves[label].append(s.history)
    print(f"tuners on {TUNER_WORKLOAD} ({valid} valid configs, space optimum "
          f"{optimum:.1f} GFLOP/s), replayed from {space_log}; seeds {list(seeds)}")
    print(f"{'tuner':<14}" + "".join(f"{'@' + str(c):>16}" for c in TUNER_CHECKPOINTS))
    for label, hs in curves.items():
        cells = []
        for c in TUNER_CHECKPOINTS:
            vals = [h[c - 1] for h in hs if len(h) >= c]
            cells.append(f"{np.mean(vals):6.1f} ({min(vals):.0f}-{max(vals):.0f})" if vals
                         else "-")
        print(f"{label:<14}" + "".join(f"{x:>16}" for x in cells))
    rnd256 = [h[min(len(h), random_budget) - 1] for h in curves["random"]]
    for label in ("xgb", "xgb-random-start", "xgb+transfer", "ga", "topk"):
        at = [h[min(len(h), budget) - 1] for h in curves[label]]
        print(f"{label} best after {budget} trials / random's best after {random_budget}: "
              + ", ".join(f"{a / r:.3f}" for a, r in zip(at, rnd256)) + " (per seed)")
    if plot:
        from .plot import plot_tuners  # noqa: PLC0415
        plot_tuners(curves, optimum=optimum, path=plot, workload=TUNER_WORKLOAD)
    return curves
