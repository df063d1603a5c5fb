"""Subgraph tasks on the GPU: the fused kernels of every CUDA template that takes an epilogue
(wgmma, tensor cores and CUDA cores), int8 with requantize to int8 and f16 with bias + gelu and an
f16 output, checked against the float64 reference with the epilogue."""
import numpy as np
import pytest

from tvm_ext.measure.check import OutputCheck, kernel_inputs
from tvm_ext.strategy import templates_for
from tvm_ext.task import Task
from tvm_ext.workload import Workload

pytestmark = pytest.mark.gpu

CASES = [
    Workload.create("dense", (256, 512, 256), "int8", epilogue="requant:0.05"),
    Workload.create("dense", (128, 3072, 768), "float16", epilogue="bias+gelu+cast:float16"),
    Workload.create("batch_matmul", (4, 100, 72, 200), "float16", "float16", layout="NN",
                    epilogue="bias+gelu"),
    Workload.create("batch_matmul", (2, 128, 256, 64), "float32", layout="TT",
                    epilogue="residual+silu+scale:0.5"),
    # the wgmma kernel templates' own write-back: a batched residual, MN-major A
    Workload.create("batch_matmul", (2, 128, 256, 128), "float16", "float16", layout="TN",
                    epilogue="residual+relu"),
]


@pytest.mark.parametrize("wl", CASES, ids=str)
def test_fused_kernels_on_the_gpu(wl):
    import tvm
    from tvm_ext.target import default_target
    target = default_target()
    if target.kind.name != "cuda":
        pytest.skip("no GPU visible")
    dev = tvm.cuda(0)
    inputs = kernel_inputs(wl, np.random.default_rng(0))
    check = OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:])
    for t in templates_for(wl, target):
        task = Task(wl, target, template=t.name)
        picks = task.space.random_valid(np.random.default_rng(1), 3, max_draws=200000)
        for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
            mod = task.build(cfg).mod
            args = [tvm.runtime.tensor(x, dev) for x in inputs] + \
                [tvm.runtime.empty(wl.out_shape, wl.final_dtype, dev)]
            mod["main"](*args)
            wrong = check(args[-1].numpy())
            assert wrong is None, (t.name, cfg, wrong)
