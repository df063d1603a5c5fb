"""A shape family's library for CUDA (sm_90): the generic kernel and a library for the seed-000
family (bsz 16 values up to 24, d1 32 values from 512 to 16384, d2 = 512, d3 = 64, f32 NT)
generate code that nvcc compiles. (Numerics and speed: tests/gpu and the device-run issue.)"""
import shutil

import pytest

import tvm_ext.family as F
from family_helpers import fallback_library
from cuda_helpers import nvcc_cubin
from tvm_ext.strategy import get_template
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
    ("batch_matmul", "?x1x?x128", "float16", "NT"),       # decoding's q . K^T: small-batch
])
def test_generic_kernel_compiles_with_nvcc(op, text, dtype, layout):
    fam = Family.parse(text, op, dtype, layout=layout)
    lib = F.build_family(fam, TARGET, logs=[])
    src = _source(lib)
    assert "__global__" in src
    assert len(nvcc_cubin(src, TARGET, "sm_90")) > 1000


ATTENTION = "1..32x64..4096:64x=mx128"  # attention's scores: batch x seq x seq, head dim 128


def test_family_tasks_see_symbolic_extents_in_the_mma_space():
    """A shape family's task is tuned in the space of the kernel that will run: a tensor-core
    kernel of symbolic extents always stages its C tile (static shared memory, 48 KB) and
    launches its blocks row by row; the same shape tuned alone may do neither."""
    from tvm_ext.task import Task
    wl = Family.parse(ATTENTION, "batch_matmul", "float16").workload((8, 1024, 1024, 128))
    big = {"block_row_warps": 2, "block_col_warps": 2, "warp_row_tiles": 4,
           "warp_col_tiles": 4, "stages": 3, "raster": 1, "stage_c": 0}
    static = Task(wl, TARGET, template="batch_matmul_mma.cuda")
    # The generic kernel's task: M and N of any size (granule 1), K fixed at 128.
    family = Task(wl, TARGET, template="batch_matmul_mma.cuda", symbolic=True,
                  granules={"B": 1, "M": 1, "N": 1})
    assert not static.space.violations(static.config_with(big))
    assert any("48 KB" in v for v in family.space.violations(family.config_with(big)))
    grouped = {**big, "warp_col_tiles": 2, "raster": 2}
    assert not static.space.violations(static.config_with(grouped))
    assert any("row by row" in v for v in family.space.violations(family.config_with(grouped)))
    fb = family.fallback_config()
    assert not family.space.violations(fb) and fb["raster"].val == 1
    assert len(list(family.space.valid_indices(limit=200))) == 200  # room left to tune
    # A bucket kernel of granule 64 (every M and N a multiple of 64): a 64 x 64 tile divides
    # it, so it is not staged, and K (fixed, 128) is aligned to a tile_k of 64.
    bucket = Task(wl, TARGET, template="batch_matmul_mma.cuda", symbolic=True,
                  granules={"B": 1, "M": 64, "N": 64})
    small = {**big, "warp_row_tiles": 2, "warp_col_tiles": 2, "stage_c": 0}
    names = bucket.space.names_of(bucket.config_with(small))
    assert not names["c_staged"] and names["c_smem_bytes"] == 0
    names = family.space.names_of(family.config_with(small))
    assert names["c_staged"] and names["c_smem_bytes"] == 64 * 64 * 4


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_attention_family_library_runs_on_tensor_cores(arch):
    """The f16 attention-like family (2048 shapes) is one library of tensor-core kernels of
    symbolic extents: mma.sync on sm_80; on sm_90, wgmma bucket kernels (every M and N a
    multiple of 64) beside an mma.sync generic kernel (any size), built for sm_90a. It
    compiles under nvcc (ptxas holds every kernel to its shared memory), and every shape is
    routed to a bucket kernel."""
    target = cuda_target(arch)
    fam = Family.parse(ATTENTION, "batch_matmul", "float16", layout="NT")
    assert len(fam.shapes()) == 2048
    bucket = "batch_matmul_wgmma.cuda" if arch == "sm_90" else "batch_matmul_mma.cuda"
    assert F.family_template(fam, target).name == bucket
    assert F.generic_kernel(fam, target).template == "batch_matmul_mma.cuda"
    lib = F.compile_library(fallback_library(fam, target, 3, "cuda"), target)
    src = _source(lib)
    assert src.count("__global__") >= 4 and "mma.sync.aligned.m16n8k16" in src
    assert ("wgmma.mma_async" in src) == (arch == "sm_90")
    assert len(nvcc_cubin(src, target, arch + ("a" if arch == "sm_90" else ""))) > 1000
    assert {lib.kernel_for(s) for s in fam.shapes()} == {0, 1, 2}
    assert lib.kernel_for((4, 256, 512, 128)) == 3  # not tied: the generic kernel
    # Inside a bucket but not a multiple of the granule (64): the bucket kernels take
    # 64 * t, so the generic kernel runs it; the dispatcher's condition says the same.
    assert {a: fam.granule(a) for a in fam.varying} == {"B": 1, "M": 64, "N": 64}
    assert lib.kernel_for((4, 100, 100, 128)) == 3 and lib.kernel_for((4, 128, 128, 128)) < 3
    func, _ = F.library_func(lib.library, target)
    assert func.script().count("% 64 == 0") >= 2  # m and n, in the bucket kernels' condition


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_wgmma_serves_families_of_64_multiples_with_overhanging_tiles():
    """The wgmma template's kernels of symbolic extents: a family task takes tiles that
    overhang M and N (guarded) and any launch grouping, where every size of them is a
    multiple of 64; a family of other sizes, or of varying K, gets the mma.sync template."""
    from tvm_ext.task import Task
    fam = Family.parse(ATTENTION, "batch_matmul", "float16", "float16", layout="NT")
    wl = fam.workload((18, 3520, 3520, 128))  # 3520 = 64 x 55: no 128-row tile divides it
    big = {"warpgroups": 2, "block_n": 256, "block_k": 64, "stages": 4, "wgmma_wait": 1,
           "raster": 8, "stage_c": 1}
    static = Task(wl, TARGET, template="batch_matmul_wgmma.cuda")
    assert static.space.violations(static.config_with(big))
    family = Task(wl, TARGET, template="batch_matmul_wgmma.cuda", symbolic=True,
                  granules=F.family_granules(fam, "batch_matmul_wgmma.cuda"))
    assert not family.space.violations(family.config_with(big))
    # its measured kernel is the guarded one, on the representative's sizes
    src = family.build(family.config_with(big)).mod.imports[0].inspect_source()
    assert "wgmma.mma_async" in src and "min(" in src
    assert len(nvcc_cubin(src, TARGET, "sm_90a")) > 1000
    for text, why in (("1..4x96..960:96x=mx128", "multiple of 64"),
                      ("1..4x64..512:64x=mx64,128", "K is fixed")):
        other = Family.parse(text, "batch_matmul", "float16", "float16", layout="NT")
        t = F.family_template(other, TARGET)
        assert t.name == "batch_matmul_mma.cuda"
        assert why in get_template("batch_matmul_wgmma.cuda").family_check(other)


def test_decoding_family_kernels_take_granules_and_unroll_k():
    """Decoding's P . V over a cache of 128 t (batch_matmul_small_batch.cuda): the bucket
    kernels take K as a multiple of 128 (no guarded loads), the generic kernel pads it; each
    takes its symbolic count of K steps 4 at a time (its loads in flight together, as nvcc
    has them in a kernel of static K: the family's K 2049..4096 bucket 0.91x -> 1.00x torch)."""
    fam = Family.parse("32x1x128x128..4096:128", "batch_matmul", "float16", "float16",
                       layout="NN")
    assert F.family_template(fam, TARGET).name == "batch_matmul_small_batch.cuda"
    src = _source(F.compile_library(fallback_library(fam, TARGET, 2, "cuda"), TARGET))
    kernels = [k for k in src.split('extern "C" __global__')[1:]
               if k.split("\n")[0].rstrip().endswith("{")]  # definitions
    assert len(kernels) == 3
    *buckets, generic = kernels
    assert "int k)" in generic.split("\n")[0] and "condval" in generic
    assert all("condval" not in k for k in buckets)
    assert all(k.count("B_ptr[") == 4 for k in kernels)
