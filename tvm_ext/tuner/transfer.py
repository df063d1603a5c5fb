"""Transfer learning: an XGB tuner starts from the records of the same template for other
workloads (their knob features come from their own spaces)."""
from __future__ import annotations

from .base import Tuner
from .xgb import XGBTuner


def warm_start(tuner: Tuner, task, records) -> int:
    """Transfer learning: give an XGB tuner the valid records of the same template for other
    workloads (their features come from their own spaces). Returns how many were used."""
    if not isinstance(tuner, XGBTuner):
        return 0
    from ..task import Task  # noqa: PLC0415  (tuner sits above task)
    feats, thr, groups, spaces = [], [], [], {}
    for r in records:
        if r.task_name != task.name or r.key() == task.workload.key() or not r.result.ok:
            continue
        if r.key() not in spaces:
            spaces[r.key()] = Task(r.workload, task.target, template=task.name,
                                   space_file=task.space_file, narrow=task.narrow).space
        space = spaces[r.key()]
        if set(space.knobs) != set(r.config):
            continue
        feats.append(space.features(r.config))
        thr.append(1.0 / r.result.mean)
        groups.append(r.key())
    if feats:
        tuner.add_transfer(feats, thr, groups)
    return len(feats)
