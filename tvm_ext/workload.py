"""Workloads: what is computed (op, sizes, dtypes, layout), independent of how.

A workload serialises to the AutoTVM argument tuple that TVM <= 0.19 wrote into its logs, and is
read back from every form those logs used:

    batch_matmul  (x, y, out_shape, out_dtype, transpose_a, transpose_b)    TVM 0.8 - 0.19
                  (x, y)                                                   before 0.8 (NT)
    dense         (data, weight, bias, out_dtype)                          weight is [N, K]
                  (data, weight, bias, out_dtype, transpose_a, transpose_b)  our matmul form

with tensors written as ``["TENSOR", shape, dtype]``. The layout names the storage of A and B:
the first letter is A (N: [.., M, K], T: [.., K, M]), the second B (N: [.., K, N], T: [.., N, K]).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, List, Optional, Sequence, Tuple

from .errors import WorkloadError

OPS = ("batch_matmul", "dense")
LAYOUTS = ("NN", "NT", "TN", "TT")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32",
          "float8_e4m3fn", "float8_e5m2")
#: The 8-bit floats (OCP FP8: e4m3 without infinities, e5m2), which Hopper's wgmma multiplies.
FP8 = ("float8_e4m3fn", "float8_e5m2")
# The output (accumulator) dtypes each input dtype may have, the default first: a narrower
# integer output would wrap, a float output of int inputs (or int of floats) is no matmul that
# a template computes.
OUT_DTYPES = {"float16": ("float32", "float16"), "bfloat16": ("float32", "bfloat16"),
              "float32": ("float32",), "float64": ("float64",), "int8": ("int32",),
              "uint8": ("int32",), "int32": ("int32",),
              **{f8: ("float32", "float16", "bfloat16") for f8 in FP8}}
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
               "int32": 4, **{f8: 1 for f8 in FP8}}
# Kernels index their buffers with int32: a buffer of more elements cannot be addressed.
MAX_ELEMENTS = 2**31 - 1

# Shapes the CLI tunes when none is given: representative, and quick to tune.
DEFAULT_SHAPES = {("batch_matmul", "cpu"): (4, 256, 256, 256),
                  ("batch_matmul", "gpu"): (24, 2048, 512, 64),
                  ("dense", "cpu"): (1, 128, 3072, 768),
                  ("dense", "gpu"): (1, 16, 4096, 4096)}


@dataclass(frozen=True)
class Workload:
    """C[b, m, n] = sum_k A[b, m, k] * B[b, n, k] (for layout NT), accumulated in out_dtype.

    ``dense`` is the batch-free form with batch == 1 (data [M, K], weight [N, K] for NT).
    """

    op: str
    batch: int
    M: int
    N: int
    K: int
    dtype: str = "float32"
    out_dtype: str = "float32"
    layout: str = "NT"
    # The elementwise ops fused after the matmul (a subgraph task), e.g. "bias+gelu",
    # "cast:float16", "requant:0.05"; "" for the bare matmul (see ``parse_epilogue``).
    epilogue: str = ""

    def __post_init__(self):
        if self.op not in OPS:
            raise WorkloadError(f"unknown op '{self.op}' (known: {', '.join(OPS)})")
        for name in ("batch", "M", "N", "K"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise WorkloadError(f"{self.op}: {name} must be a positive integer, got {v!r}")
        if self.op == "dense" and self.batch != 1:
            raise WorkloadError(f"dense has no batch dimension (got batch={self.batch})")
        for name in ("dtype", "out_dtype"):
            if getattr(self, name) not in DTYPES:
                raise WorkloadError(f"unsupported {name} '{getattr(self, name)}' "
                                    f"(known: {', '.join(DTYPES)})")
        if self.out_dtype not in OUT_DTYPES[self.dtype]:
            raise WorkloadError(f"out_dtype {self.out_dtype} is not allowed for {self.dtype} "
                                f"inputs (allowed: {', '.join(OUT_DTYPES[self.dtype])})")
        if self.layout not in LAYOUTS:
            raise WorkloadError(f"unknown layout '{self.layout}' (known: {', '.join(LAYOUTS)})")
        if not isinstance(self.epilogue, str):
            raise WorkloadError(f"epilogue must be a string, got {self.epilogue!r}")
        epilogue_dtypes(self.epilogue, self.out_dtype)  # WorkloadError naming the bad op
        for name, shape, _ in self.buffers():
            n = math.prod(shape)
            if n > MAX_ELEMENTS:
                raise WorkloadError(f"{self.op} {self.shape_str()}: buffer {name} "
                                    f"{'x'.join(map(str, shape))} has {n} elements, more than "
                                    f"int32 indices address ({MAX_ELEMENTS})")

    # ---- construction ----
    @staticmethod
    def create(op: str, shape: Sequence[int], dtype: str = "float32",
               out_dtype: Optional[str] = None, layout: str = "NT",
               epilogue: str = "") -> "Workload":
        """From (B, M, N, K) for batch_matmul, (M, N, K) or (1, M, N, K) for dense."""
        shape = tuple(shape)
        if op == "dense" and len(shape) == 3:
            shape = (1,) + shape
        if len(shape) != 4:
            want = "BxMxNxK" if op == "batch_matmul" else "MxNxK"
            raise WorkloadError(f"{op} needs a shape {want}, got {'x'.join(map(str, shape))}")
        return Workload(op, *shape, dtype=dtype, out_dtype=out_dtype or default_out_dtype(dtype),
                        layout=layout, epilogue=epilogue)

    def with_(self, **changes) -> "Workload":
        return replace(self, **changes)

    # ---- derived ----
    @property
    def transpose_a(self) -> bool:
        return self.layout[0] == "T"

    @property
    def transpose_b(self) -> bool:
        return self.layout[1] == "T"

    @property
    def a_shape(self) -> Tuple[int, ...]:
        mk = (self.K, self.M) if self.transpose_a else (self.M, self.K)
        return mk if self.op == "dense" else (self.batch,) + mk

    @property
    def b_shape(self) -> Tuple[int, ...]:
        nk = (self.N, self.K) if self.transpose_b else (self.K, self.N)
        return nk if self.op == "dense" else (self.batch,) + nk

    @property
    def out_shape(self) -> Tuple[int, ...]:
        return (self.M, self.N) if self.op == "dense" else (self.batch, self.M, self.N)

    # ---- the epilogue of a subgraph task ----
    @property
    def anchor(self) -> "Workload":
        """The bare matmul of a subgraph task (itself when it has no epilogue)."""
        return replace(self, epilogue="") if self.epilogue else self

    @property
    def final_dtype(self) -> str:
        """The dtype of what the kernel writes: out_dtype, or the epilogue's last cast."""
        return epilogue_dtypes(self.epilogue, self.out_dtype)[-1]

    def epilogue_inputs(self) -> List[Tuple[str, Tuple[int, ...], str]]:
        """(name, shape, dtype) of the epilogue's extra inputs: a bias is a vector of N, a
        residual or a mul's factor is shaped as the output; each in the dtype the epilogue has
        at that op."""
        out = []
        dtypes = epilogue_dtypes(self.epilogue, self.out_dtype)
        for i, (name, _) in enumerate(parse_epilogue(self.epilogue)):
            if name == "bias":
                out.append((f"bias{i}", (self.N,), dtypes[i]))
            elif name in FULL_INPUT_OPS:
                out.append((f"{name}{i}", self.out_shape, dtypes[i]))
        return out

    def buffers(self) -> List[Tuple[str, Tuple[int, ...], str]]:
        """(name, shape, dtype) of the inputs A, B (then the epilogue's inputs) and the
        output C, in the kernel's argument order."""
        return [("A", self.a_shape, self.dtype), ("B", self.b_shape, self.dtype),
                *self.epilogue_inputs(), ("C", self.out_shape, self.final_dtype)]

    def buffer_bytes(self) -> List[Tuple[str, int]]:
        """(name, bytes) of A, B and C."""
        return [(name, math.prod(shape) * DTYPE_BYTES[dtype])
                for name, shape, dtype in self.buffers()]

    @property
    def out_bytes(self) -> int:
        """Bytes of the matmul's output (``out_dtype``)."""
        return math.prod(self.out_shape) * DTYPE_BYTES[self.out_dtype]

    @property
    def nbytes(self) -> int:
        """Bytes of A, B and C together: what a device must hold to run the workload."""
        return sum(n for _, n in self.buffer_bytes())

    @property
    def flop(self) -> int:
        return 2 * self.batch * self.M * self.N * self.K

    def key(self) -> tuple:
        """What identifies a workload in logs and at apply time (not the template)."""
        return (self.op, self.batch, self.M, self.N, self.K, self.dtype, self.out_dtype,
                self.layout, self.epilogue)

    def shape_str(self) -> str:
        dims = (self.M, self.N, self.K) if self.op == "dense" else \
            (self.batch, self.M, self.N, self.K)
        return "x".join(map(str, dims))

    def __str__(self):
        out = "" if self.out_dtype == default_out_dtype(self.dtype) else f"->{self.out_dtype}"
        epi = f" +{self.epilogue}" if self.epilogue else ""
        return f"{self.op} {self.shape_str()} {self.dtype}{out} {self.layout}{epi}"

    # ---- AutoTVM argument tuple ----
    def to_args(self) -> List[Any]:
        """The AutoTVM argument list; a subgraph task's ends with {"epilogue": ...}."""
        a = ["TENSOR", list(self.a_shape), self.dtype]
        b = ["TENSOR", list(self.b_shape), self.dtype]
        epi = [{"epilogue": self.epilogue}] if self.epilogue else []
        if self.op == "batch_matmul":
            return [a, b, list(self.out_shape), self.out_dtype, self.transpose_a,
                    self.transpose_b, *epi]
        if self.layout == "NT" and not epi:
            return [a, b, None, self.out_dtype]
        return [a, b, None, self.out_dtype, self.transpose_a, self.transpose_b, *epi]

    @staticmethod
    def from_args(op: str, args: Sequence[Any]) -> "Workload":
        """Parse an AutoTVM args tuple (any of the historical forms)."""
        try:
            if op in OPS:
                args = list(args)
                epilogue = ""
                if args and isinstance(args[-1], dict):
                    extra = args.pop()
                    unknown = set(extra) - {"epilogue"}
                    if unknown:
                        raise WorkloadError(f"unknown {op} argument(s) {sorted(unknown)}")
                    epilogue = extra.get("epilogue") or ""
                wl = _matmul_from_args(op, args)
                return replace(wl, epilogue=epilogue) if epilogue else wl
        except (TypeError, ValueError, IndexError, KeyError) as err:
            if isinstance(err, WorkloadError):
                raise
            raise WorkloadError(f"cannot read {op} arguments {args!r}: {err}") from None
        raise WorkloadError(f"unknown op '{op}' (known: {', '.join(OPS)})")


