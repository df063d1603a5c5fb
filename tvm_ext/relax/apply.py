"""Our kernels in a Relax model: ``ApplyTunedKernels`` replaces each matmul PrimFunc (plain or
fused with its epilogue) by our template's scheduled PrimFunc (the tuned record of the apply
context if there is one, else the fallback), marked ``tirx.is_scheduled`` and opaque so the
default pipeline neither fuses nor reschedules it (dlight on CUDA); a matmul with symbolic
sizes (a sequence length) becomes its shape family's dispatching library (``tvm_ext.family``:
the tuned bucket kernels of the context's logs, else the generic kernel). ``build`` runs the
whole pipeline."""
from __future__ import annotations

from typing import List, Tuple

import tvm
from tvm import relax as _relax

from .. import family as F
from ..codegen import pass_options, tir_pipeline, use_host_cores
from ..dispatch import choose
from ..errors import TvmExtError
from ..strategy import get_template
from ..target import parse_target
from ..workload import Workload
from .legalize import legalize_as_strategy, matmuls_as_templates, views_for
from .rest import schedule_rest
from .match import match_family, match_fused, match_matmul
from .prepack import (constant_weight_calls, constants_on_huge_pages, prepack_constant_weights,
                      prepack_template)
from .subgraph import fuse

_OPAQUE = 8  # relax's OpPatternKind.kOpaque: FuseOps leaves the function alone
#: TVM's option that makes its CUDA pipeline capture static regions as CUDA graphs
CUDA_GRAPH = "relax.backend.use_cuda_graph"


def _schedule_fused(task, config, func, epilogue: List[str]):
    """The template's schedule on the matmul block of a fused function, its elementwise
    epilogue computed in the matmul's write-back (registers -> output, one pass)."""
    from tvm import s_tir  # noqa: PLC0415
    sch = s_tir.Schedule(func)
    task.template.schedule_fused(sch, config, task.workload.anchor, task.facts, epilogue)
    return task.launch(sch.mod["main"], config)


def _same_params(func, wl) -> bool:
    """Whether ``func`` takes the buffers of ``wl``'s kernel (``Workload.buffers``: A, B, the
    epilogue's inputs, C), shapes and dtypes in that order: what a kernel template's kernel
    of a subgraph task takes."""
    try:
        return [(tuple(int(d) for d in p.shape), str(p.dtype)) for p in func.params] == \
            [(tuple(shape), dtype) for _, shape, dtype in wl.buffers()]
    except (AttributeError, TypeError):  # a scalar parameter, a symbolic shape
        return False


