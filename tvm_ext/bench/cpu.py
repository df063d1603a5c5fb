"""The CPU suite: numpy (``np.matmul``, whatever BLAS numpy was built with) against tvm_ext's
kernels built under ``apply_history_best(log)``, in one process: the methods sampled in turn,
each sample after ``IDLE_S`` of idle time (neither library's spinning threads slow the other);
the table shows numpy's median and its best sample, and for tuned rows the template's fallback."""
from __future__ import annotations

import functools
import os
import time
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..host_memory import host_empty, host_tensor
from ..workload import Workload
from .common import Row, check_grid, median_ms, rates, sweep_configs, time_calls

# The CPU suite (issue: batch_matmul 24x2048x512x64 NT, dense 128x768 -> 3072, and the MLP
# chain 1024x2048 . 2048x1024 -> exp -> . 1024x3072).
CPU_SUITE = {
    "bmm": Workload.create("batch_matmul", (24, 2048, 512, 64), layout="NT"),
    "dense": Workload.create("dense", (128, 3072, 768), layout="NT"),
    "chain_mm1": Workload.create("dense", (1024, 1024, 2048), layout="NN"),
    "chain_mm2": Workload.create("dense", (1024, 3072, 1024), layout="NN"),
    # Issue 25's shapes: a matrix-vector product (dense_gemv.x86), few rows, a batch of small
    # matrices, and sizes that are primes (no convenient factors).
    "gemv": Workload.create("dense", (1, 4096, 4096), layout="NT"),
    "small_m": Workload.create("dense", (32, 1024, 1024), layout="NT"),
    "small_bmm": Workload.create("batch_matmul", (64, 64, 64, 64), layout="NN"),
    "odd": Workload.create("dense", (257, 509, 131), layout="NT"),
    # A prime M with model-sized N and K: ViT-B/16's MLP (197 tokens, 768 -> 3072), the weight
    # stored [N, K] (M padded to the register tile, B packed as it is).
    "odd_m": Workload.create("dense", (197, 3072, 768), layout="NT"),
    # A prime-ish N: GPT-2's language-model head (a vocabulary of 50257) at 64 tokens, the
    # weight stored [N, K] (N padded to the panels).
    "lm_head": Workload.create("dense", (64, 50257, 768), layout="NT"),
    # A few rows of A against a large weight (4 sequences decoded at once: dense_gemv.x86's
    # sums of 4 x 4 outputs), and one row against a weight stored [K, N] (numpy's x @ W, a
    # transformer MLP's up projection at batch 1: dense_gemv_nn.x86).
    "gemv_m4": Workload.create("dense", (4, 4096, 4096), layout="NT"),
    "gemv_nn": Workload.create("dense", (1, 3072, 768), layout="NN"),
}
# The same roles on tiny shapes: a smoke run (CI, tests) that still goes through every path.
CPU_QUICK = {
    "bmm": Workload.create("batch_matmul", (2, 64, 64, 32), layout="NT"),
    "dense": Workload.create("dense", (16, 64, 32), layout="NT"),
    "chain_mm1": Workload.create("dense", (32, 32, 64), layout="NN"),
    "chain_mm2": Workload.create("dense", (32, 48, 32), layout="NN"),
    "gemv": Workload.create("dense", (1, 64, 48), layout="NT"),
    "gemv_nn": Workload.create("dense", (1, 48, 32), layout="NN"),
    "odd": Workload.create("dense", (7, 13, 11), layout="NT"),
}


def exp_kernel(shape, target):
    """exp over a 2-D float32 tensor, parallel over rows and vectorised (the chain's epilogue,
    left unfused: a separate pass over the intermediate). TVM's ``fast_exp`` (range reduction
    and a polynomial, as Relax's FastMath pass uses), vectorised: ``te.exp`` becomes one scalar
    ``expf`` call per element on the CPU (LLVM has no vector exp without a vector math
    library). Its accuracy is float32's (``tests/unit/test_bench.py`` checks it against
    float64 numpy)."""
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te, topi  # noqa: PLC0415
    X = te.placeholder(shape, "float32", name="X")
    Y = topi.fast_exp(X)
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, Y])}))
    i, j = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[-1])
    jo, ji = sch.split(j, [None, 16])
    sch.parallel(i)
    sch.vectorize(ji)
    return tvm.compile(sch.mod, target=target)


