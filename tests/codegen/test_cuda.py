"""CUDA templates: CUDA source for sm_80 and sm_90 that nvcc compiles (no GPU needed), over
sampled configs of every space; numerics on a GPU (``-m gpu``) for every layout and dtype."""
import shutil

import numpy as np
import pytest

from cuda_helpers import cuda_source, nvcc_cubin, sample_configs, source_static_shared
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

CASES = [("batch_matmul.cuda", "batch_matmul", (2, 64, 128, 32)),
         ("dense_large_batch.cuda", "dense", (64, 96, 64)),
         ("dense_small_batch.cuda", "dense", (4, 96, 64)),
         ("batch_matmul_small_batch.cuda", "batch_matmul", (3, 4, 96, 64))]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("template,op,shape", CASES)
def test_codegen_compiles_with_nvcc(arch, template, op, shape):
    target = cuda_target(arch)
    for seed, (dtype, layout) in enumerate([("float32", "NT"), ("float16", "NN"),
                                            ("float32", "TN")]):
        wl = Workload.create(op, shape, dtype, layout=layout)
        task = Task(wl, target, template=template)
        for cfg in sample_configs(task, 1, seed):  # (the shape grid compiles more)
            assert task.space.is_valid(cfg) or cfg.is_fallback
            src = cuda_source(task, cfg)
            assert "__global__" in src
            assert len(nvcc_cubin(src, target, arch)) > 1000, cfg


def _interleaved(wl, iy, ix, **extra):
    """A K-major 16x16-thread config with an 8x8 register tile, interleaved as asked."""
    return {"tile_y": [-1, 16, 8], "tile_x": [-1, 16, 8], "tile_k": [-1, 8],
            "auto_unroll_max_step": 512, "unroll_explicit": 0, "vec": 1, "offset": 4,
            "double_buffer": 1, "kmajor": 1, "interleave_y": iy, "interleave_x": ix, **extra}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op,shape,layout", [("dense", (256, 256, 64), "NN"),
                                             ("batch_matmul", (2, 256, 128, 64), "NT")])
def test_interleaved_thread_tile_reads_strided_vectors(op, shape, layout):
    """interleave_y = interleave_x = 2: each thread reads two 4-wide sub-tiles 64 rows (columns)
    apart from the K-major shared tiles, as float4 (neighbouring threads 16 bytes apart: no
    bank conflict), and writes its output rows as float4; nvcc compiles it."""
    target = cuda_target("sm_90")
    wl = Workload.create(op, shape, layout=layout)
    task = Task(wl, target, template=f"{'batch_matmul' if op != 'dense' else 'dense_large_batch'}"
                                     ".cuda")
    cfg = task.config_with(_interleaved(wl, 2, 2))
    assert task.space.is_valid(cfg)
    src = cuda_source(task, cfg)
    for operand, thread in (("A", "threadIdx.y"), ("B", "threadIdx.x")):
        reads = [line for line in src.splitlines()
                 if f"= *(float4*)({operand}_shared_ptr" in line and thread in line]
        # A pair per ki step (twice: the pipeline's steady state and its last tile).
        assert reads and len(reads) % 2 == 0, reads
        assert all(f"(((int){thread}) * 4)" in r for r in reads), reads
        assert any(r.endswith("+ 64));") for r in reads), reads
    assert "*(float4*)(C_ptr" in src
    assert len(nvcc_cubin(src, target, "sm_90")) > 1000


def test_interleave_defaults_to_the_old_kernel():
    """A record written before the interleave knobs replays with their default, 1 (the kernel
    it was measured with); the fallback does not interleave."""
    from tvm_ext.space import ConfigEntity
    target = cuda_target("sm_90")
    task = Task(Workload.create("dense", (256, 256, 64), layout="NN"), target,
                template="dense_large_batch.cuda")
    now = task.config_with(_interleaved(task.workload, 1, 1))
    entity = [e for e in now.to_json_dict()["entity"] if not e[0].startswith("interleave")]
    old = task.config_of_record(ConfigEntity.from_json_dict({"index": None, "entity": entity}))
    assert old["interleave_y"].val == old["interleave_x"].val == 1
    assert cuda_source(task, old) == cuda_source(task, now)
    fallback = task.fallback_config()
    assert fallback["interleave_y"].val == fallback["interleave_x"].val == 1


