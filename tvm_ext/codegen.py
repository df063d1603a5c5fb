"""How a scheduled kernel is compiled: pass options, the CUDA compiler mode, launch attributes.

**Pass options.** A template may need PassContext options (``pass_options``).

**CUDA compiler mode.** TVM keeps CUDA source in a built library and compiles it when the
library is loaded, with NVRTC by default; NVRTC needs the ``cuda-bindings`` package. Where that
is missing, ``use_nvcc_without_nvrtc`` chooses nvcc by setting ``TVM_CUDA_COMPILE_MODE`` (the
only switch TVM reads) -- once, logged, and never over a mode the user chose.

**Programmatic dependent launch** (PDL, sm_90): a kernel launched with it may start while the
kernel before it in the stream is still finishing, and waits (``griddepcontrol.wait``) for that
kernel's completion and memory before it touches global memory: launch latency and block set-up
overlap the previous kernel's tail (as cuBLAS's sm_90 kernels do), much of the time of kernels
of a few microseconds run back to back.

``with_dependent_launch`` takes a scheduled PrimFunc or one written with ``T.launch_thread``. At
the start of every kernel (the body of the innermost thread binding of each top-level nest) it
puts ``griddepcontrol.wait``, then ``griddepcontrol.launch_dependents`` (the next kernel may be
scheduled now; its own wait keeps it from reading this kernel's output early), and it asks TVM
to launch the kernels with the programmatic-serialization attribute. TVM gives that attribute to
every kernel of the function, so a kernel that it cannot open with the wait (one nested under a
statement it does not know) is an error, never a kernel launched early without its wait.
Without the attribute (an older GPU, or a launch that did not ask), both instructions do
nothing. A template may keep a config's kernel from launching early (``early_launch``): blocks
placed while the previous kernel holds part of the GPU can pile up on the SMs it left free. The
SGEMM launches early only a grid of at most one block an SM (a larger grid ran 1.4x slower);
the wgmma kernel no grid of at most one block an SM whose SM holds two of its blocks (2x).

**CPU register tiles on the stack.** TVM puts a CPU buffer of 1024 bytes or more
(``runtime::kMaxStackAlloca``) in a heap workspace (``TVMBackendAllocWorkspace``), which LLVM
cannot keep in registers: a 4 x 64 f32 register tile (16 AVX-512 vectors) was zeroed by a memset
call and stored there at every k step. TVM 0.27 keeps only "global" buffers under 1024 bytes on
the stack: a "local" register tile of 256 bytes was a heap workspace too. CPU kernels are
compiled with TVM's own pipeline plus one host pass (``stack_tiles``) that marks every "local"
buffer of at most ``STACK_TILE_BYTES`` to stay a stack array (TVM's ``disable_lower_builtin``),
which LLVM then promotes to registers, and that ends every task of a parallel loop annotated
``x86_intrin.FENCE_TASKS`` with a fence (``sfence`` on x86), so that the task's non-temporal
stores are in memory before the thread pool counts it done.

**Whole vectors where a tile overhangs C.** A register tile whose columns run past C's (N not
a multiple of the tile's width) is written back under a predicate on each lane, and TVM turns
a vector loop with such a predicate into one guarded scalar store per element, in every tile of
the kernel (LLVM makes masked stores of them on AVX-512, not on AVX2). A pass before TVM's
lowering (``whole_vectors``) splits each such loop: whole vectors where every lane is inside,
the guarded elements only where some are not. Kernels of symbolic sizes are left as they are.
"""
from __future__ import annotations

import functools
import logging
import os

from .ops.common import loop_with, rebuilt

logger = logging.getLogger("tvm_ext")

# TVM's own spelling of the launch flag (tvm/runtime/metadata.h).
PDL_TAG = "tirx.use_programtic_dependent_launch"
LAUNCH_PARAMS = "tirx.kernel_launch_params"


def grid_dependency_stmts():
    """The two statements that open a kernel launched with PDL."""
    from tvm import tirx  # noqa: PLC0415
    from tvm.script import tirx as T  # noqa: PLC0415
    return [tirx.Evaluate(T.ptx.griddepcontrol.wait()),
            tirx.Evaluate(T.ptx.griddepcontrol.launch_dependents())]


