"""CPU tensors on transparent huge pages, as numpy's own large arrays are.

numpy asks the kernel for huge pages (``madvise(MADV_HUGEPAGE)``) on every array of 4 MB or
more, while TVM's CPU allocator (``posix_memalign``) does not: on a Linux host whose
transparent huge pages are in "madvise" mode (the default of Debian and Ubuntu), numpy's
matmul read its operands through 2 MB pages and our kernels through 4 KB ones, with a TLB miss
every 4 KB and the hardware prefetchers stopped at every page's end. The CPU bench's gemv row
(a 67 MB weight read once) ran a few percent faster on huge pages, in most runs
(docs/BENCHMARKS.md).

``host_tensor`` and ``host_empty`` give a CPU tensor of at least ``MIN_BYTES`` its own 2 MB
aligned memory, advised to huge pages before its first touch, and hand it to TVM without a copy
(DLPack; the mapping lives as long as the tensor). Smaller tensors, other devices, hosts
without ``madvise`` and ``TVM_EXT_HUGE_PAGES=0`` get TVM's own allocation, as before.
"""
from __future__ import annotations

import mmap
import os
import sys

import numpy as np

#: The huge page of x86-64 and of arm64 with 4 KB base pages.
HUGE_PAGE = 2 << 20
#: Tensors below this many bytes keep TVM's allocation (at most one huge page to gain).
MIN_BYTES = HUGE_PAGE


def enabled() -> bool:
    """Whether large CPU tensors go on huge pages: Linux, and ``TVM_EXT_HUGE_PAGES`` not 0."""
    return sys.platform.startswith("linux") and os.environ.get("TVM_EXT_HUGE_PAGES", "1") != "0"


def describe() -> str:
    """Where large CPU tensors go, for a bench's header: huge pages and the host's transparent
    huge page mode ("never": the advice does nothing), or TVM's allocation."""
    if not sys.platform.startswith("linux"):
        return "TVM's allocation (not Linux)"
    if not enabled():
        return "TVM's allocation (TVM_EXT_HUGE_PAGES=0)"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        mode = "unknown"
    return f"huge pages from {MIN_BYTES >> 20} MB (transparent huge pages: {mode})"


def _huge_array(shape, dtype) -> np.ndarray | None:
    """An uninitialised numpy array of ``shape`` in an anonymous mapping of its own (never the
    heap, whose reused chunks carry whatever advice numpy gave them before), its data starting
    at a huge page and advised to huge pages before any page is touched; None where the host
    cannot advise it. The array keeps the mapping alive; the mapping is unmapped with it."""
    nbytes = size_bytes(shape, dtype)
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    # private: a shared anonymous mapping is shmem, whose huge pages are another setting
    mm = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(mm, np.uint8)
    start = -raw.ctypes.data % HUGE_PAGE
    try:
        mm.madvise(mmap.MADV_HUGEPAGE, start, min(nbytes + HUGE_PAGE - start,
                                                   -(-nbytes // HUGE_PAGE) * HUGE_PAGE))
    except OSError:  # THP compiled out: TVM's own memory does as well
        return None
    return raw[start:start + nbytes].view(np.dtype(dtype)).reshape(shape)


def host_empty(shape, dtype, dev=None):
    """An uninitialised tensor of ``shape`` and ``dtype`` on ``dev`` (the CPU by default), on
    huge pages where ``host_tensor`` would put it."""
    import tvm  # noqa: PLC0415
    dev = dev if dev is not None else tvm.cpu(0)
    shape = tuple(int(d) for d in shape)
    arr = _wanted_array(shape, dtype, dev)
    return tvm.runtime.empty(shape, dtype, dev) if arr is None else tvm.runtime.from_dlpack(arr)


def host_tensor(array, dev=None):
    """``tvm.runtime.tensor(array, dev)``; a CPU tensor of at least ``MIN_BYTES`` on huge
    pages (a copy of ``array`` in memory of its own, as ``tvm.runtime.tensor`` makes)."""
    import tvm  # noqa: PLC0415
    dev = dev if dev is not None else tvm.cpu(0)
    array = np.asarray(array)
    arr = _wanted_array(array.shape, array.dtype, dev)
    if arr is None:
        return tvm.runtime.tensor(array, dev)
    arr[...] = array  # the first touch: the pages are made huge here
    return tvm.runtime.from_dlpack(arr)


def mapping(tensor) -> dict:
    """What Linux says (``/proc/self/smaps``) of the mapping that holds the middle of
    ``tensor``'s data (a tvm tensor or a numpy array): ``advised``, whether it is advised to
    huge pages (its ``hg`` flag: mappings of other flags are never merged with it), and
    ``huge_bytes``, the bytes of huge pages the whole mapping has now. Empty where smaps
    cannot be read."""
    # its middle: numpy advises from the page after an array's first byte
    if hasattr(tensor, "data_ptr"):  # a tvm tensor
        addr = tensor.data_ptr() + size_bytes(tensor.shape, tensor.dtype) // 2
    else:
        addr = tensor.ctypes.data + tensor.nbytes // 2
    out, inside = {}, False
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split(maxsplit=1)[0] if line.strip() else ""
                if "-" in head and not head.endswith(":"):
                    if inside:
                        break
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = lo <= addr < hi
                elif inside and head == "AnonHugePages:":
                    out["huge_bytes"] = int(line.split()[1]) * 1024
                elif inside and head == "VmFlags:":
                    out["advised"] = "hg" in line.split()[1:]
    except OSError:
        return {}
    return out


def size_bytes(shape, dtype) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype``."""
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _wanted_array(shape, dtype, dev) -> np.ndarray | None:
    """``_huge_array`` where a tensor of ``shape`` and ``dtype`` on ``dev`` goes on huge pages
    (``_wanted``), else None: TVM's own allocation."""
    return _huge_array(shape, dtype) if _wanted(shape, dtype, dev) else None


def _wanted(shape, dtype, dev) -> bool:
    return large_on_cpu(shape, dtype, dev) and enabled()


def large_on_cpu(shape, dtype, dev) -> bool:
    """Whether a tensor of ``shape`` and ``dtype`` on ``dev`` is a CPU tensor of at least
    ``MIN_BYTES`` (False for a dtype numpy does not know: TVM's allocation)."""
    import tvm  # noqa: PLC0415
    try:
        nbytes = size_bytes(shape, dtype)
    except TypeError:
        return False
    return dev.dlpack_device_type() == tvm.cpu(0).dlpack_device_type() and nbytes >= MIN_BYTES
