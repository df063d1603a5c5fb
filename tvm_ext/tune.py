"""``python -m tvm_ext.tune``: tune one operator workload into a JSON log.

    python -m tvm_ext.tune --op batch_matmul                   # GPU if visible, else host CPU
    python -m tvm_ext.tune --op dense --shape 128x3072x768 --trials 64 --log dense.json
    python -m tvm_ext.tune --op batch_matmul --resume          # continue: no config twice
    python -m tvm_ext.tune --op batch_matmul --list-space      # knobs and space size
    python -m tvm_ext.tune --best dense.json                   # best config per workload
    python -m tvm_ext.tune --shape 1..8x64..2048:64x512x64 --export fam.so   # a shape family

Bad input gives one line ``tvm_ext.tune: error: ...`` and exit code 2; a log is only appended to.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

from .errors import LogError, TvmExtError, run_command
from .workload import DEFAULT_SHAPES, OPS, Family, Workload, cli_workload, is_family_text

PROG = "tvm_ext.tune"
logger = logging.getLogger("tvm_ext")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the usage too)
        sys.stderr.write(f"{PROG}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", default="batch_matmul", help=f"operator: {', '.join(OPS)}")
    p.add_argument("--shape", help="BxMxNxK for batch_matmul, MxNxK for dense "
                                   "(default: a representative shape for the target)")
    p.add_argument("--dtype", default="float32", help="input dtype (default float32)")
    p.add_argument("--out-dtype", help="output/accumulator dtype (default: float32 for "
                                       "float16 inputs, int32 for int8, else the input dtype)")
    p.add_argument("--layout", default="NT",
                   help="NN, NT, TN or TT: storage of A then B (T = transposed; default NT)")
    p.add_argument("--epilogue", default="",
                   help="tune a subgraph: the matmul and this elementwise epilogue as one kernel, "
                        "ops joined by + (bias, residual, mul, relu, gelu, gelu_tanh, silu, exp, "
                        "tanh, sigmoid, scale:C, cast:DTYPE, requant:S), e.g. "
                        "bias+gelu+cast:float16")
    p.add_argument("--target", help="llvm, cuda, cuda:sm_80 or a JSON dict (default: CUDA "
                                    "when a GPU is visible, else the host CPU)")
    p.add_argument("--template", help="tune this template instead of the op's first")
    p.add_argument("--model", metavar="FILE",
                   help="tune every matmul of a Relax model (a Python file defining `mod` or "
                        "`get_model()`) under one --trials budget into one log")
    p.add_argument("--trials", type=int, default=None,
                   help="configs to measure (default 32; with --fast, K per kernel: 20)")
    p.add_argument("--fast", action="store_true",
                   help="a good kernel in seconds: measure the proposer's top K configs (K = "
                        "--trials, default 20) in one parallel batch (the topk tuner); with "
                        "--model, K per kernel of the model")
    p.add_argument("--tuner", default=None,
                   help="random, grid, ga, xgb (rank loss), xgb-reg or topk (measure the "
                        "proposer's best configs) (default xgb: the tuners benchmark's best "
                        "for small budgets)")
    p.add_argument("--batch-size", type=int, default=8, help="configs per measure batch")
    p.add_argument("--early-stopping", type=int, help="stop after N trials without progress")
    p.add_argument("--log", help="log file to append to (default tvm_ext_logs/<op>.<target>"
                                 ".json)")
    p.add_argument("--resume", action="store_true",
                   help="skip configs already in the log; measure --trials new ones")
    p.add_argument("--seed", type=int, default=0, help="tuner seed (default 0)")
    p.add_argument("--transfer", nargs="*", metavar="LOG",
                   help="warm-start the xgb tuner from these logs (same template, other shapes)")
    p.add_argument("--space", help="tuning-space JSON file replacing the shipped one")
    p.add_argument("--set", nargs="*", default=[], metavar="KNOB=V1,V2",
                   help="tune only these values of the template's knobs (a split: its "
                        "innermost factor, or its whole sizes as -1/128/6), the rest of the "
                        "space (its rules too) as shipped or as --space has it, e.g. --set "
                        "slice_k=4 stages=2,3 or tile_x=32 or tile_y=-1/128/6")
    p.add_argument("--number", type=int, default=3, help="runs per timing repeat")
    p.add_argument("--timing", default="auto", choices=("auto", "graph", "evaluator"),
                   help="graph: CUDA-graph replays through torch (kernel time without launch "
                        "overhead); evaluator: TVM's time_evaluator; auto (default): graph on "
                        "a CUDA device when torch is importable, else evaluator")
    p.add_argument("--repeat", type=int, default=3, help="timing repeats per config")
    p.add_argument("--n-parallel", type=int, help="build worker processes (default: cores)")
    p.add_argument("--build-timeout", type=float, default=60, help="seconds per build")
    p.add_argument("--run-timeout", type=float, default=30, help="seconds per run")
    p.add_argument("--devices", default="0",
                   help="comma-separated GPU ids to measure on in parallel (default 0)")
    p.add_argument("--rpc-tracker", metavar="HOST:PORT",
                   help="measure on the RPC servers registered with this tracker")
    p.add_argument("--rpc-key", help="device key of the RPC servers")
    p.add_argument("--cache-flush", action="store_true",
                   help="flush the CPU caches before each timed run")
    p.add_argument("--local", action="store_true",
                   help="build and run in this process (no isolation; fastest start)")
    p.add_argument("--confirm", type=int, default=None, metavar="N",
                   help="after tuning one shape: measure the log's N best configs of it and "
                        "the template's fallback again, in turn, and append those times (the "
                        "latest time of a config ranks it; default 3, 0: off)")
    p.add_argument("--list-space", action="store_true", help="print the knobs and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="show the task, the fallback and the first proposals; measure nothing")
    p.add_argument("--best", metavar="LOG", help="print the best config per workload of LOG")
    p.add_argument("--max-kernels", type=int, default=8,
                   help="shape family (--shape with sets, ranges or ?): the most bucket kernels "
                        "its library may hold (default 8); --trials is then per representative "
                        "shape")
    p.add_argument("--shape-trace", metavar="FILE",
                   help="shape family: how often each shape occurs (lines 'BxMxNxK [count]'); "
                        "default: every shape of the family equally often")
    p.add_argument("--subgraphs", action="store_true",
                   help="--model: tune each matmul fused with the elementwise ops after it as "
                        "one subgraph task, as tvm_ext.relax.build(..., fuse_epilogue=True) "
                        "runs it")
    p.add_argument("--size", action="append", default=[], metavar="VAR=VALUES",
                   help="--model: the values a symbolic size of the model takes (n=1..2048:16);"
                        " its matmuls are tuned as shape families over them (repeatable)")
    p.add_argument("--export", metavar="LIB.so",
                   help="shape family: write its library (bucket kernels, generic kernel, "
                        "dispatcher) to one file; from the log's library when it has one, "
                        "else after tuning")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return p


def _workload(args) -> Workload:
    from .target import target_info  # noqa: PLC0415
    kind = "gpu" if target_info(args.target_obj)["kind"] == "cuda" else "cpu"
    return cli_workload(args.op, args.shape, args.dtype, args.out_dtype, args.layout,
                        args.epilogue, default=DEFAULT_SHAPES.get((args.op, kind)))


def default_log(op: str, target) -> Path:
    from .target import target_info  # noqa: PLC0415
    info = target_info(target)
    tag = info["kind"] + (f"_{info['arch']}" if info["arch"] else "")
    return Path(os.environ.get("TVM_EXT_LOG_DIR", "tvm_ext_logs")) / f"{op}.{tag}.json"


class Progress:
    """One rewritten line on a terminal, one plain line per batch otherwise."""

    def __init__(self, n_trial: int, quiet: bool, stream=None):
        self.n, self.quiet = n_trial, quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.time()
        self.done = 0
        self.best = 0.0
        self.name = ""

    def label(self, name: str) -> None:
        """The template the next batches are for (a run over several templates)."""
        self.name = name

    def __call__(self, task, configs, results):
        for r in results:
            self.done += 1
            self.best = max(self.best, r.gflops(task.flop))
        if self.quiet:
            return
        cur = max((r.gflops(task.flop) for r in results), default=0.0)
        errs = sum(not r.ok for r in results)
        name = f" {self.name}" if self.name else ""
        line = (f"[{self.done}/{self.n}]{name} current {cur:.1f} GFLOP/s  best {self.best:.1f} "
                f"GFLOP/s  {time.time() - self.start:.1f}s" + (f"  ({errs} failed)" if errs
                                                                 else ""))
        if self.tty:
            self.stream.write("\r" + line.ljust(79))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self):
        if self.tty and not self.quiet and self.done:
            self.stream.write("\n")


def _print_best(path: str, target) -> int:
    """What build would apply per workload (the same rules: records outside the space, or
    of another meaning, are listed as passed over, not as the best)."""
    from . import record  # noqa: PLC0415
    from .dispatch import applied_table  # noqa: PLC0415
    records, set_aside = record.load_log(path)
    if target is not None:
        record.check_target(records, target, path)
    lines = applied_table(records, target)
    if not any(r.result.ok for r in records):
        print(f"{path}: {len(records)} records, none valid")
        return 0
    print(f"{path}: {len(records)} records, what build applies per workload:")
    for ln in lines:
        print("  " + ln)
    if set_aside:  # records no template of ours reads (another operator, an impossible time)
        print("  set aside when read: " + record.set_aside_line(set_aside))
    return 0


def _join_values(argv: List[str]) -> List[str]:
    """'--shape -1x2x3x4' -> '--shape=-1x2x3x4' so argparse does not take it for an option."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--shape", "--target") and i + 1 < len(argv) \
                and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _measure_options(args):
    """The measurement options of the command line, as one typed object: the options' own
    rules refuse bad values in one line (before a dry run, which measures nothing, too)."""
    from .measure import MeasureOptions, RPCConfig, RunOptions  # noqa: PLC0415
    try:
        devices = tuple(int(d) for d in args.devices.split(",") if d.strip())
    except ValueError:
        raise TvmExtError(f"--devices must be comma-separated integers, got '{args.devices}'")\
            from None
    rpc = RPCConfig.parse(args.rpc_tracker, args.rpc_key) if args.rpc_tracker else None
    if args.rpc_key and not args.rpc_tracker:
        raise TvmExtError("--rpc-key needs --rpc-tracker host:port")
    run = RunOptions(number=args.number, repeat=args.repeat, seed=args.seed,
                     cache_flush=args.cache_flush, timing=args.timing)
    return MeasureOptions(run=run, n_parallel=args.n_parallel, build_timeout=args.build_timeout,
                          run_timeout=args.run_timeout, devices=devices or (0,), rpc=rpc,
                          local=args.local)