def with_dependent_launch(func):
    """``func`` with every kernel opened by ``grid_dependency_stmts`` and launched with PDL;
    ValueError where a kernel cannot be opened."""
    from tvm import s_tir, tirx  # noqa: PLC0415

    def binds(stmt):  # a thread-binding loop (scheduled TensorIR) or T.launch_thread
        return (isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING) or \
            (isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent")

    found = []

    def opened(body):
        return tirx.SeqStmt(grid_dependency_stmts() + [body])

    def visit(stmt):
        if binds(stmt) and not binds(stmt.body):  # the innermost binding: the kernel's body
            found.append(stmt)
            return rebuilt(stmt, opened)
        if binds(stmt) or isinstance(stmt, (tirx.SeqStmt, s_tir.SBlockRealize)):
            return rebuilt(stmt, visit)
        if any(k in stmt.script() for k in ("thread_binding", "launch_thread", "env_thread")):
            raise ValueError("with_dependent_launch: a kernel nested under a "
                             f"{type(stmt).__name__} is not handled")
        return stmt

    body = visit(func.body)
    if not found:
        raise ValueError("with_dependent_launch: no kernel launch nest at the top of the function")
    params = list(func.attrs[LAUNCH_PARAMS]) if func.attrs and LAUNCH_PARAMS in func.attrs \
        else []
    return func.with_body(body).with_attr(LAUNCH_PARAMS, params + [PDL_TAG])


def dependent_launch(facts) -> bool:
    """Whether kernels for a target with these hardware ``facts`` are launched with PDL:
    CUDA sm_90 and newer, unless the environment sets ``TVM_EXT_PDL=0``."""
    return facts["kind"] == "cuda" and facts["sm"] >= 90 and \
        os.environ.get("TVM_EXT_PDL", "1") != "0"


def pass_options(config):
    """A PassContext that adds ``config`` to the current one (same opt level), or the current
    one unchanged when there is nothing to add."""
    import tvm  # noqa: PLC0415

    ctx = tvm.transform.PassContext.current()
    if not config:
        return ctx
    return tvm.transform.PassContext(opt_level=ctx.opt_level, config={**ctx.config, **config})


def use_nvcc_without_nvrtc():
    """TVM compiles CUDA source when a module is loaded, with NVRTC by default; NVRTC needs the
    cuda-bindings package. Without it, use nvcc (unless the user chose a mode)."""
    import importlib.util  # noqa: PLC0415
    if "TVM_CUDA_COMPILE_MODE" in os.environ:
        return
    try:
        has_nvrtc = importlib.util.find_spec("cuda.bindings") is not None
    except ModuleNotFoundError:
        has_nvrtc = False
    if not has_nvrtc:
        logger.debug("tvm_ext: no cuda-bindings (NVRTC); CUDA source is compiled with nvcc")
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"


def compile_module(mod, target, pass_config=None):
    """``tvm.compile`` a scheduled module for ``target`` with a template's pass options (a CPU
    module with ``cpu_pipeline()``: TVM's, plus ``stack_tiles``)."""
    import tvm  # noqa: PLC0415

    if target.kind.name == "cuda":
        use_nvcc_without_nvrtc()
    with pass_options(pass_config or {}):
        return tvm.compile(mod, target=target, tir_pipeline=tir_pipeline(target))


def tir_pipeline(target) -> str:
    """The TIR pipeline our kernels for ``target`` are compiled with, wherever they are built
    (a kernel, a Relax model): ``cpu_pipeline()`` for llvm, TVM's default elsewhere."""
    return cpu_pipeline() if target.kind.name == "llvm" else "default"


#: The most bytes of a "local" buffer that a CPU kernel keeps on its stack (``stack_tiles``):
#: a register tile is at most the vector register file (32 x 64 bytes on AVX-512).
STACK_TILE_BYTES = 4096


# TVM's annotation (tirx/transform.h, kDisableLowerTVMBuiltin): an allocation that stays as it is.
_KEEP_ALLOC = "disable_lower_builtin"


def _const_bytes(buf):
    """Bytes of a buffer of constant shape, else None."""
    import tvm  # noqa: PLC0415
    from tvm import tirx  # noqa: PLC0415
    n = 1
    for extent in buf.shape:
        if not isinstance(extent, tirx.IntImm):
            return None
        n *= extent.value
    dt = tvm.DataType(buf.dtype)
    return n * dt.bits * dt.lanes // 8


def _stack_tiles_stmt(stmt, limit: int, fence):
    """``stmt`` with its small "local" allocations kept on the stack and the tasks of its
    ``FENCE_TASKS`` loops ended by the statement ``fence`` (the statements that hold others are
    rebuilt where a child changed; any other statement is left as it is)."""
    from tvm import tirx  # noqa: PLC0415

    from .ops.x86_intrin import FENCE_TASKS  # noqa: PLC0415

    if isinstance(stmt, tirx.AllocBuffer):
        size = _const_bytes(stmt.buffer)
        if stmt.buffer.scope() == "local" and size is not None and size <= limit \
                and _KEEP_ALLOC not in stmt.annotations:
            notes = {**dict(stmt.annotations), _KEEP_ALLOC: tirx.IntImm("int32", 1)}
            return tirx.AllocBuffer(stmt.buffer, notes, stmt.span)
        return stmt
    if isinstance(stmt, tirx.For) and FENCE_TASKS in stmt.annotations:
        notes = {k: v for k, v in stmt.annotations.items() if k != FENCE_TASKS}
        body = tirx.SeqStmt([_stack_tiles_stmt(stmt.body, limit, fence), fence])
        return loop_with(stmt, body, annotations=notes)
    return rebuilt(stmt, lambda s: _stack_tiles_stmt(s, limit, fence))


def stack_tiles(limit: int = STACK_TILE_BYTES):
    """The host pass: see the module doc."""
    import tvm  # noqa: PLC0415

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="tvm_ext.StackTiles")
    def _pass(func, _mod, _ctx):
        body = _stack_tiles_stmt(func.body, limit, _nt_fence(func))
        return func if body.same_as(func.body) else func.with_body(body)
    return _pass


