"""Relax on a GPU: a matmul with its epilogue fused into our kernel runs right."""
import os

import pytest
import tvm

from relax_helpers import check_fused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.gpu
def test_epilogue_fused_on_gpu():
    from tvm_ext.target import default_target
    check_fused(default_target(), tvm.cuda(0))


@pytest.mark.gpu
def test_fused_f16_function_on_the_wgmma_kernel_on_gpu():
    """relu(x @ w + bias) in f16 on an sm_90 GPU: the fused function runs on the wgmma
    kernel with the epilogue in its write-back, and answers as numpy does."""
    import numpy as np
    from tvm import relax
    import tvm_ext
    import tvm_ext.relax as tr
    from relax_helpers import bias_relu_model
    from tvm_ext.target import default_target
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma needs an sm_90 GPU")
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(s).astype("float16") for s in ((2, 128, 256), (2, 256, 512),
                                                              (512,))]
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(bias_relu_model((2, 128, 256), (2, 256, 512), "float16"),
                      default_target(), fuse_epilogue=True)
    assert [c.template for c in ctx.report.choices] == ["batch_matmul_wgmma.cuda"]
    dev = tvm.cuda(0)
    got = relax.VirtualMachine(ex, dev)["main"](*[tvm.runtime.tensor(x, dev)
                                                  for x in xs]).numpy()
    f32 = [x.astype("float32") for x in xs]
    expect = np.maximum((f32[0] @ f32[1]).astype("float16").astype("float32") + f32[2], 0)
    np.testing.assert_allclose(got.astype("float32"), expect, rtol=2e-2, atol=5e-2)
