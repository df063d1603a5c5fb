"""Loop-structure features read from a scheduled TensorIR PrimFunc.

Knob values say what was asked for; the scheduled loop nest says what the kernel does: how much
runs in parallel, how wide the vectors are, how much is unrolled, how many threads and blocks a
CUDA kernel launches and how much shared and local memory it holds. Values that span orders of
magnitude are log2-scaled, so tree models split them evenly.
"""
from __future__ import annotations

import math
from typing import Dict

import numpy as np

FEATURE_NAMES = ("loops", "log_parallel", "vector_lanes", "log_unrolled", "log_serial_inner",
                 "threadIdx.x", "threadIdx.y", "log_blocks", "log_shared_bytes",
                 "log_local_bytes", "log_global_alloc_bytes", "blocks_in_body", "max_depth")


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def loop_features(func) -> np.ndarray:
    """Feature vector (FEATURE_NAMES order) of a scheduled PrimFunc (or IRModule's main)."""
    from tvm import s_tir  # noqa: PLC0415
    from tvm.tirx import stmt as S  # noqa: PLC0415
    if hasattr(func, "functions"):
        func = func["main"]
    acc: Dict[str, float] = {"loops": 0, "parallel": 1, "vector": 1, "unrolled": 1,
                             "serial_inner": 1, "tx": 1, "ty": 1, "blocks": 1, "shared": 0,
                             "local": 0, "global": 0, "sblocks": 0, "depth": 0}

    def buf_bytes(buf):
        n = 1
        for d in buf.shape:
            n *= int(d) if hasattr(d, "value") or isinstance(d, int) else 1
        return n * max(1, buf.dtype.bits // 8) if hasattr(buf.dtype, "bits") else n * 4

    def alloc(buf):
        scope = buf.scope() if callable(getattr(buf, "scope", None)) else "global"
        key = "shared" if scope.startswith("shared") else "local" if (
            scope.startswith("local") or scope.startswith("wmma") or scope == "warp") else "global"
        acc[key] += buf_bytes(buf)

    def visit(node, depth):
        if node is None:
            return
        if isinstance(node, S.For):
            acc["loops"] += 1
            acc["depth"] = max(acc["depth"], depth + 1)
            ext = int(node.extent) if hasattr(node.extent, "value") else 1
            kind = node.kind
            if kind == S.ForKind.PARALLEL:
                acc["parallel"] *= ext
            elif kind == S.ForKind.VECTORIZED:
                acc["vector"] = max(acc["vector"], ext)
            elif kind == S.ForKind.UNROLLED:
                acc["unrolled"] *= ext
            elif kind == S.ForKind.THREAD_BINDING:
                tag = str(node.thread_binding.thread_tag) if node.thread_binding else ""
                if tag == "threadIdx.x":
                    acc["tx"] = max(acc["tx"], ext)
                elif tag == "threadIdx.y":
                    acc["ty"] = max(acc["ty"], ext)
                elif tag.startswith("blockIdx"):
                    acc["blocks"] *= ext
            elif not isinstance(node.body, S.For):
                acc["serial_inner"] = max(acc["serial_inner"], ext)
            visit(node.body, depth + 1)
        elif isinstance(node, s_tir.stmt.SBlockRealize):
            visit(node.block, depth)
        elif isinstance(node, s_tir.stmt.SBlock):
            acc["sblocks"] += 1
            for buf in node.alloc_buffers:
                alloc(buf)
            visit(node.init, depth)
            visit(node.body, depth)
        elif isinstance(node, S.SeqStmt):
            for s in node.seq:
                visit(s, depth)
        elif isinstance(node, S.IfThenElse):
            visit(node.then_case, depth)
            visit(node.else_case, depth)
        elif hasattr(node, "body"):
            visit(node.body, depth)

    visit(func.body, 0)
    return np.asarray([acc["loops"], _log2(acc["parallel"]), acc["vector"],
                       _log2(acc["unrolled"]), _log2(acc["serial_inner"]), acc["tx"], acc["ty"],
                       _log2(acc["blocks"]), _log2(acc["shared"]), _log2(acc["local"]),
                       _log2(acc["global"]), acc["sblocks"], acc["depth"]], dtype=np.float32)


def task_loop_features(task):
    """``index -> loop_features`` of a task's scheduled config: what XGB's ``loop_features``
    takes (the task is duck-typed: the tuner package sits above it)."""
    return lambda index: loop_features(task.instantiate(task.space.get(index)))
