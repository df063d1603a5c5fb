"""In-process measurement on the local device: build, check against numpy, time.

Enough for the CPU. A GPU kernel that faults takes its process down with it; measuring in
isolated worker processes is the job of the pool runner (``tvm_ext.measure.pool``)."""
from __future__ import annotations

import time
from typing import List, Sequence

import numpy as np

from ..task import InstantiationError, OutputCheck, Task
from .result import MeasureErrorNo, MeasureResult, error_line
from .timing import time_module


def device_for(target):
    import tvm  # noqa: PLC0415
    kind = target.kind.name
    return tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)


class LocalMeasurer:
    """Measure configs one after the other in this process.

    ``number`` runs are timed together and averaged; that is repeated ``repeat`` times (each
    repeat is one cost in the record). ``min_repeat_ms`` raises ``number`` until one repeat
    lasts that long. ``check`` compares the output with a float64 numpy reference once per
    config (a mismatch is WRONG_ANSWER).
    """

    def __init__(self, *, number: int = 3, repeat: int = 3, min_repeat_ms: int = 50,
                 check: bool = True, seed: int = 0, timing: str = "auto"):
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.timing = timing
        self.check = check
        self.seed = seed
        self._cache = {}

    def _inputs(self, task: Task):
        """Seeded inputs and their check, kept for the last workload measured."""
        key = task.workload.key()
        if key not in self._cache:
            a, b, check = seeded_data(task, self.seed)
            self._cache = {key: (a, b, check if self.check else None)}
        return self._cache[key]

    def measure(self, task: Task, configs: Sequence) -> List[MeasureResult]:
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
        dev = device_for(task.target)
        try:
            a, b, check = self._inputs(task)
            mod = ex.mod if hasattr(ex, "mod") else ex
            kind, payload = run_arrays(task, mod, dev, a, b, check, number=self.number,
                                       repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                                       cache_flush=False, timing=self.timing)
        except Exception as err:  # noqa: BLE001
            return MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE, error_line(err),
                                       time.time() - t0)
        if kind != "ok":
            return MeasureResult.error(MeasureErrorNo.WRONG_ANSWER, payload, time.time() - t0)
        return MeasureResult(payload, 0, time.time() - t0, time.time())


def seeded_data(task, seed: int):
    """(A, B, OutputCheck) drawn from ``seed``: every measurer checks the same inputs."""
    a, b = task.random_inputs(np.random.default_rng(seed))
    return a, b, OutputCheck(task.workload, a, b, seed=seed)


def run_arrays(task, mod, dev, a, b, check, *, number, repeat, min_repeat_ms, cache_flush,
               tensor=None, timing="evaluator"):
    """Run a loaded module once on NaN-poisoned output, check it (``check(output)`` -> problem
    or None), then time it (``timing``: see ``tvm_ext.measure.timing``). Returns ("ok", costs)
    or ("wrong", problem). ``tensor`` makes device tensors (local or remote)."""
    import tvm  # noqa: PLC0415
    wl = task.workload
    tensor = tensor or (lambda arr: tvm.runtime.tensor(arr, dev))
    poison = np.full(wl.out_shape, np.nan if wl.out_dtype.startswith(("float", "bf")) else -7,
                     dtype=wl.out_dtype)
    ta, tb, tc = tensor(a), tensor(b), tensor(poison)
    mod["main"](ta, tb, tc)
    dev.sync()
    if check is not None:
        problem = check(tc.numpy())
        if problem:
            return ("wrong", problem)
    return ("ok", time_module(mod, dev, (ta, tb, tc), timing=timing, number=number,
                              repeat=repeat, min_repeat_ms=min_repeat_ms,
                              cache_flush=cache_flush))


