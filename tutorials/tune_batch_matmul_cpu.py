"""Tutorial: tune a batch_matmul on the CPU, then build it with the log.

    python tutorials/tune_batch_matmul_cpu.py [--trials 32] [--log bmm_tutorial.json]

1. describe the workload, 2. make a task (template + workload + target) and look at its space,
3. tune with a random tuner, writing every measurement to a JSON log (AutoTVM v0.2 records),
4. build under ``apply_history_best`` and check the kernel against numpy, 5. compare its time
with the fallback config and with the time the log recorded.
"""
import argparse

import numpy as np

import tvm_ext
from tvm_ext.measure import MeasureOptions, RunOptions
from tvm_ext.measure.check import random_inputs, reference_matmul
from tvm_ext.session import tune_task
from tvm_ext.task import Task


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--shape", default="4x128x128x128")
    p.add_argument("--log", default="bmm_tutorial.json")
    args = p.parse_args(argv)

    # 1. the workload: C[b] = A[b] @ B[b]^T (layout NT), float32
    shape = tvm_ext.workload.parse_shape(args.shape, "batch_matmul")
    wl = tvm_ext.Workload.create("batch_matmul", shape, "float32", layout="NT")

    # 2. a task on the host CPU; its knobs come from tuning_spaces/batch_matmul.x86.json
    task = Task(wl, "llvm")
    print(task.space.describe())

    # 3. tune (random tuner, measured in this process): every measured config is appended
    #    to the log as it is measured
    summary = tune_task(task, args.log, trials=args.trials, tuner="random", seed=0,
                        measure_options=MeasureOptions(run=RunOptions(number=2, repeat=2),
                                                       local=True))
    print(f"tuned {summary.trials} configs: best {summary.best_gflops:.1f} GFLOP/s")

    # 4. build with the log: the best record for this workload and target is applied
    with tvm_ext.apply_history_best(args.log) as ctx:
        kernel = tvm_ext.build(wl, "llvm")
    print(ctx.report)
    rng = np.random.default_rng(0)
    a, b = random_inputs(wl, rng)
    np.testing.assert_allclose(kernel.run(a, b), reference_matmul(wl, a, b), rtol=1e-4,
                               atol=1e-4)

    # 5. the tuned kernel against the untuned fallback and the time in the log
    fallback = tvm_ext.build(wl, "llvm")  # outside the context: fallback config
    t_tuned, t_fallback = kernel.time(a, b), fallback.time(a, b)
    logged = kernel.choice.record_cost
    print(f"tuned {t_tuned * 1e3:.3f} ms (log: {logged * 1e3:.3f} ms), "
          f"fallback {t_fallback * 1e3:.3f} ms")
    return kernel, t_tuned, logged


if __name__ == "__main__":
    main()
