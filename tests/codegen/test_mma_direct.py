"""The direct mma template (*_mma_direct.cuda): offered for K-major operands (NT) of the
tensor-core dtypes, never the default (records choose it), its fallback valid, and its CUDA
compiles with nvcc (sm_90) without spills: operands loaded from global memory by 16-byte
loads straight into the mma.sync registers (no ldmatrix, no cp.async), the MMAs its knobs
count, and one barrier where K slices meet in shared memory (none without slices)."""
import re
import shutil

import pytest

from cuda_helpers import cuda_source, ptxas_verbose
from tvm_ext.strategy import templates_for
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

SM90 = cuda_target("sm_90", "h100")


def _names(wl):
    return [t.name for t in templates_for(wl, SM90)]


def test_offered_for_k_major_operands_and_never_the_default():
    for op, shape, dtype, out in (("dense", (512, 16, 512), "int8", "int32"),
                                  ("dense", (16, 4096, 4096), "float16", "float32"),
                                  ("batch_matmul", (4, 64, 64, 128), "bfloat16", "bfloat16")):
        names = _names(Workload.create(op, shape, dtype, out, layout="NT"))
        assert f"{op}_mma_direct.cuda" in names and names[0] != f"{op}_mma_direct.cuda"
    for wl in (Workload.create("dense", (512, 16, 512), "float16", layout="NN"),  # B [K, N]
               Workload.create("dense", (512, 16, 512), "float32", layout="NT"),
               Workload.create("dense", (520, 16, 512), "float16", layout="NT"),  # M % 16
               Workload.create("dense", (512, 16, 40), "float16", layout="NT")):  # 80 bytes
        assert "dense_mma_direct.cuda" not in _names(wl), wl


def test_fallback_is_valid_and_sliced_where_k_allows():
    for shape, dtype, out, want in (((512, 16, 512), "int8", "int32", (2, 8, 1)),
                                    ((512, 64, 512), "float16", "float16", (4, 8, 2)),
                                    ((16, 4096, 4096), "float16", "float32", (4, 8, 2)),
                                    ((64, 8, 32), "float16", "float16", (1, 1, 1))):
        task = Task(Workload.create("dense", shape, dtype, out, layout="NT"), SM90,
                    template="dense_mma_direct.cuda")
        fb = task.fallback_config()
        assert task.space.is_valid(fb), task.space.violations(fb)
        assert (fb["warp_n"].val, fb["slice_k"].val, fb["unroll"].val) == want, (shape, fb)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op, shape, dtype, out, knobs", [
    ("dense", (512, 16, 512), "int8", "int32", dict(warp_m=1, warp_n=2, block_warps_m=1,
                                                     block_warps_n=1, slice_k=4, unroll=2)),
    ("dense", (16, 4096, 4096), "float16", "float32", dict(
        warp_m=1, warp_n=4, block_warps_m=1, block_warps_n=2, slice_k=4, unroll=2)),
    ("batch_matmul", (4, 64, 64, 256), "bfloat16", "bfloat16", dict(
        warp_m=2, warp_n=2, block_warps_m=2, block_warps_n=1, slice_k=1, unroll=2)),
], ids=["int8_sliced", "f16_f32_wide", "bf16_bmm_unsliced"])
def test_codegen_compiles_for_sm90(op, shape, dtype, out, knobs):
    task = Task(Workload.create(op, shape, dtype, out, layout="NT"), SM90,
                template=f"{op}_mma_direct.cuda")
    cfg = task.config_with(knobs)
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    src = cuda_source(task, cfg)
    assert "ldmatrix" not in src and "cp.async" not in src
    # every operand word comes in a 16-byte load of the operand's words
    assert "*(uint4*)(((uint*)A_ptr)" in src and "*(uint4*)(((uint*)B_ptr)" in src
    kbytes = shape[-1] * (1 if dtype == "int8" else 2)
    groups = kbytes // 64 // knobs["slice_k"]
    mmas = groups * 2 * knobs["warp_m"] * knobs["warp_n"]  # a warp's, unrolled
    assert src.count("mma.sync.aligned.m16n8k") == mmas
    assert src.count("__syncthreads()") == (knobs["slice_k"] > 1)
    report = ptxas_verbose(src, "sm_90")
    assert "0 bytes spill stores" in report and "0 bytes stack frame" in report, report
    used = int(re.search(r"Used (\d+) registers", report).group(1))
    assert used <= 168, report
