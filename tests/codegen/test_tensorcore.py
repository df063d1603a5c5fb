"""TensorCore templates (wmma and mma.sync): CUDA that nvcc compiles for sm_80 and sm_90 over
sampled configs of every space (no GPU needed); numerics on a GPU (``-m gpu``) for every
dtype x layout x alignment case, measured in parallel through the isolated pool measurer."""
import re
import shutil

import pytest

from cuda_helpers import (SLICE_K_CASES, SPLIT_K_CASES, SPLIT_K_SHAPE, TC_ALIGNED, TC_TEMPLATES,
                          TC_UNALIGNED, cuda_source, nvcc_cubin, ptxas_verbose, sample_configs,
                          slice_configs, split_configs, tc_op)
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.strategy import templates_for
from tvm_ext.workload import Workload


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("template", TC_TEMPLATES)
def test_codegen_compiles_with_nvcc(template):
    """Four cases (dtype, layout, alignment), sm_80 and sm_90 in turn, a sampled config each
    (the shape grid compiles more of every template, on both archs)."""
    op = tc_op(template)
    cases = [("float16", "float32", "NT", TC_ALIGNED), ("int8", "int32", "NN", TC_ALIGNED),
             ("float16", "float32", "TN", TC_UNALIGNED), ("float16", "float16", "TT", TC_ALIGNED)]
    for seed, (dtype, out, layout, shapes) in enumerate(cases):
        arch = ("sm_80", "sm_90")[seed % 2]
        target = cuda_target(arch)
        wl = Workload.create(op, shapes[op], dtype, out, layout=layout)
        task = Task(wl, target, template=template)
        for cfg in sample_configs(task, 1, seed + (arch == "sm_80")):
            assert task.space.is_valid(cfg), (cfg, task.space.violations(cfg))
            src = cuda_source(task, cfg)
            if "mma" in template.split(".")[0]:
                assert "mma.sync" in src and "ldmatrix" in src
            else:
                assert "wmma::mma_sync" in src
            assert len(nvcc_cubin(src, target, arch)) > 1000, cfg


def test_mma_f16_output_accumulates_in_f32():
    wl = Workload.create("dense", (256, 256, 256), "float16", "float16")
    task = Task(wl, cuda_target("sm_90"), template="dense_mma.cuda")
    for cfg in sample_configs(task, 2, 3):  # cast at the register store or the shared copy
        src = cuda_source(task, cfg)
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src, cfg
        assert "f16.f16.f16.f16" not in src


def test_mma_pipeline_uses_cp_async():
    wl = Workload.create("dense", (256, 256, 256), "float16")
    task = Task(wl, cuda_target("sm_90"), template="dense_mma.cuda")
    cfg = task.config_with({"stages": 3, "chunk": 2})
    src = cuda_source(task, cfg)
    assert "cp.async.cg.shared.global" in src and "cp.async.commit_group" in src
    assert "__shared__" in src  # the dynamic shared buffer
    cfg1 = task.config_with({"stages": 1, "chunk": 2})
    assert "cp.async" not in cuda_source(task, cfg1)


def test_strategy_offers_tensor_cores_first_for_f16_and_int8():
    target = cuda_target("sm_90")
    f16 = [t.name for t in templates_for(Workload.create("dense", (512, 64, 512), "float16"),
                                         target)]
    assert f16 == ["dense_wgmma.cuda", "dense_mma.cuda", "dense_wgmma_ws.cuda",
                   "dense_tensorcore.cuda", "dense_large_batch.cuda",
                   "dense_mma_direct.cuda"]  # wgmma: sm_90, 64s; direct mma: records only
    i8 = [t.name for t in templates_for(Workload.create("batch_matmul", (4, 64, 64, 64), "int8"),
                                        target)]
    assert i8 == ["batch_matmul_mma.cuda", "batch_matmul_tensorcore.cuda",
                  "batch_matmul_mma_direct.cuda"]
    f32 = [t.name for t in templates_for(Workload.create("dense", (512, 64, 512)), target)]
    assert f32 == ["dense_sgemm.cuda", "dense_large_batch.cuda"]  # the CUDA cores
    # sm_75 has no mma.sync shapes we use; a gemv pads 16x: both left to the CUDA cores.
    old = [t.name for t in templates_for(Workload.create("dense", (512, 64, 512), "float16"),
                                         cuda_target("sm_75"))]
    assert old == ["dense_large_batch.cuda"]
    gemv = [t.name for t in templates_for(Workload.create("dense", (1, 4096, 4096), "float16"),
                                          target)]
    assert "dense_mma.cuda" not in gemv


