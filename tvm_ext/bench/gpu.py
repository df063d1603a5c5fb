"""The GPU suite: cuBLAS through torch, TVM's dlight default, tvm_ext's fallback and tvm_ext
under a tuned log, per workload, in one process; and the replay check of each tuned record."""
from __future__ import annotations

import dataclasses
import os
from typing import List, Optional

import numpy as np

from ..result import error_line
from ..workload import Workload
from .common import Row, check_grid, median_ms, sweep_configs


def _half(dtype, op, shape, layout="NT"):
    """A 16-bit workload returning its input dtype, as torch.matmul does."""
    return Workload.create(op, shape, dtype, dtype, layout=layout)


def _f16(op, shape, layout="NT"):
    return _half("float16", op, shape, layout)


def _bf16(op, shape, layout="NT"):
    return _half("bfloat16", op, shape, layout)


# The GPU suite of the CUDA-core templates (cuBLAS through torch, TF32 off for float32).
GPU_SUITE = {
    "bmm": Workload.create("batch_matmul", (24, 16384, 512, 64), layout="NT"),
    "mm1024": Workload.create("dense", (1024, 1024, 1024), layout="NN"),
    "mm8192": Workload.create("dense", (8192, 8192, 8192), layout="NN"),
    # the f32 projections of ``bench.model``'s block (B 4 x S 128 rows, D 768, MLP 4D; nn.Linear:
    # NT): fewer block tiles than SMs
    "blk_qkvo": Workload.create("dense", (512, 768, 768), layout="NT"),
    "blk_up": Workload.create("dense", (512, 3072, 768), layout="NT"),
    "blk_down": Workload.create("dense", (512, 768, 3072), layout="NT"),
    # the same block at batch 8 (1024 rows) and GPT-2's q, k, v as one projection (768 -> 2304):
    # the tiles' last wave fills part of the SMs
    "b8_qkvo": Workload.create("dense", (1024, 768, 768), layout="NT"),
    "b8_qkv": Workload.create("dense", (1024, 2304, 768), layout="NT"),
    "b8_up": Workload.create("dense", (1024, 3072, 768), layout="NT"),
    "b8_down": Workload.create("dense", (1024, 768, 3072), layout="NT"),
    # and the f16 block's (f16 out): 24 to 192 block tiles of 64 rows on 132 SMs
    "blk_qkvo_f16": _f16("dense", (512, 768, 768)),
    "blk_up_f16": _f16("dense", (512, 3072, 768)),
    "blk_down_f16": _f16("dense", (512, 768, 3072)),
    "gemv_f16": Workload.create("dense", (1, 4096, 4096), "float16", layout="NT"),
    "gemv_f16_nn": Workload.create("dense", (1, 4096, 4096), "float16", layout="NN"),
    "dense16_f16": Workload.create("dense", (16, 4096, 4096), "float16", layout="NT"),
    # The tensor-core suite: small RFC shapes (M x N x K), square GEMMs, attention scores.
    # f16 workloads return f16, as torch.matmul does (tvm_ext's mma kernels accumulate in f32).
    "tc512x64_f16": _f16("dense", (512, 64, 512)),
    "tc512x32_f16": _f16("dense", (512, 32, 512)),
    "tc512x16_f16": _f16("dense", (512, 16, 512)),
    "tc512x64_i8": Workload.create("dense", (512, 64, 512), "int8", layout="NT"),
    "tc512x32_i8": Workload.create("dense", (512, 32, 512), "int8", layout="NT"),
    "tc512x16_i8": Workload.create("dense", (512, 16, 512), "int8", layout="NT"),
    "mm1024_f16": _f16("dense", (1024, 1024, 1024)),
    "mm8192_f16_nt": _f16("dense", (8192, 8192, 8192)),
    "mm8192_f16_nn": _f16("dense", (8192, 8192, 8192), layout="NN"),
    "attn_f16": _f16("batch_matmul", (256, 1024, 1024, 128)),
    # decoding's attention: one row of 32 heads (dim 128) against a cache of 4096, q . K^T on
    # K's rows (NT) and P . V (NN)
    "dec_qk_f16": _f16("batch_matmul", (32, 1, 4096, 128)),
    "dec_pv_f16": _f16("batch_matmul", (32, 1, 128, 4096), layout="NN"),
    # and at 4001 tokens (a prime: round tiles, padded)
    "dec_qk_4001": _f16("batch_matmul", (32, 1, 4001, 128)),
    "dec_pv_4001": _f16("batch_matmul", (32, 1, 128, 4001), layout="NN"),
    # bf16 twins of four f16 rows (bf16 -> bf16 as torch.matmul; f32 accumulation). Without a
    # bf16 record of their own they also run the f16 twin's tuned config ("f16 record"), so
    # bf16 and f16 compare kernel for kernel.
    "mm1024_bf16": _bf16("dense", (1024, 1024, 1024)),
    "mm8192_bf16_nt": _bf16("dense", (8192, 8192, 8192)),
    "mm8192_bf16_nn": _bf16("dense", (8192, 8192, 8192), layout="NN"),
    "attn_bf16": _bf16("batch_matmul", (256, 1024, 1024, 128)),
    # fp8 (e4m3) -> f16, f32 accumulation: cuBLASLt through torch._scaled_mm (unit scales; a
    # scale of ours is the epilogue "scale:S").
    "mm8192_fp8": Workload.create("dense", (8192, 8192, 8192), "float8_e4m3fn", "float16",
                                  layout="NT"),
}


