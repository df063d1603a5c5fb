"""What a template is: two peer kinds, one per way of making a kernel from a config.

- ``ScheduleTemplate``: a TOPI-style pair. ``compute(workload, cfg)`` returns TE tensors
  ``[inputs..., output]`` (a config may change the compute, e.g. the packing width of a packed
  layout or split-K); ``schedule(sch, cfg, workload, facts)`` schedules the PrimFunc made from
  them with ``tvm.s_tir.Schedule``. Its schedule also works on a fused Relax function whose first
  block is the matmul, so such templates serve fused epilogues and MetaSchedule.
- ``KernelTemplate``: ``kernel(workload, cfg, facts, target)`` writes the PrimFunc itself, for
  instructions TVM's schedule primitives cannot reach (wgmma). It has no schedule. A symbolic
  one also takes ``sizes=`` (the extents of a shape family's kernel, PrimExprs).

A subgraph task (``Workload.epilogue``: bias, activation, cast, requantize after the matmul) is
the template's kernel with ``epilogue_compute``'s blocks after the matmul, computed in its
write-back (``ScheduleTemplate.schedule_fused``); a KernelTemplate with ``epilogues`` computes
``epilogue_value`` in the write-back of the kernel it writes (the wgmma templates).

Both have the same rest: knobs as data in ``tuning_spaces/<name>.json`` (axes named M, N, K, B),
``fallback(space, workload, facts)`` -> knob values to use without a tuned record, and
``check(workload, facts)`` -> None when the template applies, else the reason it does not.
A template may see the workload through a ``view`` (``dense_swap.x86``: the transposed
product, N x M): its space's axes and layout are the view's, and its space file may name
another template's (``"same_as"``) whose knobs then mean the same on the view.

Which templates exist, and which apply to a workload, is ``tvm_ext.strategy``'s job.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

ALL_LAYOUTS = ("NN", "NT", "TN", "TT")


# ---- the epilogue of a subgraph task, computed after the matmul ----

#: The names of the epilogue's blocks: EPILOGUE_BLOCK.format(i) for its i-th op.
EPILOGUE_BLOCK = "E{}"


def _epilogue_op(name, arg, dt, X):
    """fn(x, idx) of one epilogue op on the value so far ``x`` at output index ``idx``;
    ``X`` is its extra input (a TE tensor or a TIR buffer: bias, residual), else None."""
    import math  # noqa: PLC0415

    from tvm import te, tirx  # noqa: PLC0415

    def load(idx):
        return X(*idx) if isinstance(X, te.Tensor) else X[tuple(idx)]

    if name == "bias":
        return lambda x, idx: x + load(idx[-1:])
    if name == "residual":
        return lambda x, idx: x + load(idx)
    if name == "mul":
        return lambda x, idx: x * load(idx)
    if name == "relu":
        return lambda x, idx: tirx.max(x, tirx.const(0, dt))
    if name == "gelu":
        half, rsqrt2 = tirx.const(0.5, dt), tirx.const(1 / math.sqrt(2), dt)
        return lambda x, idx: x * (half + tirx.erf(x * rsqrt2) * half)
    if name == "gelu_tanh":  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        half, c, c3 = (tirx.const(v, dt) for v in (0.5, math.sqrt(2 / math.pi),
                                                   0.044715 * math.sqrt(2 / math.pi)))
        return lambda x, idx: x * (half + tirx.tanh(x * (c + c3 * x * x)) * half)
    if name == "silu":
        return lambda x, idx: x * tirx.sigmoid(x)
    if name == "exp":
        return lambda x, idx: tirx.exp(x)
    if name == "tanh":
        return lambda x, idx: tirx.tanh(x)
    if name == "sigmoid":
        return lambda x, idx: tirx.sigmoid(x)
    if name == "scale":
        return lambda x, idx: x * tirx.const(float(arg), dt)
    if name == "cast":
        return lambda x, idx: x.astype(arg)
    scale = tirx.const(float(arg), "float32")  # requant: int32 -> int8
    lo, hi = tirx.const(-128.0, "float32"), tirx.const(127.0, "float32")
    return lambda x, idx: tirx.min(tirx.max(tirx.nearbyint(x.astype("float32") * scale),
                                            lo), hi).astype("int8")


def _epilogue_ops(wl, extras):
    """[fn(x, idx)] of ``wl``'s epilogue ops; ``extras``: its extra inputs in
    ``wl.epilogue_inputs()`` order (TE tensors or TIR buffers)."""
    from .workload import FULL_INPUT_OPS, epilogue_dtypes, parse_epilogue  # noqa: PLC0415

    dtypes = epilogue_dtypes(wl.epilogue, wl.out_dtype)
    inputs = iter(extras)
    return [_epilogue_op(name, arg, dtypes[i],
                         next(inputs) if name in ("bias", *FULL_INPUT_OPS) else None)
            for i, (name, arg) in enumerate(parse_epilogue(wl.epilogue))]


def epilogue_value(wl, x, idx, extras):
    """The epilogue of ``wl`` on one matmul output value ``x`` (a PrimExpr of
    ``wl.out_dtype``) at output index ``idx``, reading its extra inputs from the TIR buffers
    ``extras`` (``wl.epilogue_inputs()`` order): what a kernel template computes in its
    write-back. The same ops, in the same dtypes, as ``epilogue_compute``'s blocks."""
    for fn in _epilogue_ops(wl, extras):
        x = fn(x, idx)
    return x


