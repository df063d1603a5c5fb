"""The numerics oracle: seeded random inputs for a workload, its exact result, and the check
that a kernel's output matches it within the workload's tolerance.

Every measurer (in-process, pool runner, RPC) and the bench check kernels through this module, so
a kernel is "right" by one definition everywhere.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..workload import Workload


def np_dtype(dtype: str):
    """The numpy dtype of a TVM dtype name (bfloat16 through ml_dtypes, which tvm-ffi ships)."""
    if dtype == "bfloat16":
        import ml_dtypes  # noqa: PLC0415
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def random_inputs(wl: Workload, rng: np.random.Generator) -> List[np.ndarray]:
    """A and B for ``wl``: small integers for integer dtypes (products stay exact in int32),
    uniform in [-1, 1) for floats."""
    arrays = []
    for shape in (wl.a_shape, wl.b_shape):
        if wl.dtype.startswith("int") or wl.dtype.startswith("uint"):
            lo = 0 if wl.dtype.startswith("u") else -4
            arrays.append(rng.integers(lo, 4, size=shape).astype(wl.dtype))
        else:
            arrays.append(rng.uniform(-1, 1, size=shape).astype(np_dtype(wl.dtype)))
    return arrays


def reference_matmul(wl: Workload, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact result in float64 (int64 for integers)."""
    acc = np.int64 if wl.dtype.startswith(("int", "uint")) else np.float64
    a = a.astype(acc)
    b = b.astype(acc)
    a_mk = np.swapaxes(a, -1, -2) if wl.transpose_a else a
    b_kn = np.swapaxes(b, -1, -2) if wl.transpose_b else b
    return np.matmul(a_mk, b_kn)


def tolerance(wl: Workload):
    """(rtol, atol) for comparing a kernel with the float64 reference."""
    if wl.dtype.startswith(("int", "uint")):
        return 0.0, 0.0
    if wl.dtype in ("float16", "bfloat16") or wl.out_dtype in ("float16", "bfloat16"):
        return 2e-2, 2e-2 * max(1.0, np.sqrt(wl.K) / 4)
    return 1e-4, 1e-4 * max(1.0, np.sqrt(wl.K) / 4)


class OutputCheck:
    """Compares a kernel's output with float64 numpy (int64 for integers).

    Outputs of up to ``max_full`` elements are compared whole. Larger ones (a 24x16384x512
    batch_matmul writes 200M values) are compared at a seeded random sample of positions, whose
    reference costs K multiply-adds each; the output is NaN-poisoned before the run, so the
    whole-tensor NaN test still proves every element was written.
    """

    def __init__(self, wl: Workload, a: np.ndarray, b: np.ndarray, *, seed: int = 0,
                 max_full: int = 1 << 24, sample_work: int = 1 << 27):
        self.wl = wl
        self.rtol, self.atol = tolerance(wl)
        size = int(np.prod(wl.out_shape))
        if size <= max_full:
            self.idx, self.ref = None, reference_matmul(wl, a, b)
            return
        rng = np.random.default_rng(seed + 1)
        n = int(min(size, max(4096, min(1 << 20, sample_work // wl.K))))
        self.idx = np.unravel_index(rng.choice(size, size=n, replace=False), wl.out_shape)
        acc = np.int64 if wl.dtype.startswith(("int", "uint")) else np.float64
        a_mk = np.swapaxes(a, -1, -2) if wl.transpose_a else a
        b_nk = b if wl.transpose_b else np.swapaxes(b, -1, -2)
        if wl.op == "dense":
            rows, cols = a_mk[self.idx[0]], b_nk[self.idx[1]]
        else:
            rows = a_mk[self.idx[0], self.idx[1]]
            cols = b_nk[self.idx[0], self.idx[2]]
        self.ref = np.einsum("nk,nk->n", rows.astype(acc), cols.astype(acc))

    def __call__(self, out: np.ndarray) -> Optional[str]:
        """None if the output is right, else what is wrong (one line)."""
        floating = not self.wl.out_dtype.startswith(("int", "uint"))
        if self.idx is not None and floating:
            unwritten = int(np.isnan(out).sum())
            if unwritten:
                return f"{unwritten} of {out.size} elements not written (still NaN)"
        got = (out if self.idx is None else out[self.idx]).astype(self.ref.dtype)
        ok = np.isclose(got, self.ref, rtol=self.rtol, atol=self.atol)
        if ok.all():
            return None
        where = "" if self.idx is None else " sampled"
        err = np.nanmax(np.abs(got - self.ref)) if np.isfinite(got).any() else float("nan")
        return f"{int((~ok).sum())} of {ok.size}{where} elements differ from numpy " \
               f"(max abs error {err:.3g})"


def seeded_data(wl: Workload, seed: int):
    """(A, B, OutputCheck) drawn from ``seed``: every measurer checks the same inputs."""
    a, b = random_inputs(wl, np.random.default_rng(seed))
    return a, b, OutputCheck(wl, a, b, seed=seed)
