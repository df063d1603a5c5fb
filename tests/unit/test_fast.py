"""Fast whole-model tuning (issue 21, item 4): ``tune_model(fast=True)``, ``tune --fast`` and the
``ApplyFastTuning`` pass measure the proposer's top K configs per kernel, and the build uses them.
K is small here (the tests time the mechanics, the benchmark the speed)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_ext
import tvm_ext.relax as tr
from tvm_ext import record
from tvm_ext.errors import TvmExtError
from tvm_ext.propose import propose
from tvm_ext.task import Task

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tutorials", "mlp_block_model.py")


def _run(ex, xs):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in xs])
    return [o.numpy() for o in out]


def test_fast_measures_the_proposers_top_k_of_every_kernel(tmp_path):
    mod = tr.load_model(MODEL)
    log = tmp_path / "fast.json"
    rows = tr.tune_model(mod, "llvm", log=log, fast=True, k=3)
    assert len(rows) == 4
    recs = record.load(log)
    for wl, n, budget, s in rows:
        assert budget == 3 and s.trials == 3
        mine = [r for r in recs if r.key() == wl.key()]
        assert len(mine) == 3
        # Exactly each template's first proposals (the budget shared among the templates
        # that apply: dense_swap.x86 and dense_pack.x86 where N >= 2 M), no random draws.
        for name in {r.task_name for r in mine}:
            task = Task(wl, "llvm", template=name)
            got = sorted(r.config.index for r in mine if r.task_name == name)
            assert got == sorted(propose(task.space, len(got)))
    with pytest.raises(TvmExtError, match="k >= 1"):
        tr.tune_model(mod, "llvm", log=log, fast=True, k=0)
    with pytest.raises(TvmExtError, match="trials >= 1"):
        tr.tune_model(mod, "llvm", log=log)


def test_apply_fast_tuning_in_a_pipeline(tmp_path):
    mod = tr.load_model(MODEL)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal([int(d) for d in p.ty.shape.values]).astype("float32") * 0.5
          for p in mod["main"].params]
    want = _run(tvm.compile(mod, "llvm"), xs)
    log = tmp_path / "fast.json"
    fast = tr.ApplyFastTuning("llvm", str(log), k=2)
    scheduled = tvm.transform.Sequential([relax.transform.LegalizeOps(), fast])(mod)
    assert len(fast.results) == 4 and all(s.trials == 2 for *_, s in fast.results)
    ours = [f for f in scheduled.functions.values()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None
            and "tvm_ext.template" in f.attrs]
    assert len(ours) == 4
    with tvm_ext.codegen.pass_options(fast.pass_config):
        got = _run(tvm.compile(scheduled, "llvm", tir_pipeline=fast.tir_pipeline), xs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    # Run again: every workload has its records, nothing is measured, the kernels are the same.
    n = len(record.load(log))
    again = tr.ApplyFastTuning("llvm", str(log), k=2)
    tvm.transform.Sequential([relax.transform.LegalizeOps(), again])(mod)
    assert again.results == [] and len(record.load(log)) == n


def test_cli_fast(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, TVM_EXT_NO_GPU="1")
    r = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--model", MODEL, "--target",
                        "llvm", "--fast", "--trials", "2", "--number", "1", "--repeat", "1",
                        "--log", "m.json"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "fast: the proposer's top 2 configs per kernel" in r.stdout
    assert "tuned 4 kernels in" in r.stdout
    recs = record.load(tmp_path / "m.json")
    assert len(recs) == 8 and len({x.key() for x in recs}) == 4
    bad = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--op", "dense", "--fast",
                          "--tuner", "xgb", "--dry-run"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--fast measures the proposer's top K" in bad.stderr
    one = subprocess.run([sys.executable, "-m", "tvm_ext.tune", "--op", "dense", "--shape",
                          "32x64x48", "--target", "llvm", "--fast", "--trials", "3",
                          "--confirm", "0", "--log", "d.json", "-q"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    assert len(record.load(tmp_path / "d.json")) == 3  # (--confirm: test_cli, test_rerank)
    assert "best/fallback speedup" in one.stdout  # the tuning report's closing lines
