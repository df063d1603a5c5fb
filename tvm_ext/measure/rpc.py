"""Measurement on a TVM RPC device farm (``python -m tvm.exec.rpc_tracker`` plus
``python -m tvm.exec.rpc_server --tracker host:port --key KEY`` on each device host).

Libraries are built on this host by the pool builder, uploaded to every free server under the key
(one session per server, held for the measurer's life), checked against numpy and timed there,
all servers in parallel. A session that breaks is dropped and its config recorded as
RUNTIME_DEVICE; a new session is requested for the next batch.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from .local import run_arrays
from .result import MeasureErrorNo, MeasureResult, error_line


def _sessions(measurer):
    from tvm import rpc  # noqa: PLC0415
    cfg = measurer.rpc
    if measurer._rpc_sessions:
        return measurer._rpc_sessions
    try:
        tracker = rpc.connect_tracker(cfg.tracker_host, cfg.tracker_port)
        free = tracker.summary().get("queue_info", {}).get(cfg.key, {}).get("free", 0)
    except Exception as err:  # noqa: BLE001
        from ..errors import TvmExtError  # noqa: PLC0415
        raise TvmExtError(f"cannot reach RPC tracker {cfg.tracker_host}:{cfg.tracker_port}: "
                          f"{str(err).splitlines()[-1] if str(err) else err!r}") from None
    sessions = []
    for _ in range(max(1, free)):
        sessions.append(tracker.request(cfg.key, priority=1,
                                        session_timeout=cfg.session_timeout))
    measurer._rpc_sessions = sessions
    return sessions


def rpc_drain(measurer, task, todo, results, lock):
    from . import pool  # noqa: PLC0415
    import tvm  # noqa: PLC0415
    sessions = _sessions(measurer)
    a, b, ref = pool._inputs(task, measurer.opts["seed"])
    opts = measurer.opts
    broken = set()

    def drain(k_sess):
        remote = sessions[k_sess]
        while True:
            with lock:
                if not todo or k_sess in broken:
                    return
                k, path, build_s = todo.pop(0)
            t0 = time.time()
            try:
                remote.upload(path)
                rmod = remote.load_module(os.path.basename(path))
                dev = remote.cuda(0) if task.target.kind.name == "cuda" else remote.cpu(0)
                kind, payload = run_arrays(
                    task, rmod, dev, a, b, ref if opts["check"] else None,
                    number=opts["number"], repeat=opts["repeat"],
                    min_repeat_ms=opts["min_repeat_ms"], cache_flush=False,
                    tensor=lambda arr: tvm.runtime.tensor(arr, dev))
                res = MeasureResult(payload, 0, 0.0, time.time()) if kind == "ok" else \
                    MeasureResult.error(MeasureErrorNo.WRONG_ANSWER, payload)
            except Exception as err:  # noqa: BLE001  (a broken session or remote crash)
                res = MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE,
                                          f"rpc: {error_line(err, 300)}")
                with lock:
                    broken.add(k_sess)
            res.all_cost = time.time() - t0 + build_s
            results[k] = res
            pool._remove(path)

    with ThreadPoolExecutor(len(sessions)) as ex:
        list(ex.map(drain, range(len(sessions))))
    if broken:
        measurer._rpc_sessions = [s for i, s in enumerate(sessions) if i not in broken]
    for k, path, _ in todo:  # every session broke: the rest cannot run this batch
        results[k] = MeasureResult.error(MeasureErrorNo.RUNTIME_DEVICE, "rpc: no live session")
        pool._remove(path)
    todo.clear()
