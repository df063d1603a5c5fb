"""Replay measurement: results come from a log instead of hardware (KernelTuner's simulation
mode). Tuners are tested, and compared over many seeds, against the real costs of a space that
was measured once; a config the log does not hold is UNKNOWN_ERROR."""
from __future__ import annotations

from typing import Dict, List

from .. import record
from ..result import MeasureErrorNo, MeasureResult


class ReplayMeasurer:
    def __init__(self, log, target=None):
        self.records = record.load(log) if not isinstance(log, list) else log
        if target is not None:
            self.records = record.for_target(self.records, target)
        self._index: Dict[tuple, MeasureResult] = {}
        for r in self.records:
            key = (r.task_name, r.key(), r.config)
            old = self._index.get(key)
            if old is None or (r.result.ok and r.result.mean < old.mean):
                self._index[key] = r.result
        self.calls = 0

    def measure(self, task, configs) -> List[MeasureResult]:
        out = []
        for c in configs:
            self.calls += 1
            res = self._index.get((task.name, task.workload.key(), c))
            out.append(res if res is not None else MeasureResult.error(
                MeasureErrorNo.UNKNOWN_ERROR, "config not in the replay log"))
        return out
