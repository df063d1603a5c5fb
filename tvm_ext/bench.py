"""``python -m tvm_ext.bench``: tuned kernels against the vendor library, in one process.

    python -m tvm_ext.bench --suite cpu                      # shipped log logs/llvm_x86.json
    python -m tvm_ext.bench --suite cpu --tune 64 --log my.json   # tune first, then measure
    python -m tvm_ext.bench --suite cpu --quick              # tiny shapes (CI smoke run)

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

Tuning cost (``--suite tuning-cost``): for each workload of the GPU suite (on a GPU; else the CPU
suite), the XGB tuner starts from scratch (a fresh log, no transfer) on the template of the
shipped best record, and stops once a config reaches 90% of that record's speed (cost <= record
cost / 0.9) or after ``--trials``. It reports the trials and the wall time (from the start of
tuning, builds included, tuner start-up excluded) that it took.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional

import numpy as np

from .errors import TvmExtError
from .measure.result import error_line
from .space import data_dir
from .workload import Workload

PROG = "tvm_ext.bench"


@dataclass
class Row:
    name: str
    flop: float
    ref_ms: float
    ref_spread: str
    ours_ms: float
    ours_spread: str
    tuned: str
    # GPU tuned rows: the time in the log's record, and the same kernel re-timed now the way
    # the tuner timed it (replay check); None elsewhere.
    recorded_ms: Optional[float] = None
    replay_ms: Optional[float] = None

    @property
    def ratio(self) -> float:
        return self.ref_ms / self.ours_ms


def _time(fn: Callable[[], None], repeat: int, min_s: float = 0.05) -> List[float]:
    """Seconds per call: each sample runs ``fn`` enough times to last ``min_s``."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(min_s / once))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return samples


def _ms(samples):
    s = np.asarray(samples) * 1e3
    return float(np.median(s)), f"{s.min():.3f}-{s.max():.3f}"


# The CPU suite (issue: batch_matmul 24x2048x512x64 NT, dense 128x768 -> 3072, and the MLP
# chain 1024x2048 . 2048x1024 -> exp -> . 1024x3072).
CPU_SUITE = {
    "bmm": Workload.create("batch_matmul", (24, 2048, 512, 64), layout="NT"),
    "dense": Workload.create("dense", (128, 3072, 768), layout="NT"),
    "chain_mm1": Workload.create("dense", (1024, 1024, 2048), layout="NN"),
    "chain_mm2": Workload.create("dense", (1024, 3072, 1024), layout="NN"),
}
CPU_QUICK = {
    "bmm": Workload.create("batch_matmul", (2, 64, 64, 32), layout="NT"),
    "dense": Workload.create("dense", (16, 64, 32), layout="NT"),
    "chain_mm1": Workload.create("dense", (32, 32, 64), layout="NN"),
    "chain_mm2": Workload.create("dense", (32, 48, 32), layout="NN"),
}


def _exp_kernel(shape, target):
    """exp over a 2-D float32 tensor, parallel over rows and vectorised (the chain's epilogue,
    left unfused: a separate pass over the intermediate)."""
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te  # noqa: PLC0415
    X = te.placeholder(shape, "float32", name="X")
    Y = te.compute(shape, lambda i, j: te.exp(X[i, j]), name="Y")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, Y])}))
    i, j = sch.get_loops(sch.get_sblock("Y"))
    jo, ji = sch.split(j, [None, 16])
    sch.parallel(i)
    sch.vectorize(ji)
    return tvm.compile(sch.mod, target=target)


def tune_suite(suite, target, log: str, trials: int, seed: int = 0):
    from . import record  # noqa: PLC0415
    from .measure import LocalMeasurer  # noqa: PLC0415
    from .task import Task  # noqa: PLC0415
    from .tuner import make_tuner, tune  # noqa: PLC0415
    for name, wl in suite.items():
        task = Task(wl, target)
        s = tune(task, make_tuner("random", task.space, seed=seed), LocalMeasurer(),
                 n_trial=trials, callbacks=[record.LogWriter(log)])
        print(f"tuned {name}: {wl}: {s.trials} trials, best {s.best_gflops:.1f} GFLOP/s "
              f"({s.elapsed:.0f}s)", flush=True)


