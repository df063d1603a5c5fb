"""The CUDA-core spaces describe the kernel really built: the shared memory their ``smem_bytes``
let term computes for a config is what the lowered kernel allocates (TIR allocations of scope
shared / shared.dyn after the pipeline ``tvm.compile`` runs, and the ``__shared__`` arrays of the
CUDA source), and it stays within the device's limit.

The model once said 30,720 bytes for the batch_matmul.cuda fallback on the 24x16384x512x64 f32
NT bmm, whose kernel declared 55,296 (storage_align pads a 16-float row to a stride of 36, and
double buffering doubles both tiles): ptxas refused it (0xd800 > 0xc000).

The tensor-core spaces (mma, wmma, wgmma) are held to their kernels the same way, through their
let terms ``ab_smem_bytes`` and ``c_smem_bytes``."""
import shutil

import numpy as np
import pytest

from cuda_helpers import (cuda_source, kernel_resources, lowered_kernels, nvcc_cubin,
                          source_static_shared)
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

SEED = ("batch_matmul.cuda", "batch_matmul", (24, 16384, 512, 64), "float32", "NT")

# (template, op, shape, dtype, layout): aligned and padded shapes, every layout, both dtypes.
CASES = [
    SEED,
    ("batch_matmul.cuda", "batch_matmul", (3, 50, 70, 56), "float16", "TT"),
    ("batch_matmul.cuda", "batch_matmul", (256, 64, 64, 64), "float16", "TN"),
    ("dense_large_batch.cuda", "dense", (1024, 1024, 1024), "float32", "NN"),
    ("dense_large_batch.cuda", "dense", (127, 131, 137), "float16", "NT"),
    ("dense_large_batch.cuda", "dense", (1000, 1000, 1000), "float32", "TN"),
    ("dense_small_batch.cuda", "dense", (16, 4096, 4096), "float16", "NT"),
    ("dense_small_batch.cuda", "dense", (7, 131, 1000), "float32", "NN"),
    ("dense_small_batch.cuda", "dense", (3, 1000, 133), "float16", "TT"),
    ("batch_matmul_small_batch.cuda", "batch_matmul", (32, 1, 4096, 128), "float16", "NT"),
    ("batch_matmul_small_batch.cuda", "batch_matmul", (8, 2, 128, 1000), "float32", "NN"),
]
PER_CASE = 8  # sampled configs per case (plus its fallback): 24+ per template


def _task(case, arch="sm_90"):
    template, op, shape, dtype, layout = case
    return Task(Workload.create(op, shape, dtype, layout=layout), cuda_target(arch),
                template=template)


def _shared(task, cfg):
    """(static, dynamic) shared bytes of the config's kernel (one kernel per config here)."""
    kernels = lowered_kernels(task, cfg)
    assert len(kernels) == 1, list(kernels)
    static, dynamic, _ = kernel_resources(next(iter(kernels.values())))
    return static, dynamic


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[2]))}")
def test_shared_memory_model_is_the_kernel(case):
    task = _task(case)
    seed = CASES.index(case)
    picks = task.space.random_valid(np.random.default_rng(seed), PER_CASE, max_draws=200000)
    assert len(picks) == PER_CASE
    limit = task.facts["max_shared_memory_per_block"]
    for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
        assert task.space.is_valid(cfg), cfg
        model = task.space.names_of(cfg)["smem_bytes"]
        static, dynamic = _shared(task, cfg)
        assert (static, dynamic) == (model, 0), f"{cfg}: kernel {static} + {dynamic} dynamic " \
                                                f"bytes, model {model}"
        assert static <= limit, cfg
    # The source declares what the lowered kernel allocates (checked on the last config).
    assert source_static_shared(cuda_source(task, cfg)) == static


def test_seed_fallback_fits_and_compiles():
    """The seed bmm's fallback: what it allocates fits the 48 KB (it took 55,296 bytes before),
    the old config is outside the space now, and ptxas takes the kernel."""
    task = _task(SEED)
    cfg = task.fallback_config()
    assert task.space.is_valid(cfg)
    static, _ = _shared(task, cfg)
    assert static == task.space.names_of(cfg)["smem_bytes"] <= 49152
    old = task.config_with({"kmajor": 0, "interleave_y": 1})  # the fallback before the fix
    assert old["tile_y"].size == [-1, 16, 8] and old["offset"].val == 4
    assert _shared(task, old) == (task.space.names_of(old)["smem_bytes"], 0) == (55296, 0)
    assert not task.space.is_valid(old)
    if shutil.which("nvcc"):
        target = cuda_target("sm_90")
        assert len(nvcc_cubin(cuda_source(task, cfg), target, "sm_90")) > 1000


# ---- the tensor-core templates: their models of the shared memory, held to the kernel ----

TC_CASES = [
    ("dense_tensorcore.cuda", "dense", (512, 512, 512), "float16", "NT"),
    ("dense_tensorcore.cuda", "dense", (100, 72, 200), "float16", "NN"),
    ("dense_tensorcore.cuda", "dense", (256, 512, 384), "int8", "TT"),
    ("batch_matmul_tensorcore.cuda", "batch_matmul", (8, 256, 256, 128), "int8", "NT"),
    ("batch_matmul_tensorcore.cuda", "batch_matmul", (2, 100, 72, 200), "float16", "TN"),
    ("dense_mma.cuda", "dense", (100, 72, 200), "float16", "TN"),
    ("dense_mma.cuda", "dense", (1024, 1024, 1024), "float16", "NN"),
    ("dense_mma.cuda", "dense", (256, 512, 384), "int8", "TT"),
    ("batch_matmul_mma.cuda", "batch_matmul", (8, 256, 256, 128), "int8", "NT"),
    ("batch_matmul_mma.cuda", "batch_matmul", (2, 100, 72, 200), "float16", "TT"),
    ("dense_wgmma.cuda", "dense", (1024, 1024, 1024), "float16", "NT"),
    ("batch_matmul_wgmma.cuda", "batch_matmul", (16, 256, 512, 128), "float16", "NN"),
]