def _tensor(t) -> Tuple[Tuple[int, ...], str]:
    if not (isinstance(t, (list, tuple)) and len(t) == 3 and t[0] == "TENSOR"):
        raise WorkloadError(f"expected a ['TENSOR', shape, dtype] entry, got {t!r}")
    return tuple(int(x) for x in t[1]), str(t[2])


def _matmul_from_args(op: str, args) -> Workload:
    (sa, da), (sb, _) = _tensor(args[0]), _tensor(args[1])
    out_dtype = args[3] if len(args) > 3 and args[3] else da
    ta = bool(args[4]) if len(args) > 4 else False
    tb = bool(args[5]) if len(args) > 5 else True
    ndim = 3 if op == "batch_matmul" else 2
    if len(sa) != ndim or len(sb) != ndim:
        raise WorkloadError(f"{op} needs {ndim}-D tensors, got {sa} and {sb}")
    M, K = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    N, Kb = (sb[-2], sb[-1]) if tb else (sb[-1], sb[-2])
    if K != Kb:
        raise WorkloadError(f"{op} reduction sizes differ: {sa} vs {sb}")
    if ndim == 3 and sa[0] != sb[0]:
        raise WorkloadError(f"batch_matmul with a broadcast batch ({sa[0]} vs {sb[0]}) "
                            "is not supported")
    return Workload(op, sa[0] if ndim == 3 else 1, M, N, K, da, out_dtype,
                    ("T" if ta else "N") + ("T" if tb else "N"))