def run_cpu(suite, log: Optional[str], repeat: int) -> List[Row]:
    import tvm  # noqa: PLC0415
    import tvm_ext  # noqa: PLC0415
    from .target import host_cpu_target  # noqa: PLC0415
    target = host_cpu_target()
    dev = tvm.cpu(0)
    rng = np.random.default_rng(0)
    logs = [log] if log and os.path.exists(log) else []
    rows, kernels = [], {}
    with tvm_ext.apply_history_best(logs) as ctx:
        for name, wl in suite.items():
            kernels[name] = tvm_ext.build(wl, target)
    print(ctx.report)

    def tvm_args(wl, a, b):
        return (tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev),
                tvm.runtime.empty(wl.out_shape, wl.out_dtype, dev))

    for name in ("bmm", "dense"):
        wl, k = suite[name], kernels[name]
        a, b = k.task.random_inputs(rng)
        a_mk = np.swapaxes(a, -1, -2) if wl.transpose_a else a
        b_kn = np.swapaxes(b, -1, -2) if wl.transpose_b else b  # a view: numpy's own NT path
        ref = _ms(_time(lambda: np.matmul(a_mk, b_kn), repeat))
        args = tvm_args(wl, a, b)
        k(*args)
        np.testing.assert_allclose(args[2].numpy(), np.matmul(a_mk, b_kn), rtol=1e-3, atol=1e-3)
        ours = _ms(_time(lambda: k(*args), repeat))
        rows.append(Row(f"{name} {wl}", wl.flop, *ref, *ours,
                        "tuned" if k.choice.tuned else "fallback"))

    # The chain X . W1 -> exp -> . W2 (both matmuls tuned, exp a separate vectorised kernel).
    w1, w2 = suite["chain_mm1"], suite["chain_mm2"]
    x = (rng.uniform(-1, 1, (w1.M, w1.K)) / np.sqrt(w1.K)).astype("float32")
    m1 = rng.uniform(-1, 1, (w1.K, w1.N)).astype("float32")
    m2 = rng.uniform(-1, 1, (w2.K, w2.N)).astype("float32")
    ref = _ms(_time(lambda: np.exp(x @ m1) @ m2, repeat))
    exp_k = _exp_kernel((w1.M, w1.N), target)
    tx, tm1, tm2 = (tvm.runtime.tensor(v, dev) for v in (x, m1, m2))
    h = tvm.runtime.empty((w1.M, w1.N), "float32", dev)
    e = tvm.runtime.empty((w1.M, w1.N), "float32", dev)
    out = tvm.runtime.empty((w2.M, w2.N), "float32", dev)
    k1, k2, fexp = kernels["chain_mm1"], kernels["chain_mm2"], exp_k.mod["main"]

    def chain():
        k1(tx, tm1, h)
        fexp(h, e)
        k2(e, tm2, out)

    chain()
    np.testing.assert_allclose(out.numpy(), np.exp(x @ m1) @ m2, rtol=1e-3, atol=1e-2)
    ours = _ms(_time(chain, repeat))
    tuned = "tuned" if k1.choice.tuned and k2.choice.tuned else "fallback"
    rows.append(Row(f"chain {w1.M}x{w1.K}.{w1.K}x{w1.N} -> exp -> .{w2.K}x{w2.N}",
                    w1.flop + w2.flop, *ref, *ours, tuned))
    return rows


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
    """A tune() callback: the trial number and the seconds since ``start`` at which a measured
    cost first fell to ``goal`` (seconds) or below."""

    def __init__(self, goal: float):
        self.goal, self.trials, self.start = goal, 0, time.time()
        self.at = None

    def __call__(self, task, configs, results):
        for res in results:
            self.trials += 1
            if self.at is None and res.ok and res.mean <= self.goal:
                self.at = (self.trials, time.time() - self.start)


