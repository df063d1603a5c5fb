"""The warp-specialised, persistent Hopper templates on a GPU: numerics match numpy in the 4
layouts, f16 and bf16, cooperative and pingpong consumers, with more tiles than SMs (each
block walks several tiles, the ring's phases running on across them); the write-back from
registers and staged (TMA stores of 2- and 4-byte outputs, 2-D and 3-D maps, a fused
epilogue)."""

import pytest

from cuda_helpers import pool_failures, valid_cases
from tvm_ext.target import cuda_target
from tvm_ext.workload import FP8, Workload


def _check_numerics(target, configs_of, at_least, measured, rows):
    """Each config ``configs_of(task)`` gives (``at_least`` of them valid) for each workload
    row (op, shape, layout, dtype, out dtype, epilogue), built and run by pool measurers that
    check it against numpy: ``measured`` configs or more, none failed."""
    workloads = [Workload.create(op, shape, dtype, out, layout=layout, epilogue=epilogue)
                 for op, shape, layout, dtype, out, epilogue in rows]
    n, failures = pool_failures(valid_cases(target, "wgmma_ws.cuda", workloads, configs_of,
                                            at_least))
    assert n >= measured
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_wgmma_ws_numerics_on_gpu():
    import tvm
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma and setmaxnreg need an sm_90 GPU")
    target = cuda_target("sm_90")
    coop = dict(consumers=2, pingpong=0, block_n=128, block_k=64, stages=4, wgmma_wait=0,
                raster=4)
    pingpong = dict(consumers=2, pingpong=1, block_n=128, block_k=64, stages=3, wgmma_wait=1,
                    raster=2)
    one = dict(consumers=1, pingpong=0, block_n=256, block_k=128, stages=2, wgmma_wait=0,
               raster=1)
    # every config valid for every workload: 5 x 7 measured
    _check_numerics(target, lambda task: [task.fallback_config()] + [
        task.config_with({**k, "staged_store": st}) for k in (coop, pingpong, one)
        for st in (0, 1)], 7, 35, (
        ("batch_matmul", (4, 1024, 1024, 128), "NT", "float16", "float16", ""),
        ("dense", (1024, 2048, 384), "NN", "bfloat16", "float32", ""),
        ("dense", (1024, 1024, 512), "TN", "float16", "float32", ""),
        ("batch_matmul", (3, 1024, 512, 256), "TT", "bfloat16", "bfloat16", ""),
        ("dense", (1024, 768, 256), "NT", "float16", "float32", "bias+gelu+cast:float16")))


@pytest.mark.gpu
def test_wgmma_ws_fp8_numerics_on_gpu():
    """fp8 inputs (e4m3, e5m2; layout NT) with f32 accumulation: f16, bf16 and f32 outputs,
    a scaled f16 output (epilogue scale + cast), dense and batch_matmul, from registers and
    staged, one and two consumers, pingpong."""
    import tvm
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma and setmaxnreg need an sm_90 GPU")
    target = cuda_target("sm_90")
    knobs = [dict(consumers=2, pingpong=0, block_n=256, block_k=128, stages=3, wgmma_wait=0,
                  raster=4, staged_store=1),
             dict(consumers=2, pingpong=1, block_n=128, block_k=128, stages=4, wgmma_wait=1,
                  raster=2, staged_store=0),
             dict(consumers=1, pingpong=0, block_n=128, block_k=128, stages=6, wgmma_wait=1,
                  raster=1, staged_store=1)]
    _check_numerics(target, lambda task: [task.fallback_config()] + [
        task.config_with(k) for k in knobs], 3, 12, (
        ("dense", (1024, 1024, 1024), "NT", "float8_e4m3fn", "float16", ""),
        ("dense", (1024, 768, 512), "NT", "float8_e5m2", "float32", ""),
        ("batch_matmul", (3, 512, 1024, 384), "NT", "float8_e4m3fn", "bfloat16", ""),
        ("dense", (1024, 1024, 256), "NT", "float8_e4m3fn", "float32",
         "scale:0.25+cast:float16")))


