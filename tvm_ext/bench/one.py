"""``python -m tvm_ext.bench.one``: one kernel of the GPU suite, for a profiler and a reading of
its machine code.

    python -m tvm_ext.bench.one --only mm8192 --template sgemm.cuda --set block_k=16 min_blocks=2
    ncu --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats \\
        python -m tvm_ext.bench.one --only mm8192 --template sgemm.cuda --set block_k=16
    python -m tvm_ext.bench.one --only mm8192 --cublas      # cuBLAS's kernel (torch), the same way
    python -m tvm_ext.bench.one --only mm8192 --log logs/cuda_sm90.json   # the shipped record

The kernel is the template's fallback for the workload's op with ``--set``'s knobs (one value
each; the template named as ``--sweep`` names it, without the op), checked once against numpy,
or, with ``--log``, the config that a build applies from that log (its record for this GPU, else
the fallback), then launched ``--calls`` times (3 by default: ``--launch-skip 3`` profiles the
first launch after the check and two warm-ups). ``--sass`` also compiles its CUDA source with
nvcc and prints the SASS instruction mix of the kernel (``cuobjdump -sass``; the counts are
static, so the main loop's share is its instructions' share of the code, not of the time).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

from ..errors import TvmExtError

PROG = "tvm_ext.bench.one"


def sass_mix(cuda_source: str, arch: str = "sm_90a", save: str = "") -> collections.Counter:
    """{opcode (without modifiers): count} of the SASS of ``cuda_source`` (nvcc, cuobjdump);
    the SASS itself written to ``save`` if given."""
    for tool in ("nvcc", "cuobjdump"):
        if shutil.which(tool) is None:
            raise TvmExtError(f"--sass needs {tool} on PATH")
    with tempfile.TemporaryDirectory() as d:
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(cuda_source)
        subprocess.run(["nvcc", f"-arch={arch}", "-cubin", cu, "-o", cu + ".cubin"],
                       check=True, capture_output=True)
        sass = subprocess.run(["cuobjdump", "-sass", cu + ".cubin"], check=True,
                              capture_output=True, text=True).stdout
    if save:
        with open(save, "w") as f:
            f.write(sass)
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass)
    return collections.Counter(ops)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--only", required=True, help="the GPU suite's key (e.g. mm8192)")
    p.add_argument("--template", help="e.g. sgemm.cuda, wgmma_ws.cuda (as --sweep)")
    p.add_argument("--set", nargs="*", default=[], metavar="KNOB=V",
                   help="knob values set on the fallback")
    p.add_argument("--log", help="the kernel that a build applies from this log (the tuned "
                   "record of the workload on this GPU) instead of --template's fallback")
    p.add_argument("--cublas", action="store_true", help="cuBLAS's kernel (torch) instead")
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--sass", action="store_true", help="print the kernel's SASS mix")
    p.add_argument("--sass-out", default="", metavar="FILE", help="and write its SASS here")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except TvmExtError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    import numpy as np  # noqa: PLC0415
    from ..space import knob_values  # noqa: PLC0415
    from .common import check_grid  # noqa: PLC0415
    from .gpu import GPU_SUITE, _checked, _reference, template_task  # noqa: PLC0415
    if args.only not in GPU_SUITE:
        raise TvmExtError(f"--only {args.only!r}: not in the GPU suite "
                          f"({', '.join(GPU_SUITE)})")
    if sum(map(bool, (args.cublas, args.template, args.log))) != 1:
        raise TvmExtError("give one of --template, --log and --cublas")
    if args.log and args.set:
        raise TvmExtError("--set takes --template (a --log record keeps its own knobs)")
    wl = GPU_SUITE[args.only]
    grid = knob_values(args.set)
    if any(len(v) != 1 for v in grid.values()):
        raise TvmExtError("--set: one value a knob here")
    task = None
    if args.log:
        from ..dispatch import apply_history_best, choose  # noqa: PLC0415
        from ..target import default_target  # noqa: PLC0415
        with apply_history_best([args.log]):
            task, choice = choose(wl, default_target())
        cfg = choice.config
        print(f"{task.name} {wl} ({'tuned' if choice.tuned else 'fallback'}): {cfg}", flush=True)
    elif not args.cublas:
        from ..target import default_target  # noqa: PLC0415
        task = template_task(wl, args.template, default_target())
        check_grid(task, grid)
        cfg = task.config_with({k: v[0] for k, v in grid.items()})
        if not task.space.is_valid(cfg):
            raise TvmExtError(f"--set: not in the space: {'; '.join(task.space.violations(cfg))}")
        print(f"{task.name} {wl}: {cfg}", flush=True)
    import torch  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    from ..measure.check import tolerance  # noqa: PLC0415
    args_t, launches, expect = _reference(wl, np.random.default_rng(0))
    if args.cublas:
        launch = launches["cuBLAS"]
        ok = np.allclose(launch().float().cpu().numpy(), expect, *tolerance(wl))
    else:
        built = task.build(cfg)
        if args.sass or args.sass_out:
            mix = sass_mix(built.mod.imports[0].inspect_source(), save=args.sass_out)
            total = sum(mix.values())
            print("SASS mix:", ", ".join(f"{op} {n} ({100 * n / total:.0f}%)"
                                         for op, n in mix.most_common(14)), flush=True)
        launch = _checked(args.only, wl, args_t, expect, task.name, lambda: built, {})
        ok = launch is not None
    print(f"checked against numpy: {'ok' if ok else 'WRONG or not built (see above)'}",
          flush=True)
    if not ok:
        return 1
    for _ in range(args.calls):
        launch()
    tvm.cuda(0).sync()
    torch.cuda.synchronize()
    print(f"launched {args.calls} times", flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