def metaschedule_kernels(suite, target, *, trials: int, work_dir: str):
    """{name: kernel}: each workload of ``suite`` tuned by MetaSchedule on its own (its default
    design space and search, ``trials`` measured candidates; ``tvm_ext.metaschedule.
    tune_default``), in ``work_dir/<name>``; a finished run there is reused."""
    from ..metaschedule import tune_default  # noqa: PLC0415
    out = {}
    for name, wl in suite.items():
        start = time.time()
        ex, secs = tune_default(wl, target, trials=trials, work_dir=os.path.join(work_dir, name))
        print(f"MetaSchedule {name}: {wl}: best {secs * 1e3:.4f} ms as measured by its runner "
              f"({time.time() - start:.0f} s)", flush=True)
        out[name] = ex.mod["main"]
    return out


def run_cpu(suite, *, log: Optional[str], repeat: int, metaschedule: int = 0,
            ms_workdir: str = "tvm_ext_logs/metaschedule_cpu", target=None,
            peak: Optional[Tuple[Callable[[], object], float]] = None,
            versus: Sequence[str] = ()) -> List[Row]:
    """One row per matmul of ``suite`` ("bmm", "dense") and one for the chain ("chain_mm1" ->
    exp -> "chain_mm2"); each side one warm-up, then ``repeat`` samples. With
    ``metaschedule`` = N > 0, MetaSchedule's own tuning (N trials per matmul) is a third
    method of every row. ``target``: an llvm target to build for instead of the host's (AVX2
    code on an AVX-512 host, say). ``peak`` ((call, flops per call): ``bench.peak``'s FMA
    peak kernel) is sampled in turn with every row, its rates in ``row.peak_gflops``.
    ``versus``: templates whose fallbacks are sampled in turn with each row they apply to
    (but its own), their medians in ``row.others``."""
    import tvm  # noqa: PLC0415
    from ..dispatch import apply_history_best, build  # noqa: PLC0415
    from ..strategy import templates_for  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    from ..measure.check import matmul_operands, random_inputs  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from ..codegen import use_host_cores  # noqa: PLC0415
    use_host_cores()  # both sides on every core (numpy's BLAS uses them too)
    target = target or host_cpu_target()
    dev = tvm.cpu(0)
    rng = np.random.default_rng(0)
    logs = [log] if log and os.path.exists(log) else []
    rows, kernels = [], {}
    with apply_history_best(logs) as ctx:
        for name, wl in suite.items():
            kernels[name] = build(wl, target)
    print(ctx.report)
    ms = metaschedule_kernels(suite, target, trials=metaschedule, work_dir=ms_workdir) \
        if metaschedule else {}

    def tvm_args(wl, a, b):
        return (host_tensor(a, dev), host_tensor(b, dev),
                host_empty(wl.out_shape, wl.out_dtype, dev))

    for name in [n for n in suite if not n.startswith("chain")]:
        wl, k = suite[name], kernels[name]
        a, b = random_inputs(wl, rng)
        a_mk, b_kn = matmul_operands(wl, a, b)  # views: numpy's own NT path
        args = tvm_args(wl, a, b)
        k(*args)
        np.testing.assert_allclose(args[2].numpy(), np.matmul(a_mk, b_kn), rtol=1e-3, atol=1e-3)
        calls = {"numpy": lambda: np.matmul(a_mk, b_kn), "ours": lambda: k(*args)}
        if name in ms:
            ms_args = tvm_args(wl, a, b)
            ms[name](*ms_args)
            np.testing.assert_allclose(ms_args[2].numpy(), args[2].numpy(), rtol=1e-3,
                                       atol=1e-3)
            calls["MetaSchedule"] = lambda: ms[name](*ms_args)
        same = k.choice.tuned and k.task.is_fallback(k.choice.config)
        if k.choice.tuned and not same:  # the same template's untuned build (tuned/fallback;
            fb = build_fallback(k.task)  # a record of the fallback's config: one kernel)
            calls["fallback"] = lambda: fb(*args)
        others = [t.name for t in templates_for(wl, target)
                  if t.name in versus and t.name != k.task.name]
        for t in others:  # other templates' fallbacks (``bench.shapes --versus``)
            other = build_fallback(Task(wl, target, template=t))
            other(*args)
            np.testing.assert_allclose(args[2].numpy(), np.matmul(a_mk, b_kn), rtol=1e-3,
                                       atol=1e-3)
            calls[t] = functools.partial(other, *args)
        samples = _in_turn(calls, repeat, peak)
        ref, ours = median_ms(samples["numpy"]), median_ms(samples["ours"])
        row = Row(f"{name} {wl}", wl.flop, *ref, *ours,
                  f"{k.task.name} " + ("tuned" if k.choice.tuned else "fallback"))
        row.ref_best_ms = float(np.min(samples["numpy"])) * 1e3
        row.ours_best_ms = float(np.min(samples["ours"])) * 1e3
        if "fallback" in samples or same:
            row.fallback_ms = median_ms(samples["fallback" if not same else "ours"])[0]
            row.fallback_same = same
        if "MetaSchedule" in samples:
            row.ms_ms = median_ms(samples["MetaSchedule"])[0]
        row.peak_gflops = peak_rates(peak, samples)
        row.others = {t: median_ms(samples[t])[0] for t in others} or None
        rows.append(row)

    # The chain X . W1 -> exp -> . W2 (both matmuls tuned, exp a separate vectorised kernel).
    if "chain_mm1" not in suite or "chain_mm2" not in suite:  # --only without the chain
        return rows
    w1, w2 = suite["chain_mm1"], suite["chain_mm2"]
    x = (rng.uniform(-1, 1, (w1.M, w1.K)) / np.sqrt(w1.K)).astype("float32")
    m1 = rng.uniform(-1, 1, (w1.K, w1.N)).astype("float32")
    m2 = rng.uniform(-1, 1, (w2.K, w2.N)).astype("float32")
    exp_k = exp_kernel((w1.M, w1.N), target)
    tx, tm1, tm2 = (host_tensor(v, dev) for v in (x, m1, m2))
    h = host_empty((w1.M, w1.N), "float32", dev)
    e = host_empty((w1.M, w1.N), "float32", dev)
    out = host_empty((w2.M, w2.N), "float32", dev)
    k1, k2, fexp = kernels["chain_mm1"], kernels["chain_mm2"], exp_k.mod["main"]

    def chain():
        k1(tx, tm1, h)
        fexp(h, e)
        k2(e, tm2, out)

    chain()
    np.testing.assert_allclose(out.numpy(), np.exp(x @ m1) @ m2, rtol=1e-3, atol=1e-2)
    calls = {"numpy": lambda: np.exp(x @ m1) @ m2, "ours": chain}
    if ms:
        ms_out = host_empty((w2.M, w2.N), "float32", dev)

        def ms_chain():
            ms["chain_mm1"](tx, tm1, h)
            fexp(h, e)
            ms["chain_mm2"](e, tm2, ms_out)

        ms_chain()
        np.testing.assert_allclose(ms_out.numpy(), out.numpy(), rtol=1e-3, atol=1e-2)
        calls["MetaSchedule"] = ms_chain
    samples = _in_turn(calls, repeat, peak)
    ref, ours = median_ms(samples["numpy"]), median_ms(samples["ours"])
    tuned = "tuned" if k1.choice.tuned and k2.choice.tuned else "fallback"
    rows.append(Row(f"chain {w1.M}x{w1.K}.{w1.K}x{w1.N} -> exp -> .{w2.K}x{w2.N}",
                    w1.flop + w2.flop, *ref, *ours, tuned))
    rows[-1].ref_best_ms = float(np.min(samples["numpy"])) * 1e3
    rows[-1].ours_best_ms = float(np.min(samples["ours"])) * 1e3
    if "MetaSchedule" in samples:
        rows[-1].ms_ms = median_ms(samples["MetaSchedule"])[0]
    rows[-1].peak_gflops = peak_rates(peak, samples)
    return rows


