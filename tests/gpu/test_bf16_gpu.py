"""bf16 inputs on the mma.sync and wgmma templates, on a GPU: numerics against numpy (float64 of
the bf16 inputs) over every layout, aligned and padded shapes, bf16 and f32 outputs."""

import pytest

from cuda_helpers import TC_ALIGNED, TC_UNALIGNED, pool_failures, sample_configs
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["dense", "batch_matmul"])
def test_mma_bf16_numerics_on_gpu(op):
    """4 layouts x {aligned, padded} x {bf16, f32 out}: the fallback and one random config each,
    built by pool workers and checked against numpy in isolated runners."""
    import tvm
    target = cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", ""))
    cases = []
    for i, layout in enumerate(("NN", "NT", "TN", "TT")):
        for shapes in (TC_ALIGNED, TC_UNALIGNED):
            for out in ("bfloat16", "float32"):
                wl = Workload.create(op, shapes[op], "bfloat16", out, layout=layout)
                task = Task(wl, target, template=f"{op}_mma.cuda")
                cases.append((task, sample_configs(task, 1, 20 + i)))
    n, failures = pool_failures(cases)
    assert n == 32
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_wgmma_bf16_numerics_on_gpu():
    """The fallback and 2 sampled configs of bf16 wgmma GEMMs in the 4 layouts (K-major and
    MN-major operands), bf16 and f32 outputs (on an sm_90 GPU)."""
    import tvm
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma needs an sm_90 GPU")
    target = cuda_target("sm_90")
    cases = [Workload.create("dense", (256, 512, 256), "bfloat16", "bfloat16", layout="NT"),
             Workload.create("batch_matmul", (2, 128, 256, 128), "bfloat16", "float32",
                             layout="NN"),
             Workload.create("dense", (512, 256, 512), "bfloat16", "float32", layout="TN"),
             Workload.create("batch_matmul", (3, 256, 128, 256), "bfloat16", "bfloat16",
                             layout="TT")]
    tasks = [Task(wl, target) for wl in cases]
    assert all(t.name.endswith("_wgmma.cuda") for t in tasks)
    n, failures = pool_failures([(task, sample_configs(task, 2, seed=seed))
                                 for seed, task in enumerate(tasks)])
    assert n == 12
    assert not failures, "\n".join(failures)
