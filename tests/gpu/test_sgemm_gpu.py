"""The f32 SGEMM template (*_sgemm.cuda) on a GPU: numerics match numpy in the 4 layouts
(operands transposed into shared memory or stored as loaded), every tile shape, thread tile
(8 x 8, 8 x 16) and block_k, dense and batch_matmul, grouped launch orders, the fragment
loads spread among the FMAs (``spread`` 2) or not, a fused epilogue, a tile over 48 KB of
shared memory (dynamic), and K in 2 or 4 slices (``slice_k``: partial tiles summed through
shared memory, before the epilogue)."""

import pytest

from cuda_helpers import pool_failures, valid_cases
from tvm_ext.target import cuda_target
from tvm_ext.workload import Workload


@pytest.mark.gpu
def test_sgemm_numerics_on_gpu():
    target = cuda_target("sm_90")
    tiles = [dict(block_m=bm, block_n=bn, block_k=bk, raster=r, min_blocks=mb, thread_n=tn,
                  spread=sp, slice_k=sk)
             for bm, bn, bk, r, mb, tn, sp, sk in (
                 (128, 128, 8, 1, 1, 8, 0, 1), (128, 128, 16, 2, 2, 8, 2, 1),
                 (128, 64, 8, 2, 1, 8, 0, 1), (64, 128, 16, 1, 2, 8, 0, 1),
                 (64, 64, 16, 2, 1, 8, 2, 1), (128, 256, 8, 2, 1, 16, 0, 1),
                 (256, 128, 8, 1, 1, 16, 2, 1), (64, 128, 16, 1, 1, 16, 0, 1),
                 (128, 256, 16, 2, 1, 16, 2, 1),  # dynamic shared
                 # slices of K: 4 of 64 x 64 x 8 (static shared), 2 of 16-deep tiles with the
                 # fragment loads spread (dynamic), 4 of 8 x 16 thread tiles, 2 with two blocks
                 (64, 64, 8, 1, 1, 8, 0, 4), (64, 128, 16, 2, 1, 8, 2, 2),
                 (64, 64, 8, 2, 1, 16, 0, 4), (64, 64, 8, 1, 2, 8, 0, 2))]
    workloads = [Workload.create(op, shape, "float32", "float32", layout=layout,
                                 epilogue=epilogue)
                 for op, shape, layout, epilogue in (
                     ("dense", (512, 768, 256), "NN", ""),
                     ("dense", (1024, 512, 128), "TT", ""),
                     ("dense", (512, 512, 384), "NT", ""),
                     ("batch_matmul", (3, 512, 384, 128), "TN", ""),
                     ("batch_matmul", (2, 512, 256, 64), "TT", ""),
                     ("dense", (512, 256, 128), "NT", "bias+relu"))]
    cases = valid_cases(target, "sgemm.cuda", workloads, lambda task: [
        task.fallback_config()] + [task.config_with(k) for k in tiles], 6)
    n, failures = pool_failures(cases)
    assert n == 79
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_sgemm_k_split_over_a_cluster_on_gpu():
    """``cluster_k``: a tile's K over the 2 CTAs of a thread-block cluster, each summing its
    half of the tile's rows over the cluster's shared memory (and, with ``slice_k``, its own
    slices first) before the epilogue: numerics match numpy in the 4 layouts, dense and
    batch_matmul, every tile shape, with an epilogue that is not linear in the sum (bias +
    relu)."""
    target = cuda_target("sm_90")
    tiles = [dict(block_m=bm, block_n=bn, block_k=bk, raster=r, min_blocks=1, thread_n=tn,
                  slice_k=sk, cluster_k=ck, spread=0)
             for bm, bn, bk, r, tn, sk, ck in (
                 (64, 64, 16, 1, 8, 1, 2), (64, 64, 8, 2, 8, 2, 2), (64, 64, 16, 1, 8, 4, 2),
                 (128, 64, 16, 1, 8, 1, 2), (64, 128, 8, 2, 16, 2, 2),
                 (128, 128, 16, 1, 8, 1, 2))]
    workloads = [Workload.create(op, shape, "float32", "float32", layout=layout,
                                 epilogue=epilogue)
                 for op, shape, layout, epilogue in (
                     ("dense", (256, 384, 1024), "NT", "bias+residual"),
                     ("dense", (256, 256, 512), "TT", "bias+relu"),
                     ("batch_matmul", (2, 256, 128, 768), "NN", ""),
                     ("batch_matmul", (3, 256, 256, 512), "TN", ""))]
    cases = valid_cases(target, "sgemm.cuda", workloads,
                        lambda task: [task.config_with(k) for k in tiles], 6)
    n, failures = pool_failures(cases)
    assert n == 24
    assert not failures, "\n".join(failures)
