"""Tuning spaces in AutoTVM's vocabulary, as plain data.

A ``ConfigSpace`` is an ordered list of knobs. Each knob is a small space of entities:

- ``define_split``    an axis split into ``num_outputs`` factors (``"sp"`` in logs)
- ``define_knob``     a value out of a candidate list (``"ot"``)
- ``define_reorder``  a permutation of some loops (``"re"``)
- ``define_annotate`` an annotation per loop: none / unroll / vec (``"an"``)

A config is one entity per knob. Configs are numbered in AutoTVM's mixed-radix order: the
first-defined knob is the least significant digit, so an index from an old AutoTVM log of the same
space means the same config here. Constraints over several knobs (and hardware facts such as the
vector width or the shared memory per block) prune configs before anything is built.

Knob ranges and constraints are data: ``tuning_spaces/<template>.json`` (see ``build_space``).
Nothing here imports TVM, so spaces are built, counted and enumerated in milliseconds.
"""
from __future__ import annotations

import ast
import functools
import itertools
import json
import math
import operator
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from .errors import SpaceError



def data_dir(name: str) -> Path:
    """``tuning_spaces`` or ``logs``: beside the package in a checkout (or editable install),
    else under ``<prefix>/share/tvm_ext`` where setup.py installs them."""
    import sys  # noqa: PLC0415
    here = Path(__file__).resolve().parent.parent / name
    if here.is_dir():
        return here
    return Path(sys.prefix) / "share" / "tvm_ext" / name


SPACES_DIR = data_dir("tuning_spaces")


# --------------------------------------------------------------------------------------------
# factor helpers (same sets as AutoTVM, so split spaces enumerate identically)


