"""A test-only template whose knob ``fault`` injects one failure per config, for the
measurement tests. Imported by the tests and, by module name, in the worker processes."""
import os
import time

from tvm_ext.strategy import register_template, registered
from tvm_ext.template import ScheduleTemplate

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTS = ["none", "build_raise", "build_hang", "run_abort", "run_hang", "wrong"]
SPACE = {"template": "faulty.x86", "knobs": [
    {"name": "fault", "kind": "knob", "candidates": FAULTS}]}


def _compute(wl, cfg):
    import tvm
    from tvm import te
    fault = cfg["fault"].val
    A = te.placeholder(wl.a_shape, wl.dtype, name="A")
    B = te.placeholder(wl.b_shape, wl.dtype, name="B")
    k = te.reduce_axis((0, wl.K), name="k")
    extra = 0.0
    if fault == "run_abort":  # the kernel calls abort(): its process dies
        extra = tvm.tirx.call_extern("int32", "abort").astype(wl.out_dtype)
    elif fault == "run_hang":  # the kernel sleeps for an hour
        extra = tvm.tirx.call_extern("int32", "sleep", 3600).astype(wl.out_dtype)
    elif fault == "wrong":
        extra = 1.0
    S = te.compute(wl.out_shape, lambda b, i, j: te.sum(
        A[b, i, k].astype(wl.out_dtype) * B[b, j, k].astype(wl.out_dtype), axis=k), name="S")
    C = te.compute(wl.out_shape, lambda b, i, j: S[b, i, j] + extra, name="C")
    return [A, B, C]


def _schedule(sch, cfg, wl, facts):
    fault = cfg["fault"].val
    if fault == "build_raise":
        raise RuntimeError("injected schedule failure")
    if fault == "build_hang":
        time.sleep(3600)


def _check(wl, facts):
    """Only the fault tests' own tiny workloads (batch 1, sizes up to 32): registered for the
    whole test process, it must not join the templates of another test's model."""
    if wl.batch == 1 and max(wl.M, wl.N, wl.K) <= 32:
        return None
    return "faulty.x86 serves only the fault tests' workloads"


if registered("faulty.x86") is None:
    register_template(ScheduleTemplate(
        name="faulty.x86", op="batch_matmul", target_kind="llvm", compute=_compute,
        schedule=_schedule, fallback=lambda space, wl, facts: {"fault": "none"},
        check=_check, dtypes=("float32",), layouts=("NT",), priority=-100,
        source_paths=(HERE,)))
