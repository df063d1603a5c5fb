"""Isolated, parallel measurement: builds in a pool of worker processes, runs in one worker
process per device, each call under a watchdog.

- **Builder**: ``n_parallel`` processes instantiate a config and compile it into a shared
  library (for CUDA the device code is compiled with nvcc in the builder, not at load). An
  exception is INSTANTIATION_ERROR / COMPILE_HOST / COMPILE_DEVICE, a build past
  ``build_timeout`` is BUILD_TIMEOUT: the worker is killed and replaced.
- **Runner**: one process per device (``devices``) loads the library, checks the output against a
  float64 numpy reference on seeded random inputs (WRONG_ANSWER) and times it. A kernel that
  kills its process (a CUDA misaligned/illegal address aborts the process) is RUNTIME_DEVICE, one
  that runs past ``run_timeout`` is RUN_TIMEOUT; either way the worker is restarted and tuning
  goes on.
- **RPC**: with ``rpc=RPCConfig(...)`` the libraries are uploaded to TVM RPC servers registered
  with a tracker under one key, one session per server, all used in parallel.

Workers are plain ``python -m tvm.exec.popen_worker`` processes: they import TVM (about 1 s) and
tvm_ext, never ``tvm.s_tir.tensor_intrin`` unless a template needs it.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .local import run_arrays, seeded_data
from .result import MeasureErrorNo, MeasureResult, error_line

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Worker:
    """A PopenWorker with a watchdog in the parent: a call that does not answer within its
    timeout gets its process killed (a kernel stuck in C code cannot be stopped from inside)."""

    def __init__(self, env: Optional[Dict[str, str]] = None):
        from tvm.support.popen_pool import PopenWorker  # noqa: PLC0415
        self._env = env or {}
        self._cls = PopenWorker
        self._w = None

    def call(self, fn, args, timeout: float) -> Tuple[str, Any]:
        """('ok', value) | ('error', exception) | ('timeout', None) | ('died', None)"""
        if self._w is None:
            saved = {k: os.environ.get(k) for k in self._env}
            os.environ.update(self._env)  # the worker inherits the environment at start
            try:
                self._w = self._cls()
                self._w.send(_noop, ())
                self._w.recv()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        box: Dict[str, Any] = {}

        def wait():
            try:
                box["value"] = ("ok", self._w.recv())
            except ChildProcessError:
                box["value"] = ("died", None)
            except TimeoutError:
                box["value"] = ("timeout", None)
            except Exception as err:  # noqa: BLE001  (the call's own exception)
                box["value"] = ("error", err)

        self._w.send(fn, args, timeout=timeout)
        t = threading.Thread(target=wait, daemon=True)
        t.start()
        t.join(timeout + 5.0)
        if t.is_alive():  # stuck without the child's own timer firing: kill it
            self.kill()
            t.join(5.0)
            return ("timeout", None)
        status = box.get("value", ("died", None))
        if status[0] in ("died", "timeout"):
            self.kill()
        return status

    def kill(self):
        if self._w is not None:
            try:
                self._w.kill()
            except Exception:  # noqa: BLE001
                pass
            self._w = None


def _noop():
    return None


def _worker_env(extra_paths: Sequence[str] = ()) -> Dict[str, str]:
    paths = [_ROOT, *extra_paths, *[p for p in os.environ.get("PYTHONPATH", "").split(":")
                                    if p]]
    env = {"PYTHONPATH": ":".join(dict.fromkeys(paths))}
    return env


# ---------------------------------------------------------------------------------------------
# work done inside the workers (module-level functions: workers import them by name)

_TASKS: Dict[str, Any] = {}
_DATA: Dict[Any, Any] = {}


def _task_from(spec: Dict[str, Any]):
    key = json.dumps(spec, sort_keys=True)
    if key not in _TASKS:
        import importlib  # noqa: PLC0415
        for p in spec.get("paths", []):
            if p not in sys.path:
                sys.path.insert(0, p)
        for m in spec.get("modules", []):
            importlib.import_module(m)
        from ..task import Task  # noqa: PLC0415
        from ..workload import Workload  # noqa: PLC0415
        wl = Workload.from_args(spec["op"], spec["args"])
        _TASKS[key] = Task(wl, json.loads(spec["target"]), template=spec["template"],
                           space_file=spec.get("space_file"))
    return _TASKS[key]


def build_in_worker(spec: Dict[str, Any], config_json: Dict[str, Any], out_dir: str):
    """Instantiate + compile + export. Returns (error_no, path_or_message)."""
    from ..space import ConfigEntity  # noqa: PLC0415
    from ..task import InstantiationError, ensure_cuda_compiler  # noqa: PLC0415
    task = _task_from(spec)
    config = ConfigEntity.from_json_dict(config_json)
    try:
        mod = task.instantiate(config)
    except InstantiationError as err:
        return int(MeasureErrorNo.INSTANTIATION_ERROR), str(err)
    try:
        ex = task.compile(mod)
    except Exception as err:  # noqa: BLE001
        return int(MeasureErrorNo.COMPILE_HOST), error_line(err, 300)
    fd, path = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        if task.target.kind.name == "cuda":
            ensure_cuda_compiler()
        ex.export_library(path)
    except Exception as err:  # noqa: BLE001  (nvcc rejected the device code, ...)
        code = MeasureErrorNo.COMPILE_DEVICE if task.target.kind.name == "cuda" else \
            MeasureErrorNo.COMPILE_HOST
        return int(code), error_line(err, 300)
    return 0, path


def _inputs(task, seed):
    key = (task.workload.key(), seed)
    if key not in _DATA:
        _DATA.clear()
        _DATA[key] = seeded_data(task, seed)
    return _DATA[key]


_LOADED: Dict[str, Any] = {}


def load_in_worker(path):
    """Load a built library. For CUDA this is where the device code is compiled (TVM keeps CUDA
    source in the library and compiles it at load), so loads run in parallel, off the GPU."""
    import tvm  # noqa: PLC0415
    _LOADED.clear()
    _LOADED[path] = tvm.runtime.load_module(path)
    return True


def run_in_worker(spec, path, device_id, opts):
    """Check and time a library (loaded by load_in_worker, or now) on local device
    ``device_id``."""
    import tvm  # noqa: PLC0415
    task = _task_from(spec)
    dev = tvm.cuda(device_id) if task.target.kind.name == "cuda" else tvm.cpu(device_id)
    mod = _LOADED.pop(path, None) or tvm.runtime.load_module(path)
    a, b, ref = _inputs(task, opts["seed"])
    return run_arrays(task, mod, dev, a, b, ref if opts["check"] else None,
                      number=opts["number"], repeat=opts["repeat"],
                      min_repeat_ms=opts["min_repeat_ms"], cache_flush=opts["cache_flush"],
                      timing=opts["timing"])




# ---------------------------------------------------------------------------------------------


@dataclass
class RPCConfig:
    tracker_host: str
    tracker_port: int
    key: str
    session_timeout: int = 120

    @staticmethod
    def parse(tracker: str, key: str) -> "RPCConfig":
        from ..errors import TvmExtError  # noqa: PLC0415
        host, _, port = tracker.rpartition(":")
        if not host or not port.isdigit():
            raise TvmExtError(f"--rpc-tracker must be host:port, got '{tracker}'")
        if not key:
            raise TvmExtError("--rpc-key is needed with --rpc-tracker")
        return RPCConfig(host, int(port), key)


class PoolMeasurer:
    """Drop-in for LocalMeasurer: ``measure(task, configs) -> [MeasureResult]``."""

    def __init__(self, *, n_parallel: Optional[int] = None, build_timeout: float = 60,
                 run_timeout: float = 30, devices: Sequence[int] = (0,),
                 rpc: Optional[RPCConfig] = None, number: int = 3, repeat: int = 3,
                 min_repeat_ms: int = 50, check: bool = True, cache_flush: bool = False,
                 seed: int = 0, extra_paths: Sequence[str] = (), runners_per_device: int = 1,
                 timing: str = "auto"):
        self.n_parallel = n_parallel or max(1, (os.cpu_count() or 2))
        self.build_timeout, self.run_timeout = build_timeout, run_timeout
        self.devices = list(devices)
        self.rpc = rpc
        self.opts = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms,
                     "check": check, "cache_flush": cache_flush, "seed": seed,
                     "timing": "evaluator" if rpc else timing}
        self.env = _worker_env(extra_paths)
        self._builders = [_Worker(self.env) for _ in range(self.n_parallel)]
        # Several runner processes per device load (compile) libraries in parallel; the
        # timed part holds the device's lock, so measurements never overlap on one device.
        self.runners_per_device = runners_per_device
        self._runners = [(_Worker(self.env), d) for d in self.devices
                         for _ in range(runners_per_device)]
        self._device_locks = {d: threading.Lock() for d in self.devices}
        self._tmp = tempfile.TemporaryDirectory(prefix="tvm_ext_build_")
        self._rpc_sessions: List[Any] = []

    def close(self):
        for w in self._builders + [w for w, _ in self._runners]:
            w.kill()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def spec(task) -> Dict[str, Any]:
        mod = task.template.compute.__module__
        return {"op": task.workload.op, "args": task.workload.to_args(),
                "target": str(task.target),
                "template": task.name, "space_file": task.space_file,
                "modules": [mod] if not mod.startswith("tvm_ext.") else [],
                "paths": list(getattr(task.template, "extra", {}).get("paths", []))}

    # ---- build ----
    def _build_all(self, spec, configs) -> List[Tuple[int, str, float]]:
        jobs = list(enumerate(configs))
        out: List[Optional[Tuple[int, str, float]]] = [None] * len(configs)
        lock = threading.Lock()

        def drain(worker):
            while True:
                with lock:
                    if not jobs:
                        return
                    k, cfg = jobs.pop(0)
                t0 = time.time()
                status, value = worker.call(build_in_worker,
                                            (spec, cfg.to_json_dict(), self._tmp.name),
                                            self.build_timeout)
                dt = time.time() - t0
                if status == "ok":
                    out[k] = (value[0], value[1], dt)
                elif status == "timeout":
                    out[k] = (int(MeasureErrorNo.BUILD_TIMEOUT),
                              f"build exceeded {self.build_timeout:g}s", dt)
                elif status == "died":
                    out[k] = (int(MeasureErrorNo.COMPILE_HOST), "build worker died", dt)
                else:
                    out[k] = (int(MeasureErrorNo.COMPILE_HOST), error_line(value, 300), dt)

        with ThreadPoolExecutor(len(self._builders)) as ex:
            list(ex.map(drain, self._builders))
        return out  # type: ignore[return-value]

    # ---- run ----
    def _run_local(self, worker, device_id, spec, path) -> MeasureResult:
        t0 = time.time()
        if self.runners_per_device > 1:
            status, value = worker.call(load_in_worker, (path,), self.build_timeout)
            if status != "ok":
                why = "timed out" if status == "timeout" else "died" if status == "died" \
                    else error_line(value, 300)
                return MeasureResult.error(MeasureErrorNo.COMPILE_DEVICE,
                                           f"loading the library {why}", time.time() - t0)
        with self._device_locks[device_id]:
            status, value = worker.call(run_in_worker, (spec, path, device_id, self.opts),
                                        self.run_timeout)
        dt = time.time() - t0
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

    def measure(self, task, configs) -> List[MeasureResult]:
        spec = self.spec(task)
        built = self._build_all(spec, configs)
        results: List[Optional[MeasureResult]] = [None] * len(configs)
        todo = []
        for k, (code, payload, dt) in enumerate(built):
            if code == 0:
                todo.append((k, payload, dt))
            else:
                results[k] = MeasureResult.error(code, payload, dt)
        lock = threading.Lock()

        if self.rpc is not None:
            from .rpc import rpc_drain  # noqa: PLC0415
            rpc_drain(self, task, todo, results, lock)
        else:
            def drain(idx):
                worker, device_id = self._runners[idx]
                while True:
                    with lock:
                        if not todo:
                            return
                        k, path, build_s = todo.pop(0)
                    res = self._run_local(worker, device_id, spec, path)
                    res.all_cost += build_s
                    results[k] = res
                    _remove(path)

            with ThreadPoolExecutor(len(self._runners)) as ex:
                list(ex.map(drain, range(len(self._runners))))
        return results  # type: ignore[return-value]


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass
