"""CPU tensors on huge pages (``tvm_ext.host_memory``): a copy in a mapping of its own,
advised to huge pages (whether Linux grants them depends on its free memory, so the tests
read the advice), released with the tensor; TVM's allocation where it is not wanted."""
import sys

import numpy as np
import pytest
import tvm

from tvm_ext import host_memory as hm

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise: Linux only")


@linux
def test_large_tensor_is_a_copy_on_its_own_advised_huge_page_aligned_mapping():
    src = np.arange(3 << 20, dtype="float32")  # 12 MB
    t = hm.host_tensor(src)
    assert isinstance(t, tvm.runtime.Tensor) and t.shape == src.shape and t.dtype == "float32"
    assert t.data_ptr() % hm.HUGE_PAGE == 0
    np.testing.assert_array_equal(t.numpy(), src)
    src[0] = -1  # a copy, as tvm.runtime.tensor makes
    assert t.numpy()[0] == 0
    assert hm.mapping(t)["advised"] is True
    e = hm.host_empty((1024, 1024), "float32")
    assert e.shape == (1024, 1024) and e.data_ptr() % hm.HUGE_PAGE == 0
    assert hm.mapping(e)["advised"] is True


@linux
def test_mapping_is_released_with_the_tensor():
    t = hm.host_empty((4 << 20,), "float32")
    addr = t.data_ptr()
    del t
    import gc
    gc.collect()
    with open("/proc/self/maps") as f:
        spans = [[int(x, 16) for x in line.split()[0].split("-")] for line in f]
    assert not any(lo <= addr < hi for lo, hi in spans)


def test_small_tensors_other_devices_and_the_switch_keep_tvms_allocation(monkeypatch):
    made = []
    real = hm._huge_array
    monkeypatch.setattr(hm, "_huge_array", lambda *a: made.append(a) or real(*a))
    small = hm.host_tensor(np.ones((16, 16), "float32"))
    np.testing.assert_array_equal(small.numpy(), 1)
    assert made == []
    monkeypatch.setenv("TVM_EXT_HUGE_PAGES", "0")
    big = hm.host_tensor(np.ones((2048, 1024), "float32"))
    np.testing.assert_array_equal(big.numpy(), 1)
    assert hm.host_empty((2048, 1024), "float32").shape == (2048, 1024)
    assert made == []
    monkeypatch.delenv("TVM_EXT_HUGE_PAGES")
    if sys.platform.startswith("linux"):
        hm.host_empty((2048, 1024), "float32")
        assert len(made) == 1


@linux
def test_kernel_reads_and_writes_huge_page_tensors():
    from tvm_ext.dispatch import build
    from tvm_ext.target import host_cpu_target
    from tvm_ext.workload import Workload
    wl = Workload.create("dense", (4, 1024, 1024), layout="NT")
    k = build(wl, host_cpu_target())
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (4, 1024)).astype("float32")
    w = rng.uniform(-1, 1, (1024, 1024)).astype("float32")
    out = hm.host_empty((4, 1024), "float32")
    wt = hm.host_tensor(w)
    assert hm.mapping(wt)["advised"] is True
    k(hm.host_tensor(a), wt, out)
    np.testing.assert_allclose(out.numpy(), a @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(k.run(a, w), a @ w.T, rtol=1e-4, atol=1e-4)


def test_describe_says_where_large_tensors_go(monkeypatch):
    monkeypatch.setenv("TVM_EXT_HUGE_PAGES", "0")
    assert hm.describe() in ("TVM's allocation (TVM_EXT_HUGE_PAGES=0)",
                             "TVM's allocation (not Linux)")
    monkeypatch.delenv("TVM_EXT_HUGE_PAGES")
    if sys.platform.startswith("linux"):
        assert hm.describe().startswith("huge pages from 2 MB (transparent huge pages: ")
