"""Safe expressions for filters, constraints and let terms ("tile_x[-1] * tile_y[-1] <= 64").

Space files are data that users edit, so their expressions are parsed with ``ast`` and walked by
a small evaluator: arithmetic, comparisons, boolean logic, subscripts, conditional expressions
and a handful of functions, never attribute access or arbitrary calls.
"""
from __future__ import annotations

import ast
import functools
import math
import operator
from typing import Any, FrozenSet, Mapping

from ..errors import SpaceError

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b}
# Bounds on the work of one evaluation: a space file is data, and ``2 ** 999999999`` or
# ``[0] * 10 ** 9`` would otherwise compute (or allocate) for minutes before anything is tuned.
# Sizes, tiles and their products in a space stay far below both.
MAX_INT_BITS = 1024
MAX_SEQUENCE = 1 << 16


class _TooLarge(Exception):
    """A value past the bounds (the evaluator names the expression)."""


def _bounded(value):
    if _is_int(value) and value.bit_length() > MAX_INT_BITS:
        raise _TooLarge(f"an integer of {value.bit_length()} bits (at most {MAX_INT_BITS})")
    if isinstance(value, (list, tuple, str)) and len(value) > MAX_SEQUENCE:
        raise _TooLarge(f"a sequence of {len(value)} items (at most {MAX_SEQUENCE})")
    return value


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _binop(op, left, right):
    """``op(left, right)`` within the bounds: a power or a repeated sequence is refused before
    the work where the operands show that the result would be too large; a product or a sum
    (of sequences: concatenation) is checked after it. Other operators do not grow values."""
    kind = type(op)
    if kind is ast.Pow:
        if _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1 \
                and right * math.log2(abs(left)) > MAX_INT_BITS:
            raise _TooLarge(f"{left} ** {right} has more than {MAX_INT_BITS} bits")
    elif kind is ast.Mult:
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (list, tuple, str)) and _is_int(n) and len(seq) * n > MAX_SEQUENCE:
                raise _TooLarge(f"a sequence repeated to {len(seq) * n} items "
                                f"(at most {MAX_SEQUENCE})")
    elif kind is not ast.Add:
        return _BINOPS[kind](left, right)
    return _bounded(_BINOPS[kind](left, right))


_MULT = ast.Mult()
_ADD = ast.Add()
_BIG = 1 << MAX_INT_BITS


def _mul(left, right):
    """``_binop`` of ``*``, quicker on two ints (the usual terms)."""
    if type(left) is int and type(right) is int:
        out = left * right
        return out if -_BIG < out < _BIG else _bounded(out)
    return _binop(_MULT, left, right)


def _add(left, right):
    """``_binop`` of ``+``, quicker on two ints."""
    if type(left) is int and type(right) is int:
        out = left + right
        return out if -_BIG < out < _BIG else _bounded(out)
    return _binop(_ADD, left, right)


def _prod(xs) -> int:
    out = 1
    for x in xs:  # bounded at every step: a long product of large terms grows quadratically
        out = _binop(_MULT, out, x)
    return int(out)


_FUNCS = {"min": min, "max": max, "len": len, "abs": abs, "prod": _prod,
          "ceildiv": lambda a, b: -(-a // b)}


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
            return _binop(node.op, ev(node.left), ev(node.right))
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
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])  # prod: bounded
        raise SpaceError(f"unsupported syntax in expression '{expr}'")

    try:
        return ev(tree)
    except _TooLarge as err:
        raise SpaceError(f"expression '{expr}' is too large to evaluate: {err}") from None


class _Unsupported(Exception):
    """Syntax the compiler leaves to the evaluator (which names it when it is met)."""


