"""batch_matmul templates.

``batch_matmul.x86``: the packed CPU GEMM of ``gemm_x86`` over (batch, column panels) in
parallel, with TVM <= 0.19's 2-way knobs tile_y = [yo, yi], tile_x = [xo, xi], tile_k = [ko, ki].
"""
from __future__ import annotations

from ..template import Template, register_template
from . import gemm_cuda, gemm_x86


def _x86_compute(wl, cfg):
    return gemm_x86.packed_gemm_compute(wl, cfg["tile_x"].size[-1])


def _x86_schedule(sch, cfg, wl, facts):
    yi = cfg["tile_y"].size[-1]
    xi = cfg["tile_x"].size[-1]
    # One parallel task per (batch, column panel); the rows of a panel are walked inside it, so
    # the packed panel is reused by every row tile.
    gemm_x86.schedule_packed_gemm(sch, wl, tile_y=[1, wl.M // yi, yi], tile_x=[-1, 1, xi],
                                  tile_k=cfg["tile_k"].size, inner=yi)


def _x86_fallback(space, wl, facts):
    t = gemm_x86.fallback_tiles(wl, facts)
    return {"tile_y": [-1, t["yi"]], "tile_x": [-1, t["xi"]], "tile_k": [-1, t["ki"]]}


register_template(Template(
    name="batch_matmul.x86", op="batch_matmul", target_kind="llvm",
    compute=_x86_compute, schedule=_x86_schedule, fallback=_x86_fallback,
    check=lambda wl, facts: None, dtypes=("float32", "float64")))


# ---- batch_matmul.cuda: CUDA cores, TOPI structure (see gemm_cuda) ----


register_template(Template(
    name="batch_matmul.cuda", op="batch_matmul", target_kind="cuda",
    compute=lambda wl, cfg: gemm_cuda.simt_gemm_compute(wl), schedule=gemm_cuda.schedule_from_config,
    fallback=lambda space, wl, facts: gemm_cuda.fallback_tiles(wl, facts),
    check=lambda wl, facts: None, dtypes=("float32", "float16")))
