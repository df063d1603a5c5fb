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

_NAME = "tvm.s_tir.tensor_intrin.cuda"
_LOCK = threading.Lock()


def load_cuda():
    """The module ``tvm.s_tir.tensor_intrin.cuda`` (its intrinsics registered)."""
    with _LOCK:
        mod = sys.modules.get(_NAME)
        if mod is not None:
            return mod
        import tvm.s_tir  # noqa: PLC0415
        if "tvm.s_tir.tensor_intrin" in sys.modules:  # package imported by someone else
            return importlib.import_module(_NAME)
        path = tvm.s_tir.__path__[0] + "/tensor_intrin/cuda.py"
        spec = importlib.util.spec_from_file_location(_NAME, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[_NAME]
            raise
        return mod


def register_once(name: str, make):
    """Register an intrinsic of our own, ``make() -> (desc, impl)``, unless this process
    already did. ``make`` runs only then: building the TVMScript of an intrinsic costs tens of
    milliseconds, and a tuner instantiates hundreds of configs for their features."""
    from tvm.s_tir import TensorIntrin  # noqa: PLC0415
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, *make())
    return name


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
