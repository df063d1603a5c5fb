"""One tuning run over every template of a workload, the budget moving to the winner (issue 22,
item 5): ``session.tune_templates``, the CLI's run over several templates and ``tune_model``.
The measurer is a stand-in whose times are a known function of the template and the config, so
that where the budget goes is checked exactly; nothing is compiled."""
import pytest

from tvm_ext import record
from tvm_ext.errors import TvmExtError
from tvm_ext.result import MeasureErrorNo, MeasureResult
from tvm_ext.session import tune_templates
from tvm_ext.strategy import templates_for
from tvm_ext.target import parse_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

SM90 = {"kind": "cuda", "arch": "sm_90"}
# A subgraph that CUDA cores and both mma-based tensor-core templates can build (the wgmma ones,
# which also take epilogues, need M, N and K multiples of 64: M = 480 keeps them out; the direct
# mma one needs K-major operands: layout NN keeps it out).
WL = Workload("dense", 1, 480, 512, 512, "float16", "float16", "NN", "bias+gelu")


class _Measurer:
    """Times by template (seconds), a little slower for larger config indices; a template
    named in ``broken`` fails every config (a template that cannot build the subgraph)."""

    def __init__(self, base, broken=()):
        self.base, self.broken = base, set(broken)
        self.calls = []

    def measure(self, task, configs):
        self.calls.append((task.name, len(configs)))
        if task.name in self.broken:
            return [MeasureResult.error(MeasureErrorNo.COMPILE_DEVICE, "no") for _ in configs]
        return [MeasureResult([self.base[task.name] * (1 + 1e-6 * c.index)]) for c in configs]


def _tasks(wl=WL):
    target = parse_target(SM90)
    return [Task(wl, target, template=t.name) for t in templates_for(wl, target)]


def _trials(measurer):
    out = {}
    for name, n in measurer.calls:
        out[name] = out.get(name, 0) + n
    return out


def test_budget_moves_to_the_winning_template(tmp_path):
    tasks = _tasks()
    names = [t.name for t in tasks]
    assert names == ["dense_mma.cuda", "dense_tensorcore.cuda", "dense_large_batch.cuda"]
    base = {"dense_mma.cuda": 1e-4, "dense_tensorcore.cuda": 4e-4,
            "dense_large_batch.cuda": 1e-3}
    m = _Measurer(base)
    log = tmp_path / "log.json"
    s = tune_templates(tasks, log, trials=96, tuner="random", measurer=m, batch_size=8)
    per = _trials(m)
    # Every template got its first batch, in priority order; then the winner took the rest.
    assert [name for name, _ in m.calls[:3]] == names
    assert per == {"dense_mma.cuda": 80, "dense_tensorcore.cuda": 8,
                   "dense_large_batch.cuda": 8}
    assert s.trials == 96 and s.errors == 0
    assert s.best_template == "dense_mma.cuda"
    assert s.best_cost == pytest.approx(1e-4, rel=1e-2)
    assert {k: p.trials for k, p in s.per_template.items()} == per
    # The combined curve is the best so far over all templates, trial by trial.
    assert len(s.history) == 96 and s.history == sorted(s.history)
    assert s.history[-1] == pytest.approx(WL.flop / s.best_cost / 1e9)
    # Every measured config is in the log, under its own template.
    recs = record.load(log)
    assert len(recs) == 96
    assert {r.task_name for r in recs} == set(names)
    best = record.best_for(recs, WL, parse_target(SM90))
    assert best.task_name == "dense_mma.cuda"


def test_a_close_second_template_keeps_getting_batches():
    # At 90% of the leader, the second template is explored; at 25%, it is not.
    base = {"dense_mma.cuda": 1e-4, "dense_tensorcore.cuda": 1.11e-4,
            "dense_large_batch.cuda": 4e-4}
    m = _Measurer(base)
    tune_templates(_tasks(), None, trials=96, tuner="random", measurer=m, batch_size=8)
    per = _trials(m)
    assert per["dense_large_batch.cuda"] == 8
    assert per["dense_tensorcore.cuda"] > 8
    assert per["dense_mma.cuda"] > per["dense_tensorcore.cuda"]