_NATIVE = {ast.Sub: "-", ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%"}
_NATIVE_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
               ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in"}


@functools.lru_cache(maxsize=512)
def _compiled(expr: str):
    """``_evaluate`` of ``expr`` as one Python function of ``names`` (None: syntax the
    evaluator refuses): the same operators, bounds (``_binop`` for the operators that grow
    values) and functions, with no tree walked per config. A proposer checks 16000 configs
    of a space, each 20 let terms and constraints: walking their trees took most of its
    ranking time."""
    consts: list = []

    def src(node) -> str:
        if isinstance(node, ast.Constant):
            consts.append(node.value)
            return f"_c[{len(consts) - 1}]"
        if isinstance(node, ast.Name):
            return f"_n[{node.id!r}]"
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            if type(node.op) in _NATIVE:
                return f"({src(node.left)} {_NATIVE[type(node.op)]} {src(node.right)})"
            if type(node.op) in (ast.Mult, ast.Add):
                helper = "_mul" if isinstance(node.op, ast.Mult) else "_add"
                return f"{helper}({src(node.left)}, {src(node.right)})"
            consts.append(node.op)
            return f"_b(_c[{len(consts) - 1}], {src(node.left)}, {src(node.right)})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            return f"({'-' if isinstance(node.op, ast.USub) else 'not '}{src(node.operand)})"
        if isinstance(node, ast.BoolOp):
            op = " and " if isinstance(node.op, ast.And) else " or "
            return f"bool({op.join(src(v) for v in node.values)})"
        if isinstance(node, ast.Compare) and all(type(o) in _NATIVE_CMP for o in node.ops):
            parts = [src(node.left)]
            for op, comp in zip(node.ops, node.comparators):
                parts += [_NATIVE_CMP[type(op)], src(comp)]
            return f"({' '.join(parts)})"
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            return f"{src(node.value)}[{src(node.slice)}]"
        if isinstance(node, (ast.List, ast.Tuple)):
            return f"[{', '.join(src(e) for e in node.elts)}]"
        if isinstance(node, ast.IfExp):
            return f"({src(node.body)} if {src(node.test)} else {src(node.orelse)})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _FUNCS and not node.keywords \
                and not any(isinstance(a, ast.Starred) for a in node.args):
            return f"_f[{node.func.id!r}]({', '.join(src(a) for a in node.args)})"
        raise _Unsupported

    scope = {"_c": consts, "_b": _binop, "_mul": _mul, "_add": _add, "_f": _FUNCS}
    try:
        return eval(f"lambda _n: {src(_parse(expr))}", scope)  # noqa: S307  (our source)
    except (_Unsupported, SyntaxError, RecursionError, MemoryError, ValueError):
        return None  # e.g. a sum of 250 terms nests deeper than Python's parser allows


def eval_expr(expr: str, names: Mapping[str, Any]):
    """Evaluate a small arithmetic/boolean expression over ``names`` (no calls but min, max,
    len, abs, prod, ceildiv; no attribute access)."""
    return _evaluate(_parse(expr), names, expr)


class Expr:
    """An expression parsed once and evaluated per config (constraints, let terms).

    ``names`` are the names it reads, so a caller can check them before any config exists.
    """

    __slots__ = ("text", "tree", "names", "_fn")

    def __init__(self, text: str):
        self.text = text
        self.tree = _parse(text)
        self._fn = _compiled(text)
        # A call's function is looked up in _FUNCS, not in the names: it is not a name read.
        callees = {id(n.func) for n in ast.walk(self.tree) if isinstance(n, ast.Call)}
        self.names: FrozenSet[str] = frozenset(
            n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and id(n) not in callees)

    def __call__(self, names: Mapping[str, Any]):
        if self._fn is None:
            return _evaluate(self.tree, names, self.text)
        try:
            return self._fn(names)
        except KeyError as err:
            name = err.args[0] if err.args else None
            if name in self.names and name not in names:
                raise SpaceError(f"unknown name '{name}' in expression '{self.text}' "
                                 f"(known: {', '.join(sorted(names))})") from None
            raise
        except _TooLarge as err:
            raise SpaceError(f"expression '{self.text}' is too large to evaluate: "
                             f"{err}") from None

    def __repr__(self):
        return f"Expr({self.text!r})"
