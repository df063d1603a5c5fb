"""exp, tanh and erf of float32 on the CPU as vector code (issue 25): a matmul's transcendental
epilogue (GELU, SiLU, exp) and a model's softmax.

TVM lowers ``tirx.exp`` (and tanh, which it writes with exp) for LLVM to ``llvm.exp``, which
LLVM has no vector code for: a vector of 16 becomes 16 calls of libm's ``expf``; ``tirx.erf``
becomes a call of ``erff`` per element. In a matmul's write-back that cost more than the
matmul: tuning ``bench.model --fuse --tune 160`` on the 2-core Zen 5 recorded dense
512x3072x768 + bias+gelu_tanh at 16.39 ms, the plain matmul at 4.74; with these rules, 4.88
(docs/BENCHMARKS.md).

TOPI's ``fast_exp`` / ``fast_tanh`` / ``fast_erf`` (and Relax's ``FastMathTransform``, which
calls them) are tensor ops: they reach neither a GELU that ``LegalizeOps`` writes with tanh or
erf nor our templates' epilogues, and TOPI's exp saturates below inf. A lowering rule sees every
call, wherever it was written.

Here each is a polynomial in the vector's lanes, lowered in place of TVM's rule while our CPU
pipeline (``codegen.cpu_pipeline``) lowers intrinsics, and only then (``lowering``): TVM's own
builds in the same process keep TVM's rules. Float32 only (scalar or vector); other dtypes
take TVM's rule. exp: Cephes' expf polynomial after the reduction by ln 2 in two parts, 2^n
applied in two halves (so that exp overflows to inf and underflows through the subnormals as
libm's does); tanh and erf: Eigen's rational approximations on [-9, 9] and [-4, 4]; a NaN gives
a NaN. Sigmoid, which TVM writes with exp, takes the vector exp. ``test_vector_math`` holds
them, against float64, to 2e-7 relative (exp, over [-110, 90]) and 5e-7 (tanh, erf, sigmoid
over [-20, 20], [-6, 6], [-100, 100]), scalar and in vectors of 16.
"""
from __future__ import annotations

import contextvars
import functools

#: Whether our rules are active (``lowering``): set only while our pipeline lowers intrinsics.
_ACTIVE = contextvars.ContextVar("tvm_ext_vector_math", default=False)

_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 in two parts (Cephes)
# expf's polynomial on [-ln2/2, ln2/2] (Cephes): exp(r) = 1 + r + r^2 P(r)
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
# tanh(x) = x P(x^2) / Q(x^2) on [-9, 9] (Eigen's float tanh)
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)
# erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (Eigen's float erf)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def _horner(x, coefficients, dtype: str):
    """c0 x^n + c1 x^(n-1) + ... + cn (``x`` a PrimExpr of ``dtype``)."""
    from tvm import tirx  # noqa: PLC0415
    acc = tirx.const(coefficients[0], dtype)
    for c in coefficients[1:]:
        acc = acc * x + tirx.const(c, dtype)
    return acc


def _bound(x, dtype: str, body):
    """``body(v)`` with ``v`` bound to ``x`` (of ``dtype``) once (a Let), a NaN of ``x``
    passed through. (TVM 0.27 keeps an expression's dtype in its type, not on the Python
    object: it is passed along.)"""
    from tvm import tirx  # noqa: PLC0415
    v = tirx.Var("v", dtype)
    return tirx.Let(v, x, tirx.Select(tirx.isnan(v), v, body(v)))


def _clamp(v, lo: float, hi: float, dtype: str):
    from tvm import tirx  # noqa: PLC0415
    return tirx.max(tirx.min(v, tirx.const(hi, dtype)), tirx.const(lo, dtype))


def vexp(x, dtype: str = "float32"):
    """exp of a float32 PrimExpr ``x`` of ``dtype`` (scalar or vector: "float32x16"), as
    vector code."""
    from tvm import tirx  # noqa: PLC0415
    idt = "int32" + dtype[len("float32"):]  # int32 of the same lanes

    def body(v):
        def c(value, dt=dtype):
            return tirx.const(value, dt)
        # beyond [-104, 89] exp is 0 or inf in float32: clamped there, the scaling gives them
        t = _clamp(v, -104.0, 89.0, dtype)
        n = tirx.floor(t * c(_LOG2E) + c(0.5))
        r = t - n * c(_LN2_HI) - n * c(_LN2_LO)
        p = _horner(r, _EXP_P, dtype) * r * r + r + c(1.0)
        ni = n.astype(idt)
        half = ni >> c(1, idt)  # 2^n as 2^half * 2^(n - half): both normal numbers

        def power(e):
            return tirx.reinterpret(dtype, (e + c(127, idt)) << c(23, idt))
        return p * power(half) * power(ni - half)
    return _bound(x, dtype, body)


def _odd_rational(x, dtype: str, bound: float, p, q):
    """t P(t^2) / Q(t^2) with t = ``x`` clamped to [-bound, bound] (Eigen's form of tanh and
    erf, which are +-1 in float32 beyond their bound)."""
    def body(v):
        t = _clamp(v, -bound, bound, dtype)
        t2 = t * t
        return t * _horner(t2, p, dtype) / _horner(t2, q, dtype)
    return _bound(x, dtype, body)


def vtanh(x, dtype: str = "float32"):
    """tanh of a float32 PrimExpr ``x`` of ``dtype``, as vector code."""
    return _odd_rational(x, dtype, 9.0, _TANH_P, _TANH_Q)


def verf(x, dtype: str = "float32"):
    """erf of a float32 PrimExpr ``x`` of ``dtype``, as vector code."""
    return _odd_rational(x, dtype, 4.0, _ERF_P, _ERF_Q)


_RULES = {"tirx.exp": vexp, "tirx.tanh": vtanh, "tirx.erf": verf}


@functools.lru_cache(maxsize=None)
def _register() -> None:
    """Our LLVM lowering rules for ``_RULES``' ops, once per process: while ``_ACTIVE``, a
    float32 call takes ours; otherwise the rule TVM had (or, where it had none for LLVM, the
    call as it is, for TVM's default rule)."""
    import tvm  # noqa: PLC0415
    from tvm.tirx.op import register_intrin_lowering  # noqa: PLC0415

    for name, ours in _RULES.items():
        before = tvm.ir.Op.get(name).get_attr("llvm.FLowerIntrinsic")

        def rule(call, ours=ours, before=before):
            dtype = str(call.expr_ty().dtype)  # (a call reaches Python as a plain ir.Call)
            if _ACTIVE.get() and dtype.split("x")[0] == "float32":
                return ours(call.args[0], dtype)
            return before(call) if before is not None else call
        register_intrin_lowering(name, "llvm", f=rule, level=99)


def lowering(passes):
    """A module pass that runs ``passes`` (a pipeline's finalizing passes, which lower the
    intrinsics) with our rules active."""
    import tvm  # noqa: PLC0415
    _register()

    @tvm.transform.module_pass(opt_level=0, name="tvm_ext.VectorMath")
    def _pass(mod, _ctx):
        token = _ACTIVE.set(True)
        try:
            return passes(mod)
        finally:
            _ACTIVE.reset(token)
    return _pass
