"""Subgraph tasks for CUDA (sm_90): an int8 matmul with requantize to int8, f16 matmuls +
bias + gelu (with f16 output; times a tensor), an f32 gate (silu, times the up projection),
built on every template that applies (the tensor-core ones and
the CUDA-core one), generate code that nvcc compiles. (Their GPU numerics: tests/gpu.)"""
import re
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
                    layout="NN", epilogue="bias+gelu+mul"),  # a padded shape: staged write-back
    Workload.create("dense", (512, 768, 256), epilogue="silu+mul"),  # a gated MLP's gate, f32
]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("wl", CASES, ids=str)
def test_subgraph_kernels_compile_with_nvcc(wl):
    names = [t.name for t in templates_for(wl, TARGET)]
    # the wgmma kernel templates compute the epilogue in their own write-back (sm_90a)
    assert names and any("wgmma" in n for n in names) == (wl.dtype == "float16" and
                                                         wl.M % 64 == 0 and wl.N % 64 == 0)
    for name in names:
        task = Task(wl, TARGET, template=name)
        picks = task.space.random_valid(np.random.default_rng(0), 1, max_draws=200000)
        sampled = [] if "wgmma" in name else [task.config(i) for i in picks]  # (CI time)
        for cfg in [task.fallback_config()] + sampled:
            src = cuda_source(task, cfg)
            arch = "sm_90a" if "wgmma" in name else "sm_90"
            assert len(nvcc_cubin(src, TARGET, arch)) > 1000, (name, cfg)


def test_relax_fused_f16_function_takes_the_wgmma_kernel():
    """A fused f16 matmul + bias + relu of a Relax model on sm_90 gets the wgmma kernel with
    the epilogue in its write-back (its parameters are the fused function's)."""
    import tvm_ext
    from relax_helpers import bias_relu_model
    from tvm_ext.relax.apply import ApplyTunedKernels
    from tvm_ext.relax.subgraph import fuse
    mod, epilogues = fuse(bias_relu_model((2, 128, 256), (2, 256, 512), "float16"))
    with tvm_ext.apply_history_best([]):
        apply = ApplyTunedKernels(TARGET, epilogues)
        apply(mod)
    assert [(str(wl), name) for _, wl, name, _ in apply.replaced] == \
        [("batch_matmul 2x128x512x256 float16->float16 NN +bias+relu", "batch_matmul_wgmma.cuda")]


def test_relax_fused_function_whose_parameters_differ_gets_a_schedule(monkeypatch):
    """Where the wgmma kernel's parameters are not the fused function's, the function gets
    the best schedulable template instead, reported once."""
    import tvm_ext
    import tvm_ext.relax.apply as apply_mod
    from relax_helpers import bias_relu_model
    from tvm_ext.relax.subgraph import fuse
    monkeypatch.setattr(apply_mod, "_same_params", lambda new, old: False)
    mod, epilogues = fuse(bias_relu_model((2, 128, 256), (2, 256, 512), "float16"))
    with tvm_ext.apply_history_best([]) as ctx:
        apply = apply_mod.ApplyTunedKernels(TARGET, epilogues)
        apply(mod)
    assert [name for _, _, name, _ in apply.replaced] == ["batch_matmul_mma.cuda"]
    assert [c.template for c in ctx.report.choices] == ["batch_matmul_mma.cuda"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_relax_build_with_cuda_graphs_captures_the_block():
    """``build(..., cuda_graph=True)``: the block of TVM's frontend, fused, runs its static
    regions as CUDA graphs (TVM's capture builtins in the VM's code); without it, none. (Its
    GPU numerics, a replay on new inputs: tests/gpu/test_relax_gpu.py.)"""
    import tvm_ext
    import tvm_ext.relax as tr
    from tvm_ext.bench.model import block_module
    mod, _ = block_module(2, 64, 128, 4, dtype="float16")
    for graph in (False, True):
        with tvm_ext.apply_history_best([]):
            ex = tr.build(mod, TARGET, fuse_epilogue=True, cuda_graph=graph)
        text = ex.as_text()
        assert ("vm.builtin.cuda_graph.run_or_capture" in text) == graph
    # the input copied first (``inputs_copied``): one graph holds every kernel but that copy
    # and the copy of the result (a fresh tensor at every call); before, the projections
    # that read x ran one by one between four graphs
    forward = text.split("@forward:")[1].split("\n\n")[0]
    assert forward.count("vm.builtin.cuda_graph.run_or_capture") == 1
    outside = re.findall(r"call  (\w+) ", forward)
    outside = [k for k in outside if not k.startswith("vm.builtin")]
    assert outside[0] == "tvm_ext_copy_x" and len(outside) == 2, outside
    assert "matmul" not in outside[1], outside
