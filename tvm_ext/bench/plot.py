"""The bench's PNG charts: ratio bars of the CPU/GPU suites and the tuners' curves. matplotlib is
an optional extra (``tvm_ext[plot]``), imported only when a chart is drawn."""
from __future__ import annotations

from typing import List

import numpy as np

from ..errors import TvmExtError
from ..report import pyplot, save_png


def _pyplot():
    """``report.pyplot``, or None with its message: a missing plotting extra must not cost the
    measurements already printed (the bench draws its chart after them)."""
    try:
        return pyplot()
    except TvmExtError as err:
        print(f"{err}: no plot written")
        return None


def plot_tuners(curves, *, optimum: float, path: str, workload):
    """Best GFLOP/s so far against trials (log scale), mean and min-max band over the seeds of
    each tuner, with the space optimum as a dashed line."""
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, hs in curves.items():
        n = min(len(h) for h in hs)
        arr = np.asarray([h[:n] for h in hs])
        x = np.arange(1, n + 1)
        ax.plot(x, arr.mean(0), label=label)
        ax.fill_between(x, arr.min(0), arr.max(0), alpha=0.2)
    ax.axhline(optimum, color="k", ls="--", lw=0.8, label="space optimum")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s so far")
    ax.set_title(f"tuners on {workload} (mean, min-max of seeds)")
    ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=110)
    print(f"plot: {path}")


def plot_ratios(rows: List[dict], path: str, *, title: str, ref_name: str):
    """Bar chart of vendor time / tvm_ext time per workload, one bar per kind of kernel
    (dlight, fallback, tuned, ...: the [label] ending each row name); 1.0 = as fast as the
    vendor library. Rows are the dicts of ``--json``."""
    plt = _pyplot()
    if plt is None:
        return
    workloads, kinds, ratio = [], [], {}
    for r in rows:
        name, _, kind = r["name"].rpartition(" [")
        kind, key = kind.rstrip("]"), name.split(" ")[0]
        kind = "tuned" if kind in ("tuned", "untuned") else kind
        if key not in workloads:
            workloads.append(key)
        if kind not in kinds:
            kinds.append(kind)
        ratio[key, kind] = r["ratio"] if np.isfinite(r["ratio"]) else 0.0
    fig, ax = plt.subplots(figsize=(max(7, 0.7 * len(workloads) + 2), 4.5))
    width = 0.8 / len(kinds)
    x = np.arange(len(workloads))
    for i, kind in enumerate(kinds):
        ax.bar(x + (i - (len(kinds) - 1) / 2) * width,
               [ratio.get((w, kind), 0.0) for w in workloads], width, label=kind)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(x, workloads, rotation=40, ha="right")
    ax.set_yscale("log", base=2)
    ax.set_ylabel(f"{ref_name} time / tvm_ext time")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=100)
    print(f"plot: {path}")
