"""Programmatic dependent launch on a GPU: a chain of kernels, each reading the output of the
one before, launched back to back, matches numpy."""

import numpy as np
import pytest

from tvm_ext.task import Task
from tvm_ext.workload import Workload


@pytest.mark.gpu
@pytest.mark.parametrize("template", ["dense_mma.cuda", "dense_wgmma.cuda"])
def test_chained_kernels_launched_back_to_back_read_finished_inputs(template):
    """x_{i+1} = x_i W^T, 16 launches with no synchronisation between them: each kernel reads
    what the previous one wrote. A kernel that read before its grid dependency resolved would
    see a stale x."""
    import tvm
    from tvm_ext.target import default_target
    wl = Workload.create("dense", (128, 256, 256), "float16", "float16")
    task = Task(wl, default_target(), template=template)
    assert task.dependent_launch
    func = task.build(task.fallback_config()).mod["main"]
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((256, 256)) / 16).astype("float16")  # keeps |x| near 1
    x0 = rng.standard_normal((128, 256)).astype("float16")
    dev = tvm.cuda(0)
    bufs = [tvm.runtime.tensor(x0, dev)] + \
        [tvm.runtime.empty((128, 256), "float16", dev) for _ in range(16)]
    wt = tvm.runtime.tensor(w, dev)
    for i in range(16):
        func(bufs[i], wt, bufs[i + 1])
    dev.sync()
    for i in range(16):  # each step from the GPU's own input, so errors do not compound
        x_in = bufs[i].numpy().astype("float32")
        want = x_in @ w.astype("float32").T
        np.testing.assert_allclose(bufs[i + 1].numpy().astype("float32"), want,
                                   rtol=2e-2, atol=2e-2, err_msg=f"step {i}")
