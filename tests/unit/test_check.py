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
