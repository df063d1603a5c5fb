"""Measurement worker processes, and what runs inside them.

A ``Worker`` is a ``python -m tvm.exec.popen_worker`` process with a watchdog in the parent: a
call that does not answer within its timeout gets its process killed (a kernel stuck in C code
cannot be stopped from inside). Workers import TVM (about 1 s) and tvm_ext, never
``tvm.s_tir.tensor_intrin`` unless a template needs it. The folders they need on ``sys.path``
are given to the child at its start; the parent's environment is never changed.

``drain`` is the one work-queue loop of the builder, the process runner and the RPC runner.
"""
from __future__ import annotations

import functools
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Sequence, Tuple

# The repository root (tvm_ext's parent), for workers of an uninstalled checkout.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Worker:
    def __init__(self, source_paths: Sequence[str] = ()):
        self._paths = list(dict.fromkeys([_ROOT, *source_paths]))
        self._w = None

    def _start(self):
        from tvm.support.popen_pool import PopenWorker  # noqa: PLC0415
        # The child's first call puts our folders at the front of its sys.path (``exec`` is a
        # builtin: it unpickles before tvm_ext is importable there).
        code = f"import sys; sys.path[:0] = [p for p in {self._paths!r} if p not in sys.path]"
        self._w = PopenWorker(initializer=exec, initargs=(code,))
        self._w.send(_noop, ())
        self._w.recv()

    def call(self, fn, args, timeout: float) -> Tuple[str, Any]:
        """('ok', value) | ('error', exception) | ('timeout', None) | ('died', None)"""
        if self._w is None:
            self._start()
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


def drain(workers: Sequence[Any], jobs: List[Any], work: Callable[[Any, Any], bool]) -> None:
    """Every worker takes jobs from the front of ``jobs`` until it is empty, one thread per
    worker, calling ``work(worker, job)``; a worker whose ``work`` returns False stops taking
    jobs (a broken RPC session). Jobs no worker took stay in ``jobs``."""
    lock = threading.Lock()

    def loop(worker):
        while True:
            with lock:
                if not jobs:
                    return
                job = jobs.pop(0)
            if work(worker, job) is False:
                return

    with ThreadPoolExecutor(len(workers)) as ex:
        list(ex.map(loop, workers))


def remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


# ---- inside the workers (module-level functions: workers import them by name) ----


def task_payload(task) -> Dict[str, Any]:
    """A task as plain data, rebuilt in a worker by ``task_in_worker``. A template defined
    outside tvm_ext names its module, which the worker imports to register it."""
    module = task.template.module
    return {"op": task.workload.op, "args": task.workload.to_args(),
            "target": str(task.target), "template": task.name, "space_file": task.space_file,
            "module": None if module.startswith("tvm_ext.") else module,
            "paths": list(task.template.source_paths)}


def task_in_worker(payload: Dict[str, Any]):
    return _task(json.dumps(payload, sort_keys=True))


@functools.lru_cache(maxsize=16)
def _task(payload_json: str):
    import importlib  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from ..task import Task  # noqa: PLC0415
    from ..workload import Workload  # noqa: PLC0415
    payload = json.loads(payload_json)
    for p in payload.get("paths", []):
        if p not in sys.path:
            sys.path.insert(0, p)
    if payload.get("module"):
        importlib.import_module(payload["module"])
    wl = Workload.from_args(payload["op"], payload["args"])
    return Task(wl, json.loads(payload["target"]), template=payload["template"],
                space_file=payload.get("space_file"))
