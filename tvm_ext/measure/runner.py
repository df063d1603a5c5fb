"""Runners: check a built library against numpy and time it. Two peers with one interface,
``run(task, task_payload, built) -> {k: MeasureResult}`` for ``built`` = [(k, library path,
build seconds)], each removing a library once it is measured:

- ``ProcessRunner``: worker processes on this host's devices. A kernel that kills its process
  (a CUDA misaligned/illegal address aborts the process) is RUNTIME_DEVICE, one that runs past
  ``run_timeout`` is RUN_TIMEOUT; either way the worker is restarted and tuning goes on.
- ``RPCRunner``: the servers of a TVM RPC farm (``python -m tvm.exec.rpc_tracker`` plus
  ``python -m tvm.exec.rpc_server --tracker host:port --key KEY`` on each device host). Libraries
  are uploaded to every free server under the key (one session per server, held for the
  runner's life), checked and timed there, all servers in parallel. A session that breaks is
  dropped and its config recorded as RUNTIME_DEVICE; a new session is asked for the next batch.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ..errors import TvmExtError
from ..result import MeasureErrorNo, MeasureResult, error_line
from ..codegen import use_host_cores
from .check import seeded_data
from .options import RPCConfig, RunOptions
from .timing import time_module
from .worker import Worker, drain, remove_quietly, task_in_worker

logger = logging.getLogger("tvm_ext")

Built = Tuple[int, str, float]  # (k, library path, build seconds)


def run_arrays(wl, mod, dev, inputs, check, options: RunOptions, *, tensor=None):
    """Run a loaded module once on ``inputs`` (A, B, a subgraph's epilogue inputs) and a
    NaN-poisoned output, check it (``check(output)`` -> problem or None), then time it.
    Returns ("ok", costs) or ("wrong", problem). ``tensor`` makes device tensors (local or
    remote)."""
    import tvm  # noqa: PLC0415
    tensor = tensor or (lambda arr: tvm.runtime.tensor(arr, dev))
    args = [tensor(x) for x in inputs] + [tensor(_poison(tuple(wl.out_shape), wl.final_dtype))]
    mod["main"](*args)
    dev.sync()
    if check is not None:
        problem = check(args[-1].numpy())
        if problem:
            return ("wrong", problem)
    return ("ok", time_module(mod, dev, tuple(args), timing=options.timing,
                              number=options.number, repeat=options.repeat,
                              min_repeat_ms=options.min_repeat_ms,
                              cache_flush=options.cache_flush))


@functools.lru_cache(maxsize=1)
def _poison(shape, dtype: str) -> np.ndarray:
    """The output's contents before a run (NaN, or -7 for integers; read-only, made once per
    workload: 100 MB of it took a tuner 16 ms a config)."""
    from .check import np_dtype  # noqa: PLC0415
    fill = np.nan if dtype.startswith(("float", "bf")) else -7
    arr = np.full(shape, fill, dtype=np_dtype(dtype))
    arr.flags.writeable = False
    return arr


@functools.lru_cache(maxsize=1)
def inputs_for(workload, seed: int):
    """(inputs, OutputCheck) of a workload, kept for the last one measured (in a runner process,
    or in the parent for the RPC runner)."""
    return seeded_data(workload, seed)


def check_host_can_run(workload, target, devices: Sequence[int] = (0,)) -> None:
    """Refuse (one-line TvmExtError, before anything is built) a workload that this host's
    devices cannot run for ``target``: CUDA without a visible GPU or with a device id the host
    lacks (every config would be recorded as a device error), buffers larger than the device's
    memory."""
    from ..target import describe, device_memory, gpu_visible  # noqa: PLC0415
    cuda = target.kind.name == "cuda"
    if cuda:
        if not gpu_visible():
            raise TvmExtError(f"target {describe(target)} needs a CUDA GPU to measure on "
                              "and none is visible (measure over RPC with --rpc-tracker; "
                              "--dry-run and --list-space measure nothing)")
        import tvm  # noqa: PLC0415
        missing = [d for d in devices if not tvm.cuda(d).exist]
        if missing:
            raise TvmExtError(f"CUDA device {missing[0]} does not exist on this host "
                              f"(devices asked for: {', '.join(map(str, devices))})")
    wl, memory = workload, device_memory(target)
    if memory is not None and wl.nbytes > memory:
        sizes = ", ".join(f"{name} {_size(n)}" for name, n in wl.buffer_bytes())
        where = "the GPU's memory" if cuda else "this host's RAM"
        raise TvmExtError(f"{wl}: its buffers need {_size(wl.nbytes)} ({sizes}), more than "
                          f"{where} ({_size(memory)})")


def _size(n: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


# ---- inside a runner process ----


@functools.lru_cache(maxsize=1)
def _loaded(path):
    import tvm  # noqa: PLC0415
    return tvm.runtime.load_module(path)


def load_in_worker(path):
    """Load a built library. For CUDA this is where the device code is compiled (TVM keeps CUDA
    source in the library and compiles it at load), so loads run in parallel, off the GPU."""
    _loaded(path)
    return True


def device_for(target, device_id: int = 0):
    import tvm  # noqa: PLC0415
    return tvm.cuda(device_id) if target.kind.name == "cuda" else tvm.cpu(device_id)


def run_device(target, device_id: int = 0):
    """The device a measurer runs ``target``'s kernels on; a CPU kernel on every core this
    process may use, as it will run (TVM's pool would take half the hardware threads: one
    of two single-thread cores)."""
    if target.kind.name == "llvm":
        use_host_cores()
    return device_for(target, device_id)


def run_in_worker(task_payload, path, device_id, options: RunOptions):
    """Check and time a library (loaded by load_in_worker, or now) on ``device_id``."""
    task = task_in_worker(task_payload)
    dev = run_device(task.target, device_id)
    mod = _loaded(path)
    _loaded.cache_clear()
    inputs, check = inputs_for(task.workload, options.seed)
    return run_arrays(task.workload, mod, dev, inputs, check if options.check else None,
                      options)


class ProcessRunner:
    """``runners_per_device`` worker processes per device load (compile) libraries in parallel;
    the timed part holds the device's lock, so measurements never overlap on one device."""

    def __init__(self, options: RunOptions, *, devices: Sequence[int], runners_per_device: int,
                 run_timeout: float, load_timeout: float, source_paths: Sequence[str] = ()):
        self.options = options
        self.run_timeout, self.load_timeout = run_timeout, load_timeout
        self.runners_per_device = runners_per_device
        self.devices = tuple(devices)
        self._new_workers = lambda: [(Worker(source_paths), d) for d in devices
                                     for _ in range(runners_per_device)]
        self._workers = self._new_workers()
        self._device_locks = {d: threading.Lock() for d in devices}

    def check(self, task) -> None:
        """Refuse a task these devices cannot run (see ``check_host_can_run``)."""
        check_host_can_run(task.workload, task.target, self.devices)

    def _run_one(self, worker, device_id, task_payload, path) -> MeasureResult:
        t0 = time.time()
        if self.runners_per_device > 1:
            status, value = worker.call(load_in_worker, (path,), self.load_timeout)
            if status != "ok":
                why = "timed out" if status == "timeout" else "died" if status == "died" \
                    else error_line(value, 300)
                return MeasureResult.error(MeasureErrorNo.COMPILE_DEVICE,
                                           f"loading the library {why}", time.time() - t0)
        t1 = time.time()
        with self._device_locks[device_id]:
            t2 = time.time()
            status, value = worker.call(run_in_worker,
                                        (task_payload, path, device_id, self.options),
                                        self.run_timeout)
        dt = time.time() - t0
        logger.debug("tvm_ext: loaded in %.2f s, waited %.2f s for the device, ran in %.2f s",
                     t1 - t0, t2 - t1, time.time() - t2)
        if status == "ok":
            kind, payload = value
            if kind == "ok":
                return MeasureResult(payload, 0, dt, time.time())
            return MeasureResult.error(MeasureErrorNo.WRONG_ANSWER, payload, dt)
        if status == "timeout":
            return MeasureResult.error(MeasureErrorNo.RUN_TIMEOUT,
                                       f"run exceeded {self.run_timeout:g}s; worker restarted",
                                       dt)
        if status == "died":
            return MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE,
                                       "kernel killed its worker process; worker restarted", dt)
        return MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE, error_line(value, 300), dt)

    def run(self, task, task_payload, built: List[Built]) -> Dict[int, MeasureResult]:
        results: Dict[int, MeasureResult] = {}

        def work(worker_device, job):
            worker, device_id = worker_device
            k, path, build_s = job
            res = self._run_one(worker, device_id, task_payload, path)
            res.all_cost += build_s
            results[k] = res
            remove_quietly(path)

        drain(self._workers, list(built), work, stop=self._interrupted)
        return results

    def _interrupted(self):
        """Ctrl-C during a run: as ``Builder._interrupted``."""
        old, self._workers = self._workers, self._new_workers()
        for w, _ in old:
            w.close()

    def close(self):
        for w, _ in self._workers:
            w.close()