def f16_record_config(wl, target, logs):
    """(task, config) of the tuned record of the f16 twin of a bf16 workload (same shape,
    layout, an f16 output where the bf16 one is bf16), built as a bf16 kernel of the same
    template and knobs; None without such a record or where the template takes no bf16."""
    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    if wl.dtype != "bfloat16":
        return None
    twin = dataclasses.replace(wl, dtype="float16", out_dtype="float16"
                               if wl.out_dtype == "bfloat16" else wl.out_dtype)
    with apply_history_best(logs):
        _, choice = choose(twin, target)
    if not choice.tuned:
        return None
    try:
        task = Task(wl, target, template=choice.template)
        config = task.space.config_from_values(choice.config.values_dict())
    except Exception:  # noqa: BLE001  (a template without bf16: no such row)
        return None
    return (task, config) if task.space.is_valid(config) else None


def warp_specialised(wl, target, tuned_template, logs):
    """(label, task, config) of the warp-specialised wgmma template (``*_wgmma_ws.cuda``)
    where it applies to ``wl`` and the tuned record is of another template: its best record
    in ``logs`` ("warp-specialised tuned"), else its fallback ("warp-specialised"); else
    None."""
    from ..dispatch import ApplyHistoryBest, apply_history_best, choose  # noqa: PLC0415
    from ..strategy import templates_for  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    name = f"{wl.op}_wgmma_ws.cuda"
    if name == tuned_template or name not in [t.name for t in templates_for(wl, target)]:
        return None
    own = [r for r in ApplyHistoryBest(logs).records if r.task_name == name]
    with apply_history_best(own):
        task, choice = choose(wl, target)
    if choice.tuned and task.name == name:
        return "warp-specialised tuned", task, choice.config
    task = Task(wl, target, template=name)
    return "warp-specialised", task, task.fallback_config()


def dlight_kernel(wl, target):
    """TVM 0.27's own default: dlight's GPU rules on the unscheduled compute."""
    import tvm  # noqa: PLC0415
    from tvm import te  # noqa: PLC0415
    from tvm.s_tir import dlight as dl  # noqa: PLC0415
    from ..codegen import compile_module  # noqa: PLC0415
    from ..ops.common import matmul_compute  # noqa: PLC0415
    mod = tvm.IRModule({"main": te.create_prim_func(matmul_compute(wl))})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Fallback())(mod)
    # Compiled as tvm_ext compiles its own kernels (the same CUDA compiler choice), but with
    # no template pass options and no dependent launch: this is TVM's default, as shipped.
    return compile_module(mod, target)


