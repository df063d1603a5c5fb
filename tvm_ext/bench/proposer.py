"""How well the proposer ranks, measured: ``python -m tvm_ext.bench.proposer``.

For each workload of the CPU suite (the host CPU, the template the strategy picks), or with
``--target cuda`` of the GPU suite (on a GPU: parallel nvcc builds, CUDA-graph timing as the
tuner measures; ``--log``: top-k's best and the shipped record measured again in turn, 3
rounds, and compared):

1. ``--configs`` valid configs drawn at random (seeded) are measured in this process; the
   proposer's estimate of each is compared with its time by rank correlation (Spearman);
2. ``--tuner topk`` is run from scratch with K = ``--k``: its wall time (ranking, builds and
   runs included) and its best time, against the best of the random configs of step 1.

    python -m tvm_ext.bench.proposer --configs 200 --k 20 --json proposer.json
    python -m tvm_ext.bench.proposer --target cuda --configs 64 --log logs/cuda_sm90.json
    python -m tvm_ext.bench.proposer --configs 0 --k 20 --xgb 256   # top-k against XGB
    python -m tvm_ext.bench.proposer --target cuda --rescore p.json   # a --json run, re-ranked

``--compile K`` (no GPU needed) instead ranks the spaces of every template that serves each
workload and builds the top K of each with nvcc (``--target``'s arch), the kernels a top-K run
would measure: how many compile, and how long the ranking takes.
"""
from __future__ import annotations

import argparse
import json
import logging
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


def run(suite, *, configs: int, k: int, seed: int = 0, target=None, log=None,
        json_path=None, xgb: int = 0) -> List[Dict]:
    """Per workload: ``configs`` random valid configs measured and ranked by the proposer
    (0: none, no rank correlation), then top-``k``, then (``xgb`` > 0) an XGB run of that many
    trials from scratch, whose best top-k's is compared with; ``json_path`` is rewritten after
    each workload (a cut run keeps its rows)."""
    import os  # noqa: PLC0415

    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..measure import LocalMeasurer, MeasureOptions, RunOptions  # noqa: PLC0415
    from ..propose import estimate  # noqa: PLC0415
    from ..session import make_measurer, tune_task  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    threads = use_host_cores()
    target = target or host_cpu_target()
    cuda = target.kind.name == "cuda"
    if cuda:  # as `python -m tvm_ext.tune` measures on a GPU: parallel builds, graph timing
        start = time.time()
        measurer = make_measurer(target, MeasureOptions(n_parallel=os.cpu_count()))
        # Once a process, not a workload's: said apart.
        measurer.warm(target, intrinsics=True, wait=True)
        print(f"measurer's processes started and the tensor-core intrinsics registered in "
              f"{time.time() - start:.1f} s (once; not in the rows' top-k times)", flush=True)
    else:
        measurer = LocalMeasurer(RunOptions(number=1, repeat=2, min_repeat_ms=20))
    rows = []
    try:
        for name, wl in suite.items():
            task = Task(wl, target)
            picks = task.space.random_valid(np.random.default_rng(seed), configs)
            est, real, points = [], [], []
            for at in range(0, len(picks), 32):
                cfgs = [task.config(i) for i in picks[at:at + 32]]
                for cfg, res in zip(cfgs, measurer.measure(task, cfgs)):
                    if res.ok:
                        est.append(estimate(task.space, cfg))
                        real.append(res.mean)
                        # Each point, so that a model can be fitted to them later (offline).
                        points.append({"index": cfg.index, "estimate": est[-1],
                                       "ms": res.mean * 1e3})
            start = time.time()
            seen = []
            summary = tune_task(Task(wl, target), None, trials=k, tuner="topk",
                                measurer=measurer, batch_size=k,
                                callbacks=[lambda _t, c, r: seen.extend(zip(c, r))])
            wall = time.time() - start
            row = {"workload": name, "shape": str(wl), "template": task.name,
                   "threads": threads, "configs": len(real),
                   "spearman": spearman(est, real) if len(real) > 2 else None,
                   "random_best_ms": min(real) * 1e3 if real else None,
                   "topk_best_ms": summary.best_cost * 1e3,
                   "topk_wall_s": wall, "k": k, "points": points,
                   "topk": [{"index": c.index, "ms": r.mean * 1e3 if r.ok else None}
                            for c, r in seen]}
            row["topk_vs_random_best"] = row["random_best_ms"] / row["topk_best_ms"] \
                if real else None
            versus = ""
            if xgb:
                start = time.time()
                ref = tune_task(Task(wl, target), None, trials=xgb, tuner="xgb",
                                measurer=measurer, seed=seed)
                row.update(xgb_trials=xgb, xgb_best_ms=ref.best_cost * 1e3,
                           xgb_wall_s=time.time() - start)
                # top-k's speed as a share of XGB's best (goal: at least 0.95)
                row["topk_vs_xgb"] = row["xgb_best_ms"] / row["topk_best_ms"]
                versus = (f"; {row['topk_vs_xgb']:.2f}x the speed of {xgb}-trial XGB's best "
                          f"({row['xgb_best_ms']:.3f} ms, {row['xgb_wall_s']:.0f} s)")
            shipped = ""
            if log:
                with apply_history_best([log]):
                    _, choice = choose(wl, target)
                ok = [(r.mean, c) for c, r in seen if r.ok]
                if choice.tuned and choice.template == task.name and ok:
                    again = in_turn(measurer, task, [min(ok, key=lambda x: x[0])[1],
                                                     choice.config])
                    if all(again):
                        row["topk_again_ms"], row["shipped_ms"] = (t * 1e3 for t in again)
                        row["topk_vs_shipped"] = row["shipped_ms"] / row["topk_again_ms"]
                        shipped = (f", {row['topk_vs_shipped']:.2f}x the shipped record (both "
                                   f"re-measured in turn: {row['topk_again_ms']:.4f} and "
                                   f"{row['shipped_ms']:.4f} ms)")
            rows.append(row)
            if json_path:
                with open(json_path, "w") as f:
                    json.dump(rows, f, indent=1)
            against = (f"Spearman {row['spearman']:5.2f} over {len(real)}  "
                       if row["spearman"] is not None else "")
            random_best = (f", {row['topk_vs_random_best']:.2f}x the best of {len(real)} random "
                           f"({row['random_best_ms']:.3f} ms)" if real else "")
            print(f"{name:<10} {str(wl):<34} {task.name:<17} {against}top-{k}: "
                  f"{row['topk_best_ms']:.3f} ms in {wall:.1f} s{random_best}{shipped}{versus}",
                  flush=True)
    finally:
        if hasattr(measurer, "close"):
            measurer.close()
    return rows


