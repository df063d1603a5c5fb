"""The matmul workloads of a Relax model, with how many kernel calls compute each."""
from __future__ import annotations

from typing import Dict, List, Tuple

import tvm
from tvm import relax as _relax

from ..errors import TvmExtError
from ..strategy import templates_for
from ..target import parse_target
from ..workload import Workload
from .legalize import matmuls_as_templates, views_for
from .match import match_family, match_fused, match_matmul


def _call_counts(mod) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit(e):
        if isinstance(e, _relax.Call) and e.op.same_as(call_tir):
            gv = e.args[0]
            counts[gv.name_hint] = counts.get(gv.name_hint, 0) + 1

    for _, f in mod.functions.items():
        if isinstance(f, _relax.Function):
            _relax.analysis.post_order_visit(f, visit)
    return counts


def extract_tasks(mod, target=None, *, subgraphs: bool = False,
                  views=None) -> List[Tuple[Workload, int]]:
    """Every matmul workload of a model that a template covers on ``target``, with how many
    kernel calls compute it, most frequent (then largest) first. ``subgraphs``: the model as
    ``build(..., fuse_epilogue=True)`` runs it: each matmul fused with the elementwise ops
    after it is one subgraph task (``Workload.epilogue``; a fused function whose ops cannot be
    named is its anchor matmul), and bare matmuls stay bare. ``views``: as ``build``'s."""
    from .subgraph import fuse  # noqa: PLC0415
    target = parse_target(target)
    epilogues = {}
    if views_for(target, views):  # as ``build``: matmuls on views of their operands
        mod = matmuls_as_templates(mod)
    if subgraphs:  # as a CPU build splits an epilogue it cannot name
        mod, epilogues = fuse(mod, split_unnamed=target.kind.name == "llvm")
    else:
        mod = _relax.transform.LegalizeOps()(mod)  # a no-op on a legalized module
    counts = _call_counts(mod)
    found: Dict[tuple, List] = {}
    for gv, f in mod.functions.items():
        wl = match_matmul(f)
        if wl is None and subgraphs:
            fused = match_fused(f)
            wl = fused[0] if fused is not None else None
            if wl is not None and epilogues.get(gv.name_hint):
                try:
                    wl = wl.with_(epilogue=epilogues[gv.name_hint])
                except TvmExtError:
                    pass  # an epilogue no workload takes: tuned as its anchor matmul
        if wl is None:
            continue
        try:
            templates_for(wl, target)
        except TvmExtError:
            continue
        entry = found.setdefault(wl.key(), [wl, 0])
        entry[1] += counts.get(gv.name_hint, 0)
    return sorted(((wl, n) for wl, n in found.values()), key=lambda t: (-t[1], -t[0].flop))


def extract_families(mod, target=None, *,
                     views=None) -> List[Tuple[object, Dict[str, str], int]]:
    """Every matmul of a model whose sizes hold ``tir.Var``s, as a shape family whose varying
    axes are of any size (``?``), with {axis: var name} and how many kernel calls compute it;
    one entry per family signature, most frequent first. ``views``: as ``build``'s (a
    ``q @ permute_dims(k)`` is then a family of layout NT on k)."""
    from ..family import family_template  # noqa: PLC0415
    target = parse_target(target)
    if views_for(target, views):  # as ``build``: matmuls on views of their operands
        mod = matmuls_as_templates(mod)
    mod = _relax.transform.LegalizeOps()(mod)
    counts = _call_counts(mod)
    found: Dict[tuple, List] = {}
    for gv, f in mod.functions.items():
        hit = match_family(f)
        if hit is None:
            continue
        fam, names = hit
        try:
            family_template(fam, target)
        except TvmExtError:
            continue
        entry = found.setdefault(fam.signature(), [fam, names, 0])
        entry[2] += counts.get(gv.name_hint, 0)
    return sorted(((f, names, n) for f, names, n in found.values()), key=lambda t: -t[2])