@pytest.mark.gpu
def test_wgmma_ws_cluster_numerics_on_gpu():
    """2-CTA clusters (cluster = 2): each CTA loads half of every B box and multicasts it to
    both, a slot is freed by the consumers of both CTAs. The 4 layouts (B K-major and
    MN-major: its boxes split by N rows or by K rows), f16, bf16 and fp8, cooperative,
    pingpong and one consumer, MMAs waited at once or one batch in flight, from registers and
    staged, a fused epilogue; more cluster tiles than clusters (each walks several, the ring
    running on across them) and a last round that leaves clusters idle."""
    import tvm
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma, clusters and setmaxnreg need an sm_90 GPU")
    target = cuda_target("sm_90")
    knobs = [dict(consumers=2, pingpong=0, block_n=128, stages=4, wgmma_wait=0, raster=4),
             dict(consumers=2, pingpong=1, block_n=128, stages=3, wgmma_wait=1, raster=2),
             dict(consumers=1, pingpong=0, block_n=256, stages=4, wgmma_wait=1, raster=1),
             dict(consumers=2, pingpong=0, block_n=256, stages=3, wgmma_wait=1, raster=2)]
    def clustered(task):
        bk = 128 if task.workload.dtype in FP8 else 64  # a stage: one 128-byte swizzle row
        return [task.config_with({**k, "block_k": bk, "staged_store": st, "cluster": 2})
                for k in knobs for st in (0, 1)]
    _check_numerics(target, clustered, 5, 30, (
        ("batch_matmul", (4, 1024, 1024, 128), "NT", "float16", "float16", ""),
        ("dense", (1024, 2048, 384), "NN", "bfloat16", "float32", ""),
        ("dense", (1024, 1280, 512), "TN", "float16", "float32", ""),
        ("batch_matmul", (3, 1024, 512, 256), "TT", "bfloat16", "bfloat16", ""),
        ("dense", (1024, 768, 256), "NT", "float16", "float32", "bias+gelu+cast:float16"),
        ("dense", (1024, 1024, 1024), "NT", "float8_e4m3fn", "float16", "")))


@pytest.mark.gpu
def test_wgmma_ws_stream_k_numerics_on_gpu():
    """Stream-K (stream_k 1 and 2): the K steps of the last partial wave's tiles (and of one
    whole wave before it) shared out among one block an SM. Tiles fewer than the SMs (every
    tile shared: 1 to 2 blocks a tile, and 16 or more on 8 tiles of 64 K steps), more tiles
    than SMs (shared tiles first, then whole ones; with stream_k 2 a block's steps hold a whole
    tile between two partial ones), the 4 layouts, f16, bf16 and fp8, f16 / bf16 / f32 out,
    one and two consumers, MMAs waited at once or one batch in flight, from registers and
    staged, a fused epilogue computed by the block that adds the partial sums."""
    import tvm
    if tvm.cuda(0).compute_version != "9.0":
        pytest.skip("wgmma and setmaxnreg need an sm_90 GPU")
    target = cuda_target("sm_90")
    knobs = [dict(consumers=2, pingpong=0, block_n=128, stages=4, wgmma_wait=0, raster=4),
             dict(consumers=2, pingpong=0, block_n=256, stages=3, wgmma_wait=1, raster=2),
             dict(consumers=1, pingpong=0, block_n=256, stages=4, wgmma_wait=1, raster=1)]

    def shared(task):
        bk = 128 if task.workload.dtype in FP8 else 64
        return [task.config_with({**k, "block_k": bk, "staged_store": st, "stream_k": sk})
                for k in knobs for st in (0, 1) for sk in (1, 2)]
    _check_numerics(target, shared, 3, 30, (
        ("dense", (1024, 2048, 512), "NT", "float16", "float16", ""),
        ("dense", (512, 512, 4096), "NN", "bfloat16", "float32", ""),
        ("batch_matmul", (3, 1024, 1024, 1024), "TN", "float16", "float16", ""),
        ("batch_matmul", (3, 1024, 512, 256), "TT", "bfloat16", "bfloat16", ""),
        ("dense", (1024, 768, 256), "NT", "float16", "float32", "bias+gelu+cast:float16"),
        ("dense", (1024, 1024, 1024), "NT", "float8_e4m3fn", "float16", "")))