def test_strategy_picks_small_batch_for_few_rows():
    from tvm_ext.strategy import templates_for
    target = cuda_target("sm_90")
    names = [t.name for t in templates_for(Workload.create("dense", (8, 256, 256)), target)]
    assert names == ["dense_small_batch.cuda", "dense_large_batch.cuda"]
    names = [t.name for t in templates_for(Workload.create("dense", (256, 256, 256)), target)]
    assert names == ["dense_sgemm.cuda", "dense_large_batch.cuda"]  # f32, tiles of 64
    # decoding's q . K^T and P . V; a B stored [K, N] takes its columns on threadIdx.x
    # (with coalesce_n TVM's tree in shared memory, or for as many K threads as columns, the
    # sums staged 33 words a K thread and taken by warps)
    for shape, layout, coalesce in (((32, 1, 300, 128), "NT", 0), ((32, 1, 128, 300), "NN", 1),
                                    ((32, 1, 128, 4096), "NN", 1), ((32, 3, 128, 4096), "NN", 1)):
        wl = Workload.create("batch_matmul", shape, "float16", layout=layout)
        assert templates_for(wl, target)[0].name == "batch_matmul_small_batch.cuda"
        task = Task(wl, target, template="batch_matmul_small_batch.cuda")
        cfg = task.fallback_config()
        assert cfg["coalesce_n"].val == coalesce
        src = cuda_source(task, cfg)
        staged = coalesce and cfg["tile_k"].size[1] == cfg["tile_x"].size[1]
        assert staged == (shape[3] == 4096)  # (K = 300: 16 threads along K, 4 columns)
        assert ("__shfl_down_sync" in src) == (not coalesce or staged)
        assert ("threadIdx.y) * 33) + ((int)threadIdx.x)" in src) == staged  # written,
        assert ("threadIdx.x) * 33) + ((int)threadIdx.y)" in src) == staged  # read back
        assert source_static_shared(src) == task.space.names_of(cfg)["smem_bytes"]
    wl = Workload.create("batch_matmul", (4, 9, 64, 64), layout="NT")
    assert templates_for(wl, target)[0].name != "batch_matmul_small_batch.cuda"


def test_space_prunes_over_the_limits():
    task = Task(Workload.create("batch_matmul", (4, 256, 256, 256)), cuda_target("sm_90"),
                template="batch_matmul.cuda")
    for i in list(task.space.valid_indices(limit=300)):
        c = task.space.get(i)
        threads = c["tile_y"].size[1] * c["tile_x"].size[1]
        assert 32 <= threads <= 1024
        assert c["tile_y"].size[2] * c["tile_x"].size[2] <= 128
    assert task.space.is_valid(task.fallback_config())




# ---- every positive shape: padded tiles ----

ODD_SHAPES = [("batch_matmul", (3, 50, 70, 33)), ("dense", (128, 128, 30)),
              ("dense", (1009, 1009, 1009)), ("dense", (127, 131, 137)), ("dense", (1, 1, 1)),
              ("batch_matmul", (256, 3, 5, 7)), ("dense", (3, 1000, 2)), ("dense", (64, 96, 1))]


