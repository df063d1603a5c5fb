"""The f32 SGEMM template (*_sgemm.cuda): offered for f32 where its tiles divide the shape (the
default there), its fallbacks those of the H100 sweeps, and its CUDA compiles with nvcc
(sm_90) without spills, with one barrier a K tile, the shared tiles its space counts, the
launch bounds of ``min_blocks`` (registers capped at 128 for two blocks of 256 threads)."""
import re
import shutil

import pytest

from cuda_helpers import cuda_source, ptxas_verbose
from tvm_ext.ops.cuda_sgemm import sgemm_smem_bytes
from tvm_ext.strategy import templates_for
from tvm_ext.target import cuda_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

SM90 = cuda_target("sm_90", "h100")


def test_offered_for_f32_tiles_and_the_default_there():
    big = Workload.create("dense", (1024, 1024, 1024), layout="NN")
    assert templates_for(big, SM90)[0].name == "dense_sgemm.cuda"
    for wl in (Workload.create("dense", (1000, 1000, 1000)),  # tiles do not divide
               Workload.create("dense", (64, 4096, 4096)),  # small M
               Workload.create("dense", (1024, 1024, 1024), "float16", layout="NT")):
        assert "dense_sgemm.cuda" not in [t.name for t in templates_for(wl, SM90)], wl


def test_fallbacks_follow_the_sweeps():
    """128 x 128 tiles, two blocks an SM where there are many waves of them (8192^3); 64 x 128
    where K is short (the seed bmm) or 128 x 128 would leave SMs idle (1024^3)."""
    expect = {("dense", (8192, 8192, 8192), "NN"): (128, 128, 16, 2),
              ("dense", (1024, 1024, 1024), "NN"): (64, 128, 16, 1),
              ("batch_matmul", (24, 16384, 512, 64), "NT"): (64, 128, 16, 2),
              ("dense", (512, 512, 200), "NN"): (64, 64, 8, 1)}
    for (op, shape, layout), want in expect.items():
        task = Task(Workload.create(op, shape, layout=layout), SM90,
                    template=f"{op}_sgemm.cuda")
        fb = task.fallback_config()
        assert task.space.is_valid(fb), task.space.violations(fb)
        assert (fb["block_m"].val, fb["block_n"].val, fb["block_k"].val,
                fb["min_blocks"].val) == want, (shape, fb)
        assert fb["thread_n"].val == 8 and fb["serpentine"].val == 1
        assert fb["slice_k"].val == 1, (shape, fb)


def test_fallbacks_keep_their_launch_order_group_inside_their_spaces():
    """The SGEMM's and the warp-specialised kernel's spaces take a group of M tiles smaller
    than the grid's column only (larger groups are the same order); their fallbacks grouped
    by the whole column where it held 8 (or 4, 2) tiles: 41 of these 288 fallbacks were
    outside their own space (dense 512x3072x768 f32 among them, the block's up projection)."""
    import itertools
    for template, dtype in (("sgemm.cuda", "float32"), ("wgmma_ws.cuda", "float16")):
        for (M, N, K), op in itertools.product(itertools.product(
                (128, 256, 512, 1024, 2048, 8192), (256, 768, 3072, 8192), (256, 768, 3072)),
                ("dense", "batch_matmul")):
            wl = Workload.create(op, (M, N, K) if op == "dense" else (4, M, N, K), dtype, dtype,
                                 layout="NT")
            task = Task(wl, SM90, template=f"{op}_{template}")
            fb = task.fallback_config()
            assert task.space.is_valid(fb), (wl, template, task.space.violations(fb))


def test_fallback_slices_k_where_few_small_tiles_leave_schedulers_idle():
    """The transformer block's f32 projections (512 rows, N 768): 96 tiles of 64 x 64 (2 warps)
    on 132 SMs, K in 4 slices (8 warps a block; on the H200 1.9-2.1x faster than none); where
    K is too short for 4 slices of 4 K tiles, 2; 2 where the busiest SM holds two or three
    such tiles (the up projection's 384: 12 warps); never where a tile has 4 warps or the SMs
    hold 8 warps of tiles; every fallback inside its space (the group below the column)."""
    expect = {(512, 768, 768): 4, (512, 768, 3072): 4, (512, 768, 128): 2,
              (512, 3072, 768): 2, (1024, 768, 768): 2, (1024, 768, 3072): 2,
              (1024, 1024, 1024): 1, (8192, 8192, 8192): 1, (2048, 2048, 2048): 1}
    for shape, want in expect.items():
        task = Task(Workload.create("dense", shape, layout="NT"), SM90,
                    template="dense_sgemm.cuda")
        fb = task.fallback_config()
        assert task.space.is_valid(fb), (shape, task.space.violations(fb))
        assert fb["slice_k"].val == want, (shape, fb)