#: Seconds of idle time before each sample: OpenBLAS's workers spin for a while after a call,
#: and TVM's pool likewise; a method sampled right after the other finds the cores busy (a
#: 0.2 ms kernel took 3.6 ms right after a numpy matmul, 0.19 ms a second later).
IDLE_S = 0.3


#: The key of the FMA peak kernel's samples where ``_in_turn`` samples it (``peak``): a share of
#: the peak divides two rates sampled in the same turns, the median by the median and the best
#: sample by the best. On a VM whose compute moves (the peak of a 16-core Emerald Rapids VM ran
#: 1386 GFLOP/s before ``bench.peak --ladder``'s rows and 1920 after them), a peak measured
#: before or after the rows is another machine's.
PEAK = "the FMA peak kernel, in turn"


def _in_turn(calls, repeat: int, peak=None):
    """``repeat`` samples of each call, sampled in turn, each after ``IDLE_S`` of idle time;
    with ``peak`` ((call, flops per call): ``bench.peak.peak_call``) that kernel as one more
    method, its samples under ``PEAK`` (``peak_rates``)."""
    from ..measure.timing import in_turn  # noqa: PLC0415
    calls = {**calls, PEAK: peak[0]} if peak else calls
    for fn in calls.values():
        fn()  # warm-up
    return in_turn({k: functools.partial(_one_time, fn) for k, fn in calls.items()}, repeat,
                   pause=lambda _: time.sleep(IDLE_S))


