"""Measurement: build a config, run it, check it, time it. Failures are results with an error
number (AutoTVM's MeasureErrorNo), never exceptions that end a tuning run.

- ``check``: the numerics oracle; ``timing``: how a kernel is timed;
- ``options``: RunOptions / MeasureOptions / RPCConfig, the typed options that travel;
- ``worker``: worker processes and the one work-queue loop; ``builder``: the build pool;
- ``runner``: ProcessRunner and RPCRunner (peers); ``pool``: PoolMeasurer = builder + runner;
- ``local``: LocalMeasurer (in-process); ``replay``: results from a log.
"""
from .local import LocalMeasurer
from .options import MeasureOptions, RPCConfig, RunOptions
from .pool import PoolMeasurer

__all__ = ["LocalMeasurer", "MeasureOptions", "PoolMeasurer", "RPCConfig", "RunOptions"]
