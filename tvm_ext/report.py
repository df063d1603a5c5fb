"""``python -m tvm_ext.report LOG``: what a tuning log holds, and what its best configs are worth
on this machine.

    python -m tvm_ext.report dense.json                      # per workload: trials, time, best
    python -m tvm_ext.report dense.json --plot curves.png    # and the tuning curves
    python -m tvm_ext.report logs/cuda_sm90.json --no-measure

Per workload of the log (its records grouped by workload key and target, whatever template
wrote them): the template of the best record, the trials (every record, failed ones too: they
cost tuning time), the seconds the tuning took, the best time and GFLOP/s in the log. Where the
log's target runs here (llvm on this host's architecture; CUDA where a GPU of the records' arch
is visible), the config that ``build`` applies and its template's fallback are built and timed
in this process, sampled in turn with the vendor library (numpy on the CPU, torch's cuBLAS on
CUDA), so a change of clock or load falls on all three alike. A record's time says what it was
on the machine that tuned it; these ratios say what it is worth on this one.

``tune_summary`` gives the same comparison for one workload, and the commands that apply the
log, as lines for the tuning CLI to print at the end of a run.

Bad input (a missing or corrupt log, one with no valid record) gives one line
``tvm_ext.report: error: ...`` and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import record as rec
from .errors import LogError, TvmExtError, run_command
from .host_memory import host_tensor
from .target import describe, target_info
from .workload import FP8, Workload

PROG = "tvm_ext.report"
logger = logging.getLogger("tvm_ext")

#: Rounds of the in-turn sampling: each round times best, fallback and vendor once.
ROUNDS = 5
#: Seconds of idle time before a CPU sample whose threads are not the last sample's (numpy's
#: after ours, ours after numpy's). OpenBLAS's and TVM's thread pools spin for a while after
#: each call, and a spinning pool slows the other's threads on the same cores (measured in
#: bench/subgraph.py's chain: without the pause numpy and TVM take turns being slow).
CPU_PAUSE_S = 0.3
#: Samples of one method further apart than this factor are reported as noise.
NOISY = 2.0
#: Seconds each CPU sample lasts at least (enough calls that the timer's resolution is lost).
CPU_SAMPLE_S = 0.05


# ---- what the log holds ----

@dataclass
class WorkloadLog:
    """The records of one workload on one target (as described: a GPU model's records apart
    from another's), every template, failed records included."""

    workload: Workload
    target: str                # the records' target, as written in the log (the first's)
    records: List[rec.Record]  # log order: trial order

    @property
    def where(self) -> str:
        return describe(self.target)

    @property
    def valid(self) -> List[rec.Record]:
        return [r for r in self.records if r.result.ok]

    @property
    def errors(self) -> int:
        return sum(not r.result.ok for r in self.records)

    @property
    def best(self) -> Optional[rec.Record]:
        return min(self.valid, key=lambda r: r.result.mean, default=None)

    def _start(self) -> float:
        """When the first measurement began: a record's timestamp is taken when its
        measurement ends (measure/runner.py), so the first one's build and run, its
        ``all_cost``, come before it."""
        first = min(self.records, key=lambda r: r.result.timestamp)
        return first.result.timestamp - max(first.result.all_cost, 0.0)

    @property
    def seconds(self) -> float:
        """Tuning time: from the start of the first record's measurement to the end of the
        last's. A log resumed later counts the pause between the runs too."""
        return max(r.result.timestamp for r in self.records) - self._start()

    def templates(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for r in self.records:
            out[r.task_name] = out.get(r.task_name, 0) + 1
        return out

    def curves(self) -> Tuple[List[float], List[float], List[float]]:
        """(best GFLOP/s so far per trial in log order, seconds since the tuning started in
        time order, best GFLOP/s so far at those seconds); 0 until a valid record."""
        flop = self.workload.flop

        def running(records):
            best, out = 0.0, []
            for r in records:
                best = max(best, r.result.gflops(flop))
                out.append(best)
            return out

        by_time = sorted(self.records, key=lambda r: r.result.timestamp)
        start = self._start()
        return (running(self.records), [r.result.timestamp - start for r in by_time],
                running(by_time))


def group(records: Sequence[rec.Record]) -> List[WorkloadLog]:
    """The records per (target as described, workload key), in the order the log first
    mentions each."""
    groups: Dict[tuple, WorkloadLog] = {}
    for r in records:
        key = (describe(r.target), r.key())
        if key not in groups:
            groups[key] = WorkloadLog(r.workload, r.target, [])
        groups[key].records.append(r)
    return list(groups.values())


def read_log(path, target=None) -> Tuple[List[WorkloadLog], List[rec.Record], str]:
    """(groups, records, set-aside line) of a log, only the records that apply to ``target``
    when one is given; LogError (one line) for a missing or corrupt log, one with no record,
    one with no record for ``target``, one with no valid record."""
    records, set_aside = rec.load_log(path)
    aside = rec.set_aside_line(set_aside) if set_aside else ""
    if not records:
        raise LogError(f"{path} holds no tuning record" + (f" ({aside})" if aside else ""))
    if target is not None:
        rec.check_target(records, target, path)
        records = rec.for_target(records, target)
    if not any(r.result.ok for r in records):
        codes = sorted({r.result.error_no for r in records})
        raise LogError(f"{path} holds {len(records)} records and none is valid (all failed, "
                       f"error numbers {', '.join(map(str, codes))})")
    return group(records), records, aside


# ---- where a log's target runs ----

def _host_arch() -> str:
    from tvm.target import codegen  # noqa: PLC0415
    return str(codegen.llvm_get_system_triple()).split("-")[0]


def run_target(record_target, target=None):
    """(the target to build on here, None) for a record's target, or (None, why not): llvm
    runs on this host when the records' architecture is its own; CUDA where a GPU of the
    records' arch is visible. ``target`` (the user's --target) is taken as given where it
    runs here."""
    from .target import (default_target, gpu_visible, host_cpu_target,  # noqa: PLC0415
                         parse_target, target_matches)
    info = target_info(target if target is not None else record_target)
    if info["kind"] == "llvm":
        spec = target_info(record_target)
        raw = record_target if isinstance(record_target, str) else str(record_target)
        try:
            triple = json.loads(raw).get("mtriple") if raw.strip().startswith("{") else None
        except (ValueError, AttributeError):
            triple = None
        arch = str(triple).split("-")[0] if triple else None
        if arch and arch != _host_arch():
            return None, (f"the records are for {arch} ({spec['mcpu'] or 'llvm'}); this host "
                          f"is {_host_arch()}")
        return (parse_target(target) if target is not None else host_cpu_target()), None
    if info["kind"] == "cuda":
        if not gpu_visible():
            return None, "no GPU is visible on this machine"
        here = default_target()
        if not target_matches(record_target, here):
            return None, (f"the records are for {target_info(record_target)['arch']}; this "
                          f"GPU is {target_info(here)['arch']}")
        return (parse_target(target) if target is not None else here), None
    return None, f"tvm_ext runs no {info['kind'] or 'unknown'} target here"


# ---- measuring here ----

@dataclass
class Measured:
    """Times in seconds (median of the in-turn samples) of one workload on this machine."""

    where: str
    template: str                       # the template of the config build applies
    tuned: bool                         # False: no record applies here (the fallback only)
    how: str                            # what build applied (dispatch.Choice.how)
    best_s: Optional[float] = None
    fallback_s: Optional[float] = None
    vendor: str = ""
    vendor_s: Optional[float] = None
    notes: List[str] = field(default_factory=list)  # a skipped record, a failure, no vendor

    @property
    def speedup(self) -> Optional[float]:
        """The fallback's time over the best's: how much tuning bought here."""
        return self.fallback_s / self.best_s if self.best_s and self.fallback_s else None

    @property
    def vendor_ratio(self) -> Optional[float]:
        """The vendor's time over the best's (above 1: the tuned kernel is faster)."""
        return self.vendor_s / self.best_s if self.best_s and self.vendor_s else None

    def lines(self) -> List[str]:
        times = [f"{name} {_ms(s)}" for name, s in (("best", self.best_s),
                                                    ("fallback", self.fallback_s),
                                                    (self.vendor, self.vendor_s)) if s]
        out = [f"here ({self.where}): " + (", ".join(times) or "nothing timed")]
        ratios = []
        # three significant digits: a ratio far from 1 (a loaded machine) keeps its size
        if self.speedup:
            ratios.append(f"best/fallback speedup {self.speedup:.3g}x")
        if self.vendor_ratio:
            ratios.append(f"{self.vendor}/best {self.vendor_ratio:.3g}")
        elif self.vendor_s and self.fallback_s and not self.best_s:  # no record applies here
            ratios.append(f"{self.vendor}/fallback {self.vendor_s / self.fallback_s:.3g}")
        if ratios:
            out.append("; ".join(ratios))
        return out + self.notes


class _EvaluatorSampler:
    """``sample()``: TVM's time_evaluator, one repeat of at least 50 ms (CUDA without torch:
    no CUDA graph to replay, every call a launch)."""

    def __init__(self, module, dev, args):
        self.timer = module.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=50)
        self.args = args

    def sample(self) -> float:
        return float(self.timer(*self.args).results[0])


def _vendor_cpu(wl: Workload, inputs) -> Tuple[str, Optional[Callable], str]:
    """numpy's matmul in the workload's layout (transposes as views: numpy's BLAS takes them
    as they are); on a subgraph task, the matmul alone."""
    from .measure.check import matmul_operands  # noqa: PLC0415
    name = "numpy" if not wl.epilogue else "numpy (matmul only)"
    if wl.dtype not in ("float32", "float64"):
        return name, None, f"numpy has no fast {wl.dtype} matmul"
    a_mk, b_kn = matmul_operands(wl, inputs[0], inputs[1])
    note = "numpy computes the matmul alone, without the epilogue" if wl.epilogue else ""
    return name, (lambda: np.matmul(a_mk, b_kn)), note


def torch_matmul(wl: Workload, a: np.ndarray, b: np.ndarray) -> Callable:
    """cuBLAS through torch for ``wl``'s matmul on numpy inputs (moved to the GPU; bf16 and
    fp8 exactly through f32): ``torch._int_mm`` for int8 (cuBLASLt), ``torch._scaled_mm``
    with unit scales for fp8 (cuBLASLt, B column-major: layout NT, the out dtype),
    ``torch.matmul`` otherwise. TF32 is off: our f32 kernels compute in f32."""
    import torch  # noqa: PLC0415
    if wl.dtype in ("bfloat16", *FP8):
        ta, tb = (torch.from_numpy(x.astype(np.float32)).to(getattr(torch, wl.dtype)).cuda()
                  for x in (a, b))
    else:
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    a_mk = ta.transpose(-1, -2) if wl.transpose_a else ta
    b_kn = tb.transpose(-1, -2) if wl.transpose_b else tb
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if wl.dtype == "int8":
        return lambda: torch._int_mm(a_mk, b_kn)
    if wl.dtype in FP8:
        one, out = torch.ones((), device="cuda"), getattr(torch, wl.out_dtype)
        return lambda: torch._scaled_mm(a_mk, b_kn, scale_a=one, scale_b=one, out_dtype=out)
    return lambda: torch.matmul(a_mk, b_kn)


def _vendor_cuda(wl: Workload, inputs) -> Tuple[str, Optional[Callable], str]:
    """cuBLAS through torch (``torch_matmul``)."""
    name = "cuBLAS" if not wl.epilogue else "cuBLAS (matmul only)"
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return name, None, "torch is not importable: no cuBLAS to compare with"
    if wl.dtype == "uint8" or (wl.dtype in ("int8", *FP8) and wl.op != "dense"):
        return name, None, f"torch has no cuBLAS {wl.op} for {wl.dtype}"
    fn = torch_matmul(wl, *inputs[:2])
    try:
        fn()
        torch.cuda.synchronize()
    except Exception as err:  # noqa: BLE001  (_int_mm refuses some shapes: no vendor row)
        from .result import error_line  # noqa: PLC0415
        return name, None, f"cuBLAS failed: {error_line(err, 160)}"
    return name, fn, "cuBLAS computes the matmul alone, without the epilogue" \
        if wl.epilogue else ""


def measure(wl: Workload, records: Sequence[rec.Record], target, *,
            rounds: int = ROUNDS) -> Measured:
    """Build what ``build`` applies for ``wl`` from ``records`` on ``target`` (a target that
    runs here) and its template's fallback, check both against numpy, and time them with the
    vendor library, sampled in turn ``rounds`` times; on the CPU on every core
    (``codegen.use_host_cores``), with a pause between methods of two libraries
    (``CPU_PAUSE_S``)."""
    import tvm  # noqa: PLC0415

    from .codegen import use_host_cores  # noqa: PLC0415
    from .dispatch import ApplyHistoryBest, choose  # noqa: PLC0415
    from .measure.check import np_dtype, seeded_data  # noqa: PLC0415
    from .result import error_line  # noqa: PLC0415
    from .task import Task  # noqa: PLC0415

    cuda = target.kind.name == "cuda"
    with ApplyHistoryBest(list(records)) as ctx:
        task, choice = choose(wl, target)
    where = describe(target)
    if not cuda:
        where += f" on {use_host_cores()} threads"
    out = Measured(where, choice.template, choice.tuned, choice.how)
    if not choice.tuned:
        out.notes.append("no record of the log applies here, so build uses the fallback"
                         + (f": {ctx.report.skipped[0]}" if ctx.report.skipped else ""))
    elif ctx.report.skipped:  # faster records passed over for this one
        out.notes.append(f"build applies a slower record; passed over: {ctx.report.skipped[0]}")
    if choice.completed:
        out.notes.append(f"the record lacks {', '.join(choice.completed)}: completed from the "
                         "fallback")
    fallback_task = Task(wl, target, template=choice.template)
    # the fallback's config as the best record (a --confirm's winner): one kernel, timed once
    same = choice.tuned and fallback_task.is_fallback(choice.config)
    dev = tvm.cuda(0) if cuda else tvm.cpu(0)
    inputs, check = seeded_data(wl, 0)
    args = [host_tensor(x, dev) for x in inputs]
    launches: Dict[str, Callable] = {}
    modules = {}
    for label, t, config in (("best", task, choice.config if choice.tuned else None),
                             ("fallback", fallback_task,
                              None if same else fallback_task.fallback_config())):
        if config is None:
            continue
        try:
            mod = t.build(config).mod
            # NaN-poisoned (integers: zeros), so an element the kernel never writes is seen
            poison = np.nan if "float" in wl.final_dtype else 0
            res = host_tensor(np.full(wl.out_shape, poison, np_dtype(wl.final_dtype)),
                                     dev)
            func = mod["main"]
            func(*args, res)
            dev.sync()
        except Exception as err:  # noqa: BLE001  (a kernel that fails is a line, not the end)
            out.notes.append(f"the {label} config failed here: {error_line(err, 160)}")
            continue
        problem = check(res.numpy())
        if problem:
            out.notes.append(f"the {label} config computes a WRONG result here: {problem}")
            continue
        launches[label] = (lambda func=func, res=res: func(*args, res))
        modules[label] = (mod, res)
    out.vendor, vendor_fn, why = (_vendor_cuda if cuda else _vendor_cpu)(wl, inputs)
    if why:
        out.notes.append(why)
    if vendor_fn is not None:
        launches[out.vendor] = vendor_fn
    last_pool: List[bool] = []

    def pause(k):
        """``CPU_PAUSE_S`` idle before a call whose threads are not the last call's (ours:
        TVM's pool; else the vendor's BLAS), and before the first: a pool's spinning workers
        slow the other pool's threads, not the same pool's next kernel."""
        ours = k in modules
        if last_pool[-1:] != [ours]:
            time.sleep(CPU_PAUSE_S)
        last_pool[:] = [ours]

    if cuda:
        from .measure.timing import GraphSampler, resolve  # noqa: PLC0415
        graph = resolve("auto", dev) == "graph"  # torch with CUDA: CUDA-graph replays
        samplers = {k: GraphSampler(fn) for k, fn in launches.items()} if graph else \
            {k: _EvaluatorSampler(modules[k][0], dev, [*args, modules[k][1]])
             for k in launches if k in modules}
    else:
        from .measure.timing import WallSampler  # noqa: PLC0415
        samplers = {}
        for k, fn in launches.items():
            pause(k)
            samplers[k] = WallSampler(fn, CPU_SAMPLE_S)
    from .measure.timing import in_turn  # noqa: PLC0415
    # in turn: best, fallback, vendor, best, ...
    samples = in_turn({k: smp.sample for k, smp in samplers.items()}, rounds,
                      pause=None if cuda else pause)
    med = {k: float(np.median(v)) for k, v in samples.items()}
    for k, v in samples.items():  # a busy host shows as samples far apart: say so
        if len(v) > 1 and max(v) > NOISY * min(v):
            out.notes.append(f"{k} is noisy here: samples {min(v) * 1e3:.4g}-{max(v) * 1e3:.4g} "
                             "ms (a busy host? more --rounds)")
    out.best_s, out.fallback_s = med.get("best"), med.get("best" if same else "fallback")
    if same and out.best_s:
        out.notes.append("the best record is the fallback's own config: one kernel, timed once")
    out.vendor_s = med.get(out.vendor)
    return out


# ---- the report ----

def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def _config_text(config) -> str:
    return " ".join(f"{k}={v!r}" for k, v in config.items())


def describe_group(g: WorkloadLog) -> List[str]:
    """The recorded figures of one workload: trials, tuning time, best."""
    per = g.templates()
    split = f" ({', '.join(f'{t} {n}' for t, n in per.items())})" if len(per) > 1 else ""
    lines = [f"{g.workload}  [{g.where}]",
             f"  {len(g.records)} trial{'s' if len(g.records) != 1 else ''}{split}, "
             f"{g.errors} failed; tuning took "
             f"{g.seconds:.1f} s (first to last record)"]
    best = g.best
    if best is None:
        lines.append("  no valid record (every trial failed)")
        return lines
    lines.append(f"  best in the log: {best.task_name}  {_ms(best.result.mean)}  "
                 f"{best.result.gflops(g.workload.flop):.1f} GFLOP/s  {_config_text(best.config)}")
    return lines


def report(path, *, target=None, measure_here: bool = True, rounds: int = ROUNDS,
           out=print) -> List[WorkloadLog]:
    """Print the report of a log (``out`` takes one line at a time); returns its groups."""
    from .target import parse_target  # noqa: PLC0415
    target = parse_target(target) if target is not None else None
    groups, records, aside = read_log(path, target)
    errors = sum(not r.result.ok for r in records)
    targets = sorted({g.where for g in groups})
    out(f"{path}: {len(records)} records ({errors} failed) of {len(groups)} "
        f"workload{'s' if len(groups) != 1 else ''} on "
        f"{', '.join(targets)}" + (f"; {aside}" if aside else "")
        + ("" if measure_here else "; recorded figures only (--no-measure)"))
    if measure_here:
        out("here: each workload's best and fallback (once where they are one config) built and "
            f"timed in this process, in turn with the vendor library ({rounds} "
            f"round{'s' if rounds != 1 else ''}, medians);")
        out("  best/fallback = fallback time / best time, vendor/best = vendor time / best time "
            "(above 1: the tuned kernel is faster)")
    for g in groups:
        out("")
        for line in describe_group(g):
            out(line)
        if g.best is None:
            continue
        if not measure_here:
            continue
        on, why = run_target(g.target, target)
        if on is None:
            out(f"  recorded figures only: {why}")
            continue
        try:
            lines = measure(g.workload, g.records, on, rounds=rounds).lines()
        except TvmExtError as err:  # e.g. no template of this version for it on this target
            lines = [f"not measured here: {err}"]
        for line in lines:
            out("  " + line)
    return groups


# ---- the tuning CLI's closing lines ----

def _target_text(target) -> str:
    """What to type for ``target`` in a command: 'llvm' for this host's CPU, 'cuda' for the
    visible GPU, 'cuda:sm_XX' for another arch, else the target's JSON."""
    from .target import default_target, gpu_visible, host_cpu_target  # noqa: PLC0415
    info = target_info(target)
    if info["kind"] == "llvm" and info["mcpu"] in (None, target_info(host_cpu_target())["mcpu"]):
        return "llvm"
    if info["kind"] == "cuda" and info["arch"]:
        here = target_info(default_target())["arch"] if gpu_visible() else None
        return "cuda" if here == info["arch"] else f"cuda:{info['arch']}"
    return str(target)


def apply_commands(log, workload: Workload, target) -> List[str]:
    """The commands that apply ``log``: the listing of what build takes per workload, then
    a Python snippet that builds ``workload`` with it (lines of one shell command)."""
    on = _target_text(target)
    epi = f", epilogue={json.dumps(workload.epilogue)}" if workload.epilogue else ""
    shape = tuple(int(x) for x in workload.shape_str().split("x"))
    code = "\n".join([
        "import tvm_ext",
        f"wl = tvm_ext.Workload.create({json.dumps(workload.op)}, {shape}, "
        f"{json.dumps(workload.dtype)}, {json.dumps(workload.out_dtype)}, "
        f"{json.dumps(workload.layout)}{epi})",
        f"with tvm_ext.apply_history_best({json.dumps(str(log))}) as ctx:",
        f"    kernel = tvm_ext.build(wl, {json.dumps(on)})",
        "print(ctx.report)"])
    listing = f"python -m tvm_ext.tune --best {shlex.quote(str(log))} --target {shlex.quote(on)}"
    return [f"what build applies from the log: {listing}",
            "build with it (kernel.run(a, b) takes and returns numpy arrays):",
            *f"python -c {shlex.quote(code)}".split("\n")]


def tune_summary(log, workload: Workload, target, *, rounds: int = ROUNDS) -> List[str]:
    """Lines for the end of a tuning run: the best record of ``workload`` in ``log`` against
    its template's fallback and the vendor library on this machine (measured now, as
    ``python -m tvm_ext.report`` does; where ``target`` cannot run here, the reason), then the
    commands that apply the log. Never raises for a log without a valid record: says so."""
    from .target import parse_target  # noqa: PLC0415
    target = parse_target(target)
    try:
        records, _ = rec.load_log(log)
    except LogError as err:
        return [f"no summary: {err}"]
    mine = [r for r in rec.for_target(records, target) if r.key() == workload.key()]
    best = rec.best_for(mine, workload, target)
    if best is None:
        return [f"no valid record of {workload} in {log}"]
    lines = [f"best of {len(mine)} trials: {best.task_name} {_ms(best.result.mean)} "
             f"({best.result.gflops(workload.flop):.1f} GFLOP/s) in the log"]
    on, why = run_target(best.target, target)
    if on is None:
        lines.append(f"not measured here: {why}")
    else:
        try:
            lines += measure(workload, mine, on, rounds=rounds).lines()
        except TvmExtError as err:
            lines.append(f"not measured here: {err}")
    return lines + apply_commands(log, workload, target)


# ---- plot ----

def save_png(fig, path: str, dpi: int) -> None:
    """``fig`` as a PNG of at most 256 colours (a chart's few colours and their antialiasing
    edges; a third of the bytes of matplotlib's RGBA file, for the charts the repository
    ships: the report's and the bench's), or as matplotlib writes it where Pillow, a
    matplotlib requirement, is missing."""
    import io  # noqa: PLC0415
    try:
        from PIL import Image  # noqa: PLC0415
    except ImportError:
        fig.savefig(path, dpi=dpi)
        return
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    buf.seek(0)
    Image.open(buf).convert("RGB").quantize(colors=256).save(path, optimize=True)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend; TvmExtError (exit 2) when matplotlib is
    missing, raised before anything is measured."""
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise TvmExtError("--plot needs matplotlib, which is not installed "
                          "(pip install 'tvm_ext[plot]')") from None
    return plt


def plot_curves(groups: Sequence[WorkloadLog], path, *, title: str = "", plt=None) -> None:
    """Best GFLOP/s so far per workload: against the trial number (left) and against the
    seconds since its tuning started (right). The legend goes under the panels (a log of
    thirty workloads would cover them), the GFLOP/s axis is logarithmic where the workloads'
    speeds span more than 20x (a GEMV beside an 8192^3 GEMM)."""
    plt = plt or pyplot()
    ncol = 1 if len(groups) <= 4 else 2
    legend_h = 0.2 * math.ceil(len(groups) / ncol) + 0.3  # inches
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2 + legend_h))
    several = len({g.where for g in groups}) > 1
    speeds = []
    for g in groups:
        by_trial, secs, by_time = g.curves()
        speeds += [v for v in by_trial if v > 0]
        label = f"{g.workload}" + (f" [{g.where}]" if several else "")
        # markers: a workload of one trial (a distilled log) is a point, not an empty step
        line, = left.step(range(1, len(by_trial) + 1), by_trial, where="post", label=label,
                          marker="o", markersize=3)
        right.step(secs, by_time, where="post", color=line.get_color(), marker="o",
                   markersize=3)
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415
    left.xaxis.set_major_locator(MaxNLocator(integer=True))  # trials are whole numbers
    left.set_xlabel("trial")
    right.set_xlabel("seconds since the workload's tuning started")
    for ax in (left, right):
        ax.set_ylabel("best GFLOP/s so far")
        ax.grid(alpha=0.3)
        if speeds and max(speeds) > 20 * min(speeds):
            ax.set_yscale("log")
    fig.suptitle(f"tuning curves of {title}" if title else "tuning curves")
    fig.tight_layout(rect=(0, legend_h / fig.get_figheight(), 1, 1))
    fig.legend(loc="lower center", ncol=ncol, fontsize=7, frameon=False)
    save_png(fig, path, dpi=100)
    plt.close(fig)


# ---- command line ----

class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        sys.stderr.write(f"{PROG}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", help="the tuning log (JSON lines)")
    p.add_argument("--plot", metavar="OUT.png",
                   help="draw the tuning curves (needs matplotlib: tvm_ext[plot])")
    p.add_argument("--target", help="only the records that apply to this target (llvm, cuda, "
                                    "cuda:sm_80, a JSON dict), measured on it where it runs")
    p.add_argument("--no-measure", action="store_true",
                   help="print the recorded figures only; build and time nothing")
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help=f"in-turn samples of each kernel (default {ROUNDS})")
    return p


def run(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds < 1:
        raise TvmExtError(f"--rounds must be at least 1, got {args.rounds}")
    plt = pyplot() if args.plot else None  # a missing extra: one line before any work
    groups = report(args.log, target=args.target, measure_here=not args.no_measure,
                    rounds=args.rounds)
    if args.plot:
        plot_curves(groups, args.plot, title=Path(args.log).name, plt=plt)
        print(f"\nplot: {args.plot}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return run_command(PROG, run, argv)


if __name__ == "__main__":
    sys.exit(main())