# ---- epilogues: the elementwise ops a subgraph task computes after its matmul ----

#: Ops of an epilogue, "+"-separated in order: bias (a vector of N added), residual (a tensor
#: shaped as the output added), mul (a tensor shaped as the output multiplied: a gated MLP's
#: silu(x W_gate) * (x W_up)), relu, gelu (erf form), gelu_tanh (GPT-2's tanh form), silu,
#: exp, tanh (BERT's pooler), sigmoid, scale:<float> (a constant factor), cast:<dtype>,
#: requant:<scale> (int32 -> int8: scaled, rounded half to even, clipped to [-128, 127]).
EPILOGUE_OPS = ("bias", "residual", "mul", "relu", "gelu", "gelu_tanh", "silu", "exp", "tanh",
                "sigmoid", "scale", "cast", "requant")
#: The ops that read a tensor shaped as the output.
FULL_INPUT_OPS = ("residual", "mul")


def parse_epilogue(text: str) -> List[Tuple[str, Optional[str]]]:
    """'bias+gelu+cast:float16' -> [('bias', None), ('gelu', None), ('cast', 'float16')]."""
    out = []
    for item in (text.split("+") if text else []):
        name, colon, arg = item.strip().partition(":")
        if name not in EPILOGUE_OPS:
            raise WorkloadError(f"unknown epilogue op '{item}' (known: "
                                f"{', '.join(EPILOGUE_OPS)})")
        takes = name in ("scale", "cast", "requant")
        if takes != bool(colon and arg):
            want = f"needs a value ({name}:VALUE)" if takes else "takes no value"
            raise WorkloadError(f"epilogue op '{item}': {name} {want}")
        out.append((name, arg if takes else None))
    return out


