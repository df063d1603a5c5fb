"""What a measurement worker imports before its first job (``Worker.warm``).

Started with a tuner's first batch on an H100 host, 16 builders and 4 runners had cost it
10-12 s of its builds and 8.6 s of its first loads, and the tensor-core intrinsics 16.7 s of
the first mma build: the measurer now starts them when it is made (``PoolMeasurer.warm``).
"""
from __future__ import annotations

from typing import Optional


def warm_in_worker(device_type: Optional[str] = None, device_id: Optional[int] = None,
                   intrinsics: bool = False) -> bool:
    """Import TVM and the modules that builds and runs use; ``intrinsics``: also register the
    CUDA tensor-core intrinsics (mma / wmma templates); for a CUDA runner (``device_id``)
    also create the device's context and import torch (graph timing)."""
    from .. import task  # noqa: F401,PLC0415  (TVM, templates, spaces, codegen)
    from . import check, device_args, timing  # noqa: F401,PLC0415
    if intrinsics:
        from ..ops.cuda_tensorcore import intrin  # noqa: PLC0415
        intrin.load_cuda()
    if device_type == "cuda" and device_id is not None:
        import tvm  # noqa: PLC0415
        if tvm.cuda(device_id).exist:
            timing._torch_cuda()
    return True
