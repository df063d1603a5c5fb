"""Which templates exist, and which apply to a workload on a target (the per-op strategy).

``BUILTIN`` is the explicit list of tvm_ext's templates. A template defined elsewhere (a user's,
a test's) is added with ``register_template``; measurement workers import the module that
defines it (``Template.module``), which registers it there too. That registry and the apply
context are the package's only module-level mutable state.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from .errors import TemplateError
from .ops import (cuda_mma_direct, cuda_sgemm, cuda_simt, cuda_tensorcore, cuda_wgmma,
                  cuda_wgmma_ws, x86_gemm)
from .target import hardware_facts, target_info
from .template import Template

BUILTIN = (
    x86_gemm.BATCH_MATMUL_X86, x86_gemm.DENSE_PACK_X86, x86_gemm.DENSE_SWAP_X86,
    x86_gemm.DENSE_GEMV_X86, x86_gemm.DENSE_GEMV_NN_X86, x86_gemm.DENSE_GEMV_T_X86,
    x86_gemm.BATCH_MATMUL_GEMV_X86, x86_gemm.BATCH_MATMUL_GEMV_NN_X86,
    cuda_simt.BATCH_MATMUL_CUDA, cuda_simt.DENSE_LARGE_BATCH_CUDA,
    cuda_simt.DENSE_SMALL_BATCH_CUDA, cuda_simt.BATCH_MATMUL_SMALL_BATCH_CUDA,
    cuda_sgemm.DENSE_SGEMM, cuda_sgemm.BATCH_MATMUL_SGEMM,
    *cuda_tensorcore.TEMPLATES,
    cuda_mma_direct.DENSE_MMA_DIRECT, cuda_mma_direct.BATCH_MATMUL_MMA_DIRECT,
    cuda_wgmma.DENSE_WGMMA, cuda_wgmma.BATCH_MATMUL_WGMMA,
    cuda_wgmma_ws.DENSE_WGMMA_WS, cuda_wgmma_ws.BATCH_MATMUL_WGMMA_WS,
)

_TEMPLATES: Dict[str, Template] = {t.name: t for t in BUILTIN}


def register_template(template: Template) -> Template:
    """Add a template defined outside tvm_ext (its name must be new)."""
    if template.name in _TEMPLATES:
        raise ValueError(f"template {template.name} registered twice")
    _TEMPLATES[template.name] = template
    return template


def get_template(name: str) -> Template:
    try:
        return _TEMPLATES[name]
    except KeyError:
        raise TemplateError(f"unknown template '{name}' "
                            f"(known: {', '.join(sorted(_TEMPLATES))})") from None


def registered(name: str) -> Optional[Template]:
    return _TEMPLATES.get(name)


def all_templates() -> List[Template]:
    return sorted(_TEMPLATES.values(), key=lambda t: t.name)


def templates_for(workload, target, facts=None, *, schedulable=False) -> List[Template]:
    """Templates that apply to a workload on a target, highest priority first (``Template.rank``:
    for some it depends on the shape; only those with a schedule if ``schedulable``); a one-line
    error naming why none does."""
    kind = target_info(target)["kind"]
    facts = facts or hardware_facts(target, workload.dtype)
    found, reasons = [], []
    for t in _TEMPLATES.values():
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
    return sorted(found, key=lambda t: -t.rank(workload, facts))