def test_a_template_with_no_valid_config_gets_only_its_first_batch():
    base = {"dense_mma.cuda": 1e-4, "dense_tensorcore.cuda": 1e-4,
            "dense_large_batch.cuda": 1e-4}
    m = _Measurer(base, broken={"dense_mma.cuda"})
    s = tune_templates(_tasks(), None, trials=64, tuner="random", measurer=m, batch_size=8)
    assert _trials(m)["dense_mma.cuda"] == 8
    assert s.errors == 8 and s.per_template["dense_mma.cuda"].best_config is None
    assert s.best_template in ("dense_tensorcore.cuda", "dense_large_batch.cuda")


def test_small_budget_first_batches_share_it():
    m = _Measurer({"dense_mma.cuda": 1e-4, "dense_tensorcore.cuda": 2e-4,
                   "dense_large_batch.cuda": 3e-4})
    s = tune_templates(_tasks(), None, trials=7, tuner="random", measurer=m, batch_size=8)
    assert s.trials == 7
    assert [name for name, _ in m.calls] == ["dense_mma.cuda", "dense_tensorcore.cuda",
                                             "dense_large_batch.cuda", "dense_mma.cuda"]
    assert _trials(m) == {"dense_mma.cuda": 3, "dense_tensorcore.cuda": 2,
                          "dense_large_batch.cuda": 2}


def test_refuses_tasks_of_different_workloads():
    other = Workload("dense", 1, 224, 512, 512, "float16", "float16", "NN", "bias+gelu")
    tasks = [_tasks()[0], _tasks(other)[1]]
    with pytest.raises(TvmExtError, match="one workload"):
        tune_templates(tasks, None, trials=8, tuner="random", measurer=_Measurer({}))


def test_tune_model_runs_every_template_of_a_subgraph(monkeypatch, tmp_path):
    """``tune_model(subgraphs=True)`` on sm_90 f16: the fused matmul+bias+gelu is one run over
    the templates that can fuse it (M = 480: not the wgmma ones), and the log's best is the
    winner's."""
    from tvm import relax
    from tvm.script import relax as R

    from tvm_ext.relax import tune_model
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((480, 512), "float16"))
    w = relax.Var("w", R.Tensor((512, 512), "float16"))
    b = relax.Var("b", R.Tensor((512,), "float16"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(R.nn.gelu(R.add(R.matmul(x, w), b))))
        bb.emit_func_output(out)
    mod = bb.get()
    base = {"dense_mma.cuda": 1e-4, "dense_tensorcore.cuda": 3e-4,
            "dense_large_batch.cuda": 9e-4}
    m = _Measurer(base)
    out = tune_model(mod, SM90, trials=48, log=tmp_path / "m.json", tuner="random",
                     measurer=m, subgraphs=True)
    assert len(out) == 1
    wl, n, budget, s = out[0]
    assert wl.epilogue == "bias+gelu" and n == 1 and budget == 48
    assert set(s.per_template) == {"dense_mma.cuda", "dense_tensorcore.cuda",
                                   "dense_large_batch.cuda"}
    assert s.best_template == "dense_mma.cuda"
    assert _trials(m)["dense_mma.cuda"] > 24


def test_cli_runs_every_template_in_one_run(monkeypatch, tmp_path, capsys):
    """``tune --epilogue`` on sm_90 f16: one run over the three templates that can fuse the
    subgraph; the summary says where the trials went and which template won."""
    import tvm_ext.session as session
    import tvm_ext.tune as cli
    m = _Measurer({"dense_mma.cuda": 2e-4, "dense_tensorcore.cuda": 1e-4,
                   "dense_large_batch.cuda": 9e-4})
    monkeypatch.setattr(session, "make_measurer", lambda target, options=None: m)
    monkeypatch.setattr(cli, "_check_device", lambda args, workloads: None)
    log = tmp_path / "log.json"
    rc = cli.run(["--op", "dense", "--shape", "480x512x512", "--dtype", "float16",
                  "--out-dtype", "float16", "--epilogue", "bias+gelu", "--target", "cuda",
                  "--layout", "NN", "--trials", "64", "--log", str(log), "-q"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "3 templates apply" in out and "budget moves to the template that is winning" in out
    per = _trials(m)
    assert sum(per.values()) == 64 and per["dense_tensorcore.cuda"] >= 40
    assert "  dense_tensorcore.cuda: " in out and "the winner is dense_tensorcore.cuda" in out
    assert "best: 0.1000 ms" in out and "dense_tensorcore.cuda Config(" in out
    assert all(r.workload.epilogue == "bias+gelu" for r in record.load(log))
