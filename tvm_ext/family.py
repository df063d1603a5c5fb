"""Shape families: a range of shapes tuned once into ONE library of bucket kernels, a generic
kernel and a run-time dispatcher.

    fam = Family.parse("1..8x64..2048:64x512x64", "batch_matmul")
    lib, report = tune_family(fam, "llvm", "fam.json", trials=16)   # buckets, tuned, re-ranked
    lib = build_family(fam, "llvm", "fam.json")                       # or again from the log
    lib.export_library("fam.so")
    f = tvm.runtime.load_module("fam.so")["main"]                     # one callable, any shape

How it works:

- **Kernels for symbolic extents.** A template whose schedule takes symbolic loops (``Template.
  symbolic``) is applied to the plain matmul with a ``tir.Var`` for every axis the family lets
  vary; the schedule pads those axes up to its tiles inside the kernel (``pad_to_tiles``), so a
  kernel is correct for every size. The decisions a schedule takes from the workload (rows per
  parallel task, vector widths) come from the shape the config was tuned at (its
  *representative*).
- **Buckets** cut each varying axis at powers of two (the tiles' divisibility, and on GPUs the
  wave count, change there). Each bucket has a representative shape (its member nearest to the
  bucket's mean log-flop). Up to ``max_kernels`` representatives, spread over the family's flop
  range, are tuned, each with transfer from those tuned before; the best ``top`` configs of
  each become candidates, with each representative's fallback and the proposer's first
  configs at the buckets of most flops, at their representative and at their largest member
  (measured nowhere before), and every candidate's symbolic kernel is timed at every
  bucket's representative (the kernel that will run, at the shape it will serve).
- **Selection.** At most ``max_kernels`` kernels are picked greedily: each pick lowers the
  family's expected time the most, among the candidates that make some bucket at least 5%
  faster (``pick_kernels``); every bucket is routed to its fastest picked kernel. The report
  lists the expected time after each pick: what each extra kernel buys.
- **Few rows.** On the CPU, a family whose only varying axis is M serves M = 1 to 4 (a
  weight stored [K, N]: 8) with the gemv templates, a kernel of each exact shape, branches of
  the library ahead of the buckets (``exact_templates``): tuned as that shape on its own
  template (a bucket all of whose shapes they serve is not tuned), each one's best config kept
  in the library (``Library.exact``; none measured: its fallback).
- **Few rows, any length.** One M (up to 4, or 8 for a weight stored [K, N]) against a
  weight or cache whose length varies (decoding's attention over its cached keys and values)
  runs the gemv templates' kernels of symbolic N and batch (K and batch for [K, N]), rows
  padded to whole tasks, K's last rows guarded (``Template.family_operands``).
- **One library.** The picked kernels and the generic kernel (the template's fallback for the
  family's median shape, used outside every bucket and when nothing was tuned) are the
  branches of ONE PrimFunc ``main`` that dispatches on the shape: each branch binds its
  kernel's size vars to main's and declares its buffers on main's data, inside a loop of one
  or zero trips (TVM's ThreadSync refuses GPU kernels under an ``if``; private subroutines
  would lose the device target). ``tvm.compile`` makes one module, ``export_library`` one
  ``.so``; nothing is compiled at call time.
- **Records.** The representatives' records are ordinary records of the log; the library (the
  family, its routes and kernels' configs) is one more line, ``{"family_library": ...}``, which
  ``build_family`` reads back (directly, or inside ``apply_history_best``).
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import record as rec
from .codegen import compile_module, use_host_cores
from .dispatch import current
from .errors import TemplateError, TvmExtError, WorkloadError
from .host_memory import host_empty, host_tensor
from .space import ConfigEntity
from .strategy import get_template, templates_for
from .target import hardware_facts, parse_target, target_str
from .task import Task
from .workload import AXES, Family, Workload

logger = logging.getLogger("tvm_ext")

FORMAT = "tvm_ext.family/1"
_VAR_NAMES = {"B": "bsz", "M": "m", "N": "n", "K": "k"}


# ---- buckets ----

def _pow2_group(v: int) -> int:
    """The power-of-two bucket of a size: (2^(j-1), 2^j] -> j."""
    return max(0, math.ceil(math.log2(v)))


@dataclass
class Bucket:
    """A box of the family's shapes: ``bounds[axis] = (lo, hi)`` (inclusive) on every varying
    axis; its member shapes, their total probability, and the representative shape."""

    bounds: Dict[str, Tuple[int, int]]
    shapes: List[Tuple[int, int, int, int]]
    prob: float
    rep: Tuple[int, int, int, int]
    # sum of p * flop over the members / flop of rep: the rep's time times this is the
    # bucket's share of the family's expected time
    scale: float = 1.0

    def holds(self, shape: Sequence[int]) -> bool:
        return all(lo <= shape[AXES.index(a)] <= hi for a, (lo, hi) in self.bounds.items())

    def describe(self) -> str:
        parts = [f"{a} {lo}..{hi}" if lo != hi else f"{a} {lo}"
                 for a, (lo, hi) in self.bounds.items()]
        return ", ".join(parts) or "all"


def make_buckets(family: Family) -> List[Bucket]:
    """The family's shapes grouped by the power-of-two interval of each varying axis."""
    groups: Dict[tuple, List[Tuple[tuple, float]]] = {}
    varying = family.varying
    probs = family.probabilities()
    axis_range = {a: (min(s[AXES.index(a)] for s, _ in probs),
                      max(s[AXES.index(a)] for s, _ in probs)) for a in varying}
    for shape, p in probs:
        key = tuple(_pow2_group(shape[AXES.index(a)]) for a in varying)
        groups.setdefault(key, []).append((shape, p))
    out = []
    for key in sorted(groups):
        members = groups[key]
        # (2^(j-1), 2^j], clipped to the family's range on the axis: a size past the range
        # goes to the generic kernel (one between two sizes of a stepped range does not).
        bounds = {}
        for a, j in zip(varying, key):
            lo, hi = axis_range[a]
            bounds[a] = (max(2 ** (j - 1) + 1 if j > 0 else 1, lo), min(2 ** j, hi))
        prob = sum(p for _, p in members)
        flops = [(s, p, family.workload(s).flop) for s, p in members]
        mean_log = sum(p * math.log(f) for _, p, f in flops) / prob
        rep = min(flops, key=lambda t: (abs(math.log(t[2]) - mean_log), -t[2]))[0]
        scale = sum(p * f for _, p, f in flops) / family.workload(rep).flop
        out.append(Bucket(bounds, [s for s, _ in members], prob, rep, scale))
    return out


