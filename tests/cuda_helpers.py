"""Helpers of the CUDA template tests: sampled configs, and nvcc on generated source."""
import numpy as np


def random_valid(task, n, seed, keep=None):
    """``n`` distinct valid configs drawn uniformly from the whole space with ``seed`` (those
    that ``keep`` accepts, if given), by the space's rejection sampling: scanning a
    tensor-core space for its valid configs takes a minute, a few draws take milliseconds."""
    picks = task.space.random_valid(np.random.default_rng(seed), n, keep=keep,
                                    max_draws=200000)
    assert len(picks) == n, f"{task.name}: {len(picks)} of {n} valid configs in 200000 draws"
    return [task.config(i) for i in picks]


def sample_configs(task, n, seed):
    """The fallback config, then ``n`` distinct valid configs drawn with ``seed``."""
    return [task.fallback_config()] + random_valid(task, n, seed)


def cuda_source(task, cfg):
    return task.build(cfg).mod.imports[0].inspect_source()


def nvcc_cubin(src, target, arch):
    """Compile generated CUDA source into a cubin with nvcc (no GPU needed)."""
    from tvm.support import nvcc
    with target:
        return nvcc.compile_cuda(src, target_format="cubin", arch=arch, compiler="nvcc")


def pool_failures(cases, builders_each=3):
    """Build and run each (task, configs) case in pool measurers, which check every output
    against numpy; returns (configs measured, one line per failed config).

    A task has two or three configs here, so one measurer would keep most of its builders idle:
    the cases are dealt to several measurers (``builders_each`` builders and one runner
    each) that work at once. Timing is off the point, so their runners may share the GPU."""
    import os
    from concurrent.futures import ThreadPoolExecutor
    from tvm_ext.measure import PoolMeasurer
    n_pools = max(1, min(len(cases), (os.cpu_count() or 2) // builders_each))

    def check(share):
        lines, n = [], 0
        with PoolMeasurer(n_parallel=builders_each, number=1, repeat=1,
                          build_timeout=180) as measurer:
            for task, configs in share:
                for cfg, res in zip(configs, measurer.measure(task, configs)):
                    n += 1
                    if not res.ok:
                        lines.append(f"{task.workload} {cfg}: error {res.error_no} "
                                     f"{res.error_msg}")
        return n, lines

    with ThreadPoolExecutor(n_pools) as ex:
        done = list(ex.map(check, [cases[i::n_pools] for i in range(n_pools)]))
    return sum(n for n, _ in done), [line for _, lines in done for line in lines]
