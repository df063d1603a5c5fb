"""The numerics oracle: seeded random inputs for a workload, its exact result, and the check
that a kernel's output matches it within the workload's tolerance.

Every measurer (in-process, pool runner, RPC) and the bench check kernels through this module, so
a kernel is "right" by one definition everywhere.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..workload import FP8, Workload


def np_dtype(dtype: str):
    """The numpy dtype of a TVM dtype name (bfloat16 and the fp8 types through ml_dtypes,
    which tvm-ffi ships)."""
    if dtype == "bfloat16" or dtype in FP8:
        import ml_dtypes  # noqa: PLC0415
        return getattr(ml_dtypes, dtype)
    return np.dtype(dtype)


def _random(shape, dtype, rng):
    if dtype.startswith("int") or dtype.startswith("uint"):
        lo = 0 if dtype.startswith("u") else -4
        return rng.integers(lo, 4, size=shape).astype(dtype)
    if dtype in FP8:  # quarters in [-1, 1]: exact in e4m3 and e5m2, products exact sums
        return (rng.integers(-4, 5, size=shape) / 4).astype(np_dtype(dtype))
    return rng.uniform(-1, 1, size=shape).astype(np_dtype(dtype))


def random_inputs(wl: Workload, rng: np.random.Generator) -> List[np.ndarray]:
    """A and B for ``wl``: small integers for integer dtypes (products stay exact in int32),
    quarters in [-1, 1] for fp8, uniform in [-1, 1) for other floats."""
    return [_random(shape, wl.dtype, rng) for shape in (wl.a_shape, wl.b_shape)]


def kernel_inputs(wl: Workload, rng: np.random.Generator) -> List[np.ndarray]:
    """Every input of the kernel, in its argument order: A, B, then a subgraph task's
    epilogue inputs (a bias, a residual)."""
    return random_inputs(wl, rng) + [_random(shape, dtype, rng)
                                     for _, shape, dtype in wl.epilogue_inputs()]


def apply_epilogue(wl: Workload, x: np.ndarray, extras: List[np.ndarray], n_idx=None,
                   out_idx=None) -> np.ndarray:
    """``wl``'s epilogue on matmul results ``x`` (float64 / int64), as the kernel computes it:
    each op in the dtype it has there (``epilogue_dtypes``), the casts rounding. ``x`` is the
    whole output, or the values at the sampled positions ``out_idx`` (whose N indices are
    ``n_idx``); ``extras`` are the epilogue's inputs."""
    import math  # noqa: PLC0415

    from ..workload import epilogue_dtypes, parse_epilogue  # noqa: PLC0415

    try:
        from scipy.special import erf  # noqa: PLC0415  (xgboost brings scipy)
    except ImportError:  # numpy has no erf
        erf = np.vectorize(math.erf, otypes=[np.float64])
    sqrt = math.sqrt
    dtypes = epilogue_dtypes(wl.epilogue, wl.out_dtype)
    extras = iter(extras)
    x = x.astype(np_dtype(wl.out_dtype)).astype(np.float64)  # the accumulator's rounding
    for i, (name, arg) in enumerate(parse_epilogue(wl.epilogue)):
        if name == "bias":
            bias = next(extras).astype(np.float64)
            x = x + (bias if n_idx is None else bias[n_idx])
        elif name in ("residual", "mul"):
            res = next(extras).astype(np.float64)
            res = res if out_idx is None else res[out_idx]
            x = x + res if name == "residual" else x * res
        elif name == "relu":
            x = np.maximum(x, 0)
        elif name == "gelu":
            x = x * (0.5 + 0.5 * erf(x / sqrt(2)))
        elif name == "gelu_tanh":
            x = x * (0.5 + 0.5 * np.tanh(sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        elif name == "silu":
            x = x / (1 + np.exp(-x))
        elif name == "exp":
            x = np.exp(x)
        elif name == "tanh":
            x = np.tanh(x)
        elif name == "sigmoid":
            x = 1 / (1 + np.exp(-x))
        elif name == "scale":
            x = x * float(arg)
        elif name == "cast":
            x = x.astype(np_dtype(arg)).astype(np.float64)
        else:  # requant
            x = np.clip(np.rint(x * float(arg)), -128, 127)
        if name not in ("cast", "requant") and not dtypes[i + 1].startswith(("int", "uint")):
            x = x.astype(np_dtype(dtypes[i + 1])).astype(np.float64)
    return x


def matmul_operands(wl: Workload, a: np.ndarray, b: np.ndarray):
    """(A as [.., M, K], B as [.., K, N]) of arrays in the workload's layout: transposes as
    views (numpy's BLAS takes a transposed view as it is, its own NT path)."""
    return (np.swapaxes(a, -1, -2) if wl.transpose_a else a,
            np.swapaxes(b, -1, -2) if wl.transpose_b else b)


def reference_matmul(wl: Workload, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact result in float64 (int64 for integers)."""
    acc = np.int64 if wl.dtype.startswith(("int", "uint")) else np.float64
    return np.matmul(*matmul_operands(wl, a.astype(acc), b.astype(acc)))


def tolerance(wl: Workload):
    """(rtol, atol) for comparing a kernel with the float64 reference."""
    if "requant" in wl.epilogue:
        return 0.0, 1.0  # x * scale in f32 against f64: a half may round the other way
    if wl.dtype.startswith(("int", "uint")) and wl.final_dtype.startswith(("int", "uint")):
        return 0.0, 0.0
    if wl.final_dtype in ("float16", "bfloat16"):
        return 2e-2, 2e-2 * max(1.0, np.sqrt(wl.K) / 4)
    if wl.dtype in ("float16", "bfloat16", *FP8) or wl.out_dtype in ("float16", "bfloat16"):
        rtol, atol = 2e-2, 2e-2 * max(1.0, np.sqrt(wl.K) / 4)
    else:
        rtol, atol = 1e-4, 1e-4 * max(1.0, np.sqrt(wl.K) / 4)
    if "exp" in wl.epilogue.split("+"):
        # exp turns the matmul's absolute error into a relative one, on values up to e^|x|
        rtol = max(rtol, atol)
    return rtol, atol


class OutputCheck:
    """Compares a kernel's output with float64 numpy (int64 for integers).

    Outputs of up to ``max_full`` elements are compared whole. Larger ones (a 24x16384x512
    batch_matmul writes 200M values) are compared at a seeded random sample of positions, whose
    reference costs K multiply-adds each; the output is NaN-poisoned before the run, so the
    whole-tensor NaN test still proves every element was written. The sample holds at most
    ``max_sample`` positions, at least 4096 (65536: a wrong region of 1 in 10000 elements, a
    tile's tail, is missed with probability e^-6.5; a million cost the tuner 4.6 s of float64
    copies for 24x2048x512x64, a third of a top-20 run).
    """

    def __init__(self, wl: Workload, a: np.ndarray, b: np.ndarray, *, extras=(), seed: int = 0,
                 max_full: int = 1 << 24, sample_work: int = 1 << 27, max_sample: int = 1 << 16):
        self.wl = wl
        self.rtol, self.atol = tolerance(wl)
        size = int(np.prod(wl.out_shape))
        if size <= max_full:
            self.idx, self.ref = None, reference_matmul(wl, a, b)
            if wl.epilogue:
                self.ref = apply_epilogue(wl, self.ref, list(extras))
            return
        rng = np.random.default_rng(seed + 1)
        n = int(min(size, max(4096, min(max_sample, sample_work // wl.K))))
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
        if wl.epilogue:
            self.ref = apply_epilogue(wl, self.ref, list(extras), n_idx=self.idx[-1],
                                      out_idx=self.idx)

    def __call__(self, out: np.ndarray) -> Optional[str]:
        """None if the output is right, else what is wrong (one line)."""
        floating = not self.wl.final_dtype.startswith(("int", "uint"))
        unwritten = int(np.isnan(out).sum()) if self.idx is not None and floating else 0
        return self.verdict(out if self.idx is None else out[self.idx], unwritten)

    def verdict(self, got: np.ndarray, unwritten: int = 0) -> Optional[str]:
        """``__call__`` on what a device inspected: the output (whole) or its values at the
        sample, and the NaNs of the whole poisoned output."""
        if unwritten:
            size = int(np.prod(self.wl.out_shape))
            return f"{unwritten} of {size} elements not written (still NaN)"
        got = got.astype(self.ref.dtype)
        ok = np.isclose(got, self.ref, rtol=self.rtol, atol=self.atol)
        if ok.all():
            return None
        where = "" if self.idx is None else " sampled"
        err = np.nanmax(np.abs(got - self.ref)) if np.isfinite(got).any() else float("nan")
        return f"{int((~ok).sum())} of {ok.size}{where} elements differ from numpy " \
               f"(max abs error {err:.3g})"


def seeded_data(wl: Workload, seed: int):
    """([the kernel's inputs: A, B, epilogue inputs], OutputCheck) drawn from ``seed``: every
    measurer checks the same inputs."""
    inputs = kernel_inputs(wl, np.random.default_rng(seed))
    return inputs, OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:], seed=seed)