def _nt_fence(func):
    """The statement that orders a task's non-temporal stores before what follows: ``sfence``
    on x86 (LLVM lowers a ``fence seq_cst`` there to a locked instruction, which x86 does not
    promise orders non-temporal stores), else ``x86_intrin.NT_FENCE`` (``fence seq_cst``:
    ``dmb ish`` on AArch64)."""
    from tvm import tirx  # noqa: PLC0415
    from tvm.target import codegen  # noqa: PLC0415

    from .ops.x86_intrin import NT_FENCE  # noqa: PLC0415
    target = func.attrs.get("target") if func.attrs is not None else None
    triple = (target.attrs.get("mtriple") if target is not None else None) or \
        codegen.llvm_get_system_triple()
    if str(triple).startswith(("x86_64", "i386", "i686")):
        return tirx.Evaluate(tirx.call_llvm_intrin("void", "llvm.x86.sse.sfence"))
    return tirx.Evaluate(tirx.call_extern("void", NT_FENCE))


def _lane_bounds(pred, lane, extent):
    """(the conjuncts of block predicate ``pred`` that do not depend on ``lane``, the
    condition under which the others hold on every lane of a loop of ``extent`` lanes), or
    None where one of them is not a comparison linear in ``lane`` (so that holding on its
    first and last lane is holding on all of them)."""
    from tvm import sym, tirx  # noqa: PLC0415

    from .ops.common import conjuncts, substitute  # noqa: PLC0415

    def at(e, value):
        return substitute(e, {lane: tirx.IntImm(str(extent.ty), value)})

    keep, whole = [], []
    for cond in conjuncts(pred):
        if not isinstance(cond, (tirx.LT, tirx.LE, tirx.GT, tirx.GE)):
            return None
        linear = sym.detect_linear_equation(cond.a - cond.b, [lane])
        if not linear:
            return None
        coef = linear[0]
        if isinstance(coef, tirx.IntImm) and coef.value == 0:
            keep.append(cond)
        else:
            whole += [at(cond, 0), at(cond, extent.value - 1)]
    return keep, whole


def _whole_vectors_stmt(stmt):
    """``stmt`` with each vector loop whose block has a predicate on its lanes split in two:
    where the predicate holds on every lane, the loop without it (whole vector loads and
    stores); elsewhere the loop unrolled, one guarded element at a time (as TVM would
    scalarize it)."""
    from tvm import s_tir, tirx  # noqa: PLC0415

    if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.VECTORIZED and \
            isinstance(stmt.body, s_tir.SBlockRealize) and stmt.body.block.init is None and \
            isinstance(stmt.extent, tirx.IntImm) and isinstance(stmt.min, tirx.IntImm) and \
            stmt.min.value == 0:
        realize = stmt.body
        split = _lane_bounds(realize.predicate, stmt.loop_var, stmt.extent)
        if split is not None and split[1]:
            keep, whole = split
            pred = functools.reduce(tirx.And, keep) if keep else tirx.const(True, "bool")
            b = realize.block
            block = s_tir.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint + "_whole",
                                 b.body, b.init, b.alloc_buffers, b.match_buffers,
                                 b.annotations)
            fast = loop_with(stmt, s_tir.SBlockRealize(realize.iter_values, pred, block))
            # the rest one guarded element at a time, unrolled: the tile's elements at
            # constant offsets (it stays in registers, not copied to the stack for the loop)
            slow = loop_with(stmt, realize, kind=tirx.ForKind.UNROLLED)
            return tirx.IfThenElse(functools.reduce(tirx.And, whole), fast, slow)
        return stmt
    return rebuilt(stmt, _whole_vectors_stmt)