def rescore(rows, suite, target, k: int) -> List[Dict]:
    """The current model on the points a run measured (``--json``'s rows, ``--rescore``): its
    rank correlation with their times (and the recorded model's), and the best time among its
    ``k`` first against the best of all. Nothing measured: a model change judged on data
    (points are config indices: the same space files)."""
    from ..propose import estimate  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    out = []
    for row in rows:
        points = row.get("points") or []
        if row["workload"] not in suite or len(points) < 3:
            continue
        task = Task(suite[row["workload"]], target, template=row["template"])
        ms = [p["ms"] for p in points]
        est = [estimate(task.space, task.config(p["index"])) for p in points]
        first = sorted(range(len(est)), key=est.__getitem__)[:k]
        r = {"workload": row["workload"], "spearman": spearman(est, ms),
             "recorded": spearman([p["estimate"] for p in points], ms),
             "top_vs_best": min(ms) / min(ms[i] for i in first)}
        print(f"{r['workload']:<12} Spearman {r['spearman']:5.2f} (recorded model "
              f"{r['recorded']:5.2f}) over {len(ms)}; the best of its first {k}: "
              f"{r['top_vs_best']:.2f}x the speed of the best", flush=True)
        out.append(r)
    return out


def in_turn(measurer, task, configs, rounds: int = 3) -> List:
    """The best of ``rounds`` times of each config, measured in turn (one batch of all of them
    a round): the same clock and temperature for each, and as many samples for each. Comparing
    top-k's best as the tuner measured it (the least of 20 noisy times) with one later time of
    the record put two rows of the H100 run at 0.92x and 0.94x and, the same configs in the
    next process, at 1.00x and 0.97x. None for a config that failed every round."""
    best: List = [None] * len(configs)
    for _ in range(rounds):
        for k, res in enumerate(measurer.measure(task, configs)):
            if res.ok:
                best[k] = res.mean if best[k] is None else min(best[k], res.mean)
    return best


def _compile(task, config) -> None:
    """Build a config; on CUDA also run nvcc and ptxas on its source for the arch its kernel
    carries (wgmma kernels carry sm_90a), as loading it on a GPU would: TVM compiles CUDA
    source when a module is loaded, so a build alone never meets ptxas's limits."""
    mod = task.instantiate(config)
    exe = task.compile(mod)
    if task.target.kind.name != "cuda":
        return
    from tvm.support import nvcc  # noqa: PLC0415
    own = mod["main"].attrs.get("target") if mod["main"].attrs else None
    arch = str((own or task.target).attrs["arch"])
    with task.target:
        nvcc.compile_cuda(exe.mod.imports[0].inspect_source(), target_format="cubin",
                          arch=arch, compiler="nvcc")


