"""Measurement options, as typed objects that travel whole: ``RunOptions`` (how one kernel is
checked and timed: what a runner, local or remote, needs) inside ``MeasureOptions`` (how a
measurer builds and runs: processes, timeouts, devices, an RPC farm)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Tuple

from ..errors import TvmExtError


@dataclass(frozen=True)
class RunOptions:
    """``number`` runs are timed together and averaged; that is repeated ``repeat`` times
    (each repeat is one cost in the record); ``min_repeat_ms`` raises ``number`` until one
    repeat lasts that long. ``check`` compares the output with a float64 numpy reference once
    per config, on inputs drawn from ``seed``. ``timing``: see ``measure.timing``."""

    number: int = 3
    repeat: int = 3
    min_repeat_ms: int = 50
    check: bool = True
    cache_flush: bool = False
    seed: int = 0
    timing: str = "auto"

    def __post_init__(self):
        _require(self.number >= 1, "number", self.number, "must be >= 1")
        _require(self.repeat >= 1, "repeat", self.repeat, "must be >= 1")
        _require(self.min_repeat_ms >= 0, "min_repeat_ms", self.min_repeat_ms, "must be >= 0")
        _require(self.seed >= 0, "seed", self.seed, "must be >= 0")


@dataclass(frozen=True)
class RPCConfig:
    tracker_host: str
    tracker_port: int
    key: str
    session_timeout: int = 120

    @staticmethod
    def parse(tracker: str, key: str) -> "RPCConfig":
        host, _, port = tracker.rpartition(":")
        if not host or not port.isdigit():
            raise TvmExtError(f"--rpc-tracker must be host:port, got '{tracker}'")
        if not key:
            raise TvmExtError("--rpc-key is needed with --rpc-tracker")
        return RPCConfig(host, int(port), key)


@dataclass(frozen=True)
class MeasureOptions:
    """``n_parallel`` build processes (default: one per core) under ``build_timeout``;
    ``runners_per_device`` runner processes for each of ``devices`` (several load, i.e.
    compile, CUDA libraries in parallel; the timed part holds the device's lock) under
    ``run_timeout``; or the servers of an ``rpc`` farm. ``local``: build and run in this
    process instead. ``source_paths``: folders the workers put on sys.path."""

    run: RunOptions = field(default_factory=RunOptions)
    n_parallel: Optional[int] = None
    build_timeout: float = 60
    run_timeout: float = 30
    devices: Tuple[int, ...] = (0,)
    runners_per_device: int = 1
    rpc: Optional[RPCConfig] = None
    local: bool = False
    source_paths: Tuple[str, ...] = ()

    def __post_init__(self):
        if self.n_parallel is not None:
            _require(self.n_parallel >= 1, "n_parallel", self.n_parallel, "must be >= 1")
        for name in ("build_timeout", "run_timeout"):
            value = getattr(self, name)
            # NaN and infinity pass a plain "> 0" or break the watchdog's join.
            _require(value > 0 and math.isfinite(value), name, value,
                     "must be a positive number of seconds")
        _require(len(self.devices) >= 1 and all(d >= 0 for d in self.devices), "devices",
                 self.devices, "must be one or more device ids >= 0")
        _require(self.runners_per_device >= 1, "runners_per_device", self.runners_per_device,
                 "must be >= 1")
        if self.local and self.rpc is not None:
            raise TvmExtError("measure in this process (local, --local) or on an RPC farm "
                              f"(rpc, --rpc-tracker {self.rpc.tracker_host}:"
                              f"{self.rpc.tracker_port}), not both")


# Options that ``python -m tvm_ext.tune`` takes as --flags: their errors name both spellings.
_CLI_FLAGS = ("number", "repeat", "seed", "n_parallel", "build_timeout", "run_timeout",
              "devices")


def _require(ok: bool, name: str, value, why: str) -> None:
    if not ok:
        flag = f" (--{name.replace('_', '-')})" if name in _CLI_FLAGS else ""
        raise TvmExtError(f"{name}{flag} {why}, got {value!r}")
