"""Spaces as data: ``tuning_spaces/<template>.json`` read and built into a ConfigSpace.

A space file is an object with ``"knobs"`` (a list, in AutoTVM's definition order), an optional
``"let"`` (an ordered object of name: expression, named terms for the constraints) and an
optional ``"constraints"`` list (an expression, or ``{"expr": ..., "why": ...}``).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

from ..errors import SpaceError
from .config import ConfigSpace
from .expr import eval_expr


def data_dir(name: str) -> Path:
    """``tuning_spaces`` or ``logs``: at the top of the repository in a checkout (or editable
    install), else under ``<prefix>/share/tvm_ext`` where setup.py installs them."""
    here = Path(__file__).resolve().parents[2] / name  # tvm_ext/space/spec.py -> repository
    if here.is_dir():
        return here
    return Path(sys.prefix) / "share" / "tvm_ext" / name


SPACES_DIR = data_dir("tuning_spaces")


def load_space_spec(template: str, path: Optional[str] = None) -> Dict[str, Any]:
    """Read a space file: the user's ``path`` or the shipped ``tuning_spaces/<template>.json``."""
    p = Path(path) if path else SPACES_DIR / f"{template}.json"
    try:
        text = p.read_text()
    except OSError as err:
        raise SpaceError(f"cannot read space file {p}: {err.strerror or err}") from None
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpaceError(f"space file {p} is not valid JSON (line {err.lineno}: {err.msg})") \
            from None
    if isinstance(spec, dict) and "same_as" in spec:
        # A template whose space is another's (a batch_matmul template that runs a dense
        # one's kernel on each batch, or one on its own view of the workload, ``Template.view``):
        # that file's knobs, lets and rules, and this file's rules after
        base = load_space_spec(spec["same_as"])
        spec = {**base, "template": spec.get("template", template),
                "doc": spec.get("doc", base.get("doc", "")),
                "constraints": base.get("constraints", []) + spec.get("constraints", [])}
    if not isinstance(spec, dict) or not isinstance(spec.get("knobs"), list):
        raise SpaceError(f"space file {p} needs an object with a 'knobs' list")
    if spec.get("template", template) != template:
        raise SpaceError(f"space file {p} is for template '{spec.get('template')}', "
                         f"not '{template}'")
    return spec


def knob_values(items: Sequence[str]) -> Dict[str, list]:
    """{knob: [values]} of command-line items KNOB=V1,V2 (``tune --set``, ``bench --sweep
    --set``): integers, or a split's whole sizes joined by "/" (``tile_y=-1/128/6``, a list);
    a SpaceError (one line) names a malformed item."""
    grid: Dict[str, list] = {}
    for item in items:
        knob, sep, values = item.partition("=")
        try:
            grid[knob] = [[int(x) for x in v.split("/")] if "/" in v else int(v)
                          for v in values.split(",")]
        except ValueError:
            sep = ""
        if not sep or not knob:
            raise SpaceError(f"--set {item!r}: expected KNOB=V1,V2 with integer values (a "
                             "split's whole sizes as -1/128/6)")
    return grid


def narrow_spec(spec: Mapping[str, Any], values: Mapping[str, Sequence[int]]) -> Dict[str, Any]:
    """A copy of ``spec`` whose knobs named in ``values`` keep only those values (``tune --set
    chunk=2,4 tile_x=32``): a plain knob those candidates, a split those innermost factors
    (the register tile's or vector's size; its other factors as the space has them). Every
    rule, let and other knob stays the spec's own. A knob the spec lacks, a reorder or
    annotation, or a value that is not one of a plain knob's candidates is a SpaceError naming
    it; a split left with no factorisation is one when the space is built."""
    knobs = {k.get("name"): k for k in spec["knobs"]}
    narrowed = dict(spec)
    narrowed["knobs"] = [dict(k) for k in spec["knobs"]]
    by_name = {k.get("name"): k for k in narrowed["knobs"]}
    for name, vals in values.items():
        if name not in knobs:
            raise SpaceError(f"--set: {spec.get('template', 'the space')} has no knob {name!r} "
                             f"(knobs: {', '.join(str(n) for n in knobs)})")
        knob = by_name[name]
        if knob.get("kind") == "split":  # the innermost factor (the register tile, the vector)
            if not vals:  # or the whole split (a list of its sizes)
                raise SpaceError(f"--set: no value for split {name!r}")
            inner = sorted({v for v in vals if isinstance(v, int)})
            whole = [v for v in vals if isinstance(v, list)]
            # a whole split by its sizes inside the outermost (-1: what is left of the axis)
            keep = " or ".join(([f"size[-1] in {inner}"] if inner else []) + [
                "(" + " and ".join([f"len(size) == {len(w)}"] + [
                    f"size[{i}] == {x}" for i, x in enumerate(w) if i]) + ")" for w in whole])
            knob["filter"] = f"({knob['filter']}) and ({keep})" if knob.get("filter") else keep
            continue
        if knob.get("kind") != "knob":
            raise SpaceError(f"--set: {name!r} is a {knob.get('kind')} knob, not a list of "
                             "values (narrow it with a --space file)")
        cands = knob.get("candidates", [])
        bad = [v for v in vals if v not in cands or isinstance(v, list)]
        if bad or not vals:
            raise SpaceError(f"--set: {bad[0] if bad else 'nothing'} is not a value of knob "
                             f"{name!r} (values: {cands})")
        knob["candidates"] = [c for c in cands if c in vals]
        if "default" in knob and knob["default"] not in knob["candidates"]:
            del knob["default"]  # a default outside the values would build outside the space
    return narrowed


