"""Shapes no suite row names, on the CPU: ``python -m tvm_ext.bench.shapes``.

The CPU suite's rows are tuned; a user's shapes mostly are not. This bench builds the fallback
of each shape below (no log: the kernel a user gets before tuning) and times it against numpy
as the CPU suite does (``bench.cpu.run_cpu``: in turn, each sample after idle time). The shapes:
one to four rows of A against large weights stored either way (decoding: ``dense_gemv.x86``,
``dense_gemv_nn.x86``; a row stored as a column, x.T @ W), one to four columns
(``dense_gemv_t.x86``), primes in every position, skinny, square, flat and deep products,
small batches of small matrices and batches of few rows (``batch_matmul_gemv.x86``).

``--versus T1 T2 ...``: those templates' fallbacks too, on each row they apply to but do not
serve by default, sampled in turn with it (which template a shape should default to).

    python -m tvm_ext.bench.shapes [--repeat 7] [--only d0 b3 ...] [--versus T ...]
"""
from __future__ import annotations

import argparse

from ..workload import Workload

#: (M, N, K, layout) of the dense rows: the layout names A then B (T: transposed; NT is a
#: weight stored [N, K], TOPI's dense and ``nn.Linear``; NN one stored [K, N], numpy's x @ W).
DENSE = [(1, 1000, 1000, "NT"), (1, 768, 3072, "NN"), (2, 4096, 4096, "NT"),
         (3, 1024, 4096, "NT"), (8, 4096, 1024, "NT"), (16, 768, 768, "NN"),
         (64, 768, 768, "NT"), (100, 100, 100, "NN"), (500, 500, 500, "NN"),
         (1000, 1000, 1000, "NT"), (512, 512, 4096, "NN"), (1, 50257, 768, "NT"),
         (7, 3000, 1000, "NN"), (384, 1024, 4096, "NT"), (4096, 64, 64, "NN"),
         (128, 128, 8192, "NN"), (2048, 2048, 16, "NN"), (33, 65, 129, "NT"),
         (1, 4096, 4093, "NT"), (1, 4093, 4096, "NT"), (1, 4096, 4096, "NN"),
         (1, 1000, 1000, "NN"), (8192, 1, 1024, "NT"), (1000, 3, 777, "NT"),
         (4, 4096, 64, "NT"), (4, 4096, 256, "NT"), (3, 333, 77, "NT"), (64, 64, 65536, "NN"),
         (1, 4096, 4096, "TN"), (1000, 3, 777, "NN")]
#: (B, M, N, K, layout) of the batch_matmul rows.
BATCHED = [(12, 128, 128, 64, "NT"), (12, 128, 64, 128, "NN"), (8, 1, 1024, 64, "NT"),
           (32, 7, 7, 7, "NN"), (3, 333, 222, 111, "NT"), (96, 197, 197, 64, "NT"),
           (16, 1, 1, 4096, "NT"), (32, 1, 1024, 128, "NT"), (12, 4, 197, 64, "NT"),
           (12, 4, 197, 256, "NT"), (32, 1, 128, 4096, "NN"), (12, 1, 64, 197, "NN")]


def workloads() -> dict:
    """{key: Workload}: d0, d1, ... for the dense rows, b0, b1, ... for the batched ones."""
    out = {f"d{i}": Workload.create("dense", (m, n, k), layout=lay)
           for i, (m, n, k, lay) in enumerate(DENSE)}
    out.update({f"b{i}": Workload.create("batch_matmul", (b, m, n, k), layout=lay)
                for i, (b, m, n, k, lay) in enumerate(BATCHED)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_ext.bench.shapes",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7, help="samples of each side (default 7)")
    p.add_argument("--only", nargs="*", help="only these rows (d0, d1, ..., b0, ...)")
    p.add_argument("--versus", nargs="*", default=[], metavar="TEMPLATE",
                   help="also these templates' fallbacks on the rows they apply to")
    args = p.parse_args(argv)
    from ..strategy import get_template  # noqa: PLC0415
    from ..errors import TvmExtError  # noqa: PLC0415
    try:
        [get_template(t) for t in args.versus]
    except TvmExtError as err:
        p.error(f"--versus: {err}")
    suite = workloads()
    unknown = sorted(set(args.only or []) - set(suite))
    if unknown:
        p.error(f"--only: no row {', '.join(unknown)} (rows: {', '.join(suite)})")
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.only:
        suite = {k: v for k, v in suite.items() if k in args.only}
    from .common import print_table  # noqa: PLC0415
    from .cpu import run_cpu  # noqa: PLC0415
    rows = run_cpu(suite, log=None, repeat=args.repeat,  # no log: every kernel the fallback
                   versus=args.versus)
    print_table(rows, ref_name="numpy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