def run_tuning_cost(suite, target, log: str, trials: int, seed: int = 0,
                    fraction: float = 0.9) -> List[CostRow]:
    """XGB from scratch per workload until ``fraction`` of the shipped best record's speed."""
    import tempfile  # noqa: PLC0415

    import tvm_ext  # noqa: PLC0415
    from . import record  # noqa: PLC0415
    from .dispatch import choose  # noqa: PLC0415
    from .measure import LocalMeasurer  # noqa: PLC0415
    from .measure.pool import PoolMeasurer  # noqa: PLC0415
    from .task import Task  # noqa: PLC0415
    from .tuner import make_tuner, tune  # noqa: PLC0415
    cuda = target.kind.name == "cuda"
    # As `python -m tvm_ext.tune` measures by default: parallel builds and 4 loaders per GPU,
    # or, on the CPU, in-process (the builds are short and a pool would compete for the cores).
    measurer = PoolMeasurer(n_parallel=os.cpu_count(), runners_per_device=4) if cuda \
        else LocalMeasurer()
    rows = []
    try:
        for name, wl in suite.items():
            with tvm_ext.apply_history_best([log]):
                _, shipped = choose(wl, target)
            if not shipped.tuned:
                print(f"  {name}: no record in {log}: skipped", flush=True)
                continue
            task = Task(wl, target, template=shipped.template)
            tuner = make_tuner("xgb", task.space, seed=seed)
            tuner.loop_features = task.loop_features
            goal = shipped.record_cost / fraction
            with tempfile.TemporaryDirectory() as tmp:
                reach = _Reach(goal)
                s = tune(task, tuner, measurer, n_trial=trials, batch_size=16 if cuda else 8,
                         stop_at_cost=goal,
                         callbacks=[record.LogWriter(os.path.join(tmp, "scratch.json")), reach])
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


def print_cost_table(rows: List[CostRow], trials: int):
    print(f"{'workload':<16} {'template':<24} {'shipped ms':>11} {'best ms':>10} "
          f"{'trials':>7} {'wall s':>7}  90% of shipped reached at")
    for r in rows:
        at = f"trial {r.reached_trial}, {r.reached_s:.0f} s" if r.reached_trial else \
            f"not within {trials} trials"
        print(f"{r.name:<16} {r.template:<24} {r.shipped_ms:>11.4g} {r.best_ms:>10.4g} "
              f"{r.trials:>7} {r.wall_s:>7.0f}  {at}")


def _f16(op, shape, layout="NT"):
    return Workload.create(op, shape, "float16", "float16", layout=layout)


# The GPU suite of the CUDA-core templates (cuBLAS through torch, TF32 off for float32).
GPU_SUITE = {
    "bmm": Workload.create("batch_matmul", (24, 16384, 512, 64), layout="NT"),
    "mm1024": Workload.create("dense", (1024, 1024, 1024), layout="NN"),
    "mm8192": Workload.create("dense", (8192, 8192, 8192), layout="NN"),
    "gemv_f16": Workload.create("dense", (1, 4096, 4096), "float16", layout="NT"),
    "dense16_f16": Workload.create("dense", (16, 4096, 4096), "float16", layout="NT"),
    # The tensor-core suite: small RFC shapes (M x N x K), square GEMMs, attention scores.
    # f16 workloads return f16, as torch.matmul does (tvm_ext's mma kernels accumulate in f32).
    "tc512x64_f16": _f16("dense", (512, 64, 512)),
    "tc512x32_f16": _f16("dense", (512, 32, 512)),
    "tc512x16_f16": _f16("dense", (512, 16, 512)),
    "tc512x64_i8": Workload.create("dense", (512, 64, 512), "int8", layout="NT"),
    "tc512x32_i8": Workload.create("dense", (512, 32, 512), "int8", layout="NT"),
    "tc512x16_i8": Workload.create("dense", (512, 16, 512), "int8", layout="NT"),
    "mm1024_f16": _f16("dense", (1024, 1024, 1024)),
    "mm8192_f16_nt": _f16("dense", (8192, 8192, 8192)),
    "mm8192_f16_nn": _f16("dense", (8192, 8192, 8192), layout="NN"),
    "attn_f16": _f16("batch_matmul", (256, 1024, 1024, 128)),
}


