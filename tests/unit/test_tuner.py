"""Tuner contract: valid, unvisited proposals; budget; determinism; small spaces."""
import pytest

from tvm_ext.result import MeasureResult
from tvm_ext.space import ConfigSpace
from tvm_ext.tuner import TUNERS, make_tuner
from tvm_ext.session import tune_loop
from tvm_ext.tuner.features import task_loop_features


def _space():
    cs = ConfigSpace()
    cs.define_split("x", 64)
    cs.define_split("y", 32, num_outputs=3)
    cs.define_knob("u", [0, 16, 64])
    cs.add_constraint("x[-1] * y[-1] <= 64")
    return cs


class _Task:
    """A stand-in task: cost is a known function of the config (a dummy runner)."""
    flop = 1e9

    def __init__(self, space):
        self.space = space

    def config(self, i):
        return self.space.get(i)


class _DummyMeasurer:
    def __init__(self):
        self.seen = []

    def measure(self, task, configs):
        out = []
        for c in configs:
            self.seen.append(c.index)
            y = c["y"].size[-1] if "y" in c else 1
            out.append(MeasureResult([1.0 / (c["x"].size[-1] * y + c["u"].val)]))
        return out


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_contract(name):
    space = _space()
    valid = set(space.valid_indices())
    m = _DummyMeasurer()
    s = tune_loop(_Task(space), make_tuner(name, space, seed=3), m, n_trial=40, batch_size=7)
    assert s.trials == len(m.seen) == 40
    assert len(set(m.seen)) == 40 and set(m.seen) <= valid
    assert s.best_config is not None and s.history == sorted(s.history)


def test_stop_at_cost_ends_after_the_batch_that_reaches_it():
    """stop_at_cost: tuning ends with the batch in which a config is at least that fast."""
    space = _space()
    full = tune_loop(_Task(space), make_tuner("random", space, seed=5), _DummyMeasurer(),
                     n_trial=60, batch_size=6)
    goal = 1.0 / max(full.history) / 1e9 * _Task.flop  # the cost of the best of 60 trials
    first = next(i for i, g in enumerate(full.history) if g >= max(full.history)) + 1
    s = tune_loop(_Task(space), make_tuner("random", space, seed=5), _DummyMeasurer(), n_trial=60,
                  batch_size=6, stop_at_cost=goal)
    assert s.best_cost <= goal and s.trials == -(-first // 6) * 6 <= 60
    never = tune_loop(_Task(space), make_tuner("random", space, seed=5), _DummyMeasurer(),
                      n_trial=30, batch_size=6, stop_at_cost=0.0)
    assert never.trials == 30


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_deterministic_and_exhausts_small_space(name):
    space = ConfigSpace()
    space.define_split("x", 16)
    space.define_knob("u", [1, 2])
    runs = []
    for _ in range(2):
        m = _DummyMeasurer()
        s = tune_loop(_Task(space), make_tuner(name, space, seed=7), m, n_trial=100)
        runs.append(m.seen)
    assert runs[0] == runs[1]
    assert s.trials == len(space) == 10 and sorted(runs[0]) == list(range(10))


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_history_is_never_proposed(name):
    space = _space()
    valid = list(space.valid_indices())
    tuner = make_tuner(name, space, seed=1)
    tuner.load_history(valid[:20], [1.0] * 20)
    proposed = tuner.ask(len(valid))
    assert not set(proposed) & set(valid[:20])
    assert sorted(proposed) == valid[20:]


def test_unknown_tuner():
    from tvm_ext.errors import TvmExtError
    with pytest.raises(TvmExtError, match="unknown tuner"):
        make_tuner("annealing", _space())


# ---- the same contract against real costs, replayed from a small committed log ----
import os  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


# The CPU that replay_bmm_x86.json.gz was measured on (AVX-512: 16 lanes, 32 vector registers). The
# space's constraints read those facts, so the replay task names that target rather than this
# host's: nothing is built or run, and an AVX2 host would prune the space to other configs.
REPLAY_TARGET = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}


def _replay_task():
    from tvm_ext.task import Task
    from tvm_ext.workload import Workload
    return Task(Workload.create("batch_matmul", (2, 32, 32, 16)), REPLAY_TARGET,
                space_file=os.path.join(DATA, "replay_space.json"))


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_contract_with_replay_runner(name):
    from tvm_ext.measure.replay import ReplayMeasurer
    task = _replay_task()
    valid = set(task.space.valid_indices())
    assert len(valid) == 84
    runs = []
    for _ in range(2):
        m = ReplayMeasurer(os.path.join(DATA, "replay_bmm_x86.json.gz"))
        tuner = make_tuner(name, task.space, seed=11)
        if name.startswith("xgb"):
            tuner.loop_features = task_loop_features(task)
        seen = []
        s = tune_loop(task, tuner, m, n_trial=30, batch_size=6,
                      callbacks=[lambda t, cfgs, res: seen.extend((c.index, r.error_no)
                                                            for c, r in zip(cfgs, res))])
        assert s.trials == 30 == m.calls
        idx = [i for i, _ in seen]
        assert len(set(idx)) == 30 and set(idx) <= valid
        assert all(err == 0 for _, err in seen)  # every proposal was in the measured space
        runs.append(idx)
    assert runs[0] == runs[1]


def test_xgb_plans_past_configs_whose_loops_cannot_be_read():
    """A measured config whose scheduled loops cannot be read (its schedule raised; the tuner
    measured it as a build error) had a feature row of another width, and the next plan
    crashed building the training set (dense 64x50257x768 on the CPU, tile_x [-1, 1, 1]):
    the model now learns from the others."""
    space = _space()
    bad = set(list(space.valid_indices())[::3])

    def loops(i):
        if i in bad:
            raise RuntimeError("The loops are not in a chain")
        return [float(space.get(i)["x"].size[-1]), 1.0, 2.0]

    tuner = make_tuner("xgb", space, seed=3)
    tuner.loop_features = loops
    s = tune_loop(_Task(space), tuner, _DummyMeasurer(), n_trial=40, batch_size=8)
    assert s.trials == 40


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_replay_space_smaller_than_budget(name):
    from tvm_ext.measure.replay import ReplayMeasurer
    task = _replay_task()
    m = ReplayMeasurer(os.path.join(DATA, "replay_bmm_x86.json.gz"))
    s = tune_loop(task, make_tuner(name, task.space, seed=0), m, n_trial=500, batch_size=16)
    assert s.trials == 84 and s.errors == 0


def test_xgb_transfer_is_used():
    from tvm_ext import record
    from tvm_ext.tuner import XGBTuner, warm_start
    from tvm_ext.task import Task
    from tvm_ext.workload import Workload
    recs = record.load(os.path.join(DATA, "replay_bmm_x86.json.gz"))
    other = Task(Workload.create("batch_matmul", (2, 64, 32, 16)), "llvm",
                 space_file=os.path.join(DATA, "replay_space.json"))
    tuner = XGBTuner(other.space, seed=0)
    assert warm_start(tuner, other, recs) == 84
    assert len(tuner.ask(8)) == 8 and tuner.n_plans == 1  # the model planned from transfer data
