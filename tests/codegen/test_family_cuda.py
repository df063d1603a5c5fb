"""A shape family's library for CUDA (sm_90): the generic kernel and a library for the seed-000
family (bsz 16 values up to 24, d1 32 values from 512 to 16384, d2 = 512, d3 = 64, f32 NT)
generate code that nvcc compiles. (Numerics and speed: tests/gpu and the device-run issue.)"""
import shutil

import pytest

import tvm_ext.family as F
from family_helpers import fallback_library
from cuda_helpers import nvcc_cubin
from tvm_ext.target import cuda_target
from tvm_ext.workload import Family

SEED = "1,2,3,4,5,6,7,8,10,12,14,16,18,20,22,24x512..16384:512x512x64"
TARGET = cuda_target("sm_90")


def _source(lib):
    return lib.module.imports[0].inspect_source()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_seed_family_library_compiles_with_nvcc():
    fam = Family.parse(SEED, "batch_matmul")
    assert len(fam.shapes()) == 512
    lib = F.compile_library(fallback_library(fam, TARGET, 4, "cuda"), TARGET)
    src = _source(lib)
    # One kernel per library kernel and the generic one (the entry's launches).
    assert src.count("__global__") >= 5
    assert len(nvcc_cubin(src, TARGET, "sm_90")) > 1000
    assert {lib.kernel_for(s) for s in fam.shapes()} == {0, 1, 2, 3}
    assert lib.kernel_for((30, 512, 512, 64)) == 4


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op,text,dtype,layout", [
    ("batch_matmul", "?x?x512x64", "float32", "NT"),      # the seed family's generic kernel
    ("batch_matmul", "?x?x?x128", "float16", "NN"),      # attention-like (seq x seq), f16
    ("dense", "?x1000x133", "float32", "TN"),
])
def test_generic_kernel_compiles_with_nvcc(op, text, dtype, layout):
    fam = Family.parse(text, op, dtype, layout=layout)
    lib = F.build_family(fam, TARGET, logs=[])
    src = _source(lib)
    assert "__global__" in src
    assert len(nvcc_cubin(src, TARGET, "sm_90")) > 1000
