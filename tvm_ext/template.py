"""What a template is: two peer kinds, one per way of making a kernel from a config.

- ``ScheduleTemplate``: a TOPI-style pair. ``compute(workload, cfg)`` returns TE tensors
  ``[inputs..., output]`` (a config may change the compute, e.g. the packing width of a packed
  layout or split-K); ``schedule(sch, cfg, workload, facts)`` schedules the PrimFunc made from
  them with ``tvm.s_tir.Schedule``. Its schedule also works on a fused Relax function whose first
  block is the matmul, so such templates serve fused epilogues and MetaSchedule.
- ``KernelTemplate``: ``kernel(workload, cfg, facts, target)`` writes the PrimFunc itself, for
  instructions TVM's schedule primitives cannot reach (wgmma). It has no schedule.

Both have the same rest: knobs as data in ``tuning_spaces/<name>.json`` (axes named M, N, K, B),
``fallback(space, workload, facts)`` -> knob values to use without a tuned record, and
``check(workload, facts)`` -> None when the template applies, else the reason it does not.

Which templates exist, and which apply to a workload, is ``tvm_ext.strategy``'s job.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

ALL_LAYOUTS = ("NN", "NT", "TN", "TT")


@dataclass(frozen=True)
class Template:
    name: str
    op: str
    target_kind: str
    fallback: Callable
    check: Callable
    dtypes: Tuple[str, ...]
    layouts: Tuple[str, ...] = ALL_LAYOUTS
    # Among the templates that apply, the highest priority is the default.
    priority: int = 0
    # Imports a template needs before it makes a kernel (tensor intrinsics): kept lazy, so that
    # neither the CLI nor a build worker pays for them unless the template is used.
    prepare: Optional[Callable] = None
    # PassContext options the template's kernels must be compiled with.
    pass_config: Dict[str, Any] = field(default_factory=dict)
    # For a template defined outside tvm_ext (a user's, a test's): folders a measurement worker
    # puts on sys.path before importing the module that defines (and registers) it.
    source_paths: Tuple[str, ...] = ()

    # Whether its schedule takes symbolic extents (padding them up to its tiles inside the
    # kernel): the kernels of a shape family (``tvm_ext.family``).
    symbolic: bool = False

    # Whether ``schedule`` works on a TensorIR matmul (a fused Relax function, MetaSchedule).
    schedulable = False

    @property
    def module(self) -> str:
        """The module that defines the template (a worker imports it to find a user's)."""
        raise NotImplementedError

    def why_not(self, workload, facts) -> Optional[str]:
        if workload.op != self.op:
            return f"{self.name} is for {self.op}"
        if workload.dtype not in self.dtypes:
            return f"dtype {workload.dtype} (supported: {', '.join(self.dtypes)})"
        if workload.layout not in self.layouts:
            return f"layout {workload.layout} (supported: {', '.join(self.layouts)})"
        return self.check(workload, facts)

    def make_func(self, workload, config, facts, target):
        """The kernel's PrimFunc for a config (any exception: the config cannot be built)."""
        raise NotImplementedError


@dataclass(frozen=True)
class ScheduleTemplate(Template):
    compute: Callable = None
    schedule: Callable = None

    schedulable = True

    def __post_init__(self):
        if self.compute is None or self.schedule is None:
            raise TypeError(f"ScheduleTemplate {self.name} needs compute and schedule")

    @property
    def module(self) -> str:
        return self.compute.__module__

    def make_func(self, workload, config, facts, target):
        import tvm  # noqa: PLC0415
        from tvm import s_tir, te  # noqa: PLC0415

        tensors = self.compute(workload, config)
        sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(tensors)}))
        self.schedule(sch, config, workload, facts)
        return sch.mod["main"]


@dataclass(frozen=True)
class KernelTemplate(Template):
    kernel: Callable = None

    def __post_init__(self):
        if self.kernel is None:
            raise TypeError(f"KernelTemplate {self.name} needs kernel")

    @property
    def module(self) -> str:
        return self.kernel.__module__

    def make_func(self, workload, config, facts, target):
        return self.kernel(workload, config, facts, target)