def compile_top(suite, *, k: int, target) -> List[Dict]:
    """Per workload and template that serves it: the proposer's top ``k`` (ranking time) and
    how many of them build (on CUDA: nvcc and ptxas for the target's arch)."""
    from ..propose import estimate, propose  # noqa: PLC0415
    from ..strategy import templates_for  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    rows = []
    for name, wl in suite.items():
        for template in templates_for(wl, target):
            task = Task(wl, target, template=template.name)
            start = time.time()
            top = propose(task.space, k)
            rank_s = time.time() - start
            failed = []
            start = time.time()
            for i in top:
                try:
                    _compile(task, task.config(i))
                except Exception as err:  # noqa: BLE001 (any failed build is counted)
                    failed.append(f"{i}: {str(err).splitlines()[0][:120]}")
            row = {"workload": name, "template": template.name, "space": len(task.space),
                   "k": len(top), "compiled": len(top) - len(failed), "rank_s": rank_s,
                   "build_s": time.time() - start, "failed": failed,
                   "top3_estimate_us": [estimate(task.space, task.config(i)) * 1e6
                                        for i in top[:3]]}
            rows.append(row)
            print(f"{name:<14} {template.name:<26} space {row['space']:>9}  ranked in "
                  f"{rank_s:4.1f} s  top-{row['k']} compiled {row['compiled']}/{row['k']} "
                  f"({row['build_s']:.0f} s)", flush=True)
            for line in failed:
                print(f"    failed {line}")
    return rows


def main(argv=None) -> int:
    from ..target import host_cpu_target, parse_target  # noqa: PLC0415
    from .cpu import CPU_QUICK, CPU_SUITE  # noqa: PLC0415
    from .gpu import GPU_SUITE  # noqa: PLC0415
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.proposer",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=int, default=200, help="random configs measured per "
                                                             "workload (default 200)")
    p.add_argument("--k", type=int, default=20, help="configs top-k measures (default 20)")
    p.add_argument("--only", nargs="*", help="only these workloads of the suite (by key)")
    p.add_argument("--quick", action="store_true", help="the tiny shapes (a smoke run)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.add_argument("--seed", type=int, default=0, help="seed of the random configs (another "
                                                       "seed: points a model was not fitted to)")
    p.add_argument("--target", help="cuda: the GPU suite (default: the host CPU's suite)")
    p.add_argument("--log", help="a shipped log: its record per workload and top-k's best "
                                 "are measured again in turn (3 rounds) and compared")
    p.add_argument("--xgb", type=int, default=0, metavar="N",
                   help="also tune each workload with N XGB trials (a fresh log; XGB's first "
                        "plan is the proposer's top-k, so it ends no slower than top-k) and "
                        "compare top-k's best with its best (issue 21: N = 256)")
    p.add_argument("--compile", type=int, metavar="K",
                   help="no measuring: build the proposer's top K of every template per "
                        "workload (with --target cuda: nvcc, no GPU needed)")
    p.add_argument("--trace", metavar="FILE",
                   help="write tvm_ext's debug log to FILE: the build and run seconds of each "
                        "batch of the pool measurer (the GPU suite's), and each config's load, "
                        "device wait and run seconds")
    p.add_argument("--rescore", metavar="FILE", help="no measuring: the current model on "
                   "the points of an earlier --json run (with its --target)")
    args = p.parse_args(argv)
    if args.trace:
        handler = logging.FileHandler(args.trace, mode="w")
        handler.setFormatter(logging.Formatter("%(relativeCreated)d ms %(message)s"))
        log = logging.getLogger("tvm_ext")
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
    target = parse_target(args.target) if args.target else None
    cuda = target is not None and target.kind.name == "cuda"
    suite = GPU_SUITE if cuda else CPU_QUICK if args.quick else CPU_SUITE
    unknown = set(args.only or ()) - set(suite)
    if unknown:
        p.error(f"--only: no workload {', '.join(sorted(unknown))} in the suite "
                f"(known: {', '.join(suite)})")
    suite = {k: v for k, v in suite.items() if not args.only or k in args.only}
    if args.rescore:
        with open(args.rescore) as f:
            rescore(json.load(f), suite, target or host_cpu_target(), args.k)
        return 0
    if args.compile:
        rows = compile_top(suite, k=args.compile, target=target or host_cpu_target())
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0 if all(r["compiled"] == r["k"] for r in rows) else 1
    run(suite, configs=args.configs, k=args.k, seed=args.seed, target=target, log=args.log,
        json_path=args.json, xgb=args.xgb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
