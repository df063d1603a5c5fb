"""How well the proposer ranks, measured: ``python -m tvm_ext.bench.proposer``.

For each workload of the CPU suite (the host CPU, the template the strategy picks):

1. ``--configs`` valid configs drawn at random (seeded) are measured in this process; the
   proposer's estimate of each is compared with its time by rank correlation (Spearman);
2. ``--tuner topk`` is run from scratch with K = ``--k``: its wall time (ranking, builds and
   runs included) and its best time, against the best of the random configs of step 1.

    python -m tvm_ext.bench.proposer --configs 200 --k 20 --json proposer.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Dict, List

import numpy as np


def _ranks(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    r = np.empty(len(x))
    r[np.argsort(x, kind="stable")] = np.arange(len(x))
    return r


def spearman(a, b) -> float:
    """Rank correlation of two sequences (ties broken by order)."""
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def run(suite, *, configs: int, k: int, seed: int = 0) -> List[Dict]:
    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..measure import LocalMeasurer, RunOptions  # noqa: PLC0415
    from ..propose import estimate  # noqa: PLC0415
    from ..session import tune_task  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    threads = use_host_cores()
    target = host_cpu_target()
    measurer = LocalMeasurer(RunOptions(number=1, repeat=2, min_repeat_ms=20))
    rows = []
    for name, wl in suite.items():
        task = Task(wl, target)
        picks = task.space.random_valid(np.random.default_rng(seed), configs)
        est, real = [], []
        for i in picks:
            res = measurer.measure_one(task, task.config(i))
            if res.ok:
                est.append(estimate(task.space, task.config(i)))
                real.append(res.mean)
        start = time.time()
        summary = tune_task(Task(wl, target), None, trials=k, tuner="topk",
                            measurer=measurer, batch_size=k)
        wall = time.time() - start
        row = {"workload": name, "shape": str(wl), "template": task.name, "threads": threads,
               "configs": len(real), "spearman": spearman(est, real),
               "random_best_ms": min(real) * 1e3, "topk_best_ms": summary.best_cost * 1e3,
               "topk_wall_s": wall, "k": k}
        row["topk_vs_random_best"] = row["random_best_ms"] / row["topk_best_ms"]
        rows.append(row)
        print(f"{name:<10} {str(wl):<34} {task.name:<17} Spearman {row['spearman']:5.2f} "
              f"over {len(real)}  top-{k}: {row['topk_best_ms']:.3f} ms in {wall:.1f} s, "
              f"{row['topk_vs_random_best']:.2f}x the best of {len(real)} random "
              f"({row['random_best_ms']:.3f} ms)", flush=True)
    return rows


def main(argv=None) -> int:
    from .cpu import CPU_QUICK, CPU_SUITE  # noqa: PLC0415
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.proposer",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=int, default=200, help="random configs measured per "
                                                             "workload (default 200)")
    p.add_argument("--k", type=int, default=20, help="configs top-k measures (default 20)")
    p.add_argument("--only", nargs="*", help="only these workloads of the suite (by key)")
    p.add_argument("--quick", action="store_true", help="the tiny shapes (a smoke run)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    args = p.parse_args(argv)
    suite = CPU_QUICK if args.quick else CPU_SUITE
    suite = {k: v for k, v in suite.items() if not args.only or k in args.only}
    rows = run(suite, configs=args.configs, k=args.k)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
