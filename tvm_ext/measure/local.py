"""In-process measurement on the local device: build, check against numpy, time.

Enough for the CPU. A GPU kernel that faults takes its process down with it; measuring in
isolated worker processes is the job of ``PoolMeasurer`` (``measure/pool.py``)."""
from __future__ import annotations

import time
from typing import List, Optional, Sequence

from ..result import MeasureErrorNo, MeasureResult, error_line
from ..task import InstantiationError, Task
from .options import RunOptions
from .runner import check_host_can_run, release_kept, run_checked, run_device


class LocalMeasurer:
    """Measure configs one after the other in this process. ``LocalMeasurer(options)`` or
    ``LocalMeasurer(**fields)`` with the fields of ``RunOptions`` (cache flush is for the
    pool's runners)."""

    def __init__(self, options: Optional[RunOptions] = None, **fields):
        self.options = options or RunOptions(**fields)

    def close(self):
        """Free the arguments kept for the last workload measured (see ``runner.kept_args``)."""
        release_kept()

    def measure(self, task: Task, configs: Sequence) -> List[MeasureResult]:
        check_host_can_run(task.workload, task.target)  # before anything is built
        return [self.measure_one(task, c) for c in configs]

    def measure_one(self, task: Task, config) -> MeasureResult:
        t0 = time.time()
        try:
            mod = task.instantiate(config)
        except InstantiationError as err:
            return MeasureResult.error(MeasureErrorNo.INSTANTIATION_ERROR, str(err),
                                       time.time() - t0)
        try:
            ex = task.compile(mod)
        except Exception as err:  # noqa: BLE001  (any compiler failure is a record)
            return MeasureResult.error(MeasureErrorNo.COMPILE_HOST, error_line(err),
                                       time.time() - t0)
        return self.run(task, ex, t0)

    def run(self, task: Task, ex, t0: float) -> MeasureResult:
        dev = run_device(task.target)
        opts = self.options
        try:
            mod = ex.mod if hasattr(ex, "mod") else ex
            kind, payload = run_checked(task, mod, dev, opts)
        except Exception as err:  # noqa: BLE001
            return MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE, error_line(err),
                                       time.time() - t0)
        if kind != "ok":
            return MeasureResult.error(MeasureErrorNo.WRONG_ANSWER, payload, time.time() - t0)
        return MeasureResult(payload, 0, time.time() - t0, time.time())