def epilogue_dtypes(text: str, out_dtype: str) -> List[str]:
    """The dtype going into each op of an epilogue, then the final one (len(ops) + 1)."""
    cur, out = out_dtype, []
    for name, arg in parse_epilogue(text):
        out.append(cur)
        if name == "cast":
            if arg not in DTYPES:
                raise WorkloadError(f"epilogue cast to unknown dtype '{arg}'")
            cur = arg
        elif name in ("scale", "requant"):
            try:
                value = float(arg)
            except ValueError:
                raise WorkloadError(f"epilogue {name}:{arg}: not a number") from None
            if not (math.isfinite(value) and value > 0):
                raise WorkloadError(f"epilogue {name}:{arg}: must be a positive number")
            if name == "requant":
                if cur != "int32":
                    raise WorkloadError(f"epilogue requant needs an int32 accumulator, not {cur}")
                cur = "int8"
        elif name in ("gelu", "gelu_tanh", "silu", "exp", "tanh", "sigmoid") and \
                not cur.startswith(("float", "bf")):
            raise WorkloadError(f"epilogue {name} needs a float value, not {cur}")
    return out + [cur]


def default_out_dtype(dtype: str) -> str:
    return OUT_DTYPES[dtype][0] if dtype in OUT_DTYPES else dtype


_SHAPE_RE = re.compile(r"^\d+(x\d+)*$")


