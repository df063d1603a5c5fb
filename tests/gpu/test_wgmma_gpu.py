"""The Hopper wgmma templates on a GPU: numerics match numpy over sampled configs."""

import pytest

from cuda_helpers import pool_failures, sample_configs
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

DENSE = Workload.create("dense", (256, 512, 256), "float16", "float16", layout="NT")
BMM = Workload.create("batch_matmul", (2, 128, 256, 128), "float16", "float32", layout="NT")


@pytest.mark.gpu
def test_wgmma_numerics_on_gpu():
    """The fallback and 4 sampled configs each of f16 -> f16 and f16 -> f32 dense and batched
    GEMMs in the 4 layouts (K-major and MN-major operands), checked against numpy by the pool
    measurer (on an sm_90 GPU)."""
    import tvm
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma needs an sm_90 GPU")
    target = cuda_target("sm_90")
    cases = [DENSE, BMM, Workload.create("dense", (512, 256, 512), "float16", "float32",
                                         layout="NN"),
             Workload.create("batch_matmul", (3, 256, 128, 256), "float16", "float16",
                             layout="TN"),
             Workload.create("dense", (256, 512, 384), "float16", "float16", layout="TT")]
    tasks = [Task(wl, target) for wl in cases]
    n, failures = pool_failures([(task, sample_configs(task, 4, seed=seed))
                                 for seed, task in enumerate(tasks)])
    assert n == 25
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_guarded_wgmma_numerics_on_gpu():
    """A shape family's wgmma kernel (guarded: tiles that overhang M and N, any launch
    grouping) on sizes that are odd multiples of 64, in the 4 layouts (K-major and MN-major
    operands: their clamped rows and 8-row chunks), f16 and bf16, staged and direct stores."""
    import tvm
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma needs an sm_90 GPU")
    target = cuda_target("sm_90")
    granules = {"B": 1, "M": 64, "N": 64}
    cases = []
    for i, (layout, dtype, out) in enumerate((("NT", "float16", "float16"),
                                              ("NN", "bfloat16", "float32"),
                                              ("TN", "float16", "float32"),
                                              ("TT", "bfloat16", "bfloat16"))):
        wl = Workload.create("batch_matmul", (3, 448, 320, 128), dtype, out, layout=layout)
        task = Task(wl, target, template="batch_matmul_wgmma.cuda", symbolic=True,
                    granules=granules)
        configs = [task.config_with({"warpgroups": 2, "block_n": bn, "block_k": 64,
                                     "stages": 3, "wgmma_wait": 1, "raster": r,
                                     "stage_c": sc})
                   for bn, r, sc in ((256, 4, i % 2), (128, 2, 1 - i % 2))]
        assert all(task.space.is_valid(c) for c in configs)
        cases.append((task, configs))
    n, failures = pool_failures(cases)
    assert n == 8
    assert not failures, "\n".join(failures)
