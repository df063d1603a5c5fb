"""The host's measured FMA peak: ``python -m tvm_ext.bench.peak``.

A kernel that does nothing but fused multiply-adds on registers, as the GEMM micro-kernels do at
best: every thread keeps ``chains`` vector accumulators (enough to cover the FMA latency on every
FMA unit), each step adding one broadcast operand times one loop-invariant vector to each (one
load per ``chains`` FMAs). One parallel task per thread, built by TVM for this host like our
kernels (``use_host_cores`` threads). Its GFLOP/s is the ceiling the CPU bench's GEMM rows are
compared with, sampled in turn with them (``cpu.PEAK``): ``--gemm`` (the large rows, ours and
numpy's; ``prepacked_rows``; ``store_floor``, the time that only writing a row's output takes,
the floor of a row bound by its stores, as bmm's 100 MB of 64-deep sums), ``--gemv``
(``read_kernel``: the time that only reading the weight takes, which bounds a row of one FMA a
weight element; ``warm_rows``), ``--weights`` (``weight_sweep``), ``--ladder`` (``ladder``).
``--target``: an llvm target to build for instead of the host's (AVX2 code on an AVX-512 host),
as the CPU bench's ``--target``.
"""
from __future__ import annotations

import argparse
import functools
import sys
import time

from ..host_memory import host_empty, host_tensor
from .common import median_best, rates, time_calls


def peak_kernel(threads: int, lanes: int, chains: int, steps: int, target):
    """(module, flops per call): threads x chains x lanes accumulators, ``steps`` FMAs each,
    built for ``target`` (``measure`` resolves it). Its arguments: X (threads, chains, lanes),
    each accumulator's start; W (threads, lanes), the invariant vector; Y (steps,), the
    broadcast operands; C = X + W * sum(Y). One invariant vector, not one per chain: 8 of them
    beside 8 accumulators and the broadcast need 17 of AVX2's 16 registers, and the kernel
    that had them reloaded spilled vectors at every step, which Zen 3's two loads a cycle do
    not keep up with (112 GFLOP/s there, where the GEMM rows ran at 150). The accumulators
    start from their own values, so no compiler can merge their identical chains."""
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te  # noqa: PLC0415

    from ..codegen import compile_module  # noqa: PLC0415
    X = te.placeholder((threads, chains, lanes), "float32", name="X")
    W = te.placeholder((threads, lanes), "float32", name="W")
    Y = te.placeholder((steps,), "float32", name="Y")
    k = te.reduce_axis((0, steps), name="k")
    C = te.compute((threads, chains, lanes),
                   lambda p, c, v: te.sum(W[p, v] * Y[k], axis=k, init=X[p, c, v]), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([X, W, Y, C])}))
    block = sch.get_sblock("C")
    p, c, v, kk = sch.get_loops(block)
    sch.reorder(p, kk, c, v)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, p)
    sch.parallel(p)
    sch.unroll(c)
    sch.vectorize(v)
    sch.vectorize(sch.get_loops(acc)[-1])
    sch.decompose_reduction(block, kk)
    return compile_module(sch.mod, target), 2.0 * threads * chains * lanes * steps


#: The peak's samples at least (whatever ``--repeat`` says), and the seconds of back-to-back
#: calls each sample lasts at least: one call of the default 200000 steps takes 0.4 ms on two
#: Zen 3 cores, and a peak taken from one such call (``--repeat 1``) measured 144 GFLOP/s
#: where 7 calls gave 193, and reported rows at more than 100% of it.
PEAK_SAMPLES, PEAK_SAMPLE_S = 7, 0.02


