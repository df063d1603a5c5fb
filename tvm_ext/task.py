"""A Task is a template applied to one workload on one target: its space, its fallback config,
and ``instantiate(config)`` -> a scheduled IRModule (``build`` compiles it)."""
from __future__ import annotations

import functools
import os
from collections import OrderedDict
from typing import Any, List, Mapping, Optional

import numpy as np

from .errors import TemplateError
from .space import (ConfigEntity, ConfigSpace, FallbackConfig, build_space, eval_expr,
                    knob_default_exprs, knob_defaults, load_space_spec)
from .target import hardware_facts, parse_target, target_str
from .template import Template, get_template, templates_for
from .workload import Workload


class InstantiationError(RuntimeError):
    """A config that the template cannot schedule (recorded as error 1, not raised to users)."""


class Task:
    def __init__(self, workload: Workload, target=None, *, template: Optional[str] = None,
                 space_file: Optional[str] = None):
        self.workload = workload
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
        axes = {"B": wl.batch, "M": wl.M, "N": wl.N, "K": wl.K}
        facts = {**self.facts, "layout": wl.layout, "dtype": wl.dtype,
                 "out_dtype": wl.out_dtype}
        return build_space(self.spec, axes, facts)

    def fallback_config(self) -> ConfigEntity:
        values = {**knob_defaults(self.spec),
                  **self.template.fallback(self.space, self.workload, self.facts)}
        return self.space.config_from_values(values, fallback=True)

    def config_from_values(self, values, *, fallback=False) -> ConfigEntity:
        """A config from {knob: value}: the fallback config with the given values (a knob
        whose space file has a "default_expr" follows the given knobs, as in ``complete``)."""
        given = {k: self.space.entity(k, v) for k, v in values.items() if k in self.space.knobs}
        cfg = (FallbackConfig if fallback else ConfigEntity)(
            None, self.complete(given, plain_defaults=False))
        cfg.index = self.space.index_of(cfg)
        return cfg

    def complete(self, given: Mapping[str, Any], *,
                 plain_defaults: bool = True) -> "OrderedDict[str, Any]":
        """An entity for every knob of the space: those ``given`` (entities by name); for the
        others, the space file's "default" (the behaviour before the knob existed; unless
        ``plain_defaults`` is False), else its "default_expr" over the other knobs (e.g. a split
        that repeats tile_y's rows), else the fallback config's value."""
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

    def config(self, index: int) -> ConfigEntity:
        return self.space.get(index)

    def instantiate(self, config: ConfigEntity):
        """The scheduled IRModule for a config; InstantiationError if it cannot be scheduled."""
        import tvm  # noqa: PLC0415
        from tvm import s_tir, te  # noqa: PLC0415

        if self.template.prepare is not None:
            self.template.prepare()
        try:
            if self.template.kernel is not None:
                func = self.template.kernel(self.workload, config, self.facts, self.target)
            else:
                tensors = self.template.compute(self.workload, config)
                sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(tensors)}))
                self.template.schedule(sch, config, self.workload, self.facts)
                func = sch.mod["main"]
            func = self.launch(func)
        except Exception as err:  # a config the schedule rejects is data, not a crash
            msg = str(err).strip().splitlines()
            raise InstantiationError(f"{self.name} {config}: {msg[-1] if msg else err!r}") \
                from err
        return tvm.IRModule({"main": func})

    @property
    def dependent_launch(self) -> bool:
        """Whether kernels are launched with programmatic dependent launch (``ops/launch.py``):
        CUDA sm_90 and newer, unless the environment sets ``TVM_EXT_PDL=0``."""
        return self.facts["kind"] == "cuda" and self.facts["sm"] >= 90 and \
            os.environ.get("TVM_EXT_PDL", "1") != "0"

    def launch(self, func):
        """A scheduled PrimFunc of this task as it is built: with ``dependent_launch``, every
        kernel opens with the grid-dependency wait and is launched with PDL."""
        if not self.dependent_launch:
            return func
        from .ops.launch import with_dependent_launch  # noqa: PLC0415
        return with_dependent_launch(func)

    def build(self, config: ConfigEntity):
        """Compile a config: a ``tvm.runtime.Executable`` whose ``main`` takes (A, B, C)."""

        return self.compile(self.instantiate(config))

    def compile(self, mod):
        """``tvm.compile`` a module of ``instantiate``, with the template's pass options."""
        import tvm  # noqa: PLC0415

        if self.target.kind.name == "cuda":
            ensure_cuda_compiler()
        with pass_options(self.template.pass_config):
            return tvm.compile(mod, target=self.target)

    def loop_features(self, index: int):
        """Loop-structure features of a config's scheduled TensorIR (for cost models)."""
        from .tuner.features import loop_features  # noqa: PLC0415
        return loop_features(self.instantiate(self.space.get(index)))

    # ---- data for measurement and checks ----
    def random_inputs(self, rng: np.random.Generator) -> List[np.ndarray]:
        wl = self.workload
        arrays = []
        for shape in (wl.a_shape, wl.b_shape):
            if wl.dtype.startswith("int") or wl.dtype.startswith("uint"):
                lo = 0 if wl.dtype.startswith("u") else -4
                arrays.append(rng.integers(lo, 4, size=shape).astype(wl.dtype))
            else:
                arrays.append(rng.uniform(-1, 1, size=shape).astype(_np_dtype(wl.dtype)))
        return arrays

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The exact result in float64 (int64 for integers)."""
        return reference_matmul(self.workload, a, b)

    def __repr__(self):
        return f"Task({self.name}, {self.workload}, {self.target_str})"


def pass_options(config):
    """A PassContext that adds ``config`` to the current one (same opt level), or the current
    one unchanged when there is nothing to add."""
    import tvm  # noqa: PLC0415

    ctx = tvm.transform.PassContext.current()
    if not config:
        return ctx
    return tvm.transform.PassContext(opt_level=ctx.opt_level, config={**ctx.config, **config})


def ensure_cuda_compiler():
    """TVM compiles CUDA source when a module is loaded, with NVRTC by default; NVRTC needs the
    cuda-bindings package. Without it, use nvcc (unless the user chose a mode)."""
    import importlib.util  # noqa: PLC0415
    import os  # noqa: PLC0415
    if "TVM_CUDA_COMPILE_MODE" not in os.environ:
        try:
            has_nvrtc = importlib.util.find_spec("cuda.bindings") is not None
        except ModuleNotFoundError:
            has_nvrtc = False
        if not has_nvrtc:
            os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"


def reference_matmul(wl: Workload, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    acc = np.int64 if wl.dtype.startswith(("int", "uint")) else np.float64
    a = a.astype(acc)
    b = b.astype(acc)
    a_mk = np.swapaxes(a, -1, -2) if wl.transpose_a else a
    b_kn = np.swapaxes(b, -1, -2) if wl.transpose_b else b
    return np.matmul(a_mk, b_kn)


class OutputCheck:
    """Compares a kernel's output with float64 numpy (int64 for integers).

    Outputs of up to ``max_full`` elements are compared whole. Larger ones (a 24x16384x512
    batch_matmul writes 200M values) are compared at a seeded random sample of positions, whose
    reference costs K multiply-adds each; the output is NaN-poisoned before the run, so the
    whole-tensor NaN test still proves every element was written.
    """

    def __init__(self, wl: Workload, a: np.ndarray, b: np.ndarray, *, seed: int = 0,
                 max_full: int = 1 << 24, sample_work: int = 1 << 27):
        self.wl = wl
        self.rtol, self.atol = tolerance(wl)
        size = int(np.prod(wl.out_shape))
        if size <= max_full:
            self.idx, self.ref = None, reference_matmul(wl, a, b)
            return
        rng = np.random.default_rng(seed + 1)
        n = int(min(size, max(4096, min(1 << 20, sample_work // wl.K))))
        self.idx = np.unravel_index(rng.choice(size, size=n, replace=False), wl.out_shape)
        acc = np.int64 if wl.dtype.startswith(("int", "uint")) else np.float64
        a_mk = np.swapaxes(a, -1, -2) if wl.transpose_a else a
        b_nk = b if wl.transpose_b else np.swapaxes(b, -1, -2)
        if wl.op == "dense":
            rows, cols = a_mk[self.idx[0]], b_nk[self.idx[1]]
        else:
            rows = a_mk[self.idx[0], self.idx[1]]
            cols = b_nk[self.idx[0], self.idx[2]]
        self.ref = np.einsum("nk,nk->n", rows.astype(acc), cols.astype(acc))

    def __call__(self, out: np.ndarray) -> Optional[str]:
        """None if the output is right, else what is wrong (one line)."""
        floating = not self.wl.out_dtype.startswith(("int", "uint"))
        if self.idx is not None and floating:
            unwritten = int(np.isnan(out).sum())
            if unwritten:
                return f"{unwritten} of {out.size} elements not written (still NaN)"
        got = (out if self.idx is None else out[self.idx]).astype(self.ref.dtype)
        ok = np.isclose(got, self.ref, rtol=self.rtol, atol=self.atol)
        if ok.all():
            return None
        where = "" if self.idx is None else " sampled"
        err = np.nanmax(np.abs(got - self.ref)) if np.isfinite(got).any() else float("nan")
        return f"{int((~ok).sum())} of {ok.size}{where} elements differ from numpy " \
               f"(max abs error {err:.3g})"


def _np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes  # noqa: PLC0415  (ships with tvm-ffi)
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def tolerance(wl: Workload):
    """(rtol, atol) for comparing a kernel with the float64 reference."""
    if wl.dtype.startswith(("int", "uint")):
        return 0.0, 0.0
    if wl.dtype in ("float16", "bfloat16") or wl.out_dtype in ("float16", "bfloat16"):
        return 2e-2, 2e-2 * max(1.0, np.sqrt(wl.K) / 4)
    return 1e-4, 1e-4 * max(1.0, np.sqrt(wl.K) / 4)