@pytest.mark.parametrize("op,shape", ODD_SHAPES)
def test_every_shape_has_valid_configs_within_twice_the_flops(op, shape):
    """K without a factor in {4, 8, 16, 32}, primes, tiny and degenerate axes: every CUDA-core
    template that claims the shape has a valid fallback and valid configs, whose padded
    iteration space is at most twice the real one."""
    from tvm_ext.strategy import templates_for
    for dtype in ("float32", "float16"):
        wl = Workload.create(op, shape, dtype, layout="NT")
        for template in templates_for(wl, cuda_target("sm_90")):
            if template.name.split(".")[0] not in ("batch_matmul", "dense_large_batch",
                                                   "dense_small_batch",
                                                   "batch_matmul_small_batch"):
                continue
            task = Task(wl, cuda_target("sm_90"), template=template.name)
            picks = task.space.random_valid(np.random.default_rng(0), 6, max_draws=10000)
            assert picks, task  # (a 1 x 1 x 1 matmul has one config, others a few)
            for cfg in [task.fallback_config()] + [task.config(i) for i in picks]:
                assert task.space.is_valid(cfg), (task, cfg, task.space.violations(cfg))
                n = task.space.names_of(cfg)
                assert n["pad_m"] * n["pad_n"] * n["pad_k"] <= 2 * wl.M * wl.N * wl.K


@pytest.mark.parametrize("shape,layout,tiles", [  # (tx, vec, ty, yi)
    ((32, 1, 128, 4001), "NN", (32, 8, 32, 1)), ((32, 1, 128, 1000), "NN", (32, 8, 32, 1)),
    ((32, 1, 128, 4000), "NN", (32, 8, 32, 1)), ((32, 1, 128, 96), "NN", (32, 1, 32, 1)),
    ((32, 1, 4001, 128), "NT", (16, 8, 32, 1)), ((32, 1, 4001, 96), "NT", (4, 8, 32, 1)),
    ((1, 13, 4096, 4096), "NT", (64, 8, 4, 8))])
def test_small_batch_fallback_pads_axes_without_useful_divisors(shape, layout, tiles):
    """A prime K, N or M (decoding at 4001 tokens) takes round tiles, N and K padded within
    1/16; 16-byte loads of A where K is whole vectors, else scalars; a padded K's loop
    unrolled 4 steps (B's loads written 4 times)."""
    from tvm_ext.ops.common import tile_of
    assert [tile_of(4001, 32), tile_of(100, 32), tile_of(33, 32), tile_of(13, 8)] == [32, 25, 16, 8]
    assert [tile_of(n, 64, pow2=True) for n in (16, 4001, 12, 48)] == [16, 64, 4, 16]
    wl = Workload.create("batch_matmul", shape, "float16", "float16", layout=layout)
    task = Task(wl, cuda_target("sm_90"), template="batch_matmul_small_batch.cuda")
    cfg = task.fallback_config()
    assert (*cfg["tile_k"].size[1:], cfg["tile_x"].size[1], cfg["tile_y"].size[1]) == tiles
    n = task.space.names_of(cfg)
    assert n["pad_n"] * n["pad_k"] <= 17 / 16 * wl.N * wl.K and n["pad_m"] <= 16
    src = cuda_source(task, cfg)
    assert ("*(uint4*)(A_ptr" in src) == (tiles[1] == 8 and wl.K % 8 == 0)
    if layout == "NN":
        assert src.count("B_ptr[") == (4 if wl.K % (tiles[0] * tiles[1]) else 1)


@pytest.mark.parametrize("template,op,shape,aligned", [
    ("batch_matmul.cuda", "batch_matmul", (3, 50, 70, 33), (3, 64, 64, 32)),
    ("dense_large_batch.cuda", "dense", (127, 131, 137), (128, 128, 128)),
    ("dense_small_batch.cuda", "dense", (7, 131, 1000), (8, 128, 1024)),
    ("batch_matmul_small_batch.cuda", "batch_matmul", (5, 3, 131, 1000), (5, 4, 128, 1024))])
