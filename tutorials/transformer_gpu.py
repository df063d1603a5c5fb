"""Tutorial: a transformer block from PyTorch, through Relax, with tuned tvm_ext matmuls on a GPU.

    python tutorials/transformer_gpu.py [--trials 16] [--log transformer.json] [--subgraphs]
                                        [--fast]

1. a PyTorch block (q/k/v/o projections, attention batch_matmuls, a ReLU MLP),
2. ``torch.export`` -> ``tvm.relax.frontend.torch.from_exported_program`` -> a Relax IRModule,
3. ``tvm_ext.relax.extract_tasks``: the matmul workloads and how often each runs,
4. ``tvm_ext.relax.tune_model``: the XGB tuner on each, one log, budget split by weight,
5. build three ways: TVM's default pipeline (dlight schedules every kernel), ``tvm_ext.relax.build``
   under ``apply_history_best`` (our kernels for the matmuls, dlight for the rest), and the same
   with ``fuse_epilogue=True`` (residual adds and the ReLU computed in our kernels); with
   ``--subgraphs`` a fourth: the fused matmuls tuned as they run (subgraph tasks); with
   ``--fast`` one more: the fused matmuls tuned with the proposer's top 20 each (seconds),
6. check them against torch and time them against torch eager (TF32 off).

Needs a CUDA GPU and torch.
"""
import argparse
import time

import numpy as np


def make_block(torch, dim=512, heads=8, hidden=2048):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
            self.up = nn.Linear(dim, hidden, bias=False)
            self.down = nn.Linear(hidden, dim, bias=False)

        def forward(self, x):  # x: [seq, dim]
            s = x.shape[0]
            q = self.q(x).reshape(s, heads, dim // heads).permute(1, 0, 2)
            k = self.k(x).reshape(s, heads, dim // heads).permute(1, 2, 0)
            v = self.v(x).reshape(s, heads, dim // heads).permute(1, 0, 2)
            p = torch.softmax(torch.bmm(q, k) * (dim // heads) ** -0.5, dim=-1)
            a = torch.bmm(p, v).permute(1, 0, 2).reshape(s, dim)
            h = x + self.o(a)
            return h + self.down(torch.relu(self.up(h)))

    return Block()


def main(argv=None):
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    import tvm_ext
    import tvm_ext.relax as tr
    from tvm_ext.target import default_target

    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=16 * 6)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--log", default="transformer.json")
    p.add_argument("--subgraphs", action="store_true",
                   help="also tune the fused subgraphs (matmul + residual / ReLU) as they run, "
                        "with the same trials, into LOG's _subgraphs twin, and build with them")
    p.add_argument("--fast", action="store_true",
                   help="also tune the fused subgraphs fast (the proposer's top 20 each, one "
                        "parallel batch) into LOG's _fast twin, and build with them")
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    block = make_block(torch).eval()
    x = torch.randn(args.seq, 512)
    with torch.no_grad():
        ep = torch.export.export(block, (x,))
        mod = from_exported_program(ep, unwrap_unit_return_tuple=True)
    target = default_target()
    tasks = tr.extract_tasks(mod, target)
    print("matmul tasks:")
    for wl, n in tasks:
        print(f"  {wl}  x{n}")
    if args.trials:  # --trials 0 reuses an existing log
        t0 = time.time()
        for wl, n, budget, s in tr.tune_model(mod, target, trials=args.trials, log=args.log,
                                              tuner="xgb"):
            print(f"  tuned {wl}: {s.trials} trials, best {s.best_gflops:.0f} GFLOP/s")
        print(f"tuning took {time.time() - t0:.0f}s")
    sub_log = args.log.replace(".json", "") + "_subgraphs.json"
    if args.subgraphs and args.trials:
        t0 = time.time()
        for wl, n, budget, s in tr.tune_model(mod, target, trials=args.trials, log=sub_log,
                                              tuner="xgb", subgraphs=True):
            print(f"  tuned {wl}: {s.trials} trials, best {s.best_gflops:.0f} GFLOP/s"
                  + (f" on {s.best_template}" if s.best_template else ""))
        print(f"subgraph tuning took {time.time() - t0:.0f}s")
    fast_log = args.log.replace(".json", "") + "_fast.json"
    if args.fast:
        t0 = time.time()
        for wl, n, budget, s in tr.tune_model(mod, target, log=fast_log, fast=True,
                                              subgraphs=True):
            print(f"  fast {wl}: {s.trials} trials, best {s.best_gflops:.0f} GFLOP/s"
                  + (f" on {s.best_template}" if s.best_template else ""))
        print(f"fast tuning took {time.time() - t0:.0f}s")

    dev = tvm.cuda(0)
    with tvm_ext.apply_history_best(args.log) as ctx:
        ours = tr.build(mod, target)
    print(ctx.report)
    with tvm_ext.apply_history_best(args.log):
        fused = tr.build(mod, target, fuse_epilogue=True)
    builds = [("tvm default (dlight)", tvm.compile(mod, target=target)),
              ("tvm_ext tuned", ours), ("tvm_ext tuned, fused", fused)]
    if args.subgraphs:
        with tvm_ext.apply_history_best(sub_log) as ctx:
            builds.append(("tvm_ext subgraph-tuned", tr.build(mod, target, fuse_epilogue=True)))
        print(ctx.report)
    if args.fast:
        with tvm_ext.apply_history_best(fast_log) as ctx:
            builds.append(("tvm_ext fast-tuned", tr.build(mod, target, fuse_epilogue=True)))
        print(ctx.report)

    xt = tvm.runtime.tensor(x.numpy(), dev)
    with torch.no_grad():
        want = block.cuda()(x.cuda()).cpu().numpy()
    times = {}
    for name, ex in builds:
        vm = relax.VirtualMachine(ex, dev)
        got = vm["main"](xt)
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-3, atol=2e-3)
        timer = vm.time_evaluator("main", dev, number=20, repeat=7)
        times[name] = float(np.median(timer(xt).results))
    xc = x.cuda()
    with torch.no_grad():
        for _ in range(5):
            block(xc)
        samples = []
        for _ in range(7):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                block(xc)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 20 / 1e3)
    times["torch eager"] = float(np.median(samples))
    print(f"{'':<24}{'ms':>9}")
    for name, t in times.items():
        print(f"{name:<24}{t * 1e3:>9.4f}")
    return times


if __name__ == "__main__":
    main()