def parse_shape(text: str, op: str) -> Tuple[int, ...]:
    """'4x256x256x256' -> (4, 256, 256, 256); a clear error for anything else."""
    want = "BxMxNxK" if op == "batch_matmul" else "MxNxK"
    t = text.strip().lower().replace("*", "x").replace(",", "x")
    if not _SHAPE_RE.match(t):
        raise WorkloadError(f"malformed shape '{text}': expected {want} with positive integers,"
                            " e.g. " + ("4x256x256x256" if op == "batch_matmul" else
                                        "128x3072x768"))
    dims = tuple(int(x) for x in t.split("x"))
    n = 4 if op == "batch_matmul" else 3
    if len(dims) != n and not (op == "dense" and len(dims) == 4 and dims[0] == 1):
        raise WorkloadError(f"malformed shape '{text}': {op} needs {n} sizes ({want}), "
                            f"got {len(dims)}")
    if any(d < 1 for d in dims):
        raise WorkloadError(f"malformed shape '{text}': sizes must be >= 1")
    return dims


def cli_workload(op: str, shape: Optional[str], dtype: str, out_dtype: Optional[str],
                 layout: str, epilogue: str = "", default: Optional[Sequence[int]] = None):
    """The workload of the command lines' --op, --shape (``default`` where None), --dtype,
    --out-dtype, --layout and --epilogue; a one-line WorkloadError for a bad one."""
    if op not in OPS:
        raise WorkloadError(f"unknown op '{op}' (known: {', '.join(OPS)})")
    if layout not in LAYOUTS:
        raise WorkloadError(f"unknown layout '{layout}' (known: {', '.join(LAYOUTS)})")
    # --shape "" is a malformed shape, not the default one
    dims = parse_shape(shape, op) if shape is not None else tuple(default)
    return Workload.create(op, dims, dtype, out_dtype, layout, epilogue=epilogue)


# ---- shape families: a workload whose dims are fixed, a set, a range, or anything ----

AXES = ("B", "M", "N", "K")
# A range axis is enumerated (its shapes checked, weighted, bucketed) up to this many values.
MAX_AXIS_VALUES = 65536
_ITEM_RE = re.compile(r"^(\d+)(?:\.\.(\d+)(?::(\d+))?)?$")


@dataclass(frozen=True)
class Dim:
    """One axis of a family: ``values`` (sorted, distinct) or None for "any" (``?``); ``tie``
    names the axis whose size this one always equals ('=M': attention's scores, seq x seq)."""

    text: str
    values: Optional[Tuple[int, ...]]
    tie: Optional[str] = None

    @property
    def fixed(self) -> bool:
        return self.values is not None and len(self.values) == 1

    @property
    def varies(self) -> bool:
        return not self.fixed

    def __contains__(self, v: int) -> bool:
        return self.values is None or v in self._set

    @property
    def _set(self):
        return frozenset(self.values or ())

    @staticmethod
    def parse(text: str, axis: str) -> "Dim":
        """'64', '8,16,24', '1..24', '512..16384:512', '1..8,16', '?' -> Dim; '=M' (the size of
        another axis) -> a tied Dim whose values ``Family.parse`` fills in."""
        t = text.strip()
        if t == "?":
            return Dim("?", None)
        if t.startswith("="):
            ref = t[1:].strip().upper()
            if ref not in AXES or ref == axis:
                raise WorkloadError(f"malformed size '{text}' for axis {axis}: '=A' ties it to "
                                    f"another axis A of {', '.join(AXES)}")
            return Dim(f"={ref.lower()}", None, tie=ref)
        values = set()
        for item in t.split(","):
            m = _ITEM_RE.match(item.strip())
            if not m:
                raise WorkloadError(f"malformed size '{item}' for axis {axis}: expected N, "
                                    "N,N,..., LO..HI, LO..HI:STEP or ?")
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) else lo
            step = int(m.group(3)) if m.group(3) else 1
            if lo < 1 or hi < lo or step < 1:
                raise WorkloadError(f"malformed size '{item}' for axis {axis}: sizes are >= 1, "
                                    "LO <= HI and STEP >= 1")
            if (hi - lo) // step + 1 + len(values) > MAX_AXIS_VALUES:
                raise WorkloadError(f"axis {axis} '{t}' has more than {MAX_AXIS_VALUES} values:"
                                    " give a step (LO..HI:STEP) or a shape trace")
            values.update(range(lo, hi + 1, step))
        return Dim(t, tuple(sorted(values)))


