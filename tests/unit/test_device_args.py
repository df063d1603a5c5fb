"""Kernel arguments kept on the device between configs (measure/device_args.py): the output's
inspection kernel, its reset to the poison before every run, and fresh buffers after a wrong
output (a kernel that wrote over the kept inputs spoils nothing measured after it)."""
from types import SimpleNamespace

import numpy as np
import pytest
import tvm

from tvm_ext.measure import RunOptions
from tvm_ext.measure.check import reference_matmul
from tvm_ext.measure.device_args import inspect_func, schedule_inspect
from tvm_ext.measure.runner import kept_args, run_checked
from tvm_ext.task import Task
from tvm_ext.workload import Workload


@pytest.mark.parametrize("shape,dtype", [((3, 37, 41), "float32"), ((41, 29), "float16"),
                                         ((5, 7, 3), "int8")])
def test_inspection_counts_nans_and_gathers_the_sample(shape, dtype):
    """Run unscheduled on the CPU (the CUDA schedule only binds its loops): the NaN count of
    the whole output, sizes that the scan's threads do not divide included, and the values at
    flat indices, in their order."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, size=shape).astype(dtype)
    size = x.size
    floating = dtype.startswith("float")
    if floating:
        for flat in (0, size // 3, size - 1):
            x.flat[flat] = np.nan
    idx = rng.choice(size, size=16, replace=False).astype("int64")
    fn = tvm.compile(tvm.IRModule({"main": inspect_func(shape, dtype, 16, nan=floating)}),
                     target="llvm")
    dev = tvm.cpu()
    got = tvm.runtime.empty((16,), dtype, dev)
    extra = [tvm.runtime.empty((size,), "int32", dev)] if floating else []
    fn["main"](tvm.runtime.tensor(x, dev), tvm.runtime.tensor(idx, dev), got, *extra)
    np.testing.assert_array_equal(got.numpy(), x.flat[idx])
    if floating:
        assert int(extra[0].numpy().sum()) == 3


def test_inspection_kernel_compiles_for_sm90_under_nvcc():
    """The CUDA inspection (its threads bound, the count in a register) passes nvcc."""
    import shutil
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    from cuda_helpers import nvcc_cubin
    from tvm_ext.codegen import compile_module
    from tvm_ext.target import cuda_target
    target = cuda_target("sm_90")
    mod = schedule_inspect(inspect_func((24, 2048, 512), "float16", 4096))
    src = compile_module(mod, target).mod.imports[0].inspect_source()
    assert "unwritten_local" in src and "blockIdx.x" in src
    assert nvcc_cubin(src, target, "sm_90")


class _Module:
    """A stand-in for a built kernel: ``main`` writes the product (or nothing, or a wrong
    one) and may then spoil its A; timing returns a fixed cost."""

    def __init__(self, wl, write="right", spoil=False):
        self.wl, self.write, self.spoil = wl, write, spoil

    def __getitem__(self, name):
        return self.main

    def main(self, a, b, out):
        ref = reference_matmul(self.wl, a.numpy(), b.numpy()).astype(out.dtype)
        if self.write != "nothing":
            out.copyfrom(ref + (1 if self.write == "wrong" else 0))
        if self.spoil:
            a.copyfrom(np.zeros(a.shape, a.dtype))

    def time_evaluator(self, name, dev, **kwargs):
        return lambda *args: SimpleNamespace(results=[1e-3])


def test_kept_arguments_are_reset_and_replaced_after_a_wrong_output():
    wl = Workload.create("batch_matmul", (2, 8, 8, 4))
    task = Task(wl, "llvm")
    dev = tvm.cpu()
    opts = RunOptions(number=1, repeat=1, timing="evaluator")
    assert run_checked(task, _Module(wl), dev, opts)[0] == "ok"
    kept = kept_args(task, dev, opts.seed)
    assert run_checked(task, _Module(wl), dev, opts)[0] == "ok"
    assert kept_args(task, dev, opts.seed) is kept  # uploaded once per workload
    # The output is poisoned again before each run: writing nothing is caught.
    kind, why = run_checked(task, _Module(wl, write="nothing"), dev, opts)
    assert kind == "wrong" and "differ" in why
    assert kept_args(task, dev, opts.seed) is not kept  # no buffers kept after a wrong output
    # A kernel that spoils the kept A after writing a right output passes; the next right
    # kernel first sees the spoiled A, is checked again on fresh buffers, and passes.
    assert run_checked(task, _Module(wl, spoil=True), dev, opts)[0] == "ok"
    assert run_checked(task, _Module(wl), dev, opts)[0] == "ok"
    assert run_checked(task, _Module(wl, write="wrong"), dev, opts)[0] == "wrong"
    other = Task(Workload.create("batch_matmul", (1, 8, 8, 4)), "llvm")
    assert kept_args(other, dev, opts.seed).wl == other.workload


def test_a_local_measurer_frees_the_kept_arguments_when_closed():
    from tvm_ext.measure import LocalMeasurer
    from tvm_ext.measure import runner
    wl = Workload.create("batch_matmul", (1, 8, 8, 4))
    task = Task(wl, "llvm")
    m = LocalMeasurer(number=1, repeat=1)
    assert m.measure(task, [task.fallback_config()])[0].ok
    assert runner._kept
    m.close()
    assert not runner._kept
