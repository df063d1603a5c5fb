"""Subgraph tasks: a matmul and its elementwise epilogue as one workload (key, records,
numerics), built and measured as the fused kernel; applied to fused Relax functions with the
subgraph's record first, then the anchor matmul's (reported as such)."""
import json
import math
import os

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

from tvm_ext.strategy import get_template
from tvm_ext import record
from tvm_ext.dispatch import apply_history_best, choose
from tvm_ext.errors import WorkloadError
from tvm_ext.measure import MeasureOptions, RunOptions
from tvm_ext.measure.check import OutputCheck, kernel_inputs
from tvm_ext.relax import build, extract_tasks, tune_model
from tvm_ext.result import MeasureResult
from tvm_ext.session import tune_task
from tvm_ext.target import cuda_target, host_cpu_target, target_str
from tvm_ext.task import Task
from tvm_ext.workload import Workload

CPU = host_cpu_target()


# ---- the workload ----

def test_epilogue_is_part_of_the_workload_and_its_records():
    wl = Workload.create("dense", (128, 3072, 768), epilogue="bias+gelu+cast:float16")
    assert wl.final_dtype == "float16" and wl.anchor.epilogue == ""
    assert wl.key() != wl.anchor.key() and str(wl).endswith("+bias+gelu+cast:float16")
    assert [b[0] for b in wl.buffers()] == ["A", "B", "bias0", "C"]
    assert wl.buffers()[-1] == ("C", (128, 3072), "float16")
    args = wl.to_args()
    assert args[-1] == {"epilogue": "bias+gelu+cast:float16"}
    assert Workload.from_args("dense", json.loads(json.dumps(args))) == wl
    # A record written before subgraph tasks (no trailing dict) is the bare matmul.
    assert Workload.from_args("dense", wl.anchor.to_args()).epilogue == ""
    bmm = Workload.create("batch_matmul", (2, 64, 32, 16), epilogue="residual+relu")
    assert bmm.buffers()[2] == ("residual0", (2, 64, 32), "float32")
    assert Workload.from_args("batch_matmul", bmm.to_args()) == bmm
    assert Workload.create("dense", (4, 4, 4), "int8", epilogue="requant:0.1").final_dtype == \
        "int8"


@pytest.mark.parametrize("epilogue,msg", [
    ("softmax", "unknown epilogue op 'softmax'"),
    ("scale", "scale needs a value"),
    ("relu:2", "relu takes no value"),
    ("cast:float17", "unknown dtype 'float17'"),
    ("scale:-1", "must be a positive number"),
    ("requant:0.1", "requant needs an int32 accumulator"),
])
def test_bad_epilogues_name_the_problem(epilogue, msg):
    with pytest.raises(WorkloadError, match=msg):
        Workload.create("dense", (4, 4, 4), epilogue=epilogue)


# ---- kernels: the fused kernel, checked with the epilogue ----

def _run(task, cfg, wl):
    lib = task.build(cfg)
    inputs = kernel_inputs(wl, np.random.default_rng(0))
    out = tvm.runtime.empty(wl.out_shape, wl.final_dtype, tvm.cpu())
    lib.mod["main"](*(tvm.runtime.tensor(x) for x in inputs), out)
    return inputs, out.numpy()


@pytest.mark.parametrize("op,shape,layout,epilogue", [
    ("dense", (64, 96, 80), "NT", "bias+relu"),
    ("dense", (64, 96, 80), "NN", "bias+gelu"),
    ("dense", (64, 96, 80), "NN", "exp"),
    ("dense", (64, 96, 80), "NT", "bias+gelu_tanh"),
    ("dense", (64, 96, 80), "TN", "silu+scale:0.25"),
    ("dense", (64, 96, 80), "NT", "bias+relu+cast:float16"),
    ("batch_matmul", (3, 48, 64, 40), "NT", "residual+gelu"),
    ("batch_matmul", (3, 50, 70, 56), "TT", "bias+exp+residual"),
    ("dense", (64, 96, 80), "NT", "silu+mul"),  # a gated MLP's gate, times its up projection
    ("dense", (64, 96, 80), "NT", "bias+tanh"),  # BERT's pooler
    ("dense", (64, 96, 80), "NN", "sigmoid+mul"),
    ("batch_matmul", (2, 40, 56, 48), "NN", "bias+mul+residual"),
])
def test_cpu_kernels_compute_the_epilogue(op, shape, layout, epilogue):
    wl = Workload.create(op, shape, layout=layout, epilogue=epilogue)
    task = Task(wl, CPU)
    inputs, out = _run(task, task.fallback_config(), wl)
    assert out.dtype == np.dtype(wl.final_dtype)
    assert OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:])(out) is None


