"""Helpers for CPU tests that run code built for a target other than the host's."""


def host_runs_avx2() -> bool:
    """Whether this host runs AVX2 code (256-bit vectors or wider, by the host target's facts):
    a kernel built for an AVX2 target (znver3) is only run where it does."""
    from tvm_ext.target import hardware_facts, host_cpu_target
    return hardware_facts(host_cpu_target())["vector_lanes"] >= 8
