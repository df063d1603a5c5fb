"""numpy's BLAS threads and ours in one process: ``python -m tvm_ext.bench.interplay``.

OpenBLAS's workers spin for a while after each call (2^``OPENBLAS_THREAD_TIMEOUT`` cycles,
2^28 by default), and so do TVM's (``TVM_THREAD_POOL_SPIN_COUNT`` rounds, by default 300000):
a kernel called right after the other library's finds the cores busy. TVM also pins each
worker to a core but not the calling thread, which runs the first task: where the scheduler
has put the caller on a worker's core, the two share it. For each setting (both defaults;
TVM's workers sleeping as soon as a kernel ends, ``tvm_ext.pool_yields``; OpenBLAS's after 2^4
cycles; both; TVM's workers not pinned, ``TVM_BIND_THREADS=0``), a fresh process times, in
turn:

- ``ours``: our kernel alone (each call after 50 ms of idle time);
- ``ours after numpy``: our kernel called right after a numpy matmul of the same shape;
- ``numpy``: numpy alone, and ``numpy after ours``: right after our kernel.

Medians in ms; the slowdowns are against the same library alone in the same process.

    python -m tvm_ext.bench.interplay [--shape 128x768x768] [--calls 40]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _child(shape, calls: int) -> dict:
    """Runs in a fresh process: the four timings for one spin setting."""
    import numpy as np  # noqa: PLC0415
    import tvm  # noqa: PLC0415

    from ..codegen import use_host_cores  # noqa: PLC0415
    from ..host_memory import host_empty, host_tensor  # noqa: PLC0415
    from ..target import host_cpu_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    from ..workload import Workload  # noqa: PLC0415
    threads = use_host_cores()
    m, n, k = shape
    wl = Workload.create("dense", (m, n, k), layout="NT")
    task = Task(wl, host_cpu_target())
    func = task.build(task.fallback_config()).mod["main"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k), dtype=np.float32)
    ta, tb = host_tensor(a), host_tensor(b)
    out = host_empty((m, n), "float32", tvm.cpu())

    def ours():
        func(ta, tb, out)

    def numpy():
        a @ b.T

    for _ in range(5):  # warm both pools
        ours()
        numpy()

    def timed(first, second) -> float:
        samples = []
        for _ in range(calls):
            time.sleep(0.05)  # every spinning thread asleep
            if first is not None:
                first()
            start = time.perf_counter()
            second()
            samples.append(time.perf_counter() - start)
        return float(np.median(samples)) * 1e3

    return {"threads": threads, "ours": timed(None, ours),
            "ours after numpy": timed(numpy, ours), "numpy": timed(None, numpy),
            "numpy after ours": timed(ours, numpy)}


#: (label, environment) of each process: TVM's spin count and OpenBLAS's thread timeout
#: (its workers spin 2^n cycles before they sleep: n = 28 by default, 4 the least it takes).
SETTINGS = (("defaults", {}),
            ("TVM spin 0", {"TVM_THREAD_POOL_SPIN_COUNT": "0"}),
            ("BLAS timeout 4", {"OPENBLAS_THREAD_TIMEOUT": "4"}),
            ("both", {"TVM_THREAD_POOL_SPIN_COUNT": "0", "OPENBLAS_THREAD_TIMEOUT": "4"}),
            ("TVM unbound", {"TVM_BIND_THREADS": "0"}))
#: The variables the settings set (cleared from each child's environment first).
SETTING_VARS = ("TVM_THREAD_POOL_SPIN_COUNT", "OPENBLAS_THREAD_TIMEOUT", "TVM_BIND_THREADS")


def run(shape, calls: int) -> list:
    rows = []
    for label, extra in SETTINGS:
        env = {k: v for k, v in os.environ.items() if k not in SETTING_VARS}
        env.update(extra)
        cmd = [sys.executable, "-m", "tvm_ext.bench.interplay", "--child",
               "--shape", "x".join(map(str, shape)), "--calls", str(calls)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["setting"] = label
        rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.interplay",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="128x768x768", help="MxNxK of the dense (default "
                                                         "128x768x768)")
    p.add_argument("--calls", type=int, default=40, help="timed calls per cell (default 40)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from ..errors import WorkloadError  # noqa: PLC0415
    from ..workload import parse_shape  # noqa: PLC0415
    try:
        shape = parse_shape(args.shape, "dense")[-3:]
    except WorkloadError as err:
        p.error(f"--shape: {err}")
    if args.calls < 1:
        p.error(f"--calls must be >= 1, got {args.calls}")
    if args.child:
        print(json.dumps(_child(shape, args.calls)))
        return 0
    rows = run(shape, args.calls)
    print(f"dense {args.shape} f32 NT, {rows[0]['threads']} TVM threads, median ms of "
          f"{args.calls} calls, each after 50 ms idle")
    print(f"{'setting':<18}{'ours':>8}{'ours after numpy':>18}{'numpy':>8}"
          f"{'numpy after ours':>18}")
    for r in rows:
        print(f"{r['setting']:<18}{r['ours']:>8.3f}{r['ours after numpy']:>11.3f} "
              f"({r['ours after numpy'] / r['ours']:.3g}x){r['numpy']:>8.3f}"
              f"{r['numpy after ours']:>11.3f} ({r['numpy after ours'] / r['numpy']:.3g}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