def test_the_oracle_sees_a_wrong_epilogue():
    wl = Workload.create("dense", (64, 96, 80), epilogue="bias+gelu")
    other = wl.with_(epilogue="bias+relu")
    task = Task(other, CPU)
    inputs, out = _run(task, task.fallback_config(), other)
    problem = OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:])(out)
    assert problem is not None and "differ from numpy" in problem
    big = OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:], max_full=100)  # sampled
    assert big(out) is not None


def test_subgraph_tasks_are_measured_as_fused_kernels(tmp_path):
    wl = Workload.create("dense", (64, 96, 80), epilogue="bias+gelu")
    log = tmp_path / "sub.json"
    s = tune_task(Task(wl, CPU), log, trials=4, tuner="random",
                  measure_options=MeasureOptions(run=RunOptions(number=2, repeat=2)))
    assert s.trials == 4 and s.errors == 0
    records = record.load(log)
    assert {r.workload for r in records} == {wl}  # the log says which subgraph it measured


def test_kernel_templates_and_epilogues():
    """The wgmma kernel templates compute an epilogue in their write-back: the kernel takes
    the epilogue's inputs between B and C (``Workload.buffers``'s order) and writes the
    final dtype; a kernel template without ``epilogues`` refuses a subgraph task."""
    import dataclasses
    wl = Workload.create("dense", (1024, 1024, 1024), "float16", epilogue="bias+gelu+cast:"
                         "float16")
    target = cuda_target("sm_90")
    for name in ("dense_wgmma.cuda", "dense_wgmma_ws.cuda"):
        task = Task(wl, target, template=name)
        func = task.instantiate(task.fallback_config())["main"]
        assert [(p.name, tuple(int(d) for d in p.shape), str(p.dtype)) for p in func.params] \
            == [(n, tuple(s), d) for n, s, d in wl.buffers()]
    plain = dataclasses.replace(get_template("dense_wgmma.cuda"), name="t", epilogues=False)
    assert "without epilogues" in plain.why_not(wl, Task(wl.anchor, target).facts)


