"""dense (and 2-D matmul) templates.

``dense_pack.x86``: the packed CPU GEMM of ``gemm_x86`` with TVM <= 0.19's dense_pack knobs
tile_y = [yt, yo, yi], tile_x = [xt, xo, xi], tile_k = [ko, ki], tile_inner. The weight may be
[N, K] (dense, layout NT) or [K, N] (matmul, layout NN).
"""
from __future__ import annotations

from ..template import Template, register_template
from . import gemm_cuda, gemm_x86


def _x86_compute(wl, cfg):
    return gemm_x86.packed_gemm_compute(wl, cfg["tile_x"].size[-1])


def _x86_schedule(sch, cfg, wl, facts):
    gemm_x86.schedule_packed_gemm(sch, wl, tile_y=cfg["tile_y"].size, tile_x=cfg["tile_x"].size,
                                  tile_k=cfg["tile_k"].size, inner=cfg["tile_inner"].size[-1])


def _x86_fallback(space, wl, facts):
    t = gemm_x86.fallback_tiles(wl, facts)
    return {"tile_y": [t["yt"], wl.M // t["yi"] // t["yt"], t["yi"]], "tile_x": [-1, 1, t["xi"]],
            "tile_k": [-1, t["ki"]], "tile_inner": [-1, t["yi"]]}


register_template(Template(
    name="dense_pack.x86", op="dense", target_kind="llvm",
    compute=_x86_compute, schedule=_x86_schedule, fallback=_x86_fallback,
    check=lambda wl, facts: None, dtypes=("float32", "float64")))


# ---- dense_large_batch.cuda: the SIMT GEMM of gemm_cuda without the batch ----


register_template(Template(
    name="dense_large_batch.cuda", op="dense", target_kind="cuda",
    compute=lambda wl, cfg: gemm_cuda.simt_gemm_compute(wl), schedule=gemm_cuda.schedule_from_config,
    fallback=lambda space, wl, facts: gemm_cuda.fallback_tiles(wl, facts),
    check=lambda wl, facts: None, dtypes=("float32", "float16")))


# ---- dense_small_batch.cuda: cross-thread reduction over K, for M <= 64 ----

register_template(Template(
    name="dense_small_batch.cuda", op="dense", target_kind="cuda",
    compute=lambda wl, cfg: gemm_cuda.simt_gemm_compute(wl),
    schedule=gemm_cuda.schedule_small_batch,
    fallback=lambda space, wl, facts: gemm_cuda.fallback_small_batch(wl, facts),
    check=lambda wl, facts: None if wl.M <= 64 else f"M={wl.M} > 64 (use dense_large_batch)",
    dtypes=("float32", "float16"), priority=1))
