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