def test_fallback_takes_a_smaller_tile_where_the_last_wave_is_partial():
    """The largest tile that fills 3/4 of a wave gives way to a smaller one where that gives the
    busiest SM a fifth less of the output (H200: the block's up projection 512x3072x768, 192
    tiles of 64 x 128 -> 384 of 64 x 64, 0.80x -> 1.12x cuBLAS; GPT-2's q, k, v at 1024 rows,
    144 tiles of 128 x 128 on 132 SMs -> 576 of 64 x 64, 0.65x -> 0.89x); not where the waves
    are many (8192^3) or the smaller tile evens nothing out (1024^3)."""
    expect = {(512, 3072, 768): (64, 64, 1), (1024, 2304, 768): (64, 64, 2),
              (1024, 3072, 768): (64, 128, 1), (1024, 1024, 1024): (64, 128, 1),
              (8192, 8192, 8192): (128, 128, 2), (512, 768, 768): (64, 64, 1)}
    for shape, want in expect.items():
        task = Task(Workload.create("dense", shape, layout="NT"), SM90,
                    template="dense_sgemm.cuda")
        fb = task.fallback_config()
        assert task.space.is_valid(fb), (shape, task.space.violations(fb))
        assert (fb["block_m"].val, fb["block_n"].val, fb["min_blocks"].val) == want, (shape, fb)


