"""A model's row reductions on CUDA (``relax.rest.warp_rows_rule``): softmax and the norms a
warp a row, four rows a block, reduced by shuffles without a barrier; long rows that are few,
and symbolic shapes, left to dlight. nvcc compiles what it makes. (GPU numerics:
tests/gpu/test_relax_gpu.py.)"""
import re
import shutil

import pytest

from cuda_helpers import nvcc_cubin
from relax_helpers import row_model
from tvm_ext.target import cuda_target

TARGET = cuda_target("sm_90")


def _kernels(mod, **build):
    """(the CUDA source of ``mod`` built by ``tvm_ext.relax.build``, {kernel: its text})."""
    import tvm_ext
    import tvm_ext.relax as tr
    with tvm_ext.apply_history_best([]):
        ex = tr.build(mod, TARGET, **build)
    src = "\n".join(m.inspect_source() for m in ex.mod.imports[0].imports
                    if m.kind == "cuda")
    defined = re.finditer(r'extern "C" __global__ void ((?:__launch_bounds__\(\d+\) )?)(\w+)'
                          r'\([^)]*\) \{(.*?)\n\}\n', src, re.S)
    return src, {m.group(2): m.group(1) + m.group(3) for m in defined}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("which, shape, dtype", [
    ("softmax", (4, 12, 128, 128), "float16"),  # attention's rows
    ("softmax", (3, 5, 100), "float32"),  # rows past a warp's lanes, rows past whole blocks
    ("layer_norm", (512, 768), "float32"),  # two sums a row (a tuple reduction)
    ("rms_norm", (512, 768), "float16"),
])
def test_row_reductions_take_a_warp_a_row(which, shape, dtype):
    src, kernels = _kernels(row_model(which, shape, dtype)[0])
    (name, body), = kernels.items()
    assert body.startswith("__launch_bounds__(128)"), body[:80]
    assert "threadIdx.y" in body and "__shfl_down_sync" in body
    assert "__syncthreads" not in body and "__shared__" not in body
    assert len(nvcc_cubin(src, TARGET, "sm_90")) > 1000


def test_long_rows_that_are_few_and_symbolic_rows_are_left_to_dlight():
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op
    _, kernels = _kernels(row_model("softmax", (8, 5000))[0])
    (body,) = kernels.values()
    assert body.startswith("__launch_bounds__(256)")  # dlight's block of 256 threads a row

    class Softmax(nn.Module):
        def forward(self, x):
            return op.softmax(x, axis=-1)

    mod, _ = Softmax().export_tvm(spec={"forward": {"x": nn.spec.Tensor(["n", 128],
                                                                         "float32")}})
    _, kernels = _kernels(mod)
    (body,) = kernels.values()
    assert "threadIdx.y" not in body


def test_the_blocks_softmax_takes_a_warp_a_row():
    """In the transformer block of TVM's frontend built with fused epilogues, the softmax is
    the warp rule's; no other kernel is."""
    from tvm_ext.bench.model import block_module
    _, kernels = _kernels(block_module(2, 64, 128, 4, dtype="float16")[0], fuse_epilogue=True)
    assert len(kernels) > 5
    warp_rows = [n for n, body in kernels.items()
                 if body.startswith("__launch_bounds__(128)") and "__shfl_down_sync" in body]
    assert warp_rows == ["softmax_kernel"], warp_rows