def test_int8_without_a_tensor_core_template_is_a_clear_error():
    from tvm_ext.errors import TemplateError
    with pytest.raises(TemplateError, match="16x16x32 tensor-core tile costs"):
        templates_for(Workload.create("dense", (1, 4096, 4096), "int8"), cuda_target("sm_90"))


def test_padding_stays_within_twice_the_flops():
    wl = Workload.create("dense", (100, 72, 200), "float16")
    for template in ("dense_tensorcore.cuda", "dense_mma.cuda"):
        task = Task(wl, cuda_target("sm_90"), template=template)
        for i in list(task.space.valid_indices(limit=400)):
            c = task.space.get(i)
            tm = c["block_row_warps"].val * c["warp_row_tiles"].val * 16
            tn = c["block_col_warps"].val * c["warp_col_tiles"].val * 16
            tk = c["chunk"].val * 16
            padded = -(-100 // tm) * tm * -(-72 // tn) * tn * -(-200 // tk) * tk
            assert padded <= 2 * 100 * 72 * 200


def test_split_k_builds_two_kernels_and_only_on_small_grids():
    """split_k > 1: the partial products of each K slice (one more grid dimension) go to a
    global buffer in the accumulator dtype, and a second kernel adds the slices and casts;
    nvcc compiles both. The space refuses a split on a grid that fills the GPU, and the
    fallback does not split."""
    target = cuda_target("sm_90")
    for dtype, out, layout in SPLIT_K_CASES:
        wl = Workload.create("dense", SPLIT_K_SHAPE, dtype, out, layout=layout)
        task = Task(wl, target, template="dense_mma.cuda")
        assert task.fallback_config()["split_k"].val == 1
        cfg = split_configs(task, 0)[0]
        src = cuda_source(task, cfg)
        assert "main_kernel_1" in src and "mma.sync" in src, cfg
        assert len(nvcc_cubin(src, target, "sm_90")) > 1000
    big = Task(Workload.create("dense", (8192, 8192, 8192), "float16"), target,
               template="dense_mma.cuda")
    split = big.space.config_from_values({**big.fallback_config().values_dict(), "split_k": 2})
    assert any("split-K" in v for v in big.space.violations(split))


def stack(ptxas_report):
    """The bytes of stack frame in ptxas's report of one kernel."""
    return int(re.search(r"(\d+) bytes stack frame", ptxas_report).group(1))


def test_slice_k_adds_the_warp_groups_in_shared_memory_in_one_kernel():
    """slice_k > 1: slice_k groups of warps each compute their own steps of every shared K
    tile; their partial tiles meet in a static shared tile of slice_k x tile_m x tile_n
    4-byte sums, which all threads add and cast on the way out, in the one kernel. nvcc
    compiles it with no more on the stack than the same tiles unsliced (the sum's registers
    are indexed by the vector lane alone; an int8 B stored [K, N] has a stack frame either
    way). The space refuses a slice on a padded shape, with a fused epilogue, with split-K
    and on a grid that fills the GPU."""
    target = cuda_target("sm_90")
    for shape, dtype, out, layout in SLICE_K_CASES:
        task = Task(Workload.create("dense", shape, dtype, out, layout=layout), target,
                    template="dense_mma.cuda")
        cfg = slice_configs(task, 1)[0]
        v = cfg.values_dict()
        src = cuda_source(task, cfg)
        warps = v["block_row_warps"] * v["block_col_warps"] * v["slice_k"]
        tile = v["block_row_warps"] * v["warp_row_tiles"] * v["block_col_warps"] * \
            v["warp_col_tiles"] * 256
        assert f"__launch_bounds__({warps * 32})" in src and "main_kernel_1" not in src, cfg
        assert re.search(rf"__shared__ alignas\(\d+\) (float|int) \w+\[{tile * v['slice_k']}\];",
                         src), cfg
        unsliced = cuda_source(task, task.config_with({**v, "slice_k": 1}))
        assert stack(ptxas_verbose(src, "sm_90a")) == stack(ptxas_verbose(unsliced, "sm_90a"))
    fb = {"slice_k": 2}
    for shape, epilogue, values, rule in (
            ((500, 16, 512), "", fb, "sliced-K"), ((512, 16, 512), "bias", fb, "sliced-K"),
            ((8192, 8192, 8192), "", fb, "sliced-K"),
            ((512, 16, 512), "", {"slice_k": 2, "split_k": 2}, "sliced-K")):
        task = Task(Workload.create("dense", shape, "float16", "float16", epilogue=epilogue),
                    target, template="dense_mma.cuda")
        cfg = task.space.config_from_values({**task.fallback_config().values_dict(), **values})
        assert any(rule in v for v in task.space.violations(cfg)), (shape, epilogue, values)


def test_fallback_slices_k_on_grids_smaller_than_the_sms():
    """The mma fallback takes one-warp 16 x 16 tiles with K sliced 4 ways where 16 x 16 tiles
    give fewer blocks than SMs (the suite's 512 x {64,32,16} x 512 rows, f16 and int8, the
    launch grouped where there is more than one N tile), and keeps its unsliced tiles on a grid
    that fills the GPU, on a padded shape and with a fused epilogue (the space refuses the
    slice there)."""
    target = cuda_target("sm_90")
    for n, dtype, out, raster in ((64, "float16", "float16", 16), (16, "float16", "float16", 1),
                                  (32, "int8", "int32", 16)):
        task = Task(Workload.create("dense", (512, n, 512), dtype, out), target,
                    template="dense_mma.cuda")
        v = task.fallback_config().values_dict()
        assert (v["slice_k"], v["block_row_warps"] * v["block_col_warps"], v["warp_row_tiles"],
                v["warp_col_tiles"], v["chunk"], v["raster"]) == (4, 1, 1, 1, 2, raster), v
    for shape, epilogue in (((1024, 1024, 1024), ""), ((500, 16, 512), ""),
                            ((512, 16, 512), "bias")):
        task = Task(Workload.create("dense", shape, "float16", "float16", epilogue=epilogue),
                    target, template="dense_mma.cuda")
        assert task.fallback_config()["slice_k"].val == 1, (shape, epilogue)


def test_record_without_newer_knobs_replays_their_defaults(tmp_path):
    """A dense_mma record written before ``raster`` and ``stage_c`` existed applies with their
    space-file defaults (the old behaviour), not with the fallback's choice for them."""
    import tvm_ext
    from tvm_ext import record
    from tvm_ext.dispatch import choose
    from tvm_ext.result import MeasureResult
    from tvm_ext.space import ConfigEntity, OtherOptionEntity
    wl = Workload.create("dense", (1024, 1024, 1024), "float16", "float16")
    target = cuda_target("sm_90")
    task = Task(wl, target, template="dense_mma.cuda")
    fb = task.fallback_config()
    assert fb["raster"].val != 1 and fb["stage_c"].val == 1  # so the defaults are visible
    old = {k: v for k, v in fb.items() if k not in ("raster", "stage_c")}
    cfg = ConfigEntity(None, {**old, "chunk": OtherOptionEntity(2)})
    log = tmp_path / "old.json"
    log.write_text(record.encode(str(target), task.name, wl, cfg, MeasureResult([1e-5])) + "\n")
    with tvm_ext.apply_history_best(str(log)):
        _, choice = choose(wl, target)
    got = choice.config.values_dict()
    assert got["raster"] == 1 and got["stage_c"] == 0 and got["chunk"] == 2


@pytest.mark.parametrize("template", ["dense_mma.cuda", "dense_tensorcore.cuda"])
def test_fallback_configs_are_valid(template):
    """The untuned config satisfies its space's constraints (launch and shared-memory rules)."""
    from tvm_ext.bench import GPU_SUITE
    for wl in list(GPU_SUITE.values()) + [Workload.create("dense", (100, 72, 200), "float16",
                                                          "float16")]:
        if wl.op != "dense" or wl.dtype not in ("float16", "int8") or wl.M < 16:
            continue
        task = Task(wl, cuda_target("sm_90"), template=template)
        fb = task.fallback_config()
        assert task.space.is_valid(fb), (wl, fb, task.space.violations(fb))


def test_fused_relax_epilogue_with_mma_builds_for_every_stage_c(tmp_path):
    """A Relax matmul + bias + relu in f16, fused into one mma kernel: the epilogue goes into the
    write-back, also for a record that stores from registers (stage_c = 0), which the template
    then stages through shared memory (codegen for sm_90; numerics need a GPU)."""
    import tvm_ext
    import tvm_ext.relax as tr
    from relax_helpers import bias_relu_model
    from tvm_ext import record
    from tvm_ext.result import MeasureResult
    model = bias_relu_model((4, 64, 64), (4, 64, 64), "float16")
    target = cuda_target("sm_90")
    wl = Workload.create("batch_matmul", (4, 64, 64, 64), "float16", "float16", layout="NN")
    task = Task(wl, target, template="batch_matmul_mma.cuda")
    for stage_c in (0, 1):
        log = tmp_path / f"s{stage_c}.json"
        log.write_text(record.encode(str(target), task.name, wl, task.config_with(
            {"stage_c": stage_c}), MeasureResult([1e-6])) + "\n")
        with tvm_ext.apply_history_best(str(log)) as ctx:
            tr.build(model, target, fuse_epilogue=True)
        [choice] = ctx.report.choices
        assert choice.template == "batch_matmul_mma.cuda" and choice.tuned
        assert choice.config["stage_c"].val == stage_c


def test_split_k_record_in_a_relax_model_builds_fused_and_unfused(tmp_path):
    """A split_k record applied to a Relax f16 matmul + bias + relu: unfused, the matmul kernel
    is ours and splits (two kernels); fused, the epilogue's compute is the model's, and the
    record's tiles apply without the split (codegen for sm_90)."""
    import tvm_ext
    import tvm_ext.relax as tr
    from relax_helpers import bias_relu_model
    from tvm_ext import record
    from tvm_ext.result import MeasureResult
    model = bias_relu_model((64, 1024), (1024, 128), "float16")
    target = cuda_target("sm_90")
    wl = Workload.create("dense", (64, 128, 1024), "float16", "float16", layout="NN")
    task = Task(wl, target, template="dense_mma.cuda")
    cfg = task.config_with({"split_k": 2, "slice_k": 1})
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    log = tmp_path / "split.json"
    log.write_text(record.encode(str(target), task.name, wl, cfg, MeasureResult([1e-6])) + "\n")
    kernels = {}
    for fuse in (False, True):
        with tvm_ext.apply_history_best(str(log)) as ctx:
            ex = tr.build(model, target, fuse_epilogue=fuse)
        [choice] = ctx.report.choices
        assert choice.tuned and choice.config["split_k"].val == 2
        src = ex.mod.imports[0].imports[0].inspect_source()  # VM executable -> host -> CUDA
        assert "mma.sync" in src
        kernels[fuse] = set(re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)\(", src))
    assert {"matmul_kernel", "matmul_kernel_1"} <= kernels[False]  # partial products + sum
    assert kernels[True] == {"fused_tvm_ext_matmul_add_relu_kernel"}


@pytest.mark.parametrize("template", TC_TEMPLATES)
def test_padding_is_computed_inside_the_loads(template):
    """An unaligned shape is padded inside the kernel: the kernel reads A and B themselves (a
    pad block left un-inlined becomes a padded copy the kernel reads past the real buffers)."""
    for dtype in ("float16", "int8"):
        wl = Workload.create(tc_op(template), TC_UNALIGNED[tc_op(template)], dtype)
        task = Task(wl, cuda_target("sm_90"), template=template)
        for cfg in sample_configs(task, 3, 5):
            kernel = r"__global__ void (?:__launch_bounds__\(\d+\) )?\w+\(([^)]*)\)"
            signatures = re.findall(kernel, cuda_source(task, cfg))
            params = " ".join(signatures)
            assert "A_ptr" in params and "B_ptr" in params and "_pad_ptr" not in params, \
                (wl, cfg, signatures)


@pytest.mark.parametrize("dtype,out", [("float16", "float16"), ("int8", "int32")])
def test_fallback_of_a_padded_shape_launches(dtype, out):
    """A padded shape stages its C tile in static shared memory: the fallback passes over a
    128 x 128 tile (64 KB of f32 / int32, over the 48 KB that a kernel may hold statically),
    which it once picked, for the largest tile that launches."""
    wl = Workload("batch_matmul", 8, 3000, 500, 128, dtype=dtype, out_dtype=out, layout="NT")
    task = Task(wl, cuda_target("sm_90"), template="batch_matmul_mma.cuda")
    fb = task.fallback_config()
    assert task.space.violations(fb) == []
    tile = [fb[k].val for k in ("block_row_warps", "warp_row_tiles", "block_col_warps",
                                "warp_col_tiles")]
    assert tile[0] * tile[1] * tile[2] * tile[3] * 256 * 4 <= 48 * 1024