@dataclass(frozen=True)
class Family:
    """A range of shapes of one op, dtype and layout, tuned once into one library. ``weights``
    maps shapes (B, M, N, K) to how often they occur (a shape trace); without it every shape
    of the family is equally likely."""

    op: str
    dims: Tuple[Dim, Dim, Dim, Dim]  # B, M, N, K
    dtype: str = "float32"
    out_dtype: str = "float32"
    layout: str = "NT"
    weights: Optional[Tuple[Tuple[Tuple[int, int, int, int], float], ...]] = None

    def __post_init__(self):
        # The family's checks are the workload's: made on its smallest shape.
        Workload(self.op, *(d.values[0] if d.values else 1 for d in self.dims),
                 dtype=self.dtype, out_dtype=self.out_dtype, layout=self.layout)
        if self.op == "dense" and self.dims[0].values != (1,):
            raise WorkloadError("dense has no batch dimension (a dense family varies M, N, K)")

    @staticmethod
    def parse(text: str, op: str, dtype: str = "float32", out_dtype: Optional[str] = None,
              layout: str = "NT") -> "Family":
        """'1..24x512..16384:512x512x64' (B x M x N x K; dense: M x N x K)."""
        parts = text.strip().lower().split("x")
        n = 4 if op == "batch_matmul" else 3
        if len(parts) != n:
            want = "BxMxNxK" if op == "batch_matmul" else "MxNxK"
            raise WorkloadError(f"malformed shape family '{text}': {op} needs {n} sizes "
                                f"({want}), each N, N,N,..., LO..HI[:STEP] or ?")
        axes = AXES if n == 4 else AXES[1:]
        dims = tuple(Dim.parse(p, a) for p, a in zip(parts, axes))
        if n == 3:
            dims = (Dim("1", (1,)),) + dims
        return Family(op, _resolve_ties(dims), dtype, out_dtype or default_out_dtype(dtype),
                      layout)

    @staticmethod
    def of(workload: Workload) -> "Family":
        """The family of one shape."""
        dims = tuple(Dim(str(v), (v,)) for v in (workload.batch, workload.M, workload.N,
                                                  workload.K))
        return Family(workload.op, dims, workload.dtype, workload.out_dtype, workload.layout)

    def with_trace(self, shapes: Sequence[Tuple[Sequence[int], float]]) -> "Family":
        """The family weighted by a trace of (shape, count); every shape must belong to it."""
        weights = {}
        for shape, count in shapes:
            s = tuple(int(v) for v in (shape if len(shape) == 4 else (1, *shape)))
            if not self.contains(s):
                raise WorkloadError(f"trace shape {'x'.join(map(str, s))} is not in the "
                                    f"family {self.text}")
            if not count > 0:
                raise WorkloadError(f"trace count {count!r} of shape "
                                    f"{'x'.join(map(str, s))} is not positive")
            weights[s] = weights.get(s, 0.0) + float(count)
        return replace(self, weights=tuple(sorted(weights.items())))

    # ---- what it holds ----
    @property
    def text(self) -> str:
        dims = self.dims if self.op == "batch_matmul" else self.dims[1:]
        return "x".join(d.text for d in dims)

    @property
    def varying(self) -> Tuple[str, ...]:
        """The axes whose size is not fixed (symbolic in the family's kernels)."""
        return tuple(a for a, d in zip(AXES, self.dims) if d.varies)

    def granule(self, axis: str) -> int:
        """The largest size every size of ``axis`` in the family is a multiple of (1 for an
        axis of any size): a bucket kernel may take the axis as ``granule * t`` and need no
        padding for tiles that divide it."""
        i = AXES.index(axis)
        if self.weights is not None:
            values = {s[i] for s, _ in self.weights}
        else:
            values = self.dims[i].values
        return math.gcd(*values) if values else 1

    def fixed(self, axis: str) -> Optional[int]:
        d = self.dims[AXES.index(axis)]
        return d.values[0] if d.fixed else None

    def contains(self, shape: Sequence[int]) -> bool:
        return all(v in d and (d.tie is None or v == shape[AXES.index(d.tie)])
                   for v, d in zip(shape, self.dims))

    @property
    def enumerable(self) -> bool:
        return self.weights is not None or all(d.values is not None for d in self.dims)

    def shapes(self) -> List[Tuple[int, int, int, int]]:
        """Every shape of the family (those of the trace, when it has one)."""
        if self.weights is not None:
            return [s for s, _ in self.weights]
        if not self.enumerable:
            raise WorkloadError(f"family {self.text} has an axis of any size (?): its shapes "
                                "come from a shape trace")
        out = [()]
        for d in self.dims:
            if d.tie is not None and AXES.index(d.tie) < len(out[0]):
                out = [s + (s[AXES.index(d.tie)],) for s in out]
            else:
                out = [s + (v,) for s in out for v in d.values]
        return [s for s in out if self.contains(s)]

    def probabilities(self) -> List[Tuple[Tuple[int, int, int, int], float]]:
        """(shape, probability of a call having it)."""
        if self.weights is not None:
            total = sum(w for _, w in self.weights)
            return [(s, w / total) for s, w in self.weights]
        shapes = self.shapes()
        return [(s, 1.0 / len(shapes)) for s in shapes]

    def operand_shapes(self, size) -> Tuple[tuple, tuple]:
        """(A's shape, B's shape) in the family's layout, from ``size[axis]`` for the varying
        axes (ints or symbolic vars) and the fixed sizes for the others."""
        d = {a: size[a] if a in size else self.fixed(a) for a in AXES}
        mk = (d["K"], d["M"]) if self.layout[0] == "T" else (d["M"], d["K"])
        nk = (d["N"], d["K"]) if self.layout[1] == "T" else (d["K"], d["N"])
        lead = () if self.op == "dense" else (d["B"],)
        return lead + mk, lead + nk

    def workload(self, shape: Sequence[int]) -> Workload:
        return Workload(self.op, *shape, dtype=self.dtype, out_dtype=self.out_dtype,
                        layout=self.layout)

    def key(self) -> tuple:
        return ("family", self.op, self.text, self.dtype, self.out_dtype, self.layout)

    def signature(self) -> tuple:
        """What a family's kernels are compiled for: op, dtypes, layout and the fixed sizes
        (None for a varying axis). Families with one signature share kernels."""
        return (self.op, self.dtype, self.out_dtype, self.layout,
                tuple(d.values[0] if d.fixed else None for d in self.dims))

    def __str__(self):
        out = "" if self.out_dtype == default_out_dtype(self.dtype) else f"->{self.out_dtype}"
        return f"{self.op} family {self.text} {self.dtype}{out} {self.layout}"


def _resolve_ties(dims):
    """Tied dims ('=M') take the values of the axis they follow, which must vary and not be
    tied itself."""
    out = list(dims)
    for i, d in enumerate(dims):
        if d.tie is None:
            continue
        ref = dims[AXES.index(d.tie)]
        if ref.tie is not None or not ref.varies or ref.values is None:
            raise WorkloadError(f"axis {AXES[i]} '={d.tie.lower()}': axis {d.tie} must be a set "
                                "or a range of sizes (not fixed, '?' or tied itself)")
        out[i] = Dim(d.text, ref.values, tie=d.tie)
    return tuple(out)


def is_family_text(text: str) -> bool:
    """Whether a --shape is a family (a set, a range or ``?`` on some axis), not one shape.
    '4,256,256,256' (commas between the sizes, no x) stays one shape."""
    t = text.strip().lower()
    return "x" in t and any(c in t for c in ",.?=")
