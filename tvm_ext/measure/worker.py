"""Measurement worker processes, and what runs inside them.

A ``Worker`` is a ``python -m tvm.exec.popen_worker`` process with a watchdog in the parent: a
call that does not answer within its timeout gets its process killed (a kernel stuck in C code
cannot be stopped from inside). Workers import TVM (about 1 s) and tvm_ext, never
``tvm.s_tir.tensor_intrin`` unless a template needs it. The folders they need on ``sys.path``
are given to the child at its start; the parent's environment is never changed.

``drain`` is the one work-queue loop of the builder, the process runner and the RPC runner.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# The repository root (tvm_ext's parent), for workers of an uninstalled checkout.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Worker:
    def __init__(self, source_paths: Sequence[str] = ()):
        self._paths = list(dict.fromkeys([_ROOT, *source_paths]))
        self._w = None
        # Held while a process is created or killed, so that an interrupt (``close`` from the
        # main thread) never misses a process that a pool thread is starting.
        self._lock = threading.Lock()
        # Held through a call: a warm-up call (``warm``) and the first job wait for each other.
        self._calling = threading.Lock()
        self._closed = False

    def _start(self):
        from tvm.support.popen_pool import PopenWorker  # noqa: PLC0415
        # The first call puts our folders at the front of the child's sys.path (``exec`` is a
        # builtin: it unpickles before tvm_ext is importable there). It is sent as a plain
        # call, not as PopenWorker's initializer, whose send would wait for the answer.
        code = f"import sys; sys.path[:0] = [p for p in {self._paths!r} if p not in sys.path]"
        with self._lock:
            if self._closed:
                raise ChildProcessError("worker closed")
            w = PopenWorker()
            with _sigint_blocked():
                w.send(exec, (code,))  # starts the process
            self._w = w
        w.recv()

    def call(self, fn, args, timeout: float) -> Tuple[str, Any]:
        """('ok', value) | ('error', exception) | ('timeout', None) | ('died', None)"""
        with self._calling:
            return self._call(fn, args, timeout)

    def warm(self, fn, args=(), timeout: float = 120.0) -> threading.Thread:
        """Start the process now, in a thread, and call ``fn(*args)`` there (imports that its
        calls need, ``measure.warm``): a tuner's first batch then finds it ready. A warm-up
        that fails (the worker closed meanwhile: an interrupt) costs only the next call its
        start."""
        def quietly():
            try:
                self.call(fn, tuple(args), timeout)
            except BaseException:  # noqa: BLE001  (nothing to report: see above)
                pass

        t = threading.Thread(target=quietly, daemon=True)
        t.start()
        return t

    def _call(self, fn, args, timeout: float) -> Tuple[str, Any]:
        try:
            if self._w is None:
                self._start()
        except ChildProcessError:  # died while starting, or closed (an interrupt)
            self.kill()
            return ("died", None)
        w = self._w
        if w is None:  # killed meanwhile (an interrupt)
            return ("died", None)
        w.send(fn, args, timeout=timeout)
        box: Dict[str, Any] = {}

        def wait():
            try:
                box["value"] = ("ok", w.recv())
            except ChildProcessError:
                box["value"] = ("died", None)
            except TimeoutError:
                box["value"] = ("timeout", None)
            except Exception as err:  # noqa: BLE001  (the call's own exception)
                box["value"] = ("error", err)

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
        """End the process (and its children); the next call starts a new one."""
        with self._lock:
            w, self._w = self._w, None
        if w is None:
            return
        # The process dies first: a pool thread blocked reading its pipe then sees the end of
        # the pipe at once (closing a pipe that another thread reads waits for that read).
        proc = getattr(w, "_proc", None)  # PopenWorker keeps its subprocess.Popen there
        if proc is not None:
            _kill_tree(proc.pid)
        try:
            w.kill()  # closes the pipes, reaps the process
        except Exception:  # noqa: BLE001  (a thread that read the end of the pipe did it)
            pass

    def close(self):
        """Kill the process and start none again (the owner's close, or an interrupt)."""
        with self._lock:
            self._closed = True
        self.kill()


@contextlib.contextmanager
def _sigint_blocked():
    """Block SIGINT in this thread while a worker process is created: the child inherits the
    mask, so Ctrl-C at the terminal (sent to the whole process group) reaches only the parent,
    which kills its workers; a child importing TVM would otherwise print its traceback."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no masks
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and its descendants and reap them (at most 2 s), so that nothing they
    write (a library in the build folder) outlives the kill."""
    import psutil  # noqa: PLC0415  (TVM's popen_pool needs it too)
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=2.0)


def drain(workers: Sequence[Any], jobs: List[Any], work: Callable[[Any, Any], bool], *,
          stop: Optional[Callable[[], None]] = None) -> None:
    """Every worker takes jobs from the front of ``jobs`` until it is empty, one thread per
    worker, calling ``work(worker, job)``; a worker whose ``work`` returns False stops taking
    jobs (a broken RPC session). Jobs no worker took stay in ``jobs``.

    An interrupt (Ctrl-C: KeyboardInterrupt in the calling thread) drops the jobs not taken,
    calls ``stop()`` (which kills the workers: their calls in flight return at once), and is
    raised again without waiting for the threads."""
    lock = threading.Lock()

    def loop(worker):
        while True:
            with lock:
                if not jobs:
                    return
                job = jobs.pop(0)
            if work(worker, job) is False:
                return

    ex = ThreadPoolExecutor(len(workers))
    interrupted = False
    try:
        list(ex.map(loop, workers))
    except (KeyboardInterrupt, SystemExit):
        interrupted = True
        with lock:
            jobs.clear()
        if stop is not None:
            stop()
        raise
    finally:
        # Interrupted: the threads end by themselves once their workers are dead; waiting
        # for them could wait for a watchdog (run timeout + 5 s).
        ex.shutdown(wait=not interrupted, cancel_futures=interrupted)


def drain_queue(workers: Sequence[Any], jobs: "queue.Queue", work: Callable[[Any, Any], Any]
                ) -> threading.Thread:
    """``drain`` for jobs that arrive while the workers run: every worker takes jobs from
    ``jobs`` until it meets None (put after the last job), one thread per worker, in a
    thread that this returns (join it; its ``error`` is what ``work`` raised, or None).
    Stopping it is the caller's job (killing the workers makes their calls return at once)."""
    def loop(worker):
        while True:
            job = jobs.get()
            if job is None:
                jobs.put(None)  # for the other workers
                return
            work(worker, job)

    def run():
        try:
            with ThreadPoolExecutor(len(workers)) as ex:
                list(ex.map(loop, workers))
        except BaseException as err:  # noqa: BLE001  (handed to the joiner)
            t.error = err

    t = threading.Thread(target=run, daemon=True)
    t.error = None
    t.start()
    return t


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
            "paths": list(task.template.source_paths),
            # a shape family's task builds the kernel of symbolic extents (a kernel template's
            # guarded kernel), under its space's rules
            "symbolic": bool(task.symbolic), "granules": dict(task.granules),
            # ``tune --set``: the same narrowed space, so that config indices mean the same
            "narrow": dict(task.narrow)}


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
                space_file=payload.get("space_file"), symbolic=payload.get("symbolic", False),
                granules=payload.get("granules"), narrow=payload.get("narrow"))