def test_padding_is_inside_the_kernel(template, op, shape, aligned):
    """A padded config is one kernel that reads A and B and writes C itself: the zeros are
    computed in its loads and the crop in its write-back (no padded copy in global memory); a
    config whose tiles divide the shape is not padded at all."""
    from cuda_helpers import lowered_kernels
    wl = Workload.create(op, shape, "float32", layout="NT")
    task = Task(wl, cuda_target("sm_90"), template=template)
    cfg = task.fallback_config()
    n = task.space.names_of(cfg)
    assert (n["pad_m"], n["pad_n"], n["pad_k"]) != (wl.M, wl.N, wl.K)
    assert "_pad" in task.instantiate(cfg).script()
    (func,) = lowered_kernels(task, cfg).values()
    assert [p.name for p in func.params] == ["A_ptr", "B_ptr", "C_ptr"]
    assert "global" not in [b.scope() for b in _allocated(func)]
    aligned = Task(Workload.create(op, aligned, "float32", layout="NT"), cuda_target("sm_90"),
                   template=template)
    assert "_pad" not in aligned.instantiate(aligned.fallback_config()).script()


@pytest.mark.parametrize("template,op,shape", [
    ("batch_matmul.cuda", "batch_matmul", (8, 1, 250, 3000)),
    ("dense_large_batch.cuda", "dense", (127, 131, 137)),
    ("dense_small_batch.cuda", "dense", (3, 100, 3001)),
    ("batch_matmul_small_batch.cuda", "batch_matmul", (4, 1, 300, 3001))])
def test_f16_outputs_accumulate_in_f32_cast_in_the_write_back(template, op, shape):
    """f16 -> f16: the accumulators are f32 registers, cast to f16 where C is written (padded
    or not), no f32 copy of C in global memory; f16 -> f32 kernels take no cast."""
    from cuda_helpers import lowered_kernels
    wl = Workload.create(op, shape, "float16", "float16", layout="NT")
    task = Task(wl, cuda_target("sm_90"), template=template)
    cfg = task.fallback_config()
    script = task.instantiate(cfg).script()
    assert 'T.Cast("float16", C_' in script  # the write-back casts a local f32 sum
    (func,) = lowered_kernels(task, cfg).values()
    local = [b for b in _allocated(func) if b.scope() == "local" and b.name.startswith("C")]
    assert local and all(str(b.dtype) == "float32" for b in local)
    assert "global" not in [b.scope() for b in _allocated(func)]
    task.build(cfg)  # through nvcc
    f32_out = Task(wl.with_(out_dtype="float32"), cuda_target("sm_90"), template=template)
    assert 'T.Cast("float16"' not in f32_out.instantiate(f32_out.fallback_config()).script()


def _allocated(func):
    from tvm import tirx
    found = []

    def walk(stmt):
        if isinstance(stmt, tirx.stmt.AllocBuffer):
            found.append(stmt.buffer)
        for s in getattr(stmt, "seq", None) or []:
            walk(s)
        for field in ("body", "then_case", "else_case"):
            child = getattr(stmt, field, None)
            if isinstance(child, tirx.stmt.Stmt):
                walk(child)
    walk(func.body)
    return found


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_f16_kmajor_register_loads_from_rows_padded_by_4():
    """f16 K-major tiles with rows padded to 32 n + 4 halves and an 8-wide register tile: the
    register loads are 4 halves wide (an 8-half load from a stride of 4 mod 8 is a gather, which
    TVM 0.27 writes as make_uint4 of 8 values and nvcc rejects)."""
    target = cuda_target("sm_90")
    task = Task(Workload.create("dense", (128, 128, 136), "float16", layout="NT"), target,
                template="dense_large_batch.cuda")
    cfg = task.config_with({"tile_y": [-1, 4, 16], "tile_x": [-1, 8, 8], "tile_k": [-1, 4],
                            "vec": 1, "offset": 4, "double_buffer": 1, "kmajor": 1,
                            "interleave_y": 2, "interleave_x": 1})
    assert task.space.is_valid(cfg)
    src = cuda_source(task, cfg)
    assert "make_uint4(" not in src
    assert len(nvcc_cubin(src, target, "sm_90")) > 1000