def test_fallback_splits_k_over_a_cluster_where_that_evens_out_the_last_wave():
    """K over a cluster of 2 CTAs (sm_90) where twice the CTAs give the busiest SM a fifth less
    of the work: the block's projections at batch 8 (1024 rows, N 768: 192 tiles of 64 x 64,
    two on 60 SMs and one on 72; 384 CTAs, three on 120 SMs; H200: the down projection 0.72x
    -> 0.95x cuBLAS, q/k/v/o 0.94x -> 1.14x), K in 2 slices after it (the busiest SM's 6
    warps under 8); not at 512 rows (96 tiles: one an SM either way), nor where the tiles
    make many waves, nor on an sm_80 part (no clusters); the early launch counts the CTAs."""
    from tvm_ext.ops.cuda_sgemm import early_launch
    expect = {(1024, 768, 3072): (2, 2), (1024, 768, 768): (2, 2), (512, 768, 3072): (1, 4),
              (512, 768, 768): (1, 4), (512, 3072, 768): (1, 2), (1024, 1024, 1024): (1, 1),
              (8192, 8192, 8192): (1, 1)}
    for shape, want in expect.items():
        for target, sm90 in ((SM90, True), (cuda_target("sm_80", "a100"), False)):
            task = Task(Workload.create("dense", shape, layout="NT"), target,
                        template="dense_sgemm.cuda")
            fb = task.fallback_config()
            assert task.space.is_valid(fb), (shape, task.space.violations(fb))
            got = (fb["cluster_k"].val, fb["slice_k"].val)
            assert got == want if sm90 else got[0] == 1, (shape, target, fb)
    task = Task(Workload.create("dense", (1024, 512, 1024), layout="NT"), SM90,
                template="dense_sgemm.cuda")
    names = task.space.names_of(task.config_with(dict(block_m=64, block_n=64)))
    assert early_launch(task.workload, {**names, "cluster_k": 1}, task.facts)  # 128 tiles
    assert not early_launch(task.workload, {**names, "cluster_k": 2}, task.facts)  # 256 CTAs


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("slices", [1, 2])
def test_k_over_a_cluster_sums_the_ctas_partial_tiles_in_shared_memory(slices):
    """``cluster_k`` = 2: the CTAs of a cluster (``%cluster_ctarank``) each run half of K (the
    second from K / 2) and leave their partial tile (with ``slice_k``, their slices' sum) in
    their shared memory; between two cluster barriers that order memory (release / acquire,
    asm that the compiler moves no load or store across), each reads its half of the rows
    from both CTAs (``mapa`` + ``ld.shared::cluster``) and writes them with the epilogue:
    half of a thread's 8 rows of 16-byte C stores, after the first barrier. It compiles
    without spills within the shared memory its space counts."""
    wl = Workload.create("dense", (1024, 768, 3072), layout="NT", epilogue="bias+residual")
    task = Task(wl, SM90, template="dense_sgemm.cuda")
    cfg = task.config_with(dict(block_m=64, block_n=64, thread_n=8, block_k=16, slice_k=slices,
                                cluster_k=2, min_blocks=1, serpentine=1, raster=8, spread=0))
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    src = cuda_source(task, cfg)
    assert "%cluster_ctarank" in src and "* 1536)" in src  # the second CTA from K / 2
    arrive = "asm volatile(\"barrier.cluster.arrive.release.aligned;\" :  :  : \"memory\");"
    wait = "asm volatile(\"barrier.cluster.wait.acquire.aligned;\" :  :  : \"memory\");"
    assert arrive in src and wait in src, src[:3000]
    body = src[src.index("main_kernel(float"):]
    calls = [i for i in range(len(body)) if body.startswith("barrier_cluster_arrive", i)]
    assert len(calls) == 2, len(calls)
    assert body.count("tvm_builtin_ptx_mapa") == 2  # a thread's address in each CTA
    assert body.count("ld_shared__cluster_f32") == 64  # its 4 x 8 outputs from 2 CTAs
    stores = [i for i in range(len(body)) if body.startswith("*(float4*)(C_ptr", i)]
    assert len(stores) == 8 and calls[0] < stores[0] and stores[-1] < calls[1]
    report = ptxas_verbose(src, "sm_90")
    assert "0 bytes spill stores" in report, report[-500:]
    want = sgemm_smem_bytes(64, 64, 16, slices, 2)
    assert ("extern __shared__" in src) == (want > 48 * 1024)
    if want <= 48 * 1024:
        assert int(re.search(r"(\d+) bytes smem", report).group(1)) <= want


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op, layout, knobs", [
    ("dense", "NN", dict(block_m=128, block_n=128, thread_n=8, block_k=8, raster=4,
                         min_blocks=2, serpentine=1, slice_k=1)),
    ("dense", "TT", dict(block_m=64, block_n=128, thread_n=8, block_k=8, raster=1,
                         min_blocks=1, serpentine=0, slice_k=1)),
    ("batch_matmul", "NT", dict(block_m=128, block_n=256, thread_n=16, block_k=8, raster=2,
                                min_blocks=1, serpentine=1, slice_k=1)),
    ("batch_matmul", "TN", dict(block_m=256, block_n=64, thread_n=8, block_k=16, raster=1,
                                min_blocks=1, serpentine=1, slice_k=1)),
    ("dense", "NN", dict(block_m=128, block_n=128, thread_n=16, block_k=16, raster=4,
                         min_blocks=1, serpentine=1, spread=2, slice_k=1)),
    ("batch_matmul", "NT", dict(block_m=64, block_n=128, thread_n=8, block_k=8, raster=1,
                                min_blocks=2, serpentine=1, spread=2, slice_k=1)),
], ids=["dense_nn_2blocks", "dense_tt", "bmm_nt_8x16", "bmm_tn", "dense_nn_spread",
        "bmm_nt_spread"])
