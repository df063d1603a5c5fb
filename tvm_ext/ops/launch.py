"""Programmatic dependent launch (PDL, sm_90): a kernel launched with it may start while the
kernel before it in the stream is still finishing, and waits (``griddepcontrol.wait``) for that
kernel's completion and memory before it touches global memory. Launch latency and the set-up of
its blocks then overlap the previous kernel's tail, which cuBLAS's sm_90 kernels also use: for
kernels of a few microseconds run back to back, the gap between kernels is a large part of the
time.

``with_dependent_launch`` takes a scheduled PrimFunc or one written with ``T.launch_thread``. At
the start of every kernel (the body of the innermost thread binding of each top-level nest) it
puts ``griddepcontrol.wait``, then ``griddepcontrol.launch_dependents`` (the next kernel may be
scheduled now; its own wait keeps it from reading this kernel's output early), and it asks TVM
to launch the kernels with the programmatic-serialization attribute. TVM gives that attribute to
every kernel of the function, so a kernel that it cannot open with the wait (one nested under a
statement it does not know) is an error, never a kernel launched early without its wait.
Without the attribute (an older GPU, or a launch that did not ask), both instructions do
nothing.
"""
from __future__ import annotations

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

    def visit(stmt):
        if isinstance(stmt, s_tir.SBlockRealize):
            b = stmt.block
            block = s_tir.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, visit(b.body),
                                 b.init, b.alloc_buffers, b.match_buffers, b.annotations)
            return s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, block)
        if isinstance(stmt, tirx.SeqStmt):
            return tirx.SeqStmt([visit(s) for s in stmt.seq])
        if binds(stmt):
            if binds(stmt.body):
                body = visit(stmt.body)
            else:
                found.append(stmt)
                body = tirx.SeqStmt(grid_dependency_stmts() + [stmt.body])
            if isinstance(stmt, tirx.AttrStmt):
                return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body)
            return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                            stmt.thread_binding, stmt.annotations)
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
