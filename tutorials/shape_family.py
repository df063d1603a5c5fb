"""Tutorial: the 512 shapes of one batch_matmul, tuned once into ONE library.

    python tutorials/shape_family.py                 # on the GPU if one is visible, else the CPU
    python tutorials/shape_family.py --trials 8 --max-kernels 4 --out fam.so

The user this package was started for runs ``batch_matmul`` (f32, B transposed) with d2 = 512 and
d3 = 64 fixed, while the batch takes 16 values up to 24 and d1 32 values from 512 to 16384: 512
shapes. On a GPU this tutorial takes that family as it is; on a CPU it takes the same family
scaled to the CPU (batch 1..8, d1 64..2048 in steps of 64: 256 shapes).

1. describe the family and the buckets it is cut into (powers of two on the batch and d1),
2. tune it: a few representative shapes are tuned (each with transfer from the ones before),
   their best configs are timed as the kernels that will run (compiled for symbolic sizes) at
   every bucket, and at most ``--max-kernels`` of them are kept,
3. build the library from the log: the bucket kernels, a generic kernel (any other shape) and
   the dispatcher, in ONE module, written to one file,
4. load that file and call it: one function for any shape, nothing compiled at call time,
   checked against numpy (every shape of the family, or ``--check`` of them),
5. time a few shapes against numpy (CPU) or torch (GPU, where importable).
"""
import argparse
import time

import numpy as np
import tvm

import tvm_ext.family as F
from tvm_ext.host_memory import host_empty, host_tensor
from tvm_ext.measure.check import random_inputs, reference_matmul
from tvm_ext.target import default_target, describe
from tvm_ext.workload import Family

SEED_FAMILY = "1,2,3,4,5,6,7,8,10,12,14,16,18,20,22,24x512..16384:512x512x64"
CPU_FAMILY = "1..8x64..2048:64x512x64"


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--shape", help="the family (default: the seed family on a GPU, its CPU "
                                   "scale on a CPU)")
    p.add_argument("--target", help="default: CUDA when a GPU is visible, else the host CPU")
    p.add_argument("--trials", type=int, default=16, help="trials per representative shape")
    p.add_argument("--max-kernels", type=int, default=8)
    p.add_argument("--tuner", default="xgb")
    p.add_argument("--log", default="family_tutorial.json")
    p.add_argument("--out", default="family_tutorial.so")
    p.add_argument("--check", type=int, default=0,
                   help="shapes checked against numpy (0: every shape of the family)")
    args = p.parse_args(argv)
    target = tvm_ext_target(args.target)
    gpu = target.kind.name == "cuda"

    # 1. the family and its buckets
    fam = Family.parse(args.shape or (SEED_FAMILY if gpu else CPU_FAMILY), "batch_matmul",
                       "float32", layout="NT")
    buckets = F.make_buckets(fam)
    print(f"{fam} on {describe(target)}: {len(fam.shapes())} shapes, {len(buckets)} buckets")

    # 2. tune (the log gets the representatives' records and one line for the library)
    t0 = time.time()
    library, report = F.tune_family(fam, target, args.log, trials=args.trials,
                                    max_kernels=args.max_kernels, tuner=args.tuner,
                                    progress=print)
    print("\n".join(report.lines()))
    print(f"tuned the family in {time.time() - t0:.0f} s")

    # 3. the library from the log, in one file
    lib = F.build_family(fam, target, args.log)
    print("\n".join(lib.describe()))
    lib.export_library(args.out)

    # 4. one callable for any shape
    run = tvm.runtime.load_module(args.out)["main"]
    dev = tvm.cuda(0) if gpu else tvm.cpu(0)
    rng = np.random.default_rng(0)
    shapes = fam.shapes()
    if args.check:
        shapes = F.spread(sorted(shapes, key=lambda s: fam.workload(s).flop), args.check)
    outside = (fam.dims[0].values[-1] + 1, 100, fam.fixed("N"), fam.fixed("K"))
    for shape in shapes + [outside]:  # and one shape outside the family
        wl = fam.workload(shape)
        a, b = random_inputs(wl, rng)
        c = host_empty(wl.out_shape, wl.out_dtype, dev)  # CPU: on huge pages, as numpy's
        run(host_tensor(a, dev), host_tensor(b, dev), c)
        np.testing.assert_allclose(c.numpy(), reference_matmul(wl, a, b), rtol=1e-4, atol=1e-3)
    print(f"{len(shapes)} shapes of the family and one outside it match numpy")

    # 5. a few timings (the kernel each shape runs in brackets)
    sample = F.spread(sorted(fam.shapes(), key=lambda s: fam.workload(s).flop), 4)
    times = F.time_shapes(lib.executable, target, fam, sample, repeat=5)
    for shape, t in zip(sample, times):
        ref = _reference_ms(fam, shape, gpu)
        vs = f", {'torch' if gpu else 'numpy'} {ref:.3f} ms" if ref else ""
        print(f"  {'x'.join(map(str, shape))} [kernel {lib.kernel_for(shape)}]: "
              f"{t * 1e3:.3f} ms{vs}")
    return lib, report, len(shapes)


def tvm_ext_target(spec):
    from tvm_ext.target import parse_target
    return parse_target(spec) if spec else default_target()


def _reference_ms(fam, shape, gpu):
    wl = fam.workload(shape)
    if gpu:
        try:
            import torch
        except ImportError:
            return None
        a = torch.randn(wl.a_shape, device="cuda")
        b = torch.randn(wl.b_shape, device="cuda")
        fn = (lambda: torch.bmm(a, b.transpose(1, 2)))
    else:
        a, b = random_inputs(wl, np.random.default_rng(0))
        fn = (lambda: np.matmul(a, b.transpose(0, 2, 1)))
    fn()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < 0.2:
        fn()
        n += 1
    if gpu:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


if __name__ == "__main__":
    main()
