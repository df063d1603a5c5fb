"""Measurement options, as typed objects that travel whole: ``RunOptions`` (how one kernel is
checked and timed: what a runner, local or remote, needs) inside ``MeasureOptions`` (how a
measurer builds and runs: processes, timeouts, devices, an RPC farm)."""
from __future__ import annotations

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
