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


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, onnx", [("float32", False), ("float16", False),
                                         ("float16", True)])
def test_a_transformer_block_of_tvms_frontend_on_gpu(dtype, onnx):
    """``bench.model``'s block on the GPU: its matmuls on views (rows of [B, S, K] activations,
    batches of heads) are our kernels, built plain, fused, and fused with CUDA graphs (replayed
    on a second input, then the first again); numpy's answer every call."""
    import numpy as np
    from tvm import relax
    import tvm_ext
    import tvm_ext.relax as tr
    from tvm_ext.bench.model import block_module, numpy_block
    from tvm_ext.target import default_target
    B, S, D, H = 2, 64, 128, 4
    mod, w = block_module(B, S, D, H, onnx, dtype)
    x = np.random.default_rng(6).standard_normal((B, S, D)).astype(dtype)
    want = numpy_block(x.astype("float32"), {k: v.astype("float32") for k, v in w.items()}, H,
                       onnx)
    dev = tvm.cuda(0)
    tol = 2e-3 if dtype == "float32" else 3e-2
    x2 = (x[::-1] * 0.5).astype(dtype)  # a second input: a CUDA graph replayed on it
    want2 = numpy_block(x2.astype("float32"), {k: v.astype("float32") for k, v in w.items()},
                        H, onnx)
    for fuse, graph in ((False, False), (True, False), (True, True)):
        with tvm_ext.apply_history_best([]) as ctx:
            ex = tr.build(mod, default_target(), fuse_epilogue=fuse, cuda_graph=graph)
        assert len({c.workload.anchor for c in ctx.report.choices}) == 5
        forward = relax.VirtualMachine(ex, dev)["forward"]
        for inp, expect in ((x, want), (x2, want2), (x, want)):
            got = forward(tvm.runtime.tensor(inp, dev)).numpy()
            np.testing.assert_allclose(got.astype("float32"), expect, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("which, shape, dtype", [
    ("softmax", (4, 12, 128, 128), "float16"), ("softmax", (4, 12, 128, 128), "float32"),
    ("softmax", (3, 5, 100), "float32"), ("softmax", (700, 2000), "float32"),
    ("layer_norm", (512, 768), "float32"), ("layer_norm", (7, 33), "float16"),
    ("rms_norm", (512, 768), "float16"), ("softmax", (8, 5000), "float32")])
def test_row_reductions_on_gpu(which, shape, dtype):
    """Softmax and the norms built by ``tvm_ext.relax.build`` (a warp a row:
    ``rest.warp_rows_rule``; the last case dlight's) answer as numpy does."""
    import numpy as np
    from tvm import relax
    import tvm_ext
    import tvm_ext.relax as tr
    from relax_helpers import row_model
    from tvm_ext.target import default_target
    mod, reference = row_model(which, shape, dtype)
    x = (np.random.default_rng(8).standard_normal(shape) * 3).astype(dtype)
    with tvm_ext.apply_history_best([]):
        ex = tr.build(mod, default_target())
    dev = tvm.cuda(0)
    got = relax.VirtualMachine(ex, dev)["forward"](tvm.runtime.tensor(x, dev)).numpy()
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(got.astype("float64"), reference(x), rtol=tol, atol=tol)