def _reference(wl, rng):
    """(TVM input tensors, {"cuBLAS": launch}, float64 expected output) of a workload."""
    import tvm  # noqa: PLC0415
    from ..measure.check import random_inputs, reference_matmul  # noqa: PLC0415
    from ..report import torch_matmul  # noqa: PLC0415
    a, b = random_inputs(wl, rng)
    dev = tvm.cuda(0)
    args = (tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev))
    return args, {"cuBLAS": torch_matmul(wl, a, b)}, reference_matmul(wl, a, b)


def _checked(name, wl, args, expect, label, build, failed):
    """The kernel's launch, after one call checked against float64 numpy; None (and the
    reason in ``failed``) where it does not build or answers wrong."""
    import tvm  # noqa: PLC0415
    from ..measure.check import tolerance  # noqa: PLC0415
    dev = tvm.cuda(0)
    try:
        func = build().mod["main"]
        out = tvm.runtime.empty(wl.out_shape, wl.out_dtype, dev)
        func(*args, out)
        dev.sync()
    except Exception as err:  # noqa: BLE001  (a failing kernel is a row, not the end)
        print(f"  {name} {label} failed: {error_line(err, 160)}", flush=True)
        failed[label] = "-" if label == "dlight" else "failed"
        return None
    if not np.allclose(out.numpy().astype(expect.dtype), expect, *tolerance(wl)):
        print(f"  {name} {label}: numerics WRONG", flush=True)
        failed[label] = "wrong answer"
        return None
    return lambda: func(*args, out)


def _in_turn(launches, repeat, sampler, failed):
    """{label: (median ms, spread)} of launches sampled in turn, ``repeat`` rounds; a label in
    ``failed`` (no launch) gets (nan, reason), or (inf, ...) for a wrong answer."""
    from ..measure.timing import in_turn  # noqa: PLC0415
    samplers = {label: sampler(fn) for label, fn in launches.items()}
    # in turn: cuBLAS, then each kernel, cuBLAS, ...
    samples = in_turn({label: smp.sample for label, smp in samplers.items()}, repeat)
    del samplers
    res = {label: median_ms(s) for label, s in samples.items()}
    for label, why in failed.items():
        res[label] = (float("inf") if why == "wrong answer" else float("nan"), why)
    return res


def _samplers(timing):
    from ..measure.timing import EagerSampler, GraphSampler  # noqa: PLC0415
    return GraphSampler if timing == "graph" else EagerSampler


def run_gpu(suite, *, log: Optional[str], repeat: int, timing: str = "graph") -> List[Row]:
    """cuBLAS (torch) vs dlight vs tvm_ext fallback vs tvm_ext tuned, per workload, each timed
    by ``timing`` ("graph": CUDA-graph replays, kernel time; "eager": eager calls, launch
    overhead included). The four kernels of a workload are sampled in turn, ``repeat`` rounds,
    so a clock or temperature drift during the row falls on all of them alike. Tuned rows also
    replay their record as the tuner measured it (``replay_ms``): the pool's build and a fresh
    runner process, the tuner's timing."""
    from ..dispatch import apply_history_best, choose  # noqa: PLC0415
    from ..target import default_target  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    sampler = _samplers(timing)
    target = default_target()
    rng = np.random.default_rng(0)
    rows = []
    logs = [log] if log and os.path.exists(log) else []
    for name, wl in suite.items():
        task = Task(wl, target)
        args, launches, expect = _reference(wl, rng)
        failed = {}
        with apply_history_best(logs):
            task_t, choice = choose(wl, target)
        tuned_label = "tuned" if choice.tuned else "untuned"
        builds = [("dlight", lambda: dlight_kernel(wl, target)),
                  ("fallback", lambda: task.build(task.fallback_config())),
                  (tuned_label, lambda: task_t.build(choice.config))]
        twin = None if choice.tuned else f16_record_config(wl, target, logs)
        if twin is not None:
            builds.append(("f16 record", lambda: twin[0].build(twin[1])))
        ws = warp_specialised(wl, target, choice.template, logs)
        if ws is not None:  # the TMA / warp-specialised / persistent kernel
            builds.append((ws[0], lambda: ws[1].build(ws[2])))
        for label, build in builds:
            launch = _checked(name, wl, args, expect, label, build, failed)
            if launch is not None:
                launches[label] = launch
        res = _in_turn(launches, repeat, sampler, failed)
        for label, _ in builds:
            print(f"  {name} {label}: {res[label][0]:.4f} ms ({res[label][1]})", flush=True)
            rows.append(Row(f"{name} {wl} [{label}]", wl.flop, *res["cuBLAS"], *res[label],
                            twin[0].name if label == "f16 record" else
                            ws[1].name if ws is not None and label == ws[0] else
                            task.name if label == "fallback" else
                            "dlight" if label == "dlight" else choice.template))
            if label == "tuned" and label not in failed:
                rows[-1].recorded_ms = choice.record_cost * 1e3
                rows[-1].replay_ms = replay_record(task_t, choice.config)
    return rows


