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
    yt = cfg.value("yt", 1)
    inner = cfg["tile_inner"].size[-1] if "tile_inner" in cfg else yi
    # One parallel task per (batch, column panel, yt row chunk); the rows of a chunk are walked
    # inside the task, so the packed panel is reused by every row tile of the chunk.
    gemm_x86.schedule_packed_gemm(sch, wl, tile_y=[yt, wl.M // yi // yt, yi],
                                  tile_x=[-1, 1, xi], tile_k=cfg["tile_k"].size, inner=inner,
                                  unroll_k=bool(cfg.value("unroll_k", 1)))


def _x86_fallback(space, wl, facts):
    t = gemm_x86.fallback_tiles(wl, facts)
    return {"tile_y": [-1, t["yi"]], "tile_x": [-1, t["xi"]], "tile_k": [-1, t["ki"]],
            "yt": t["yt"], "tile_inner": [-1, t["yi"]], "unroll_k": 1}


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