def peak_rates(peak, samples) -> Optional[Tuple[float, float]]:
    """The peak kernel's GFLOP/s (at its median sample, at its best) in the turns of
    ``samples``, taken out of them; None without ``peak``."""
    if not peak:
        return None
    times = samples.pop(PEAK)
    return rates(peak[1], times)


def _one_time(fn) -> float:
    return time_calls(fn, repeat=1)[0]


def run_cpu_sweep(suite, template: str, grid, *, repeat: int, target=None) -> List[Row]:
    """``--suite cpu --sweep``: per matmul workload of ``suite``, ``template``'s fallback with
    each combination of the knob values in ``grid`` ({knob: [values]}) set on it, every kernel
    checked against numpy and sampled in turn with numpy (``_in_turn``: each sample after
    ``IDLE_S`` of idle time); a combination outside the space's rules is skipped with the
    rule. Names and values are checked for every workload before anything is built."""
    import tvm  # noqa: PLC0415
    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..measure.check import matmul_operands, random_inputs  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    use_host_cores()
    target = target or host_cpu_target()
    tasks = {n: Task(wl, target, template=template) for n, wl in suite.items()
             if not n.startswith("chain")}
    for task in tasks.values():
        check_grid(task, grid)
    rng = np.random.default_rng(0)
    rows = []
    for name, task in tasks.items():
        wl = task.workload
        a, b = random_inputs(wl, rng)
        a_mk, b_kn = matmul_operands(wl, a, b)
        want = np.matmul(a_mk, b_kn)
        calls, configs = {"numpy": lambda: np.matmul(a_mk, b_kn)}, {}
        for label, cfg in sweep_configs(name, task, grid):
            func = task.build(cfg).mod["main"]
            args = (host_tensor(a), host_tensor(b),
                    host_empty(wl.out_shape, wl.out_dtype, tvm.cpu()))
            func(*args)
            if not np.allclose(args[2].numpy(), want, rtol=1e-3, atol=1e-3):
                print(f"  {name} {label}: numerics WRONG", flush=True)
                continue
            calls[label] = functools.partial(func, *args)
            configs[label] = cfg
        samples = _in_turn(calls, repeat)
        ref = median_ms(samples["numpy"])
        for label, cfg in configs.items():
            print(f"  {name} {label}: {median_ms(samples[label])[0]:.4f} ms {cfg}", flush=True)
            rows.append(Row(f"{name} {wl} [{label}]", wl.flop, *ref, *median_ms(samples[label]),
                            task.name, ref_best_ms=min(samples["numpy"]) * 1e3))
    return rows


def build_fallback(task):
    """The untuned kernel of ``task``'s template (its fallback config), as a callable."""
    return task.build(task.fallback_config()).mod["main"]
