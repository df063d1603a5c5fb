"""A workload's kernel arguments kept on the device while its configs are measured, and the
output checked there.

Uploading the inputs and a NaN-poisoned output for every config, and copying the whole output
back to check it, took a GPU tuner most of its time on large outputs: 0.75-1.2 s a config for
batch_matmul 24x16384x512x64 f32 (805 MB out), dense 8192^3 f16 and attention bmm
256x1024x1024x128 f16 on an H100, where the kernel and its timing took some 0.05 s. So
``DeviceArgs`` uploads the inputs once per workload, resets the output before each run from a
poisoned copy on the device (a device-to-device copy), and on CUDA, where the output is checked
at sampled positions (``OutputCheck``), inspects it with a small kernel of its own: the NaN
count of the whole output (every element was written) and the values at the sample, which are
all that comes back to the host.

A kernel that writes outside its output could spoil what is kept for the next config: a wrong
output measured on kept buffers whose inputs no longer hold their values is measured again on
fresh ones (``run_checked``), and the poisoned copy is checked after every right output.
"""
from __future__ import annotations

import functools
import logging
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..host_memory import host_tensor
from ..result import error_line

logger = logging.getLogger("tvm_ext")

#: Threads of the NaN count (each scans size / threads elements, 8 loads in flight).
_SCAN_THREADS = 1 << 20
_UNROLL = 8


@functools.lru_cache(maxsize=1)
def poison(shape: Tuple[int, ...], dtype: str) -> np.ndarray:
    """The output's contents before a run (NaN, or -7 for integers; read-only, made once per
    workload: 100 MB of it took a tuner 16 ms a config)."""
    from .check import np_dtype  # noqa: PLC0415
    fill = np.nan if dtype.startswith(("float", "bf")) else -7
    arr = np.full(shape, fill, dtype=np_dtype(dtype))
    arr.flags.writeable = False
    return arr


