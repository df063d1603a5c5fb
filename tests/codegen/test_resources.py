"""The CUDA-core spaces describe the kernel really built: the shared memory their ``smem_bytes``
let term computes for a config is what the lowered kernel allocates (TIR allocations of scope
shared / shared.dyn after the pipeline ``tvm.compile`` runs, and the ``__shared__`` arrays of the
CUDA source), and it stays within the device's limit.

The model once said 30,720 bytes for the batch_matmul.cuda fallback on the 24x16384x512x64 f32
NT bmm, whose kernel declared 55,296 (storage_align pads a 16-float row to a stride of 36, and
double buffering doubles both tiles): ptxas refused it (0xd800 > 0xc000)."""
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


# ---- the tensor-core templates (their spaces are not this file's to change: findings) ----

TC_CASES = [
    ("dense_tensorcore.cuda", "dense", (512, 512, 512), "float16", "NT"),
    ("dense_tensorcore.cuda", "dense", (100, 72, 200), "float16", "NN"),
    ("batch_matmul_tensorcore.cuda", "batch_matmul", (8, 256, 256, 128), "int8", "NT"),
    ("dense_mma.cuda", "dense", (100, 72, 200), "float16", "TN"),
    ("batch_matmul_mma.cuda", "batch_matmul", (8, 256, 256, 128), "int8", "NT"),
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


@pytest.mark.parametrize("case", TC_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[2]))}")
def test_tensor_core_kernels_fit_the_shared_memory(case):
    """Sampled valid configs of the tensor-core templates build kernels whose shared memory
    launches; wgmma's model (``max(ab_smem_bytes, c_smem_bytes)``, one dynamic buffer reused
    by the C tile) is exactly the kernel's."""
    task = _task(case)
    picks = task.space.random_valid(np.random.default_rng(TC_CASES.index(case)), 6,
                                    max_draws=200000)
    for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
        for func in lowered_kernels(task, cfg).values():
            static, dynamic, _ = kernel_resources(func)
            assert _fits(task, static, dynamic), f"{cfg}: {static} + {dynamic} dynamic"
            if "wgmma" in case[0]:
                names = task.space.names_of(cfg)
                assert (static, dynamic) == (0, max(names["ab_smem_bytes"],
                                                    names["c_smem_bytes"])), cfg


# Found by the checks above over wider samples; each test holds the config that shows it.
# Once the template's space (or schedule) is fixed, the xfail turns into a failure: drop it.

@pytest.mark.xfail(strict=True, reason="dense_mma.cuda's space models the A/B tiles as "
                   "(tile_m + tile_n) * (tile_k + offset), but a 16-element K row with offset 8 "
                   "is stored 40 wide (storage_align to 32n + 8), and an NN B tile is K-major: "
                   "a staged C tile (static) plus the A/B tiles (dynamic, under 48 KB) then "
                   "exceed 48 KB, and the launch fails (CUDA_ERROR_INVALID_VALUE on an H100)")
@pytest.mark.parametrize("layout,knobs", [
    ("NN", {"block_row_warps": 1, "block_col_warps": 1, "warp_row_tiles": 1,
            "warp_col_tiles": 4, "chunk": 8, "stages": 2, "offset": 8, "vec": 8, "raster": 1,
            "stage_c": 1, "split_k": 1}),       # 4,096 static + 45,568 dynamic
    ("NT", {"block_row_warps": 2, "block_col_warps": 2, "warp_row_tiles": 8,
            "warp_col_tiles": 1, "chunk": 1, "stages": 1, "offset": 8, "vec": 4, "raster": 4,
            "stage_c": 1, "split_k": 1}),       # 32,768 static + 23,040 dynamic
])
def test_dense_mma_valid_configs_whose_kernel_cannot_launch(layout, knobs):
    task = _task(("dense_mma.cuda", "dense", (1024, 1024, 1024), "float16", layout))
    cfg = task.config_with(knobs)
    (func,) = lowered_kernels(task, cfg).values()
    static, dynamic, _ = kernel_resources(func)
    assert not task.space.is_valid(cfg) or _fits(task, static, dynamic)


@pytest.mark.xfail(strict=True, reason="a valid batch_matmul_wgmma.cuda config fails in TVM's "
                   "shared-memory planning: Check failed: (it != scope.buffer_byte_offsets."
                   "end())")
def test_batch_matmul_wgmma_valid_config_that_does_not_build():
    task = _task(("batch_matmul_wgmma.cuda", "batch_matmul", (16, 256, 512, 128), "float16",
                  "NN"))
    cfg = task.config_with({"warpgroups": 2, "block_n": 256, "block_k": 64, "stages": 2,
                            "wgmma_wait": 0, "raster": 2, "stage_c": 1})
    assert task.space.is_valid(cfg)
    lowered_kernels(task, cfg)