def spread(items: Sequence, n: int) -> List:
    """``n`` items evenly spaced over a sorted sequence (all of them if it has at most n)."""
    if len(items) <= n:
        return list(items)
    if n == 1:
        return [items[len(items) // 2]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


# ---- the library's description (what a family record holds) ----

@dataclass
class LibKernel:
    """One kernel of a library: a template's config, in the space of the shape it was tuned
    at (``rep``)."""

    template: str
    rep: Tuple[int, int, int, int]
    config: Dict[str, Any]  # ConfigEntity.to_json_dict()
    tuned: bool = True
    cost: Optional[float] = None  # seconds at rep (from the log), for the report
    # Where an untuned config came from: "" (the template's fallback at rep) or "proposed"
    # (one of the proposer's first configs at rep, never measured before the re-ranking).
    source: str = ""

    def to_json(self) -> dict:
        out = {"template": self.template, "rep": list(self.rep), "config": self.config,
               "tuned": self.tuned, "cost": self.cost}
        return {**out, "source": self.source} if self.source else out

    @staticmethod
    def from_json(obj) -> "LibKernel":
        return LibKernel(str(obj["template"]), tuple(int(v) for v in obj["rep"]),
                         dict(obj["config"]), bool(obj.get("tuned", True)), obj.get("cost"),
                         str(obj.get("source", "")))

    @property
    def how(self) -> str:
        """'tuned', 'proposed' or 'fallback' (for reports)."""
        return "tuned" if self.tuned else (self.source or "fallback")


@dataclass
class Library:
    """A family's library: its kernels, the buckets routed to each, and the generic kernel."""

    family: Family
    target: str
    kernels: List[LibKernel]
    routes: List[Tuple[Dict[str, Tuple[int, int]], int]]  # (bucket bounds, kernel index)
    generic: LibKernel
    curve: List[float] = field(default_factory=list)  # expected time after each pick (s)
    # Kernels not built (their config does not fit this target's space), with the reason: their
    # buckets run the generic kernel (key: the kernel's index; -M: the exact-shape kernel of
    # M, which then runs its fallback). Filled when the library is compiled; not saved.
    set_aside: Dict[int, str] = field(default_factory=dict)
    # The configs tuned for the sizes of M served by a kernel of their own shape
    # (``exact_templates``; rep = that shape); a size without one runs its fallback.
    exact: List[LibKernel] = field(default_factory=list)

    def to_json(self) -> dict:
        fam = self.family
        out = {
            "op": fam.op, "shape": fam.text, "dtype": fam.dtype, "out_dtype": fam.out_dtype,
            "layout": fam.layout,
            "weights": [[list(s), w] for s, w in fam.weights] if fam.weights else None,
            "target": self.target, "kernels": [k.to_json() for k in self.kernels],
            "routes": [[{a: list(b) for a, b in bounds.items()}, i] for bounds, i in self.routes],
            "generic": self.generic.to_json(), "curve": self.curve}
        if self.exact:
            out["exact"] = [k.to_json() for k in self.exact]
        return {"family_library": out, "version": FORMAT}

    def exact_kernel(self, m: int, template: str) -> Optional[LibKernel]:
        """The config tuned for the exact-shape kernel of M = ``m`` on ``template``, if any."""
        for k in self.exact:
            if k.rep[1] == m and k.template == template:
                return k
        return None

    @staticmethod
    def from_json(obj) -> "Library":
        lib = obj["family_library"]
        fam = Family.parse(lib["shape"], lib["op"], lib["dtype"], lib["out_dtype"],
                           lib["layout"])
        if lib.get("weights"):
            fam = fam.with_trace([(s, w) for s, w in lib["weights"]])
        routes = [({a: (int(b[0]), int(b[1])) for a, b in bounds.items()}, int(i))
                  for bounds, i in lib["routes"]]
        return Library(fam, str(lib["target"]), [LibKernel.from_json(k) for k in lib["kernels"]],
                       routes, LibKernel.from_json(lib["generic"]),
                       [float(x) for x in lib.get("curve", [])],
                       exact=[LibKernel.from_json(k) for k in lib.get("exact", [])])


def load_libraries(path) -> List[Library]:
    """The family libraries of a log (its ``{"family_library": ...}`` lines), oldest first;
    LogError for a line that does not read back."""
    text = Path(path).read_text(encoding="utf-8")
    out = []
    for i, line in enumerate(text.split("\n"), start=1):
        if not line.lstrip().startswith(rec.FAMILY_PREFIX):
            continue
        try:
            out.append(Library.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError, TvmExtError) as err:
            raise rec.LogError(f"{path}:{i}: corrupt family library: {err}") from None
    return out


def library_for(paths, family: Family, target) -> Optional[Library]:
    """The newest library of ``family`` for ``target``'s kind in the logs; failing that, the
    newest of a family with the same signature (op, dtypes, layout, the same fixed sizes and
    the same varying axes): a library tuned for a range serves a Relax model's matmul of any
    size there (its generic kernel takes the sizes outside the range)."""
    kind = parse_target(target).kind.name
    exact = same = None
    for p in paths:
        for lib in load_libraries(p):
            if parse_target(lib.target).kind.name != kind:
                continue
            if lib.family.key() == family.key():
                exact = lib
            elif lib.family.signature() == family.signature():
                same = lib
    if exact is None and same is not None:
        same = Library(family, same.target, same.kernels, same.routes, same.generic,
                       same.curve, exact=same.exact)
    return exact or same


# ---- kernels for symbolic extents ----

def family_template(family: Family, target, template: Optional[str] = None, *,
                    any_size: bool = False):
    """The template a family's kernels use: one whose kernels take symbolic extents (and,
    where it asks, the family's sizes: ``Template.family_check``). ``any_size``: one whose
    kernels take any size (a family's generic kernel)."""
    target = parse_target(target)
    wl = family.workload(median_shape(family))
    facts = hardware_facts(target, family.dtype)

    def why_not(t):
        if not t.symbolic:
            return "its kernels do not take symbolic extents"
        if t.family_check is not None:
            if any_size and not t.family_any_size:
                return "its kernels do not take any size"
            return t.family_check(family)
        return None

    if template is not None:
        t = get_template(template)
        why = t.why_not(wl, facts) or why_not(t)
        if why:
            raise TemplateError(f"template {template} cannot build the {family}: {why}")
        return t
    for t in templates_for(wl, target, facts):
        if why_not(t) is None:
            return t
    raise TemplateError(f"no template builds kernels of symbolic extents for the {family} on "
                        f"{target.kind.name}")


def median_shape(family: Family) -> Tuple[int, int, int, int]:
    """The shape of median flop (by probability) of the family; for an axis of any size
    without a trace, 256 (only the generic kernel's tiling depends on it)."""
    if not family.enumerable:
        return tuple(d.values[len(d.values) // 2] if d.values else 256 for d in family.dims)
    ranked = sorted(family.probabilities(), key=lambda t: family.workload(t[0]).flop)
    acc = 0.0
    for shape, p in ranked:
        acc += p
        if acc >= 0.5:
            return shape
    return ranked[-1][0]


def _placeholders(family: Family, size_vars):
    """TE placeholders A and B of the family, ``size_vars[axis]`` for every varying axis."""
    from tvm import te  # noqa: PLC0415

    a_shape, b_shape = family.operand_shapes(size_vars)
    return (te.placeholder(a_shape, family.dtype, name="A"),
            te.placeholder(b_shape, family.dtype, name="B"))


def family_granules(family: Family, template: Optional[str] = None) -> Dict[str, int]:
    """{varying axis: granule} of a family's bucket kernels made by ``template``: every size
    of the axis in the family is a multiple of it, where the template's schedule takes
    extents ``g * t`` (``Template.granular``); else (and for the generic kernel) all 1."""
    granular = template is not None and get_template(template).granular
    return {a: family.granule(a) if granular else 1 for a in family.varying}


def symbolic_func(family: Family, kernel: LibKernel, target, *, granular: bool = True):
    """The scheduled PrimFunc of a library kernel: symbolic in the family's varying axes.
    A bucket kernel (``granular``) takes an axis whose sizes are all multiples of a granule g
    as ``g * t`` (its size var t counts granules): tiles that divide g need no padding, and
    its dispatch branch binds t = size / g where g divides the size. The generic kernel takes
    every varying axis as a plain size var. Returns (func, task, [(size var, granule)])."""
    import tvm  # noqa: PLC0415
    from tvm import s_tir, te, tirx  # noqa: PLC0415

    from .ops.common import matmul_compute  # noqa: PLC0415

    granules = family_granules(family, kernel.template if granular else None)
    task = Task(family.workload(kernel.rep), target, template=kernel.template, symbolic=True,
                granules=granules)
    cfg = config_of(task, kernel)
    vars_ = {a: tirx.Var(_VAR_NAMES[a] + ("_t" if granules[a] > 1 else ""), "int32")
             for a in family.varying}
    sizes = {a: v * granules[a] if granules[a] > 1 else v for a, v in vars_.items()}
    if not task.template.schedulable:  # a kernel template writes the symbolic kernel itself
        func = task.template.make_func(task.workload, cfg, task.facts, target,
                                       sizes={a: sizes[a] for a in family.varying})
        return (task.launch(func, cfg), task,
                [(vars_[a], granules[a]) for a in family.varying])
    A, B = _placeholders(family, sizes)
    # Accumulated as the template accumulates (mma: f16 products in f32, cast at the end).
    acc = task.template.acc_dtype(task.workload) if task.template.acc_dtype else None
    tensors = task.template.compute(task.workload, cfg, A, B) \
        if task.template.family_operands else matmul_compute(task.workload, A, B, acc=acc)
    if task.template.prepare is not None:
        task.template.prepare()
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(tensors)}))
    try:
        task.template.schedule(sch, cfg, task.workload, task.facts)
    except Exception:  # noqa: BLE001
        if not any(g > 1 for g in granules.values()):
            raise
        logger.debug("tvm_ext: %s at %s: built without granules", kernel.template, kernel.rep)
        # TVM 0.27 pads some of the extents g * t and not others (tiles that divide a granule
        # and tiles that do not) only where the sizes are constants (the tensor-core schedules'
        # reverse_compute_at finds no stage pipeline): such a kernel pads every axis, as the
        # generic kernel does (the space's rules see the same: a tile that does not divide its
        # granule is padded, its C tile staged).
        return symbolic_func(family, kernel, target, granular=False)
    return (task.launch(sch.mod["main"], cfg), task,
            [(vars_[a], granules[a]) for a in family.varying])


def config_of(task: Task, kernel: LibKernel) -> ConfigEntity:
    """A library kernel's config in its task's space; TvmExtError where it does not fit."""
    if not kernel.tuned and not kernel.config:
        return task.fallback_config()
    fit = task.fit_record(ConfigEntity.from_json_dict(kernel.config))
    if fit.config is None:
        raise TvmExtError(f"library kernel of {kernel.template} at "
                          f"{'x'.join(map(str, kernel.rep))} does not fit its space: "
                          f"{'; '.join(fit.problems)}")
    return fit.config


#: A CPU family whose only varying axis is M serves each M up to this with a kernel of its
#: own shape where the default template at that shape takes no symbolic extents of this
#: family (the gemv templates, whose kernels take one M; the family's packed kernel pads M to
#: its register tile and packs the whole weight at every call).
EXACT_M = 8


def exact_templates(family: Family, target) -> List[Tuple[int, str]]:
    """(M, template) of the sizes of M that ``family``'s library serves with a kernel of that
    exact shape on the default template at that shape (``EXACT_M``); none where other axes vary or
    off the CPU."""
    if parse_target(target).kind.name != "llvm" or family.varying != ("M",):
        return []
    out = []
    for m in range(1, EXACT_M + 1):
        shape = exact_shape(family, m)
        if family.contains(shape):
            t = templates_for(family.workload(shape), parse_target(target))[0]
            if not t.symbolic or t.family_check is not None and t.family_check(family):
                out.append((m, t.name))
    return out


def exact_shape(family: Family, m: int) -> Tuple[int, int, int, int]:
    """The family's shape of M = ``m`` (a family of ``exact_templates``: only M varies)."""
    return (family.fixed("B"), m, family.fixed("N"), family.fixed("K"))


def exact_task(family: Family, m: int, template: str, target) -> Task:
    """The task of M = ``m``'s kernel of its own shape on ``template`` (``exact_templates``)."""
    return Task(family.workload(exact_shape(family, m)), target, template=template)


def _exact_funcs(library: Library, target) -> List[Tuple[int, Any]]:
    """(M, its kernel's scheduled PrimFunc) of ``exact_templates``: the library's config
    tuned for that shape, else the template's fallback (a config that does not fit this
    target's space is set aside, with the reason, for the fallback)."""
    out = []
    for m, name in exact_templates(library.family, target):
        task = exact_task(library.family, m, name, target)
        config = task.fallback_config()
        kernel = library.exact_kernel(m, name)
        if kernel is not None:
            try:
                config = config_of(task, kernel)
            except TvmExtError as err:
                library.set_aside[-m] = f"M = {m}'s own kernel: {err} (its fallback runs)"
        out.append((m, task.instantiate(config)["main"]))
    return out


def _library_func(kernels, routes, family: Family, entry: str,
                  granules: List[Dict[str, int]], exact=()):
    """One PrimFunc ``entry`` (A, B, C) whose body runs the kernel of the shape's bucket:
    each kernel for its buckets, the generic one for any other shape. ``kernels`` are the
    scheduled kernels ((func, size vars), the generic one last), ``granules[i]`` the sizes
    bucket kernel i takes a multiple of (its template's, as ``kernel_for`` sees them); each
    branch binds its kernel's size vars to the entry's and declares its buffers on the
    entry's data, so one function holds every kernel (a GPU kernel's launches are split off
    by the usual passes). ``exact``: (M, kernel) of sizes of M served by a kernel of that
    shape (``exact_templates``), ahead of the buckets."""
    import tvm  # noqa: PLC0415
    from tvm import tirx  # noqa: PLC0415
    from tvm.tirx.buffer import buffer_data  # noqa: PLC0415

    main, main_sizes = kernels[-1]
    by_axis = {a: v for a, (v, _) in zip(family.varying, main_sizes)}
    exact_conds = [by_axis["M"] == m for m, _ in exact]

    def branch(i):
        func, sizes = kernels[i]
        if i == len(kernels) - 1:
            return func.body
        stmts = [tirx.Bind(v, tirx.floordiv(by_axis[a], g) if g > 1 else by_axis[a])
                 for a, (v, g) in zip(family.varying, sizes)]
        stmts += [tirx.DeclBuffer(buf, data=buffer_data(outer))
                  for buf, outer in zip(func.params, main.params)]
        return tirx.SeqStmt(stmts + [func.body])

    def box(bounds, idx):
        # Inside the bucket, and a multiple of each granule of its kernel (a size between
        # two of a stepped range goes to the generic kernel); not a size of its own kernel.
        terms = [tvm.tirx.all(by_axis[a] >= lo, by_axis[a] <= hi)
                 for a, (lo, hi) in bounds.items()]
        terms += [tvm.tirx.Not(c) for c in exact_conds]
        terms += [tirx.floormod(by_axis[a], g) == 0 for a, g in granules[idx].items() if g > 1]
        return tvm.tirx.all(*terms) if terms else tvm.tirx.const(True, "bool")

    # One branch per kernel (a kernel's vars are bound once), taken for any of its buckets;
    # the generic kernel where no bucket holds the shape. A branch is a loop of 1 or 0 trips,
    # not an if: TVM's ThreadSync pass (which runs before the GPU kernels are split off)
    # refuses a kernel under a condition.
    boxes: Dict[int, List] = {}
    for bounds, idx in routes:
        boxes.setdefault(idx, []).append(box(bounds, idx))
    one, zero = tvm.tirx.const(1, "int32"), tvm.tirx.const(0, "int32")

    def taken(cond, stmt, i):
        return tirx.For(tirx.Var(f"take_{i}", "int32"), zero, tirx.Select(cond, one, zero),
                        tirx.ForKind.SERIAL, stmt)

    stmts, held = [], list(exact_conds)
    for (m, func), cond in zip(exact, exact_conds):
        decls = [tirx.DeclBuffer(buf, data=buffer_data(outer))
                 for buf, outer in zip(func.params, main.params)]
        stmts.append(taken(cond, tirx.SeqStmt(decls + [func.body]), f"m{m}"))
    for idx, conds in boxes.items():
        cond = tvm.tirx.any(*conds) if len(conds) > 1 else conds[0]
        held.append(cond)
        stmts.append(taken(cond, branch(idx), idx))
    if held:
        stmts.append(taken(tvm.tirx.Not(tvm.tirx.any(*held) if len(held) > 1 else held[0]),
                           branch(len(kernels) - 1), len(kernels) - 1))
        body = tirx.SeqStmt(stmts)
    else:
        body = branch(len(kernels) - 1)
    out = main.with_body(body).with_attr("global_symbol", entry)
    # A kernel that carries a target of its own (wgmma's sm_90a) gives it to the one function
    # that holds them all: the others build for it too (sm_90a runs on the sm_90 parts).
    own = [f.attrs["target"] for f, _ in kernels if f.attrs is not None and "target" in f.attrs]
    return out.with_attr("target", own[0]) if own else out


class FamilyModule:
    """A family's compiled library: ``lib(a, b, c)`` runs any shape (TVM tensors),
    ``lib.run(a, b)`` numpy in and out, ``lib.export_library(path)`` writes one ``.so``."""

    def __init__(self, library: Library, executable, target, entry="main"):
        self.library, self.executable, self.target, self.entry = library, executable, target, \
            entry
        self.threads = use_host_cores() if target.kind.name == "llvm" else None
        # {M: template} of the sizes of M its own kernels serve (``exact_templates``)
        self.exact = dict(exact_templates(library.family, target))

    @property
    def module(self):
        return self.executable.mod

    @property
    def device(self):
        import tvm  # noqa: PLC0415
        return tvm.cuda(0) if self.target.kind.name == "cuda" else tvm.cpu(0)

    def __call__(self, *tensors):
        self.module[self.entry](*tensors)

    def kernel_for(self, shape: Sequence[int]) -> int:
        """Index of the kernel the dispatcher runs for a shape (len(kernels): generic; -1: a
        kernel of the shape's own, ``exact_templates``)."""
        shape = tuple(shape) if len(shape) == 4 else (1, *shape)
        if shape[1] in self.exact:
            return -1
        for bounds, idx in self.library.routes:
            granules = family_granules(self.library.family, self.library.kernels[idx].template)
            on_grid = all(shape[AXES.index(a)] % g == 0 for a, g in granules.items())
            if on_grid and all(lo <= shape[AXES.index(a)] <= hi
                               for a, (lo, hi) in bounds.items()):
                return len(self.library.kernels) if idx in self.library.set_aside else idx
        return len(self.library.kernels)

    def run(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        fam = self.library.family
        wl = _workload_of_arrays(fam, a.shape, b.shape)
        dev = self.device
        out = host_empty(wl.out_shape, fam.out_dtype, dev)
        self(host_tensor(a, dev), host_tensor(b, dev), out)
        return out.numpy()

    def export_library(self, path) -> None:
        self.executable.export_library(str(path))

    def describe(self) -> List[str]:
        return describe_library(self.library)


def _workload_of_arrays(family: Family, a_shape, b_shape) -> Workload:
    lead = 0 if family.op == "dense" else 1
    bsz = 1 if family.op == "dense" else a_shape[0]
    M, K = (a_shape[lead + 1], a_shape[lead]) if family.layout[0] == "T" else \
        (a_shape[lead], a_shape[lead + 1])
    N = b_shape[lead] if family.layout[1] == "T" else b_shape[lead + 1]
    return family.workload((bsz, M, N, K))


def generic_kernel(family: Family, target, template: Optional[str] = None) -> LibKernel:
    """The family's generic kernel: the template's fallback config for the median shape; for
    a template whose kernels need the family's sizes (wgmma: multiples of 64), the first
    template whose kernels take any size."""
    t = family_template(family, target, template)
    if t.family_check is not None:
        t = family_template(family, target, any_size=True)
    return LibKernel(t.name, median_shape(family), {}, tuned=False)


def untuned_library(family: Family, target, template: Optional[str] = None) -> Library:
    """A library with the generic kernel alone (a family nothing was tuned for)."""
    return Library(family, target_str(parse_target(target)), [], [],
                   generic_kernel(family, target, template))


def library_func(library: Library, target, entry: str = "main"):
    """(the library's PrimFunc ``entry``: every kernel and the dispatch, the pass options its
    templates need)."""
    pass_config, funcs, index, granules = {}, [], {}, []
    for i, k in enumerate(library.kernels):
        try:
            func, task, sizes = symbolic_func(library.family, k, target)
        except TvmExtError as err:  # its config does not fit this target's space
            library.set_aside[i] = f"kernel {i} ({k.template}, tuned at " \
                                   f"{'x'.join(map(str, k.rep))}): {err}"
            continue
        index[i] = len(funcs)
        funcs.append((func, sizes))
        granules.append(family_granules(library.family, k.template))
        pass_config.update(task.template.pass_config)
    func, task, sizes = symbolic_func(library.family, library.generic, target, granular=False)
    funcs.append((func, sizes))
    pass_config.update(task.template.pass_config)
    # A bucket whose kernel was set aside goes to the generic kernel (no route).
    routes = [(bounds, index[i]) for bounds, i in library.routes if i in index]
    exact = _exact_funcs(library, target)
    return _library_func(funcs, routes, library.family, entry, granules, exact), pass_config


def compile_library(library: Library, target=None, *, entry: str = "main") -> FamilyModule:
    """Compile a library (its kernels, the generic one and the dispatcher) into one module."""
    import tvm  # noqa: PLC0415

    target = parse_target(target or library.target)
    func, pass_config = library_func(library, target, entry)
    mod = tvm.IRModule({entry: func})
    return FamilyModule(library, compile_module(mod, target, pass_config), target, entry)


def build_family(family: Family, target=None, logs=None, *, template: Optional[str] = None,
                 entry: str = "main") -> FamilyModule:
    """The family's library from ``logs`` (a path or paths; None: those of the current
    ``apply_history_best`` context), else the generic kernel alone."""
    target = parse_target(target)
    if logs is None:
        ctx = current()
        paths = list(getattr(ctx, "paths", [])) if ctx is not None else []
    else:
        paths = [logs] if isinstance(logs, (str, os.PathLike)) else list(logs)
    library = library_for(paths, family, target)
    if library is None:
        logger.info("tvm_ext: no library of the %s in %s: the generic kernel alone", family,
                    ", ".join(map(str, paths)) or "no log")
        library = untuned_library(family, target, template)
    return compile_library(library, target, entry=entry)


def library_in_context(family: Family, target) -> Library:
    """The library of ``family`` in the current ``apply_history_best`` context's logs, else
    the generic kernel alone; the context's report lists it."""
    ctx = current()
    paths = list(ctx.paths) if ctx is not None else []
    library = library_for(paths, family, target) or untuned_library(family, target)
    if ctx is not None:
        ctx.report.families.append("\n".join(describe_library(library)))
    return library


def describe_library(lib: Library) -> List[str]:
    """The family, each bucket's kernel, and the generic kernel, one line each."""
    lines = [f"{lib.family}: {len(lib.kernels)} bucket kernels + generic"]
    for bounds, idx in lib.routes:
        k = lib.kernels[idx]
        runs = "generic: kernel set aside" if idx in lib.set_aside else f"kernel {idx}"
        lines.append(f"  {Bucket(bounds, [], 0, k.rep).describe():<34} -> {runs} "
                     f"({k.template}, {k.how} at "
                     f"{'x'.join(map(str, k.rep))})")
    g = lib.generic
    lines.append(f"  {'any other shape':<34} -> generic ({g.template}, "
                 f"{'tuned' if g.tuned else 'fallback'} config for "
                 f"{'x'.join(map(str, g.rep))}, symbolic in {', '.join(lib.family.varying)})")
    for m, name in exact_templates(lib.family, lib.target):
        k = lib.exact_kernel(m, name)
        how = "its fallback" if k is None or -m in lib.set_aside else \
            f"{k.how} config" + (f", {k.cost * 1e3:.4f} ms" if k.cost else "")
        lines.append(f"  M = {m:<30} -> {name} ({how}; that shape's own, ahead of the buckets)")
    lines += [f"  set aside: {why}" for why in lib.set_aside.values()]
    return lines


# ---- timing a kernel for symbolic extents, in this process ----

def prepare_shapes(target, family: Family, shapes, *, seed=0):
    """Inputs, an empty output and the numerics oracle of each shape, on the target's device:
    made once, for any number of kernels to be checked and timed at those shapes."""
    import tvm  # noqa: PLC0415

    from .measure.check import seeded_data  # noqa: PLC0415

    dev = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    out = []
    for i, shape in enumerate(shapes):
        wl = family.workload(shape)
        (a, b), oracle = seeded_data(wl, seed + i)
        out.append((wl, (host_tensor(a, dev), host_tensor(b, dev),
                         host_empty(wl.out_shape, wl.out_dtype, dev)), oracle))
    # The references ran on numpy's BLAS threads, which spin for a while after a call: on a
    # small CPU they would take the cores from the first kernels timed.
    time.sleep(0.3)
    return dev, out


def time_shapes(executable, target, family: Family, shapes, *, prepared=None, repeat=3,
                min_repeat_ms=20, check=True, seed=0) -> List[float]:
    """Median seconds per call of the library's entry at each shape (numerics checked first,
    every shape, then the timings); ``prepared``: ``prepare_shapes``'s answer, reused."""
    from .measure.timing import time_module  # noqa: PLC0415

    dev, cases = prepared or prepare_shapes(target, family, shapes, seed=seed)
    main = executable.mod["main"]
    if check:
        for wl, args, oracle in cases:
            main(*args)
            wrong = oracle(args[2].numpy())
            if wrong:
                raise TvmExtError(f"family kernel is wrong for {wl}: {wrong}")
    out = []
    for wl, args, _ in cases:
        costs = time_module(executable.mod, dev, args, timing="evaluator",
                            number=max(1, int(2e8 // max(wl.flop, 1))), repeat=repeat,
                            min_repeat_ms=min_repeat_ms)
        out.append(float(np.median(costs)))
    return out


# ---- tuning ----

@dataclass
class FamilyReport:
    buckets: List[Bucket]
    tuned: List[Tuple[int, ...]]  # representatives tuned
    candidates: int
    curve: List[float]  # expected time (s) with 1, 2, ... kernels
    routes: List[Tuple[str, int]]
    tune_seconds: float = 0.0
    rerank_seconds: float = 0.0
    exact: List[LibKernel] = field(default_factory=list)  # tuned kernels of their own shape

    def lines(self) -> List[str]:
        out = [f"{len(self.buckets)} buckets; {len(self.tuned)} representatives tuned; "
               f"{self.candidates} candidate kernels timed at every bucket",
               f"tuning {self.tune_seconds:.1f} s, re-ranking {self.rerank_seconds:.1f} s"]
        if self.exact:
            out.append("kernels of their own shape, tuned: " + ", ".join(
                f"M = {k.rep[1]} {k.template} {k.cost * 1e3:.4f} ms" for k in self.exact))
        if self.curve:
            base = self.curve[0]
            out.append("expected time by kernels in the library: " + ", ".join(
                f"{i + 1}: {t * 1e3:.3f} ms ({base / t:.2f}x)" for i, t in
                enumerate(self.curve)))
        return out


def pick_kernels(times: np.ndarray, weights: np.ndarray, max_kernels: int,
                 min_gain: float = 0.05):
    """Greedy choice of at most ``max_kernels`` candidates (rows of ``times``, seconds at each
    bucket) minimising sum_b weights[b] * min over picks of times[c, b]. After the first pick,
    a candidate is taken only if it makes some bucket at least ``min_gain`` faster (a kernel
    that buys less than that everywhere is noise, not speed); among those, the one that
    lowers the expected time the most. Returns (picks, expected time after each pick)."""
    picks: List[int] = []
    best = np.full(times.shape[1], np.inf)
    curve = []
    for _ in range(min(max_kernels, times.shape[0])):
        totals = []
        for c in range(times.shape[0]):
            gains = times[c] < best * (1 - min_gain) if picks else np.ones(1, bool)
            useful = c not in picks and bool(gains.any())
            totals.append((np.minimum(best, times[c]) * weights).sum() if useful else np.inf)
        c = int(np.argmin(totals))
        if not np.isfinite(totals[c]):
            break  # no candidate makes any bucket faster: another kernel buys nothing
        picks.append(c)
        best = np.minimum(best, times[c])
        curve.append(float(totals[c]))
    return picks, curve


def heavy_proposals(family: Family, buckets: Sequence[Bucket], task_at, *, top: int = 3,
                    proposed: int = 2) -> List[LibKernel]:
    """The proposer's ``top`` first configs at each of the ``proposed`` buckets that weigh the
    most (flops x shapes), at the bucket's representative and at its largest member: a
    bucket's time is mostly its largest shapes' (flop-weighted), where tiles that overhang at
    the representative can win. A config proposed at one of these shapes is not proposed
    again at another. ``task_at(shape)`` is the task of the kernel that runs."""
    from .propose import propose  # noqa: PLC0415

    out: List[LibKernel] = []
    heavy = sorted(buckets, key=lambda b: -b.scale * family.workload(b.rep).flop)
    seen = set()
    for b in heavy[:proposed]:
        biggest = max(b.shapes, key=lambda s: family.workload(s).flop)
        for shape in dict.fromkeys([b.rep, biggest]):
            task = task_at(shape)
            fallback = task.space.fallback_index()
            # The fallback is no proposal (the proposer puts it first): a representative's
            # is a candidate already, the largest member's joins as that shape's fallback.
            picks = ([] if shape == b.rep else [(fallback, "")]) + [
                (idx, "proposed") for idx in propose(task.space, top, exclude=[fallback])]
            for idx, source in picks:
                config = task.config(idx).to_json_dict()
                key = json.dumps(config["entity"], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append(LibKernel(task.template.name, shape, config, tuned=False,
                                         source=source))
    return out


def _pick_bucket_kernels(family: Family, target, buckets, rep_tasks, records, name: str,
                         task_at, generic: LibKernel, *, top: int, proposed: int,
                         max_kernels: int, seed: int, say, log):
    """(kernels, routes, expected time after each pick, candidates timed): the candidates
    (the ``top`` best configs of each representative, its fallback, ``heavy_proposals``) timed
    at every bucket's representative as they will run, and ``pick_kernels``'s choice. No
    bucket: no kernel."""
    if not buckets:
        return [], [], [], 0
    cands: List[LibKernel] = []
    seen = set()

    def add(k: LibKernel) -> None:  # once per (shape, config)
        key = (k.rep, json.dumps(k.config["entity"], sort_keys=True))
        if key not in seen:
            seen.add(key)
            cands.append(k)

    for shape in rep_tasks:
        for r in rec.ranked_for(records, family.workload(shape), target)[:top]:
            if r.task_name == name:
                add(LibKernel(name, shape, r.config.to_json_dict(), True, r.result.mean))
    # And each representative's fallback in the family's space (the proposer's first for the
    # kernel that runs), which a few trials of a space this large may not have reached.
    if cands:
        for shape, task in rep_tasks.items():
            add(LibKernel(name, shape, task.fallback_config().to_json_dict(), tuned=False))
    # And the proposer's first configs at the buckets that weigh the most (flops x shapes):
    # they decide the family's time, and no representative may be near them.
    if cands:
        for k in heavy_proposals(family, buckets, task_at, top=top, proposed=proposed):
            add(k)
    if not cands:
        raise TvmExtError(f"{family}: no representative has a valid measured config "
                          f"(see {log})")
    times = np.full((len(cands), len(buckets)), np.inf)
    rep_shapes = [b.rep for b in buckets]
    prepared = prepare_shapes(target, family, rep_shapes, seed=seed)
    for ci, k in enumerate(cands):
        try:
            # As it will run: a bucket kernel (granules, the dispatch) beside the generic one.
            lib = compile_library(Library(family, target_str(target), [k],
                                          [(b.bounds, 0) for b in buckets], generic), target)
            times[ci] = time_shapes(lib.executable, target, family, rep_shapes,
                                    prepared=prepared, repeat=3, min_repeat_ms=10)
        except Exception as err:  # noqa: BLE001  (a candidate that fails is not picked)
            say(f"  candidate {ci} ({'x'.join(map(str, k.rep))}) dropped: "
                f"{str(err).strip().splitlines()[-1] if str(err).strip() else err!r}")
    weights = np.array([b.scale for b in buckets])  # a bucket's time = its rep's x scale
    picks, curve = pick_kernels(times, weights, max_kernels)
    if not picks or not np.isfinite(curve[0]):
        raise TvmExtError(f"{family}: no candidate kernel ran at every bucket")
    routes = []
    for bi, b in enumerate(buckets):
        idx = int(np.argmin([times[c, bi] for c in picks]))
        routes.append((b.bounds, idx))
    return [cands[c] for c in picks], routes, curve, len(cands)


def tuned_buckets(family: Family, target) -> Tuple[List[Bucket], List[Tuple[int, str]]]:
    """(the buckets a bucket kernel serves, ``exact_templates``): a bucket every shape of which
    runs a kernel of its own shape is neither tuned nor routed."""
    exact = exact_templates(family, target)
    served = {m for m, _ in exact}
    buckets = [b for b in make_buckets(family) if not all(s[1] in served for s in b.shapes)]
    return buckets, exact


def tune_family(family: Family, target, log, *, trials: int, max_kernels: int = 8,
                tuner: str = "xgb", template: Optional[str] = None, top: int = 3,
                proposed: int = 2, measure_options=None, seed: int = 0, progress=None):
    """Tune a family into a library (see the module doc); the representatives' records and
    the library line are appended to ``log``. Returns (Library, FamilyReport). The
    candidates are the ``top`` best configs of each representative, its fallback, and the
    proposer's ``top`` first configs at each of the ``proposed`` heaviest buckets
    (``heavy_proposals``). The sizes of M served by a kernel of their own shape
    (``exact_templates``) are tuned as that shape, ``trials`` each; the library keeps each
    one's best measured config."""
    from .session import make_measurer, tune_task  # noqa: PLC0415

    say = progress or (lambda msg: logger.info("tvm_ext: %s", msg))
    target = parse_target(target)
    if not family.enumerable:
        raise WorkloadError(f"{family}: an axis of any size (?) needs a shape trace to be tuned")
    if max_kernels < 1:
        raise TvmExtError(f"--max-kernels must be at least 1, got {max_kernels}")
    t = family_template(family, target, template)
    rec.check_appendable(log)
    buckets, exact = tuned_buckets(family, target)
    by_flop = sorted({b.rep for b in buckets}, key=lambda s: family.workload(s).flop)
    reps = spread(by_flop, max_kernels)
    say(f"{family}: {len(buckets)} buckets, tuning {len(reps)} representatives with "
        f"{trials} trials each ({t.name})" + (
            f"; M = {', '.join(str(m) for m, _ in exact)} on kernels of their own shape "
            f"({', '.join(dict.fromkeys(n for _, n in exact))}), {trials} trials each"
            if exact else ""))
    start = time.time()
    measurer = make_measurer(target, measure_options)
    # Tuned in the space of the kernel that will run: symbolic extents (whose rules can
    # differ: a tensor-core kernel of symbolic extents stages its C tile where it pads).
    granules = family_granules(family, t.name)

    def task_at(shape):
        return Task(family.workload(shape), target, template=t.name, symbolic=True,
                    granules=granules)

    rep_tasks = {shape: task_at(shape) for shape in reps}
    exact_tasks = [exact_task(family, m, name, target) for m, name in exact]
    labelled = [(task, "") for task in rep_tasks.values()] + \
        [(task, f" ({task.name})") for task in exact_tasks]
    try:
        for i, (task, label) in enumerate(labelled):
            s = tune_task(task, log, trials=trials, tuner=tuner, seed=seed + i, resume=True,
                          transfer=[log], measurer=measurer)
            say(f"  {task.workload}{label}: best {s.best_cost * 1e3:.3f} ms "
                f"({s.best_gflops:.1f} GFLOP/s)")
    finally:
        if hasattr(measurer, "close"):
            measurer.close()
    tune_seconds = time.time() - start
    records = rec.load(log)
    own = []  # each exact size's best measured config (none valid: its fallback runs)
    for task in exact_tasks:
        best = [r for r in rec.ranked_for(records, task.workload, target)
                if r.task_name == task.name][:1]
        own += [LibKernel(task.name, exact_shape(family, task.workload.M),
                          r.config.to_json_dict(), True, r.result.mean) for r in best]
    generic = generic_kernel(family, target, t.name)
    start = time.time()
    kernels, routes, curve, n_cands = _pick_bucket_kernels(
        family, target, buckets, rep_tasks, records, t.name, task_at, generic, top=top,
        proposed=proposed, max_kernels=max_kernels, seed=seed, say=say, log=log)
    rerank_seconds = time.time() - start
    library = Library(family, target_str(target), kernels, routes, generic, curve, exact=own)
    rec.append(log, [json.dumps(library.to_json())])
    report = FamilyReport(buckets, reps, n_cands, curve,
                          [(b.describe(), i) for b, (_, i) in zip(buckets, routes)],
                          tune_seconds, rerank_seconds, own)
    return library, report
