"""Helpers of the CUDA template tests: sampled configs, and nvcc on generated source."""
import numpy as np


def sample_configs(task, n, seed, limit):
    """The fallback config, then ``n`` distinct valid configs (among the first ``limit``)
    drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    valid = list(task.space.valid_indices(limit=limit))
    picks = rng.choice(valid, size=min(n, len(valid)), replace=False) if n else []
    return [task.fallback_config()] + [task.config(int(i)) for i in picks]


def cuda_source(task, cfg):
    return task.build(cfg).mod.imports[0].inspect_source()


def nvcc_cubin(src, target, arch):
    """Compile generated CUDA source into a cubin with nvcc (no GPU needed)."""
    from tvm.support import nvcc
    with target:
        return nvcc.compile_cuda(src, target_format="cubin", arch=arch, compiler="nvcc")


def pool_failures(cases):
    """Build and run each (task, configs) case in one pool measurer, which checks every output
    against numpy; returns (configs measured, one line per failed config)."""
    from tvm_ext.measure.pool import PoolMeasurer
    failures, n = [], 0
    with PoolMeasurer(n_parallel=8, number=1, repeat=1, build_timeout=180) as measurer:
        for task, configs in cases:
            for cfg, res in zip(configs, measurer.measure(task, configs)):
                n += 1
                if not res.ok:
                    failures.append(f"{task.workload} {cfg}: error {res.error_no} "
                                    f"{res.error_msg}")
    return n, failures
