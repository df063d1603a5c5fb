"""The builder: ``n_parallel`` worker processes instantiate configs and compile them into shared
libraries (for CUDA the device code is compiled with nvcc in the builder, not at load). An
exception is INSTANTIATION_ERROR / COMPILE_HOST / COMPILE_DEVICE; a build past
``build_timeout`` is BUILD_TIMEOUT, and its worker is killed and replaced."""
from __future__ import annotations

import os
import tempfile
import time
from typing import List, NamedTuple, Sequence

from ..result import MeasureErrorNo, error_line
from .warm import warm_in_worker
from .worker import Worker, drain, task_in_worker


class Built(NamedTuple):
    error_no: int  # 0: built
    path_or_message: str  # the library, or what went wrong
    seconds: float


def build_in_worker(task_payload, config_json, out_dir: str):
    """Instantiate + compile + export. Returns (error_no, path_or_message)."""
    from ..codegen import use_nvcc_without_nvrtc  # noqa: PLC0415
    from ..space import ConfigEntity  # noqa: PLC0415
    from ..task import InstantiationError  # noqa: PLC0415
    task = task_in_worker(task_payload)
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
    cuda = task.target.kind.name == "cuda"
    try:
        if cuda:
            use_nvcc_without_nvrtc()
        ex.export_library(path)
    except Exception as err:  # noqa: BLE001  (nvcc rejected the device code, ...)
        code = MeasureErrorNo.COMPILE_DEVICE if cuda else MeasureErrorNo.COMPILE_HOST
        return int(code), error_line(err, 300)
    return 0, path


class Builder:
    def __init__(self, n_parallel: int, build_timeout: float, source_paths: Sequence[str] = ()):
        self.build_timeout = build_timeout
        self._new_workers = lambda: [Worker(source_paths) for _ in range(n_parallel)]
        self._workers = self._new_workers()
        self._tmp = tempfile.TemporaryDirectory(prefix="tvm_ext_build_")

    @property
    def out_dir(self) -> str:
        return self._tmp.name

    def warm(self, intrinsics: bool = False) -> list:
        """Start every worker now (``Worker.warm``), with the tensor-core intrinsics where
        asked; their threads."""
        return [w.warm(warm_in_worker, (None, None, intrinsics)) for w in self._workers]

    def build(self, task_payload, configs, on_built=None) -> List[Built]:
        """Build ``configs``; ``on_built(k, built)`` is called as each one is done (from a
        pool thread), so that a runner can start on it while the others build."""
        out: List[Built] = [None] * len(configs)  # type: ignore[list-item]

        def work(worker, job):
            k, cfg = job
            t0 = time.time()
            status, value = worker.call(build_in_worker,
                                        (task_payload, cfg.to_json_dict(), self.out_dir),
                                        self.build_timeout)
            dt = time.time() - t0
            if status == "ok":
                out[k] = Built(value[0], value[1], dt)
            elif status == "timeout":
                out[k] = Built(int(MeasureErrorNo.BUILD_TIMEOUT),
                               f"build exceeded {self.build_timeout:g}s", dt)
            elif status == "died":
                out[k] = Built(int(MeasureErrorNo.COMPILE_HOST), "build worker died", dt)
            else:
                out[k] = Built(int(MeasureErrorNo.COMPILE_HOST), error_line(value, 300), dt)
            if on_built is not None:
                on_built(k, out[k])

        drain(self._workers, list(enumerate(configs)), work, stop=self._interrupted)
        return out

    def _interrupted(self):
        """Ctrl-C during a build: the workers are closed (their builds end now; a thread about
        to start one cannot), and a later build gets new ones."""
        old, self._workers = self._workers, self._new_workers()
        for w in old:
            w.close()

    def close(self):
        for w in self._workers:
            w.close()
        self._tmp.cleanup()