def _dlight_kernel(wl, target):
    """TVM 0.27's own default: dlight's GPU rules on the unscheduled compute."""
    import tvm  # noqa: PLC0415
    from tvm import te  # noqa: PLC0415
    from tvm.s_tir import dlight as dl  # noqa: PLC0415
    from .ops.gemm_cuda import simt_gemm_compute  # noqa: PLC0415
    from .task import ensure_cuda_compiler  # noqa: PLC0415
    mod = tvm.IRModule({"main": te.create_prim_func(simt_gemm_compute(wl))})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Fallback())(mod)
    ensure_cuda_compiler()
    return tvm.compile(mod, target=target)


def run_gpu(suite, log: Optional[str], repeat: int, timing: str = "graph") -> List[Row]:
    """cuBLAS (torch) vs dlight vs tvm_ext fallback vs tvm_ext tuned, per workload, each timed
    by ``timing`` ("graph": CUDA-graph replays, kernel time; "eager": eager calls, launch
    overhead included). The four kernels of a workload are sampled in turn, ``repeat`` rounds,
    so a clock or temperature drift during the row falls on all of them alike. Tuned rows also
    replay their record as the tuner measured it (``replay_ms``): the pool's build and a fresh
    runner process, the tuner's timing."""
    import torch  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    import tvm_ext  # noqa: PLC0415
    from .dispatch import choose  # noqa: PLC0415
    from .measure.timing import EagerSampler, GraphSampler  # noqa: PLC0415
    from .target import default_target  # noqa: PLC0415
    from .task import Task, reference_matmul, tolerance  # noqa: PLC0415
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sampler = GraphSampler if timing == "graph" else EagerSampler
    target = default_target()
    dev = tvm.cuda(0)
    rng = np.random.default_rng(0)
    rows = []
    logs = [log] if log and os.path.exists(log) else []
    for name, wl in suite.items():
        task = Task(wl, target)
        a, b = task.random_inputs(rng)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        a_mk = ta.transpose(-1, -2) if wl.transpose_a else ta
        b_kn = tb.transpose(-1, -2) if wl.transpose_b else tb
        if wl.dtype == "int8":  # cuBLASLt int8 GEMM (2-D only)
            launches = {"cuBLAS": lambda: torch._int_mm(a_mk, b_kn)}
        else:
            launches = {"cuBLAS": lambda: torch.matmul(a_mk, b_kn)}
        args = (tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev))
        expect = reference_matmul(wl, a, b)
        failed = {}

        def checked(label, build):
            """The kernel's launch, after one call checked against float64 numpy; None (and
            the reason in ``failed``) where it does not build or answers wrong."""
            try:
                func = build().mod["main"]
                out = tvm.runtime.empty(wl.out_shape, wl.out_dtype, dev)
                func(*args, out)
                dev.sync()
            except Exception as err:  # noqa: BLE001  (a failing kernel is a row, not the end)
                print(f"  {name} {label} failed: {error_line(err, 160)}", flush=True)
                failed[label] = "-" if label == "dlight" else "failed"
                return None
            if not np.allclose(out.numpy().astype(expect.dtype), expect, *tolerance(wl)):
                print(f"  {name} {label}: numerics WRONG", flush=True)
                failed[label] = "wrong answer"
                return None
            return lambda: func(*args, out)

        with tvm_ext.apply_history_best(logs):
            task_t, choice = choose(wl, target)
        tuned_label = "tuned" if choice.tuned else "untuned"
        for label, build in (("dlight", lambda: _dlight_kernel(wl, target)),
                             ("fallback", lambda: task.build(task.fallback_config())),
                             (tuned_label, lambda: task_t.build(choice.config))):
            launch = checked(label, build)
            if launch is not None:
                launches[label] = launch
        samplers = {label: sampler(fn) for label, fn in launches.items()}
        samples = {label: [] for label in samplers}
        for _ in range(repeat):  # in turn: cuBLAS, dlight, fallback, tuned, cuBLAS, ...
            for label, smp in samplers.items():
                samples[label].append(smp.sample())
        del samplers
        res = {label: _ms(s) for label, s in samples.items()}
        for label in ("dlight", "fallback", tuned_label):
            if label in failed:
                res[label] = (float("nan") if failed[label] != "wrong answer" else float("inf"),
                              failed[label])
            print(f"  {name} {label}: {res[label][0]:.4f} ms ({res[label][1]})", flush=True)
            rows.append(Row(f"{name} {wl} [{label}]", wl.flop, *res["cuBLAS"], *res[label],
                            choice.template))
        if choice.tuned and tuned_label not in failed:
            rows[-1].recorded_ms = choice.record_cost * 1e3
            rows[-1].replay_ms = replay_record(task_t, choice.config)
    return rows