def _sin_of_matmul():
    """A Relax module sin(x @ w), x 32 x 48, w 48 x 64: a matmul fused with an op that no
    workload names (its anchor's records serve it)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((32, 48), "float32"))
    w = relax.Var("w", R.Tensor((48, 64), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(R.sin(R.matmul(x, w)))
        bb.emit_func_output(out)
    return bb.get()


def test_an_anchor_record_that_stores_non_temporally_is_not_built_into_a_fused_function(
        tmp_path, monkeypatch):
    """An anchor matmul's record with ``nt_store`` = 1 (C written by non-temporal stores, which
    needs a matmul that nothing follows) is passed over for a fused function whose matmul is
    followed by an op we cannot name, with the reason in the report; the function takes the
    fallback, with ordinary stores, and is right. (Tasks see an L3 of 1 KB and L2s of 256
    bytes, so that this small C may take the stores.)"""
    import tvm_ext.task
    facts = tvm_ext.task.hardware_facts
    monkeypatch.setattr(tvm_ext.task, "hardware_facts",
                        lambda *a, **k: {**facts(*a, **k), "l3_bytes": 1024, "l2_bytes": 256})
    mod = _sin_of_matmul()
    (wl, _), = extract_tasks(mod, CPU, subgraphs=True)
    task = Task(wl, CPU, template="dense_pack.x86")  # (the template a fused function takes)
    lanes = task.facts["vector_lanes"]
    cfg = task.space.config_from_values({**task.fallback_config().values_dict(),
                                         "tile_y": [-1, 1, 4], "tile_x": [-1, 1, 2 * lanes],
                                         "tile_inner": [-1, 4], "nt_store": 1})
    assert task.name == "dense_pack.x86" and not task.space.violations(cfg)
    log = tmp_path / "nt.json"
    record.append(log, [record.encode(target_str(task.target), task.name, wl, cfg,
                                      MeasureResult([1e-5], 0, 1.0, 0.0))])
    with apply_history_best(str(log)) as ctx:
        ex = build(mod, CPU, fuse_epilogue=True)
        _, plain = choose(wl, CPU)  # the matmul alone takes the record
    assert plain.tuned and plain.config["nt_store"].val == 1
    assert any("nt_store = 1" in line and "followed by ops" in line
               for line in ctx.report.skipped), ctx.report.skipped
    vm = relax.VirtualMachine(ex, tvm.cpu())
    a = np.random.default_rng(0).uniform(-1, 1, (32, 48)).astype("float32")
    b = np.random.default_rng(1).uniform(-1, 1, (48, 64)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b)).numpy()
    np.testing.assert_allclose(got, np.sin(a @ b), rtol=1e-4, atol=1e-5)
    # a fallback that would store non-temporally (C larger than the last-level cache) does
    # not where the matmul is followed: it is the fallback of a C that fits the cache (the
    # tiles may differ from the non-temporal one's, which must divide M: AVX2's 6 rows do not
    # divide 256)
    big = Workload.create("dense", (256, 256, 64), layout="NN")
    with apply_history_best([]):
        _, free = choose(big, CPU)
        _, followed = choose(big, CPU, schedulable=True, followed=True)
    monkeypatch.setattr(tvm_ext.task, "hardware_facts", facts)  # the host's own cache
    with apply_history_best([]):
        _, fits = choose(big, CPU)
    assert free.config["nt_store"].val == 1 and fits.config["nt_store"].val == 0
    assert followed.config.values_dict() == fits.config.values_dict()


# ---- apply: the subgraph's record, else the anchor's ----

def _record(wl, task, cfg, cost):
    return record.decode(record.encode(target_str(task.target), task.name, wl,
                                       cfg, MeasureResult([cost], 0, 1.0, 0.0)))


def test_choose_prefers_the_subgraph_record_then_the_anchors():
    wl = Workload.create("dense", (64, 96, 80), epilogue="bias+gelu")
    task = Task(wl, CPU)
    picks = task.space.random_valid(np.random.default_rng(0), 2)
    sub_cfg, anchor_cfg = task.config(picks[0]), task.config(picks[1])
    sub = _record(wl, task, sub_cfg, 2e-3)
    anchor = _record(wl.anchor, task, anchor_cfg, 1e-3)  # faster, but measured bare
    with apply_history_best([anchor, sub]) as ctx:
        _, choice = choose(wl, CPU)
    assert choice.tuned and not choice.anchor and choice.config.to_json_dict() == \
        sub_cfg.to_json_dict()
    with apply_history_best([anchor]) as ctx:
        _, choice = choose(wl, CPU)
    assert choice.anchor and choice.config.to_json_dict() == anchor_cfg.to_json_dict()
    assert "tuned on the anchor matmul" in str(ctx.report)
    with apply_history_best([sub]):  # a subgraph's record never serves the bare matmul
        _, choice = choose(wl.anchor, CPU)
    assert not choice.tuned


# ---- a Relax model: the seed-004 chain, scaled down ----

def _chain(M=64, K1=128, N1=96, N2=80):
    """X . W1 -> exp -> . W2 (the seed-004 chain), and a dense + bias + gelu beside it."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((M, K1), "float32"))
    w1 = relax.Var("w1", R.Tensor((K1, N1), "float32"))
    b1 = relax.Var("b1", R.Tensor((N1,), "float32"))
    w2 = relax.Var("w2", R.Tensor((N1, N2), "float32"))
    with bb.function("main", [x, w1, b1, w2]):
        with bb.dataflow():
            h = bb.emit(R.exp(R.matmul(x, w1)))
            y = bb.emit(R.matmul(h, w2))
            z = bb.emit(R.nn.gelu(R.add(R.matmul(x, w1), b1)))
            out = bb.emit_output(relax.Tuple([y, z]))
        bb.emit_func_output(out)
    return bb.get()


def _check_chain(ex, M=64, K1=128, N1=96, N2=80):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.1, 0.1, (M, K1)).astype("float32")
    w1 = rng.uniform(-0.1, 0.1, (K1, N1)).astype("float32")
    b1 = rng.uniform(-1, 1, (N1,)).astype("float32")
    w2 = rng.uniform(-1, 1, (N1, N2)).astype("float32")
    y, z = vm["main"](*(tvm.runtime.tensor(a) for a in (x, w1, b1, w2)))
    np.testing.assert_allclose(y.numpy(), np.exp(x @ w1) @ w2, rtol=1e-4, atol=1e-4)
    h = x @ w1 + b1
    gelu = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    np.testing.assert_allclose(z.numpy(), gelu, rtol=1e-4, atol=1e-5)


