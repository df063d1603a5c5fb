"""bf16 inputs on the tensor-core templates: the strategy offers mma.sync (sm_80+) and wgmma
(sm_90) for bf16 -> bf16 / f32 with f32 accumulation, their CUDA issues the bf16 instructions
and nvcc compiles it in every layout, padded shapes included (no GPU needed). The numerics are
tests/gpu/test_bf16_gpu.py."""
import shutil

import pytest

from cuda_helpers import cuda_source, nvcc_cubin, sample_configs
from tvm_ext.errors import TvmExtError
from tvm_ext.strategy import templates_for
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def test_strategy_offers_tensor_cores_for_bf16():
    sm90, sm80 = cuda_target("sm_90"), cuda_target("sm_80")
    wl = Workload.create("dense", (1024, 1024, 1024), "bfloat16", "bfloat16", layout="NT")
    assert [t.name for t in templates_for(wl, sm90)] == ["dense_wgmma.cuda", "dense_mma.cuda",
                                                         "dense_wgmma_ws.cuda",
                                                         "dense_mma_direct.cuda"]
    assert [t.name for t in templates_for(wl, sm80)] == ["dense_mma.cuda", "dense_mma_direct.cuda"]
    odd = Workload.create("batch_matmul", (3, 50, 70, 56), "bfloat16", "float32", layout="TN")
    assert [t.name for t in templates_for(odd, sm90)] == ["batch_matmul_mma.cuda"]
    # wmma (TVM's intrinsics are f16 / int8) does not take bf16, and says so
    with pytest.raises(TvmExtError, match="bfloat16"):
        Task(wl, sm90, template="dense_tensorcore.cuda")


@NVCC
@pytest.mark.parametrize("layout,out,shape", [
    ("NT", "bfloat16", (256, 256, 256)), ("NN", "float32", (256, 256, 256)),
    ("TN", "bfloat16", (100, 72, 200)), ("TT", "float32", (128, 64, 128))])
def test_mma_bf16_compiles_in_every_layout(layout, out, shape):
    target = cuda_target("sm_80")  # mma.sync's bf16 is an sm_80 instruction
    wl = Workload.create("dense", shape, "bfloat16", out, layout=layout)
    task = Task(wl, target, template="dense_mma.cuda")
    for cfg in sample_configs(task, 1, 11):
        src = cuda_source(task, cfg)
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src, cfg
        assert "ldmatrix" in src and "nv_bfloat16" in src
        assert ".f16.f16" not in src
        assert len(nvcc_cubin(src, target, "sm_80")) > 1000, cfg


@NVCC
@pytest.mark.parametrize("op,shape,layout,out", [
    ("dense", (256, 512, 256), "NT", "bfloat16"),
    ("batch_matmul", (2, 128, 256, 128), "NN", "float32")])
def test_wgmma_bf16_compiles_for_sm90a(op, shape, layout, out):
    target = cuda_target("sm_90")
    wl = Workload.create(op, shape, "bfloat16", out, layout=layout)
    task = Task(wl, target, template=f"{op}_wgmma.cuda")
    for cfg in sample_configs(task, 1, 5):
        src = cuda_source(task, cfg)
        assert ".f32.bf16.bf16" in src and ".f16.f16" not in src, cfg
        assert len(nvcc_cubin(src, target, "sm_90a")) > 1000, cfg