class RPCRunner:
    def __init__(self, options: RunOptions, rpc: RPCConfig):
        # Remote timing: TVM's time_evaluator (no torch there), no cache flush.
        self.options = dataclasses.replace(options, timing="evaluator", cache_flush=False)
        self.rpc = rpc
        self._sessions: List[Any] = []

    def check(self, task) -> None:
        """Nothing to refuse here: the remote devices are known only to their servers."""

    @property
    def sessions(self) -> List[Any]:
        """The live sessions, one per server (connected at the first batch)."""
        return list(self._sessions)

    def _connect(self) -> List[Any]:
        from tvm import rpc  # noqa: PLC0415
        if self._sessions:
            return self._sessions
        cfg = self.rpc
        try:
            tracker = rpc.connect_tracker(cfg.tracker_host, cfg.tracker_port)
            free = tracker.summary().get("queue_info", {}).get(cfg.key, {}).get("free", 0)
        except Exception as err:  # noqa: BLE001
            raise TvmExtError(f"cannot reach RPC tracker {cfg.tracker_host}:"
                              f"{cfg.tracker_port}: {error_line(err)}") from None
        self._sessions = [tracker.request(cfg.key, priority=1,
                                          session_timeout=cfg.session_timeout)
                          for _ in range(max(1, free))]
        return self._sessions

    def run(self, task, task_payload, built: List[Built]) -> Dict[int, MeasureResult]:
        import tvm  # noqa: PLC0415
        sessions = self._connect()
        opts = self.options
        inputs, check = inputs_for(task.workload, opts.seed)
        results: Dict[int, MeasureResult] = {}
        broken = set()

        def work(remote, job):
            k, path, build_s = job
            t0 = time.time()
            ok = True
            try:
                remote.upload(path)
                rmod = remote.load_module(os.path.basename(path))
                dev = remote.cuda(0) if task.target.kind.name == "cuda" else remote.cpu(0)
                kind, payload = run_arrays(task.workload, rmod, dev, inputs,
                                           check if opts.check else None, opts,
                                           tensor=lambda arr: tvm.runtime.tensor(arr, dev))
                res = MeasureResult(payload, 0, 0.0, time.time()) if kind == "ok" else \
                    MeasureResult.error(MeasureErrorNo.WRONG_ANSWER, payload)
            except Exception as err:  # noqa: BLE001  (a broken session or remote crash)
                res = MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE,
                                          f"rpc: {error_line(err, 300)}")
                broken.add(id(remote))
                ok = False
            res.all_cost = time.time() - t0 + build_s
            results[k] = res
            remove_quietly(path)
            return ok

        jobs = list(built)
        drain(sessions, jobs, work)
        self._sessions = [s for s in sessions if id(s) not in broken]
        for k, path, _ in jobs:  # every session broke: the rest cannot run this batch
            results[k] = MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE,
                                             "rpc: no live session")
            remove_quietly(path)
        return results

    def close(self):
        self._sessions = []
