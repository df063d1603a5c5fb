"""A transformer block as TVM's frontend writes it: ``python -m tvm_ext.bench.model``.

``tvm.relax.frontend.nn``: four projections with bias (``nn.Linear``: matmul(x, permute_dims(W)),
or with ``--onnx`` a weight stored [K, N] times x, as ONNX's MatMul keeps it), attention on
[B, H, S, D/H] (softmax(q k^T / sqrt(D/H)) v), a GELU (tanh) MLP of 4D (``--mlp swiglu``:
LLaMA's gated one, down(silu(gate(h)) * up(h))) and two residual adds;
no layer norms. Its weights are constants of the model (``BindParams``, as a deployed model has
them); its input [B, S, D] activations. Built by TVM's own pipeline (``tvm.compile``: on the
CPU its matmuls are loop nests nobody scheduled) and by ``tvm_ext.relax.build`` under ``--log``
(``--fuse``: also with ``fuse_epilogue``; ``--tune N``: the model's tasks first tuned into the
log by ``tune_model``, N trials in all), each checked against numpy's same math. Ours and
numpy's are sampled in turn (``cpu._in_turn``); TVM's own build, seconds a call, is sampled
``--tvm-repeat`` times alone (0: not built).

    python -m tvm_ext.bench.model [--batch 4] [--seq 128] [--dim 768] [--heads 12] [--onnx]
        [--mlp swiglu] [--dtype float32|float16] [--target llvm|cuda] [--repeat 7]
        [--tvm-repeat 1] [--log L] [--tune N | --fast] [--fuse] [--cuda-graph] [--profile]

``--target cuda``: the same block on the GPU: torch's (``torch_block``: cuBLAS's GEMMs, eager and
as one CUDA graph; rows only where torch is installed) and TVM's own build (dlight schedules it)
against ours with the matmuls on views (``build(..., views=True)``), all sampled in turn; each
row is printed with its ratio against every one of them; numpy only checks. ``--cuda-graph``:
TVM's own and ours also built with CUDA graphs (``build(..., cuda_graph=True)``); ``--profile``:
every row's kernels with their GPU time per call (``gpu_kernels``: a kernel launched early
counts from the end of the one before it).
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import time

import numpy as np


def block_module(batch: int, seq: int, dim: int, heads: int, onnx: bool = False,
                 dtype: str = "float32", mlp: str = "gelu"):
    """(the Relax module of the block, its named weights {name: numpy array}), the weights
    bound into the module as constants. ``mlp``: "gelu" (GPT-2's: down(gelu_tanh(up(h)))) or
    "swiglu" (LLaMA's gated one: down(silu(gate(h)) * up(h)))."""
    from tvm import relax  # noqa: PLC0415
    from tvm.relax.frontend import nn  # noqa: PLC0415
    from tvm.relax.frontend.nn import op  # noqa: PLC0415

    class KN(nn.Module):  # ONNX's MatMul + Add: the weight stored [K, N]
        def __init__(self, k, n):
            self.weight = nn.Parameter((k, n), dtype)
            self.bias = nn.Parameter((n,), dtype)

        def forward(self, x):
            return op.matmul(x, self.weight) + self.bias

    def linear(k, n):
        return KN(k, n) if onnx else nn.Linear(k, n, dtype=dtype)

    hd = dim // heads

    class Block(nn.Module):
        def __init__(self):
            self.q, self.k, self.v, self.o = (linear(dim, dim) for _ in range(4))
            self.up, self.down = linear(dim, 4 * dim), linear(4 * dim, dim)
            if mlp == "swiglu":
                self.gate = linear(dim, 4 * dim)

        def forward(self, x):
            def split(t):
                return op.permute_dims(op.reshape(t, [batch, seq, heads, hd]), [0, 2, 1, 3])
            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            s = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * (1.0 / hd ** 0.5)
            a = op.matmul(op.softmax(s, axis=-1), v)
            h = x + self.o(op.reshape(op.permute_dims(a, [0, 2, 1, 3]), [batch, seq, dim]))
            if mlp == "swiglu":
                return h + self.down(op.silu(self.gate(h)) * self.up(h))
            return h + self.down(op.gelu(self.up(h), approximate="tanh"))

    mod, params = Block().export_tvm(
        spec={"forward": {"x": nn.spec.Tensor([batch, seq, dim], dtype)}})
    rng = np.random.default_rng(0)
    weights = {name: (rng.standard_normal([int(d) for d in p.shape]) /
                      np.sqrt(p.shape[0] if "bias" not in name else 1) * 0.5).astype(dtype)
               for name, p in params}
    mod = relax.transform.BindParams("forward", weights)(mod)
    return mod, weights


def numpy_block(x, w, heads: int, onnx: bool = False, mlp: str = "gelu"):
    """The block's math in numpy (``w``: ``block_module``'s weights), the heads made
    contiguous (on a transposed view np.matmul of 4-D operands takes no BLAS path: 4x
    slower)."""
    batch, seq, dim = x.shape
    hd = dim // heads

    def linear(name, t):
        weight = w[f"{name}.weight"]
        return t @ (weight if onnx else weight.T) + w[f"{name}.bias"]

    def split(t):
        return np.ascontiguousarray(t.reshape(batch, seq, heads, hd).transpose(0, 2, 1, 3))
    q, k, v = (split(linear(n, x)) for n in "qkv")
    s = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) * np.float32(1.0 / hd ** 0.5)
    p = np.exp(s - s.max(-1, keepdims=True))
    a = (p / p.sum(-1, keepdims=True)) @ v
    h = x + linear("o", a.transpose(0, 2, 1, 3).reshape(batch, seq, dim))
    u = linear("up", h)
    if mlp == "swiglu":
        g = linear("gate", h)
        return h + linear("down", g / (1 + np.exp(-g)) * u)
    g = u * u  # GELU (tanh) in place, u ** 3 never taken (numpy's float32 power: 90x slower)
    g *= np.float32(0.044715)
    g += 1
    g *= u * np.float32(np.sqrt(2 / np.pi))
    np.tanh(g, out=g)
    g += 1
    g *= u * np.float32(0.5)
    return h + linear("down", g)


#: torch's rows of ``--target cuda`` (cuBLAS's GEMMs under them).
TORCH_EAGER = "torch eager (cuBLAS)"
TORCH_GRAPH = "torch, one CUDA graph (cuBLAS)"


def torch_block(torch, x, w, heads: int, onnx: bool = False, mlp: str = "gelu"):
    """A call of the block's math in torch on the GPU (``x``, ``w`` numpy as ``numpy_block``
    takes them, moved to the GPU once): its projections ``F.linear`` (cuBLAS), attention by
    ``torch.matmul`` of the heads (cuBLAS's batched GEMMs), TF32 off. Returns (fn() -> the
    output tensor, the same graph captured as one CUDA graph: fn() replays it)."""
    F = torch.nn.functional
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    xt = torch.from_numpy(x).to(dev)
    wt = {k: torch.from_numpy(v).to(dev) for k, v in w.items()}
    batch, seq, dim = x.shape
    hd = dim // heads

    def linear(name, t):
        weight = wt[f"{name}.weight"]
        return (t @ weight + wt[f"{name}.bias"]) if onnx else \
            F.linear(t, weight, wt[f"{name}.bias"])

    def split(t):
        return t.reshape(batch, seq, heads, hd).transpose(1, 2)

    def block():
        with torch.no_grad():
            q, k, v = (split(linear(n, xt)) for n in "qkv")
            p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (1.0 / hd ** 0.5), dim=-1)
            a = torch.matmul(p, v).transpose(1, 2).reshape(batch, seq, dim)
            h = xt + linear("o", a)
            if mlp == "swiglu":
                return h + linear("down", F.silu(linear("gate", h)) * linear("up", h))
            return h + linear("down", F.gelu(linear("up", h), approximate="tanh"))

    stream = torch.cuda.Stream()  # capture after warm-up calls on a side stream, as torch says
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            block()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = block()

    def replay():
        graph.replay()
        return out
    return block, replay


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--onnx", action="store_true", help="weights stored [K, N], as ONNX's MatMul")
    p.add_argument("--mlp", default="gelu", choices=("gelu", "swiglu"),
                   help="GPT-2's MLP (gelu) or LLaMA's gated one: down(silu(gate(h)) * up(h))")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    p.add_argument("--target", default="llvm", help="llvm (the host's CPU) or cuda")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--tvm-repeat", type=int, default=1,
                   help="CPU: samples of TVM's own build, alone (0: not built)")
    p.add_argument("--log", help="default: the shipped log of the target's kind")
    p.add_argument("--tune", type=int, default=0, metavar="N",
                   help="tune the model's tasks into --log first (N trials in all)")
    p.add_argument("--fast", action="store_true",
                   help="tune the model's tasks (and with --fuse its subgraphs) fast first")
    p.add_argument("--fuse", action="store_true", help="also build with fuse_epilogue")
    p.add_argument("--cuda-graph", action="store_true",
                   help="--target cuda: also build ours and TVM's own with CUDA graphs")
    p.add_argument("--profile", action="store_true",
                   help="--target cuda: each row's kernels and their GPU time (torch.profiler)")
    args = p.parse_args(argv)
    from ..errors import TvmExtError  # noqa: PLC0415
    if args.dim % args.heads or min(args.batch, args.seq, args.dim, args.repeat) < 1:
        raise TvmExtError(f"--dim ({args.dim}) must be a multiple of --heads ({args.heads}), "
                          "--batch, --seq and --repeat at least 1")
    if args.target not in ("llvm", "cuda"):
        raise TvmExtError(f"--target {args.target!r}: llvm or cuda")
    if args.dtype != "float32" and args.target == "llvm":
        raise TvmExtError(f"--dtype {args.dtype} is for --target cuda (the CPU templates are "
                          "float32)")
    if (args.cuda_graph or args.profile) and args.target != "cuda":
        raise TvmExtError("--cuda-graph and --profile are for --target cuda")
    if args.profile and importlib.util.find_spec("torch") is None:
        raise TvmExtError("--profile reads the kernels' times with torch.profiler: "
                          "pip install torch")
    if (args.tune or args.fast) and not args.log:
        raise TvmExtError("--tune / --fast write records: name a --log of your own (the "
                          "shipped logs stay as they are)")

    import tvm  # noqa: PLC0415
    from tvm import relax  # noqa: PLC0415

    from ..codegen import pass_options, use_host_cores  # noqa: PLC0415
    from ..dispatch import apply_history_best  # noqa: PLC0415
    from ..host_memory import host_tensor  # noqa: PLC0415
    from ..relax import build, extract_tasks, tune_model  # noqa: PLC0415
    from ..relax.apply import CUDA_GRAPH  # noqa: PLC0415
    from ..target import default_target, host_cpu_target  # noqa: PLC0415
    from .common import median_best  # noqa: PLC0415
    from .cpu import _in_turn  # noqa: PLC0415
    cpu = args.target == "llvm"
    target = host_cpu_target() if cpu else default_target()
    if not cpu and target.kind.name != "cuda":
        raise TvmExtError("--target cuda: no CUDA GPU is visible")
    log = args.log or ("logs/llvm_x86.json" if cpu else "logs/cuda_sm90.json")
    dev = tvm.cpu() if cpu else tvm.cuda(0)
    mod, w = block_module(args.batch, args.seq, args.dim, args.heads, args.onnx, args.dtype,
                          args.mlp)
    x = np.random.default_rng(1).standard_normal(
        (args.batch, args.seq, args.dim)).astype(args.dtype)
    w32 = {k: v.astype("float32") for k, v in w.items()}
    want = numpy_block(x.astype("float32"), w32, args.heads, args.onnx, args.mlp)
    tol = 2e-3 if args.dtype == "float32" else 3e-2
    print(f"block B={args.batch} S={args.seq} D={args.dim} H={args.heads} {args.dtype} "
          f"({'weights [K, N], ONNX' if args.onnx else 'nn.Linear'}, {args.mlp} MLP) on {target}"
          + (f", {use_host_cores()} threads" if cpu else "") + "; its matmul tasks:")
    for wl, n in extract_tasks(mod, target, views=True):
        print(f"  {wl} x{n}")
    for subgraphs in (False, True) if args.fuse else (False,):
        if args.tune or args.fast:
            tune_model(mod, target, trials=args.tune or None, fast=args.fast, log=log,
                       subgraphs=subgraphs, views=True)
    arg = host_tensor(x) if cpu else tvm.runtime.tensor(x, dev)

    def made(ex):
        main = relax.VirtualMachine(ex, dev)["forward"]
        np.testing.assert_allclose(main(arg).numpy().astype("float32"), want, rtol=tol,
                                   atol=tol)

        def call():
            main(arg)
            dev.sync()
        return call

    graphs = (False, True) if args.cuda_graph else (False,)
    calls = {"numpy": functools.partial(numpy_block, x, w, args.heads, args.onnx, args.mlp)} \
        if cpu else _torch_calls(x, w, args.heads, args.onnx, want, tol, args.mlp)
    for graph in () if cpu else graphs:
        with pass_options({CUDA_GRAPH: True} if graph else {}):
            calls[OWN + (GRAPHS if graph else "")] = made(tvm.compile(mod, target=target))
    for fuse in (False, True) if args.fuse else (False,):
        for graph in graphs:
            with apply_history_best([log]) as ctx:
                ex = build(mod, target, fuse_epilogue=fuse, views=True, cuda_graph=graph)
            if not graph:
                print(ctx.report)
            calls["tvm_ext" + (", fused epilogues" if fuse else "")
                  + (GRAPHS if graph else "")] = made(ex)
    rows = {k: median_best(v, 1e3) for k, v in _in_turn(calls, args.repeat).items()}
    if cpu and args.tvm_repeat:
        own = made(tvm.compile(mod, target=target))
        samples = []
        for _ in range(args.tvm_repeat):
            t0 = time.perf_counter()
            own()
            samples.append(time.perf_counter() - t0)
        rows["TVM's own build (tvm.compile), alone"] = median_best(samples, 1e3)
    refs = list(rows)[:1] if cpu else [k for k in rows if not k.startswith("tvm_ext")]
    for name, (med, best) in rows.items():
        print(f"{name:<44} {med:8.3f} ms (best {best:.3f})  " + "  ".join(
            f"{REF_LABELS.get(r, r.split(' (')[0])} / it {rows[r][0] / med:6.3f}" for r in refs))
    if args.profile:
        print_profiles(calls, rows)
    return 0


