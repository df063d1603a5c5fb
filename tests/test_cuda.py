"""CUDA templates: CUDA source for sm_80 and sm_90 that nvcc compiles (no GPU needed), over
sampled configs of every space; numerics on a GPU (``-m gpu``) for every layout and dtype."""
import shutil
import zlib

import numpy as np
import pytest

from cuda_helpers import cuda_source, nvcc_cubin, sample_configs
from tvm_ext.target import cuda_target
from tvm_ext.task import Task, reference_matmul, tolerance
from tvm_ext.workload import Workload

CASES = [("batch_matmul.cuda", "batch_matmul", (2, 64, 128, 32)),
         ("dense_large_batch.cuda", "dense", (64, 96, 64)),
         ("dense_small_batch.cuda", "dense", (4, 96, 64))]


def _sample(task, n, seed):
    return sample_configs(task, n, seed, limit=5000)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("template,op,shape", CASES)
def test_codegen_compiles_with_nvcc(arch, template, op, shape):
    target = cuda_target(arch)
    for seed, (dtype, layout) in enumerate([("float32", "NT"), ("float16", "NN"),
                                            ("float32", "TN")]):
        wl = Workload.create(op, shape, dtype, layout=layout)
        task = Task(wl, target, template=template)
        for cfg in _sample(task, 2, seed):
            assert task.space.is_valid(cfg) or cfg.is_fallback
            src = cuda_source(task, cfg)
            assert "__global__" in src
            assert len(nvcc_cubin(src, target, arch)) > 1000, cfg


def test_strategy_picks_small_batch_for_few_rows():
    from tvm_ext.template import templates_for
    target = cuda_target("sm_90")
    names = [t.name for t in templates_for(Workload.create("dense", (8, 256, 256)), target)]
    assert names == ["dense_small_batch.cuda", "dense_large_batch.cuda"]
    names = [t.name for t in templates_for(Workload.create("dense", (256, 256, 256)), target)]
    assert names == ["dense_large_batch.cuda"]


def test_space_prunes_over_the_limits():
    task = Task(Workload.create("batch_matmul", (4, 256, 256, 256)), cuda_target("sm_90"))
    for i in list(task.space.valid_indices(limit=300)):
        c = task.space.get(i)
        threads = c["tile_y"].size[1] * c["tile_x"].size[1]
        assert 32 <= threads <= 1024
        assert c["tile_y"].size[2] * c["tile_x"].size[2] <= 128
    assert task.space.is_valid(task.fallback_config())


@pytest.mark.gpu
@pytest.mark.parametrize("template,op,shape", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_numerics_on_gpu(template, op, shape, dtype, layout):
    import tvm
    from tvm_ext.dispatch import Choice, Kernel
    wl = Workload.create(op, shape, dtype, layout=layout)
    task = Task(wl, cuda_target("sm_" + tvm.cuda(0).compute_version.replace(".", "")),
                template=template)
    rng = np.random.default_rng(zlib.crc32(f"{template}{dtype}{layout}".encode()))
    a, b = task.random_inputs(rng)
    ref = reference_matmul(wl, a, b)
    for cfg in _sample(task, 2, 1):
        kernel = Kernel(task, Choice(wl, task.name, cfg, False), task.build(cfg))
        np.testing.assert_allclose(kernel.run(a, b), ref, *tolerance(wl), err_msg=str(cfg))