def template_task(wl, template: str, target):
    """The task of ``template`` for ``wl``'s own op: ``dense_X`` and ``batch_matmul_X`` are
    named as one (``X``, e.g. ``sgemm.cuda``; either full name works too), and a template of
    that op by its own name (``batch_matmul.cuda``)."""
    from ..strategy import registered  # noqa: PLC0415
    from ..task import Task  # noqa: PLC0415
    own = registered(template)
    if own is not None and own.op == wl.op:
        return Task(wl, target, template=template)
    suffix = template
    for op in ("batch_matmul_", "dense_"):
        suffix = suffix[len(op):] if suffix.startswith(op) else suffix
    return Task(wl, target, template=f"{wl.op}_{suffix}")


def run_sweep(suite, template: str, grid, *, repeat: int, timing: str = "graph",
              target=None) -> List[Row]:
    """``--sweep``: per workload, the template's (that of the workload's op: ``dense_X`` and
    ``batch_matmul_X`` are one template here) fallback with each combination of the knob
    values in ``grid`` ({knob: [values]}) set on it, every kernel numerically checked and
    sampled in turn with cuBLAS; a combination outside the space's rules is a row that says
    which rule."""
    from ..target import default_target  # noqa: PLC0415
    target = target or default_target()
    tasks = {name: template_task(wl, template, target) for name, wl in suite.items()}
    for task in tasks.values():  # every name and value checked before anything is measured
        check_grid(task, grid)
    sampler = _samplers(timing)
    rng = np.random.default_rng(0)
    rows = []
    for name, wl in suite.items():
        task = tasks[name]
        args, launches, expect = _reference(wl, rng)
        failed, builds = {}, []
        for label, cfg in sweep_configs(name, task, grid):
            builds.append((label, cfg))
            launch = _checked(name, wl, args, expect, label, lambda c=cfg: task.build(c), failed)
            if launch is not None:
                launches[label] = launch
        res = _in_turn(launches, repeat, sampler, failed)
        for label, cfg in builds:
            print(f"  {name} {label}: {res[label][0]:.4f} ms ({res[label][1]}) {cfg}",
                  flush=True)
            rows.append(Row(f"{name} {wl} [{label}]", wl.flop, *res["cuBLAS"], *res[label],
                            task.name))
    return rows


def replay_record(task, config) -> Optional[float]:
    """The config re-measured as ``python -m tvm_ext.tune`` measures (ms): built by a pool
    worker, run in a fresh runner process, the tuner's default timing; None if it fails."""
    from ..measure.pool import PoolMeasurer  # noqa: PLC0415
    # One builder and the default single runner: a fresh process times the one config.
    with PoolMeasurer(n_parallel=1) as pool:
        res = pool.measure(task, [config])[0]
    if not res.ok:
        print(f"  replay of {task.name} failed: error {res.error_no} {res.error_msg}", flush=True)
        return None
    return res.mean * 1e3