def replay_record(task, config) -> Optional[float]:
    """The config re-measured as ``python -m tvm_ext.tune`` measures (ms): built by a pool
    worker, run in a fresh runner process, the tuner's default timing; None if it fails."""
    from .measure.pool import PoolMeasurer  # noqa: PLC0415
    with PoolMeasurer(n_parallel=1) as pool:
        res = pool.measure(task, [config])[0]
    if not res.ok:
        print(f"  replay of {task.name} failed: error {res.error_no} {res.error_msg}", flush=True)
        return None
    return res.mean * 1e3


# The tuner comparison: best GFLOP/s against trials, replayed from a full measurement of the
# batch_matmul.x86 space of TUNER_WORKLOAD (each tuner sees real costs; many seeds are cheap).
TUNER_WORKLOAD = Workload.create("batch_matmul", (4, 256, 256, 256))
TUNER_CHECKPOINTS = (8, 16, 32, 64, 128, 256)


def run_tuners(space_log: str, transfer_logs: List[str], seeds=(0, 1, 2), budget=64,
               random_budget=256, plot: Optional[str] = None):
    from . import record  # noqa: PLC0415
    from .measure.replay import ReplayMeasurer  # noqa: PLC0415
    from .target import host_cpu_target  # noqa: PLC0415
    from .task import Task  # noqa: PLC0415
    from .tuner import XGBTuner, make_tuner, tune, warm_start  # noqa: PLC0415
    task = Task(TUNER_WORKLOAD, host_cpu_target())
    replay = ReplayMeasurer(space_log)
    measured = [r for r in replay.records if r.key() == TUNER_WORKLOAD.key() and r.result.ok]
    valid = sum(1 for _ in task.space.valid_indices())
    if len(measured) < valid:
        raise TvmExtError(f"{space_log} holds {len(measured)} of the {valid} valid configs of "
                          f"{TUNER_WORKLOAD}: measure the whole space first (--tuner grid)")
    optimum = max(TUNER_WORKLOAD.flop / r.result.mean / 1e9 for r in measured)
    transfer = [r for p in transfer_logs for r in record.load(p)]
    curves = {}
    for label, name, n, use_transfer in (("random", "random", random_budget, False),
                                         ("ga", "ga", budget, False),
                                         ("xgb", "xgb", budget, False),
                                         ("xgb+transfer", "xgb", budget, True)):
        curves[label] = []
        for seed in seeds:
            tuner = make_tuner(name, task.space, seed=seed)
            if isinstance(tuner, XGBTuner):
                tuner.loop_features = task.loop_features
            if use_transfer:
                warm_start(tuner, task, transfer)
            s = tune(task, tuner, replay, n_trial=n, batch_size=8)
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
    for label in ("xgb", "xgb+transfer", "ga"):
        at = [h[min(len(h), budget) - 1] for h in curves[label]]
        print(f"{label} best after {budget} trials / random's best after {random_budget}: "
              + ", ".join(f"{a / r:.3f}" for a, r in zip(at, rnd256)) + " (per seed)")
    if plot:
        _plot_tuners(curves, optimum, plot)
    return curves


