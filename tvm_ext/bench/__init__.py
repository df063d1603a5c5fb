"""The benchmark: tvm_ext's kernels against the vendor library (``python -m tvm_ext.bench``).

- ``common``: result rows, wall-clock timing, the printed table;
- ``cpu``: the CPU suite against numpy; ``gpu``: the GPU suite against cuBLAS and dlight, with
  the replay check of tuned records;
- ``tuners``: tuner curves on a replayed space; ``tuning_cost``: XGB from scratch to 90% of a
  shipped record; ``plot``: the charts;
- ``__main__``: the command line (``main(argv)``).

Every tuning run goes through ``tvm_ext.session`` (the one tuning driver). Names are imported on
first use, so importing the package loads neither TVM, torch nor matplotlib. The figures and the
commands that produced them: ``docs/BENCHMARKS.md``.
"""
import importlib

_LAZY = {
    "main": "__main__",
    "tune_suite": "__main__",
    "Row": "common",
    "print_table": "common",
    "CPU_SUITE": "cpu",
    "CPU_QUICK": "cpu",
    "run_cpu": "cpu",
    "GPU_SUITE": "gpu",
    "run_gpu": "gpu",
    "replay_record": "gpu",
    "TUNER_WORKLOAD": "tuners",
    "run_tuners": "tuners",
    "CostRow": "tuning_cost",
    "run_tuning_cost": "tuning_cost",
    "print_cost_table": "tuning_cost",
    "plot_ratios": "plot",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module '{__name__}' has no attribute '{name}'")


__all__ = list(_LAZY)