def print_profiles(calls: dict, rows: dict, kernels_of=None):
    """``--profile``: each row's kernels (``kernels_of(call)``, by default ``gpu_kernels``)
    and the rest of its median call (``rows``: {row: (median ms, best ms)}, sampled in turn):
    launches, the VM's work, the GPU idle between kernels."""
    for name, fn in calls.items():
        print(f"\n{name}: its kernels, GPU time per call after the kernel before each "
              "ended (torch.profiler; their spans where launched early)")
        kernels = (kernels_of or gpu_kernels)(fn)
        for kernel, count, us, span in kernels:
            longer = f" (span {span:.1f})" if span > us * 1.02 + 0.05 else ""
            print(f"  {us:8.1f} us  x{count:<3} {kernel[:90]}{longer}")
        call_us = rows[name][0] * 1e3  # less "(all kernels)", the last
        print(f"  {call_us - kernels[-1][2]:8.1f} us  the rest of the call's median "
              f"({call_us:.1f} us): launches and idle time between kernels")


def gpu_kernels(fn, calls: int = 20):
    """[(kernel name, launches per call, GPU microseconds per call, microseconds of its spans
    per call)] of ``fn()``'s kernels, most time first, over ``calls`` calls under
    ``torch.profiler`` (CUPTI sees every kernel of the process: TVM's as torch's); the sums
    last, as "(all kernels)". A kernel's time is its span after the kernel before it ended
    (``serialized``): ours are launched early (programmatic dependent launch, ``codegen.py``)
    and wait in ``griddepcontrol.wait``, so their spans hold the previous kernel's tail."""
    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    fn()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
             if str(getattr(e, "device_type", "")).endswith("CUDA")]
    rows = [(name, n // calls, own / calls, span / calls)
            for name, n, own, span in serialized(spans) if n >= calls]
    rows.sort(key=lambda r: -r[2])
    return rows + [("(all kernels)", sum(r[1] for r in rows), sum(r[2] for r in rows),
                    sum(r[3] for r in rows))]


def serialized(spans):
    """[(name, count, time, span)] of device activities given as (name, start, end) on one
    stream: each activity's time is the part of its span after every activity that started
    before it had ended (a kernel launched early, waiting on the one before it, counts from
    that one's end), so the times add up to the stream's busy time."""
    out: dict = {}
    frontier = float("-inf")
    for name, start, end in sorted(spans, key=lambda s: (s[1], s[2])):
        own = max(0.0, end - max(start, frontier))
        frontier = max(frontier, end)
        n, t, sp = out.get(name, (0, 0.0, 0.0))
        out[name] = (n + 1, t + own, sp + (end - start))
    return [(name, n, t, sp) for name, (n, t, sp) in out.items()]


#: TVM's own build of the block on the GPU (dlight's schedules), and the suffix of a row built
#: with CUDA graphs (``--cuda-graph``).
OWN = "TVM's own build (dlight)"
GRAPHS = ", CUDA graphs"
#: Short names of the reference rows in the ratio columns.
REF_LABELS = {TORCH_EAGER: "torch", TORCH_GRAPH: "torch graph", OWN: "dlight",
              OWN + GRAPHS: "dlight graphs"}


def _torch_calls(x, w, heads: int, onnx: bool, want, tol: float, mlp: str = "gelu") -> dict:
    """{row: call} of torch's block on the GPU, eager and as a CUDA graph (``torch_block``),
    each checked against numpy's answer; {} where torch is not installed (said)."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        print("(torch is not installed: no cuBLAS rows; pip install torch)")
        return {}
    eager, graph = torch_block(torch, x, w, heads, onnx, mlp)
    calls = {}
    for name, fn in ((TORCH_EAGER, eager), (TORCH_GRAPH, graph)):
        np.testing.assert_allclose(fn().float().cpu().numpy(), want, rtol=tol, atol=tol)

        def call(fn=fn):
            fn()
            torch.cuda.synchronize()
        calls[name] = call
    return calls


if __name__ == "__main__":
    import sys

    from ..errors import TvmExtError
    try:
        raise SystemExit(main())
    except TvmExtError as err:  # bad input: one line, before anything is built
        sys.stderr.write(f"python -m tvm_ext.bench.model: error: {err}\n")
        raise SystemExit(2) from None
