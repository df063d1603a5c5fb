"""A shape family tuned once into one library, against kernels tuned per shape, the vendor
reference (numpy on the CPU, torch on CUDA) and TVM's own dynamic-shape path, in one process
(timings sampled in turn).

    python -m tvm_ext.bench.family                      # bsz 1..8 x M 64..2048:64 x 512 x 64
    python -m tvm_ext.bench.family --shape 1..4x64..512:64x512x64 --trials 8 --sample 6

What it does, on the host CPU (``--target cuda``: on the GPU):

1. ``tune_family`` (``--trials`` per representative, ``--max-kernels``) into a fresh log; the
   library is built from the log and exported to one ``.so``, which is loaded back: every
   figure below is measured on the loaded ``.so``.
2. Every shape of the family is checked against the reference through the loaded library,
   and shapes outside the family (a larger M, an odd M, a larger batch) through its generic
   kernel.
3. ``--sample`` shapes spread over the family's flop range are tuned one by one with the same
   trials, tuner and measurer settings (what tuning every shape would do), and the tuning time
   per shape is measured; tuning every shape is that mean time times the number of shapes.
4. Timing, the methods in turn, ``--rounds`` times (so drift hits them alike; on the CPU a
   method over every shape before the next, as two thread pools, numpy's BLAS and TVM's, would
   otherwise time each other's spinning threads): at every shape of the family the library
   and the reference; at the sampled shapes also the
   per-shape tuned kernels and TVM's dynamic path (CPU: a Relax function with symbolic sizes
   built by ``tvm.compile``'s default pipeline, run by the VM; CUDA: dlight's default rules on
   the matmul with symbolic sizes). On a GPU every method is timed by CUDA-graph replays
   (kernel time without launch overhead), as the GPU suite does.

Printed: the library's kernels and routes, what each extra kernel buys, per bucket the
library's and the reference's time (all shapes), and on the sample the library / per-shape and
library / TVM-dynamic ratios. "Mean time" is the expected time of one call when the family's
shapes occur equally often (sum of times / number of shapes): the large shapes weigh in by
their flops.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..host_memory import host_empty, host_tensor
from ..measure.check import reference_matmul, random_inputs, tolerance
from .common import time_calls


def relax_dynamic(family, target):
    """TVM's own path for the family on the CPU: a Relax matmul with symbolic varying axes,
    ``tvm.compile``'s default pipeline, on the VM. Returns call(a, b) -> tvm tensor."""
    import tvm  # noqa: PLC0415
    from tvm import relax, tirx  # noqa: PLC0415
    from tvm.script import relax as R  # noqa: PLC0415

    a_shape, b_shape = family.operand_shapes(
        {a: tirx.Var(a.lower(), "int64") for a in family.varying})
    nd = len(a_shape)
    perm = list(range(nd - 2)) + [nd - 1, nd - 2]
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor(a_shape, family.dtype))
    w = relax.Var("w", R.Tensor(b_shape, family.dtype))
    with bb.function("main", [x, w]):
        xa = relax.op.permute_dims(x, perm) if family.layout[0] == "T" else x
        wb = relax.op.permute_dims(w, perm) if family.layout[1] == "T" else w
        y = bb.emit(relax.op.matmul(xa, wb, out_dtype=family.out_dtype))
        bb.emit_func_output(y)
    ex = tvm.compile(bb.get(), target=target)
    return relax.VirtualMachine(ex, tvm.cpu(0))["main"]