@tvm.transform.module_pass(opt_level=0, name="tvm_ext.ApplyTunedKernels")
class ApplyTunedKernels:
    """Schedule the legalized matmul PrimFuncs with our templates (see module doc)."""

    def __init__(self, target=None, epilogues=None, constant_weights=()):
        self.target = parse_target(target)
        # PrimFunc names whose calls pass a constant weight, which will be prepacked: a matmul
        # among them that takes its task's kernel takes ``prepack_template``'s records
        # (``constant_weight_calls``)
        self.constant_weights = set(constant_weights)
        # {fused PrimFunc name: epilogue} (``subgraph.fuse``): a fused function takes the
        # records of its subgraph task, then its anchor matmul's.
        self.epilogues = dict(epilogues or {})
        self.replaced: List[Tuple[str, Workload, str, bool]] = []
        # {PrimFunc name: (task, config)} of the functions replaced by their task's kernel (a
        # plain matmul; a fused one that takes its subgraph task's parameters)
        self.kernels: dict = {}
        self.families: List[tuple] = []  # (Family, Library) of each symbolic matmul
        self.pass_config: dict = {}

    def transform_module(self, mod, _ctx):
        updates = {}
        for gv, f in mod.functions.items():
            if not isinstance(f, tvm.tirx.PrimFunc) or f.attrs is not None and \
                    f.attrs.get("tirx.is_scheduled", False):
                continue
            wl, fused = match_matmul(f), None
            if wl is None:
                fused = match_fused(f)
                if fused is None:
                    family = match_family(f)
                    if family is not None:
                        new = self._family(family[0], f)
                        if new is not None:
                            updates[gv] = new
                    continue
                wl = fused[0]
            spec = self.epilogues.get(gv.name_hint) if fused is not None else None
            if spec:
                try:  # the subgraph task: the matmul and the epilogue it is fused with
                    wl = wl.with_(epilogue=spec)
                except TvmExtError:
                    spec = None
            # A named epilogue may also take a kernel template that computes it in its own
            # write-back (the wgmma ones) and a prepacked kernel, where the function takes
            # that kernel's parameters; any other fused function needs a schedule of its
            # blocks.
            own = fused is None or bool(spec) and _same_params(f, wl)
            template = prepack_template(wl, self.target) if own and \
                gv.name_hint in self.constant_weights else None
            try:
                task, choice = choose(wl, self.target, schedulable=not own,
                                      followed=fused is not None and not spec,
                                      template=template)
            except TvmExtError:
                continue  # no template for this dtype/target: TVM's pipeline handles it
            if fused is not None and not spec and choice.tuned:
                choice.anchor = True  # an epilogue we cannot name: its anchor's record
            if fused is None or not task.template.schedulable:
                new = task.instantiate(choice.config)["main"]
            else:
                new = _schedule_fused(task, choice.config, f, fused[2])
            new = new.without_attr("global_symbol")
            if own:
                self.kernels[gv.name_hint] = (task, choice.config)
            updates[gv] = _mark(new, f, task.name)
            self.replaced.append((gv.name_hint, wl, task.name, choice.tuned))
        for gv, f in updates.items():
            mod[gv] = f
        return mod

    def _family(self, family, f):
        """A matmul with symbolic sizes: the family's library (tuned buckets from the apply
        context's logs, else the generic kernel alone) as one dispatching PrimFunc."""
        try:
            library = F.library_in_context(family, self.target)
            new, config = F.library_func(library, self.target, "main")
        except TvmExtError:
            return None  # no template takes these symbolic sizes: TVM's pipeline does
        self.pass_config.update(config)
        self.families.append((family, library))
        return _mark(new.without_attr("global_symbol"), f, library.generic.template)


def _mark(new, old, template: str):
    """Our PrimFunc in place of ``old``: its attributes (but its global symbol), scheduled and
    opaque so TVM's pipeline leaves it as it is."""
    for key, value in (old.attrs.items() if old.attrs is not None else []):
        if key != "global_symbol":
            new = new.with_attr(key, value)
    return new.with_attr("tirx.is_scheduled", True).with_attr("op_pattern", _OPAQUE) \
        .with_attr("tvm_ext.template", template)


def inputs_copied(mod):
    """``mod`` with each public Relax function's input tensors of static shape (its
    parameters, or the first ``num_input`` of them) copied, first thing, into tensors of its
    own (one copy kernel each, opaque to fusion), its body reading the copies. A CUDA graph
    replays the addresses it captured, so TVM's ``RewriteCUDAGraph`` leaves out every kernel
    that reads a parameter: in the block of ``bench.model`` the q, k, v and o projections
    (they read x) ran one by one between four graphs; with x copied, the copy and the
    output's copy are the only kernels outside one graph."""
    from tvm import te  # noqa: PLC0415

    from .match import _static_shape, _tensor_type
    bb = _relax.BlockBuilder(mod)
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, _relax.Function) or func.attrs is None or \
                "global_symbol" not in func.attrs:
            continue
        # "num_input": the parameters after the first that many are weights, which the graph
        # may keep (TVM's rule too)
        inputs = int(func.attrs.get("num_input", len(func.params)))
        params, binds, copies = [], {}, []
        for i, p in enumerate(func.params):
            params.append(_relax.Var(p.name, _tensor_type(p)))
            shape = _static_shape(p)
            binds[p] = params[-1]
            if shape is None or i >= inputs:  # symbolic, not a tensor, a weight: as it is
                continue
            x = te.placeholder(shape, str(_tensor_type(p).dtype), "x")
            copy = te.create_prim_func([x, te.compute(shape, lambda *i: x(*i), "y")])
            copy = bb.add_func(copy.without_attr("global_symbol").with_attr("op_pattern", _OPAQUE),
                               f"tvm_ext_copy_{p.name}")
            binds[p] = _relax.Var(f"{p.name}_copy", _tensor_type(p))
            copies.append(_relax.VarBinding(binds[p], _relax.call_tir(copy, [params[-1]],
                                                                      _tensor_type(p))))
        if copies:
            body = func.bind_params(binds).body
            bb.update_func(gv, _relax.Function(
                params, _relax.SeqExpr([_relax.BindingBlock(copies), *body.blocks], body.body),
                func.ret_ty, func.is_pure, func.attrs))
    return _relax.transform.Normalize()(bb.get())


