"""``python -m tvm_ext.rerank``: every config that logs hold for one workload on this machine,
measured again side by side in one process, the new times appended to a log.

    python -m tvm_ext.rerank --log logs/cuda_sm90.json --op dense --shape 8192x8192x8192 \\
        --dtype float16 --out-dtype float16 --layout NT [--rounds 9] [--out LOG] [--top N]
        [--fallback]

A tuner times each config alone, right after its build, and a log's records of one workload
come from several tuning runs, days apart. On a GPU that runs near its power limit the times
then move with the card's clock more than with the config: one grid of six 8192^3 f16 configs
on an H100 recorded 1.43-1.84 ms, and the shipped record of 1.475 ms ran at 0.99x of cuBLAS in
the bench's process, where the template's fallback, one knob away, ran at 1.06x on the bf16
twin (the same kernel) (docs/BENCHMARKS.md, "re-ranking"). Here every config is built, checked
against numpy, and then all of them are sampled in turn (``--rounds`` rounds, after
``--warmup`` seconds of all of them running in turn), so each time is taken at the same clock
and temperature as the others. The new records carry those times; a config measured again ranks
by its latest measurement (``record.latest_measurements``), so the workload's best is the best
of this comparison. Records of another machine, and records that no longer apply, are left as
they are. ``--fallback`` adds the template's fallback to the comparison (a record then, which
``build`` applies where no tuned config beats it here); ``python -m tvm_ext.tune`` ends each
run for one shape with its 3 best configs and the fallback so compared (``confirm``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from .errors import TvmExtError

PROG = "tvm_ext.rerank"


def _contenders(workload, target, logs: Sequence[str], *, quiet: bool = False):
    """[(task, config, record)] of the distinct configs the logs hold for ``workload`` that
    were measured on ``target``'s machine and apply today (``dispatch.record_config``), best
    first (each by its latest measurement)."""
    from . import record as rec  # noqa: PLC0415
    from .dispatch import NotApplied, record_config  # noqa: PLC0415
    from .target import target_machine  # noqa: PLC0415
    records = [r for log in logs for r in rec.load(log)]
    machine = target_machine(target)
    out, seen = [], set()
    for r in rec.ranked_for(records, workload, target):
        if target_machine(r.target) != machine:
            continue
        try:
            task, fit, _ = record_config(r, workload, target)
        except NotApplied as why:
            if not quiet:
                print(f"  left as it is: {r.task_name} {r.config}{why}", flush=True)
            continue
        key = rec.config_identity(task.name, fit.config.values_dict())
        if key not in seen:
            seen.add(key)
            out.append((task, fit.config, r))
    return out


def _sampler(task, config, data, timing: str):
    """A function returning one time (seconds a call) of the built config on ``data``'s
    arguments, after one checked run; or a string saying why it cannot be timed."""
    from .measure.timing import GraphSampler, resolve  # noqa: PLC0415
    mod = task.build(config).mod
    data.reset()
    mod["main"](*data.args)
    data.dev.sync()
    problem = data.problem()
    if problem:
        return f"wrong answer: {problem}"
    func, args = mod["main"], tuple(data.args)
    if resolve(timing, data.dev) == "graph":
        # a graph for each sample, freed after it: one graph alive at a time (23 graphs of
        # 1000 launches of the 512x16x512 int8 kernels alive at once crashed cuGraphLaunch)
        return lambda: GraphSampler(lambda: func(*args), replay_ms=5.0).sample()
    timer = mod.time_evaluator("main", data.dev, number=1, repeat=1, min_repeat_ms=50)
    return lambda: timer(*args).results[0]


#: Comparisons of ``rerank(top=N)`` at most: the configs left out whose older times beat the
#: best time of a comparison join the next one, the 2N best of them (a first comparison timed
#: slow by a busy host once brought 20 of a 32-trial run in at once: 24 configs in turn, 20 s
#: on a 2-core Zen 3, and minutes where each build goes through nvcc).
TOP_ROUNDS = 3


def rerank(workload, target, logs: Sequence[str], *, rounds: int = 9, warmup: float = 1.0,
           timing: str = "auto", out: Optional[str] = None, top: Optional[int] = None,
           fallback: bool = False) -> List[tuple]:
    """Measure the logs' configs of ``workload`` on this machine in turn (see the module doc)
    and append one record per config to ``out`` (default: the first log). Every config; or
    the ``top`` best, and then the configs left out whose older times still beat the best
    time of that comparison (2 x ``top`` of them at a time), all of them measured in turn
    again (``TOP_ROUNDS`` comparisons at most: a time taken another way, as the tuner's in its
    own process, is no match for this comparison's, and the workload's best must come from
    it). ``fallback``: the fallback of
    the best config's template too, where the logs do not hold it (then a record, which
    ``build`` applies where no tuned config beats it). Returns [(task, config, old record or
    None for the fallback, new costs or the reason it was not timed)] of the last
    comparison, fastest first (by the mean, as the records rank)."""
    from . import record as rec  # noqa: PLC0415
    _check_rounds(rounds, warmup)
    contenders = _contenders(workload, target, logs)
    if not contenders:
        raise TvmExtError(f"no record in {', '.join(map(str, logs))} applies to {workload} "
                          f"on this machine: nothing to re-rank")

    def identity(task, config):
        return rec.config_identity(task.name, config.values_dict())
    chosen = contenders if top is None else contenders[:top]
    if fallback:
        task = contenders[0][0]
        config = task.fallback_config()
        if identity(task, config) not in {identity(t, c) for t, c, _ in chosen}:
            chosen.append((task, config, None))
    out = Path(out or logs[0])
    sources = list(logs) + ([out] if str(out) not in map(str, logs) else [])
    built: dict = {}  # identity -> (sampler or why not, build seconds): one build each
    for _ in range(1 if top is None else TOP_ROUNDS):
        results = _in_turn(chosen, workload, rounds=rounds, warmup=warmup, timing=timing,
                           out=out, built=built)
        times = [np.mean(r[3]) for r in results if isinstance(r[3], list)]
        if top is None or not times:
            break
        ids = {identity(t, c) for t, c, _ in chosen}
        ahead = [c for c in _contenders(workload, target, sources, quiet=True)
                 if identity(c[0], c[1]) not in ids and c[2].result.mean < min(times)]
        if not ahead:
            break
        chosen = chosen + ahead[:2 * top]  # (best first, by their older times)
    return results


def confirm(workload, target, log, *, top: int = 3, rounds: int = 5, warmup: float = 0.5,
            timing: str = "auto") -> List[tuple]:
    """The end of a tuning run: the ``top`` best configs that ``log`` holds for ``workload``
    on this machine, and the fallback of the best one's template, measured again in turn and
    appended to ``log`` (``rerank(top=top, fallback=True)``). A tuner times each config once,
    right after its build: on a busy host or a GPU whose clock moves, its best of 32 may be
    the one that was timed in a quiet moment (the README's main job on a 2-core host recorded
    its best at 0.82 ms, then ran it at 1.18 ms beside the fallback's 1.03 ms). After this,
    the log's best is the best of one comparison. Returns ``rerank``'s list ([] where the log
    holds no valid config of the workload)."""
    from . import record as rec  # noqa: PLC0415
    if not rec.ranked_for(rec.load(log), workload, target):
        return []
    return rerank(workload, target, [log], rounds=rounds, warmup=warmup, timing=timing,
                  top=top, fallback=True)


def _check_rounds(rounds: int, warmup: float) -> None:
    if rounds < 1:
        raise TvmExtError(f"--rounds {rounds}: must be >= 1")
    if warmup < 0:
        raise TvmExtError(f"--warmup {warmup}: must be >= 0 seconds")


def _in_turn(contenders, workload, *, rounds: int, warmup: float, timing: str,
             out: Path, built: dict) -> List[tuple]:
    """Build each (task, config, old record or None) of ``contenders`` (where ``built`` does
    not hold it yet), check it, sample them all in turn, append a record per timed config to
    ``out``; ``rerank``'s list."""
    from . import record as rec  # noqa: PLC0415
    from .measure.runner import kept_args, run_device  # noqa: PLC0415
    from .measure.timing import in_turn  # noqa: PLC0415
    from .result import MeasureResult  # noqa: PLC0415
    dev = run_device(contenders[0][0].target)  # a CPU: every core the tuner measured on
    if not dev.exist:
        raise TvmExtError(f"no {dev} device here: re-ranking measures on the machine")
    data = kept_args(contenders[0][0], dev, seed=0)
    samplers = {}
    for k, (task, config, _) in enumerate(contenders):
        key = rec.config_identity(task.name, config.values_dict())
        if key not in built:
            t0 = time.perf_counter()
            sampler = _sampler(task, config, data, timing)  # or the reason it was not timed
            built[key] = (sampler, time.perf_counter() - t0)  # and its build's seconds
        samplers[k] = built[key]
    timed = {k: s for k, (s, _) in samplers.items() if callable(s)}
    end = time.perf_counter() + warmup
    while timed and time.perf_counter() < end:  # all of them, in turn: the card's steady state
        for s in timed.values():
            s()
    costs = in_turn(timed, rounds)
    now, lines, results = time.time(), [], []
    for k, (task, config, old) in enumerate(contenders):
        if k not in timed:
            results.append((task, config, old, samplers[k][0]))
            continue
        res = MeasureResult(costs[k], 0, samplers[k][1], now)
        lines.append(rec.encode(task.target_str, task.name, workload, config, res))
        results.append((task, config, old, costs[k]))
    rec.append(out, lines)
    # in the order the new records rank (by their mean, as every record does)
    return sorted(results, key=lambda r: np.mean(r[3]) if isinstance(r[3], list)
                  else float("inf"))


def main(argv: Optional[List[str]] = None) -> int:
    from .workload import LAYOUTS, OPS, cli_workload  # noqa: PLC0415
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--log", nargs="+", required=True, help="logs whose records to re-measure")
    p.add_argument("--out", help="log to append the new records to (default: the first --log)")
    p.add_argument("--op", default="batch_matmul", help=f"operator: {', '.join(OPS)}")
    p.add_argument("--shape", required=True, help="BxMxNxK for batch_matmul, MxNxK for dense")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out-dtype")
    p.add_argument("--layout", default="NT", help=f"one of {', '.join(LAYOUTS)}")
    p.add_argument("--epilogue", default="")
    p.add_argument("--target", help="as tune's --target (default: the visible GPU, else llvm)")
    p.add_argument("--rounds", type=int, default=9, help="samples of each config (default 9)")
    p.add_argument("--warmup", type=float, default=1.0,
                   help="seconds of all configs in turn before the samples (default 1)")
    p.add_argument("--timing", default="auto", choices=("auto", "graph", "evaluator"))
    p.add_argument("--top", type=int, help="only the N best configs of the logs")
    p.add_argument("--fallback", action="store_true",
                   help="also the fallback of the best config's template, where the logs do "
                        "not hold it (then a record too: build applies it where it is the best)")
    args = p.parse_args(argv)
    try:
        from .target import parse_target  # noqa: PLC0415
        args.target_obj = parse_target(args.target)
        wl = cli_workload(args.op, args.shape, args.dtype, args.out_dtype, args.layout,
                          args.epilogue)
        for log in args.log:
            if not Path(log).is_file():
                raise TvmExtError(f"--log {log}: no such file")
        if args.top is not None and args.top < 1:
            raise TvmExtError(f"--top {args.top}: must be >= 1")
        results = rerank(wl, args.target_obj, args.log, rounds=args.rounds,
                         warmup=args.warmup, timing=args.timing, out=args.out, top=args.top,
                         fallback=args.fallback)
    except TvmExtError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(f"{wl}: {len(results)} configs measured in turn, {args.rounds} rounds, appended to "
          f"{args.out or args.log[0]}")
    for task, config, old, costs in results:
        was = "the fallback" if old is None else f"recorded {old.result.mean * 1e3:.4g} ms"
        now = f"mean {np.mean(costs) * 1e3:.4g} ms (median {np.median(costs) * 1e3:.4g}, " \
              f"spread {min(costs) * 1e3:.4g}-{max(costs) * 1e3:.4g})" \
            if isinstance(costs, list) else costs
        print(f"  {now}  {was}  {task.name} {config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
