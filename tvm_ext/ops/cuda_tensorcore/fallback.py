"""When the tensor-core templates apply, and their untuned configs."""
from __future__ import annotations

from ..common import fallback_raster, padded
from .tiling import FRAG, mma_k

_TC_DTYPES = {"float16": ("float32", "float16"), "bfloat16": ("float32", "bfloat16"),
              "int8": ("int32",)}



def check_tc(wl, facts, kf=None):
    """Why a tensor-core template does not apply (None when it does)."""
    if facts.get("sm", 0) < 80:
        return f"needs sm_80 or newer (target is sm_{facts.get('sm')})"
    outs = _TC_DTYPES.get(wl.dtype)
    if outs is None:
        return f"dtype {wl.dtype} (tensor cores here: {', '.join(_TC_DTYPES)})"
    if wl.out_dtype not in outs:
        return f"{wl.dtype} -> {wl.out_dtype} (supported: {', '.join(outs)})"
    kf = kf or mma_k(wl)
    ratio = padded(wl.M, FRAG) * padded(wl.N, FRAG) * padded(wl.K, kf) / (wl.M * wl.N * wl.K)
    if ratio > 2:
        return (f"padding {wl.M}x{wl.N}x{wl.K} to the 16x16x{kf} tensor-core tile costs "
                f"{ratio:.1f}x the flops (limit 2x): use the CUDA-core templates")
    return None