def build(mod, target=None, *, relax_pipeline="default", strategy: bool = False,
          fuse_epilogue: bool = False, prepack: bool = True, views=None,
          cuda_graph: bool = False):
    """LegalizeOps (after ``matmuls_as_templates`` where ``views_for(target, views)``: a
    matmul that a template takes on views of its operands, ``nn.Linear``'s a dense NT on its
    weight, [B, S, K] activations their rows; ``legalize_matmul`` for relax.matmul when
    ``strategy``), our kernels for the matmuls (under the current ``apply_history_best``, if
    any), then ``tvm.compile`` with TVM's pipeline for everything else (on a CPU with the
    "default" pipeline, its other kernels first scheduled by ``rest.schedule_rest``, not left
    serial; on CUDA its softmax and norms a warp a row, the rest dlight's; a CPU's TIR
    through ``codegen.cpu_pipeline``, as our kernels are measured).
    ``fuse_epilogue`` (implies ``strategy``) first fuses each matmul with the elementwise ops
    after it (TVM's FuseOps) and computes them in our kernel's write-back; such a function
    takes its subgraph task's record (``subgraph``), else its anchor matmul's (marked so in
    the report), else the fallback. ``prepack`` (CPU): a matmul whose weight is a constant of
    the model (plain, or fused with an epilogue its subgraph task names) gets it packed here,
    once (``prepack_constant_weights``), instead of at every call; a CPU model's large
    constants go on huge pages (``constants_on_huge_pages``). ``cuda_graph`` (CUDA): the
    regions of the model that TVM's ``RewriteCUDAGraph`` can capture (static shapes and
    memory) run as CUDA graphs, captured at the first call and replayed after
    (``relax.backend.use_cuda_graph``): one launch for many kernels, where a small model's
    time is mostly launches; the inputs are copied first (``inputs_copied``), so that what
    reads them is captured too."""
    target = parse_target(target)
    if target.kind.name == "llvm":
        use_host_cores()  # the model's kernels (ours and TVM's) run on every core
    if cuda_graph and target.kind.name == "cuda":
        mod = inputs_copied(mod)  # what reads the inputs, captured in the graph too
    if views_for(target, views):  # nn.Linear a dense NT on its weight, [B, S, K] its rows
        mod = matmuls_as_templates(mod)
    epilogues = {}
    if fuse_epilogue:  # (CPU: an epilogue not named split off where the weight is packed)
        mod, epilogues = fuse(mod, split_unnamed=prepack and target.kind.name == "llvm")
    else:
        mod = legalize_as_strategy(mod) if strategy else _relax.transform.LegalizeOps()(mod)
    if target.kind.name == "llvm":
        # ops on constants alone computed here, not at every call (a transpose of a constant
        # weight that ``matmuls_as_templates`` did not take): the matmul after them takes a
        # constant, which prepacking packs
        mod = _relax.transform.FoldConstant()(mod)
    weights = constant_weight_calls(mod) if prepack and target.kind.name == "llvm" else ()
    apply = ApplyTunedKernels(target, epilogues, weights)
    mod = apply(mod)
    if prepack and target.kind.name == "llvm":
        mod, _ = prepack_constant_weights(mod, apply.kernels, _mark)
    if target.kind.name == "llvm":
        mod, _ = constants_on_huge_pages(mod)
    config = dict(apply.pass_config)
    if cuda_graph and target.kind.name == "cuda":
        config[CUDA_GRAPH] = True
    for _, _, name, _ in apply.replaced:  # e.g. the tensor-core templates' options
        config.update(get_template(name).pass_config)
    # The model's kernels are compiled as ``Task.build`` compiles them for the tuner (on a
    # CPU: register tiles on the stack, tasks of non-temporal stores fenced).
    if target.kind.name in ("llvm", "cuda") and relax_pipeline == "default":
        mod = schedule_rest(mod, target)  # CPU: not left serial; CUDA: rows a warp each
    with pass_options(config):
        return tvm.compile(mod, target=target, relax_pipeline=relax_pipeline,
                           tir_pipeline=tir_pipeline(target))
