"""Configs and the space they are drawn from.

A ``ConfigSpace`` is an ordered list of knobs; a config is one entity per knob, numbered in
AutoTVM's mixed-radix order (the first-defined knob is the least significant digit). Let terms
name sub-expressions over facts and knobs; constraints over them prune configs before anything
is built.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import SpaceError
from .expr import Expr
from .knobs import (_ANN_TO_NUMBER, _ENTITY_BY_KIND, AnnotateEntity, AnnotateSpace, KnobSpace,
                    OtherOptionEntity, OtherOptionSpace, ReorderEntity, ReorderSpace,
                    SplitEntity, SplitSpace)



class ConfigEntity:
    """One point of a space: an entity per knob, by name. ``cfg["tile_x"].size`` etc."""

    is_fallback = False

    def __init__(self, index: Optional[int], entities: "OrderedDict[str, Any]",
                 code_hash=None):
        self.index = index
        self._entities = entities
        self.code_hash = code_hash

    def __getitem__(self, name):
        try:
            return self._entities[name]
        except KeyError:
            raise KeyError(f"config has no knob '{name}' (has: {', '.join(self._entities)})") \
                from None

    def __contains__(self, name):
        return name in self._entities

    def value(self, name, default):
        """A ``knob``'s value, or ``default`` where the config lacks that knob (a record written
        before the knob existed, or a user's space file without it)."""
        return self._entities[name].val if name in self._entities else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._entities)

    def items(self):
        return self._entities.items()

    def values_dict(self) -> Dict[str, Any]:
        """{knob name: plain value} (sizes, value, perm, annotations)."""
        return {k: e.value for k, e in self._entities.items()}

    def to_json_dict(self):
        """AutoTVM's ``config`` field."""
        return {"index": None if self.index is None else int(self.index),
                "code_hash": self.code_hash,
                "entity": [[k, e.kind, e.value] for k, e in self._entities.items()]}

    @staticmethod
    def from_json_dict(d) -> "ConfigEntity":
        entities = OrderedDict()
        for item in d["entity"]:
            key, kind, args = item
            if kind not in _ENTITY_BY_KIND:
                raise ValueError(f"unknown knob kind '{kind}'")
            entities[str(key)] = _ENTITY_BY_KIND[kind](args)
        return ConfigEntity(d.get("index"), entities, d.get("code_hash"))

    def key(self):
        """Hashable identity by knob values (independent of the index)."""
        return tuple((k, e) for k, e in self._entities.items())

    def __eq__(self, other):
        return isinstance(other, ConfigEntity) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        body = ", ".join(f"{k}={e!r}" for k, e in self._entities.items())
        return f"Config(index={self.index}, {body})"


class FallbackConfig(ConfigEntity):
    """The config a template uses when no tuned record applies."""

    is_fallback = True


class _LazyNames(dict):
    """``names_of`` of a config with every knob, whose let terms are computed when a
    constraint first reads them: a config that fails an early constraint costs no more (the
    let terms made four fifths of a validity check of the SIMT batch_matmul space, and the
    proposer checks 16000 configs). A valid config's are all computed (their errors raised).
    """

    def __init__(self, space: "ConfigSpace", names: Dict[str, Any]):
        super().__init__(names)
        self._lets = space.lets
        self._value = space._let_value

    def __contains__(self, key):
        return dict.__contains__(self, key) or key in self._lets

    def get(self, key, default=None):  # a callable constraint's names.get(let) computes it
        return self[key] if key in self else default

    def __missing__(self, key):
        expr = self._lets.get(key)
        if expr is None:
            raise KeyError(key)
        value = self[key] = self._value(key, expr, self)
        return value


def _name_value(entity, knob):
    """The value a knob's entity gives its name in constraints and let terms: a split's sizes
    with the -1 resolved against the knob's length, any other entity's value."""
    if isinstance(entity, SplitEntity) and knob is not None:
        return entity.resolved(knob.length)
    return entity.value


