"""``tvm_ext.rerank``: a log's configs of one workload measured again in turn, on the CPU."""
import numpy as np
import pytest

from tvm_ext import record
from tvm_ext.rerank import confirm, main, rerank
from tvm_ext.result import MeasureResult
from tvm_ext.target import host_cpu_target
from tvm_ext.task import Task
from tvm_ext.workload import Workload

CPU = host_cpu_target()
WL = Workload.create("dense", (64, 128, 64), layout="NT")
#: a machine that is not this host: its records are left as they are
OTHER = "haswell" if CPU.attrs.get("mcpu") != "haswell" else "znver3"


def _log(tmp_path):
    """Three configs of WL: stale times (the slowest-looking one absurdly fast), one of them
    recorded twice, and a record of another machine."""
    task = Task(WL, CPU)
    picks = [task.fallback_config()] + \
        [task.config(i) for i in task.space.random_valid(np.random.default_rng(5), 2)]
    assert len({str(c) for c in picks}) == 3

    def line(cfg, cost, stamp, target=task.target_str):
        return record.encode(target, task.name, WL, cfg, MeasureResult([cost], 0, 0.1, stamp))
    other = '{"kind": "llvm", "keys": ["cpu"], "mcpu": "%s", "num-cores": 2}' % OTHER
    log = tmp_path / "log.json"
    record.append(log, [line(picks[0], 5e-3, 1.0), line(picks[1], 4e-3, 1.0),
                        line(picks[2], 1e-9, 1.0), line(picks[0], 2e-3, 0.5),
                        line(picks[1], 1e-10, 1.0, target=other)])
    return log, picks


def test_rerank_measures_each_config_in_turn_and_its_times_rank_them(tmp_path):
    log, picks = _log(tmp_path)
    results = rerank(WL, CPU, [str(log)], rounds=3, warmup=0.0)
    assert sorted(str(c) for _, c, _, _ in results) == sorted(str(c) for c in picks)
    new = record.load(log)[5:]
    assert len(new) == 3 and all(r.result.timestamp > 1.0 and len(r.result.costs) == 3
                                 for r in new)
    assert all(0 < c < 1 for r in new for c in r.result.costs)
    best = record.best_for(record.load(log), WL, CPU)
    assert best.result.mean == min(r.result.mean for r in new)  # not the stale 1e-9
    means = [np.mean(costs) for _, _, _, costs in results]
    assert means == sorted(means) and means[0] == pytest.approx(best.result.mean, rel=1e-9)
    # the other machine's record is left as it was
    assert [r.result.mean for r in record.load(log) if OTHER in r.target] == [1e-10]


def test_rerank_says_what_is_wrong_before_measuring(tmp_path, capsys):
    log, _ = _log(tmp_path)
    assert main(["--log", str(tmp_path / "none.json"), "--op", "dense", "--shape",
                 "64x128x64", "--target", "llvm"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["--log", str(log), "--op", "dense", "--shape", "64x128x32",
                 "--target", "llvm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nothing to re-rank" in err and len(err.splitlines()) == 1
    assert main(["--log", str(log), "--op", "dense", "--shape", "64x128x64", "--target",
                 "llvm", "--top", "0"]) == 2
    assert "--top 0: must be >= 1" in capsys.readouterr().err
    with pytest.raises(Exception, match="rounds"):
        rerank(WL, CPU, [str(log)], rounds=0)
    assert len(record.load(log)) == 5  # nothing appended


def test_confirm_measures_the_best_and_the_fallback_again_and_the_log_ranks_by_it(tmp_path):
    """The end of a tuning run: the log's two best configs (one of them timed absurdly fast
    once) and the template's fallback, which the log does not hold, measured in turn; the
    log's best is then the best of that comparison, and the fallback a record that can win."""
    task = Task(WL, CPU)
    fallback = task.fallback_config()
    rng = np.random.default_rng(7)
    picks = [c for c in (task.config(i) for i in task.space.random_valid(rng, 4))
             if str(c) != str(fallback)][:3]
    log = tmp_path / "log.json"
    record.append(log, [record.encode(task.target_str, task.name, WL, cfg,
                                      MeasureResult([cost], 0, 0.1, 1.0))
                        for cfg, cost in zip(picks, (1e-9, 2e-3, 1.0))])
    results = confirm(WL, CPU, str(log), top=2, rounds=3, warmup=0.0)
    assert [str(c) for c in sorted((c for _, c, _, _ in results), key=str)] == \
        sorted(str(c) for c in (picks[0], picks[1], fallback))
    assert [old is None for _, c, old, _ in results if str(c) == str(fallback)] == [True]
    recs = record.load(log)
    new = recs[3:]
    assert len(new) == 3 and all(r.result.timestamp > 1.0 and len(r.result.costs) == 3
                                 for r in new)
    best = record.best_for(recs, WL, CPU)
    assert best.result.timestamp > 1.0  # not the stale 1e-9 of the first config
    assert best.result.mean == min(r.result.mean for r in new)
    assert str(results[0][1]) == str(best.config)
    # the third config was not among the best two, nor faster than them: left as it was
    assert [r.result.mean for r in recs if str(r.config) == str(picks[2])] == [1.0]
    # a log without a valid record of the workload: nothing to confirm, nothing appended
    other = Workload.create("dense", (64, 128, 32), layout="NT")
    assert confirm(other, CPU, str(log), rounds=1) == []
    assert len(record.load(log)) == 6


def test_top_n_takes_in_the_configs_left_out_whose_older_times_beat_the_comparison(tmp_path):
    """``rerank(top=1)``: the best config alone; then the four left out, whose older times (a
    tuner's lucky ones) beat its new time, join the next comparisons two at a time (2 x top,
    the best first): every time the workload's best is chosen by comes from one comparison."""
    task = Task(WL, CPU)
    picks = [task.config(i) for i in task.space.random_valid(np.random.default_rng(11), 5)]
    log = tmp_path / "log.json"
    record.append(log, [record.encode(task.target_str, task.name, WL, cfg,
                                      MeasureResult([cost], 0, 0.1, 1.0))
                        for cfg, cost in zip(picks, (1e-10, 2e-10, 3e-10, 4e-10, 5e-10))])
    results = rerank(WL, CPU, [str(log)], rounds=2, warmup=0.0, top=1)
    assert sorted(str(c) for _, c, _, _ in results) == sorted(str(c) for c in picks)
    recs = record.load(log)
    # the comparisons: 1 config, then 3 (the two best left out), then 5
    assert len(recs) == 5 + 1 + 3 + 5
    assert {str(r.config) for r in recs[6:9]} == {str(c) for c in picks[:3]}
    assert all(r.result.timestamp > 1.0 for r in record.latest_measurements(recs))
    best = record.best_for(recs, WL, CPU)
    assert best.result.mean == min(r.result.mean for r in recs[9:])
