"""The direct mma template (*_mma_direct.cuda) on a GPU: numerics match numpy for every dtype
it claims (f16 -> f16 / f32, bf16 -> bf16 / f32, int8 -> int32), dense and batch_matmul, warp
tiles of 1-2 x 1-4 mma tiles, blocks of several warp tiles, 1-8 K slices summed through shared
memory, batches of 1-4 K groups, and a fused epilogue."""

import pytest

from cuda_helpers import pool_failures, valid_cases
from tvm_ext.target import cuda_target
from tvm_ext.workload import Workload


@pytest.mark.gpu
def test_mma_direct_numerics_on_gpu():
    target = cuda_target("sm_90")
    knobs = [dict(warp_m=wm, warp_n=wn, block_warps_m=bwm, block_warps_n=bwn, slice_k=s,
                  unroll=u)
             for wm, wn, bwm, bwn, s, u in (
                 (1, 1, 1, 1, 1, 1), (1, 2, 1, 1, 4, 1), (2, 4, 1, 1, 2, 2),
                 (1, 4, 2, 1, 8, 1), (2, 1, 1, 2, 4, 2), (1, 2, 2, 2, 2, 4),
                 (2, 2, 1, 1, 1, 2))]
    workloads = [Workload.create(op, shape, dtype, out, layout="NT", epilogue=epilogue)
                 for op, shape, dtype, out, epilogue in (
                     ("dense", (512, 16, 512), "int8", "int32", ""),
                     ("dense", (256, 64, 1024), "float16", "float16", ""),
                     ("dense", (32, 512, 2048), "float16", "float32", ""),
                     ("dense", (64, 32, 512), "bfloat16", "float32", ""),
                     ("batch_matmul", (3, 64, 32, 256), "bfloat16", "bfloat16", ""),
                     ("batch_matmul", (2, 128, 64, 512), "int8", "int32", ""),
                     ("dense", (64, 128, 512), "float16", "float16", "bias+relu"))]
    cases = valid_cases(target, "mma_direct.cuda", workloads, lambda task: [
        task.fallback_config()] + [task.config_with(k) for k in knobs], 5)
    n, failures = pool_failures(cases)
    assert n == sum(len(configs) for _, configs in cases) >= 40
    assert not failures, "\n".join(failures)
