"""``PoolMeasurer``: isolated, parallel measurement, a ``Builder`` feeding a runner (a
``ProcessRunner`` on this host's devices, or an ``RPCRunner`` on a farm).
``measure(task, configs) -> [MeasureResult]``, as ``LocalMeasurer``."""
from __future__ import annotations

import logging
import os
import queue
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
        self._warmed = set()
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

    def warm(self, target, *, task=None, intrinsics: Optional[bool] = None,
             wait: bool = False) -> None:
        """Start the builders and local runners now (for ``target``'s device), while the
        caller does other work (``wait``: until they are ready), so that a tuner's first batch
        finds them ready; ``intrinsics`` (by default: where ``task`` has an mma / wmma
        template), also the tensor-core intrinsics its builds register. Once per measurer."""
        if intrinsics is None:
            intrinsics = task is not None and task.template.module.startswith(
                "tvm_ext.ops.cuda_tensorcore")
        threads = []
        if "runners" not in self._warmed and isinstance(self.runner, ProcessRunner):
            threads += self.runner.warm(target.kind.name)
        self._warmed.add("runners")
        need = "intrinsics" if intrinsics else "builders"
        if need not in self._warmed:
            threads += self.builder.warm(intrinsics)
            self._warmed.update(("builders", need))
        for t in threads if wait else ():
            t.join()

    def measure(self, task, configs) -> List[MeasureResult]:
        self.runner.check(task)  # a task the devices cannot run: one error, nothing built
        payload = task_payload(task)
        results: List[Optional[MeasureResult]] = [None] * len(configs)
        t0 = time.time()
        if isinstance(self.runner, ProcessRunner) and task.target.kind.name == "cuda":
            ran, seconds = self._build_and_run(task, payload, configs, results)
        else:  # a CPU kernel is timed on cores the builds would share; an RPC farm
            built = self.builder.build(payload, configs)
            todo = [(k, b.path_or_message, b.seconds) for k, b in enumerate(built)
                    if self._built(k, b, results)]
            seconds = [time.time() - t0, max((b.seconds for b in built), default=0.0)]
            for k, res in self.runner.run(task, payload, todo).items():
                results[k] = res
            ran = len(todo)
        logger.debug("tvm_ext: %s: %d configs built in %.1f s (the slowest in %.1f s), %d run, "
                     "all done in %.1f s", task.workload, len(configs), seconds[0], seconds[1],
                     ran, time.time() - t0)
        return results  # type: ignore[return-value]

    @staticmethod
    def _built(k, b, results) -> bool:
        """Whether config k built; if not, its error is its result."""
        if b.error_no != 0:
            results[k] = MeasureResult.error(b.error_no, b.path_or_message, b.seconds)
        return b.error_no == 0

    def _build_and_run(self, task, payload, configs, results):
        """Each config is run as soon as it is built, while the others build (a GPU's
        runners take their turns on the device; the builds keep to the CPU); returns (configs
        run, [build seconds, slowest])."""
        jobs: "queue.Queue" = queue.Queue()
        ran = []
        stopped = []  # set when the caller is interrupted: built configs are not queued

        def on_built(k, b):
            if self._built(k, b, results) and not stopped:
                ran.append(k)
                jobs.put((k, b.path_or_message, b.seconds))

        t0 = time.time()
        measured, thread = self.runner.run_queue(task, payload, jobs)
        try:
            try:
                built = self.builder.build(payload, configs, on_built=on_built)
            finally:
                jobs.put(None)
            seconds = [time.time() - t0, max((b.seconds for b in built), default=0.0)]
            thread.join()
        except BaseException:  # Ctrl-C, or a bug: no runs go on behind the caller's back
            stopped.append(True)
            self.runner.stop()
            raise
        if thread.error is not None:  # a bug of ours in a runner thread: not a config's fault
            raise thread.error
        for k, res in measured.items():
            results[k] = res
        return len(ran), seconds

    def close(self):
        self.runner.close()
        self.builder.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