# Spaces build in milliseconds; one that takes this long asks for too much (each knob's
# enumeration and each expression are bounded, this bounds them all together).
BUILD_SECONDS = 30.0


def build_space(spec: Mapping[str, Any], axes: Mapping[str, int],
                facts: Optional[Mapping[str, Any]] = None, *,
                time_limit: float = BUILD_SECONDS) -> ConfigSpace:
    """A ConfigSpace from a space spec.

    ``axes`` maps axis names used by split knobs ("M", "N", "K", "B") to their lengths; ``facts``
    are extra names for filters and constraints (hardware facts, dtype sizes). A knob's
    ``"when"`` expression (over facts) leaves the knob out where false, and its ``"default"``
    value is then used by the template. ``"let"`` names terms over facts, axes, knobs and earlier
    let terms (in file order), evaluated per config for the constraints. A space that takes
    longer than ``time_limit`` seconds to build is refused, naming the knob it had reached.
    """
    names = {**(facts or {}), **axes}
    space = ConfigSpace(names, spec.get("template", ""))
    deadline = time.monotonic() + time_limit
    for k in spec["knobs"]:
        _define_knob(space, k, names, axes)
        if time.monotonic() > deadline:
            raise SpaceError(f"building the space of '{space.template}' took more than "
                             f"{time_limit:g}s (up to knob {k.get('name')!r}); narrow the "
                             "knobs' ranges")
    lets = spec.get("let", {})
    if not isinstance(lets, Mapping):
        raise SpaceError(f"space 'let' must be an object of name: expression, got {lets!r}")
    for name, expr in lets.items():
        space.define_let(name, expr)
    for c in spec.get("constraints", []):
        if isinstance(c, dict):
            space.add_constraint(c["expr"], c.get("why"))
        else:
            space.add_constraint(c)
    return space


def _define_knob(space: ConfigSpace, k: Mapping[str, Any], names: Mapping[str, Any],
                 axes: Mapping[str, int]) -> None:
    """Define one knob of a space file in ``space`` (or nothing, where its "when" is false)."""
    try:
        name, kind = k["name"], k["kind"]
    except KeyError as err:
        raise SpaceError(f"knob {k} lacks field {err}") from None
    if "when" in k and not eval_expr(k["when"], names):
        return
    if kind == "split":
        axis = k.get("axis")
        if axis not in axes:
            raise SpaceError(f"split '{name}' names axis '{axis}'; "
                             f"this template has {', '.join(axes)}")
        space.facts["_len_" + name] = axes[axis]
        max_factor = k.get("max_factor")
        if isinstance(max_factor, str):
            max_factor = eval_expr(max_factor, names)
        extra = k.get("extra_inner", [])
        if isinstance(extra, str):  # an expression over facts, e.g. the vector registers
            extra = eval_expr(extra, names)
        if not (isinstance(extra, (list, tuple)) and all(isinstance(e, int) for e in extra)):
            raise SpaceError(f"split '{name}': extra_inner must be a list of integers, "
                             f"got {extra!r}")
        space.define_split(name, axes[axis], k.get("policy", "factors"),
                           num_outputs=k.get("num_outputs", 2), max_factor=max_factor,
                           filter=k.get("filter"), no_tail=k.get("no_tail"),
                           candidate=k.get("candidate"), extra_inner=extra,
                           whole_axis=bool(k.get("whole_axis", False)))
    elif kind == "knob":
        cands = k.get("candidates")
        if not isinstance(cands, list):
            raise SpaceError(f"knob '{name}' needs a 'candidates' list")
        if "filter" in k:
            kept = [c for c in cands if eval_expr(k["filter"], {**names, "value": c})]
            if cands and not kept:
                shown = ", ".join(map(repr, cands[:8])) + (", ..." if len(cands) > 8 else "")
                raise SpaceError(f"knob '{name}': filter '{k['filter']}' leaves none of its "
                                 f"{len(cands)} candidates ({shown})")
            cands = kept
        space.define_knob(name, cands)
    elif kind == "reorder":
        space.define_reorder(name, k["num_axes"], k.get("policy", "all"),
                             **{x: k[x] for x in ("interval", "candidate") if x in k})
    elif kind == "annotate":
        space.define_annotate(name, k["num_axes"], k.get("policy", "try_unroll"),
                              **({"candidate": k["candidate"]} if "candidate" in k else {}))
    else:
        raise SpaceError(f"knob '{name}' has unknown kind '{kind}' "
                         "(split, knob, reorder, annotate)")


def knob_defaults(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """Values of knobs that a spec leaves out (through ``when``) or marks with a default."""
    return {k["name"]: k["default"] for k in spec["knobs"] if "default" in k}


def knob_default_exprs(spec: Mapping[str, Any]) -> Dict[str, str]:
    """Knobs whose default depends on the config's other knobs: ``"default_expr"`` is an
    expression over them (as in constraints), e.g. ``"[-1, tile_y[-1]]"`` for a split that
    did not exist when ``tile_y`` alone set the register tile."""
    return {k["name"]: k["default_expr"] for k in spec["knobs"] if "default_expr" in k}