def dynamic_kernel(family, target):
    """TVM's own kernels for symbolic sizes: on the CPU the Relax default pipeline (above), on
    CUDA dlight's default rules on the matmul with symbolic sizes. Returns case -> call()."""
    import tvm  # noqa: PLC0415

    if target.kind.name == "llvm":
        vm = relax_dynamic(family, target)
        return lambda case: (lambda: vm(*case.args[:2]))
    from tvm import te, tirx  # noqa: PLC0415
    from tvm.s_tir import dlight as dl  # noqa: PLC0415

    from ..codegen import compile_module  # noqa: PLC0415
    from ..family import _placeholders, median_shape  # noqa: PLC0415
    from ..ops.common import matmul_compute  # noqa: PLC0415
    A, B = _placeholders(family, {a: tirx.Var(a.lower(), "int32") for a in family.varying})
    wl = family.workload(median_shape(family))
    mod = tvm.IRModule({"main": te.create_prim_func(matmul_compute(wl, A, B))})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Fallback())(mod)
    ex = compile_module(mod, target)
    return lambda case: (lambda: ex.mod["main"](*case.args))


class _Case:
    """One shape's inputs and output: ``args`` (TVM tensors A, B, C), ``ref()`` the
    reference's call (numpy on the CPU, torch on CUDA), ``check_output(fn, what)``."""

    def __init__(self, family, shape, dev, gpu, rng):
        import tvm  # noqa: PLC0415
        self.family, self.wl, self.gpu = family, family.workload(shape), gpu
        wl = self.wl
        if gpu:
            import torch  # noqa: PLC0415
            self.a = torch.rand(wl.a_shape, device="cuda", dtype=_torch_dtype(wl.dtype)) - 0.5
            self.b = torch.rand(wl.b_shape, device="cuda", dtype=_torch_dtype(wl.dtype)) - 0.5
            self.c = torch.empty(wl.out_shape, device="cuda", dtype=_torch_dtype(wl.out_dtype))
            self.args = tuple(tvm.runtime.from_dlpack(t) for t in (self.a, self.b, self.c))
            ta = self.a.transpose(-1, -2) if family.layout[0] == "T" else self.a
            tb = self.b.transpose(-1, -2) if family.layout[1] == "T" else self.b
            self.ref = lambda: torch.matmul(ta, tb)
        else:
            self.a, self.b = random_inputs(wl, rng)
            self.args = (host_tensor(self.a, dev), host_tensor(self.b, dev),
                         host_empty(wl.out_shape, wl.out_dtype, dev))
            a2 = np.swapaxes(self.a, -1, -2) if family.layout[0] == "T" else self.a
            b2 = np.swapaxes(self.b, -1, -2) if family.layout[1] == "T" else self.b
            self.ref = lambda: np.matmul(a2, b2)

    def check_output(self, fn, what, fatal=True) -> bool:
        """Run ``fn`` (it writes C, or returns the result) and compare with the reference; a
        wrong result ends the run (``fatal``) or is said, and False returned."""
        out = fn()
        if self.gpu:
            import torch  # noqa: PLC0415
            got = torch.from_dlpack(out) if out is not None else self.c
            want = self.ref().to(got.dtype)
            ok = torch.allclose(got.float(), want.float(), rtol=1e-3, atol=1e-3 *
                                max(1.0, self.wl.K ** 0.5))
        else:
            got = out.numpy() if out is not None else self.args[2].numpy()
            rtol, atol = tolerance(self.wl)
            ok = np.allclose(got, reference_matmul(self.wl, self.a, self.b), rtol=rtol,
                             atol=atol)
        if not ok and fatal:
            raise SystemExit(f"{what} gives a wrong result for {self.wl}")
        if not ok:
            print(f"{what} gives a wrong result for {self.wl}: not timed", flush=True)
        return ok


def _torch_dtype(dtype):
    import torch  # noqa: PLC0415
    return getattr(torch, dtype)


