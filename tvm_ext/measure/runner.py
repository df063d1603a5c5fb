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
import queue
import threading
import time
from typing import Any, Dict, List, Sequence, Tuple

from ..errors import TvmExtError
from ..result import MeasureErrorNo, MeasureResult, error_line
from ..codegen import use_host_cores
from .check import seeded_data
from .device_args import DeviceArgs, inspector_for
from .options import RPCConfig, RunOptions
from .timing import time_module
from .warm import warm_in_worker
from .worker import Worker, drain, drain_queue, remove_quietly, task_in_worker

logger = logging.getLogger("tvm_ext")

Built = Tuple[int, str, float]  # (k, library path, build seconds)


def run_arrays(mod, data: DeviceArgs, check: bool, options: RunOptions):
    """Run a loaded module once on ``data``'s arguments (A, B, a subgraph's epilogue inputs,
    the output reset to its poison), check the output (``check``), then time it. Returns
    ("ok", costs) or ("wrong", problem)."""
    data.reset()
    mod["main"](*data.args)
    data.dev.sync()
    if check:
        problem = data.problem()
        if problem:
            return ("wrong", problem)
    return ("ok", time_module(mod, data.dev, tuple(data.args), timing=options.timing,
                              number=options.number, repeat=options.repeat,
                              min_repeat_ms=options.min_repeat_ms,
                              cache_flush=options.cache_flush))


#: The arguments of the last workload measured in this process: {key: DeviceArgs}.
_kept: Dict[tuple, DeviceArgs] = {}


def kept_args(task, dev, seed: int, *, fresh: bool = False, sharing: int = 1) -> DeviceArgs:
    """The task's arguments on ``dev``, made once per workload (and seed, device) and kept
    until another is measured; ``fresh``: made again. ``sharing`` processes may keep theirs on
    the same GPU (a ProcessRunner's runners): where their copies would not fit in 90% of its
    memory, the arguments are made for this run only, as large as before."""
    from ..target import device_memory  # noqa: PLC0415
    key = (task.workload, seed, dev.dlpack_device_type(), dev.index, str(task.target))
    if fresh or key not in _kept:
        _kept.clear()  # the last workload's buffers go before the next one's come
        inputs, check = inputs_for(task.workload, seed)
        cuda = task.target.kind.name == "cuda"
        memory = device_memory(task.target) if cuda else None  # a CPU resets from the host
        share = int(memory * 0.9) // max(1, sharing) if memory is not None else None
        data = DeviceArgs(task.workload, dev, inputs, check,
                          target=task.target if cuda else None,
                          free_bytes=share - task.workload.nbytes if share else None)
        if share is not None and task.workload.nbytes > share:
            return data
        _kept[key] = data
    return _kept[key]


def release_kept() -> None:
    """Free the arguments kept in this process."""
    _kept.clear()


def run_checked(task, mod, dev, options: RunOptions, *, sharing: int = 1):
    """``run_arrays`` on the task's arguments kept on ``dev`` between configs (see
    ``DeviceArgs``, ``kept_args``). A wrong output whose kept inputs (or poison) an earlier
    kernel may have overwritten is run and checked once more on fresh buffers; a wrong output
    on intact ones is the kernel's (run once: a racy kernel gets no second chance). No
    buffers are kept after a wrong output."""
    data = kept_args(task, dev, options.seed, sharing=sharing)
    result = run_arrays(mod, data, options.check, options)
    if result[0] == "wrong":
        inputs, _ = inputs_for(task.workload, options.seed)
        if "poison" in result[1] or not data.intact(inputs):
            result = run_arrays(mod, kept_args(task, dev, options.seed, fresh=True,
                                               sharing=sharing), options.check, options)
        _kept.clear()
    return result


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


def load_in_worker(path, task_payload=None, seed: int = 0):
    """Load a built library and prepare, for a new workload, what needs no device: its inputs,
    the reference values of its check and the inspection kernel (see ``DeviceArgs``). Runners
    do this in parallel, before they take the device's lock: on an H100 host each runner's
    first config of a workload had taken 2.5-5.5 s with them under the lock, the others
    0.05-0.13 s (dense 8192^3 f16, attention bmm, bmm 24x16384x512x64)."""
    _loaded(path)
    if task_payload is not None:
        task = task_in_worker(task_payload)
        inputs, check = inputs_for(task.workload, seed)
        inspector_for(task.workload, check, task.target)
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


def run_in_worker(task_payload, path, device_id, options: RunOptions, sharing: int = 1):
    """Check and time a library (loaded by load_in_worker, or now) on ``device_id``, which
    ``sharing`` runner processes use."""
    task = task_in_worker(task_payload)
    dev = run_device(task.target, device_id)
    mod = _loaded(path)
    _loaded.cache_clear()
    return run_checked(task, mod, dev, options, sharing=sharing)


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

    def warm(self, device_type: str) -> list:
        """Start every worker now, with its device's context (``Worker.warm``); their
        threads."""
        return [w.warm(warm_in_worker, (device_type, d)) for w, d in self._workers]

    def _run_one(self, worker, device_id, task_payload, path) -> MeasureResult:
        t0 = time.time()
        if self.runners_per_device > 1:
            status, value = worker.call(load_in_worker, (path, task_payload, self.options.seed),
                                        self.load_timeout)
            if status != "ok":
                why = "timed out" if status == "timeout" else "died" if status == "died" \
                    else error_line(value, 300)
                return MeasureResult.error(MeasureErrorNo.COMPILE_DEVICE,
                                           f"loading the library {why}", time.time() - t0)
        t1 = time.time()
        with self._device_locks[device_id]:
            t2 = time.time()
            status, value = worker.call(run_in_worker,
                                        (task_payload, path, device_id, self.options,
                                         self.runners_per_device), self.run_timeout)
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
        jobs: "queue.Queue" = queue.Queue()
        for job in [*built, None]:
            jobs.put(job)
        results, thread = self.run_queue(task, task_payload, jobs)
        try:
            thread.join()
        except (KeyboardInterrupt, SystemExit):
            self.stop()
            raise
        if thread.error is not None:
            raise thread.error
        return results

    def run_queue(self, task, task_payload, jobs: "queue.Queue"):
        """Run the libraries put in ``jobs`` as (k, path, build seconds), None after the last,
        as they come: returns ({k: MeasureResult}, filled as they are measured; the thread
        to join). ``stop()`` ends it early."""
        results: Dict[int, MeasureResult] = {}

        def work(worker_device, job):
            worker, device_id = worker_device
            k, path, build_s = job
            res = self._run_one(worker, device_id, task_payload, path)
            res.all_cost += build_s
            results[k] = res
            remove_quietly(path)

        return results, drain_queue(self._workers, jobs, work)

    def stop(self):
        """End the runs in flight (their workers are killed) and start new workers: Ctrl-C
        during a run, here or in the pool's pipelined build-and-run (as
        ``Builder._interrupted``)."""
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
                kind, payload = run_arrays(rmod, DeviceArgs(task.workload, dev, inputs, check),
                                           opts.check, opts)
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