def peak_call(steps: int = 200_000, target=None):
    """(call, flops per call, {threads, lanes, chains}): the peak kernel of ``target``'s
    vectors and registers (default: the host's) on every thread, its arguments bound, run once
    and its sum checked."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..target import hardware_facts, host_cpu_target  # noqa: PLC0415
    threads = use_host_cores()
    target = target or host_cpu_target()
    facts = hardware_facts(target)
    lanes, regs = facts["vector_lanes"], facts["vector_registers"]
    # 12 chains (2 FMA units x 4 cycles of latency need 8; 12 leave room for the scheduler),
    # in 14 of AVX2's 16 vector registers
    chains = min(12, regs - 2)
    mod, flops = peak_kernel(threads, lanes, chains, steps, target)
    func = mod["main"]
    x = host_tensor(np.zeros((threads, chains, lanes), "float32"))
    w = host_tensor(np.ones((threads, lanes), "float32"))
    y = host_tensor(np.full((steps,), 1e-6, "float32"))
    out = host_empty((threads, chains, lanes), "float32", tvm.cpu())
    func(x, w, y, out)
    want = steps * 1e-6
    if not np.allclose(out.numpy(), want, rtol=1e-2):
        raise RuntimeError(f"the peak kernel summed {out.numpy().flat[0]}, not {want}")
    return (functools.partial(func, x, w, y, out), flops,
            {"threads": threads, "lanes": lanes, "chains": chains})


def measure(steps: int = 200_000, repeat: int = 7, target=None) -> dict:
    """The best and the median of ``repeat`` samples (``PEAK_SAMPLES`` at least, each of
    ``PEAK_SAMPLE_S`` seconds of calls of about steps x 12 FMAs per thread) in GFLOP/s, of the
    vectors and registers of ``target`` (default: the host's)."""
    call, flops, info = peak_call(steps, target)
    samples = time_calls(call, repeat=max(repeat, PEAK_SAMPLES), min_s=PEAK_SAMPLE_S)
    median, best = rates(flops, samples)
    return {**info, "gflops": best, "gflops_median": median}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.peak",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200_000,
                   help="FMA steps per accumulator and call (default 200000)")
    p.add_argument("--repeat", type=int, default=7,
                   help="samples of the peak and of each row (default 7; --ladder at least 9, "
                   "--weights and --gemv 15)")
    p.add_argument("--gemm", action="store_true",
                   help="also run the CPU bench's large rows and give each as a share of the peak, "
                   "ours and numpy's sampled in turn")
    p.add_argument("--gemv", action="store_true",
                   help="also time the CPU bench's gemv row, numpy's, and reading the weight "
                   "alone, in turn, then each call by call after 200 calls of its own")
    p.add_argument("--weights", action="store_true",
                   help="also run the dense row's kernel with N from 256 to 6144 (its weight "
                   "from 0.8 to 19 MB), packed at every call and packed ahead, in turn")
    p.add_argument("--ladder", action="store_true",
                   help="also run each large row's micro-kernel with A and B in L1 and with A "
                   "read from memory, beside the row's kernel, in turn")
    p.add_argument("--linear", action="store_true",
                   help="also time the lm_head row as a Relax model's nn.Linear (matmul of x and "
                   "permute_dims of a constant weight), built with and without prepacking, and "
                   "divided by a tensor with fused epilogues (packed at every call, or split "
                   "and prepacked), in turn")
    p.add_argument("--target", help="build for this llvm target instead of the host's, e.g. "
                   "'{\"kind\": \"llvm\", \"mcpu\": \"znver3\", \"num-cores\": 2}' (AVX2 "
                   "code on an AVX-512 host)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.repeat < 1:
        p.error("--steps and --repeat must be >= 1")
    target = None
    if args.target:
        from ..errors import TvmExtError  # noqa: PLC0415
        from .common import llvm_target  # noqa: PLC0415
        try:
            target = llvm_target(args.target, "the peak and its rows build")
        except TvmExtError as err:
            p.error(str(err))
    r = measure(args.steps, args.repeat, target)
    from ..space import data_dir  # noqa: PLC0415
    from .cpu import CPU_SUITE  # noqa: PLC0415
    shipped = str(data_dir("logs") / "llvm_x86.json")
    print(f"FMA peak: {r['gflops']:.1f} GFLOP/s (median {r['gflops_median']:.1f}) on "
          f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}, {r['lanes']}-lane f32 "
          f"vectors, {r['chains']} chains a thread"
          + (f" (llvm {target.attrs.get('mcpu', '')})" if target is not None else ""))
    # the peak kernel once more, as a method of every comparison below (``cpu.PEAK``)
    peak = peak_call(args.steps, target)[:2] if args.gemm or args.ladder or args.weights \
        else None
    if args.gemm:  # the bench's large rows under the shipped log, as `--suite cpu` runs them
        from .cpu import run_cpu  # noqa: PLC0415
        large = {k: CPU_SUITE[k] for k in ("bmm", "dense", "chain_mm1", "chain_mm2")}
        # the chain's two GEMMs also as rows of their own (the chain row adds its exp kernel)
        large.update({"gemm1": CPU_SUITE["chain_mm1"], "gemm2": CPU_SUITE["chain_mm2"]})
        rows = run_cpu(large, log=shipped, repeat=args.repeat, target=target, peak=peak)
        print("each row, numpy's and ours, sampled in turn with the peak kernel (GFLOP/s; share "
              "of the peak: median by median, best sample by best sample)")
        for row in rows:
            print(f"{row.name[:44]:<46} " + _shares(row))
        for key in ("dense", "lm_head", "chain_mm2"):  # lm_head: a ragged last panel
            packed, peak_gflops = prepacked_rows(CPU_SUITE[key], shipped, args.repeat,
                                                 target=target, peak=peak)
            for name, ms in packed:  # (none where the config has no prepacked kernel)
                gflops = CPU_SUITE[key].flop / (ms * 1e-3) / 1e9
                print(f"{name:<62} {gflops:7.1f} GFLOP/s  {gflops / peak_gflops[0]:6.1%} of the "
                      f"peak ({peak_gflops[0]:.1f}, in turn)")
        # The stores' floor: a row whose output alone takes longer to write than its FMAs at
        # the peak (its best sample in these turns) cannot reach the peak, however its stores
        # and FMAs overlap.
        best = max(row.peak_gflops[1] for row in rows)
        for key in ("bmm", "dense", "chain_mm1", "chain_mm2"):
            wl = CPU_SUITE[key]
            ms = store_floor(wl, target=target)
            fma_ms = wl.flop / (best * 1e9) * 1e3
            mb = wl.out_bytes / 1e6
            print(f"{key}: writing its {mb:.1f} MB output takes "
                  f"{ms:.3f} ms, its FMAs at the peak {fma_ms:.3f} ms: at most "
                  f"{min(1.0, fma_ms / ms):.1%} of the peak")
    if args.ladder:
        rows, (pk, pk_best) = ladder(
            {k: CPU_SUITE[k] for k in ("bmm", "dense", "chain_mm1", "chain_mm2")},
            shipped, repeat=max(9, args.repeat), target=target, peak=peak)
        print(f"each row's micro-kernel (its register tile and K step), in turn with the row's "
              f"kernel and the peak kernel (median GFLOP/s, share of the peak's median "
              f"{pk:.1f}; its best sample's share of the peak's best {pk_best:.1f})")
        for key, label, (med, best) in rows:
            print(f"  {key:<10} {label:<58} {med:7.1f} GFLOP/s  {med / pk:6.1%} "
                  f"(best {best / pk_best:.1%})")
    if args.weights:
        wl = CPU_SUITE["dense"]
        rows, (pk, pk_best) = weight_sweep(wl, shipped, repeat=max(15, args.repeat),
                                           target=target, peak=peak)
        print(f"the dense row's kernel (its config) on {wl.M} x N x {wl.K}, N growing: its "
              f"weight out of the caches; sampled in turn with the peak kernel (median GFLOP/s, "
              f"share of the peak's median {pk:.1f}; its best sample's share of the peak's best "
              f"{pk_best:.1f})")
        for n, mb, label, (med, best) in rows:
            flop = 2.0 * wl.M * n * wl.K
            gf, gf_best = flop / (med * 1e-3) / 1e9, flop / (best * 1e-3) / 1e9
            print(f"  N={n:<6} weight {mb:5.1f} MB  {label:<28} {gf:7.1f} GFLOP/s  "
                  f"{gf / pk:6.1%} (best {gf_best / pk_best:.1%})")
    if args.linear:
        wl = CPU_SUITE["lm_head"]
        for label, (med, best) in linear_rows(wl, shipped, args.repeat, target).items():
            print(f"Relax nn.Linear {wl.M}x{wl.N}x{wl.K}, {label:<36} {med:8.3f} ms (best "
                  f"{best:.3f})  {wl.flop / (med * 1e-3) / 1e9:7.1f} GFLOP/s")
    if args.gemv:
        wl = CPU_SUITE["gemv"]
        rows = gemv_rows(wl, shipped, repeat=max(15, args.repeat), target=target)
        floor = rows["reading the weight alone"]
        warm_floor = rows["reading the weight alone, back to back"]
        mb = wl.N * wl.K * 4 / 1e6
        print(f"gemv {wl.M}x{wl.N}x{wl.K}: its {mb:.1f} MB weight read once, sampled in turn "
              f"(median ms, best; GB/s of the weight at the median; the floor's median / the "
              f"row's); then back to back: each call timed alone after 200 of its own")
        for name, (med, best) in rows.items():
            ref = warm_floor if name.endswith("back to back") else floor
            print(f"  {name:<46} {med:7.3f} ms  best {best:7.3f}  {mb / med:6.1f} GB/s  "
                  f"{ref[0] / med:5.2f} of the floor")
    return 0


