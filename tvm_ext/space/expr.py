"""Safe expressions for filters, constraints and let terms ("tile_x[-1] * tile_y[-1] <= 64").

Space files are data that users edit, so their expressions are parsed with ``ast`` and walked by
a small evaluator: arithmetic, comparisons, boolean logic, subscripts, conditional expressions
and a handful of functions, never attribute access or arbitrary calls.
"""
from __future__ import annotations

import ast
import functools
import operator
from typing import Any, FrozenSet, Mapping

import numpy as np

from ..errors import SpaceError

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


def _evaluate(tree, names: Mapping[str, Any], expr: str):
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

    return ev(tree)


def eval_expr(expr: str, names: Mapping[str, Any]):
    """Evaluate a small arithmetic/boolean expression over ``names`` (no calls but min, max,
    len, abs, prod, ceildiv; no attribute access)."""
    return _evaluate(_parse(expr), names, expr)


class Expr:
    """An expression parsed once and evaluated per config (constraints, let terms).

    ``names`` are the names it reads, so a caller can check them before any config exists.
    """

    __slots__ = ("text", "tree", "names")

    def __init__(self, text: str):
        self.text = text
        self.tree = _parse(text)
        # A call's function is looked up in _FUNCS, not in the names: it is not a name read.
        callees = {id(n.func) for n in ast.walk(self.tree) if isinstance(n, ast.Call)}
        self.names: FrozenSet[str] = frozenset(
            n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and id(n) not in callees)

    def __call__(self, names: Mapping[str, Any]):
        return _evaluate(self.tree, names, self.text)

    def __repr__(self):
        return f"Expr({self.text!r})"