def test_model_subgraph_tasks_tuned_and_applied(tmp_path):
    mod = _chain()
    tasks = extract_tasks(mod, CPU, subgraphs=True)
    assert sorted(wl.epilogue for wl, _ in tasks) == ["", "bias+gelu", "exp"]
    assert all(n == 1 for _, n in tasks)
    assert all(wl.epilogue == "" for wl, _ in extract_tasks(mod, CPU))  # bare matmuls only
    log = tmp_path / "chain.json"
    tune_model(mod, CPU, trials=12, log=log, tuner="random", subgraphs=True, min_trials=4,
               measure_options=MeasureOptions(run=RunOptions(number=2, repeat=2)))
    with apply_history_best(str(log)) as ctx:
        ex = build(mod, CPU, fuse_epilogue=True)
    text = str(ctx.report)
    assert "3 of 3 kernels used a tuned config" in text and "anchor" not in text
    assert "+exp: dense_pack.x86 tuned" in text and "+bias+gelu: dense_pack.x86 tuned" in text
    _check_chain(ex)
    # A log of bare matmuls (an old log) still serves the fused functions, as anchor records.
    bare = tmp_path / "bare.json"
    (anchor,) = {wl.anchor for wl, _ in tasks if wl.epilogue}  # both fuse onto X . W1
    tune_task(Task(anchor, CPU), bare, trials=2, tuner="random",
              measure_options=MeasureOptions(run=RunOptions(number=2, repeat=2)))
    with apply_history_best(str(bare)) as ctx:
        ex = build(mod, CPU, fuse_epilogue=True)
    anchored = [c for c in ctx.report.choices if c.anchor]
    assert sorted(c.workload.epilogue for c in anchored) == ["bias+gelu", "exp"]
    assert str(ctx.report).count("tuned on the anchor matmul") == 2
    _check_chain(ex)


def test_unknown_epilogue_op_uses_the_anchor(tmp_path):
    """A fused op we cannot name (sin) leaves the function to its anchor's records."""
    mod = _sin_of_matmul()
    (task_wl, _), = extract_tasks(mod, CPU, subgraphs=True)
    assert task_wl.epilogue == ""
    log = tmp_path / "anchor.json"
    # (the template with a schedule: dense_swap.x86's records, which the default 32x64x48
    # would take, are set aside for a fused function, with the reason)
    tune_task(Task(task_wl, CPU, template="dense_pack.x86"), log, trials=2, tuner="random",
              measure_options=MeasureOptions(run=RunOptions(number=2, repeat=2)))
    with apply_history_best(str(log)) as ctx:
        ex = build(mod, CPU, fuse_epilogue=True)
    assert "tuned on the anchor matmul" in str(ctx.report)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    a = np.random.default_rng(0).uniform(-1, 1, (32, 48)).astype("float32")
    b = np.random.default_rng(1).uniform(-1, 1, (48, 64)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b)).numpy()
    np.testing.assert_allclose(got, np.sin(a @ b), rtol=1e-4, atol=1e-5)
    assert os.path.exists(log)


def test_cli_model_subgraphs(tmp_path):
    import subprocess
    import sys
    model = tmp_path / "chain.py"
    model.write_text("from tvm import relax\nfrom tvm.script import relax as R\n"
                     "import sys\nsys.path.insert(0, %r)\n"
                     "from test_subgraph import _chain\nmod = _chain()\n"
                     % os.path.dirname(os.path.abspath(__file__)))
    run = [sys.executable, "-m", "tvm_ext.tune", "--target", "llvm", "--model", str(model),
           "--dry-run"]
    out = subprocess.run(run + ["--subgraphs"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "+bias+gelu" in out.stdout and "+exp" in out.stdout
    out = subprocess.run(run, capture_output=True, text=True)
    assert out.returncode == 0 and "+exp" not in out.stdout
    out = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--subgraphs"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--subgraphs is for --model" in out.stderr


def test_exp_epilogue_of_a_long_reduction_is_checked_relatively():
    """exp of a K = 2048 matmul reaches e^60: its float32 rounding is a relative error of the
    matmul's absolute one; the oracle takes that, and still sees a wrong epilogue."""
    wl = Workload.create("dense", (64, 96, 2048), layout="NN", epilogue="exp")
    task = Task(wl, CPU)
    inputs, out = _run(task, task.fallback_config(), wl)
    assert np.abs(np.log(np.abs(out))).max() > 20  # large values indeed
    check = OutputCheck(wl, inputs[0], inputs[1], extras=inputs[2:])
    assert check(out) is None
    assert check(out * 1.01) is not None