def inspect_func(shape: Sequence[int], dtype: str, samples: int, *, nan: bool = True):
    """A TE module ``main(out, idx, got, unwritten)``: ``got[s] = out.flat[idx[s]]`` and, when
    ``nan``, ``unwritten[t]`` = the NaNs among ``out.flat[t + j * threads]``. Unscheduled
    (``schedule_inspect`` binds it to a GPU)."""
    from tvm import te, tirx  # noqa: PLC0415
    shape = [int(d) for d in shape]
    size = math.prod(shape)
    out = te.placeholder(shape, dtype, name="out")
    idx = te.placeholder((samples,), "int64", name="idx")

    def at(flat):
        coords = []
        for d in reversed(shape):
            coords.append(flat % d)
            flat = flat // d
        return out[tuple(reversed(coords))]

    got = te.compute((samples,), lambda s: at(idx[s]), name="got")
    tensors = [out, idx, got]
    if nan:
        threads = min(size, _SCAN_THREADS)
        per = -(-size // threads)
        j = te.reduce_axis((0, per), name="j")

        def count(t):
            flat = t.astype("int64") + j.astype("int64") * threads
            value = at(flat).astype("float32")
            return te.sum(tirx.if_then_else(flat < size, tirx.isnan(value).astype("int32"), 0),
                          axis=j)

        tensors.append(te.compute((threads,), count, name="unwritten"))
    return te.create_prim_func(tensors)


def schedule_inspect(func):
    """``inspect_func``'s kernels bound to 256-thread blocks; the NaN scan unrolled by 8, its
    count in a register."""
    import tvm  # noqa: PLC0415
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    for name in ("got", "unwritten"):
        try:
            block = sch.get_sblock(name)
        except Exception:  # noqa: BLE001  (no NaN scan for integer outputs)
            continue
        loops = sch.get_loops(block)
        bx, tx = sch.split(loops[0], factors=[None, 256])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        if len(loops) > 1:  # the count kept in a register, stored once
            _, ji = sch.split(loops[1], factors=[None, _UNROLL])
            sch.unroll(ji)
            sch.reverse_compute_at(sch.cache_write(block, 0, "local"), tx)
    return sch.mod


@functools.lru_cache(maxsize=4)
def _inspector(shape, dtype: str, samples: int, nan: bool, arch: str):
    """The inspection kernel, built and loaded (the device code compiled now, as a measured
    library is by the builder: a runner prepares it before it takes the device's lock)."""
    import os  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    import tvm  # noqa: PLC0415

    from ..codegen import compile_module  # noqa: PLC0415
    ex = compile_module(schedule_inspect(inspect_func(shape, dtype, samples, nan=nan)),
                        tvm.target.Target({"kind": "cuda", "arch": arch}))
    with tempfile.TemporaryDirectory(prefix="tvm_ext_inspect_") as tmp:
        path = os.path.join(tmp, "inspect.so")
        ex.export_library(path)
        return tvm.runtime.load_module(path)


def inspector_for(wl, check, target):
    """The inspection kernel of ``wl``'s output under ``check`` on a CUDA ``target``, or None
    (another target, or an output compared whole)."""
    if target is None or target.kind.name != "cuda" or check is None or check.idx is None:
        return None
    floating = not wl.final_dtype.startswith(("int", "uint"))
    return _inspector(tuple(int(d) for d in wl.out_shape), wl.final_dtype, len(check.idx[0]),
                      floating, str(target.attrs["arch"]))


class DeviceArgs:
    """A workload's kernel arguments on ``dev``: ``args`` (inputs from ``inputs``, the output
    last), ``reset()`` before a run, ``problem()`` after it (None, or what is wrong with the
    output, by ``check``). ``target``: a CUDA target to build the inspecting kernel for (None:
    the output is copied back to be checked); ``free_bytes``: device memory left for a
    poisoned copy of the output (None: the host's poison is copied at each reset)."""

    def __init__(self, wl, dev, inputs: List[np.ndarray], check, *, target=None,
                 free_bytes: Optional[int] = None):
        import tvm  # noqa: PLC0415
        self.wl, self.dev, self.check = wl, dev, check
        self._poison_host = poison(tuple(int(d) for d in wl.out_shape), wl.final_dtype)
        self.args = [host_tensor(x, dev) for x in inputs]  # a CPU's on huge pages
        self.args.append(host_tensor(self._poison_host, dev))
        self._fresh = True
        # A poisoned copy on the device where it fits in ``free_bytes`` (else each reset
        # copies the host's poison).
        fits = free_bytes is not None and 2 * self._poison_host.nbytes < free_bytes
        self._poison = None
        if fits:  # copied on the device from the output, not uploaded twice
            self._poison = tvm.runtime.empty(self._poison_host.shape, wl.final_dtype, dev)
            self._poison.copyfrom(self.args[-1])
        self._inspect = None
        if check is not None and target is not None:
            try:
                self._inspect = inspector_for(wl, check, target)
            except Exception as err:  # noqa: BLE001  (no nvcc here, ...: check on the host)
                logger.debug("tvm_ext: the output is checked on the host: no inspection "
                             "kernel (%s)", error_line(err, 200))
        if self._inspect is not None:
            floating = not wl.final_dtype.startswith(("int", "uint"))
            flat = np.ravel_multi_index(check.idx, self._poison_host.shape).astype("int64")
            self._idx = tvm.runtime.tensor(flat, dev)
            self._got = tvm.runtime.empty((len(flat),), wl.final_dtype, dev)
            self._unwritten = (tvm.runtime.empty((min(self._poison_host.size, _SCAN_THREADS),),
                                                 "int32", dev) if floating else None)

    @property
    def out(self):
        return self.args[-1]

    def reset(self) -> None:
        """The output back to its poison (made poisoned: the first reset copies nothing, so an
        RPC runner's per-config arguments upload it once)."""
        if self._fresh:
            self._fresh = False
            return
        self.out.copyfrom(self._poison if self._poison is not None else self._poison_host)

    def problem(self) -> Optional[str]:
        """None if the output is right, else what is wrong (one line)."""
        if self._inspect is None:
            return self.check(self.out.numpy())
        if self._unwritten is None:
            self._inspect["main"](self.out, self._idx, self._got)
            return self.check.verdict(self._got.numpy(), 0)
        self._inspect["main"](self.out, self._idx, self._got, self._unwritten)
        problem = self.check.verdict(self._got.numpy(), int(self._unwritten.numpy().sum()))
        if problem is None and self._poison is not None:
            # A kernel that wrote past its output may have hit the poison kept beside it:
            # then unwritten elements of later kernels would not be NaN.
            self._inspect["main"](self._poison, self._idx, self._got, self._unwritten)
            if int(self._unwritten.numpy().sum()) != self._poison_host.size:
                return "the output's poison on the device was overwritten"
        return problem

    def intact(self, inputs: List[np.ndarray]) -> bool:
        """Whether the inputs on the device still hold ``inputs`` (byte for byte)."""
        return all(t.numpy().tobytes() == np.ascontiguousarray(x).tobytes()
                   for t, x in zip(self.args, inputs))