def fallback_tc(space, wl, facts, *, mma):
    """Untuned tiles from the target: the largest block tile (up to 128 x 128, 4-8 warps) that
    still gives every SM a block and pads at most 1.25x; 64-byte K steps for wmma, 128-byte
    three-stage pipelines for mma (both within the shared memory of sm_80 / sm_90). For mma, a
    tiling that breaks the space's rules at every pipeline depth (a staged C tile over the
    static shared memory: a padded shape, a shape family's kernel) is passed over."""
    best, best_key = None, None
    for tiling in ((2, 2, 4, 4), (2, 2, 4, 2), (2, 2, 2, 4), (2, 2, 2, 2),
                   (2, 1, 2, 2), (1, 2, 2, 2), (1, 1, 2, 2), (1, 1, 1, 2),
                   (1, 1, 2, 1), (1, 1, 1, 1)):
        brw, bcw, wrt, wct = tiling
        tm, tn = brw * wrt * FRAG, bcw * wct * FRAG
        mp, np_ = padded(wl.M, tm), padded(wl.N, tn)
        waste = mp * np_ / (wl.M * wl.N)
        blocks = wl.batch * (mp // tm) * (np_ // tn)
        cfg = _tc_config(space, wl, facts, tiling, mma)
        if mma and not _launchable(space, cfg) and _launchable(space, {**cfg, "raster": 1}):
            cfg["raster"] = 1  # a shape family's kernel launches row by row
        fits = not mma or _launchable(space, cfg)
        key = (fits, waste <= 1.25 and blocks >= facts["num_sms"], -waste, tm * tn)
        if best_key is None or key > best_key:
            best, best_key = cfg, key
        if key[0] and key[1]:
            break
    cfg = best
    if mma and "slice_k" in space.knobs:
        cfg = _sliced_small_grid(space, wl, facts, cfg)
    if mma:
        # A staged C tile (a padded shape, a subgraph task's epilogue) sits in static shared
        # memory beside the pipeline: fewer stages where the two would not launch together.
        while cfg["stages"] > 1 and space.violations(space.config_from_values(cfg)):
            cfg["stages"] -= 1
    return cfg


def _sliced_small_grid(space, wl, facts, cfg):
    """A grid of fewer 16 x 16 tiles than SMs (512 x {16,32,64} x 512) is bound by each
    block's chain of K steps, not by the tensor cores: one-warp 16 x 16 tiles with the K
    tile sliced over 4 warps (``slice_k``), 2 K steps per warp and tile, 8-byte copies, a
    3-deep pipeline, the launch grouped by 16 M tiles where it can be (the configs the H100
    tuned for those shapes, docs/BENCHMARKS.md). Where the space refuses it, ``cfg``."""
    nb = facts["dtype_bytes"]
    tiles_m, tiles_n = -(-wl.M // FRAG), -(-wl.N // FRAG)
    if wl.batch * tiles_m * tiles_n >= facts["num_sms"]:
        return cfg
    raster = next((r for r in (16, 8, 4, 2) if tiles_m % r == 0 and tiles_n > 1), 1)
    sliced = {**cfg, "block_row_warps": 1, "block_col_warps": 1, "warp_row_tiles": 1,
              "warp_col_tiles": 1, "chunk": 2, "stages": 3, "vec": 8 // nb,
              "offset": 16 // nb, "raster": raster, "stage_c": 0, "slice_k": 4}
    return sliced if space.is_valid(space.config_from_values(sliced)) else cfg


def _launchable(space, cfg):
    """Whether the space's rules take ``cfg`` at some pipeline depth up to its own."""
    return any(not space.violations(space.config_from_values({**cfg, "stages": s}))
               for s in range(cfg["stages"], 0, -1))


def _tc_config(space, wl, facts, tiling, mma):
    """The fallback's knobs for one warp tiling (brw, bcw, wrt, wct)."""
    brw, bcw, wrt, wct = tiling
    kf = mma_k(wl) if mma else FRAG
    nbytes = facts["dtype_bytes"]
    chunk = max(1, (128 if mma else 64) // (kf * nbytes))
    while chunk > 1 and padded(wl.K, chunk * kf) > 1.125 * wl.K:  # little K padding
        chunk //= 2
    vec = 16 // nbytes
    threads, tk = brw * bcw * 32, chunk * kf
    while vec > 1 and ((brw * wrt * FRAG * tk) % (threads * vec)
                       or (bcw * wct * FRAG * tk) % (threads * vec)):
        vec //= 2  # small tiles: fewer elements than threads x 16 bytes
    cfg = {"block_row_warps": brw, "block_col_warps": bcw, "warp_row_tiles": wrt,
           "warp_col_tiles": wct, "chunk": chunk, "vec": vec}
    tm, tn = brw * wrt * FRAG, bcw * wct * FRAG
    if mma:
        cfg.update(stages=3, offset=16 // nbytes, raster=fallback_raster(wl, facts, tm, tn),
                   stage_c=0)
        if "split_k" in space.knobs:
            # Not split: with the fallback's tiles, splitting lost on the H100 on the suite's
            # small-grid shapes (512 x {16,32,64} x 512, 16 x 4096 x 4096, 1024^3). The split
            # that wins on 16 x 4096 x 4096 (4 slices) has smaller tiles, found by tuning.
            cfg["split_k"] = 1
        if "slice_k" in space.knobs:
            cfg["slice_k"] = 1
        if wl.out_dtype in ("float16", "bfloat16"):
            cfg["stage_c"] = _fallback_stage_c(space, cfg)
    else:
        cfg.update(offset=8 if nbytes == 2 else 0, offsetCS=4 if wl.out_dtype != "float16" else 8,
                   wmma_m=16)
    return cfg


def _fallback_stage_c(space, cfg):
    """Stage an f16 output through shared memory (its casting store from registers writes 2
    bytes per thread and column pair, a quarter of each 32-byte sector) where the space's rules
    (the static C tile beside the pipeline stages) allow it as they allow the direct store."""
    def broken(stage_c):
        return set(space.violations(space.config_from_values({**cfg, "stage_c": stage_c})))
    return int(broken(1) <= broken(0))


# TVM 0.27's StorageRewrite fuses the f32 C tile with an f16 A/B tile of small block tiles and
# then fails ("tvm_access_ptr element type must match the source buffer"). The dynamic
# shared-memory planner reuses the A/B bytes for the C tile by itself, so it is not needed.
