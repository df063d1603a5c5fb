"""The tuners benchmark runs every tuner it compares (random, GA, XGB from a random and from the
proposer's first plan, XGB with transfer, top-k) on a replayed space: here a synthetic one, every
valid config of TUNER_WORKLOAD recorded with a made-up time (nothing is built)."""
import numpy as np

from tvm_ext import record
from tvm_ext.bench.tuners import TUNER_WORKLOAD, run_tuners
from tvm_ext.result import MeasureResult
from tvm_ext.target import host_cpu_target, target_str
from tvm_ext.task import Task


def test_every_tuner_runs_on_a_replayed_space(tmp_path, capsys):
    target = host_cpu_target()
    task = Task(TUNER_WORKLOAD, target)
    rng = np.random.default_rng(0)
    lines = []
    for i in task.space.valid_indices():
        cfg = task.config(i)
        cost = 1e-3 * (1 + rng.random())  # a made-up time per config
        lines.append(record.encode(target_str(target), task.name, TUNER_WORKLOAD, cfg,
                                   MeasureResult([cost])))
    log = tmp_path / "space.json"
    record.append(log, lines)
    curves = run_tuners(str(log), seeds=(0,), budget=16, random_budget=32)
    assert list(curves) == ["random", "ga", "xgb-random-start", "xgb", "xgb+transfer", "topk"]
    for label, histories in curves.items():
        (h,) = histories
        assert len(h) == (32 if label == "random" else 16)
        assert all(b >= a for a, b in zip(h, h[1:]))  # best so far never falls
    out = capsys.readouterr().out
    assert "topk best after 16 trials / random's best after 32" in out
