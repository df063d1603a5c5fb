"""Knobs: the entities of one decision (a split, a value, a permutation, annotations) and the
knob spaces that list them in AutoTVM's order, so that an index from an AutoTVM log of the same
space names the same config here."""
from __future__ import annotations

import itertools
import json
import math
from typing import Any, List, Optional, Sequence

from ..errors import SpaceError

# A knob enumerates at most this many candidates (before its filter): a split of a long axis
# into many factors, or all orders of many loops, would otherwise enumerate for hours.
MAX_CANDIDATES = 1 << 21


def _check_count(name: str, count: int, what: str) -> None:
    if count > MAX_CANDIDATES:
        raise SpaceError(f"knob '{name}' would enumerate {count} candidates ({what}); at most "
                         f"{MAX_CANDIDATES}: use fewer outputs/axes or a 'candidate' policy")


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
        inner = math.prod(self.size[1:])  # math's: numpy's costs 20 us on a short list
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
    factors, power2, verbose, candidate). ``extra_inner``: sizes the innermost output may also
    take beside the policy's (a register tile's rows sized from the vector registers: 6 rows
    of two AVX2 vectors, which divide no power of two); their splits follow the policy's,
    so every split the policy alone gives keeps its place. ``whole_axis`` (3 outputs): then,
    for each innermost size that does not divide the axis, [-1, ceil(length / size), size]:
    the whole padded axis in one outer tile (171 tiles of 6 rows for M = 1024)."""

    kind = "sp"

    def __init__(self, name, length, *, num_outputs=2, policy="factors", max_factor=None,
                 filter=None, no_tail=None, candidate=None, extra_inner=(),
                 whole_axis=False):
        length = int(length)
        if length < 1:
            raise SpaceError(f"split '{name}': axis length must be >= 1, got {length}")
        if num_outputs < 1:
            raise SpaceError(f"split '{name}': num_outputs must be >= 1")
        self.length, self.num_outputs, self.policy = length, int(num_outputs), policy
        if extra_inner and (policy == "candidate" or num_outputs < 2):
            # never dropped in silence: a candidate list is the whole set of splits, and one
            # output has no innermost factor of its own
            raise SpaceError(f"split '{name}': extra_inner needs a policy that makes the "
                             f"splits and 2 or more outputs (got policy '{policy}', "
                             f"{num_outputs} output{'s' if num_outputs != 1 else ''})")
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
            _check_count(name, len(factors) ** (num_outputs - 1),
                         f"{len(factors)} factors of {length} in {num_outputs} outputs")
            no_tail = (policy == "factors") if no_tail is None else bool(no_tail)
            # Same DFS as AutoTVM: the first chosen factor (a combo's first) is the innermost.
            sizes = [factors] * (num_outputs - 1)
            extra = sorted({int(e) for e in extra_inner if 0 < int(e) <= max_factor}
                           - set(factors))
            for lists in [sizes] + ([[extra] + sizes[1:]] if extra and sizes else []):
                # itertools.product varies the last position fastest; AutoTVM's DFS varies the
                # deepest (last chosen) fastest as well, and writes [-1] + reversed(stack).
                for combo in itertools.product(*lists):
                    prod = math.prod(combo)
                    if prod > length:
                        continue
                    if length % prod == 0 or (not no_tail and prod < length):
                        entities.append(SplitEntity([-1] + list(combo[::-1])))
        if whole_axis:
            if num_outputs != 3:
                raise SpaceError(f"split '{name}': whole_axis needs 3 outputs, got {num_outputs}")
            for inner in sorted({e.size[-1] for e in entities if length % e.size[-1]}):
                whole = SplitEntity([-1, -(-length // inner), inner])
                if whole.size[1] <= max_factor and whole not in entities:
                    entities.append(whole)
        if filter is not None:
            kept = [e for e in entities if filter(e)]
            if entities and not kept:
                text = getattr(filter, "text", None)  # an expression filter's source
                raise SpaceError(f"split '{name}' of {length} ({policy}, {num_outputs} "
                                 f"outputs): filter{f' {text!r}' if text else ''} leaves none "
                                 f"of its {len(entities)} splits")
            entities = kept
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
        if policy in ("all", "interval_all"):
            free = n if policy == "all" else interval[1] - interval[0]
            _check_count(name, math.factorial(max(free, 0)), f"all orders of {free} loops")
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
            _check_count(name, len(anns) ** n, f"{len(anns)} annotations on each of {n} loops")
            entities = [AnnotateEntity(c) for c in itertools.product(anns, repeat=n)
                        if list(c).count("vec") <= 1]
        super().__init__(name, entities)
