"""The Hopper wgmma templates: the strategy picks them where they apply, their CUDA compiles for
sm_90a with nvcc (no GPU needed), records of them stay out of fused Relax epilogues, and (GPU)
their numerics match numpy over sampled configs."""
import shutil

import pytest

from cuda_helpers import cuda_source, nvcc_cubin, sample_configs
from tvm_ext.dispatch import apply_history_best, choose
from tvm_ext.result import MeasureResult
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.strategy import templates_for
from tvm_ext.workload import Workload
from tvm_ext import record

DENSE = Workload.create("dense", (256, 512, 256), "float16", "float16", layout="NT")
BMM = Workload.create("batch_matmul", (2, 128, 256, 128), "float16", "float32", layout="NT")
DENSE_TN = Workload.create("dense", (256, 512, 256), "float16", "float16", layout="TN")


def test_strategy_offers_wgmma_first_on_sm90_for_nt_f16():
    sm90 = cuda_target("sm_90")
    assert templates_for(DENSE, sm90)[0].name == "dense_wgmma.cuda"
    assert templates_for(BMM, sm90)[0].name == "batch_matmul_wgmma.cuda"
    for layout in ("NN", "TN", "TT"):  # MN-major operands: wgmma's transpose flags
        wl = Workload.create("dense", (256, 512, 256), "float16", "float16", layout=layout)
        assert templates_for(wl, sm90)[0].name == "dense_wgmma.cuda"
    int8 = Workload.create("dense", (256, 512, 256), "int8", layout="NT")
    assert templates_for(int8, sm90)[0].name == "dense_mma.cuda"
    assert templates_for(DENSE, cuda_target("sm_80"))[0].name == "dense_mma.cuda"
    odd = Workload.create("dense", (100, 512, 256), "float16", "float16", layout="NT")
    assert templates_for(odd, sm90)[0].name == "dense_mma.cuda"
    assert templates_for(DENSE, sm90, schedulable=True)[0].name == "dense_mma.cuda"


def test_fallback_tiles_follow_the_grid():
    """Large grids get 128 x 256 tiles in 4 stages; 1024^3 (64 such tiles for 132 SMs) gets
    64 x 128 tiles, which still give 128 blocks."""
    sm90 = cuda_target("sm_90", "h100")
    big = Task(Workload.create("dense", (8192, 8192, 8192), "float16", "float16", layout="NT"),
               sm90).fallback_config()
    assert (big["warpgroups"].val, big["block_n"].val, big["stages"].val) == (2, 256, 4)
    mid = Task(Workload.create("dense", (1024, 1024, 1024), "float16", "float16", layout="NT"),
               sm90).fallback_config()
    assert (mid["warpgroups"].val, mid["block_n"].val) == (1, 128)
    for shape in ((768, 8192, 512), (64, 64, 64), (192, 320, 128), (4096, 1024, 4096)):
        task = Task(Workload.create("dense", shape, "float16", "float32", layout="TN"), sm90)
        fb = task.fallback_config()
        assert task.space.is_valid(fb), (shape, task.space.violations(fb))
    assert Task(Workload.create("dense", (768, 8192, 512), "float16", layout="NT"),
                sm90).fallback_config()["raster"].val == 2  # 6 M tiles: groups of 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("wl", [DENSE, BMM, DENSE_TN], ids=["dense_f16", "bmm_f32out", "TN"])
def test_codegen_compiles_for_sm90a(wl):
    """The kernel carries an sm_90a target (the module's target is sm_90), issues the
    m64n{block_n}k16 wgmma from 128-byte-swizzled descriptors, and nvcc compiles it."""
    target = cuda_target("sm_90")
    task = Task(wl, target)
    for cfg in sample_configs(task, 2, seed=1):
        mod = task.instantiate(cfg)
        assert str(mod["main"].attrs["target"].attrs["arch"]) == "sm_90a"
        src = cuda_source(task, cfg)
        bn = cfg["block_n"].val
        assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.f16.f16" in src, cfg
        trans = f"1, 1, {int(wl.transpose_a)}, {int(not wl.transpose_b)}; }}"  # MN-major flags
        assert trans in src, cfg
        assert "cp.async.cg.shared.global" in src and "wgmma.wait_group" in src
        assert "ptx_wgmma_encode_matrix_descriptor(da_ptr" in src
        assert len(nvcc_cubin(src, target, "sm_90a")) > 1000, cfg


def test_fused_epilogue_never_gets_a_wgmma_record(tmp_path):
    """A wgmma record is applied to the plain matmul; a function with a fused epilogue needs a
    schedule, so it gets the best schedulable template (here: the mma fallback)."""
    target = cuda_target("sm_90")
    task = Task(DENSE, target, template="dense_wgmma.cuda")
    log = tmp_path / "w.json"
    log.write_text(record.encode(str(target), task.name, DENSE, task.fallback_config(),
                                 MeasureResult([1e-6])) + "\n")
    with apply_history_best(str(log)) as ctx:
        _, plain = choose(DENSE, target)
        assert not ctx.report.skipped
        _, fused = choose(DENSE, target, schedulable=True)
    assert plain.template == "dense_wgmma.cuda" and plain.tuned
    assert fused.template == "dense_mma.cuda" and not fused.tuned
    # the record passed over is listed, with the reason
    assert len(ctx.report.skipped) == 1 and "cannot take" in ctx.report.skipped[0]


def test_metaschedule_refuses_a_kernel_template():
    from tvm_ext.errors import TemplateError
    from tvm_ext.metaschedule import design_space
    with pytest.raises(TemplateError, match="writes its kernel itself"):
        design_space(Task(DENSE, cuda_target("sm_90")))