def epilogue_buffers(wl):
    """(the epilogue's extra input buffers, fn(value, index) of the epilogue) of a subgraph
    task's kernel: the buffers are free in the kernel's body until ``with_epilogue_params``
    makes them its parameters; without an epilogue, ([], the identity)."""
    from tvm import tirx  # noqa: PLC0415
    if not wl.epilogue:
        return [], lambda x, idx: x
    extras = [tirx.decl_buffer(shape, dt, name=name) for name, shape, dt in
              wl.epilogue_inputs()]
    return extras, lambda x, idx: epilogue_value(wl, x, idx, extras)


def with_epilogue_params(func, extras):
    """``func`` (A, B, C) with the epilogue's buffers as parameters between B and C, the
    argument order of a subgraph task's kernel (``Workload.buffers``); checked well formed
    (written with free buffers, the kernel is parsed unchecked)."""
    from tvm import tirx  # noqa: PLC0415
    if extras:  # a buffer parameter is the buffer's own Var (of BufferType) in TVM 0.27
        params = list(func.params[:2]) + list(extras) + [func.params[2]]
        func = tirx.PrimFunc(params, func.body, func.ret_type, func.attrs)
    tirx.analysis.verify_well_formed(func)
    return func


def epilogue_compute(wl, C):
    """TE tensors of ``wl``'s epilogue on the matmul output ``C``: ([extra placeholders in
    ``wl.epilogue_inputs()`` order], the output). One block per op, ``EPILOGUE_BLOCK``."""
    from tvm import te  # noqa: PLC0415

    extras = [te.placeholder(shape, dt, name=name) for name, shape, dt in wl.epilogue_inputs()]

    def block(cur, fn):
        return lambda *idx: fn(cur(*idx), idx)

    cur = C
    for i, fn in enumerate(_epilogue_ops(wl, extras)):
        cur = te.compute(C.shape, block(cur, fn), name=EPILOGUE_BLOCK.format(i))
    return extras, cur


def with_epilogue(wl, tensors):
    """(the TE tensors ``[A, B, C]`` of ``wl``'s anchor matmul followed by ``wl``'s epilogue:
    ``[A, B, extras..., out]``, the names of the epilogue's blocks); without an epilogue,
    (``tensors``, [])."""
    if not wl.epilogue:
        return tensors, []
    extras, out = epilogue_compute(wl, tensors[-1])
    return tensors[:2] + extras + [out], \
        [EPILOGUE_BLOCK.format(i) for i in range(len(wl.epilogue.split("+")))]


def schedule_with_epilogue(sch, epilogue, schedule: Callable[[], None]):
    """``schedule()`` (the matmul's) on a function whose matmul is followed by the elementwise
    blocks named ``epilogue``: all but the last are inlined into the last, which is computed
    in the matmul's write-back (registers -> output, one pass)."""
    for name in epilogue[:-1]:
        sch.compute_inline(sch.get_sblock(name))
    schedule()
    if epilogue:
        sch.reverse_compute_inline(sch.get_sblock(epilogue[-1]))


