"""Tuned kernels in whole Relax models.

    import tvm_ext.relax as tr
    tasks = tr.extract_tasks(mod, target)            # [(Workload, count), ...]
    with tvm_ext.apply_history_best("model.json") as ctx:
        ex = tr.build(mod, target)                   # our matmuls, the rest as TVM does it
    print(ctx.report)                                # per kernel: tuned or fallback

- ``match``: which legalized PrimFuncs are matmuls (plain, or fused with an epilogue);
- ``extract``: a model's matmul workloads with call counts, and its shape families (matmuls
  with symbolic sizes, built into dispatching libraries by ``apply``);
- ``apply``: ``ApplyTunedKernels`` (the pass) and ``build``;
- ``legalize``: ``relax.matmul`` legalized with our compute (the strategy form);
- ``tuning``: ``tune_model`` (every matmul under one budget, or ``fast``: the proposer's top K
  each), ``ApplyFastTuning`` (fast tuning as a pipeline pass) and ``load_model``.
"""
from ..dispatch import current
from .apply import ApplyTunedKernels, build
from .extract import extract_families, extract_tasks
from .legalize import legalize_as_strategy, legalize_matmul, register_strategy
from .match import match_family, match_fused, match_matmul, workload_of_call
from .tuning import ApplyFastTuning, load_model, tune_model, tune_model_families

__all__ = ["ApplyFastTuning", "ApplyTunedKernels", "build", "current", "extract_families",
           "extract_tasks", "legalize_as_strategy", "legalize_matmul", "load_model",
           "match_family", "match_fused", "match_matmul", "register_strategy", "tune_model",
           "tune_model_families", "workload_of_call"]
