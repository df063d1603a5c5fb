"""Lazy access to TVM's CUDA tensor intrinsics.

``import tvm.s_tir.tensor_intrin`` takes 20-30 s: the package registers the intrinsics of every
target (x86, ARM, Hexagon, RISC-V, ROCm...) as TVMScript. Tensor-core templates need only the CUDA
ones, so ``load_cuda()`` executes ``tensor_intrin/cuda.py`` alone (about 6 s on our 2-core machine)
under its own module name. If the whole package is imported later (dlight, MetaSchedule), its
``from . import cuda`` finds that module in ``sys.modules`` and does not register anything twice.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

from ..common import register_once  # noqa: F401  (the templates call intrin.register_once)

_NAME = "tvm.s_tir.tensor_intrin.cuda"
_LOCK = threading.Lock()


def load_cuda():
    """The module ``tvm.s_tir.tensor_intrin.cuda`` (its intrinsics registered)."""
    with _LOCK:
        mod = sys.modules.get(_NAME)
        if mod is not None:
            return mod
        import tvm.s_tir  # noqa: PLC0415

        from ..common import fast_tvmscript_import  # noqa: PLC0415
        if "tvm.s_tir.tensor_intrin" in sys.modules:  # package imported by someone else
            return importlib.import_module(_NAME)
        path = tvm.s_tir.__path__[0] + "/tensor_intrin/cuda.py"
        spec = importlib.util.spec_from_file_location(_NAME, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = mod
        try:
            with fast_tvmscript_import():
                spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[_NAME]
            raise
        return mod


def mma_cast_store(in_dtype: str, out_dtype: str):
    """(desc, impl) of a 16x16 mma accumulator store from registers ("warp" scope) to global
    memory that casts on the way (f32 accumulators -> f16 output). TVM's own mma store
    intrinsics copy without a cast. (A vectorised pair store would not pass TVM 0.27's
    LowerWarpMemory.)"""
    from tvm.script import tirx as T  # noqa: PLC0415
    I = load_cuda()
    index_map = I.shared_16x16_to_ldmatrix_32x8_layout
    index_map_rev = I.ldmatrix_32x8_to_shared_16x16_layout

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        C_warp = T.match_buffer(a, [32, 8], dtype=in_dtype, scope="warp")
        C = T.match_buffer(c, [16, 16], dtype=out_dtype, scope="global")
        with T.sblock("root"):
            T.reads(C_warp[0:32, 0:8])
            T.writes(C[0:16, 0:16])
            for i0, i1 in T.grid(16, 16):
                with T.sblock("C_warp"):
                    v0, v1 = T.axis.remap("SS", [i0, i1])
                    thread_id, local_id = T.meta_var(index_map(v0, v1))
                    T.reads(C_warp[thread_id, local_id])
                    T.writes(C[v0, v1])
                    C[v0, v1] = T.Cast(out_dtype, C_warp[thread_id, local_id])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        C_warp = T.match_buffer(a, [32, 8], dtype=in_dtype, scope="warp", offset_factor=1)
        C = T.match_buffer(c, [16, 16], dtype=out_dtype, scope="global", offset_factor=1,
                           strides=[s0, s1])
        with T.sblock("root"):
            T.reads(C_warp[0:32, 0:8])
            T.writes(C[0:16, 0:16])
            for tx in T.thread_binding(0, 32, "threadIdx.x"):
                for local_id in T.serial(8):
                    row, col = T.meta_var(index_map_rev(tx, local_id))
                    C[row, col] = T.Cast(out_dtype, C_warp[tx, local_id])

    return desc, impl


def ldmatrix_bf16(matrix: str, transposed: bool, scope: str):
    """(desc, impl) of a 16x16 bf16 ldmatrix (x4) from shared memory into an mma fragment.
    TVM 0.27 registers these for f16 only (``get_ldmatrix_intrin`` asserts the dtype); ldmatrix
    moves 16-bit words, so the bf16 intrinsic is the f16 one with its buffers' dtype changed:
    the same fragment layout, the same shared offsets, ``.b16``."""
    from tvm.script import tirx as T  # noqa: PLC0415
    from tvm.tirx import const  # noqa: PLC0415
    I = load_cuda()
    index_map = I.shared_16x16_to_ldmatrix_32x8_layout
    # As get_ldmatrix_intrin(16, ...): A is read row-major unless transposed; B is transposed
    # by ldmatrix unless stored [N, K].
    trans_in_ldmatrix = transposed if matrix == "A" else not transposed
    half = const(16)
    if transposed:
        def smem_offset(tx, stride):
            return stride * 8 * (tx // half) + stride * (tx % 8) + 8 * ((tx % half) // 8)
    else:
        def smem_offset(tx, stride):
            return stride * (tx % half) + 8 * (tx // half)

    @T.prim_func(s_tir=True)
    def desc(warp_handle: T.handle, shared_handle: T.handle) -> None:
        shared = T.match_buffer(shared_handle, (16, 16), "bfloat16", align=64, offset_factor=16,
                                scope=scope)
        warp = T.match_buffer(warp_handle, (32, 8), "bfloat16", align=64, offset_factor=16,
                              scope="warp")
        with T.sblock("root"):
            T.reads(shared[0:16, 0:16])
            T.writes(warp[0:32, 0:8])
            for ax0, ax1 in T.grid(16, 16):
                with T.sblock("shared_warp"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(shared[v0, v1])
                    thread_id, local_id = T.meta_var(index_map(v0, v1))
                    T.writes(warp[thread_id, local_id])
                    warp[thread_id, local_id] = shared[v0, v1]

    @T.prim_func(s_tir=True)
    def impl(warp_handle: T.handle, shared_handle: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        shared = T.match_buffer(shared_handle, (16, 16), "bfloat16", align=64, offset_factor=16,
                                scope=scope, strides=[s0, s1])
        warp = T.match_buffer(warp_handle, (32, 8), "bfloat16", align=64, offset_factor=16,
                              scope="warp")
        with T.sblock("root"):
            T.reads(shared[0:16, 0:16])
            T.writes(warp[0:32, 0:8])
            for tx in T.thread_binding(0, 32, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(
                    trans_in_ldmatrix, 4, ".b16", warp.data, warp.elem_offset + 8 * tx,
                    shared.access_ptr("r"), smem_offset(tx, s0), dtype="bfloat16"))

    return desc, impl


def mma_bf16(a_transposed: bool, b_transposed: bool):
    """(desc, impl) of a 16x16x16 bf16 x bf16 -> f32 mma tile (two m16n8k16 mma.sync), as
    TVM's f16 ``get_mma_intrin`` (whose dtype table has no bf16)."""
    from tvm.script import tirx as T  # noqa: PLC0415
    I = load_cuda()
    index_map = I.shared_16x16_to_ldmatrix_32x8_layout
    off = 16  # offset factors as TVM's: 16 for every operand of a 16-deep tile

    def swap(i, j, flag):
        return (j, i) if flag else (i, j)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (32, 8), "bfloat16", align=64, offset_factor=off, scope="warp")
        B = T.match_buffer(b, (32, 8), "bfloat16", align=64, offset_factor=off, scope="warp")
        C = T.match_buffer(c, (32, 8), "float32", align=64, offset_factor=16, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:32, 0:8], A[0:32, 0:8], B[0:32, 0:8])
            T.writes(C[0:32, 0:8])
            for i, j, k in T.grid(16, 16, 16):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    ar, ac = T.meta_var(swap(vi, vk, a_transposed))
                    br, bc = T.meta_var(swap(vk, vj, b_transposed))
                    tc, lc = T.meta_var(index_map(vi, vj))
                    ta, la = T.meta_var(index_map(ar, ac))
                    tb, lb = T.meta_var(index_map(br, bc))
                    T.reads(C[tc, lc], A[ta, la], B[tb, lb])
                    T.writes(C[tc, lc])
                    C[tc, lc] += T.Cast("float32", A[ta, la]) * T.Cast("float32", B[tb, lb])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (32, 8), "bfloat16", align=64, offset_factor=off, scope="warp")
        B = T.match_buffer(b, (32, 8), "bfloat16", align=64, offset_factor=off, scope="warp")
        C = T.match_buffer(c, (32, 8), "float32", align=64, offset_factor=16, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:32, 0:8], A[0:32, 0:8], B[0:32, 0:8])
            T.writes(C[0:32, 0:8])
            for tx in T.thread_binding(0, 32, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.mma(
                    "m16n8k16", "row", "col", "bf16", "bf16", "fp32",
                    A.data, A.elem_offset + tx * 8, B.data, B.elem_offset + tx * 8,
                    C.data, C.elem_offset + tx * 8, False, dtype="float32"))
                T.evaluate(T.ptx_legacy.mma(
                    "m16n8k16", "row", "col", "bf16", "bf16", "fp32",
                    A.data, A.elem_offset + tx * 8, B.data, B.elem_offset + tx * 8 + 4,
                    C.data, C.elem_offset + tx * 8 + 4, False, dtype="float32"))

    return desc, impl
