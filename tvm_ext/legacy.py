"""Records written by TVM <= 0.19 AutoTVM (TopHub logs included), replayed by what they meant.

A record's knobs mean what the template of its TVM version made of them. Our templates keep
TOPI's knob names, but not always TOPI's meanings, so a record is never applied by name alone:
``translate(record, space)`` reads it in its version (``Record.tvm_version``; without one, by
its knobs) and says

- ``as_is``: its knobs are ours (names, kinds, arities) and mean the same: a record of ours
  (tvm_version 0.20.0 or later: written by tvm_ext), or a TOPI record whose knobs and values
  are ours one for one;
- ``translated``: ``values`` are our knob values, one for every knob of ``space``, for the same
  tiling (TOPI's missing knobs get the value that is TOPI's behaviour, e.g. no vector loads);
- ``set_aside``: the meaning has no equivalent in our template, or lies outside ``space`` or
  its rules for this target (``reason`` says which). A different kernel is never built under
  the record's name.

A TOPI record that applies (as is or translated) is a valid config of ``space``. A record of
ours is checked only for its knobs' names, kinds and arities: knobs added since it was written
are completed from the space file's defaults by ``Task``, which also checks its values.

The decision is by meaning only; nothing is built. Knob meanings, from TOPI's source at the tags
v0.7.0 ... v0.19.0 and at the commits where templates appeared or changed (the ``.dev`` versions
between), ``python/tvm/topi/`` (``topi/python/topi/`` before mid-2020). AutoTVM wrote
``tvm_version`` from 0.7.dev0 (the strategy rewrite that gave templates these names) and was
removed in 0.20.dev0; a ``.dev`` version sorts before its release (0.8.dev0 < 0.8.0) and
ranges are inclusive. M, N, K: C[M, N] = A[M, K] B[K, N]; split sizes outermost first.

batch_matmul.cuda, 0.7.dev1 (tunable from June 2020) - 0.20.dev0, ``cuda/batch_matmul.py``
    (2-argument workload until 0.8.dev0; layouts from 0.8): tile_y [by, ty, yi] over M,
    tile_x [bx, tx, xi] over N (threadIdx.y / .x), tile_k [ko, ki] (shared tiles of ki per ko,
    registers per k), auto_unroll_max_step {8, 16, 32, 64}, unroll_explicit. Ours, the same, with
    vec 1, offset 0, double_buffer 0, kmajor 0, interleave 1 (TOPI: scalar shared loads, no
    padding, one buffer). TOPI put the unroll pragma on the inner loops, ours on the block's.
dense_large_batch.cuda, 0.7.dev0 - 0.8.dev0 (then ``dense_large_batch.gpu``), ``cuda/dense.py``:
    tile_x [bx, vx, tx, xi] over M (threadIdx.x), tile_y [by, vy, ty, yi] over N (threadIdx.y),
    vthreads outside the threads, tile_k [ko, kt, ki] (shared tile kt*ki, double-buffered).
    Ours: tile_y [-1, tx, vx*xi] with interleave_y = vx (our interleave is that vthread split),
    tile_x [-1, ty, vy*yi] with interleave_x = vy, tile_k [-1, kt*ki], double_buffer 1, vec 1,
    offset 0, kmajor 0; TOPI had no unroll pragma (auto_unroll_max_step 0; it unrolled kt
    explicitly, which is no knob of ours). Our warp lanes run along N, TOPI's along M.
dense_small_batch.cuda, 0.7.dev0 - 0.8.dev0 (then ``.gpu``), ``cuda/dense.py``: tile_k [ko, kf]:
    one output per block (blockIdx.y = M, .x = N), kf threads reduce k = ko*kf + tx by rfactor.
    Ours: tile_k [-1, kf, 1] (vec 1), tile_x [-1, 1], tile_y [-1, 1].
dense_pack.x86, ``x86/dense.py``: tile_y [yt, yo, yi], tile_x [xt, xo, xi] (xi = packed weight
    panel, vectorised), tile_k [ko, ki] (ki unrolled), a yi x xi accumulator tile: ours.
    0.7.dev0 - 0.8.dev0: no tile_inner, all yi rows per k step: ours [-1, yi].
    0.8.dev0 (Feb 2021) - 0.20.dev0: tile_inner [., r] splits the rows per k step when r > 1;
    r = 1 kept all yi rows per k step (ours [-1, yi]; our r = 1 is one row); r >= yi is all rows;
    an r that does not divide yi gave a ragged last group (set aside). TOPI packed the weight
    before the kernel (ahead of time in Relay; a placeholder while tuning from 0.8), ours inside.
batch_matmul.x86, 0.7.dev0 - 0.20.dev0, ``x86/batch_matmul.py``: tile_y [yo, yi], tile_x [xo, xi]
    give one yi x xi output tile per parallel task, tile_k [ko, ki] an rfactor whose ki partial
    sums are one vector along K. Ours vectorises N over packed B with ki unrolled: no config of
    ours is that kernel. Always set aside.
dense_tensorcore.cuda 0.7.dev0 (March 2020) - 0.20.dev0 and batch_matmul_tensorcore.cuda
    0.8.dev0 (Jan 2021) - 0.20.dev0, ``cuda/dense_tensorcore.py``, ``batch_matmul_tensorcore.py``
    (NT only): block_row_warps, block_col_warps, warp_row_tiles, warp_col_tiles, chunk, offset,
    offsetCS, vec, wmma_m as ours when wmma_m = 16; wmma_m 8 / 32 (8x32x16, 32x8x16 fragments)
    have no equivalent (TVM 0.27 registers only 16x16x16 wmma). Grid axes and warp-to-thread
    binding differ (TOPI: M on blockIdx.x, warps on threadIdx.y/z), not the tiling.

Not named like ours, so not read: ``dense_*_batch.gpu``, ``matmul_default.gpu``,
``dense_nopack.x86``, conv2d and other operators (``record.load_log`` sets those aside).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from .errors import SpaceError
from .record import Record
from .space import ConfigSpace
from .workload import Workload

AS_IS, TRANSLATED, SET_ASIDE = "as_is", "translated", "set_aside"

Version = Tuple[int, int, int]  # (major, minor, patch); patch -1 for a .dev version

LAST_AUTOTVM: Version = (0, 20, -1)  # 0.20.dev0: AutoTVM was removed (Feb 2025)


@dataclass(frozen=True)
class Translation:
    """How a record applies: ``how`` is "as_is", "translated" or "set_aside"; ``values`` are our
    knob values ({name: plain value}, every knob of the space) for a translated record;
    ``reason`` says what the record meant, or why it cannot be applied."""

    how: str
    values: Optional[Dict[str, Any]]
    reason: str

    @property
    def applies(self) -> bool:
        return self.how != SET_ASIDE


_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(.*)$")


def version_key(text: Optional[str]) -> Optional[Version]:
    """'0.7.dev1' -> (0, 7, -1), '0.19.0' -> (0, 19, 0), '0.27.0.post1' -> (0, 27, 0);
    None for a missing or unreadable version."""
    m = _VERSION_RE.match(str(text)) if text is not None else None
    if not m:
        return None
    patch = int(m.group(3) or 0)
    if "dev" in m.group(4):  # before its release: 0.8.dev0 and 0.8.0.dev5 precede 0.8.0
        patch -= 1
    return int(m.group(1)), int(m.group(2)), patch


def _v(text: str) -> Version:
    key = version_key(text)
    assert key is not None, text
    return key


# ---- the knob layouts TVM wrote, and what they mean in our knobs --------------------------

# (name, kind, split arity or 0, axis the split tiles or "")
KnobSpec = Tuple[str, str, int, str]
Mapper = Callable[[Mapping[str, Any], Workload], Union[Dict[str, Any], str]]


@dataclass(frozen=True)
class Layout:
    """The knobs one TVM version range wrote for a template, and ``to_ours``: their resolved
    values ({name: sizes with the outer one computed, or value}) -> our knob values, or a
    string saying why they have no equivalent."""

    template: str
    first: str
    last: str
    source: str  # the TOPI file read
    knobs: Tuple[KnobSpec, ...]
    meaning: str
    to_ours: Mapper
    layouts: Tuple[str, ...] = ("NN", "NT", "TN", "TT")

    def covers(self, key: Version) -> bool:
        return _v(self.first) <= key <= _v(self.last)

    def matches(self, entities: Mapping[str, Any]) -> bool:
        """The record has exactly these knobs, of these kinds and arities."""
        if set(entities) != {k[0] for k in self.knobs}:
            return False
        for name, kind, arity, _ in self.knobs:
            e = entities[name]
            if e.kind != kind or (kind == "sp" and len(e.size) != arity):
                return False
        return True

    @property
    def span(self) -> str:
        return f"{self.first} - {self.last}"


def _knobs_text(knobs) -> str:
    return ", ".join(f"{n} {'%d-way split' % a if k == 'sp' else k}" for n, k, a, _ in knobs)


# SIMT knobs TOPI's CUDA templates did not have, at the value that is TOPI's behaviour.
_TOPI_SIMT = {"vec": 1, "offset": 0, "double_buffer": 0, "kmajor": 0, "interleave_y": 1,
              "interleave_x": 1}


def _bmm_cuda(k, wl):
    return {"tile_y": [-1] + k["tile_y"][1:], "tile_x": [-1] + k["tile_x"][1:],
            "tile_k": [-1, k["tile_k"][1]],
            "auto_unroll_max_step": k["auto_unroll_max_step"],
            "unroll_explicit": k["unroll_explicit"], **_TOPI_SIMT}


def _dense_large_batch(k, wl):
    _, vx, tx, xi = k["tile_x"]  # over M
    _, vy, ty, yi = k["tile_y"]  # over N
    _, kt, ki = k["tile_k"]
    return {**_TOPI_SIMT,
            "tile_y": [-1, tx, vx * xi], "interleave_y": vx,
            "tile_x": [-1, ty, vy * yi], "interleave_x": vy,
            "tile_k": [-1, kt * ki], "double_buffer": 1,
            "auto_unroll_max_step": 0, "unroll_explicit": 1}


def _dense_small_batch(k, wl):  # (TOPI's threads along K on threadIdx.x: coalesce_n 0)
    return {"tile_k": [-1, k["tile_k"][1], 1], "tile_x": [-1, 1], "tile_y": [-1, 1],
            "coalesce_n": 0}


def _dense_pack_rows(k, wl):
    return {"tile_y": [-1] + k["tile_y"][1:], "tile_x": [-1] + k["tile_x"][1:],
            "tile_k": [-1, k["tile_k"][1]], "tile_inner": [-1, k["tile_y"][2]],
            "nt_store": 0}


def _dense_pack_inner(k, wl):
    yi, r = k["tile_y"][2], k["tile_inner"][1]
    out = _dense_pack_rows(k, wl)
    if 1 < r < yi:
        if yi % r:
            return (f"tile_inner {r} cut the {yi} register rows into groups of {r} with a "
                    f"ragged last one; our tile_inner must divide tile_y[-1]")
        out["tile_inner"] = [-1, r]
    return out


def _bmm_x86(k, wl):
    yi, xi, ki = k["tile_y"][1], k["tile_x"][1], k["tile_k"][1]
    return (f"its template summed k in vectors of tile_k[-1] = {ki} lanes (rfactor) over a "
            f"{yi} x {xi} output tile per parallel task; ours vectorises N over packed B and "
            "unrolls ki: no config of ours is that kernel")


_TC_KNOBS = ("block_row_warps", "block_col_warps", "warp_row_tiles", "warp_col_tiles", "chunk",
             "offset", "offsetCS", "vec", "wmma_m")


def _tensorcore(k, wl):
    if k["wmma_m"] != 16:
        shape = {8: "8x32x16", 32: "32x8x16"}.get(k["wmma_m"], f"wmma_m = {k['wmma_m']}")
        return (f"wmma_m = {k['wmma_m']} chose the {shape} fragment; TVM 0.27 has only the "
                "16x16x16 wmma intrinsics, so no template of ours builds it")
    return {name: k[name] for name in _TC_KNOBS}


def _sp(name, n, axis):
    return (name, "sp", n, axis)


def _ot(name):
    return (name, "ot", 0, "")


_BMM_CUDA_KNOBS = (_sp("tile_y", 3, "M"), _sp("tile_x", 3, "N"), _sp("tile_k", 2, "K"),
                   _ot("auto_unroll_max_step"), _ot("unroll_explicit"))
_DENSE_PACK_KNOBS = (_sp("tile_y", 3, "M"), _sp("tile_x", 3, "N"), _sp("tile_k", 2, "K"))
_TC = tuple(_ot(n) for n in _TC_KNOBS)
_TOPI = "python/tvm/topi/"

LEGACY: Dict[str, Tuple[Layout, ...]] = {
    "batch_matmul.cuda": (
        Layout("batch_matmul.cuda", "0.7.dev0", "0.20.dev0", _TOPI + "cuda/batch_matmul.py",
               _BMM_CUDA_KNOBS,
               "tile_y [by, ty, yi] over M, tile_x [bx, tx, xi] over N, tile_k [ko, ki] and the "
               "unroll knobs are ours; no vector loads, padding or double buffer (vec 1, "
               "offset 0, double_buffer 0, kmajor 0, interleave 1)", _bmm_cuda),),
    "dense_large_batch.cuda": (
        Layout("dense_large_batch.cuda", "0.7.dev0", "0.8.dev0", _TOPI + "cuda/dense.py",
               (_sp("tile_x", 4, "M"), _sp("tile_y", 4, "N"), _sp("tile_k", 3, "K")),
               "tile_x [bx, vthread, tx, xi] over M -> tile_y [-1, tx, vthread * xi] with "
               "interleave_y = vthread; tile_y [by, vthread, ty, yi] over N -> tile_x "
               "[-1, ty, vthread * yi] with interleave_x = vthread; tile_k [ko, kt, ki] -> "
               "[-1, kt * ki]; double-buffered scalar shared loads, no unroll pragma",
               _dense_large_batch, ("NT",)),),
    "dense_small_batch.cuda": (
        Layout("dense_small_batch.cuda", "0.7.dev0", "0.8.dev0", _TOPI + "cuda/dense.py",
               (_sp("tile_k", 2, "K"),),
               "tile_k [ko, kf]: kf threads reduce K for one output per block -> tile_k "
               "[-1, kf, 1], tile_x [-1, 1], tile_y [-1, 1]", _dense_small_batch, ("NT",)),),
    "dense_pack.x86": (
        Layout("dense_pack.x86", "0.7.dev0", "0.8.dev0", _TOPI + "x86/dense.py",
               _DENSE_PACK_KNOBS,
               "tile_y, tile_x, tile_k are ours; every k step updated all yi rows "
               "(tile_inner [-1, yi]); C written by ordinary stores (nt_store 0)",
               _dense_pack_rows, ("NT",)),
        Layout("dense_pack.x86", "0.8.dev0", "0.20.dev0", _TOPI + "x86/dense.py",
               _DENSE_PACK_KNOBS + (_sp("tile_inner", 2, "M"),),
               "tile_y, tile_x, tile_k are ours; tile_inner [., r] is ours for 1 < r < yi, and "
               "all yi rows per k step for r = 1 or r >= yi; C written by ordinary stores "
               "(nt_store 0)", _dense_pack_inner, ("NT",)),),
    "batch_matmul.x86": (
        Layout("batch_matmul.x86", "0.7.dev0", "0.20.dev0", _TOPI + "x86/batch_matmul.py",
               (_sp("tile_y", 2, "M"), _sp("tile_x", 2, "N"), _sp("tile_k", 2, "K")),
               "K-vectorised rfactor kernel", _bmm_x86),),
    "dense_tensorcore.cuda": (
        Layout("dense_tensorcore.cuda", "0.7.dev0", "0.20.dev0",
               _TOPI + "cuda/dense_tensorcore.py", _TC,
               "the same knobs, the same warp and fragment tiling (16x16x16 fragments)",
               _tensorcore, ("NT",)),),
    "batch_matmul_tensorcore.cuda": (
        Layout("batch_matmul_tensorcore.cuda", "0.8.dev0", "0.20.dev0",
               _TOPI + "cuda/batch_matmul_tensorcore.py", _TC,
               "the same knobs, the same warp and fragment tiling (16x16x16 fragments)",
               _tensorcore, ("NT",)),),
}


# ---- the decision ----------------------------------------------------------------------------

def translate(record: Record, space: ConfigSpace) -> Translation:
    """How ``record`` applies to ``space`` (our template's space for the record's workload on
    the target at hand): see the module docstring. Decided by the record's TVM version (or, if
    it has none, by its knobs), never by building."""
    template, version = record.task_name, record.tvm_version
    if space.template and space.template != template:
        raise ValueError(f"translate: a {template} record needs that template's space, "
                         f"got {space.template}'s")
    entities = dict(record.config.items())
    key = version_key(version)
    layouts = LEGACY.get(template, ())
    if key is not None and key > LAST_AUTOTVM:
        return _ours(record, space, f"written by tvm_ext (TVM {version}): our knobs")
    if key is not None:
        in_range = [lay for lay in layouts if lay.covers(key)]
        if not in_range:
            spans = "; ".join(lay.span for lay in layouts)
            return _aside(f"TVM {version} had no {template} template"
                          + (f" (AutoTVM wrote it in TVM {spans})" if spans else ""))
        fitting = [lay for lay in in_range if lay.matches(entities)]
        if not fitting:
            wanted = " or ".join(f"[{_knobs_text(lay.knobs)}]" for lay in in_range)
            return _aside(f"its knobs [{_entities_text(entities)}] are not those TVM {version}'s "
                          f"{template} wrote ({wanted})")
        return _apply(fitting[-1], record, space, f"TVM {version}")
    fitting = [lay for lay in layouts if lay.matches(entities)]
    if fitting:  # no (readable) version: TVM's knob layout says which template wrote it
        lay = fitting[-1]
        return _apply(lay, record, space, f"no tvm_version, knobs of TVM {lay.span}")
    return _ours(record, space, "no tvm_version, and not TVM's knob layout: read as ours")


def _aside(reason: str) -> Translation:
    return Translation(SET_ASIDE, None, reason)


def _entities_text(entities: Mapping[str, Any]) -> str:
    return ", ".join(f"{n} {e.kind} {e.value}" for n, e in entities.items())


def _ours(record: Record, space: ConfigSpace, why: str) -> Translation:
    """A record in our own knobs: applied by name (``Task.config_of_record`` completes knobs
    added since with their defaults), provided each of its knobs is one of ``space``'s, of the
    same kind and arity; a knob the space lacks would be dropped, building another kernel."""
    for name, e in record.config.items():
        knob = space.knobs.get(name)
        if knob is None:
            return _aside(f"{why}, but it sets {name} = {e.value}, which this space of "
                          f"{record.task_name} does not have")
        if e.kind != knob.kind or (e.kind == "sp" and len(e.size) != knob.num_outputs):
            ours = f"a {knob.num_outputs}-way split" if knob.kind == "sp" else f"kind {knob.kind}"
            return _aside(f"{why}, but its {name} is {e.kind} {e.value} where ours is {ours}")
    return Translation(AS_IS, None, why)


def _axis(wl: Workload, axis: str) -> int:
    return {"M": wl.M, "N": wl.N, "K": wl.K, "B": wl.batch}[axis]


def _apply(lay: Layout, record: Record, space: ConfigSpace, label: str) -> Translation:
    wl, entities = record.workload, dict(record.config.items())
    label = f"{label} {lay.template} ({lay.source})"
    if wl.layout not in lay.layouts:
        return _aside(f"{label} computed only layout {'/'.join(lay.layouts)}, the record says "
                      f"{wl.layout}")
    vals: Dict[str, Any] = {}
    for name, kind, _, axis in lay.knobs:
        e = entities[name]
        if kind != "sp":
            vals[name] = e.value
            continue
        length, sizes = _axis(wl, axis), list(e.size)
        inner = math.prod(sizes[1:])
        if inner < 1 or length % inner or (sizes[0] != -1 and sizes[0] * inner != length):
            return _aside(f"{label}: {name} = {sizes} does not split {axis} = {length}")
        vals[name] = [length // inner] + sizes[1:]
    out = lay.to_ours(vals, wl)
    if isinstance(out, str):
        return _aside(f"{label}: {out}")
    missing = [n for n in space.knobs if n not in out]
    extra = [n for n in out if n not in space.knobs]
    if missing or extra:
        gaps = (f"this space has {', '.join(missing)}, which the record's meaning does not fix"
                if missing else f"the meaning needs {', '.join(extra)}, which this space lacks")
        return _aside(f"{label}: {gaps}")
    out = {n: out[n] for n in space.knobs}  # in the space's order
    outside = _outside(space, out)
    if outside:
        return _aside(f"{label} means {_values_text(out)}; outside this space: "
                      + "; ".join(outside))
    try:
        broken = space.violations(space.config_from_values(out, fallback=False))
    except SpaceError as err:
        broken = [str(err)]
    if broken:  # the target's rules (registers, threads, shared memory), as for our records
        return _aside(f"{label} means {_values_text(out)}, which this target's space rules "
                      f"out: {'; '.join(broken)}")
    same = set(entities) == set(space.knobs) and \
        all(entities[n] == space.entity(n, v) for n, v in out.items())
    if same:
        return Translation(AS_IS, None, f"{label}: {lay.meaning}")
    return Translation(TRANSLATED, out, f"{label}: {lay.meaning}")


def _values_text(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _outside(space: ConfigSpace, values: Mapping[str, Any]) -> List[str]:
    """The values that are not entities of their knob in ``space``, each with its range."""
    out = []
    for name, value in values.items():
        knob = space.knobs[name]
        try:
            entity = space.entity(name, value)
        except SpaceError as err:
            out.append(str(err))
            continue
        if knob.index_of(entity) is None:
            shown = [repr(e) for e in knob.entities[:8]]
            more = f", ... ({len(knob)} in all)" if len(knob) > 8 else ""
            out.append(f"{name} = {value} is not one of {', '.join(shown)}{more}")
    return out


__all__ = ["AS_IS", "LEGACY", "Layout", "SET_ASIDE", "TRANSLATED", "Translation", "translate",
           "version_key"]
