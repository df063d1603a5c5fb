"""OutputCheck: whole comparison for small outputs, NaN test + seeded sample for large ones."""
import numpy as np

from tvm_ext.workload import Workload
from tvm_ext.measure.check import reference_matmul, OutputCheck


def test_sampled_check_finds_unwritten_and_wrong_values():
    for wl in (Workload.create("batch_matmul", (3, 40, 24, 8), layout="TN"),
               Workload.create("dense", (40, 24, 8), layout="NN")):
        rng = np.random.default_rng(0)
        a = rng.standard_normal(wl.a_shape).astype("float32")
        b = rng.standard_normal(wl.b_shape).astype("float32")
        out = reference_matmul(wl, a, b).astype("float32")
        check = OutputCheck(wl, a, b, max_full=100)  # force the sampled mode
        assert check.idx is not None and check(out) is None
        unwritten = out.copy()
        unwritten.flat[7] = np.nan
        assert "not written" in check(unwritten)
        wrong = out + 1.0
        assert "differ from numpy" in check(wrong)
        assert OutputCheck(wl, a, b)(out) is None  # whole comparison


def test_verdict_on_inspected_values_agrees_with_the_whole_output():
    """What a device inspection brings back (the sampled values, the NaN count) gets the
    verdict the whole output gets."""
    wl = Workload.create("dense", (40, 24, 8), layout="NN")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(wl.a_shape).astype("float32")
    b = rng.standard_normal(wl.b_shape).astype("float32")
    out = reference_matmul(wl, a, b).astype("float32")
    check = OutputCheck(wl, a, b, max_full=100)
    assert check.verdict(out[check.idx], 0) is None
    assert check.verdict(out[check.idx], 3) == "3 of 960 elements not written (still NaN)"
    assert "differ from numpy" in check.verdict(out[check.idx] + 1.0, 0)


def test_fp8_inputs_are_exact_quarters_and_check_as_floats():
    """fp8 workloads (e4m3, e5m2): inputs are quarters in [-1, 1] (exact in both formats, so
    the f32 accumulation is exact) held as ml_dtypes arrays; the reference is float64 and the
    tolerance that of a 16-bit float GEMM."""
    import ml_dtypes

    from tvm_ext.measure.check import random_inputs, tolerance
    for dtype in ("float8_e4m3fn", "float8_e5m2"):
        wl = Workload.create("dense", (8, 16, 32), dtype, "float16", layout="NT")
        a, b = random_inputs(wl, np.random.default_rng(0))
        assert a.dtype == getattr(ml_dtypes, dtype) and a.shape == (8, 32) and b.shape == (16, 32)
        q = a.astype(np.float64) * 4
        assert np.array_equal(q, np.round(q)) and np.abs(q).max() <= 4 and len(np.unique(q)) > 4
        ref = reference_matmul(wl, a, b)
        assert ref.shape == (8, 16)
        assert np.allclose(ref, a.astype(np.float64) @ b.astype(np.float64).T)
        assert tolerance(wl)[0] == 2e-2