@dataclass(frozen=True)
class Template:
    name: str
    op: str
    target_kind: str
    fallback: Callable
    check: Callable
    dtypes: Tuple[str, ...]
    layouts: Tuple[str, ...] = ALL_LAYOUTS
    # Among the templates that apply, the highest priority is the default: a number, or
    # (workload, facts) -> a number where the default depends on the shape (``rank``).
    priority: Union[int, Callable] = 0
    # Imports a template needs before it makes a kernel (tensor intrinsics): kept lazy, so that
    # neither the CLI nor a build worker pays for them unless the template is used.
    prepare: Optional[Callable] = None
    # workload -> the workload its space's axes and layout are taken from (None: itself).
    view: Optional[Callable] = None
    # PassContext options the template's kernels must be compiled with.
    pass_config: Dict[str, Any] = field(default_factory=dict)
    # For a template defined outside tvm_ext (a user's, a test's): folders a measurement worker
    # puts on sys.path before importing the module that defines (and registers) it.
    source_paths: Tuple[str, ...] = ()

    # Whether its schedule takes symbolic extents (padding them up to its tiles inside the
    # kernel): the kernels of a shape family (``tvm_ext.family``).
    symbolic: bool = False
    # Whether that schedule also takes an extent g * t (t symbolic) as a multiple of g: a
    # family whose sizes of an axis are all multiples of g gets bucket kernels that pad only
    # for tiles that do not divide g (``tvm_ext.family``).
    granular: bool = False
    # Without ``family_operands``: the accumulator dtype (workload -> dtype) of the plain
    # matmul its family kernels compute, where it is not the output's (mma: f32).
    acc_dtype: Optional[Callable] = None
    # family -> None, or why its kernels of symbolic extents cannot serve that family (a
    # template whose kernels need every size a multiple of something); None: any family.
    family_check: Optional[Callable] = None
    # Whether a kernel of a family ``family_check`` lets it serve takes any size of the axes
    # that vary (then it may be the family's generic kernel too).
    family_any_size: bool = False
    # Whether its ``compute(workload, config, A, B)`` takes the family's operands for its
    # kernels of symbolic extents (else: the plain matmul on them, its schedule padding).
    family_operands: bool = False

    # Whether ``schedule`` works on a TensorIR matmul (a fused Relax function, MetaSchedule).
    schedulable = False

    @property
    def module(self) -> str:
        """The module that defines the template (a worker imports it to find a user's)."""
        raise NotImplementedError

    def rank(self, workload, facts) -> int:
        """Its priority for ``workload``: the default among the templates that apply is the
        highest (``strategy.templates_for``)."""
        return self.priority(workload, facts) if callable(self.priority) else self.priority

    def why_not(self, workload, facts) -> Optional[str]:
        if workload.op != self.op:
            return f"{self.name} is for {self.op}"
        if workload.dtype not in self.dtypes:
            return f"dtype {workload.dtype} (supported: {', '.join(self.dtypes)})"
        if workload.layout not in self.layouts:
            return f"layout {workload.layout} (supported: {', '.join(self.layouts)})"
        return self.check(workload, facts)

    def make_func(self, workload, config, facts, target):
        """The kernel's PrimFunc for a config (any exception: the config cannot be built)."""
        raise NotImplementedError


@dataclass(frozen=True)
class ScheduleTemplate(Template):
    compute: Callable = None
    schedule: Callable = None
    # False: its schedule takes only its own compute, not a Relax function's matmul block
    # (dense_swap.x86 computes the transposed product); its kernels still take epilogues.
    schedulable: bool = True

    def __post_init__(self):
        if self.compute is None or self.schedule is None:
            raise TypeError(f"ScheduleTemplate {self.name} needs compute and schedule")

    @property
    def module(self) -> str:
        return self.compute.__module__

    def make_func(self, workload, config, facts, target):
        """The kernel of a workload; a subgraph task's epilogue (``workload.epilogue``) is
        computed in the write-back of the template's schedule of its anchor matmul."""
        import tvm  # noqa: PLC0415
        from tvm import s_tir, te  # noqa: PLC0415

        anchor = workload.anchor
        tensors, epilogue = with_epilogue(workload, self.compute(anchor, config))
        sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(tensors)}))
        if workload.epilogue:
            self.schedule_fused(sch, config, anchor, facts, epilogue)
        else:
            self.schedule(sch, config, workload, facts)
        return sch.mod["main"]

    def schedule_fused(self, sch, config, anchor, facts, epilogue):
        """The template's schedule of the matmul with elementwise blocks ``epilogue`` after
        it (``schedule_with_epilogue``)."""
        schedule_with_epilogue(sch, epilogue, lambda: self.schedule(sch, config, anchor, facts))


@dataclass(frozen=True)
class KernelTemplate(Template):
    kernel: Callable = None
    # Whether its kernel computes a subgraph task's epilogue in its write-back
    # (``epilogue_value``; the epilogue's inputs are parameters between B and C).
    epilogues: bool = False
    # (workload, names, facts) -> whether a config's kernel may be launched early with
    # programmatic dependent launch where the target has it (``Task.launch``; names: the
    # config's knob values and the space's let terms, ``ConfigSpace.names_of``); None: always
    early_launch: Optional[Callable] = None

    def __post_init__(self):
        if self.kernel is None:
            raise TypeError(f"KernelTemplate {self.name} needs kernel")

    @property
    def module(self) -> str:
        return self.kernel.__module__

    def why_not(self, workload, facts) -> Optional[str]:
        if workload.epilogue and not self.epilogues:
            return f"{self.name} writes its own kernel, without epilogues"
        return super().why_not(workload, facts)

    def make_func(self, workload, config, facts, target, sizes=None):
        """The kernel of a config. With ``sizes`` ({axis: extent}, {} for the workload's own),
        the kernel of symbolic extents of a shape family (``symbolic`` templates): guarded
        where its tiles overhang, the extents it is given (PrimExprs) in place of the
        workload's."""
        if sizes is not None:
            return self.kernel(workload, config, facts, target, sizes=sizes)
        return self.kernel(workload, config, facts, target)