def test_codegen_compiles_for_sm90(op, layout, knobs):
    shape = (1024, 1024, 512) if op == "dense" else (2, 512, 512, 256)
    task = Task(Workload.create(op, shape, layout=layout), SM90, template=f"{op}_sgemm.cuda")
    cfg = task.config_with(knobs)
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    src = cuda_source(task, cfg)
    threads = knobs["block_m"] * knobs["block_n"] // (8 * knobs["thread_n"])
    assert f"__launch_bounds__({threads}, {knobs['min_blocks']})" in src
    # the prologue's barrier and one a K tile: the shared stores are st.shared, which TVM's
    # sync planner does not see, so it adds none
    assert src.count("__syncthreads()") == 2
    assert "st.shared.f32" in src or "st.shared.v4.f32" in src
    # 16-byte global loads, 16-byte fragment loads from shared memory, 16-byte stores of C
    assert "*(float4*)(A_ptr" in src and "*(float4*)(C_ptr" in src
    # spread: a warp fence before each group of the next k step's fragment words (A's 2 and
    # B's thread_n / 4, two a group), in every k step of the unrolled K tile
    words, spread = 2 + knobs["thread_n"] // 4, knobs.get("spread", 0)
    assert src.count("__syncwarp()") == (knobs["block_k"] * -(-words // spread) if spread else 0)
    # only the next tile's loads wait for "is there a next tile": its global loads, its shared
    # stores and the last k step's fragments (each group of them); TVM 0.27 once guarded every
    # step's fragment loads so (an if / elif under the unrolled loops: wrong answers)
    assert src.count("if (kt < ") == 2 + (-(-words // spread) if spread else 1), src
    report = ptxas_verbose(src, "sm_90")
    assert "0 bytes spill stores" in report, report[-500:]
    regs = int(re.search(r"Used (\d+) registers", report).group(1))
    smem = int(re.search(r"(\d+) bytes smem", report).group(1))
    assert regs <= 65536 // (threads * knobs["min_blocks"])
    # the space's count; buffer compaction trims the padding after each buffer's last row
    # (16 bytes), alignment adds up to 64
    want = sgemm_smem_bytes(knobs["block_m"], knobs["block_n"], knobs["block_k"])
    assert want - 64 <= smem <= want, (smem, want)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("block_k, slices", [(8, 2), (16, 4)])
def test_slices_of_k_sum_their_partial_tiles_before_the_epilogue(block_k, slices):
    """``slice_k``: the block's threads in groups, each over its own K / slice_k with its own
    shared buffers; the groups after the first store their partial tiles to shared memory, and
    only the first group adds them and writes C with the epilogue (bias + residual of the
    block's down projection). It compiles without spills within the shared memory its space
    counts (TVM may give the partial tiles the operand tiles' memory), with the barriers of
    the prologue, of each K tile and around the partial tiles."""
    wl = Workload.create("dense", (512, 768, 3072), layout="NT", epilogue="bias+residual")
    task = Task(wl, SM90, template="dense_sgemm.cuda")
    cfg = task.config_with(dict(block_m=64, block_n=64, thread_n=8, block_k=block_k,
                                slice_k=slices, min_blocks=1, serpentine=1, raster=1, spread=0))
    assert task.space.is_valid(cfg), task.space.violations(cfg)
    src = cuda_source(task, cfg)
    assert f"__launch_bounds__({64 * slices}, 1)" in src
    assert src.count("__syncthreads()") == 4
    first = src.index("/ 64) == 0)")  # the first group's sum and write-back
    assert src.index("63 < ((int)threadIdx.x)") < first  # the others' partial tiles before it
    assert first < src.index("*(float4*)(C_ptr") and first < src.index("= *(float4*)(residual")
    report = ptxas_verbose(src, "sm_90")
    assert "0 bytes spill stores" in report, report[-500:]
    want = sgemm_smem_bytes(64, 64, block_k, slices)
    assert ("extern __shared__" in src) == (want > 48 * 1024)  # else static, counted by ptxas
    if want <= 48 * 1024:
        assert int(re.search(r"(\d+) bytes smem", report).group(1)) <= want


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_tiles_over_48_kb_take_dynamic_shared_memory():
    """128 x 256 x 16 (cuBLAS's f32 tile on sm_90: 256 threads of 8 x 16, one block an SM)
    needs 50 KB of shared tiles: over the 48 KB of static shared memory, it declares them
    dynamic (opt-in, up to the SM's 227 KB); a tile within 48 KB keeps its static arrays (the
    kernels of the shipped records unchanged)."""
    wl = Workload.create("dense", (1024, 1024, 512), layout="NN")
    task = Task(wl, SM90, template="dense_sgemm.cuda")
    big = task.config_with(dict(block_m=128, block_n=256, thread_n=16, block_k=16,
                                min_blocks=1, serpentine=1, raster=2))
    small = task.config_with(dict(block_m=128, block_n=128, thread_n=16, block_k=16,
                                  min_blocks=1, serpentine=1, raster=2))
    assert sgemm_smem_bytes(128, 256, 16) > 48 * 1024 >= sgemm_smem_bytes(128, 128, 16)
    assert task.space.is_valid(big), task.space.violations(big)
    src = cuda_source(task, big)
    assert "extern __shared__" in src and "__launch_bounds__(256, 1)" in src
    report = ptxas_verbose(src, "sm_90")
    assert "0 bytes spill stores" in report and "bytes smem" not in report, report[-500:]
    assert "extern __shared__" not in cuda_source(task, small)