class _Cases:
    """The shapes' cases: kept on the CPU (reused by the timing), made again on a GPU (the
    seed family's outputs alone would not fit its memory at once)."""

    def __init__(self, family, dev, gpu):
        self.family, self.dev, self.gpu = family, dev, gpu
        self.rng = np.random.default_rng(0)
        self.kept = {}
        if gpu:
            import torch  # noqa: PLC0415
            torch.backends.cuda.matmul.allow_tf32 = False  # the reference in f32, as ours

    def get(self, shape):
        if shape not in self.kept:
            self.kept[shape] = _Case(self.family, shape, self.dev, self.gpu, self.rng)
        return self.kept[shape]

    def check(self, shape, entry, keep=True):
        case = self.get(shape)
        case.check_output(lambda: entry(*case.args), "the library")
        if not keep or self.gpu:
            self.drop(shape)

    def drop(self, shape):
        self.kept.pop(shape, None)

    def time(self, fn) -> float:
        """Seconds per call of ``fn``: on the CPU calls for at least 20 ms; on a GPU replays of
        a CUDA graph of the calls (the kernels' time without launch overhead, as the GPU
        suite times every method)."""
        if not self.gpu:
            return time_calls(fn, repeat=1, min_s=0.02)[0]
        from ..measure.timing import graph_times  # noqa: PLC0415
        return graph_times(fn, 1)[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.family",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="batch_matmul")
    p.add_argument("--shape", default="1..8x64..2048:64x512x64")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out-dtype", default=None, help="default: the dtype's usual output "
                   "(float16 -> float32; attention's scores: --out-dtype float16)")
    p.add_argument("--layout", default="NT")
    p.add_argument("--target", default=None, help="default: the host CPU")
    p.add_argument("--trials", type=int, default=16, help="trials per tuned shape")
    p.add_argument("--tuner", default="xgb")
    p.add_argument("--max-kernels", type=int, default=8)
    p.add_argument("--sample", type=int, default=12,
                   help="shapes tuned one by one for the per-shape comparison")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds")
    p.add_argument("--workdir", help="where the logs and the .so go (default: a temp dir)")
    p.add_argument("--resume", action="store_true",
                   help="keep what an earlier run left in --workdir: the family's log and the "
                        "per-shape logs are not tuned again, their tuning times are read back "
                        "(a run cut off by a time limit goes on where it stopped)")
    args = p.parse_args(argv)
    if args.resume and not args.workdir:
        p.error("--resume needs --workdir")

    import tvm  # noqa: PLC0415

    from .. import family as F  # noqa: PLC0415
    from .. import record  # noqa: PLC0415
    from ..session import tune_task  # noqa: PLC0415
    from ..target import describe, host_cpu_target, parse_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    from ..workload import Family  # noqa: PLC0415

    target = parse_target(args.target) if args.target else host_cpu_target()
    fam = Family.parse(args.shape, args.op, args.dtype, args.out_dtype, layout=args.layout)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tvm_ext_family_"))
    work.mkdir(parents=True, exist_ok=True)
    shapes = fam.shapes()
    print(f"{fam} on {describe(target)}: {len(shapes)} shapes; {args.trials} trials per tuned "
          f"shape ({args.tuner}); workdir {work}")

    # 1. the family, tuned and exported
    log = work / "family.json"
    spent = _Spent(work / "tuning_seconds.json", args.resume)
    if "family" in spent and F.library_for([log], fam, target) is not None:
        family_s = spent["family"]
        print(f"resumed: the family's library from {log} (tuned in {family_s:.1f} s)")
    else:
        if log.exists():
            log.unlink()
        t0 = time.time()
        _, report = F.tune_family(fam, target, log, trials=args.trials,
                                  max_kernels=args.max_kernels, tuner=args.tuner,
                                  progress=print)
        family_s = spent.set("family", time.time() - t0)
        for line in report.lines():
            print(line)
    lib = F.build_family(fam, target, log)
    library = lib.library
    so = work / "family.so"
    lib.export_library(so)
    loaded = tvm.runtime.load_module(str(so))["main"]
    print("\n".join(lib.describe()))
    print(f"library: {so} ({so.stat().st_size // 1024} KB); family tuning {family_s:.1f} s")

    gpu = target.kind.name == "cuda"
    ref_name = "torch" if gpu else "numpy"
    cases = _Cases(fam, lib.device, gpu)

    # 2. numerics: every shape of the family, and shapes outside it (the generic kernel)
    for shape in shapes:
        cases.check(shape, loaded)
    outside = []
    for shape in _outside(fam):
        cases.check(shape, loaded, keep=False)
        outside.append("x".join(map(str, shape)))
    print(f"numerics: all {len(shapes)} shapes of the family match {ref_name}; outside it "
          f"(generic kernel): {', '.join(outside)} match")

    # 3. per-shape tuning of a sample
    by_flop = sorted(shapes, key=lambda s: fam.workload(s).flop)
    sample = F.spread(by_flop, args.sample)
    per_shape, tune_times = {}, []
    # The library's template, or at a size served by a kernel of its own shape that kernel's
    template = library.kernels[0].template if library.kernels else library.generic.template
    own = dict(F.exact_templates(fam, target))
    for i, shape in enumerate(sample):
        task = Task(fam.workload(shape), target, template=own.get(shape[1], template))
        slog = work / f"shape_{i}.json"
        key = f"shape {'x'.join(map(str, shape))}"
        best = record.best_for(record.load(slog), task.workload, target) \
            if key in spent and slog.exists() else None
        if best is None:
            if slog.exists():
                slog.unlink()
            t0 = time.time()
            tune_task(task, slog, trials=args.trials, tuner=args.tuner, seed=i)
            spent.set(key, time.time() - t0)
            best = record.best_for(record.load(slog), task.workload, target)
        tune_times.append(spent[key])
        per_shape[shape] = task.build(task.config_of_record(best.config))
    per_shape_total = float(np.mean(tune_times)) * len(shapes)
    print(f"per-shape tuning: {np.mean(tune_times):.1f} s per shape (mean of {len(sample)}); "
          f"every shape: {per_shape_total:.0f} s (estimated: {len(shapes)} x the mean)")

    # 4. timing, the methods in turn, ``rounds`` times
    dyn = dynamic_kernel(fam, target)
    times = {k: {s: [] for s in shapes} for k in ("lib", "ref")}
    times.update({k: {s: [] for s in sample} for k in ("per_shape", "tvm_dynamic")})

    def calls_at(s):
        case = cases.get(s)
        calls = {"lib": lambda: loaded(*case.args), "ref": case.ref}
        if s in per_shape:
            mod = per_shape[s].mod
            calls["per_shape"] = lambda: mod["main"](*case.args)
            if "dyn" not in case.__dict__:
                case.dyn = dyn(case)
                if not case.check_output(case.dyn, "TVM's dynamic path", fatal=False):
                    case.dyn = None  # not ours: said, and its column left empty (nan)
            if case.dyn is not None:
                calls["tvm_dynamic"] = case.dyn
        return calls

    if gpu:  # at each shape (made, then freed), the methods in turn
        for s in shapes:
            calls = calls_at(s)
            for _ in range(args.rounds):
                for k, fn in calls.items():
                    times[k][s].append(cases.time(fn))
            cases.drop(s)
    else:
        # On the CPU a method is timed over every shape before the next method: numpy's BLAS
        # threads spin for a while after a call, and TVM's thread pool after its own, so
        # alternating them call by call would time each against the other's spinning threads
        # (two thread pools on the same cores). Each round starts at another shape.
        all_calls = {s: calls_at(s) for s in shapes}
        for r in range(args.rounds):
            start = r * len(shapes) // args.rounds
            order = shapes[start:] + shapes[:start]
            for k in ("ref", "lib", "per_shape", "tvm_dynamic"):
                if k == "tvm_dynamic" and r >= 2:
                    continue  # slow unscheduled kernels: two rounds
                time.sleep(0.3)  # the last method's threads go idle
                for s in order:
                    if k in all_calls[s]:
                        times[k][s].append(cases.time(all_calls[s][k]))
    med = {k: {s: float(np.median(v)) if v else float("nan") for s, v in d.items()}
           for k, d in times.items()}

    def mean(k, over):
        return sum(med[k][s] for s in over) / len(over)

    buckets = F.make_buckets(fam)
    print(f"\nper bucket, all shapes (mean ms per call; ratio = {ref_name} / library):")
    print(f"  {'bucket':<24} {'shapes':>6} {'kernel':>6} {'library':>9} {ref_name:>9} "
          f"{'ratio':>6}")
    for b in buckets:
        k = lib.kernel_for(b.rep)
        k = "own" if k == -1 else k  # a kernel of the shape's own (family.exact_templates)
        print(f"  {b.describe():<24} {len(b.shapes):>6} {k:>6} "
              f"{mean('lib', b.shapes) * 1e3:>9.3f} {mean('ref', b.shapes) * 1e3:>9.3f} "
              f"{mean('ref', b.shapes) / mean('lib', b.shapes):>6.2f}")
    print(f"  {'all':<24} {len(shapes):>6} {'':>6} "
          f"{mean('lib', shapes) * 1e3:>9.3f} {mean('ref', shapes) * 1e3:>9.3f} "
          f"{mean('ref', shapes) / mean('lib', shapes):>6.2f}")
    print(f"\nsampled shapes (ms per call; per-shape = tuned for that shape alone, "
          f"{args.trials} trials):")
    print(f"  {'shape':<16} {'library':>9} {'per-shape':>9} {ref_name:>9} {'tvm-dyn':>9} "
          f"{'lib/per-shape':>13}")
    for s in sample:
        print(f"  {'x'.join(map(str, s)):<16} {med['lib'][s] * 1e3:>9.3f} "
              f"{med['per_shape'][s] * 1e3:>9.3f} {med['ref'][s] * 1e3:>9.3f} "
              f"{med['tvm_dynamic'][s] * 1e3:>9.3f} "
              f"{med['lib'][s] / med['per_shape'][s]:>13.3f}")
    lib_s, ps_s = mean("lib", sample), mean("per_shape", sample)
    print(f"  {'mean':<16} {lib_s * 1e3:>9.3f} {ps_s * 1e3:>9.3f} "
          f"{mean('ref', sample) * 1e3:>9.3f} "
          f"{mean('tvm_dynamic', sample) * 1e3:>9.3f} {lib_s / ps_s:>13.3f}")
    print(f"\nsummary: library mean time / per-shape tuned = {lib_s / ps_s:.3f} (sample of "
          f"{len(sample)}); {ref_name} / library = "
          f"{mean('ref', shapes) / mean('lib', shapes):.2f} "
          f"(all {len(shapes)} shapes); TVM dynamic / library = "
          f"{mean('tvm_dynamic', sample) / lib_s:.1f} (sample); family tuning {family_s:.0f} s "
          f"= {family_s / per_shape_total:.1%} of tuning every shape ({per_shape_total:.0f} s)")
    return 0


class _Spent:
    """Tuning seconds by name, kept in a JSON file of the workdir (read back with --resume)."""

    def __init__(self, path, resume):
        self.path = path
        self.data = json.loads(path.read_text()) if resume and path.exists() else {}

    def __contains__(self, key):
        return key in self.data

    def __getitem__(self, key):
        return self.data[key]

    def set(self, key, seconds):
        self.data[key] = seconds
        self.path.write_text(json.dumps(self.data, indent=1))
        return seconds


def _outside(family):
    """A few shapes outside the family (its varying axes past their ranges, odd sizes)."""
    from ..workload import AXES  # noqa: PLC0415
    base = list(family.shapes()[0])
    out = []
    for a in family.varying:
        i = AXES.index(a)
        values = family.dims[i].values
        for v in (values[-1] + 37, 7 if 7 not in values else values[-1] * 2 + 1):
            s = list(base)
            s[i] = v
            out.append(tuple(s))
    return out


if __name__ == "__main__":
    sys.exit(main())
