"""``tvm_ext.rerank`` on a GPU: many microsecond kernels compared in CUDA graphs, in turn."""

import numpy as np
import pytest

from tvm_ext import record
from tvm_ext.result import MeasureResult
from tvm_ext.task import Task
from tvm_ext.workload import Workload


@pytest.mark.gpu
def test_rerank_compares_many_short_kernels_in_turn(tmp_path):
    """24 configs of a 512x16x512 int8 mma kernel (about 1.3 us, 1000 launches a graph): the
    first version kept all their graphs alive and crashed in cuGraphLaunch on an H100. Each is
    re-measured, its new record supersedes the stale one, and the best is among them."""
    from tvm_ext.rerank import rerank
    from tvm_ext.target import default_target
    target = default_target()
    wl = Workload.create("dense", (512, 16, 512), "int8", "int32", layout="NT")
    task = Task(wl, target, template="dense_mma.cuda")
    picks = [task.fallback_config()] + \
        [task.config(i) for i in task.space.random_valid(np.random.default_rng(0), 23)]
    picks = list({str(c): c for c in picks}.values())  # the fallback may be drawn too
    log = tmp_path / "i8.json"
    record.append(log, [record.encode(task.target_str, task.name, wl, cfg,
                                      MeasureResult([1e-9 * (k + 1)], 0, 0.1, 1.0))
                        for k, cfg in enumerate(picks)])
    results = rerank(wl, target, [str(log)], rounds=5, warmup=0.5)
    timed = [costs for _, _, _, costs in results if isinstance(costs, list)]
    assert len(timed) == len(picks)
    assert all(len(c) == 5 and all(1e-7 < x < 1e-3 for x in c) for c in timed)
    best = record.best_for(record.load(log), wl, target)
    assert best.result.timestamp > 1.0 and best.result.mean == pytest.approx(np.mean(timed[0]))
