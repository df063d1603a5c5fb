"""``PoolMeasurer``: isolated, parallel measurement, a ``Builder`` feeding a runner (a
``ProcessRunner`` on this host's devices, or an ``RPCRunner`` on a farm).
``measure(task, configs) -> [MeasureResult]``, as ``LocalMeasurer``."""
from __future__ import annotations

import logging
import os
import time
from typing import List, Optional

from ..result import MeasureResult
from .builder import Builder
from .options import MeasureOptions, RunOptions
from .runner import ProcessRunner, RPCRunner
from .worker import task_payload

logger = logging.getLogger("tvm_ext")


class PoolMeasurer:
    """``PoolMeasurer(options)``, or ``PoolMeasurer(**fields)`` with the fields of
    ``MeasureOptions`` and ``RunOptions`` (``n_parallel=2, number=1, ...``) for short."""

    def __init__(self, options: Optional[MeasureOptions] = None, **fields):
        if options is None:
            run_fields = {k: fields.pop(k) for k in list(fields)
                          if k in RunOptions.__dataclass_fields__}
            if "devices" in fields:
                fields["devices"] = tuple(fields["devices"])
            options = MeasureOptions(run=RunOptions(**run_fields), **fields)
        elif fields:
            raise TypeError("PoolMeasurer takes options or fields, not both")
        self.options = options
        n_parallel = options.n_parallel or max(1, os.cpu_count() or 2)
        self.builder = Builder(n_parallel, options.build_timeout, options.source_paths)
        if options.rpc is not None:
            self.runner = RPCRunner(options.run, options.rpc)
        else:
            self.runner = ProcessRunner(
                options.run, devices=options.devices,
                runners_per_device=options.runners_per_device,
                run_timeout=options.run_timeout, load_timeout=options.build_timeout,
                source_paths=options.source_paths)

    def measure(self, task, configs) -> List[MeasureResult]:
        self.runner.check(task)  # a task the devices cannot run: one error, nothing built
        payload = task_payload(task)
        t0 = time.time()
        built = self.builder.build(payload, configs)
        t1 = time.time()
        results: List[Optional[MeasureResult]] = [None] * len(configs)
        todo = []
        for k, b in enumerate(built):
            if b.error_no == 0:
                todo.append((k, b.path_or_message, b.seconds))
            else:
                results[k] = MeasureResult.error(b.error_no, b.path_or_message, b.seconds)
        for k, res in self.runner.run(task, payload, todo).items():
            results[k] = res
        logger.debug("tvm_ext: %s: %d configs built in %.1f s, %d run in %.1f s",
                     task.workload, len(configs), t1 - t0, len(todo), time.time() - t1)
        return results  # type: ignore[return-value]

    def close(self):
        self.runner.close()
        self.builder.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
