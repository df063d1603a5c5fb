"""Fast whole-model tuning against the untuned build and a full XGB tuning, in one process:
``python -m tvm_ext.bench.fast`` (issue 21, item 4).

The model is the tutorials' MLP block (``tutorials/mlp_block_model.py``: attention-score
batch_matmuls and a two-layer MLP), or ``--model FILE``. It is tuned twice into fresh logs:

1. ``tune_model(fast=True, k=K)``: the proposer's top K configs of every matmul, one batch each;
2. ``tune_task(..., trials=T, tuner="xgb")`` on each matmul: T XGB trials per matmul.

Both measure in this process (``MeasureOptions(local=True)``, what fast tuning uses on the CPU).

Then four builds are checked against TVM's own build and timed in turn (each sample after idle
time): TVM's default pipeline, our kernels untuned (fallbacks), fast-tuned, XGB-tuned.

    python -m tvm_ext.bench.fast [--k 20] [--xgb-trials 64] [--rounds 7]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.fast",
                                description=__doc__.split("\n\n")[0])
    root = Path(__file__).resolve().parents[2]
    p.add_argument("--model", default=str(root / "tutorials" / "mlp_block_model.py"))
    p.add_argument("--k", type=int, default=20, help="configs per matmul, fast (default 20)")
    p.add_argument("--xgb-trials", type=int, default=64,
                   help="XGB trials per matmul (default 64)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--workdir")
    args = p.parse_args(argv)

    import tvm  # noqa: PLC0415
    from tvm import relax  # noqa: PLC0415

    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..dispatch import apply_history_best  # noqa: PLC0415
    from ..host_memory import host_tensor  # noqa: PLC0415
    from ..measure import MeasureOptions  # noqa: PLC0415
    from ..session import tune_task  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    from ..relax import build, extract_tasks, load_model, tune_model  # noqa: PLC0415
    from ..target import describe, host_cpu_target  # noqa: PLC0415
    from .common import time_calls  # noqa: PLC0415
    from .cpu import IDLE_S  # noqa: PLC0415

    target = host_cpu_target()
    threads = use_host_cores()
    mod = load_model(args.model)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tvm_ext_fast_"))
    work.mkdir(parents=True, exist_ok=True)
    tasks = extract_tasks(mod, target)
    print(f"{describe(target)} on {threads} threads; model {args.model}: {len(tasks)} matmuls")
    logs, tuning_s = {}, {}
    for name in ("fast", "xgb"):
        logs[name] = work / f"{name}.json"
        if logs[name].exists():
            os.remove(logs[name])
        t0 = time.time()
        if name == "fast":
            rows = [(wl, s) for wl, _, _, s in
                    tune_model(mod, target, log=logs[name], fast=True, k=args.k)]
        else:  # the same measurer as fast's on the CPU (in this process), T trials per matmul
            rows = [(wl, tune_task(Task(wl, target), logs[name], trials=args.xgb_trials,
                                   tuner="xgb", measure_options=MeasureOptions(local=True)))
                    for wl, _ in tasks]
        tuning_s[name] = time.time() - t0
        per = ", ".join(f"{wl.shape_str()} {s.trials} in {s.elapsed:.1f}s" for wl, s in rows)
        print(f"{name}: tuned in {tuning_s[name]:.1f}s ({per})", flush=True)

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal([int(d) for d in prm.ty.shape.values]).astype("float32") * 0.5
          for prm in mod["main"].params]
    dev = tvm.cpu(0)
    targs = [host_tensor(x, dev) for x in xs]
    exes = {"tvm default": tvm.compile(mod, target=target)}
    with apply_history_best([]):
        exes["untuned (fallbacks)"] = build(mod, target)
    for name in ("fast", "xgb"):
        with apply_history_best(str(logs[name])):
            exes[f"{name}-tuned"] = build(mod, target)
    calls, want = {}, None
    for name, ex in exes.items():
        vm = relax.VirtualMachine(ex, dev)["main"]
        got = [o.numpy() for o in vm(*targs)]
        if want is None:
            want = got
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        calls[name] = (lambda vm=vm: vm(*targs))
    times = {k: [] for k in calls}
    for _ in range(args.rounds):
        for k, fn in calls.items():
            time.sleep(IDLE_S)
            times[k] += time_calls(fn, repeat=1)
    ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    print(f"all builds match TVM's; ms per call (median of {args.rounds}), speed-up over the "
          "untuned build, and tuning time:")
    base = ms["untuned (fallbacks)"]
    for k, v in ms.items():
        tuned = f"  tuning {tuning_s[k.split('-')[0]]:.1f}s" if k.endswith("-tuned") else ""
        print(f"  {k:<22} {v:8.4f} ms   untuned / this {base / v:5.2f}{tuned}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
