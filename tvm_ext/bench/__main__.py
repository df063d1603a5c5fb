"""``python -m tvm_ext.bench``: tuned kernels against the vendor library, in one process.

    python -m tvm_ext.bench --suite cpu                      # shipped log logs/llvm_x86.json
    python -m tvm_ext.bench --suite cpu --tune 64 --log my.json   # tune first, then measure
    python -m tvm_ext.bench --suite cpu --quick              # tiny shapes (CI smoke run)
    python -m tvm_ext.bench --suite cpu --tune 64 --tuner xgb --log my.json --metaschedule 64
                         # ours and MetaSchedule's own search, 64 trials each, against numpy

CPU: numpy (``np.matmul``, whatever BLAS numpy was built with) vs tvm_ext's kernel built under
``apply_history_best(log)``. Each side: one warm-up, then ``--repeat`` timed runs; the median is
reported with the spread (min-max). ratio = numpy time / tvm_ext time (> 1: tvm_ext is faster).

GPU (``--suite gpu``): cuBLAS through torch (TF32 off; ``torch._int_mm`` for int8), TVM's dlight
default, tvm_ext's fallback and tvm_ext under the shipped ``logs/cuda_sm90.json``. By default
every kernel is timed in CUDA-graph replays (``--timing graph``), so microsecond kernels are
compared without either side's launch overhead. The kernels of a row are sampled in turn, so a
clock or temperature drift falls on all of them alike. Each tuned record is also replayed the way
the tuner measured it (pool build, fresh runner process) and compared with the time in the
record (the replay check).

Knob sweep (``--only KEY ... --sweep TEMPLATE --set KNOB=V1,V2 ...``, either suite): the
template's fallback with each combination of the values instead of those columns, checked and
sampled in turn with the vendor library; an unknown knob or value is an error before any build.

Tuning cost (``--suite tuning-cost``): for each workload of the GPU suite (on a GPU; else the CPU
suite), the XGB tuner starts from scratch (a fresh log, no transfer) on the template of the
shipped best record, and stops once a config reaches 90% of that record's speed (cost <= record
cost / 0.9) or after ``--trials``. It reports the trials and the wall time (from the start of
tuning, builds included, tuner start-up excluded) that it took.

The figures these suites produced, the machines and the exact commands: ``docs/BENCHMARKS.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from ..errors import TvmExtError
from ..space import data_dir
from ..space import knob_values as _knob_grid
from .common import blas_info, llvm_target, print_table
from .cpu import CPU_QUICK, CPU_SUITE
from .gpu import GPU_SUITE

PROG = "tvm_ext.bench"


def tune_suite(suite, target, *, log: str, trials: int, seed: int = 0, tuner: str = "random"):
    """``--tune N``: each workload of ``suite`` tuned for ``trials`` configs of ``tuner`` into
    ``log`` (in-process measurement) before the suite applies that log."""
    from ..measure import LocalMeasurer  # noqa: PLC0415
    from ..session import tune_task  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    for name, wl in suite.items():
        s = tune_task(Task(wl, target), log, trials=trials, tuner=tuner, seed=seed,
                      measurer=LocalMeasurer())
        print(f"tuned {name}: {wl}: {s.trials} trials, best {s.best_gflops:.1f} GFLOP/s "
              f"({s.elapsed:.0f}s)", flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="cpu",
                   help="cpu (vs numpy), gpu (vs cuBLAS and dlight), tuners (tuner curves) or "
                        "tuning-cost (XGB from scratch to 90%% of the shipped best: the GPU "
                        "suite on a GPU, else the CPU suite)")
    p.add_argument("--trials", type=int, default=64,
                   help="tuning-cost suite: most trials per workload (default 64)")
    p.add_argument("--log", help="tuned log to apply (default: the shipped logs/llvm_x86.json; "
                                 "gpu suite: logs/cuda_sm90.json; tuners suite: the full "
                                 "measurement of the space, tvm_ext_logs/space_4x256.json)")
    p.add_argument("--tune", type=int, default=0, metavar="N",
                   help="tune each workload for N trials into --log first")
    p.add_argument("--tuner", default="random",
                   help="--tune's tuner (default random; xgb, ga, grid, topk)")
    p.add_argument("--metaschedule", type=int, default=0, metavar="N",
                   help="cpu suite: also MetaSchedule's own tuning of each workload, N trials "
                        "(its default design space and search; a column of the table)")
    p.add_argument("--ms-workdir", default="tvm_ext_logs/metaschedule_cpu",
                   help="--metaschedule's work folder (a finished run there is reused)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    p.add_argument("--timing", choices=("graph", "eager"), default="graph",
                   help="gpu suite: 'graph' times kernels in CUDA-graph replays (no launch "
                        "overhead, the default); 'eager' times eager calls (torch's dispatch "
                        "and TVM's FFI call included)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.add_argument("--only", nargs="*", help="only these workloads of the suite (by key)")
    p.add_argument("--transfer", nargs="*", help="tuners suite: logs for xgb+transfer")
    p.add_argument("--plot", help="write the PNG plot here (ratio bars; tuner curves for the "
                                  "tuners suite; the shipped charts are docs/*.png)")
    p.add_argument("--sweep", metavar="TEMPLATE",
                   help="gpu suite: instead of the suite's columns, this template's fallback "
                        "with each combination of the --set knob values (in turn with cuBLAS)")
    p.add_argument("--set", nargs="*", default=[], metavar="KNOB=V1,V2",
                   help="--sweep's knob values, e.g. staged_store=0,1 block_n=128,256")
    p.add_argument("--target", help="cpu suite: build for this llvm target instead of the "
                   "host's, e.g. '{\"kind\": \"llvm\", \"mcpu\": \"haswell\", "
                   "\"num-cores\": 2}' (AVX2 code on an AVX-512 host)")
    p.add_argument("--replot", metavar="JSON",
                   help="only draw --plot from the rows of an earlier --json file")
    p.add_argument("--title", help="title of the --replot plot (default: the JSON file name)")
    return p


def _cpu_rows(suite, only):
    """The CPU suite's workloads that ``--only`` names ("chain": the chain's two matmuls);
    a one-line error where it names none."""
    if not only:
        return suite
    names = set(only) | ({"chain_mm1", "chain_mm2"} if "chain" in only else set())
    picked = {k: v for k, v in suite.items() if k in names}
    if not picked:
        keys = ["chain"] + [k for k in suite if not k.startswith("chain")]
        raise TvmExtError(f"--only: no workload of the cpu suite is named {' '.join(only)} "
                          f"(keys: {', '.join(keys)})")
    return picked


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.replot:
        from .plot import plot_ratios  # noqa: PLC0415
        with open(args.replot) as f:
            rows = json.load(f)
        ref = "cuBLAS" if any("float16" in r["name"] or "int8" in r["name"] for r in rows) \
            else "reference"
        plot_ratios(rows, args.plot or os.path.splitext(args.replot)[0] + ".png",
                    title=args.title or os.path.basename(args.replot), ref_name=ref)
        return 0
    try:
        if args.suite == "tuners":
            from .tuners import run_tuners  # noqa: PLC0415
            run_tuners(args.log or "tvm_ext_logs/space_4x256.json",
                       transfer_logs=args.transfer or [], plot=args.plot)
            return 0
        if args.sweep and args.suite not in ("gpu", "cpu"):
            raise TvmExtError("--sweep is an option of the gpu and cpu suites")
        if args.target and args.suite != "cpu":
            raise TvmExtError("--target is an option of the cpu suite")
        if args.set and not args.sweep:
            raise TvmExtError("--set gives --sweep's knob values: name the template with --sweep")
        if args.suite not in ("cpu", "gpu", "tuning-cost"):
            raise TvmExtError(f"unknown suite '{args.suite}' "
                              "(known: cpu, gpu, tuners, tuning-cost)")
        from ..target import default_target, describe  # noqa: PLC0415
        if args.suite == "tuning-cost":
            return _tuning_cost(args)
        if args.suite == "gpu":
            suite = {k: v for k, v in GPU_SUITE.items() if not args.only or k in args.only}
            log = args.log or str(data_dir("logs") / "cuda_sm90.json")
            target = default_target()
        else:
            suite = CPU_QUICK if args.quick else CPU_SUITE
            log = args.log or str(data_dir("logs") / "llvm_x86.json")
            target = llvm_target(args.target, "the cpu suite builds")
        if args.tune:
            tune_suite(suite, target, log=log, trials=args.tune, tuner=args.tuner)
        if args.suite == "gpu" and args.sweep:
            from .gpu import run_sweep  # noqa: PLC0415
            rows = run_sweep(suite, args.sweep, _knob_grid(args.set), repeat=args.repeat,
                             timing=args.timing)
        elif args.suite == "gpu":
            from .gpu import run_gpu  # noqa: PLC0415
            rows = run_gpu(suite, log=log, repeat=args.repeat, timing=args.timing)
        elif args.sweep:
            from .cpu import run_cpu_sweep  # noqa: PLC0415
            rows = run_cpu_sweep(_cpu_rows(suite, args.only), args.sweep, _knob_grid(args.set),
                                 repeat=args.repeat, target=target)
        else:
            from .cpu import run_cpu  # noqa: PLC0415
            rows = run_cpu(_cpu_rows(suite, args.only), log=log, repeat=args.repeat,
                           metaschedule=args.metaschedule, ms_workdir=args.ms_workdir,
                           target=target)
    except TvmExtError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 2
    if args.suite == "gpu":
        import tvm  # noqa: PLC0415
        print(f"device: {tvm.cuda(0).device_name} ({describe(target)}); log: {log}; "
              f"timing: {args.timing}")
        print_table(rows, ref_name="cuBLAS")
    else:
        from .. import host_memory  # noqa: PLC0415
        print(f"device: {describe(target)}, {os.cpu_count()} cores; numpy: "
              f"{blas_info()}; our tensors: {host_memory.describe()}; log: {log}")
        print_table(rows, ref_name="numpy")
    dicts = [{**asdict(r), "ratio": r.ratio} for r in rows]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dicts, f, indent=1)
    if args.plot:
        from .plot import plot_ratios  # noqa: PLC0415
        ref = "cuBLAS" if args.suite == "gpu" else "numpy"
        plot_ratios(dicts, args.plot, title=f"tvm_ext vs {ref} ({args.suite} suite)",
                    ref_name=ref)
    return 0


def _tuning_cost(args) -> int:
    from ..target import default_target, describe  # noqa: PLC0415
    from .tuning_cost import print_cost_table, run_tuning_cost  # noqa: PLC0415
    target = default_target()  # the visible GPU, else the host CPU
    cuda = target.kind.name == "cuda"
    full = GPU_SUITE if cuda else (CPU_QUICK if args.quick else CPU_SUITE)
    suite = {k: v for k, v in full.items() if not args.only or k in args.only}
    log = args.log or str(data_dir("logs") / ("cuda_sm90.json" if cuda else "llvm_x86.json"))
    if not os.path.exists(log):
        raise TvmExtError(f"log {log} does not exist")
    rows = run_tuning_cost(suite, target, log=log, trials=args.trials)
    print(f"device: {describe(target)}; shipped log: {log}; XGB from scratch, at most "
          f"{args.trials} trials per workload")
    print_cost_table(rows, trials=args.trials)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
