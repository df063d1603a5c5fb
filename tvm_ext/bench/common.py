"""What the CPU and GPU suites share: the row of a result table, wall-clock timing of a call,
and the table printed at the end."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np


@dataclass
class Row:
    name: str
    flop: float
    ref_ms: float
    ref_spread: str
    ours_ms: float
    ours_spread: str
    tuned: str
    # GPU tuned rows: the time in the log's record, and the same kernel re-timed now the way
    # the tuner timed it (replay check); None elsewhere.
    recorded_ms: Optional[float] = None
    replay_ms: Optional[float] = None
    # CPU rows: the reference's best sample and ours, and the template's untuned kernel (tuned
    # rows; ``fallback_same``: the record's config is the fallback's, timed once).
    ref_best_ms: Optional[float] = None
    fallback_ms: Optional[float] = None
    fallback_same: bool = False
    ours_best_ms: Optional[float] = None
    # CPU rows with --metaschedule N: MetaSchedule's own tuning of the same workload.
    ms_ms: Optional[float] = None
    # CPU rows of ``bench.peak --gemm``: the FMA peak kernel's GFLOP/s (median, best) sampled
    # in turn with the row.
    peak_gflops: Optional[Tuple[float, float]] = None
    # CPU rows with ``versus`` (``bench.shapes --versus``): {template: its fallback's median
    # ms} of the other templates that apply, sampled in turn with the row.
    others: Optional[Dict[str, float]] = None

    @property
    def ratio(self) -> float:
        return self.ref_ms / self.ours_ms


def time_calls(fn: Callable[[], None], *, repeat: int, min_s: float = 0.05) -> List[float]:
    """Seconds per call, ``repeat`` samples of ``measure.timing.WallSampler``: each runs
    ``fn`` untimed for ``timing.WARM_S``, then enough times to last ``min_s`` (the benches
    sample after idle time)."""
    from ..measure.timing import WallSampler  # noqa: PLC0415
    sampler = WallSampler(fn, min_s)
    return [sampler.sample() for _ in range(repeat)]


def median_best(samples, scale: float = 1.0) -> Tuple[float, float]:
    """(median, best) of samples in seconds, times ``scale`` (1e3: ms)."""
    return float(np.median(samples)) * scale, float(min(samples)) * scale


def rates(flops: float, samples) -> Tuple[float, float]:
    """(GFLOP/s at the median sample, at the best) of a call of ``flops``."""
    med, best = median_best(samples)
    return flops / med / 1e9, flops / best / 1e9


def median_ms(samples) -> Tuple[float, str]:
    """(median in ms, "min-max" in ms) of samples in seconds: the table shows the spread
    because a shared machine's noise is part of the result."""
    s = np.asarray(samples) * 1e3
    # 4 significant digits (1.000, 23.57, 0.001418): a microsecond kernel's spread read
    # "0.001-0.001" with 3 decimals
    return float(np.median(s)), "-".join(f"{v:#.4g}".rstrip(".") for v in (s.min(), s.max()))


def blas_info() -> str:
    """numpy's BLAS and the OpenBLAS core type: the CPU reference's speed depends on both."""
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        name = f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # noqa: BLE001  (older numpy)
        name = "unknown BLAS"
    core = os.environ.get("OPENBLAS_CORETYPE")
    return name + (f", OPENBLAS_CORETYPE={core}" if core else ", OPENBLAS_CORETYPE unset")


def print_table(rows: List[Row], *, ref_name: str):
    print(f"{'workload':<58} {ref_name + ' ms':>10} {'tvm_ext ms':>11} {'ratio':>6} "
          f"{'GFLOP/s':>8}  spread (ref | ours)")
    for r in rows:
        gf = r.flop / r.ours_ms / 1e6
        extra = ""
        if r.ref_best_ms is not None:
            extra += f"; vs {ref_name}'s best sample {r.ref_best_ms / r.ours_ms:.2f}"
        if r.fallback_ms is not None:
            extra += f"; tuned/fallback {r.fallback_ms / r.ours_ms:.2f}x" + (
                " (one config, timed once: the record is the fallback's)"
                if r.fallback_same else "")
        if r.ms_ms is not None:
            extra += (f"; MetaSchedule {r.ms_ms:.4g} ms "
                      f"(MetaSchedule / ours {r.ms_ms / r.ours_ms:.2f})")
        for t, ms in (r.others or {}).items():
            extra += f"; {t} fallback {ms:.4g} ms ({ref_name} / it {r.ref_ms / ms:.2f})"
        print(f"{r.name:<58} {r.ref_ms:>10.4g} {r.ours_ms:>11.4g} {r.ratio:>6.2f} {gf:>8.1f}  "
              f"{r.ref_spread} | {r.ours_spread} ({r.tuned}){extra}")
    replays = [r for r in rows if r.replay_ms]
    if replays:
        print("replay of the log's records: re-measured as the tuner measures (pool build, fresh "
              "runner, timing 'auto'), and the tuned row of this process, against the record:")
        for r in replays:
            print(f"  {r.name.split(' ')[0]:<16} recorded {r.recorded_ms:.4f} ms  replayed "
                  f"{r.replay_ms:.4f} ms ({r.replay_ms / r.recorded_ms:.2f})  in this process "
                  f"{r.ours_ms:.4f} ms ({r.ours_ms / r.recorded_ms:.2f})")


def llvm_target(spec: Optional[str], what: str):
    """The llvm target of a CPU bench's ``--target`` (the host's where ``spec`` is empty); a
    one-line TvmExtError for any other kind (``what``: "the cpu suite builds")."""
    from ..errors import TvmExtError  # noqa: PLC0415
    from ..target import host_cpu_target, parse_target, target_info  # noqa: PLC0415
    if not spec:
        return host_cpu_target()
    target = parse_target(spec)
    if target_info(target)["kind"] != "llvm":
        raise TvmExtError(f"--target {spec}: {what} for llvm")
    return target


def check_grid(task, grid) -> None:
    """A one-line TvmExtError unless every knob of ``grid`` ({knob: [values]}) is one of
    ``task``'s and every value one of its candidates (``narrow_spec``'s checks, as ``tune
    --set``), and every knob a plain one: a sweep sets each value on the fallback, where a
    split's innermost factor would leave its other factors to the fallback (narrow a split
    with ``tune --set`` or a --space file)."""
    from ..errors import TvmExtError  # noqa: PLC0415
    from ..space import narrow_spec  # noqa: PLC0415
    narrow_spec(task.spec, grid)
    for k in grid:
        knob = task.space.knobs.get(k)
        if knob is None or knob.kind != "ot":
            raise TvmExtError(f"--set: {task.name}'s knob {k!r} is "
                              f"{'not in its space here' if knob is None else 'a split'}: "
                              "--sweep sets plain knobs (narrow a split with tune --set)")


def sweep_configs(name: str, task, grid):
    """(label, config) of each combination of ``grid``'s knob values ({knob: [values]}) set on
    ``task``'s fallback, in order (``--sweep``); a combination outside the space's rules is
    printed with the rules it breaks and skipped."""
    import itertools  # noqa: PLC0415
    for values in itertools.product(*grid.values()):
        knobs = dict(zip(grid, values))
        cfg = task.config_with(knobs)
        label = " ".join(f"{k}={v}" for k, v in knobs.items()) or "fallback"
        if not task.space.is_valid(cfg):
            print(f"  {name} {label}: not in the space ("
                  f"{'; '.join(task.space.violations(cfg))})", flush=True)
            continue
        yield label, cfg