def get_factors(n: int) -> List[int]:
    """All divisors of n, ascending."""
    small = [i for i in range(1, int(math.isqrt(n)) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def get_pow2s(n: int) -> List[int]:
    """Powers of two up to n."""
    return [2**x for x in range(int(math.floor(math.log2(n))) + 1)]


# --------------------------------------------------------------------------------------------
# entities: one decision of one knob


class SplitEntity:
    """Sizes of the axes an axis is split into, outermost first. ``size[0]`` may be -1
    (inferred), as AutoTVM writes it."""

    kind = "sp"

    def __init__(self, size: Sequence[int]):
        self.size = [int(x) for x in size]

    def resolved(self, length: int) -> List[int]:
        """Sizes with the -1 replaced by ceil(length / product of the others)."""
        inner = int(np.prod(self.size[1:])) if len(self.size) > 1 else 1
        first = self.size[0] if self.size[0] != -1 else -(-length // inner)
        return [first] + self.size[1:]

    @property
    def value(self):
        return list(self.size)

    def __eq__(self, other):
        return isinstance(other, SplitEntity) and other.size[1:] == self.size[1:]

    def __hash__(self):
        return hash(("sp", tuple(self.size[1:])))

    def __repr__(self):
        return str(self.size)


class OtherOptionEntity:
    """A value chosen from a candidate list."""

    kind = "ot"

    def __init__(self, val):
        self.val = val

    @property
    def value(self):
        return self.val

    def __eq__(self, other):
        return isinstance(other, OtherOptionEntity) and other.val == self.val

    def __hash__(self):
        return hash(("ot", json.dumps(self.val)))

    def __repr__(self):
        return str(self.val)


class ReorderEntity:
    """A permutation: loop ``perm[i]`` goes to position i."""

    kind = "re"

    def __init__(self, perm: Sequence[int]):
        self.perm = [int(x) for x in perm]

    @property
    def value(self):
        return list(self.perm)

    def apply(self, sch, loops):
        """Reorder TensorIR loops; returns them in their new order."""
        new_order = [loops[i] for i in self.perm if i < len(loops)]
        sch.reorder(*new_order)
        return new_order

    def __eq__(self, other):
        return isinstance(other, ReorderEntity) and other.perm == self.perm

    def __hash__(self):
        return hash(("re", tuple(self.perm)))

    def __repr__(self):
        return str(self.perm)


_ANN_TO_NUMBER = {"none": 0, "vec": 1, "unroll": 2, "blockIdx.x": 3, "blockIdx.y": 4,
                  "blockIdx.z": 5, "threadIdx.x": 6, "threadIdx.y": 7, "threadIdx.z": 8,
                  "vthread": 9, "fuse": 10}


class AnnotateEntity:
    """One annotation per loop: none, unroll, vec (or a thread binding)."""

    kind = "an"

    def __init__(self, anns: Sequence[str]):
        self.anns = [str(a) for a in anns]

    @property
    def value(self):
        return list(self.anns)

    def apply(self, sch, loops):
        """Annotate TensorIR loops."""
        for loop, ann in zip(loops, self.anns):
            if ann == "unroll":
                sch.unroll(loop)
            elif ann == "vec":
                sch.vectorize(loop)
            elif ann != "none":
                sch.bind(loop, ann)
        return loops

    def __eq__(self, other):
        return isinstance(other, AnnotateEntity) and other.anns == self.anns

    def __hash__(self):
        return hash(("an", tuple(self.anns)))

    def __repr__(self):
        return str(self.anns)


_ENTITY_BY_KIND = {"sp": SplitEntity, "ot": OtherOptionEntity, "re": ReorderEntity,
                   "an": AnnotateEntity}


# --------------------------------------------------------------------------------------------
# knob spaces: the list of entities of one knob


class KnobSpace:
    kind = ""

    def __init__(self, name: str, entities: List[Any]):
        if not entities:
            raise SpaceError(f"knob '{name}' has no candidates left (check its range and filter)")
        self.name = name
        self.entities = entities

    def __len__(self):
        return len(self.entities)

    def __getitem__(self, i):
        return self.entities[i]

    def index_of(self, entity) -> Optional[int]:
        try:
            return self.entities.index(entity)
        except ValueError:
            return None


class SplitSpace(KnobSpace):
    """All ways to split an axis of ``length`` into ``num_outputs`` factors (AutoTVM policies:
    factors, power2, verbose, candidate)."""

    kind = "sp"

    def __init__(self, name, length, *, num_outputs=2, policy="factors", max_factor=None,
                 filter=None, no_tail=None, candidate=None):
        length = int(length)
        if length < 1:
            raise SpaceError(f"split '{name}': axis length must be >= 1, got {length}")
        if num_outputs < 1:
            raise SpaceError(f"split '{name}': num_outputs must be >= 1")
        self.length, self.num_outputs, self.policy = length, int(num_outputs), policy
        max_factor = int(max_factor) if max_factor else 1 << 31
        entities = []
        if policy == "candidate":
            for size in candidate or []:
                if len(size) != num_outputs:
                    raise SpaceError(f"split '{name}': candidate {size} does not have "
                                     f"{num_outputs} sizes")
                entities.append(SplitEntity(size))
        else:
            if policy == "factors":
                factors = get_factors(length)
            elif policy == "power2":
                factors = get_pow2s(length)
            elif policy == "verbose":
                factors = sorted(set(get_factors(length)) | set(get_pow2s(length)))
            else:
                raise SpaceError(f"split '{name}': unknown policy '{policy}' "
                                 "(factors, power2, verbose, candidate)")
            factors = [f for f in factors if f <= max_factor]
            no_tail = (policy == "factors") if no_tail is None else bool(no_tail)
            # Same DFS as AutoTVM: the first chosen factor is the innermost size.
            for combo in itertools.product(factors, repeat=num_outputs - 1):
                # itertools.product varies the last position fastest; AutoTVM's DFS varies the
                # deepest (last chosen) fastest as well, and writes [-1] + reversed(stack).
                prod = int(np.prod(combo)) if combo else 1
                if prod > length:
                    continue
                if length % prod == 0 or (not no_tail and prod < length):
                    entities.append(SplitEntity([-1] + list(combo[::-1])))
        if filter is not None:
            entities = [e for e in entities if filter(e)]
        super().__init__(name, entities)


class OtherOptionSpace(KnobSpace):
    kind = "ot"

    def __init__(self, name, candidates):
        super().__init__(name, [OtherOptionEntity(c) for c in candidates])


class ReorderSpace(KnobSpace):
    """Permutations of ``num_axes`` loops: identity, all, interval_all, candidate."""

    kind = "re"

    def __init__(self, name, num_axes, policy="all", interval=None, candidate=None):
        n = int(num_axes)
        if policy == "identity":
            perms = [list(range(n))]
        elif policy == "all":
            perms = [list(p) for p in itertools.permutations(range(n))]
        elif policy == "interval_all":
            begin, end = interval
            perms = [list(range(begin)) + list(p) + list(range(end, n))
                     for p in itertools.permutations(range(begin, end))]
        elif policy == "candidate":
            perms = [list(p) for p in candidate or []]
            for p in perms:
                if sorted(p) != list(range(n)):
                    raise SpaceError(f"reorder '{name}': {p} is not a permutation of {n} axes")
        else:
            raise SpaceError(f"reorder '{name}': unknown policy '{policy}'")
        super().__init__(name, [ReorderEntity(p) for p in perms])


class AnnotateSpace(KnobSpace):
    """Per-loop annotations; policies as AutoTVM: none, unroll, vec, try_unroll, try_vec,
    try_unroll_vec (at most one vectorized loop), or candidate."""

    kind = "an"

    def __init__(self, name, num_axes, policy="try_unroll", candidate=None):
        n = int(num_axes)
        if policy == "candidate":
            entities = [AnnotateEntity(c) for c in candidate or []]
        else:
            anns = policy.replace("try", "none").split("_")
            for ann in anns:
                if ann not in ("none", "unroll", "vec"):
                    raise SpaceError(f"annotate '{name}': unknown policy '{policy}'")
            entities = [AnnotateEntity(c) for c in itertools.product(anns, repeat=n)
                        if list(c).count("vec") <= 1]
        super().__init__(name, entities)


# --------------------------------------------------------------------------------------------
# safe expressions for filters and constraints ("tile_x[-1] * tile_y[-1] <= 64")

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b}
_FUNCS = {"min": min, "max": max, "len": len, "abs": abs,
          "prod": lambda xs: int(np.prod(list(xs))), "ceildiv": lambda a, b: -(-a // b)}


@functools.lru_cache(maxsize=512)
def _parse(expr: str):
    try:
        return ast.parse(expr, mode="eval").body
    except SyntaxError as err:
        raise SpaceError(f"cannot parse expression '{expr}': {err.msg}") from None


def eval_expr(expr: str, names: Mapping[str, Any]):
    """Evaluate a small arithmetic/boolean expression over ``names`` (no calls but min, max,
    len, abs, prod, ceildiv; no attribute access)."""

    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise SpaceError(f"unknown name '{node.id}' in expression '{expr}' "
                                 f"(known: {', '.join(sorted(names))})")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                return -ev(node.operand)
            if isinstance(node.op, ast.Not):
                return not ev(node.operand)
        if isinstance(node, ast.BoolOp):
            vals = (ev(v) for v in node.values)
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Subscript):
            return ev(node.value)[ev(node.slice)]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise SpaceError(f"unsupported syntax in expression '{expr}'")

    return ev(_parse(expr))


# --------------------------------------------------------------------------------------------
# configs


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


class ConfigSpace:
    """An ordered set of knobs, with constraints over them.

    Hardware facts (``vector_lanes``, ``max_threads_per_block``, ...) and workload sizes given as
    ``facts`` can be named in filters and constraints.
    """

    def __init__(self, facts: Optional[Mapping[str, Any]] = None, template: str = ""):
        self.template = template
        self.knobs: "OrderedDict[str, KnobSpace]" = OrderedDict()
        self.constraints: List[tuple] = []  # (description, predicate(names) -> bool)
        self.facts = dict(facts or {})
        self._radix: Optional[List[int]] = None

    # ---- definition (AutoTVM vocabulary) ----
    def _add(self, knob: KnobSpace):
        if knob.name in self.knobs:
            raise SpaceError(f"knob '{knob.name}' defined twice")
        self.knobs[knob.name] = knob
        self._radix = None
        return knob

    def define_split(self, name, length, policy="factors", *, num_outputs=2, max_factor=None,
                     filter=None, no_tail=None, candidate=None):
        if isinstance(filter, str):
            filter = self._entity_filter(name, filter)
        return self._add(SplitSpace(name, length, num_outputs=num_outputs, policy=policy,
                                    max_factor=max_factor, filter=filter, no_tail=no_tail,
                                    candidate=candidate))

    def define_knob(self, name, candidate):
        return self._add(OtherOptionSpace(name, candidate))

    def define_reorder(self, name, num_axes, policy="all", **kwargs):
        return self._add(ReorderSpace(name, num_axes, policy, **kwargs))

    def define_annotate(self, name, num_axes, policy="try_unroll", **kwargs):
        return self._add(AnnotateSpace(name, num_axes, policy, **kwargs))

    def add_constraint(self, pred, description: Optional[str] = None):
        """A filter over several knobs: a string expression over knob values and facts, or a
        callable taking {name: value}."""
        if isinstance(pred, str):
            expr = pred
            _parse(expr)
            self.constraints.append((description or expr, lambda names: eval_expr(expr, names)))
        else:
            self.constraints.append((description or getattr(pred, "__name__", "constraint"),
                                     pred))

    def _entity_filter(self, name, expr):
        _parse(expr)

        def keep(entity):
            length = self.facts.get("_len_" + name)
            size = entity.resolved(length) if length else entity.size
            return bool(eval_expr(expr, {**self.facts, "size": size}))
        return keep

    # ---- indexing ----
    @property
    def radix(self) -> List[int]:
        if self._radix is None:
            self._radix = [len(k) for k in self.knobs.values()]
        return self._radix

    def __len__(self):
        return int(np.prod(self.radix, dtype=object)) if self.knobs else 1

    def get(self, index: int) -> ConfigEntity:
        """Config number ``index`` (first-defined knob = least significant digit)."""
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} outside space of {len(self)}")
        entities, t = OrderedDict(), int(index)
        for name, knob in self.knobs.items():
            entities[name] = knob[t % len(knob)]
            t //= len(knob)
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

    def knob_values(self, index: int) -> List[int]:
        """Per-knob digit of an index."""
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
    def names_of(self, config: ConfigEntity) -> Dict[str, Any]:
        """Names visible to constraints: facts plus each knob's value (split sizes resolved)."""
        names = dict(self.facts)
        for name, entity in config.items():
            if isinstance(entity, SplitEntity) and name in self.knobs:
                names[name] = entity.resolved(self.knobs[name].length)
            else:
                names[name] = entity.value
        return names

    def violations(self, config: ConfigEntity) -> List[str]:
        names = self.names_of(config)
        return [desc for desc, pred in self.constraints if not pred(names)]

    def is_valid(self, config_or_index) -> bool:
        config = self.get(config_or_index) if isinstance(config_or_index, int) \
            else config_or_index
        names = self.names_of(config)
        return all(pred(names) for _, pred in self.constraints)

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
        for desc, _ in self.constraints:
            lines.append(f"  constraint: {desc}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# spaces as data: tuning_spaces/<template>.json


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
    if not isinstance(spec, dict) or not isinstance(spec.get("knobs"), list):
        raise SpaceError(f"space file {p} needs an object with a 'knobs' list")
    if spec.get("template", template) != template:
        raise SpaceError(f"space file {p} is for template '{spec.get('template')}', "
                         f"not '{template}'")
    return spec


def build_space(spec: Mapping[str, Any], axes: Mapping[str, int],
                facts: Optional[Mapping[str, Any]] = None) -> ConfigSpace:
    """A ConfigSpace from a space spec.

    ``axes`` maps axis names used by split knobs ("M", "N", "K", "B") to their lengths; ``facts``
    are extra names for filters and constraints (hardware facts, dtype sizes). A knob's
    ``"when"`` expression (over facts) leaves the knob out where false, and its ``"default"``
    value is then used by the template.
    """
    names = {**(facts or {}), **axes}
    space = ConfigSpace(names, spec.get("template", ""))
    for k in spec["knobs"]:
        try:
            name, kind = k["name"], k["kind"]
        except KeyError as err:
            raise SpaceError(f"knob {k} lacks field {err}") from None
        if "when" in k and not eval_expr(k["when"], names):
            continue
        if kind == "split":
            axis = k.get("axis")
            if axis not in axes:
                raise SpaceError(f"split '{name}' names axis '{axis}'; "
                                 f"this template has {', '.join(axes)}")
            space.facts["_len_" + name] = axes[axis]
            max_factor = k.get("max_factor")
            if isinstance(max_factor, str):
                max_factor = eval_expr(max_factor, names)
            space.define_split(name, axes[axis], k.get("policy", "factors"),
                               num_outputs=k.get("num_outputs", 2), max_factor=max_factor,
                               filter=k.get("filter"), no_tail=k.get("no_tail"),
                               candidate=k.get("candidate"))
        elif kind == "knob":
            cands = k.get("candidates")
            if not isinstance(cands, list):
                raise SpaceError(f"knob '{name}' needs a 'candidates' list")
            if "filter" in k:
                cands = [c for c in cands if eval_expr(k["filter"], {**names, "value": c})]
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
    for c in spec.get("constraints", []):
        if isinstance(c, dict):
            space.add_constraint(c["expr"], c.get("why"))
        else:
            space.add_constraint(c)
    return space


def knob_defaults(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """Values of knobs that a spec leaves out (through ``when``) or marks with a default."""
    return {k["name"]: k["default"] for k in spec["knobs"] if "default" in k}


def knob_default_exprs(spec: Mapping[str, Any]) -> Dict[str, str]:
    """Knobs whose default depends on the config's other knobs: ``"default_expr"`` is an
    expression over them (as in constraints), e.g. ``"[-1, tile_y[-1]]"`` for a split that
    did not exist when ``tile_y`` alone set the register tile."""
    return {k["name"]: k["default_expr"] for k in spec["knobs"] if "default_expr" in k}