def _fits(task, static, dynamic):
    """Whether a kernel's shared memory launches: static within 48 KB, and static + dynamic
    within 48 KB unless the dynamic part alone reaches 48 KB (only then does TVM's runtime
    raise the kernel's limit, to the opt-in maximum)."""
    facts = task.facts
    limit, optin = facts["max_shared_memory_per_block"], facts["max_shared_memory_optin"]
    total = static + dynamic
    return static <= limit and (total <= limit or (dynamic >= limit and total <= optin))


def _tc_model(task, cfg):
    """(static, dynamic) shared bytes of a config's (main) kernel by the space's let terms: mma
    has the A/B tiles in dynamic and the staged C tile in static shared memory; wmma and wgmma
    one dynamic buffer, the C tile on the bytes of the A/B tiles."""
    names = task.space.names_of(cfg)
    ab, c = names["ab_smem_bytes"], names["c_smem_bytes"]
    return (c, ab) if task.name.endswith("_mma.cuda") else (0, max(ab, c))


def _tc_shared(task, cfg):
    """(static, dynamic) shared bytes of the config's kernel; a second kernel (split-K's sum)
    has none."""
    res = sorted(kernel_resources(f)[:2] for f in lowered_kernels(task, cfg).values())
    assert all(r == (0, 0) for r in res[:-1]), res
    return res[-1]


@pytest.mark.parametrize("case", TC_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[2]))}"
                         f"-{c[3]}-{c[4]}")
def test_tensor_core_kernels_fit_the_shared_memory(case):
    """Sampled valid configs of the tensor-core templates build kernels whose shared memory is
    the space's model (``ab_smem_bytes`` / ``c_smem_bytes``, see ``_tc_model``) and launches."""
    task = _task(case)
    picks = task.space.random_valid(np.random.default_rng(TC_CASES.index(case)), 6,
                                    max_draws=200000)
    assert len(picks) == 6
    for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
        static, dynamic = _tc_shared(task, cfg)
        assert (static, dynamic) == _tc_model(task, cfg), f"{cfg}: kernel {static} + " \
            f"{dynamic} dynamic bytes, model {_tc_model(task, cfg)}"
        assert _fits(task, static, dynamic), f"{cfg}: {static} + {dynamic} dynamic"


# Found by the checks above over wider samples, when the models were (tile_m + tile_n) x
# (tile_k + offset) for the A/B tiles and the wgmma space let every staged C tile through.

@pytest.mark.parametrize("layout,knobs,shared", [
    ("NN", {"block_row_warps": 1, "block_col_warps": 1, "warp_row_tiles": 1,
            "warp_col_tiles": 4, "chunk": 8, "stages": 2, "offset": 8, "vec": 8, "raster": 1,
            "stage_c": 1, "split_k": 1}, (4096, 45568)),
    ("NT", {"block_row_warps": 2, "block_col_warps": 2, "warp_row_tiles": 8,
            "warp_col_tiles": 1, "chunk": 1, "stages": 1, "offset": 8, "vec": 4, "raster": 4,
            "stage_c": 1, "split_k": 1}, (32768, 23040)),
])
def test_dense_mma_configs_whose_kernel_cannot_launch_are_invalid(layout, knobs, shared):
    """A 16-element K row with offset 8 is stored 40 wide (storage_align to 32n + 8), and an
    NN B tile is stored [tile_k][tile_n]: the old model, (tile_m + tile_n) x (tile_k + offset),
    said these A/B tiles fit beside the static C tile within 48 KB; they do not (the launch
    failed with CUDA_ERROR_INVALID_VALUE on an H100). The model is now the kernel's, and the
    configs are outside the space."""
    task = _task(("dense_mma.cuda", "dense", (1024, 1024, 1024), "float16", layout))
    cfg = task.config_with(knobs)
    assert _tc_shared(task, cfg) == _tc_model(task, cfg) == shared
    assert not _fits(task, *shared)
    assert not task.space.is_valid(cfg)


def test_batch_matmul_wgmma_configs_that_do_not_build_are_invalid():
    """An f32 C tile larger than the ring of A/B tiles (here 133,120 bytes over 98,304): TVM's
    StorageRewrite does not put it on the ring's bytes (a larger f32 buffer cannot take an f16
    one), and MergeSharedMemoryAllocations, whose liveness analysis never sees the ring (the
    kernel touches it only through address_of), fails on it. The space now excludes a staged C
    tile that StorageRewrite would not merge; one more stage (a larger ring) builds, with the
    C tile on the ring's bytes."""
    task = _task(("batch_matmul_wgmma.cuda", "batch_matmul", (16, 256, 512, 128), "float16",
                  "NN"))
    knobs = {"warpgroups": 2, "block_n": 256, "block_k": 64, "stages": 2, "wgmma_wait": 0,
             "raster": 2, "stage_c": 1}
    cfg = task.config_with(knobs)
    names = task.space.names_of(cfg)
    assert (names["ab_smem_bytes"], names["c_smem_bytes"]) == (98304, 133120)
    assert not task.space.is_valid(cfg)
    with pytest.raises(Exception, match="buffer_byte_offsets"):
        lowered_kernels(task, cfg)
    bigger_ring = task.config_with({**knobs, "stages": 3})
    assert task.space.is_valid(bigger_ring)
    assert _tc_shared(task, bigger_ring) == _tc_model(task, bigger_ring) == (0, 147456)