def _shares(row) -> str:
    """A bench row's GFLOP/s and its share of the peak kernel sampled in turn with it
    (``row.peak_gflops``): the median by the peak's median, the best sample by the peak's best;
    ours and numpy's: what the host's own BLAS reaches on the same shape is what the peak
    leaves reachable there."""
    def rate(ms):
        return row.flop / (ms * 1e-3) / 1e9
    peak, peak_best = row.peak_gflops
    ours, numpy = rate(row.ours_ms), rate(row.ref_ms)
    return (f"{ours:7.1f} GFLOP/s  {ours / peak:6.1%} of the peak (its best sample "
            f"{rate(row.ours_best_ms) / peak_best:.1%}; {row.tuned}); numpy {numpy / peak:.1%} "
            f"(best {rate(row.ref_best_ms) / peak_best:.1%}); the peak {peak:.1f} "
            f"(best {peak_best:.1f})")


def store_floor(wl, repeat: int = 7, target=None) -> float:
    """Median ms of a TVM kernel that only writes ``wl``'s output (a constant), on the same
    threads as our kernels, in the order our GEMMs write it (rows in parallel, 16-byte or
    wider vector stores along N): no GEMM of ``wl`` on this host can take less."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te  # noqa: PLC0415

    from ..codegen import compile_module, use_host_cores  # noqa: PLC0415
    from ..target import hardware_facts, host_cpu_target  # noqa: PLC0415
    use_host_cores()
    target = target or host_cpu_target()
    lanes = hardware_facts(target)["vector_lanes"]
    shape = wl.out_shape
    C = te.compute(shape, lambda *i: tvm.tirx.const(1.0, wl.out_dtype), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([C])}))
    block = sch.get_sblock("C")
    loops = sch.get_loops(block)
    outer = sch.fuse(*loops[:-1]) if len(loops) > 1 else None
    _, inner = sch.split(loops[-1], [None, lanes])
    sch.vectorize(inner)
    if outer is not None:
        sch.parallel(outer)
    func = compile_module(sch.mod, target)["main"]
    out = host_empty(shape, wl.out_dtype, tvm.cpu())
    func(out)
    samples = time_calls(functools.partial(func, out), repeat=repeat)
    if not (out.numpy() == 1.0).all():
        raise RuntimeError("the store kernel left part of the output unwritten")
    return float(np.median(samples)) * 1e3


def read_kernel(wl, lanes: int, target, rows: int = 8):
    """A TVM kernel that only reads ``wl``'s weight ([N, K], NT) and sums each row: ``rows``
    rows side by side a thread (a vector of partial sums each, so that many streams of the
    weight in flight, as the gemv template's ``rows``), whole rows in parallel: the least time
    a kernel that reads each weight element once takes on this host; built for ``target``
    (``gemv_rows`` resolves it). One row at a time (the version of 18d4c80) read the 67 MB
    weight of the gemv row 7-11% slower than the gemv kernel itself (docs/BENCHMARKS.md)."""
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te  # noqa: PLC0415

    from ..codegen import compile_module  # noqa: PLC0415
    W = te.placeholder((wl.N, wl.K), "float32", name="W")
    k = te.reduce_axis((0, wl.K), name="k")
    R = te.compute((wl.N,), lambda n: te.sum(W[n, k], axis=k), name="R")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([W, R])}))
    block = sch.get_sblock("R")
    n, kk = sch.get_loops(block)
    width = lanes if wl.K % lanes == 0 else 1
    rows = rows if wl.N % rows == 0 else 1
    _, ki = sch.split(kk, [None, width])
    rf = sch.rfactor(ki, 0)  # R_rf[ki, n]: the partial sums
    n, ko, ki = sch.get_loops(rf)
    tasks = max(1, min(64, wl.N // rows))  # up to 64 parallel tasks of whole rows
    no, ni, nr = sch.split(n, [tasks, None, rows])
    sch.reorder(no, ni, ko, nr, ki)
    sch.parallel(no)
    acc = sch.cache_write(rf, 0, "local")  # the rows' partial sums, in registers
    sch.reverse_compute_at(acc, ni)
    sch.unroll(nr)
    sch.vectorize(ki)
    sch.decompose_reduction(rf, ko)
    sch.reverse_compute_at(block, ni)  # the rows' sums right after their partial sums
    return compile_module(sch.mod, target)["main"]


def gemv_rows(wl, log, repeat: int = 15, target=None, back_to_back: bool = True) -> dict:
    """{label: (median ms, best ms)} of numpy's ``a @ w.T``, our kernel of ``wl`` under ``log``
    (its weight on huge pages, ``host_tensor``, and on TVM's own 4 KB pages) and
    ``read_kernel`` (the floor), sampled in turn as the CPU bench samples (``cpu._in_turn``:
    each sample after idle time); with ``back_to_back``, also each one's calls timed one by
    one after many of its own (``warm_rows``)."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..dispatch import apply_history_best, build  # noqa: PLC0415
    from ..measure.check import random_inputs  # noqa: PLC0415
    from ..target import hardware_facts, host_cpu_target  # noqa: PLC0415
    from .cpu import _in_turn  # noqa: PLC0415
    use_host_cores()
    target = target or host_cpu_target()
    a, w = random_inputs(wl, np.random.default_rng(0))
    with apply_history_best([log] if log else []):
        kernel = build(wl, target)
    floor = read_kernel(wl, hardware_facts(target)["vector_lanes"], target)
    W = host_tensor(w)
    sums = host_empty((wl.N,), "float32", tvm.cpu())
    floor(W, sums)
    np.testing.assert_allclose(sums.numpy(), w.sum(axis=1), rtol=1e-3, atol=1e-3)
    args = [host_tensor(a), W, host_empty(wl.out_shape, wl.out_dtype, tvm.cpu())]
    kernel(*args)
    np.testing.assert_allclose(args[2].numpy(), a @ w.T, rtol=1e-3, atol=1e-3)
    # the same kernel with its weight in TVM's own allocation (4 KB pages: a mapping of its
    # own, above glibc's largest mmap threshold, never advised; host_memory)
    tvm_own = [args[0], tvm.runtime.tensor(w), host_empty(wl.out_shape, wl.out_dtype)]
    kernel(*tvm_own)
    np.testing.assert_array_equal(tvm_own[2].numpy(), args[2].numpy())
    tag = "tuned" if kernel.choice.tuned else "fallback"
    calls = {"numpy": lambda: a @ w.T,
             f"ours ({kernel.task.name}, {tag})": functools.partial(kernel, *args),
             f"ours, weight on {_pages(tvm_own[1])}": functools.partial(kernel, *tvm_own),
             "reading the weight alone": functools.partial(floor, W, sums)}
    samples = _in_turn(calls, repeat)
    rows = {k: median_best(v, 1e3) for k, v in samples.items()}
    if back_to_back:
        rows.update({f"{k}, back to back": v for k, v in warm_rows(calls).items()})
    return rows


def warm_rows(calls: dict, warm: int = 200, timed: int = 300, rounds: int = 2) -> dict:
    """{label: (median ms, best ms)} of each call timed one by one, ``timed`` calls after
    ``warm`` untimed ones of its own, ``rounds`` times in turn: the row's weight as far into
    the caches as it stays across calls. (A weight the size of the last-level cache stays in
    part, and how much depends on what ran before: the in-turn samples of ``gemv_rows`` start
    after the other library's weight went through the caches.)"""
    times = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            for _ in range(warm):
                fn()
            for _ in range(timed):
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return {k: median_best(v, 1e3) for k, v in times.items()}


def _pages(tensor) -> str:
    """The pages of ``tensor``'s mapping, as Linux says (``host_memory.mapping``)."""
    from ..host_memory import mapping  # noqa: PLC0415
    m = mapping(tensor)
    return "huge pages" if m.get("huge_bytes") else "4 KB pages" if m else "pages unknown"


def packed_both_ways(task, cfg, b, target, unprefetched: bool = False) -> dict:
    """{label: (function, weight tensor)} of a dense_pack.x86 config (``prepackable``) with
    weight ``b`` (numpy, ``task``'s B): its kernel, which packs the weight at every call, and
    its ``prepacked_kernel`` with the weight packed ahead (``pack_weight``: a constant weight
    of a Relax model), built for ``target``; ``unprefetched``: also that kernel without its
    prefetches of the next task's panels."""
    import tvm  # noqa: PLC0415

    from ..codegen import compile_module  # noqa: PLC0415
    from ..ops.x86_gemm import pack_weight, prepacked_kernel  # noqa: PLC0415
    wl = task.workload
    packed = host_tensor(pack_weight(wl, b, cfg["tile_x"].size[-1]))
    kernels = {"packed at every call": (task.build(cfg)["main"], host_tensor(b))}
    for prefetch in (False, True) if unprefetched else (True,):
        label = "weight packed at build time" + ("" if prefetch else ", no prefetch")
        kernels[label] = (compile_module(tvm.IRModule({"main": prepacked_kernel(
            wl, cfg, task.facts["vector_lanes"], prefetch)}), target)["main"], packed)
    return kernels


def weight_sweep(wl, log, ns=(256, 512, 1024, 3072, 6144), repeat: int = 15, target=None,
                 peak=None):
    """[(N, weight MB, label, (median ms, best ms))] of the config that ``log`` gives dense
    workload ``wl`` (its record, else its fallback), built on the same M and K with N columns
    for each N of ``ns``, its weight packed at every call and packed ahead (``prepacked_kernel``),
    all sampled in turn as the CPU bench samples (``cpu._in_turn``), each checked against numpy
    first: how the kernel's speed follows its weight out of the caches. With them, the peak
    kernel's (median, best) GFLOP/s in the same turns (``peak``: (call, flops per call); else
    None)."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..ops.x86_gemm import prepackable  # noqa: PLC0415
    from ..relax.prepack import PREPACK_TEMPLATE  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    from ..workload import Workload  # noqa: PLC0415
    from .cpu import _in_turn, peak_rates  # noqa: PLC0415
    use_host_cores()
    target = target or host_cpu_target()
    with apply_history_best([log] if log else []):
        task, choice = choose(wl, target, template=PREPACK_TEMPLATE)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (wl.M, wl.K)).astype(wl.dtype)
    calls, sizes = {}, {}
    for n in ns:
        wn = Workload.create("dense", (wl.M, n, wl.K), wl.dtype, layout=wl.layout)
        tn = Task(wn, target, template=task.name)
        cfg = tn.config_of_record(choice.config)
        if not (tn.space.is_valid(cfg) and prepackable(tn.name, wn, cfg)):
            continue  # (a config the space or the prepacked kernel does not take)
        b = rng.uniform(-1, 1, wn.b_shape).astype(wl.dtype)
        want = a @ (b.T if wn.transpose_b else b)
        for label, (f, weight) in packed_both_ways(tn, cfg, b, target).items():
            args = (host_tensor(a), weight,
                    host_empty(wn.out_shape, wn.out_dtype, tvm.cpu()))
            f(*args)
            np.testing.assert_allclose(args[2].numpy(), want, rtol=1e-4, atol=1e-3)
            calls[(n, label)] = functools.partial(f, *args)
        sizes[n] = b.nbytes / 1e6
    samples = _in_turn(calls, repeat, peak)
    peak_gflops = peak_rates(peak, samples)  # (taken out of samples)
    return [(n, sizes[n], label, median_best(v, 1e3))
            for (n, label), v in samples.items()], peak_gflops


def linear_rows(wl, log, repeat: int = 7, target=None) -> dict:
    """{label: (median ms, best ms)} of a dense NT workload as a Relax model's ``nn.Linear``
    (``matmul(x, permute_dims(W))``, W [N, K] a constant) built by ``tvm_ext.relax.build``
    under ``log``, with ``prepack`` and without, then divided by a constant tensor D and built
    with ``fuse_epilogue`` (an epilogue no task names: without ``prepack`` the fused function
    packs W at every call, with it the division is split off), each label naming the
    templates its build used, each checked against numpy and sampled in turn."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    from tvm import relax  # noqa: PLC0415
    from tvm.script import relax as R  # noqa: PLC0415

    from ..dispatch import apply_history_best  # noqa: PLC0415
    from ..relax import build  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from .cpu import _in_turn  # noqa: PLC0415
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (wl.N, wl.K)).astype(wl.dtype)
    xs = rng.uniform(-1, 1, (wl.M, wl.K)).astype(wl.dtype)
    d = rng.uniform(1, 2, (wl.M, wl.N)).astype(wl.dtype)
    calls, arg = {}, host_tensor(xs)
    for divided in (False, True):  # then x W^T / D, fused: an epilogue no task names
        bb = relax.BlockBuilder()
        x = relax.Var("x", R.Tensor((wl.M, wl.K), wl.dtype))
        with bb.function("main", [x]):
            with bb.dataflow():
                out = R.matmul(x, R.permute_dims(relax.const(w), [1, 0]))
                out = bb.emit_output(R.divide(out, relax.const(d)) if divided else out)
            bb.emit_func_output(out)
        for prepack in (False, True):
            with apply_history_best([log] if log else []) as ctx:
                ex = build(bb.get(), target or host_cpu_target(), strategy=True,
                           prepack=prepack, fuse_epilogue=divided)
            main = relax.VirtualMachine(ex, tvm.cpu())["main"]
            np.testing.assert_allclose(main(arg).numpy(), xs @ w.T / (d if divided else 1),
                                       rtol=1e-3, atol=1e-3)
            used = ", ".join(sorted({c.template for c in ctx.report.choices}))
            label = "prepacked at build time" if prepack else "not prepacked"
            if divided:  # prepacked: the division split off (``subgraph._unnamed_split``)
                label = "/ D, " + ("split, prepacked" if prepack else "fused, packed each call")
            calls[f"{label} ({used})"] = functools.partial(main, arg)
    return {k: median_best(v, 1e3) for k, v in _in_turn(calls, repeat).items()}


def micro_kernel(threads: int, rows: int, width: int, ki: int, k: int, tiles: int,
                 streamed: bool, lanes: int, target, inner: int = 0):
    """(module, flops per call) of a GEMM micro-kernel alone, as the x86 templates build it: a
    rows x width register tile of C, K unrolled by ``ki`` (``inner`` rows through the ki steps
    at a time: ``tile_inner``; 0: all), each step ``width / lanes`` vector
    loads of a B panel [k, width] and ``rows`` broadcasts from A's rows, one parallel task per
    thread, each with a B panel of its own. ``tiles`` register tiles a task, each a sum over
    ``k``; their A is the same ``rows`` rows (``streamed`` False: A and B stay in L1 where
    ``k`` is small) or ``tiles`` x ``rows`` rows of their own, read in order, every task all of
    them, as each task of the templates reads A (``streamed``: A from memory). Arguments A
    (rows or tiles x rows, k), B (threads, k, width), C (threads, tiles, rows, width)."""
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te  # noqa: PLC0415

    from ..codegen import compile_module  # noqa: PLC0415
    from ..ops.x86_gemm import vectorize_lanes  # noqa: PLC0415
    A = te.placeholder((tiles * rows if streamed else rows, k), "float32", name="A")
    B = te.placeholder((threads, k, width), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((threads, tiles, rows, width), lambda p, t, i, j: te.sum(
        A[t * rows + i if streamed else i, r] * B[p, r, j], axis=r), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    block = sch.get_sblock("C")
    p, t, i, j, kk = sch.get_loops(block)
    ko, kin = sch.split(kk, [None, ki])
    io, ii = sch.split(i, [None, inner or rows])
    sch.reorder(p, t, ko, io, kin, ii, j)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, t)
    sch.parallel(p)
    for loop in (io, kin, ii):
        sch.unroll(loop)
    vectorize_lanes(sch, j, lanes)
    vectorize_lanes(sch, sch.get_loops(acc)[-1], lanes)
    sch.decompose_reduction(block, ko)
    return compile_module(sch.mod, target), 2.0 * threads * tiles * rows * width * k


def ladder(suite, log, repeat: int = 9, target=None, peak=None):
    """[(row, label, (median GFLOP/s, best GFLOP/s))]: for each matmul workload of ``suite``
    ({row: workload}), the register tile (``tile_y[-1]`` x ``tile_x[-1]``) and K step of the
    config that ``log`` gives it (its record, else its fallback) as ``micro_kernel``s, a task
    a thread: with A's ``rows`` rows and a B panel 256 deep reused (in L1), and with the
    row's M x K of A read from memory by every task, each with a B panel of its own (as every
    task of the row's kernel reads A); and the row's kernel itself. All of them checked
    against numpy and sampled in turn (``cpu._in_turn``): what the micro-kernel does at best
    on this host, and what reading A costs it. With them, the peak kernel's (median, best)
    GFLOP/s in the same turns (``peak``: (call, flops per call) from ``peak_call``; else
    None)."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..measure.check import random_inputs, reference_matmul, tolerance  # noqa: PLC0415
    from ..target import hardware_facts, host_cpu_target  # noqa: PLC0415
    from .cpu import _in_turn, peak_rates  # noqa: PLC0415
    threads = use_host_cores()
    target = target or host_cpu_target()
    lanes = hardware_facts(target)["vector_lanes"]
    rng = np.random.default_rng(0)
    calls, flops = {}, {}
    for key, wl in suite.items():
        with apply_history_best([log] if log else []):
            task, choice = choose(wl, target)
        cfg = choice.config
        seen = task.template.view(wl) if task.template.view else wl  # (dense_swap.x86: N x M)
        rows, width, ki, inner = (cfg[n].size[-1] if n in cfg else 0 for n in (
            "tile_y", "tile_x", "tile_k", "tile_inner"))
        tile = f"{rows} x {width}, tile_k {ki}" + (f", inner {inner}" if inner else "")
        for label, k, tiles, streamed in (
                (f"{tile}: A and B in L1", 256, max(1, 4 * seen.M // rows), False),
                (f"{tile}: A's {max(1, seen.M // rows) * rows} x {seen.K} from memory", seen.K,
                 max(1, seen.M // rows), True)):
            mod, flop = micro_kernel(threads, rows, width, ki, k - k % ki, tiles, streamed,
                                     lanes, target, inner)
            a = rng.uniform(-1, 1, (tiles * rows if streamed else rows, k - k % ki))
            b = rng.uniform(-1, 1, (threads, k - k % ki, width))
            args = [host_tensor(x.astype("float32")) for x in (a, b)] + [
                host_empty((threads, tiles, rows, width), "float32", tvm.cpu())]
            mod["main"](*args)
            want = (a.reshape(tiles, rows, -1) if streamed else a) @ b[:, None]
            np.testing.assert_allclose(args[2].numpy(), np.broadcast_to(
                want, (threads, tiles, rows, width)), rtol=1e-3, atol=1e-2)
            calls[(key, label)] = functools.partial(mod["main"], *args)
            flops[(key, label)] = flop
        a, b = random_inputs(wl, rng)
        args = [host_tensor(a), host_tensor(b),
                host_empty(wl.out_shape, wl.out_dtype, tvm.cpu())]
        f = task.build(cfg)["main"]
        f(*args)
        np.testing.assert_allclose(args[2].numpy(), reference_matmul(wl, a, b), *tolerance(wl))
        label = f"the row's kernel ({task.name} {'tuned' if choice.tuned else 'fallback'})"
        calls[(key, label)] = functools.partial(f, *args)
        flops[(key, label)] = wl.flop
    samples = _in_turn(calls, repeat, peak)
    peak_gflops = peak_rates(peak, samples)  # (taken out of samples)
    return [(key, label, rates(flops[(key, label)], v))
            for (key, label), v in samples.items()], peak_gflops


def prepacked_rows(wl, log, repeat: int = 7, target=None, peak=None):
    """[(label, median ms)] of ``wl``'s dense_pack.x86 kernel under ``log`` (its record, else
    its fallback) with its weight packed at every call and packed once ahead
    (``prepacked_kernel``: a constant weight of a Relax model), and, where it applies,
    dense_swap.x86's kernel (its record, else fallback), which reads the weight in place,
    sampled in turn as the CPU bench samples (``cpu._in_turn``), [] where the config has no
    prepacked kernel; with them, the peak kernel's (median, best) GFLOP/s in the same turns
    (``peak``: (call, flops per call); else None)."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..measure.check import random_inputs, reference_matmul, tolerance  # noqa: PLC0415
    from ..ops.x86_gemm import DENSE_SWAP_X86, prepackable  # noqa: PLC0415
    from ..relax.prepack import PREPACK_TEMPLATE  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from .cpu import _in_turn, peak_rates  # noqa: PLC0415
    target = target or host_cpu_target()
    with apply_history_best([log] if log else []):
        task, choice = choose(wl, target, template=PREPACK_TEMPLATE)
        swap = choose(wl, target, template=DENSE_SWAP_X86.name) \
            if DENSE_SWAP_X86.why_not(wl, task.facts) is None else None
    if not prepackable(task.name, wl, choice.config):
        return [], None
    a, b = random_inputs(wl, np.random.default_rng(0))
    A = host_tensor(a)
    tag = "tuned" if choice.tuned else "fallback"
    kernels = {f"{label} ({tag})":
               (f, [A, weight, host_empty(wl.out_shape, wl.out_dtype, tvm.cpu())])
               for label, (f, weight) in packed_both_ways(task, choice.config, b, target,
                                                          unprefetched=True).items()}
    if swap is not None:  # the weight read where it lies, never packed (at every call)
        kernels[f"{DENSE_SWAP_X86.name}, weight read in place "
                f"({'tuned' if swap[1].tuned else 'fallback'})"] = (
            swap[0].build(swap[1].config)["main"],
            [A, host_tensor(b), host_empty(wl.out_shape, wl.out_dtype, tvm.cpu())])
    want = reference_matmul(wl, a, b)
    for f, fargs in kernels.values():
        f(*fargs)
        np.testing.assert_allclose(fargs[2].numpy(), want, *tolerance(wl))
    samples = _in_turn({k: functools.partial(f, *fargs) for k, (f, fargs) in kernels.items()},
                       repeat, peak)
    peak_gflops = peak_rates(peak, samples)  # (taken out of samples)
    return [(f"dense {wl.M}x{wl.N}x{wl.K}, {k}", median_best(v, 1e3)[0])
            for k, v in samples.items()], peak_gflops


if __name__ == "__main__":
    sys.exit(main())
