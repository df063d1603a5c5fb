"""Measurement: build a config, run it, check it, time it. Failures are results with an error
number (AutoTVM's MeasureErrorNo), never exceptions that end a tuning run."""
from .result import MeasureErrorNo, MeasureResult
from .local import LocalMeasurer

__all__ = ["MeasureErrorNo", "MeasureResult", "LocalMeasurer"]
