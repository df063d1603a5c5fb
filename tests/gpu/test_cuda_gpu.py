"""CUDA-core templates on a GPU: numerics of sampled configs for every layout and dtype."""
import zlib

import numpy as np
import pytest

from cuda_helpers import sample_configs
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload
from tvm_ext.measure.check import random_inputs, reference_matmul, tolerance

CASES = [("batch_matmul.cuda", "batch_matmul", (2, 64, 128, 32)),
         ("dense_large_batch.cuda", "dense", (64, 96, 64)),
         ("dense_small_batch.cuda", "dense", (4, 96, 64)),
         ("batch_matmul_small_batch.cuda", "batch_matmul", (3, 4, 96, 64))]


def _check_kernels(task, configs, a, b):
    """Each config built and run on the GPU matches float64 numpy."""
    from tvm_ext.dispatch import Choice, Kernel
    wl = task.workload
    ref = reference_matmul(wl, a, b)
    for cfg in configs:
        kernel = Kernel(task, Choice(wl, task.name, cfg, False), task.build(cfg))
        np.testing.assert_allclose(kernel.run(a, b), ref, *tolerance(wl), err_msg=str(cfg))


def _interleaved_variants(task, n, seed):
    """Up to n valid configs: sampled ones with interleaved thread tiles (both axes, else one),
    so that every case interleaves whatever the sample drew for those knobs."""
    out = []
    for cfg in sample_configs(task, 4 * n, seed):
        for il in ((2, 2), (2, 1), (1, 2)):
            v = task.space.config_from_values(
                {**cfg.values_dict(), "interleave_y": il[0], "interleave_x": il[1]},
                fallback=False)
            if task.space.is_valid(v):
                out.append(v)
                break
        if len(out) == n:
            break
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("template,op,shape,interleave",
                         [(*c, False) for c in CASES] + [(*c, True) for c in CASES[:2]])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_numerics_on_gpu(template, op, shape, interleave, dtype, layout):
    """Sampled configs of every template, and interleaved ones of the two tiled templates."""
    import tvm
    wl = Workload.create(op, shape, dtype, layout=layout)
    task = Task(wl, cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", "")),
                template=template)
    rng = np.random.default_rng(zlib.crc32(f"{template}{dtype}{layout}{interleave}".encode()))
    a, b = random_inputs(task.workload, rng)
    configs = _interleaved_variants(task, 3, 2) if interleave else sample_configs(task, 2, 1)
    assert configs
    _check_kernels(task, configs, a, b)


ODD = [("batch_matmul.cuda", "batch_matmul", (3, 50, 70, 33)),
       ("dense_large_batch.cuda", "dense", (127, 131, 137)),
       ("dense_large_batch.cuda", "dense", (100, 72, 30)),
       ("dense_small_batch.cuda", "dense", (3, 100, 133)),
       ("batch_matmul_small_batch.cuda", "batch_matmul", (5, 3, 100, 133)),
       ("batch_matmul_small_batch.cuda", "batch_matmul", (2, 13, 1009, 4001))]


@pytest.mark.gpu
@pytest.mark.parametrize("template,op,shape", ODD)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_numerics_of_shapes_without_convenient_factors_on_gpu(template, op, shape, dtype,
                                                               layout):
    """Primes and K without a factor in {4, 8, 16, 32}: padded or predicated tiles, the right
    answer (the fallback and sampled configs)."""
    import tvm
    wl = Workload.create(op, shape, dtype, layout=layout)
    task = Task(wl, cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", "")),
                template=template)
    rng = np.random.default_rng(zlib.crc32(f"{template}{shape}{dtype}{layout}".encode()))
    a, b = random_inputs(task.workload, rng)
    _check_kernels(task, sample_configs(task, 3, 4), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("template,op,shape,layout", [
    ("batch_matmul.cuda", "batch_matmul", (8, 1, 256, 3072), "NT"),   # decoding's rows
    ("dense_large_batch.cuda", "dense", (64, 96, 3072), "NN"),
    ("dense_small_batch.cuda", "dense", (1, 4096, 4096), "NT"),
    ("dense_small_batch.cuda", "dense", (3, 100, 3001), "NN"),         # cropped, then cast
    ("batch_matmul_small_batch.cuda", "batch_matmul", (8, 1, 300, 4096), "NT"),
])
def test_f16_outputs_accumulate_in_f32(template, op, shape, layout):
    """f16 -> f16 over a long K: the products summed in f32 and cast at the write-back
    (``f32_acc_dtype``), within the f16 tolerance of float64 numpy (summed in f16, such
    kernels failed it from K = 128)."""
    import tvm
    wl = Workload.create(op, shape, "float16", "float16", layout=layout)
    task = Task(wl, cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", "")),
                template=template)
    a, b = random_inputs(task.workload, np.random.default_rng(3))
    _check_kernels(task, [task.fallback_config()] + sample_configs(task, 2, 5), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("op,shape,tiles", [
    ("batch_matmul", (3, 2, 100, 200), ((32, 2, 1), (16, 4, 2), (32, 1, 2))),
    ("dense", (5, 70, 300), ((32, 2, 1), (16, 4, 5), (32, 1, 2))),
    ("dense", (2, 8, 8), ((8, 1, 2), (8, 1, 1)))])  # (sub-warp groups: 4 columns a warp)
@pytest.mark.parametrize("dtype,out_dtype", [("float32", None), ("float16", "float16")])
def test_staged_sums_of_coalesced_columns_on_gpu(op, shape, tiles, dtype, out_dtype):
    """coalesce_n with as many K threads as columns (the sums staged in shared memory, taken by
    warps' shuffles): padded columns and K, one row a thread and several."""
    import tvm
    from tvm_ext.ops.cuda_simt import SmallBatchConfig, transposed_sum
    wl = Workload.create(op, shape, dtype, out_dtype, layout="NN")
    task = Task(wl, cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", "")),
                template=f"{op}_small_batch.cuda")
    configs = [task.space.config_from_values({"tile_k": [-1, t, v], "tile_x": [-1, t],
                                              "tile_y": [-1, yi], "coalesce_n": 1})
               for t, v, yi in tiles]
    assert all(task.space.is_valid(c) and transposed_sum(SmallBatchConfig.from_knobs(c))
               for c in configs)
    _check_kernels(task, configs, *random_inputs(wl, np.random.default_rng(0)))