class ConfigSpace:
    """An ordered set of knobs, with let terms and constraints over them.

    Hardware facts (``vector_lanes``, ``max_threads_per_block``, ...) and workload sizes given as
    ``facts`` can be named in filters, let terms and constraints.
    """

    def __init__(self, facts: Optional[Mapping[str, Any]] = None, template: str = ""):
        self.template = template
        self.knobs: "OrderedDict[str, KnobSpace]" = OrderedDict()
        self.lets: "OrderedDict[str, Expr]" = OrderedDict()
        self.constraints: List[tuple] = []  # (description, predicate(names) -> bool)
        self.facts = dict(facts or {})
        self._radix: Optional[List[int]] = None
        self._tables: Optional[List[tuple]] = None
        #: Where a task built the space: a call giving the index of its template's fallback
        #: config for the workload (None where the fallback is not one of the space's
        #: configs). The proposer ranks it first.
        self.fallback_index: Optional[Callable[[], Optional[int]]] = None

    # ---- definition (AutoTVM vocabulary) ----
    def _add(self, knob: KnobSpace):
        if knob.name in self.knobs:
            raise SpaceError(f"knob '{knob.name}' defined twice")
        if knob.name in self.lets:
            raise SpaceError(f"knob '{knob.name}' has the name of a let term")
        self.knobs[knob.name] = knob
        self._radix = self._tables = None
        return knob

    def define_split(self, name, length, policy="factors", *, num_outputs=2, max_factor=None,
                     filter=None, no_tail=None, candidate=None, extra_inner=(),
                     whole_axis=False):
        if isinstance(filter, str):
            filter = self._entity_filter(name, filter)
        return self._add(SplitSpace(name, length, num_outputs=num_outputs, policy=policy,
                                    max_factor=max_factor, filter=filter, no_tail=no_tail,
                                    candidate=candidate, extra_inner=extra_inner,
                                    whole_axis=whole_axis))

    def define_knob(self, name, candidate):
        return self._add(OtherOptionSpace(name, candidate))

    def define_reorder(self, name, num_axes, policy="all", **kwargs):
        return self._add(ReorderSpace(name, num_axes, policy, **kwargs))

    def define_annotate(self, name, num_axes, policy="try_unroll", **kwargs):
        return self._add(AnnotateSpace(name, num_axes, policy, **kwargs))

    def define_let(self, name: str, expr: str):
        """A named term, e.g. ``tile_m = block_row_warps * warp_row_tiles * 16``: an expression
        over facts, knobs and earlier let terms, evaluated once per config before the
        constraints, which (as later let terms) can use its name. Define it after the knobs it
        reads: its names are checked here, so a typo fails when the space is built."""
        if not isinstance(name, str) or not name.isidentifier():
            raise SpaceError(f"let term name {name!r} is not an identifier")
        if not isinstance(expr, str):
            raise SpaceError(f"let '{name}' needs an expression string, got {expr!r}")
        for taken, what in ((self.lets, "defined twice"), (self.knobs, "has the name of a knob"),
                            (self.facts, "has the name of a fact")):
            if name in taken:
                raise SpaceError(f"let '{name}' {what}")
        try:
            parsed = Expr(expr)
        except SpaceError as err:
            raise SpaceError(f"let '{name}': {err}") from None
        known = set(self.facts) | set(self.knobs) | set(self.lets)
        unknown = sorted(parsed.names - known)
        if unknown:
            raise SpaceError(f"unknown name '{unknown[0]}' in let '{name}' = '{expr}' "
                             f"(known: {', '.join(sorted(known))})")
        self.lets[name] = parsed
        return parsed

    def add_constraint(self, pred, description: Optional[str] = None):
        """A filter over several knobs: a string expression over knob values, let terms and
        facts, or a callable taking {name: value}."""
        if isinstance(pred, str):
            self.constraints.append((description or pred, Expr(pred)))
        else:
            self.constraints.append((description or getattr(pred, "__name__", "constraint"),
                                     pred))

    def _entity_filter(self, name, expr):
        test = Expr(expr)

        def keep(entity):
            length = self.facts.get("_len_" + name)
            size = entity.resolved(length) if length else entity.size
            return bool(test({**self.facts, "size": size}))
        keep.text = expr  # named when the filter leaves no candidate
        return keep

    # ---- indexing ----
    @property
    def radix(self) -> List[int]:
        if self._radix is None:
            self._radix = [len(k) for k in self.knobs.values()]
        return self._radix

    def __len__(self):
        return math.prod(self.radix)  # Python ints: exact however large

    def _knob_tables(self) -> List[tuple]:
        """(name, entities, the value ``names_of`` gives each) per knob, in order: the
        proposer and the tuners check tens of thousands of configs by index."""
        if self._tables is None:
            self._tables = [(name, knob.entities, [_name_value(e, knob) for e in knob.entities])
                            for name, knob in self.knobs.items()]
        return self._tables

    def _check_index(self, index: int) -> None:
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} outside space of {len(self)}")

    def get(self, index: int) -> ConfigEntity:
        """Config number ``index`` (first-defined knob = least significant digit)."""
        self._check_index(index)
        entities = OrderedDict((name, knob_entities[d]) for (name, knob_entities, _), d
                               in zip(self._knob_tables(), self.digits(index)))
        return ConfigEntity(int(index), entities)

    def index_of(self, config: ConfigEntity) -> Optional[int]:
        """The index of a config given by knob values in this space; None if one of its values
        is not in this space (e.g. a config from a wider space) or a knob is missing."""
        index, mult = 0, 1
        for name, knob in self.knobs.items():
            if name not in config:
                return None
            i = knob.index_of(config[name])
            if i is None:
                return None
            index += i * mult
            mult *= len(knob)
        return index

    def digits(self, index: int) -> List[int]:
        """Per-knob digit of an index: the position of each knob's entity in its knob."""
        digits, t = [], int(index)
        for r in self.radix:
            digits.append(t % r)
            t //= r
        return digits

    def index_from_digits(self, digits: Sequence[int]) -> int:
        index, mult = 0, 1
        for d, r in zip(digits, self.radix):
            index += int(d) * mult
            mult *= r
        return index

    # ---- validity ----
    def names_of(self, config: ConfigEntity, *, lets: bool = True) -> Dict[str, Any]:
        """Names visible to constraints: facts, each knob's value (split sizes resolved), then
        the let terms in their order (``lets``)."""
        names = dict(self.facts)
        for name, entity in config.items():
            names[name] = _name_value(entity, self.knobs.get(name))
        for name, expr in self.lets.items() if lets else ():
            # A config may lack a knob (Task.complete asks for names before it fills in the
            # knobs that have a default_expr): a let term over it is left out, as the knob is.
            if names.keys() >= expr.names:
                names[name] = self._let_value(name, expr, names)
        return names

    @staticmethod
    def _let_value(name: str, expr: Expr, names: Mapping[str, Any]):
        try:
            return expr(names)
        except SpaceError as err:
            raise SpaceError(f"let '{name}': {err}") from None
        except (ArithmeticError, TypeError, IndexError) as err:
            raise SpaceError(f"let '{name}' = '{expr.text}' fails: {err}") from None

    def violations(self, config: ConfigEntity) -> List[str]:
        names = self.names_of(config)
        return [desc for desc, pred in self.constraints if not pred(names)]

    def is_valid(self, config_or_index) -> bool:
        if isinstance(config_or_index, int):  # names_of(get(index)) without the config
            self._check_index(config_or_index)
            names = dict(self.facts)
            for (name, _, values), d in zip(self._knob_tables(), self.digits(config_or_index)):
                names[name] = values[d]
            names = _LazyNames(self, names)
        elif not all(name in config_or_index for name in self.knobs):
            names = self.names_of(config_or_index)  # a let over a missing knob is left out
            return all(pred(names) for _, pred in self.constraints)
        else:
            names = _LazyNames(self, self.names_of(config_or_index, lets=False))
        if not all(pred(names) for _, pred in self.constraints):
            return False
        for name in self.lets:  # a let that fails on a valid config is an error, as ever
            names[name]
        return True

    def valid_indices(self, limit: Optional[int] = None) -> Iterator[int]:
        """Valid indices in order (use on small spaces or with a limit)."""
        count = 0
        for i in range(len(self)):
            if self.is_valid(i):
                yield i
                count += 1
                if limit is not None and count >= limit:
                    return

    def random_valid(self, rng, n: int, *, skip: Sequence[Any] = (), keep=None,
                     max_draws: Optional[int] = None) -> List[int]:
        """Up to ``n`` distinct valid indices drawn uniformly with ``rng``, by rejection (a
        space too large to list): none that is in one of the ``skip`` collections, only those
        whose config ``keep`` accepts (if given). At most ``max_draws`` draws (default 200 per
        index asked for), so a heavily constrained space ends with fewer."""
        limit = 200 * max(n, 1) if max_draws is None else max_draws
        out: List[int] = []
        chosen = set()
        draws = 0
        while len(out) < n and draws < limit:
            draws += 1
            i = int(rng.integers(len(self)))
            if i in chosen or any(i in s for s in skip) or not self.is_valid(i) or \
                    (keep is not None and not keep(self.get(i))):
                continue
            out.append(i)
            chosen.add(i)
        return out

    # ---- features for cost models ----
    def features(self, config: ConfigEntity) -> np.ndarray:
        """AutoTVM's flattened knob feature: split sizes (resolved), knob values (or their
        position when not numeric), permutations, one-hot annotations."""
        fea: List[float] = []
        for name, knob in self.knobs.items():
            e = config[name]
            if isinstance(e, SplitEntity):
                fea.extend(e.resolved(knob.length))
            elif isinstance(e, OtherOptionEntity):
                fea.append(float(e.val) if isinstance(e.val, (int, float, bool))
                           else float(knob.index_of(e) or 0))
            elif isinstance(e, ReorderEntity):
                fea.extend(e.perm)
            elif isinstance(e, AnnotateEntity):
                for ann in e.anns:
                    one_hot = [0.0] * len(_ANN_TO_NUMBER)
                    one_hot[_ANN_TO_NUMBER.get(ann, 0)] = 1.0
                    fea.extend(one_hot)
        return np.asarray(fea, dtype=np.float32)

    def entity(self, name: str, value: Any):
        """The entity of knob ``name`` for a plain value (split sizes may omit the -1)."""
        knob = self.knobs[name]
        if knob.kind == "sp":
            v = list(value)
            if len(v) != knob.num_outputs:
                raise SpaceError(f"knob '{name}' needs {knob.num_outputs} sizes, got {v}")
            return SplitEntity([-1] + v[1:])
        return _ENTITY_BY_KIND[knob.kind](value)

    def config_from_values(self, values: Mapping[str, Any], *, fallback=True) -> ConfigEntity:
        """A config from {knob: value}; split values may be given without the -1."""
        entities = OrderedDict()
        for name in self.knobs:
            if name not in values:
                raise SpaceError(f"config for '{self.template}' lacks knob '{name}'")
            entities[name] = self.entity(name, values[name])
        cls = FallbackConfig if fallback else ConfigEntity
        cfg = cls(None, entities)
        cfg.index = self.index_of(cfg)
        return cfg

    def describe(self) -> str:
        lines = [f"space of {self.template or 'template'}: {len(self)} configs "
                 f"(before constraints), {len(self.knobs)} knobs"]
        for name, knob in self.knobs.items():
            sample = ", ".join(repr(e) for e in knob.entities[:6])
            more = ", ..." if len(knob) > 6 else ""
            lines.append(f"  {name:<22} {knob.kind} x{len(knob):<5} {sample}{more}")
        for name, expr in self.lets.items():
            lines.append(f"  let {name} = {expr.text}")
        for desc, _ in self.constraints:
            lines.append(f"  constraint: {desc}")
        return "\n".join(lines)


