"""Every CUDA template compiles with nvcc (sm_80 and sm_90, no GPU needed) over a grid of shapes:
the seed shapes, primes, odd K, 1000^3, M = 1 and 3, a large batch, each in every dtype and
layout a template claims (``template.why_not``).

The grid has about seven hundred (template, shape, dtype, layout, arch) cases; a seeded random
subset is compiled, so that the test fits CI (2 cores): per template the seed shapes it claims,
on both architectures, and random cases until every dtype and every layout it claims is in
one; each case with its fallback, and ``SAMPLED_PER_TEMPLATE`` valid configs drawn at random
dealt over the cases. TVM builds the sources in this process (the tensor
intrinsics are imported once); nvcc compiles them in two threads, beside it.
"""
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from cuda_helpers import cuda_source, nvcc_cubin
from tvm_ext.strategy import all_templates
from tvm_ext.target import cuda_target, hardware_facts
from tvm_ext.task import Task
from tvm_ext.workload import Workload

SEEDS = {("batch_matmul", (24, 16384, 512, 64), "float32", "NT"),
         ("dense", (16, 4096, 4096), "float16", "NT")}
SHAPES = {
    "batch_matmul": [(24, 16384, 512, 64), (256, 64, 64, 64), (2, 127, 131, 137),
                     (3, 50, 70, 56), (4, 3, 96, 133), (2, 1, 1000, 33), (5, 64, 48, 5)],
    "dense": [(16, 4096, 4096), (1009, 1009, 1009), (127, 131, 137), (1000, 1000, 1000),
              (1, 4096, 4096), (3, 512, 133), (64, 256, 33), (200, 100, 5), (1, 1, 1),
              (512, 512, 256)],  # (the last: a shape wgmma claims, multiples of 64)
}
DTYPES = ("float32", "float16", "int8")
LAYOUTS = ("NN", "NT", "TN", "TT")
ARCHS = ("sm_80", "sm_90")
SAMPLED_PER_TEMPLATE = 4  # valid configs drawn per template, dealt over its cases
# (32 until 2026-11-26, 20, 12 and 6 until 2026-11-27: the whole suite then took 14-16, 13-14
# and, on a Zen 3 CI host, 21-23 and 16-18 minutes on 2 cores; this file took 8.4 of its 46
# CPU minutes with 12, 4.7 of 32 with 6)
SEED = 2026


def _grid(template):
    """(op, shape, dtype, layout, arch) cases of the grid that ``template`` claims."""
    out = []
    for shape in SHAPES[template.op]:
        for dtype in DTYPES:
            for layout in LAYOUTS:
                wl = Workload.create(template.op, shape, dtype, layout=layout)
                for arch in ARCHS:
                    if template.why_not(wl, hardware_facts(cuda_target(arch), dtype)) is None:
                        out.append((template.op, shape, dtype, layout, arch))
    return out


def _picked(template, rng):
    """The seed shapes the template claims (on both architectures), then random cases until
    every dtype and every layout it claims is in one (a (dtype, layout) group is taken, in
    random order, where its dtype or its layout is not in a case yet: four cases cover three
    dtypes and four layouts; one of each of the twelve groups took 8.4 CPU minutes for the
    file on a 2-core Zen 3)."""
    cases = _grid(template)
    picked = [c for c in cases if c[:4] in SEEDS]
    dtypes, layouts = {c[2] for c in picked}, {c[3] for c in picked}
    groups = {}
    for c in cases:
        groups.setdefault((c[2], c[3]), []).append(c)
    keys = sorted(groups)
    for k in rng.permutation(len(keys)):
        dtype, layout = keys[k]
        if dtype not in dtypes or layout not in layouts:
            group = groups[keys[k]]
            picked.append(group[rng.integers(len(group))])
            dtypes.add(dtype)
            layouts.add(layout)
    return picked


CUDA_TEMPLATES = [t for t in all_templates() if t.target_kind == "cuda"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("template", CUDA_TEMPLATES, ids=lambda t: t.name)
def test_shape_grid_compiles(template):
    rng = np.random.default_rng(SEED + CUDA_TEMPLATES.index(template))
    cases = _picked(template, rng)
    assert cases, f"{template.name} claims none of the grid"
    failures, jobs = [], []
    started = time.time()
    with ThreadPoolExecutor(2) as pool:
        for n, (op, shape, dtype, layout, arch) in enumerate(cases):
            target = cuda_target(arch)
            task = Task(Workload.create(op, shape, dtype, layout=layout), target,
                        template=template.name)
            fallback = task.fallback_config()
            if template.name.split(".")[0] in ("batch_matmul", "dense_large_batch",
                                               "dense_small_batch"):
                # The CUDA-core fallbacks are configs of their own space (any shape).
                assert task.space.is_valid(fallback), (task, task.space.violations(fallback))
            share = SAMPLED_PER_TEMPLATE // len(cases) + (n < SAMPLED_PER_TEMPLATE % len(cases))
            picks = task.space.random_valid(rng, share, max_draws=20000)
            # wgmma kernels carry an sm_90a target (the architecture-specific instructions).
            nvcc_arch = arch + "a" if "wgmma" in template.name else arch
            for cfg in [fallback] + [task.config(i) for i in picks]:
                label = f"{task.workload} {arch} {cfg}"
                try:
                    src = cuda_source(task, cfg)
                except Exception as err:  # noqa: BLE001  (reported below, with the config)
                    failures.append(f"{label}: build: {str(err).strip().splitlines()[-1]}")
                    continue
                jobs.append((label, pool.submit(nvcc_cubin, src, target, nvcc_arch)))
        for label, job in jobs:
            try:
                assert len(job.result()) > 1000
            except Exception as err:  # noqa: BLE001
                lines = [ln for ln in str(err).splitlines() if "error" in ln or "ptxas" in ln]
                failures.append(f"{label}: nvcc: {' | '.join(lines[-3:])[:400]}")
    print(f"{template.name}: {len(cases)} cases, {len(jobs)} kernels compiled in "
          f"{time.time() - started:.1f} s")
    assert not failures, "\n".join(failures)
