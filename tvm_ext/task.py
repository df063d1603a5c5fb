"""A Task is a template applied to one workload on one target: its space, its configs (the
fallback, and every way of completing a partial one), and ``instantiate(config)`` -> the
scheduled IRModule that ``build`` compiles."""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

from . import codegen
from .errors import TemplateError
from .record import config_identity
from .space import (ConfigEntity, ConfigSpace, build_space, eval_expr, knob_default_exprs,
                    knob_defaults, load_space_spec, narrow_spec)
from .strategy import get_template, templates_for
from .target import hardware_facts, parse_target, target_str
from .template import Template
from .workload import Workload


@dataclass
class RecordFit:
    """``Task.fit_record``'s answer: the config to build (None where a knob is not a value of the
    space), the rules the record breaks (empty: it applies), and the knobs completed from the
    fallback's values (not measured by the record)."""

    config: Optional[ConfigEntity]
    problems: List[str]
    completed: List[str]


class InstantiationError(RuntimeError):
    """A config that the template cannot schedule (recorded as error 1, not raised to users)."""


class Task:
    def __init__(self, workload: Workload, target=None, *, template: Optional[str] = None,
                 space_file: Optional[str] = None, symbolic: bool = False,
                 granules: Optional[Mapping[str, int]] = None,
                 narrow: Optional[Mapping[str, Sequence[int]]] = None, followed: bool = False):
        self.workload = workload
        # A fused Relax function's task whose matmul is followed by ops the workload does not
        # name (served by its anchor's records): the space's rules see ``followed`` = 1 (a
        # config that needs nothing after the matmul, such as non-temporal stores, breaks one).
        self.followed = followed
        # A shape family's task: its configs are built as kernels of symbolic extents, which
        # the space's rules see as ``symbolic`` = 1 and ``granule_m`` / ``_n`` / ``_k``: the
        # size every extent of that axis is a multiple of (``granules[axis]`` for a varying
        # axis, 1 for the generic kernel's: a tile that does not divide it is padded inside the
        # kernel; an axis not in ``granules`` is fixed: its size). The workload is the family's
        # representative shape, whose sizes the rest of the rules and the fallback use.
        self.symbolic = symbolic
        self.granules = {a: int(g) for a, g in (granules or {}).items()}
        self.target = parse_target(target)
        self.facts = hardware_facts(self.target, workload.dtype)
        if template is None:
            self.template: Template = templates_for(workload, self.target, self.facts)[0]
        else:
            self.template = get_template(template)
            why = self.template.why_not(workload, self.facts)
            if why is not None:
                raise TemplateError(f"template {template} does not apply to {workload}: {why}")
        self.space_file = space_file
        self.spec = load_space_spec(self.template.name, space_file)
        # ``tune --set``: knobs kept to some of their values (a split: its innermost factors,
        # or whole splits as lists of sizes), the rest of the space as is
        self.narrow = {k: [[int(x) for x in v] if isinstance(v, (list, tuple)) else int(v)
                           for v in vs] for k, vs in (narrow or {}).items()}
        if self.narrow:
            self.spec = narrow_spec(self.spec, self.narrow)

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def flop(self) -> int:
        return self.workload.flop

    @property
    def target_str(self) -> str:
        return target_str(self.target)

    @functools.cached_property
    def space(self) -> ConfigSpace:
        wl = self.workload
        seen = self.template.view(wl) if self.template.view else wl  # (``Template.view``)
        axes = {"B": seen.batch, "M": seen.M, "N": seen.N, "K": seen.K}
        facts = {**self.facts, "layout": seen.layout, "dtype": wl.dtype,
                 "out_dtype": wl.out_dtype, "final_dtype": wl.final_dtype,
                 "epilogue": wl.epilogue, "symbolic": int(self.symbolic),
                 "followed": int(self.followed)}
        for a in ("M", "N", "K"):
            facts[f"granule_{a.lower()}"] = self.granules.get(a, axes[a])
        space = build_space(self.spec, axes, facts)
        space.fallback_index = self._fallback_index
        return space

    # ---- configs: the space's index, the fallback, and completing a partial config ----
    def config(self, index: int) -> ConfigEntity:
        return self.space.get(index)

    def fallback_config(self) -> ConfigEntity:
        values = {**knob_defaults(self.spec),
                  **self.template.fallback(self.space, self.workload, self.facts)}
        return self.space.config_from_values(values, fallback=True)

    def is_fallback(self, config: ConfigEntity) -> bool:
        """Whether ``config`` is this task's fallback, knob by knob, as records identify a
        config (``record.config_identity``)."""
        return config_identity(self.name, config.values_dict()) == \
            config_identity(self.name, self.fallback_config().values_dict())

    def _fallback_index(self) -> Optional[int]:
        """The fallback's index in the space, None where it is not one of the space's valid
        configs (a fallback outside the tuning space's values)."""
        index = self.fallback_config().index
        return index if index is not None and self.space.is_valid(index) else None

    def config_with(self, values: Mapping[str, Any]) -> ConfigEntity:
        """The fallback config with the knobs of ``values`` ({knob: plain value}) set; a knob
        whose space file has a "default_expr" follows the given knobs."""
        given = {k: self.space.entity(k, v) for k, v in values.items() if k in self.space.knobs}
        return self._indexed(ConfigEntity(None, self._complete(given, plain_defaults=False)))

    def config_of_record(self, config: ConfigEntity) -> ConfigEntity:
        """A record's config applied by knob name. Knobs the record lacks (a space widened since)
        get the space file's default (the behaviour before the knob existed), else its
        default_expr, else the fallback's value; knobs the template no longer has are ignored."""
        given = {name: config[name] for name in self.space.knobs if name in config}
        return self._indexed(ConfigEntity(None, self._complete(given), config.code_hash))

    def fit_record(self, config: ConfigEntity) -> "RecordFit":
        """How a record's config fits this task's space, before anything is built: each knob
        the record gives must be one of the space's values for that knob (the right kind, a
        split of the right length, a factor the space offers); knobs it lacks are completed (see
        ``config_of_record``), and those that only the fallback could complete are named, since
        the record never measured them."""
        explained = set(knob_defaults(self.spec)) | set(knob_default_exprs(self.spec))
        completed = [n for n in self.space.knobs if n not in config and n not in explained]
        outside = [f"knob '{name}' = {config[name]!r} is not a value of this space"
                   for name, knob in self.space.knobs.items()
                   if name in config and knob.index_of(config[name]) is None]
        try:
            cfg = self.config_of_record(config)
            broken = self.space.violations(cfg)
        except Exception as err:  # noqa: BLE001  (a value of the wrong type in an expression)
            cfg, broken = None, [] if outside else [f"its config cannot be evaluated ({err})"]
        if broken or outside:  # both: the value, and the rule it breaks where one does
            return RecordFit(None, outside + broken, [])
        return RecordFit(cfg, [], completed)

    def _indexed(self, cfg: ConfigEntity) -> ConfigEntity:
        cfg.index = self.space.index_of(cfg)
        return cfg

    def _complete(self, given: Mapping[str, Any], *,
                  plain_defaults: bool = True) -> "OrderedDict[str, Any]":
        """An entity for every knob of the space: those ``given`` (entities by name); for the
        others, the space file's "default" (unless ``plain_defaults`` is False), else its
        "default_expr" over the other knobs, else the fallback config's value."""
        defaults = knob_defaults(self.spec) if plain_defaults else {}
        exprs = knob_default_exprs(self.spec)
        merged = {}
        for name in self.space.knobs:
            if name in given:
                merged[name] = given[name]
            elif name in defaults:
                merged[name] = self.space.entity(name, defaults[name])
            elif name not in exprs:
                merged[name] = None  # the fallback's, below
        if any(v is None for v in merged.values()):
            fallback = self.fallback_config()
            merged = {k: fallback[k] if v is None else v for k, v in merged.items()}
        names = self.space.names_of(ConfigEntity(None, merged))
        return OrderedDict((name, merged[name] if name in merged else
                            self.space.entity(name, eval_expr(exprs[name], names)))
                           for name in self.space.knobs)

    # ---- kernels ----
    @property
    def dependent_launch(self) -> bool:
        """Whether kernels are launched with programmatic dependent launch (``codegen.py``)."""
        return codegen.dependent_launch(self.facts)

    def launch(self, func, config):
        """A scheduled PrimFunc of ``config`` as it is built: with ``dependent_launch``, every
        kernel opens with the grid-dependency wait and is launched with PDL, unless the
        template's ``early_launch`` says that the config's kernel should not be (a shape
        family's kernel, whose grid follows the shapes it is called on, is launched early)."""
        rule = getattr(self.template, "early_launch", None)
        if not self.dependent_launch or rule is not None and not self.symbolic and \
                not rule(self.workload, self.space.names_of(config), self.facts):
            return func
        return codegen.with_dependent_launch(func)

    def instantiate(self, config: ConfigEntity):
        """The scheduled IRModule for a config; InstantiationError if it cannot be scheduled."""
        import tvm  # noqa: PLC0415

        if self.template.prepare is not None:
            self.template.prepare()
        try:
            if self.symbolic and not self.template.schedulable:
                # A shape family's kernel as it is written for symbolic extents (guarded
                # where its tiles overhang), on this task's sizes.
                func = self.template.make_func(self.workload, config, self.facts,
                                               self.target, sizes={})
            else:
                func = self.template.make_func(self.workload, config, self.facts,
                                               self.target)
            func = self.launch(func, config)
        except Exception as err:  # a config the schedule rejects is data, not a crash
            msg = str(err).strip().splitlines()
            raise InstantiationError(f"{self.name} {config}: {msg[-1] if msg else err!r}") \
                from err
        return tvm.IRModule({"main": func})

    def compile(self, mod):
        """``tvm.compile`` a module of ``instantiate``, with the template's pass options."""
        return codegen.compile_module(mod, self.target, self.template.pass_config)

    def build(self, config: ConfigEntity):
        """Compile a config: a ``tvm.runtime.Executable`` whose ``main`` takes (A, B, C)."""
        return self.compile(self.instantiate(config))

    def __repr__(self):
        sym = ", symbolic" if self.symbolic else ""
        return f"Task({self.name}, {self.workload}, {self.target_str}{sym})"
