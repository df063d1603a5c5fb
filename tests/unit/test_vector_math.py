"""exp, tanh, erf (and sigmoid, through exp) of float32 lowered as vector code in our CPU
pipeline (``vector_math``): as accurate as the module says against float64 over wide ranges,
infinities, subnormals and NaN as libm gives them, no libm call left in the kernel; TVM's own
pipeline in the same process keeps its rules."""
import math
import re

import numpy as np
import pytest
import tvm
from tvm import s_tir, te, tirx

from tvm_ext.codegen import compile_module
from tvm_ext.target import host_cpu_target

CPU = host_cpu_target()
N = 1 << 16


def _kernel(name, lanes, pipeline=None):
    """B = name(A) over N float32, its loop vectorised by ``lanes`` (1: scalar)."""
    A = te.placeholder((N,), "float32", name="A")
    B = te.compute((N,), lambda i: getattr(tirx, name)(A[i]), name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    if lanes > 1:
        (i,) = sch.get_loops(sch.get_sblock("B"))
        sch.vectorize(sch.split(i, [None, lanes])[1])
    if pipeline is None:
        return compile_module(sch.mod, CPU)
    return tvm.compile(sch.mod, target=CPU, tir_pipeline=pipeline)


def _run(f, x):
    out = tvm.runtime.empty((N,), "float32", tvm.cpu())
    f["main"](tvm.runtime.tensor(x), out)
    return out.numpy()


def _inputs(lo, hi, extra=()):
    x = np.linspace(lo, hi, N - len(extra), dtype=np.float64).astype("float32")
    return np.concatenate([x, np.array(extra, "float32")])


def _erf(x):
    return np.vectorize(math.erf)(x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# (op, range, reference in float64, bound on |got - want| / max(|want|, floor))
CASES = [("exp", (-110.0, 90.0), np.exp, 2e-7, 1e-37),
         ("tanh", (-20.0, 20.0), np.tanh, 5e-7, 1.0),
         ("erf", (-6.0, 6.0), _erf, 5e-7, 1.0),
         ("sigmoid", (-100.0, 100.0), _sigmoid, 5e-7, 1e-30)]


@pytest.mark.parametrize("lanes", [16, 1])
@pytest.mark.parametrize("name,span,ref,bound,floor", CASES)
def test_vector_math_accuracy(name, span, ref, bound, floor, lanes):
    f = _kernel(name, lanes)
    called = set(re.findall(r"call [^@]*@([\w.]+)", f.mod.inspect_source("ll")))
    assert not called & {"expf", "tanhf", "erff", "exp", "llvm.exp.f32"} and \
        not any(c.startswith("llvm.exp.") for c in called)  # no libm left
    x = _inputs(*span, extra=(0.0, -0.0, 1e-30, -1e-30, 3e-4, 1e-6))
    got = _run(f, x).astype(np.float64)
    want = ref(x.astype(np.float64))
    with np.errstate(over="ignore"):
        over = ~np.isfinite(want.astype("float32"))  # beyond float32: inf, as libm's
    np.testing.assert_array_equal(got[over], np.inf)
    got, want, x = got[~over], want[~over], x[~over]
    err = np.abs(got - want) / np.maximum(np.abs(want), floor)
    assert err.max() <= bound, (name, x[err.argmax()], got[err.argmax()], want[err.argmax()])
    special = np.array([np.nan, np.inf, -np.inf] + [0.0] * (N - 3), "float32")
    s = _run(f, special)
    assert np.isnan(s[0])
    np.testing.assert_array_equal(s[1:3], ref(special[1:3].astype(np.float64)))


def test_exp_overflows_and_underflows_as_libm():
    """exp(89) and beyond is inf, as float32; into the subnormals it keeps its value."""
    f = _kernel("exp", 16)
    x = _inputs(-103.0, -87.0, extra=(88.7, 88.73, 89.0, 100.0, -104.0, -200.0))
    got = _run(f, x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype("float32")
    np.testing.assert_array_equal(got[-6:-2], want[-6:-2])  # 88.7 finite; inf after
    assert np.all(got[-2:] <= 1e-44)
    tiny = want[:-6] > 0  # where float32 holds exp(x) at all: within a subnormal's spacing
    assert np.all(np.abs(got[:-6][tiny] - want[:-6][tiny]) <= 2e-7 * want[:-6][tiny] + 3e-45)


def test_tvms_own_pipeline_keeps_its_rules():
    """The same kernel built by TVM's default pipeline in this process, after ours has
    registered its rules, still calls llvm.exp (our rules lower only inside ours)."""
    assert "llvm.exp" not in _kernel("exp", 16).mod.inspect_source("ll")
    f = _kernel("exp", 16, pipeline="default")
    assert "llvm.exp" in f.mod.inspect_source("ll")
    x = _inputs(-10.0, 10.0)
    np.testing.assert_allclose(_run(f, x), np.exp(x), rtol=1e-6)