def _fast_options(args):
    """--fast on the CPU measures in this process (unless --rpc-tracker): a CPU kernel builds
    in a fraction of a second, and a pool's workers would compete with the timed runs."""
    import dataclasses  # noqa: PLC0415
    options = args.measure_options
    if args.fast and args.target_obj.kind.name == "llvm" and options.rpc is None:
        return dataclasses.replace(options, local=True)
    return options


def _check_device(args, workloads) -> None:
    """Before anything is measured: this host can run ``workloads`` (a GPU for CUDA, memory
    for the buffers; an RPC farm's devices are the servers' concern) with the timing asked."""
    from .measure.runner import device_for  # noqa: PLC0415
    from .measure.runner import check_host_can_run  # noqa: PLC0415
    from .measure.timing import resolve  # noqa: PLC0415
    options = args.measure_options
    if options.rpc is not None:
        return
    for wl in workloads:
        check_host_can_run(wl, args.target_obj, options.devices)
    resolve(args.timing, device_for(args.target_obj))


def _tune_model(args) -> int:
    from . import record  # noqa: PLC0415
    from .relax import extract_tasks, load_model, tune_model  # noqa: PLC0415
    from .target import describe  # noqa: PLC0415
    from .relax import extract_families, tune_model_families  # noqa: PLC0415
    from .workload import Dim  # noqa: PLC0415
    sizes = {}
    for item in args.size:
        name, eq, values = item.partition("=")
        if not eq or not name.strip():
            raise TvmExtError(f"--size expects VAR=VALUES (e.g. n=1..2048:16), got '{item}'")
        Dim.parse(values, name.strip())  # a malformed range: one line before anything runs
        sizes[name.strip()] = values.strip()
    mod = load_model(args.model)
    tasks = extract_tasks(mod, args.target_obj, subgraphs=args.subgraphs)
    families = extract_families(mod, args.target_obj)
    print(f"model {args.model}: {len(tasks)} tunable matmul workloads"
          f"{f' and {len(families)} shape families' if families else ''} on "
          f"{describe(args.target_obj)}")
    for wl, n in tasks:
        print(f"  {wl}  x{n}")
    for fam, names, n in families:
        named = ", ".join(f"{a} = {v}" for a, v in names.items())
        todo = "tuned over " + ", ".join(f"{v}={sizes[v]}" for v in names.values()) \
            if all(v in sizes for v in names.values()) else "generic kernel (no --size)"
        print(f"  {fam} ({named})  x{n}: {todo}")
    unknown = set(sizes) - {v for _, names, _ in families for v in names.values()}
    if unknown:
        raise TvmExtError(f"--size names {', '.join(sorted(unknown))}, which no symbolic matmul "
                          "of the model has")
    if args.list_space or args.dry_run or not (tasks or sizes):
        return 0
    _check_device(args, [wl for wl, _ in tasks])
    log = Path(args.log) if args.log else default_log("model", args.target_obj)
    if log.exists():
        record.check_target(record.load(log), args.target_obj, log)
    if args.fast:
        print(f"log: {log}; fast: the proposer's top {args.trials} configs per kernel")
    else:
        print(f"log: {log}; {args.trials} trials split by call count x flops")
    if tasks:
        t0 = time.time()
        results = tune_model(mod, args.target_obj, trials=args.trials, log=log,
                             tuner=args.tuner, seed=args.seed, fast=args.fast, k=args.trials,
                             measure_options=_fast_options(args), subgraphs=args.subgraphs)
        for wl, n, budget, s in results:
            where = "; ".join(f"{k} {p.trials}" for k, p in s.per_template.items())
            print(f"  {wl}  x{n}: {s.trials}/{budget} trials in {s.elapsed:.1f}s, best "
                  f"{s.best_gflops:.1f} GFLOP/s"
                  + (f" on {s.best_template} (trials: {where})" if where else ""))
        print(f"tuned {len(results)} kernels in {time.time() - t0:.1f}s")
    if sizes:
        per_rep = max(4, args.trials // max(1, args.max_kernels * len(families)))
        print(f"shape families: {per_rep} trials per representative, at most "
              f"{args.max_kernels} kernels each")
        for fam, n, _, report in tune_model_families(
                mod, args.target_obj, sizes=sizes, trials=per_rep, log=log,
                max_kernels=args.max_kernels, tuner=args.tuner, seed=args.seed,
                measure_options=args.measure_options, progress=None if args.quiet else print):
            print(f"  {fam}  x{n}: " + "; ".join(report.lines()))
    return 0


def _read_trace(path) -> list:
    """(shape, count) lines of a shape trace: 'BxMxNxK [count]' (MxNxK for dense)."""
    out = []
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise TvmExtError(f"cannot read --shape-trace {path}: {err.strerror or err}") from None
    for i, line in enumerate(text.splitlines(), start=1):
        parts = line.split("#")[0].split()
        if not parts:
            continue
        try:
            dims = tuple(int(v) for v in parts[0].lower().split("x"))
            count = float(parts[1]) if len(parts) > 1 else 1.0
        except ValueError:
            raise TvmExtError(f"{path}:{i}: expected 'BxMxNxK [count]', got '{line.strip()}'")\
                from None
        out.append((dims, count))
    if not out:
        raise TvmExtError(f"--shape-trace {path} holds no shape")
    return out


def _tune_family(args) -> int:
    from . import family as fam_mod  # noqa: PLC0415
    from .target import describe  # noqa: PLC0415
    if args.op not in OPS:
        raise TvmExtError(f"unknown op '{args.op}' (known: {', '.join(OPS)})")
    fam = Family.parse(args.shape, args.op, args.dtype, args.out_dtype, args.layout)
    if args.shape_trace:
        fam = fam.with_trace(_read_trace(args.shape_trace))
    if args.max_kernels < 1:
        raise TvmExtError(f"--max-kernels must be at least 1, got {args.max_kernels}")
    template = fam_mod.family_template(fam, args.target_obj, args.template)
    log = Path(args.log) if args.log else default_log(f"{fam.op}_family", args.target_obj)
    n = len(fam.shapes()) if fam.enumerable else None
    print(f"{fam} on {describe(args.target_obj)}: "
          f"{f'{n} shapes' if n is not None else 'shapes of any size'}; template {template.name}")
    if args.export and log.exists() and \
            fam_mod.library_for([log], fam, args.target_obj) is not None:
        lib = fam_mod.build_family(fam, args.target_obj, log)
        print("\n".join(lib.describe()))
        lib.export_library(args.export)
        print(f"library from {log} written to {args.export}")
        return 0
    buckets, exact = fam_mod.tuned_buckets(fam, args.target_obj) if fam.enumerable else \
        ([], [])
    reps = fam_mod.spread(sorted({b.rep for b in buckets},
                                 key=lambda sh: fam.workload(sh).flop), args.max_kernels)
    if args.list_space or args.dry_run:
        print(f"{len(buckets)} buckets (powers of two on {', '.join(fam.varying) or 'no axis'}):")
        for b in buckets:
            print(f"  {b.describe():<34} {len(b.shapes):>5} shapes, representative "
                  f"{'x'.join(map(str, b.rep))}")
        for m, name in exact:
            print(f"  M = {m:<30} a kernel of its own shape ({name})")
        print(f"would tune {len(reps)} representatives" + (
            f" and {len(exact)} shapes of their own kernel" if exact else "")
            + f" ({args.trials} trials each) into {log}")
        return 0
    if not fam.enumerable:
        raise TvmExtError(f"{fam}: an axis of any size (?) needs --shape-trace to be tuned")
    _check_device(args, [fam.workload(max(fam.shapes(), key=lambda sh: fam.workload(sh).flop))])
    print(f"log: {log}")
    library, report = fam_mod.tune_family(
        fam, args.target_obj, log, trials=args.trials, max_kernels=args.max_kernels,
        tuner=args.tuner, template=template.name, measure_options=args.measure_options,
        seed=args.seed, progress=None if args.quiet else print)
    for line in report.lines():
        print(line)
    lib = fam_mod.compile_library(library, args.target_obj)
    print("\n".join(lib.describe()))
    if args.export:
        lib.export_library(args.export)
        print(f"library written to {args.export}")
    return 0


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(_join_values(list(sys.argv[1:] if argv is None
                                                       else argv)))
    # Options of the tuning loop (the measurement options check themselves, below).
    from .session import check_loop_options  # noqa: PLC0415
    if args.fast:
        from .relax.tuning import FAST_K  # noqa: PLC0415
        if args.tuner not in (None, "topk"):
            raise TvmExtError(f"--fast measures the proposer's top K (the topk tuner); it does "
                              f"not go with --tuner {args.tuner}")
        args.tuner = "topk"
        args.trials = FAST_K if args.trials is None else args.trials
        if args.trials is not None and args.trials >= 1:
            args.batch_size = max(args.batch_size, args.trials)
    else:
        # The tuners benchmark (docs/BENCHMARKS.md, --suite tuners): xgb, from the proposer's
        # best configs, leads at 8 and 16 trials and ties at 32.
        args.tuner = args.tuner or "xgb"
        args.trials = 32 if args.trials is None else args.trials
    check_loop_options(n_trial=args.trials, batch_size=args.batch_size,
                       early_stopping=args.early_stopping,
                       names={"n_trial": "--trials", "batch_size": "--batch-size",
                              "early_stopping": "--early-stopping"})
    if args.confirm is not None and args.confirm < 0:
        raise TvmExtError(f"--confirm {args.confirm}: must be >= 0 (0: off)")
    from . import record  # noqa: PLC0415
    from .target import parse_target  # noqa: PLC0415

    if args.best:
        return _print_best(args.best, parse_target(args.target) if args.target is not None
                           else None)

    args.target_obj = parse_target(args.target)
    args.measure_options = _measure_options(args)
    if args.subgraphs and not args.model:
        raise TvmExtError("--subgraphs is for --model (a model's fused matmuls)")
    if args.epilogue and (args.model or args.shape is not None and is_family_text(args.shape)):
        raise TvmExtError("--epilogue is for one shape (a model's epilogues: --model F "
                          "--subgraphs; a shape family tunes the bare matmul)")
    from .space import knob_values  # noqa: PLC0415
    args.narrow = knob_values(args.set)
    if args.narrow and (args.model or args.shape is not None and is_family_text(args.shape)):
        raise TvmExtError("--set narrows one workload's template (not a --model's kernels or a "
                          "shape family's)")
    if args.confirm is not None and (args.model or args.shape is not None
                                     and is_family_text(args.shape)):
        raise TvmExtError("--confirm is for one shape (a --model's kernels or a shape "
                          "family's buckets are not measured again)")
    if args.model:
        return _tune_model(args)
    if args.shape is not None and is_family_text(args.shape):
        return _tune_family(args)
    for flag in ("export", "shape_trace"):
        if getattr(args, flag):
            raise TvmExtError(f"--{flag.replace('_', '-')} is for a shape family (a --shape with "
                              "sets, ranges or ?), not for one shape")
    wl = _workload(args)
    names = _templates(args, wl)
    if args.narrow and len(names) > 1:
        raise TvmExtError(f"--set narrows one template's knobs; {len(names)} apply to {wl} "
                          f"({', '.join(names)}): give --template")
    log = Path(args.log) if args.log else default_log(wl.op, args.target_obj)
    if len(names) > 1 and not (args.list_space or args.dry_run):
        rc = _tune_templates(args, wl, names, log)
    else:
        for name in names:
            rc = _tune_task(args, wl, name, args.trials, log)
            if rc:
                break
    if rc:
        return rc
    if args.list_space or args.dry_run:
        return 0
    _confirm(args, wl, log)
    best = record.best_for(record.load(log), wl, args.target_obj)
    if best is None:
        print("no valid config measured")
        return 1
    print(f"best: {best.result.mean * 1e3:.4f} ms  {wl.flop / best.result.mean / 1e9:.1f} "
          f"GFLOP/s  {best.task_name} {best.config}")
    from .report import tune_summary  # noqa: PLC0415
    for line in tune_summary(log, wl, args.target_obj):
        print(line)
    return 0


def _confirm(args, wl, log: Path) -> None:
    """``--confirm N``: the log's N best configs of ``wl`` and the fallback measured again in
    turn here (``rerank.confirm``), where they ran here and the same way."""
    top = 3 if args.confirm is None else args.confirm
    if top < 1:
        return
    why = ("the configs were measured through the RPC tracker" if args.rpc_tracker else
           "the configs were measured with --cache-flush" if args.cache_flush else None)
    if why is None:
        from .report import run_target  # noqa: PLC0415
        why = run_target(args.target_obj)[1]
    if why:
        print(f"not confirmed here: {why}")
        return
    from .rerank import confirm  # noqa: PLC0415
    t0 = time.perf_counter()
    try:
        results = confirm(wl, args.target_obj, log, top=top, timing=args.timing)
    except LogError:  # the log could not take the new times: as loud as in tuning
        raise
    except Exception as err:  # noqa: BLE001  (the tuned log stands; say why, go on)
        from .result import error_line  # noqa: PLC0415
        print(f"not confirmed here: {error_line(err, 200)}")
        return
    timed = [r for r in results if isinstance(r[3], list)]
    if not timed:
        return
    print(f"confirmed: {len(timed)} configs measured again in turn in "
          f"{time.perf_counter() - t0:.1f}s, their times appended to {log} (the latest time "
          f"of a config ranks it)")
    for task, config, old, costs in results:
        label = "the fallback" if old is None else f"was {old.result.mean * 1e3:.4g} ms"
        if old is not None and task.is_fallback(config):
            label += ", the fallback"
        now = f"{sum(costs) / len(costs) * 1e3:.4g} ms" if isinstance(costs, list) else costs
        print(f"  {now} ({label})  {task.name} {config}")


def _templates(args, wl) -> List[str]:
    """The templates to tune: the one asked for, the one a --space file is for, else every
    template that applies (for f16/int8 on CUDA: CUDA cores and tensor cores alike, as AutoTVM
    tuned each template of an op as its own task)."""
    import json  # noqa: PLC0415

    from .strategy import templates_for  # noqa: PLC0415
    if args.template:
        return [args.template]
    if args.space:
        try:
            spec = json.loads(Path(args.space).read_text())
        except (OSError, ValueError):
            spec = None  # Task reports the unreadable file in one line
        if isinstance(spec, dict) and spec.get("template"):
            return [spec["template"]]
    return [t.name for t in templates_for(wl, args.target_obj)]


def _tune_templates(args, wl, names: List[str], log: Path) -> int:
    """One run over every template that applies, the budget moving to the winning one."""
    from . import session  # noqa: PLC0415
    from .target import describe  # noqa: PLC0415
    from .task import Task  # noqa: PLC0415
    tasks = [Task(wl, args.target_obj, template=n) for n in names]
    print(f"{wl} on {describe(args.target_obj)}: {len(tasks)} templates apply ("
          + ", ".join(f"{t.name}: {len(t.space)} configs" for t in tasks)
          + f"); one run of {args.trials} trials, each template gets a first batch, then the "
          "budget moves to the template that is winning")
    _check_device(args, [wl])
    print(f"log: {log}")
    progress = Progress(args.trials, args.quiet)
    try:
        summary = session.tune_templates(
            tasks, log, trials=args.trials, tuner=args.tuner, seed=args.seed,
            resume=args.resume, transfer=args.transfer or [], measure_options=_fast_options(args),
            batch_size=args.batch_size, early_stopping=args.early_stopping,
            callbacks=[progress], on_batch=lambda task, n: progress.label(task.name))
    finally:
        progress.close()
    for name, part in summary.per_template.items():
        best = (f"best {part.best_cost * 1e3:.4f} ms ({part.best_gflops:.1f} GFLOP/s)"
                if part.best_config is not None else "no valid config")
        print(f"  {name}: {part.trials} trials ({part.errors} failed), {best}")
    print(f"measured {summary.trials} configs in {summary.elapsed:.1f}s into {log}"
          + (f"; the winner is {summary.best_template}" if summary.best_template else ""))
    return 0


def _tune_task(args, wl, template: str, trials: int, log: Path) -> int:
    from .target import describe  # noqa: PLC0415
    from .task import Task  # noqa: PLC0415
    task = Task(wl, args.target_obj, template=template, space_file=args.space,
                narrow=args.narrow)
    space = task.space
    print(f"task: {task.name} for {wl} on {describe(task.target)}; space {len(space)} configs")

    if args.list_space:
        from .target import facts_lines  # noqa: PLC0415
        print("\n".join(facts_lines(task.target, wl.dtype)))
        print(space.describe())
        if len(space) <= 200_000:
            print(f"valid configs: {sum(1 for _ in space.valid_indices())}")
        print(f"fallback: {task.fallback_config()}")
        return 0

    from . import session  # noqa: PLC0415
    prepared = session.prepare(task, tuner=args.tuner, seed=args.seed, log=log,
                               resume=args.resume, transfer=args.transfer or [])
    for path, n in prepared.transferred:
        print(f"transfer: {n} records of {task.name} for other workloads from {path}")
    if prepared.resumed is not None:
        if log.exists():
            retry = f" ({prepared.retry} failed ones to retry)" if prepared.retry else ""
            print(f"resume: {prepared.resumed} configs of this task already in {log}{retry}; "
                  f"measuring up to {trials} new ones")
        else:
            print(f"resume: {log} does not exist yet; starting a new log")

    if args.dry_run:
        fb = task.fallback_config()
        task.instantiate(fb)
        print(f"fallback config (schedules fine): {fb}")
        print(f"first proposals of the {args.tuner} tuner:")
        for i in prepared.tuner.ask(min(trials, 5)):
            print(f"  {space.get(i)}")
        print(f"would measure {trials} configs into {log}")
        return 0

    options = _fast_options(args)
    _check_device(args, [wl])
    print(f"log: {log}")
    progress = Progress(trials, args.quiet)
    try:
        summary = session.tune_task(task, log, trials=trials, tuner=prepared,
                                    measure_options=options, batch_size=args.batch_size,
                                    early_stopping=args.early_stopping, callbacks=[progress])
    finally:
        progress.close()
    from .target import target_info  # noqa: PLC0415
    cores = target_info(task.target)["num_cores"]
    on = f" on {cores} CPU threads" if task.target.kind.name == "llvm" and cores else ""
    print(f"measured {summary.trials} configs of {task.name}{on} in {summary.elapsed:.1f}s "
          f"({summary.errors} failed) into {log}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    try:
        return run_command(PROG, run, argv)
    except KeyboardInterrupt:
        # A new line ends the progress line (or the ^C) on a terminal; elsewhere, one line.
        start = "\n" if sys.stderr.isatty() else ""
        sys.stderr.write(f"{start}{PROG}: interrupted; the log keeps every finished batch\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
