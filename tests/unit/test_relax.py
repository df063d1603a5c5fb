"""Relax models: task extraction, tuned kernels applied as a pass, numerics, report, --model."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_ext
import tvm_ext.relax as tr
from relax_helpers import bias_relu_model, check_fused
from tvm_ext import record
from tvm_ext.measure import LocalMeasurer
from tvm_ext.task import Task
from tvm_ext.tuner import make_tuner
from tvm_ext.session import tune_loop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tutorials", "mlp_block_model.py")


def _inputs(mod, rng):
    shapes = [[int(d) for d in p.ty.shape.values] for p in mod["main"].params]
    return [rng.standard_normal(s).astype("float32") * 0.5 for s in shapes]


def _run(ex, xs):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in xs])
    return [o.numpy() for o in out]


def test_extract_tasks_counts_calls():
    mod = tr.load_model(MODEL)
    tasks = tr.extract_tasks(mod, "llvm")
    ops = sorted((wl.op, wl.shape_str(), n) for wl, n in tasks)
    assert ops == [("batch_matmul", "4x64x32x64", 1), ("batch_matmul", "4x64x64x32", 1),
                   ("dense", "64x128x256", 1), ("dense", "64x256x128", 1)]


def test_model_with_and_without_log(tmp_path):
    mod = tr.load_model(MODEL)
    xs = _inputs(mod, np.random.default_rng(0))
    reference = _run(tvm.compile(mod, "llvm"), xs)  # TVM's own pipeline
    wl = tr.extract_tasks(mod, "llvm")[0][0]
    task = Task(wl, "llvm")
    log = tmp_path / "model.json"
    tune_loop(task, make_tuner("random", task.space, seed=0), LocalMeasurer(number=1, repeat=1),
              n_trial=3, callbacks=[record.LogWriter(log)])
    with tvm_ext.apply_history_best([]) as untuned:
        plain = _run(tr.build(mod, "llvm"), xs)
    with tvm_ext.apply_history_best(str(log)) as tuned:
        applied = _run(tr.build(mod, "llvm"), xs)
    for ours in (plain, applied):
        for got, want in zip(ours, reference):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(untuned.report.choices) == 4 and not untuned.report.tuned
    assert [c.workload for c in tuned.report.tuned] == [wl]
    assert len(tuned.report.fallback) == 3
    text = str(tuned.report)
    assert "1 of 4 kernels used a tuned config" in text and "tuned (" in text


def test_tune_model_cli(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, TVM_EXT_NO_GPU="1")
    r = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--model", MODEL, "--target",
                        "llvm", "--trials", "8", "--local", "--number", "1", "--repeat", "1",
                        "--log", "m.json"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    recs = record.load(tmp_path / "m.json")
    assert len(recs) == 32 and len({r.key() for r in recs}) == 4  # >= 8 trials per task
    bad = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--model", "nope.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "model file nope.py does not exist" in bad.stderr


def test_epilogue_is_fused_into_our_kernel():
    fused = tvm.transform.Sequential([
        relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
        relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()])(
            tr.legalize_as_strategy(bias_relu_model()))
    applied = tr.ApplyTunedKernels("llvm")(fused)
    prims = [(gv.name_hint, f) for gv, f in applied.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(prims) == 1  # matmul + bias + relu: one kernel
    assert prims[0][1].attrs["tvm_ext.template"] == "batch_matmul.x86"
    check_fused("llvm", tvm.cpu())


def test_extract_from_relax_frontend_nn():
    from tvm.relax.frontend import nn

    class MLP(nn.Module):
        def __init__(self):
            self.up = nn.Linear(64, 128, bias=False)
            self.down = nn.Linear(128, 64, bias=True)

        def forward(self, x):
            return self.down(nn.relu(self.up(x)))

    mod, _ = MLP().export_tvm(spec={"forward": {"x": nn.spec.Tensor((32, 64), "float32")}})
    found = sorted(wl.shape_str() for wl, _ in tr.extract_tasks(mod, "llvm"))
    assert found == ["32x128x64", "32x64x128"]


def test_torch_export_model_on_cpu():
    torch = pytest.importorskip("torch")  # torch is not a dependency: skipped without it
    from tvm.relax.frontend.torch import from_exported_program
    sys.path.insert(0, os.path.join(ROOT, "tutorials"))
    from transformer_gpu import make_block
    block = make_block(torch, dim=64, heads=4, hidden=128).eval()
    x = torch.randn(16, 64)
    with torch.no_grad():
        mod = from_exported_program(torch.export.export(block, (x,)),
                                    unwrap_unit_return_tuple=True)
        want = block(x).numpy()
    # q/k/v/o projections share one workload, and at seq 16 = head dim 16 so do the two bmms
    assert len(tr.extract_tasks(mod, "llvm")) == 4
    with tvm_ext.apply_history_best([]) as ctx:
        ex = tr.build(mod, "llvm")
    assert len(ctx.report.choices) == 4
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
