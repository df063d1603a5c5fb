"""Subgraph tuning against anchor tuning, and the seed-004 chain as a Relax model, in one process
(timings sampled in turn).

    python -m tvm_ext.bench.subgraph                   # --trials 16 per tuning run
    python -m tvm_ext.bench.subgraph --quick           # tiny shapes: a smoke run
    python -m tvm_ext.bench.subgraph --target cuda     # the GPU subgraphs, against torch

1. **Subgraph vs anchor.** For each subgraph (dense + bias + relu, dense + bias + gelu, and a
   dense whose epilogue changes the output dtype: f32 -> f16), the anchor matmul is tuned
   alone and the subgraph is tuned as the fused kernel, with the same trials, tuner and seed.
   Both best configs are then built as the fused kernel, and the two are timed in turn. The
   table says whether the two configs differ, and by how much the subgraph-tuned kernel is
   faster. Each is tuned over every template that applies (on CUDA: tensor cores and CUDA cores;
   for the f16 anchor also wgmma, which a fused kernel cannot use: the anchor's best record of a
   template that can fuse it applies, as ``build`` applies it).
2. **The seed-004 chain** (CPU only). X (1024x2048) . W1 (2048x1024) -> exp -> . W2
   (1024x3072), f32, is a Relax model. It is tuned twice, with the same total trials: as
   subgraph tasks (exp fused into the first matmul) and as bare matmuls. It is then built
   twice: fused with the subgraph records, and unfused with the bare records (exp left to
   TVM's own kernel). Both builds are checked against numpy and timed in turn with numpy.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..host_memory import host_empty, host_tensor
from .common import time_calls

SUBGRAPHS = [("dense", (128, 3072, 768), "NT", "bias+relu"),
             ("dense", (128, 3072, 768), "NT", "bias+gelu"),
             ("dense", (1024, 1024, 1024), "NN", "cast:float16")]
# On CUDA (issue 24): an int8 matmul requantized to int8 (the output is a quarter of the int32
# anchor's), and an f16 matmul + bias + gelu with an f16 output (the anchor writes f32).
GPU_SUBGRAPHS = [("dense", (4096, 4096, 1024), "NT", "requant:0.05", "int8"),
                 ("dense", (2048, 3072, 768), "NT", "bias+gelu+cast:float16", "float16")]
GPU_QUICK = [("dense", (256, 512, 256), "NT", "requant:0.05", "int8"),
             ("dense", (128, 256, 128), "NT", "bias+gelu+cast:float16", "float16")]
QUICK = [("dense", (32, 64, 48), "NT", "bias+relu"),
         ("dense", (32, 64, 48), "NT", "bias+gelu"),
         ("dense", (64, 64, 64), "NN", "cast:float16")]


def _tuned(wl, target, log, trials, tuner, seed):
    """Tune ``wl`` over every template that applies (one run, the budget moving to the
    winner: ``tune_templates``) into ``log``; (template and trials per template, seconds)."""
    from ..measure import MeasureOptions, RunOptions  # noqa: PLC0415
    from ..session import tune_task, tune_templates  # noqa: PLC0415
    from ..strategy import templates_for  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    t0 = time.time()
    tasks = [Task(wl, target, template=t.name) for t in templates_for(wl, target)]
    options = MeasureOptions(run=RunOptions(number=3, repeat=3))
    if len(tasks) > 1:
        s = tune_templates(tasks, log, trials=trials, tuner=tuner, seed=seed,
                           measure_options=options)
        spent = ", ".join(f"{k} {p.trials}" for k, p in s.per_template.items())
    else:
        tune_task(tasks[0], log, trials=trials, tuner=tuner, seed=seed, measure_options=options)
        spent = f"{tasks[0].name} {trials}"
    return spent, time.time() - t0


def torch_epilogue(wl, c, extras):
    """``wl``'s epilogue in torch on the matmul result ``c`` (the vendor's way: one kernel per
    op after the GEMM), as ``apply_epilogue`` computes it."""
    import torch  # noqa: PLC0415

    from ..workload import parse_epilogue  # noqa: PLC0415
    extras = iter(extras)
    for name, arg in parse_epilogue(wl.epilogue):
        if name in ("bias", "residual"):
            c = c + next(extras)
        elif name == "mul":
            c = c * next(extras)
        elif name == "relu":
            c = torch.relu(c)
        elif name in ("gelu", "gelu_tanh"):
            c = torch.nn.functional.gelu(c, approximate="tanh" if name == "gelu_tanh" else "none")
        elif name == "silu":
            c = torch.nn.functional.silu(c)
        elif name in ("exp", "tanh", "sigmoid"):
            c = getattr(torch, name)(c)
        elif name == "scale":
            c = c * float(arg)
        elif name == "cast":
            c = c.to(getattr(torch, arg))
        else:  # requant
            c = torch.clamp(torch.round(c.to(torch.float32) * float(arg)), -128, 127) \
                .to(torch.int8)
    return c


def _torch_launch(wl, inputs):
    """cuBLAS (through torch) and the epilogue's ops, on ``inputs`` (numpy)."""
    import torch  # noqa: PLC0415
    a, b, *extras = [torch.from_numpy(x).cuda() for x in inputs]
    a_mk = a.transpose(-1, -2) if wl.transpose_a else a
    b_kn = b.transpose(-1, -2) if wl.transpose_b else b
    if wl.dtype == "int8":
        return lambda: torch_epilogue(wl, torch._int_mm(a_mk, b_kn), extras)
    out = getattr(torch, wl.out_dtype)
    return lambda: torch_epilogue(wl, torch.matmul(a_mk, b_kn).to(out), extras)


