"""The template registry and the per-op strategy table.

A template is a TOPI-style pair for one op on one kind of target:

- ``compute(workload, cfg)`` returns TE tensors ``[inputs..., output]`` (a config may change the
  compute, e.g. the packing width of a packed layout),
- ``schedule(sch, cfg, workload, facts)`` schedules the PrimFunc made from them with
  ``tvm.s_tir.Schedule``,
- its knobs are data in ``tuning_spaces/<name>.json`` (axes named M, N, K, B),
- ``fallback(space, workload, facts)`` gives the knob values to use without a tuned record,
- ``check(workload, facts)`` returns None when the template applies, else the reason it does not.

A template may instead write its kernel itself: ``kernel(workload, cfg, facts, target)`` returns
the PrimFunc (the wgmma templates, whose instruction TVM's schedules cannot reach). Such a
template has no schedule for Relax's fused epilogues or MetaSchedule (``schedulable`` is False).

``templates_for(workload, target)`` is the strategy: every template that applies, best first.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import TemplateError

_REGISTRY: Dict[str, "Template"] = {}
_OP_MODULES = ("tvm_ext.ops.batch_matmul", "tvm_ext.ops.dense", "tvm_ext.ops.tensorcore",
               "tvm_ext.ops.wgmma")


@dataclass(frozen=True)
class Template:
    name: str
    op: str
    target_kind: str
    compute: Callable
    schedule: Callable
    fallback: Callable
    check: Callable
    dtypes: Tuple[str, ...]
    layouts: Tuple[str, ...] = ("NN", "NT", "TN", "TT")
    priority: int = 0
    # Imports a template needs before scheduling (e.g. tensor intrinsics): kept lazy.
    prepare: Optional[Callable] = None
    # PassContext options the template's kernels must be compiled with.
    pass_config: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)
    # kernel(workload, cfg, facts, target) -> PrimFunc, for templates that write the kernel
    kernel: Optional[Callable] = None

    @property
    def schedulable(self) -> bool:
        """Whether ``schedule`` works on a TensorIR matmul (not so for kernel templates)."""
        return self.kernel is None

    def why_not(self, workload, facts) -> Optional[str]:
        if workload.op != self.op:
            return f"{self.name} is for {self.op}"
        if workload.dtype not in self.dtypes:
            return f"dtype {workload.dtype} (supported: {', '.join(self.dtypes)})"
        if workload.layout not in self.layouts:
            return f"layout {workload.layout} (supported: {', '.join(self.layouts)})"
        return self.check(workload, facts)


def register_template(template: Template) -> Template:
    if template.name in _REGISTRY:
        raise ValueError(f"template {template.name} registered twice")
    _REGISTRY[template.name] = template
    return template


def _load_ops():
    for mod in _OP_MODULES:
        importlib.import_module(mod)


def get_template(name: str) -> Template:
    _load_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise TemplateError(f"unknown template '{name}' (known: {', '.join(sorted(_REGISTRY))})")\
            from None


def registered(name: str) -> Optional[Template]:
    _load_ops()
    return _REGISTRY.get(name)


def all_templates() -> List[Template]:
    _load_ops()
    return sorted(_REGISTRY.values(), key=lambda t: t.name)


def templates_for(workload, target, facts=None, *, schedulable=False) -> List[Template]:
    """Templates that apply to a workload on a target, highest priority first (only those with
    a schedule if ``schedulable``); a one-line error naming why none does."""
    from .target import hardware_facts, target_info  # noqa: PLC0415

    _load_ops()
    kind = target_info(target)["kind"]
    facts = facts or hardware_facts(target, workload.dtype)
    found, reasons = [], []
    for t in _REGISTRY.values():
        if t.op != workload.op or t.target_kind != kind or schedulable and not t.schedulable:
            continue
        why = t.why_not(workload, facts)
        if why is None:
            found.append(t)
        else:
            reasons.append(f"{t.name}: {why}")
    if not found:
        detail = "; ".join(reasons) if reasons else f"no {workload.op} template for {kind}"
        raise TemplateError(f"no template for {workload} on {kind}: {detail}")
    return sorted(found, key=lambda t: -t.priority)
