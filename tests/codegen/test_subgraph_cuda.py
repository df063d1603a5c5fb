"""Subgraph tasks for CUDA (sm_90): an int8 matmul with requantize to int8, and an f16 matmul +
bias + gelu with f16 output, built on every template that applies (the tensor-core ones and
the CUDA-core one), generate code that nvcc compiles. (Their GPU numerics: tests/gpu.)"""
import shutil

import numpy as np
import pytest

from cuda_helpers import cuda_source, nvcc_cubin
from tvm_ext.strategy import templates_for
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

TARGET = cuda_target("sm_90")
CASES = [
    Workload.create("dense", (256, 512, 256), "int8", epilogue="requant:0.05"),
    Workload.create("dense", (128, 3072, 768), "float16", epilogue="bias+gelu+cast:float16"),
    Workload.create("batch_matmul", (4, 100, 72, 200), "float16", "float16",
                    layout="NN", epilogue="bias+gelu"),   # a padded shape: staged write-back
]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("wl", CASES, ids=str)
def test_subgraph_kernels_compile_with_nvcc(wl):
    names = [t.name for t in templates_for(wl, TARGET)]
    assert names and not any("wgmma" in n for n in names)  # wgmma has no epilogue
    for name in names:
        task = Task(wl, TARGET, template=name)
        picks = task.space.random_valid(np.random.default_rng(0), 1, max_draws=200000)
        for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
            src = cuda_source(task, cfg)
            assert len(nvcc_cubin(src, TARGET, "sm_90")) > 1000, (name, cfg)