def subgraph_vs_anchor(cases, target, work, trials, tuner, rounds):
    """Per subgraph: the anchor matmul and the subgraph are each tuned with ``trials`` over
    every template that applies; the fused kernel is then built as ``build`` would build it
    under each log (``choose``: the subgraph's record, or the anchor's), checked, and timed in
    turn (on CUDA also cuBLAS + torch's epilogue ops, by CUDA-graph replays)."""
    import tvm  # noqa: PLC0415

    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..measure.check import OutputCheck, kernel_inputs  # noqa: PLC0415
    from ..workload import Workload  # noqa: PLC0415

    cuda = target.kind.name == "cuda"
    print(f"\nsubgraph vs anchor ({trials} {tuner} trials each over every template that "
          "applies, the same seed; ms per call of the fused kernel):")
    for i, case in enumerate(cases):
        op, shape, layout, epi = case[:4]
        dtype = case[4] if len(case) > 4 else "float32"
        wl = Workload.create(op, shape, dtype, layout=layout, epilogue=epi)
        picks = {}
        for name, w in (("anchor", wl.anchor), ("subgraph", wl)):
            log = work / f"{name}_{i}.json"
            spent, secs = _tuned(w, target, log, trials, tuner, i)
            with apply_history_best(str(log)):
                task, choice = choose(wl, target, schedulable=True)
            how = ("the anchor's record" if choice.anchor else "its own record") \
                if choice.tuned else "the fallback (no record applies)"
            print(f"  {wl}: {name} tuned in {secs:.0f} s (trials: {spent}); the fused kernel "
                  f"takes {how}: {task.name} {choice.config}", flush=True)
            picks[name] = (task, choice)
        inputs = kernel_inputs(wl, np.random.default_rng(i))
        check = OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:])
        dev = tvm.cuda(0) if cuda else tvm.cpu(0)
        args = [host_tensor(x, dev) for x in inputs] + \
            [host_empty(wl.out_shape, wl.final_dtype, dev)]
        calls = {}
        for name, (task, choice) in picks.items():
            mod = task.build(choice.config).mod
            mod["main"](*args)
            wrong = check(args[-1].numpy())
            if wrong:
                raise SystemExit(f"{wl} with the {name}-tuned config: {wrong}")
            calls[name] = (lambda f=mod["main"]: f(*args))
        if cuda:
            from ..measure.timing import GraphSampler  # noqa: PLC0415
            calls["torch"] = _torch_launch(wl, inputs)
            samplers = {k: GraphSampler(fn) for k, fn in calls.items()}
            sample = {k: (lambda smp=smp: [smp.sample()]) for k, smp in samplers.items()}
        else:
            sample = {k: (lambda fn=fn: time_calls(fn, repeat=1)) for k, fn in calls.items()}
        times = {k: [] for k in sample}
        for _ in range(rounds):
            for k, fn in sample.items():
                times[k] += fn()
        ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        a, s = ms["anchor"], ms["subgraph"]
        same = picks["anchor"][0].name == picks["subgraph"][0].name and \
            picks["anchor"][1].config.to_json_dict()["entity"] == \
            picks["subgraph"][1].config.to_json_dict()["entity"]
        vendor = f", torch (cuBLAS + epilogue ops) {ms['torch']:.3f} ms: torch / subgraph " \
                 f"{ms['torch'] / s:.2f}" if "torch" in ms else ""
        print(f"  {str(wl):<40} anchor-tuned {a:.3f} ms, subgraph-tuned {s:.3f} ms: "
              f"{a / s:.2f}x, configs {'same' if same else 'differ'}{vendor}", flush=True)


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
    targs = [host_tensor(a, dev) for a in (x, w1, w2)]
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
    p.add_argument("--target", default=None, help="cuda: the GPU subgraphs (int8 + requantize, "
                                                   "f16 + bias + gelu), against torch; default: "
                                                   "the host CPU, then the seed-004 chain")
    args = p.parse_args(argv)
    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..target import describe, host_cpu_target, parse_target  # noqa: PLC0415
    target = host_cpu_target() if args.target is None else parse_target(args.target)
    use_host_cores()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tvm_ext_subgraph_"))
    work.mkdir(parents=True, exist_ok=True)
    for f in work.glob("*.json"):
        f.unlink()
    print(f"{describe(target)}; workdir {work}")
    if target.kind.name == "cuda":
        import torch  # noqa: PLC0415
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
        subgraph_vs_anchor(GPU_QUICK if args.quick else GPU_SUBGRAPHS, target, work,
                           args.trials, args.tuner, args.rounds)
        return 0
    subgraph_vs_anchor(QUICK if args.quick else SUBGRAPHS, target, work, args.trials,
                       args.tuner, args.rounds)
    chain((32, 64, 48, 40) if args.quick else (1024, 2048, 1024, 3072), target, work,
          args.trials * (1 if args.quick else 3), args.tuner, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
