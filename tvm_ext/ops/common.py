"""What every template shares: the plain matmul compute, the names of the blocks that computes
and schedules agree on, and the factor helpers of the fallbacks.

The block names are the contract between a compute and its schedule (and Relax's matcher of fused
functions): a schedule looks blocks up by these constants, never by a string of its own.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import sys
import threading

#: The matmul block of every compute (``matmul_compute``, the mma compute, Relax's legalized
#: matmul as ``legalize_matmul`` writes it).
MATMUL_BLOCK = "C"
#: The crop of an output padded by ``pad_einsum`` (TVM names it after the padded block).
CROP_BLOCK = MATMUL_BLOCK + "_pad"
#: The cast of an accumulator to a narrower output dtype (mma's f32 -> f16).
CAST_BLOCK = "C_cast"
#: The output of a kernel that computes the transposed product (``dense_swap.x86``).
TRANSPOSE_BLOCK = "C_t"
#: The sum of split-K's partial products (a second small kernel).
SPLIT_SUM_BLOCK = "C_sum"
#: The sum of sliced-K's partial tiles (in shared memory, in the same kernel).
SLICE_SUM_BLOCK = "C_slices"
#: Blocks our computes add after the matmul; any other consumer is a fused epilogue.
OWN_CONSUMERS = (CROP_BLOCK, CAST_BLOCK, SPLIT_SUM_BLOCK, SLICE_SUM_BLOCK)


_IMPORT_LOCK = threading.Lock()


@contextlib.contextmanager
def fast_tvmscript_import():
    """While in it, ``inspect.getmodule`` of a frame or code object is memoised by file name.
    TVMScript's parser takes ``inspect.stack()`` for every function it parses, and for each
    frame whose file is no module's (the import machinery's own frames) the standard library
    scans all of ``sys.modules`` again: importing TVM's tensor intrinsics, hundreds of
    TVMScript functions parsed inside an import, is then quadratic. ``from tvm.s_tir import
    tensor_intrin`` took 54 s on a 2-core Zen 3 and 7.5 s in this context (MetaSchedule's
    tuning context imports it; the tensor-core templates load its CUDA module). A file's
    module does not change while the context lasts (a module is in ``sys.modules`` before its
    code runs); the function is restored on the way out."""
    real = inspect.getmodule
    memo: dict = {}

    def getmodule(obj, _filename=None):
        if _filename is None or not (inspect.isframe(obj) or inspect.iscode(obj)):
            return real(obj, _filename)
        if _filename not in memo:
            memo[_filename] = real(obj, _filename)
        return memo[_filename]
    with _IMPORT_LOCK:
        inspect.getmodule = getmodule
        try:
            yield
        finally:
            inspect.getmodule = real


def import_tensor_intrinsics():
    """``tvm.s_tir.tensor_intrin`` (every target's intrinsics registered), imported in
    ``fast_tvmscript_import``; at once where some import already did."""
    import importlib  # noqa: PLC0415
    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        with fast_tvmscript_import():
            importlib.import_module(name)
    return sys.modules[name]


def register_once(name: str, make):
    """Register an intrinsic of our own, ``make() -> (desc, impl)``, unless this process
    already did. ``make`` runs only then: building the TVMScript of an intrinsic costs tens of
    milliseconds, and a tuner instantiates hundreds of configs for their features."""
    from tvm.s_tir import TensorIntrin  # noqa: PLC0415
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, *make())
    return name


def element_at(wl, A, B):
    """(a(lead, i, k), b(lead, j, k)): the element of A at row i and of B at column j, both at
    reduction index k, whatever the layout (``lead``: the batch index as a tuple, or ())."""
    def a(lead, i, k):
        return A[lead + ((k, i) if wl.transpose_a else (i, k))]

    def b(lead, j, k):
        return B[lead + ((j, k) if wl.transpose_b else (k, j))]
    return a, b


def matmul_compute(wl, A=None, B=None, acc=None):
    """TE tensors [A, B, C] of the plain matmul (given A and B tensors, or placeholders);
    accumulation in out_dtype, or in ``acc`` and then cast to out_dtype by block "C_cast" (the
    mma templates' f16 products in f32). Also the compute of MetaSchedule's and Relax's form of
    every template: sizes are taken from A and B, so int64-shaped tensors (Relax) give the same
    PrimFunc as ``call_te`` does."""
    from tvm import te  # noqa: PLC0415

    if acc is not None and acc != wl.out_dtype:
        A, B, C = matmul_compute(wl.with_(out_dtype=acc), A, B)
        return [A, B, te.compute(C.shape, lambda *i: C(*i).astype(wl.out_dtype),
                                 name=CAST_BLOCK)]

    batched = wl.op != "dense"
    A = A if A is not None else te.placeholder(wl.a_shape, wl.dtype, name="A")
    B = B if B is not None else te.placeholder(wl.b_shape, wl.dtype, name="B")
    lead = (lambda b: (b,)) if batched else (lambda b: ())
    m_dim = A.shape[-1] if wl.transpose_a else A.shape[-2]
    k_dim = A.shape[-2] if wl.transpose_a else A.shape[-1]
    n_dim = B.shape[-2] if wl.transpose_b else B.shape[-1]
    k = te.reduce_axis((0, k_dim), name="k")
    out = wl.out_dtype
    a_at, b_at = element_at(wl, A, B)

    def body(b, i, j):
        return te.sum(a_at(lead(b), i, k).astype(out) * b_at(lead(b), j, k).astype(out), axis=k)

    if batched:
        C = te.compute((A.shape[0], m_dim, n_dim), lambda b, i, j: body(b, i, j), name=MATMUL_BLOCK)
    else:
        C = te.compute((m_dim, n_dim), lambda i, j: body(0, i, j), name=MATMUL_BLOCK)
    return [A, B, C]



def f32_acc_dtype(wl):
    """The accumulator of a GPU template: f16 / bf16 products summed in f32 also for an f16 /
    bf16 output (cast once, at the write-back), as cuBLAS does: summed in f16 they lose about
    log2(K) bits (the decoding families' f16 -> f16 kernels on the CUDA cores failed the
    numerics check from K = 128: `bench.family --target cuda --dtype float16 --out-dtype
    float16`, H200, max abs error 1.2 at K = 3072)."""
    return "float32" if wl.dtype in ("float16", "bfloat16") else wl.out_dtype


def plain_compute(wl, cfg):
    """A template's compute that does not depend on the config: the plain matmul."""
    return matmul_compute(wl)


def padded(n, tile):
    """n rounded up to a multiple of tile."""
    return -(-n // tile) * tile


def largest_factor(n: int, at_most: int, multiple_of: int = 1) -> int:
    """The largest divisor of n that is <= at_most and a multiple of ``multiple_of``
    (falls back to the largest divisor <= at_most)."""
    best = 1
    for f in range(1, min(n, at_most) + 1):
        if n % f == 0 and f % multiple_of == 0:
            best = f
    if best == 1 and multiple_of > 1:
        return largest_factor(n, at_most)
    return best


def tile_of(n: int, want: int, pow2: bool = False) -> int:
    """A tile of an axis of n where a rule wants ``want`` (a power of two): the largest divisor
    up to want (a power of two if ``pow2``) if at least half of want (or n), else whichever of
    want, want / 2, want / 4 and it costs least, n padded (within n / 16 free; under half of
    want or n, a smaller tile costs in proportion; ties: the larger). N = 4001: 32, not 1."""
    if pow2:  # (a power of two up to n: no split is longer than its axis)
        want = min(want, 1 << (n.bit_length() - 1))
    d = math.gcd(n, want) if pow2 else largest_factor(n, want)
    if 2 * d >= min(n, want):
        return d

    def cost(t):
        return max(padded(n, t), n + n // 16) * max(1, min(n, want) / (2 * t))
    return min({d, want, max(1, want // 2), max(1, want // 4)}, key=lambda t: (cost(t), -t))


def grid_blocks(wl, block_m: int, block_n: int) -> int:
    """Blocks of a grid of block_m x block_n tiles that divide the workload's M and N."""
    return wl.batch * (wl.M // block_m) * (wl.N // block_n)


def busiest_sm_blocks(blocks: int, facts) -> int:
    """Blocks of a grid of ``blocks`` on the SM that takes the most (shared out evenly)."""
    return -(-blocks // facts["num_sms"])


def blocks_by_shared_memory(smem: int, facts) -> int:
    """Blocks of ``smem`` bytes of shared memory each that one SM holds at once: on sm_80 and
    sm_90 an SM's shared memory is the per-block opt-in maximum plus 1 KB, and every resident
    block reserves 1 KB of it."""
    per_sm = facts.get("max_shared_memory_optin", 232448) + 1024
    return per_sm // (smem + 1024) if smem else 32


def fallback_raster(wl, facts, tm, tn, below_column: bool = False):
    """Group the launch order only where one batch's grid is more than a wave of the SMs (then
    a wave sweeps a square of about sqrt(SMs) x sqrt(SMs) tiles instead of whole rows).
    ``below_column``: a group smaller than the grid's column of M tiles (the spaces that hold
    larger groups to be the same order, and so not in the space)."""
    mt, nt = -(-wl.M // tm), -(-wl.N // tn)
    if mt * nt <= facts["num_sms"]:
        return 1
    for r in (8, 4, 2):
        if mt % r == 0 and nt > r and r * r <= facts["num_sms"] and (r < mt or not below_column):
            return r
    return 1




# ---- padding an iteration domain up to the tiles (unaligned shapes, symbolic extents) ----

def pad_to_tiles(sch, block, tiles):
    """Pad the matmul block's (M, N, K) loops up to multiples of ``tiles`` (pad_einsum; the
    batch loops are left alone) where an extent is not provably a multiple of its tile: an
    unaligned shape, or a symbolic extent (the kernels of a shape family; ``64 * t`` is a
    multiple of 64). An aligned shape is left as it is, so its kernel does not change. Returns
    whether it padded."""
    from tvm import sym, tirx  # noqa: PLC0415

    loops = sch.get_loops(block)
    extents = [sch.get(loop).extent for loop in loops[-3:]]
    # A symbolic extent known to be a multiple of its tile (a family kernel's 64 * m_t, where
    # every size of the family is a multiple of 64) is not padded either.
    analyzer = sym.Analyzer()
    if all(analyzer.can_prove(tirx.floormod(e, t) == 0) for e, t in zip(extents, tiles)):
        return False
    sch.pad_einsum(block, [1] * (len(loops) - 3) + list(tiles))
    return True


def inline_producer(sch, block):
    """Inline the pad blocks that feed ``block`` (zeros outside the tensor, computed in it)."""
    for p in sch.get_producers(block):
        if sch.get(p).name_hint.endswith("_pad"):
            sch.compute_inline(p)


def inline_consumer(sch, block):
    """Inline what follows the write-back into it: the crop of the padded output (CROP_BLOCK,
    made by pad_einsum), then the cast to the output dtype ("C_cast") or the transpose of a
    transposed product (TRANSPOSE_BLOCK). Other consumers (the epilogue of a fused Relax
    function) are left to the caller."""
    while True:
        ours = [c for c in sch.get_consumers(block)
                if sch.get(c).name_hint in (CROP_BLOCK, CAST_BLOCK, TRANSPOSE_BLOCK)]
        if not ours:
            return
        for c in ours:
            sch.reverse_compute_inline(c)


def has_block(sch, name):
    try:
        sch.get_sblock(name)
        return True
    except Exception:  # noqa: BLE001  (TVM raises its own error for a missing block)
        return False


def kernel_attrs(target=None):
    """The function attributes of a hand-written kernel (a template's PrimFunc written thread by
    thread): its symbol, no aliasing among its buffers, and its target where one is given."""
    attrs = {"global_symbol": "main", "tirx.noalias": True}
    if target is not None:
        attrs["target"] = target
    return attrs


def conjuncts(cond) -> list:
    """The terms of a condition's chain of ``and``s (the condition itself if it has none)."""
    from tvm import tirx  # noqa: PLC0415
    return conjuncts(cond.a) + conjuncts(cond.b) if isinstance(cond, tirx.And) else [cond]


def substitute(expr, values):
    """``expr`` with each var of ``values`` ({var: expression}) replaced by its expression,
    simplified."""
    from tvm import sym  # noqa: PLC0415
    analyzer = sym.Analyzer()
    for var, value in values.items():
        analyzer.bind(var, value)
    return analyzer.simplify(expr)


def rebuilt(stmt, child):
    """``stmt``, a statement that holds others (``SeqStmt``, ``For``, ``AttrStmt``,
    ``IfThenElse``, ``While``, ``SBlockRealize``), with ``child`` applied to each of them, and
    rebuilt only where one changed; any other statement as it is. (TVM 0.27 has no Python
    statement mutator.)"""
    from tvm import s_tir, tirx  # noqa: PLC0415

    if isinstance(stmt, tirx.SeqStmt):
        seq = [child(s) for s in stmt.seq]
        return stmt if all(a.same_as(b) for a, b in zip(seq, stmt.seq)) else \
            tirx.SeqStmt(seq, stmt.span)
    if isinstance(stmt, tirx.IfThenElse):
        then = child(stmt.then_case)
        other = None if stmt.else_case is None else child(stmt.else_case)
        if then.same_as(stmt.then_case) and (other is None or other.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then, other, stmt.span)
    if isinstance(stmt, s_tir.SBlockRealize):
        b = stmt.block
        body = child(b.body)
        if body.same_as(b.body):
            return stmt
        block = s_tir.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, body, b.init,
                             b.alloc_buffers, b.match_buffers, b.annotations)
        return s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, block)
    if not isinstance(stmt, (tirx.For, tirx.AttrStmt, tirx.While)):
        return stmt
    body = child(stmt.body)
    if body.same_as(stmt.body):
        return stmt
    if isinstance(stmt, tirx.For):
        return loop_with(stmt, body)
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body, stmt.span)
    return tirx.While(stmt.condition, body, stmt.span)


def loop_with(loop, body, *, kind=None, annotations=None):
    """A copy of the ``For`` ``loop`` with ``body`` (and ``kind`` or ``annotations`` where
    given); its variable, range, thread binding, step and span as they were."""
    from tvm import tirx  # noqa: PLC0415
    return tirx.For(loop.loop_var, loop.min, loop.extent,
                    loop.kind if kind is None else kind, body, loop.thread_binding,
                    loop.annotations if annotations is None else annotations, loop.step,
                    loop.span)
