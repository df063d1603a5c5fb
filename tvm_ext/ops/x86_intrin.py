"""The x86 templates' own tensor intrinsic: a square block transposed in vector registers.

A weight stored [N, K] (layout NT) is packed into panels ``[N // xi, K, xi]``: a transpose. As a
TensorIR loop over (k, x) vectorised along x, LLVM builds every vector of the panel from xi
scalar loads at a stride of K (a gather). ``transpose_intrin`` instead
moves an n x n block (n = the vector lanes: 16 f32 on AVX-512) as BLAS packing routines do: n
row loads along K, log2(n) rounds of two-source shuffles, n row stores into the panel. Its
body is LLVM IR, imported into the kernel's module (``pragma_import_llvm``) and inlined there,
so the shuffles are LLVM's own lowering for the host (``vpermt2ps``, ``vunpcklps``, ...).
"""
from __future__ import annotations

from .common import register_once

LLVM_TYPES = {"float32": "float", "float64": "double"}


def transpose_ir(dtype: str, n: int) -> str:
    """LLVM IR of ``void tvm_ext_transpose_<n>_<dtype>(dst, dst_stride, src, src_stride)``:
    dst[r * dst_stride + c] = src[c * src_stride + r] for an n x n block (n a power of two).
    Round b (1, 2, 4, ...) swaps the off-diagonal b x b sub-blocks of every 2b x 2b block:
    rows i and i + b (i & b == 0) become their interleavings by blocks of b."""
    if n < 2 or n & (n - 1):
        raise ValueError(f"transpose of {n} lanes: a power of two >= 2")
    ty = LLVM_TYPES[dtype]
    vec = f"<{n} x {ty}>"
    out = [f"define void @{_symbol(dtype, n)}(ptr %dst, i64 %ds, ptr %src, i64 %ss) {{"]
    for r in range(n):
        out += [f"  %so{r} = mul i64 %ss, {r}",
                f"  %sp{r} = getelementptr {ty}, ptr %src, i64 %so{r}",
                f"  %r0_{r} = load {vec}, ptr %sp{r}, align 4"]
    b, rnd = 1, 0
    while b < n:
        for i in (i for i in range(n) if not i & b):
            lo = [j if not j & b else n + j - b for j in range(n)]
            hi = [j + b if not j & b else n + j for j in range(n)]
            for row, mask in ((i, lo), (i + b, hi)):
                m = ", ".join(f"i32 {v}" for v in mask)
                out.append(f"  %r{rnd + 1}_{row} = shufflevector {vec} %r{rnd}_{i}, "
                           f"{vec} %r{rnd}_{i + b}, <{n} x i32> <{m}>")
        b, rnd = 2 * b, rnd + 1
    for r in range(n):
        out += [f"  %do{r} = mul i64 %ds, {r}",
                f"  %dp{r} = getelementptr {ty}, ptr %dst, i64 %do{r}",
                f"  store {vec} %r{rnd}_{r}, ptr %dp{r}, align 4"]
    out.append("  ret void\n}\n")
    return "\n".join(out)


def _symbol(dtype: str, n: int) -> str:
    return f"tvm_ext_transpose_{n}_{dtype}"


def transpose_intrin(dtype: str, n: int) -> str:
    """The name of the registered intrinsic D[k, x] = S[x, k] over an n x n block of ``dtype``
    (S and D with any row stride), whose implementation calls ``transpose_ir``'s function:
    the kernel needs that IR imported (``pragma_import_llvm``) where it uses the intrinsic."""
    from tvm.script import tirx as T  # noqa: PLC0415

    def make():
        @T.prim_func(s_tir=True)
        def desc(s: T.handle, d: T.handle) -> None:
            S = T.match_buffer(s, (n, n), dtype, offset_factor=1, strides=[T.int32(), 1])
            D = T.match_buffer(d, (n, n), dtype, offset_factor=1, strides=[T.int32(), 1])
            with T.sblock("root"):
                T.reads(S[0:n, 0:n])
                T.writes(D[0:n, 0:n])
                for k, x in T.grid(n, n):
                    with T.sblock("transpose"):
                        vk, vx = T.axis.remap("SS", [k, x])
                        D[vk, vx] = S[vx, vk]

        @T.prim_func(s_tir=True)
        def impl(s: T.handle, d: T.handle) -> None:
            ss = T.int32()
            ds = T.int32()
            S = T.match_buffer(s, (n, n), dtype, offset_factor=1, strides=[ss, 1])
            D = T.match_buffer(d, (n, n), dtype, offset_factor=1, strides=[ds, 1])
            with T.sblock("root"):
                T.reads(S[0:n, 0:n])
                T.writes(D[0:n, 0:n])
                T.evaluate(T.call_extern("void", _symbol(dtype, n), D.access_ptr("w"),
                                         T.Cast("int64", ds), S.access_ptr("r"),
                                         T.Cast("int64", ss)))
        return desc, impl

    return register_once(f"tvm_ext_transpose_{n}x{n}_{dtype}", make)
