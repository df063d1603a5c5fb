"""tvm_ext: template-based auto-tuning for Apache TVM 0.27 (batch_matmul, dense).

    import tvm_ext
    wl = tvm_ext.Workload.create("batch_matmul", (4, 256, 256, 256))
    with tvm_ext.apply_history_best("tvm_ext_logs/batch_matmul.llvm.json") as ctx:
        kernel = tvm_ext.build(wl, "llvm")
    print(ctx.report)

Heavy parts (TVM itself, tuners, measurement) are imported on first use.
"""
from .errors import LogError, SpaceError, TemplateError, TvmExtError, WorkloadError
from .space import ConfigEntity, ConfigSpace
from .workload import Family, Workload

__version__ = "0.1.0"

_LAZY = {
    "apply_history_best": ("dispatch", "apply_history_best"),
    "ApplyHistoryBest": ("dispatch", "ApplyHistoryBest"),
    "build": ("dispatch", "build"),
    "Kernel": ("dispatch", "Kernel"),
    "Task": ("task", "Task"),
    "load_records": ("record", "load"),
    "pick_best": ("record", "pick_best"),
    "merge_logs": ("record", "merge"),
    "tune_task": ("session", "tune_task"),
    "make_tuner": ("tuner", "make_tuner"),
    "LocalMeasurer": ("measure", "LocalMeasurer"),
    "PoolMeasurer": ("measure", "PoolMeasurer"),
    "MeasureOptions": ("measure", "MeasureOptions"),
    "parse_target": ("target", "parse_target"),
    "templates_for": ("strategy", "templates_for"),
    "build_family": ("family", "build_family"),
    "tune_family": ("family", "tune_family"),
    "pool_yields": ("codegen", "pool_yields"),
    "host_tensor": ("host_memory", "host_tensor"),
    "host_empty": ("host_memory", "host_empty"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
    raise AttributeError(f"module 'tvm_ext' has no attribute '{name}'")


__all__ = ["ConfigEntity", "ConfigSpace", "Family", "LogError", "SpaceError", "TemplateError",
           "TvmExtError", "Workload", "WorkloadError", "__version__", *_LAZY]