def whole_vectors():
    """The pass before lowering: see ``_whole_vectors_stmt``. The vector write-back of a
    register tile whose columns overhang C (N not a multiple of the tile: dense 257x509x131)
    otherwise stores every element of every tile of the kernel under its own branch."""
    import tvm  # noqa: PLC0415
    from tvm import tirx  # noqa: PLC0415

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="tvm_ext.WholeVectors")
    def _pass(func, _mod, _ctx):
        if not all(hasattr(p, "shape") and all(isinstance(d, tirx.IntImm) for d in p.shape)
                   for p in func.params):
            # a kernel of symbolic sizes (a shape family's generic kernel) as it is: TVM's
            # CompactBufferAllocation fails on the split ("Literal value ... exceeds range")
            return func
        body = _whole_vectors_stmt(func.body)
        return func if body.same_as(func.body) else func.with_body(body)
    return tvm.ir.transform.Sequential([_pass, tvm.s_tir.transform.ConvertSSA()])


@functools.lru_cache(maxsize=None)
def cpu_pipeline() -> str:
    """The name of the CPU pipeline, registered once: TVM's default TIR pipeline, after
    ``whole_vectors`` and with ``stack_tiles`` before the host's finalizing passes (whose
    LowerTVMBuiltin moves large allocations to the heap), which lower float32 exp, tanh and
    erf as vector code (``vector_math``)."""
    import tvm  # noqa: PLC0415
    from tvm.tirx import compilation_pipeline as pipelines  # noqa: PLC0415

    from .vector_math import lowering  # noqa: PLC0415

    def factory():
        lower, finalize_host, finalize_device = pipelines.get_tir_pipeline("default")

        def host():
            return tvm.ir.transform.Sequential([stack_tiles(), lowering(finalize_host())])
        return tvm.ir.transform.Sequential([whole_vectors(), lower]), host, finalize_device

    pipelines.register_tir_pipeline("tvm_ext_cpu", factory)
    return "tvm_ext_cpu"


def use_host_cores() -> int:
    """Make TVM's CPU thread pool use ``host_cores()`` threads, unless ``TVM_NUM_THREADS`` says
    otherwise, and return the count in use. TVM sizes its pool when the first parallel kernel
    runs, from ``TVM_NUM_THREADS`` or else half the hardware threads (it assumes every core has
    two): on a host of single-thread cores that is half the cores. Called before a kernel of
    ours runs (Kernel, the measurers' runners, the bench)."""
    from .target import host_cores  # noqa: PLC0415

    if "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(host_cores())  # read when TVM makes its pool
    return _pool_threads(os.environ["TVM_NUM_THREADS"])


@functools.lru_cache(maxsize=None)
def _pool_threads(_env: str) -> int:
    """TVM's pool size (asking costs some 40 ms: a measurer asks before every run); the pool
    reads TVM_NUM_THREADS once, so the answer holds for the process, per value of it."""
    import tvm  # noqa: PLC0415
    return int(tvm.runtime.num_threads())


def pool_yields() -> bool:
    """Make TVM's CPU worker threads sleep as soon as a parallel kernel ends rather than spin
    for the next one (TVM's default: 300000 rounds), so that a numpy (BLAS) call made right
    after one of our kernels finds the cores free; the price is the wake-up of the workers at
    our next kernel (``python -m tvm_ext.bench.interplay`` measures both). Sets TVM's own
    ``TVM_THREAD_POOL_SPIN_COUNT`` to 0 unless the user set it (then returns False); TVM reads
    it when it makes its pool, so call this before the process's first parallel kernel."""
    if "TVM_THREAD_POOL_SPIN_COUNT" in os.environ:
        return False
    os.environ["TVM_THREAD_POOL_SPIN_COUNT"] = "0"
    return True
