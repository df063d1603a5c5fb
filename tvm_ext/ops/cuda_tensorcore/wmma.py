"""``dense_tensorcore.cuda`` / ``batch_matmul_tensorcore.cuda``: wmma, TOPI's knobs.

wmma (TVM <= 0.19 dense_tensorcore / batch_matmul_tensorcore structure) accumulates in the
workload's out_dtype (f16 -> f32 or f16, int8 -> int32):
- grid (batch, M tiles, N tiles); a block has block_row_warps x block_col_warps warps, each warp
  owns warp_row_tiles x warp_col_tiles 16x16 accumulator fragments; block tile
  (brw*wrt*16) x (bcw*wct*16), K stepped by chunk*16;
- A and B tiles are staged in shared memory by all threads with ``vec``-element loads, rows
  padded by ``offset`` elements (bank conflicts, and wmma's ldm rule);
- the accumulators go through shared memory (``offsetCS`` padding) and are written out by all
  threads with ``vec``-wide stores: coalesced, and the place where f32 -> f16 casts and the crop of
  a padded tile happen;
- wmma_m is TOPI's fragment shape knob; TVM 0.27 registers only the 16x16x16 shapes, so it is 16.

Shared memory is ``shared.dyn``: TVM plans one dynamic buffer by liveness, so the accumulator
staging reuses the bytes of the A/B tiles, and tiles beyond 48 KB are allowed (the runtime raises
the kernel's dynamic shared-memory limit).

Layouts: wmma has row/col-major loads for B only (its mma_sync takes A as [m, k]), so an A stored
[K, M] (TN, TT) is transposed on its way into shared memory. int8 fragments must start on 32-byte
boundaries (wmma's pointer rule), which a 16-wide int8 column offset breaks (the
cudaErrorMisalignedAddress of a plain schedule); int8 tiles are therefore stored fragment-major in
shared memory, [k / 16][rows][16], so every fragment starts at a multiple of 256 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...template import ScheduleTemplate
from ..common import plain_compute
from . import intrin
from .fallback import check_tc, fallback_tc
from .tiling import (FRAG, WarpTiling, copy_vec, fragments, frag_major_cols, frag_major_rows,
                     inline_consumer, spread, stage_shared, tile_fragment, tile_grid, transpose)


@dataclass(frozen=True)
class WmmaConfig:
    tiling: WarpTiling
    offset: int  # shared A/B row padding (elements)
    offset_cs: int  # shared C tile row padding (TOPI's offsetCS)
    vec: int  # elements per global <-> shared copy

    @staticmethod
    def from_knobs(cfg) -> "WmmaConfig":
        return WmmaConfig(WarpTiling.from_knobs(cfg), cfg["offset"].val, cfg["offsetCS"].val,
                          cfg["vec"].val)


def _wmma_names(I, wl, scope):
    int8, acc = wl.dtype == "int8", wl.out_dtype
    dyn = "_DYN" if scope == "shared.dyn" else ""
    if int8:
        la = getattr(I, f"WMMA_LOAD_16x16x16_S8_A{dyn}_INTRIN")
        lb = getattr(I, f"WMMA_LOAD_16x16x16_S8_B{'_TRANS' if wl.transpose_b else ''}"
                        f"{dyn}_INTRIN")
        sync = I.WMMA_SYNC_16x16x16_s8s8s32_TRANS_INTRIN if wl.transpose_b else \
            I.WMMA_SYNC_16x16x16_s8s8s32_INTRIN
        fill = I.WMMA_FILL_16x16x16_S32_INTRIN
        store = getattr(I, f"WMMA_STORE_16x16x16_S32_SHARED{dyn}_INTRIN")
    else:
        la = getattr(I, f"WMMA_LOAD_16x16x16_F16_A{dyn}_INTRIN")
        lb = getattr(I, f"WMMA_LOAD_16x16x16_F16_B{'_TRANS' if wl.transpose_b else ''}"
                        f"{dyn}_INTRIN")
        out = "f32" if acc == "float32" else "f16"
        sync = getattr(I, f"WMMA_SYNC_16x16x16_f16f16{out}{'_TRANS' if wl.transpose_b else ''}"
                          "_INTRIN")
        fill = getattr(I, f"WMMA_FILL_16x16x16_{out.upper()}_INTRIN")
        store = getattr(I, f"WMMA_STORE_16x16x16_{out.upper()}_SHARED{dyn}_INTRIN")
    return la, lb, sync, fill, store


def schedule_wmma(sch, wl, config: WmmaConfig, *, scope="shared.dyn"):
    I = intrin.load_cuda()
    int8 = wl.dtype == "int8"
    offset, offset_cs, vec = config.offset, config.offset_cs, config.vec
    c, outer, j0, k0, k1, warp, pad = tile_grid(sch, wl, config.tiling, FRAG)
    nwarps = config.tiling.warps
    # 3. write-back: accumulators -> shared (C tile) -> global, by all threads
    cs = sch.cache_write(outer, 0, scope)
    acc = sch.cache_write(outer, 0, "wmma.accumulator")
    sch.reverse_compute_at(acc, warp)
    sch.reverse_compute_at(cs, j0)
    out_bytes = 2 if wl.out_dtype == "float16" else 4
    spread(sch, cs, 2, nwarps, min(vec, 16 // out_bytes))  # at most 16-byte stores
    # 4. A / B tiles in shared memory, loaded by all threads
    for idx in (0, 1):
        a_km = idx == 0 and wl.transpose_a
        if int8:  # fragment-major: [.., k/16, m, 16] (A, B^T) or [.., n/16, k, 16] (B NN)
            layout = frag_major_rows if a_km else frag_major_cols
        else:  # wmma takes A as [m, k]
            layout = transpose if a_km else None
        stage_shared(sch, outer, idx, scope, k0, nwarps, copy_vec(wl, vec, pad, a_km),
                      layout=layout, align=0 if int8 else offset, pad=pad)
    if pad:
        inline_consumer(sch, cs)
    # 5. fragments
    a_frag, b_frag = fragments(sch, outer, k1, "wmma.matrix_a", "wmma.matrix_b")
    init = sch.decompose_reduction(outer, k0)
    la, lb, sync, fill, store = _wmma_names(I, wl, scope)
    sch.tensorize(tile_fragment(sch, a_frag, FRAG, FRAG), la)
    sch.tensorize(tile_fragment(sch, b_frag, FRAG, FRAG), lb)
    acc_name = sch.get(acc).name_hint
    sch.tensorize(tile_fragment(sch, acc, FRAG, FRAG), store)
    # Set on the block tensorize made (it does not keep the inner block's annotations).
    sch.storage_align(sch.get_sblock(acc_name + "_o"), 0, axis=-2, factor=32, offset=offset_cs)
    sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], fill)
    sch.tensorize(sch.get_loops(c)[-3], sync)


def _schedule(sch, cfg, wl, facts):
    schedule_wmma(sch, wl, WmmaConfig.from_knobs(cfg))


# TVM 0.27's StorageRewrite fuses the f32 C tile with an f16 A/B tile of small block tiles and
# then fails ("tvm_access_ptr element type must match the source buffer"). The dynamic
# shared-memory planner reuses the A/B bytes for the C tile by itself, so it is not needed.
_PASS_CONFIG = {"tirx.disable_storage_rewrite": True}


def _template(op):
    return ScheduleTemplate(
        name=f"{op}_tensorcore.cuda", op=op, target_kind="cuda",
        compute=plain_compute, schedule=_schedule,
        fallback=lambda space, wl, facts: fallback_tc(space, wl, facts, mma=False),
        check=lambda wl, facts: check_tc(wl, facts, FRAG), dtypes=("float16", "int8"),
        priority=2, prepare=intrin.load_cuda, pass_config=_PASS_CONFIG)


DENSE_TENSORCORE = _template("dense")
BATCH_MATMUL_TENSORCORE = _template("batch_matmul")
