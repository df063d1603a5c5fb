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


def register_once(name: str, desc, impl):
    """Register an intrinsic of our own unless a worker already did."""
    from tvm.s_tir import TensorIntrin  # noqa: PLC0415
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, desc, impl)
    return name
