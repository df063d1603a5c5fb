"""Subgraph tuning against anchor tuning, and the seed-004 chain as a Relax model, in one process
(timings sampled in turn).

    python -m tvm_ext.bench.subgraph                   # --trials 16 per tuning run
    python -m tvm_ext.bench.subgraph --quick           # tiny shapes: a smoke run

1. **Subgraph vs anchor.** For each subgraph (dense + bias + relu, dense + bias + gelu, and a
   dense whose epilogue changes the output dtype: f32 -> f16), the anchor matmul is tuned
   alone and the subgraph is tuned as the fused kernel, with the same trials, tuner and seed.
   Both best configs are then built as the fused kernel, and the two are timed in turn. The
   table says whether the two configs differ, and by how much the subgraph-tuned kernel is
   faster.
2. **The seed-004 chain.** X (1024x2048) . W1 (2048x1024) -> exp -> . W2 (1024x3072), f32, is a
   Relax model. It is tuned twice, with the same total trials: as subgraph tasks (exp fused into
   the first matmul) and as bare matmuls. It is then built twice: fused with the subgraph
   records, and unfused with the bare records (exp left to TVM's own kernel). Both builds are
   checked against numpy and timed in turn with numpy.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .common import time_calls

SUBGRAPHS = [("dense", (128, 3072, 768), "NT", "bias+relu"),
             ("dense", (128, 3072, 768), "NT", "bias+gelu"),
             ("dense", (1024, 1024, 1024), "NN", "cast:float16")]
QUICK = [("dense", (32, 64, 48), "NT", "bias+relu"),
         ("dense", (32, 64, 48), "NT", "bias+gelu"),
         ("dense", (64, 64, 64), "NN", "cast:float16")]


def _tuned(task, log, trials, tuner, seed):
    from .. import record  # noqa: PLC0415
    from ..measure import MeasureOptions, RunOptions  # noqa: PLC0415
    from ..session import tune_task  # noqa: PLC0415
    t0 = time.time()
    tune_task(task, log, trials=trials, tuner=tuner, seed=seed,
              measure_options=MeasureOptions(run=RunOptions(number=3, repeat=3)))
    best = record.best_for(record.load(log), task.workload, task.target)
    return task.config_of_record(best.config), time.time() - t0


def subgraph_vs_anchor(cases, target, work, trials, tuner, rounds):
    import tvm  # noqa: PLC0415

    from ..measure.check import OutputCheck, kernel_inputs  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    from ..workload import Workload  # noqa: PLC0415

    print(f"\nsubgraph vs anchor ({trials} {tuner} trials each, the same seed; ms per call of "
          "the fused kernel):")
    print(f"  {'subgraph':<40} {'anchor-tuned':>12} {'subgraph-tuned':>14} {'speedup':>8} "
          "configs")
    for i, (op, shape, layout, epi) in enumerate(cases):
        wl = Workload.create(op, shape, layout=layout, epilogue=epi)
        sub_task = Task(wl, target)
        anchor_task = Task(wl.anchor, target, template=sub_task.name)
        anchor_cfg, _ = _tuned(anchor_task, work / f"anchor_{i}.json", trials, tuner, i)
        sub_cfg, _ = _tuned(sub_task, work / f"sub_{i}.json", trials, tuner, i)
        inputs = kernel_inputs(wl, np.random.default_rng(i))
        check = OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:])
        dev = tvm.cpu(0) if target.kind.name == "llvm" else tvm.cuda(0)
        args = [tvm.runtime.tensor(x, dev) for x in inputs] + \
            [tvm.runtime.empty(wl.out_shape, wl.final_dtype, dev)]
        kernels = {}
        for name, cfg in (("anchor", anchor_cfg), ("subgraph", sub_cfg)):
            mod = sub_task.build(sub_task.config_of_record(cfg)).mod
            mod["main"](*args)
            wrong = check(args[-1].numpy())
            if wrong:
                raise SystemExit(f"{wl} with the {name}-tuned config: {wrong}")
            kernels[name] = mod
        times = {k: [] for k in kernels}
        for _ in range(rounds):
            for k, mod in kernels.items():
                times[k] += time_calls(lambda: mod["main"](*args), repeat=1)
        a, s = (float(np.median(times[k])) * 1e3 for k in ("anchor", "subgraph"))
        same = anchor_cfg.to_json_dict()["entity"] == sub_cfg.to_json_dict()["entity"]
        print(f"  {str(wl):<40} {a:>12.3f} {s:>14.3f} {a / s:>8.2f} "
              f"{'same' if same else 'differ'}", flush=True)
        if not same:
            print(f"    anchor-tuned:   {anchor_cfg}\n    subgraph-tuned: {sub_cfg}")


def chain_model(M, K, N1, N2):
    from tvm import relax  # noqa: PLC0415
    from tvm.script import relax as R  # noqa: PLC0415
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((M, K), "float32"))
    w1 = relax.Var("w1", R.Tensor((K, N1), "float32"))
    w2 = relax.Var("w2", R.Tensor((N1, N2), "float32"))
    with bb.function("main", [x, w1, w2]):
        with bb.dataflow():
            h = bb.emit(R.exp(R.matmul(x, w1)))
            out = bb.emit_output(R.matmul(h, w2))
        bb.emit_func_output(out)
    return bb.get()


def chain(dims, target, work, trials, tuner, rounds):
    import tvm  # noqa: PLC0415
    from tvm import relax  # noqa: PLC0415

    from ..dispatch import apply_history_best  # noqa: PLC0415
    from ..measure import MeasureOptions, RunOptions  # noqa: PLC0415
    from ..relax import build, tune_model  # noqa: PLC0415

    M, K, N1, N2 = dims
    mod = chain_model(M, K, N1, N2)
    print(f"\nthe chain {M}x{K} . {K}x{N1} -> exp -> . {N1}x{N2} (f32), {trials} trials per "
          "model:")
    options = MeasureOptions(run=RunOptions(number=3, repeat=3))
    logs = {}
    for name, sub in (("subgraph", True), ("bare", False)):
        logs[name] = work / f"chain_{name}.json"
        t0 = time.time()
        for wl, n, budget, s in tune_model(mod, target, trials=trials, log=logs[name],
                                           tuner=tuner, subgraphs=sub, min_trials=4,
                                           measure_options=options):
            print(f"  {name} task {wl}: {budget} trials, best {s.best_gflops:.1f} GFLOP/s")
        print(f"  {name} tuning {time.time() - t0:.0f} s")
    exes = {}
    with apply_history_best(str(logs["subgraph"])) as ctx:
        exes["fused (subgraph-tuned)"] = build(mod, target, fuse_epilogue=True)
    print("  " + "\n  ".join(str(ctx.report).splitlines()))
    with apply_history_best(str(logs["bare"])) as ctx:
        exes["unfused (matmul-tuned)"] = build(mod, target, strategy=True)
    print("  " + "\n  ".join(str(ctx.report).splitlines()))
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.05, 0.05, (M, K)).astype("float32")
    w1 = rng.uniform(-0.05, 0.05, (K, N1)).astype("float32")
    w2 = rng.uniform(-1, 1, (N1, N2)).astype("float32")
    want = np.exp(x.astype(np.float64) @ w1) @ w2
    dev = tvm.cpu(0)
    targs = [tvm.runtime.tensor(a, dev) for a in (x, w1, w2)]
    calls = {"numpy": lambda: np.exp(x @ w1) @ w2}
    for name, ex in exes.items():
        vm = relax.VirtualMachine(ex, dev)["main"]
        got = vm(*targs).numpy()
        if not np.allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max()):
            raise SystemExit(f"the {name} build gives a wrong result")
        calls[name] = (lambda vm=vm: vm(*targs))
    times = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            time.sleep(0.3)  # the last method's threads go idle (numpy's BLAS spins)
            times[k] += time_calls(fn, repeat=1, min_s=0.1)
    ref = float(np.median(times["numpy"]))
    print("  all three match numpy (float64 reference)")
    for k, v in times.items():
        t = float(np.median(v))
        print(f"  {k:<24} {t * 1e3:9.3f} ms   numpy / this = {ref / t:.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.subgraph",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--tuner", default="xgb")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    p.add_argument("--workdir")
    args = p.parse_args(argv)
    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..target import describe, host_cpu_target  # noqa: PLC0415
    target = host_cpu_target()
    use_host_cores()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tvm_ext_subgraph_"))
    work.mkdir(parents=True, exist_ok=True)
    for f in work.glob("*.json"):
        f.unlink()
    print(f"{describe(target)}; workdir {work}")
    subgraph_vs_anchor(QUICK if args.quick else SUBGRAPHS, target, work, args.trials,
                       args.tuner, args.rounds)
    chain((32, 64, 48, 40) if args.quick else (1024, 2048, 1024, 3072), target, work,
          args.trials * (1 if args.quick else 3), args.tuner, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
