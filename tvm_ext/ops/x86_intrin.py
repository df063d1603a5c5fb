"""The x86 templates' own tensor intrinsics: a square block transposed in vector registers, and
a register tile's row stored to C with non-temporal stores (``nt_store_intrin``, below).

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
    out = [f"define void @{transpose_symbol(dtype, n)}(ptr %dst, i64 %ds, ptr %src, i64 %ss) {{"]
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


def transpose_symbol(dtype: str, n: int) -> str:
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
                T.evaluate(T.call_extern("void", transpose_symbol(dtype, n), D.access_ptr("w"),
                                         T.Cast("int64", ds), S.access_ptr("r"),
                                         T.Cast("int64", ss)))
        return desc, impl

    return register_once(f"tvm_ext_transpose_{n}x{n}_{dtype}", make)


# ---- A register tile's row written to C with non-temporal stores.
#
# A GEMM whose output goes out to memory (the bmm row: 100 MB of C for 64-deep sums) writes every
# line of C through the cache: each store first reads the line it fills (a read for ownership),
# so C costs twice its size in memory traffic, and the stores wait for those reads. Non-temporal
# stores (``vmovntps``) fill write-combining buffers that go to memory whole, without the read.
# LLVM emits them for a store with ``!nontemporal`` metadata, which TVM's codegen cannot attach:
# the row is stored by an LLVM IR function imported into the kernel (``pragma_import_llvm``) and
# inlined there, as the transposes are. Such stores need their address aligned to the vector; an
# unaligned row (a view of C at an odd offset) takes ordinary stores instead.


#: A parallel loop annotated with this key ends each of its tasks with a call of
#: ``NT_FENCE`` (``codegen.stack_tiles``): the task's non-temporal stores, which are not ordered
#: with the ordinary store that tells the thread pool the task is done, are in memory first.
FENCE_TASKS = "tvm_ext.nt_fence"

#: The function (defined in ``nt_store_ir``'s IR) that fences non-temporal stores off x86:
#: LLVM's ``fence seq_cst`` (``dmb ish`` on AArch64); x86 takes ``sfence`` (``codegen``).
NT_FENCE = "tvm_ext_nt_fence"


def nt_store_ir(dtype: str, n: int, lanes: int) -> str:
    """LLVM IR of ``void tvm_ext_ntstore_<n>_<dtype>(dst, src)``: dst[0:n] = src[0:n] in
    ``lanes``-wide vectors, non-temporal where dst is aligned to the vector's bytes; and of
    ``void NT_FENCE()``."""
    if n % lanes:
        raise ValueError(f"a row of {n} in vectors of {lanes}: not whole vectors")
    ty = LLVM_TYPES[dtype]
    vec, width = f"<{lanes} x {ty}>", lanes * (8 if dtype == "float64" else 4)
    out = [f"define void @{_nt_symbol(dtype, n)}(ptr %dst, ptr %src) alwaysinline {{",
           "entry:",
           "  %addr = ptrtoint ptr %dst to i64",
           f"  %low = and i64 %addr, {width - 1}",
           "  %aligned = icmp eq i64 %low, 0",
           "  br i1 %aligned, label %nt, label %plain"]
    for label, tail in (("nt", f"align {width}, !nontemporal !0"), ("plain", "align 4")):
        out.append(f"{label}:")
        for v in range(n // lanes):
            out += [f"  %{label}s{v} = getelementptr {ty}, ptr %src, i64 {v * lanes}",
                    f"  %{label}x{v} = load {vec}, ptr %{label}s{v}, align 4",
                    f"  %{label}d{v} = getelementptr {ty}, ptr %dst, i64 {v * lanes}",
                    f"  store {vec} %{label}x{v}, ptr %{label}d{v}, {tail}"]
        out.append("  ret void")
    out += ["}", f"define void @{NT_FENCE}() alwaysinline {{", "  fence seq_cst", "  ret void",
            "}", "!0 = !{i32 1}", ""]
    return "\n".join(out)


def _nt_symbol(dtype: str, n: int) -> str:
    return f"tvm_ext_ntstore_{n}_{dtype}"


def nt_store_intrin(dtype: str, n: int) -> str:
    """The name of the registered intrinsic D[x] = S[x] over n values (S a "local" register
    tile's row, D a row of C), whose implementation calls ``nt_store_ir``'s function: the
    kernel needs that IR imported where it uses the intrinsic."""
    from tvm.script import tirx as T  # noqa: PLC0415

    def make():
        @T.prim_func(s_tir=True)
        def desc(s: T.handle, d: T.handle) -> None:
            S = T.match_buffer(s, (n,), dtype, offset_factor=1, scope="local")
            D = T.match_buffer(d, (n,), dtype, offset_factor=1)
            with T.sblock("root"):
                T.reads(S[0:n])
                T.writes(D[0:n])
                for x in T.vectorized(n):
                    with T.sblock("store"):
                        vx = T.axis.remap("S", [x])
                        D[vx] = S[vx]

        @T.prim_func(s_tir=True)
        def impl(s: T.handle, d: T.handle) -> None:
            S = T.match_buffer(s, (n,), dtype, offset_factor=1, scope="local")
            D = T.match_buffer(d, (n,), dtype, offset_factor=1)
            with T.sblock("root"):
                T.reads(S[0:n])
                T.writes(D[0:n])
                T.evaluate(T.call_extern("void", _nt_symbol(dtype, n), D.access_ptr("w"),
                                         S.access_ptr("r")))
        return desc, impl

    return register_once(_nt_symbol(dtype, n), make)
