"""The tiling the wmma and mma templates share: padding to the block tile, the grid / warp /
fragment loop nest, shared-memory staging of the operands, and the write-back's consumers.

One tensor-core tile is 16 x 16 x ``mma_k`` (16 for f16, 32 for int8 on mma). A block has
``block_row_warps x block_col_warps`` warps; each warp owns ``warp_row_tiles x warp_col_tiles``
fragments; K is stepped by ``chunk`` tiles.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..common import (MATMUL_BLOCK, OWN_CONSUMERS, has_block, inline_consumer,  # noqa: F401
                      inline_producer, pad_to_tiles)

FRAG = 16


@dataclass(frozen=True)
class WarpTiling:
    """The block tile in warps and fragments (TOPI's knob names in the comments)."""

    brw: int  # block_row_warps
    bcw: int  # block_col_warps
    wrt: int  # warp_row_tiles
    wct: int  # warp_col_tiles
    chunk: int  # K tiles per step

    @staticmethod
    def from_knobs(cfg) -> "WarpTiling":
        return WarpTiling(cfg["block_row_warps"].val, cfg["block_col_warps"].val,
                          cfg["warp_row_tiles"].val, cfg["warp_col_tiles"].val, cfg["chunk"].val)

    @property
    def warps(self) -> int:
        return self.brw * self.bcw


def lead(idx):
    return tuple(idx[:-2])


def tile_grid(sch, wl, tiling: WarpTiling, kf, raster=1, sliced=False):
    """The tiling both templates share: pad to the block tile, make the 16x16xkf tensor-core
    tile one block, then grid (batch -> blockIdx.z, M -> y, N -> x) / warps (threadIdx.y) /
    fragments per warp, K in steps of chunk x kf.

    ``raster`` > 1 launches the blocks in groups of ``raster`` M tiles (one 1-D grid, M tile
    fastest within a group): blocks running at the same time then share the B tiles of a few
    columns and the A tiles of ``raster`` rows in L2, instead of sweeping all of B per row.

    ``sliced``: the block's loop just above (i, j, k) is sliced-K's slice (the compute of
    ``mma.sliced_compute``); it joins the warps, outermost: warp w computes slice
    w // (brw * bcw) of every K tile."""
    brw, bcw, wrt, wct, chunk = tiling.brw, tiling.bcw, tiling.wrt, tiling.wct, tiling.chunk
    c = sch.get_sblock(MATMUL_BLOCK)
    pad = pad_to_tiles(sch, c, (brw * wrt * FRAG, bcw * wct * FRAG, chunk * kf))
    loops = sch.get_loops(c)
    batch, (i, j, k) = list(loops[:-3]), loops[-3:]
    slices = [batch.pop()] if sliced else []
    i, i_tc = sch.split(i, [None, FRAG])
    j, j_tc = sch.split(j, [None, FRAG])
    k, k_tc = sch.split(k, [None, kf])
    sch.reorder(*batch, *slices, i, j, k, i_tc, j_tc, k_tc)
    outer = sch.blockize(i_tc)
    i0, i1, i2 = sch.split(i, [None, brw, wrt])
    j0, j1, j2 = sch.split(j, [None, bcw, wct])
    k0, k1 = sch.split(k, [None, chunk])
    sch.reorder(*batch, i0, j0, *slices, i1, j1, k0, k1, i2, j2)
    if batch:
        sch.bind(batch[0], "blockIdx.z")
    if raster > 1:
        i0, i0r = sch.split(i0, [None, raster])
        sch.reorder(i0, j0, i0r)
        j0 = sch.fuse(i0, j0, i0r)
        sch.bind(j0, "blockIdx.x")
    else:
        sch.bind(i0, "blockIdx.y")
        sch.bind(j0, "blockIdx.x")
    warp = sch.fuse(*slices, i1, j1)
    sch.bind(warp, "threadIdx.y")
    return c, outer, j0, k0, k1, warp, pad


def transpose(*x):
    """Index map swapping the last two axes (a [K, M] operand stored [M, K])."""
    return (*lead(x), x[-1], x[-2])


def frag_major_rows(*x):
    """[.., k, m] -> [.., k/16, m, k%16]: an int8 A stored [K, M], fragment-major."""
    return (*lead(x), x[-2] // FRAG, x[-1], x[-2] % FRAG)


def frag_major_cols(*x):
    """[.., r, c] -> [.., c/16, r, c%16]: split the contiguous axis (K of A / B^T, N of B)."""
    return (*lead(x), x[-1] // FRAG, x[-2], x[-1] % FRAG)


def stage_shared(sch, outer, idx, scope, k0, nwarps, vec, *, layout, align, pad):
    """Operand ``idx`` of the tensor-core block staged in shared memory per K step: stored in
    ``layout`` (an index map, or None), copied by all threads ``vec`` elements wide, rows padded
    by ``align`` elements, and for a padded shape the zeros computed inside the copy."""
    sh = sch.cache_read(outer, idx, scope)
    if layout is not None:
        sch.transform_layout(sh, ("write", 0), layout)
    sch.compute_at(sh, k0)
    spread(sch, sh, 2, nwarps, vec)
    if align:
        sch.storage_align(sh, 0, axis=-2, factor=32, offset=align)
    if pad:
        inline_producer(sch, sh)


def fragments(sch, outer, k1, scope_a, scope_b):
    """The A and B register fragments of the tensor-core block, loaded per K step ``k1``."""
    frags = [sch.cache_read(outer, idx, scope) for idx, scope in ((0, scope_a), (1, scope_b))]
    for f in frags:
        sch.compute_at(f, k1)
    return frags


def spread(sch, block, ndim, nwarps, vec):
    """Fuse a copy's last ``ndim`` loops and split them over the warps' threads, vec-wide."""
    fused = sch.fuse(*sch.get_loops(block)[-ndim:])
    _, ty, tx, v = sch.split(fused, [None, nwarps, 32, vec])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)


def copy_vec(wl, vec, pad, transposing, async_copy=False):
    """Elements per global -> shared copy. TVM 0.27's CUDA codegen cannot write the zero of a
    padded int8 vector wider than 4 (it emits make_int2 with 8 arguments), nor a transposing
    int8 copy wider than 4: those copies use 4 bytes. Under ``tirx.use_async_copy`` a
    transposing copy is not vectorised at all: TVM turns its 4-byte "vector" (contiguous in
    global memory, strided in shared memory) into one contiguous cp.async, which writes the
    wrong bytes to a misaligned address (cudaErrorMisalignedAddress on the H100)."""
    if transposing and async_copy:
        return 1
    if wl.dtype == "int8" and (pad or transposing):
        return min(vec, 4)
    return vec


def has_epilogue(sch, block):
    """Whether the output goes on to blocks other than our crop, cast and split-K sum (a
    fused epilogue)."""
    for c in sch.get_consumers(block):
        if sch.get(c).name_hint not in OWN_CONSUMERS or has_epilogue(sch, c):
            return True
    return False


def tile_fragment(sch, block, rows, cols):
    a, b = sch.get_loops(block)[-2:]
    a0, a1 = sch.split(a, [None, rows])
    b0, b1 = sch.split(b, [None, cols])
    sch.reorder(a0, b0, a1, b1)
    return a1


def mma_k(wl):
    return 32 if wl.dtype == "int8" else 16