def _plot_tuners(curves, optimum, path):
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("matplotlib is not installed (pip install 'tvm_ext[plot]'): no plot written")
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, hs in curves.items():
        n = min(len(h) for h in hs)
        arr = np.asarray([h[:n] for h in hs])
        x = np.arange(1, n + 1)
        ax.plot(x, arr.mean(0), label=label)
        ax.fill_between(x, arr.min(0), arr.max(0), alpha=0.2)
    ax.axhline(optimum, color="k", ls="--", lw=0.8, label="space optimum")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s so far")
    ax.set_title(f"tuners on {TUNER_WORKLOAD} (mean, min-max of seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def plot_ratios(rows: List[dict], path: str, title: str, ref_name: str):
    """Bar chart of vendor time / tvm_ext time per workload, one bar per kind of kernel
    (dlight, fallback, tuned, ...: the [label] ending each row name); 1.0 = as fast as the
    vendor library. Rows are the dicts of ``--json``."""
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("matplotlib is not installed (pip install 'tvm_ext[plot]'): no plot written")
        return
    workloads, kinds, ratio = [], [], {}
    for r in rows:
        name, _, kind = r["name"].rpartition(" [")
        kind, key = kind.rstrip("]"), name.split(" ")[0]
        kind = "tuned" if kind in ("tuned", "untuned") else kind
        if key not in workloads:
            workloads.append(key)
        if kind not in kinds:
            kinds.append(kind)
        ratio[key, kind] = r["ratio"] if np.isfinite(r["ratio"]) else 0.0
    fig, ax = plt.subplots(figsize=(max(7, 0.7 * len(workloads) + 2), 4.5))
    width = 0.8 / len(kinds)
    x = np.arange(len(workloads))
    for i, kind in enumerate(kinds):
        ax.bar(x + (i - (len(kinds) - 1) / 2) * width,
               [ratio.get((w, kind), 0.0) for w in workloads], width, label=kind)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(x, workloads, rotation=40, ha="right")
    ax.set_yscale("log", base=2)
    ax.set_ylabel(f"{ref_name} time / tvm_ext time")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def _blas_info() -> str:
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        name = f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # noqa: BLE001  (older numpy)
        name = "unknown BLAS"
    core = os.environ.get("OPENBLAS_CORETYPE")
    return name + (f", OPENBLAS_CORETYPE={core}" if core else ", OPENBLAS_CORETYPE unset")


def print_table(rows: List[Row], ref_name: str):
    print(f"{'workload':<58} {ref_name + ' ms':>10} {'tvm_ext ms':>11} {'ratio':>6} "
          f"{'GFLOP/s':>8}  spread (ref | ours)")
    for r in rows:
        gf = r.flop / r.ours_ms / 1e6
        print(f"{r.name:<58} {r.ref_ms:>10.4g} {r.ours_ms:>11.4g} {r.ratio:>6.2f} {gf:>8.1f}  "
              f"{r.ref_spread} | {r.ours_spread} ({r.tuned})")
    replays = [r for r in rows if r.replay_ms]
    if replays:
        print("replay of the log's records: re-measured as the tuner measures (pool build, fresh "
              "runner, timing 'auto'), and the tuned row of this process, against the record:")
        for r in replays:
            print(f"  {r.name.split(' ')[0]:<16} recorded {r.recorded_ms:.4f} ms  replayed "
                  f"{r.replay_ms:.4f} ms ({r.replay_ms / r.recorded_ms:.2f})  in this process "
                  f"{r.ours_ms:.4f} ms ({r.ours_ms / r.recorded_ms:.2f})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="cpu",
                   help="cpu (vs numpy), gpu (vs cuBLAS and dlight), tuners (tuner curves) or "
                        "tuning-cost (XGB from scratch to 90%% of the shipped best: the GPU "
                        "suite on a GPU, else the CPU suite)")
    p.add_argument("--trials", type=int, default=64,
                   help="tuning-cost suite: most trials per workload (default 64)")
    p.add_argument("--log", help="tuned log to apply (default: the shipped logs/llvm_x86.json)")
    p.add_argument("--tune", type=int, default=0, metavar="N",
                   help="tune each workload for N trials into --log first")
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
                                  "tuners suite)")
    p.add_argument("--replot", metavar="JSON",
                   help="only draw --plot from the rows of an earlier --json file")
    p.add_argument("--title", help="title of the --replot plot (default: the JSON file name)")
    args = p.parse_args(argv)
    if args.replot:
        with open(args.replot) as f:
            rows = json.load(f)
        ref = "cuBLAS" if any("float16" in r["name"] or "int8" in r["name"] for r in rows) \
            else "reference"
        plot_ratios(rows, args.plot or os.path.splitext(args.replot)[0] + ".png",
                    args.title or os.path.basename(args.replot), ref)
        return 0
    try:
        if args.suite == "tuners":
            run_tuners(args.log or "tvm_ext_logs/space_4x256.json", args.transfer or [],
                       plot=args.plot)
            return 0
        if args.suite not in ("cpu", "gpu", "tuning-cost"):
            raise TvmExtError(f"unknown suite '{args.suite}' "
                              "(known: cpu, gpu, tuners, tuning-cost)")
        from .target import default_target, describe, host_cpu_target  # noqa: PLC0415
        if args.suite == "tuning-cost":
            return _tuning_cost(args)
        if args.suite == "gpu":
            suite = {k: v for k, v in GPU_SUITE.items() if not args.only or k in args.only}
            log = args.log or str(data_dir("logs") / "cuda_sm90.json")
            target = default_target()
        else:
            suite = CPU_QUICK if args.quick else CPU_SUITE
            log = args.log or str(data_dir("logs") / "llvm_x86.json")
            target = host_cpu_target()
        if args.tune:
            tune_suite(suite, target, log, args.tune)
        rows = run_gpu(suite, log, args.repeat, args.timing) if args.suite == "gpu" else \
            run_cpu(suite, log, args.repeat)
    except TvmExtError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 2
    if args.suite == "gpu":
        import tvm  # noqa: PLC0415
        print(f"device: {tvm.cuda(0).device_name} ({describe(target)}); log: {log}; "
              f"timing: {args.timing}")
        print_table(rows, "cuBLAS")
    else:
        print(f"device: {describe(target)}, {os.cpu_count()} cores; numpy: "
              f"{_blas_info()}; log: {log}")
        print_table(rows, "numpy")
    dicts = [{**asdict(r), "ratio": r.ratio} for r in rows]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dicts, f, indent=1)
    if args.plot:
        ref = "cuBLAS" if args.suite == "gpu" else "numpy"
        plot_ratios(dicts, args.plot, f"tvm_ext vs {ref} ({args.suite} suite)", ref)
    return 0


def _tuning_cost(args) -> int:
    from .target import default_target, describe  # noqa: PLC0415
    target = default_target()  # the visible GPU, else the host CPU
    cuda = target.kind.name == "cuda"
    full = GPU_SUITE if cuda else (CPU_QUICK if args.quick else CPU_SUITE)
    suite = {k: v for k, v in full.items() if not args.only or k in args.only}
    log = args.log or str(data_dir("logs") / ("cuda_sm90.json" if cuda else "llvm_x86.json"))
    if not os.path.exists(log):
        raise TvmExtError(f"log {log} does not exist")
    rows = run_tuning_cost(suite, target, log, args.trials)
    print(f"device: {describe(target)}; shipped log: {log}; XGB from scratch, at most "
          f"{args.trials} trials per workload")
    print_cost_table(rows, args.trials)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
