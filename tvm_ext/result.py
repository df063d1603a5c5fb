"""Measurement results and AutoTVM's error numbers."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import List, Optional


class MeasureErrorNo(IntEnum):
    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_HOST = 2
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


@dataclass
class MeasureResult:
    """``costs`` are seconds per run (one entry per repeat); on error, AutoTVM wrote the error
    message in place of the costs, we keep ``costs`` numeric and the message in ``error_msg``."""

    costs: List[float]
    error_no: int = 0
    all_cost: float = 0.0
    timestamp: float = field(default_factory=time.time)
    error_msg: str = ""

    def __post_init__(self):
        # A time of zero, below zero or not finite measured nothing (a timer's resolution, a
        # broken clock): it is an error, so no log ever holds it as a kernel's time.
        if self.error_no == MeasureErrorNo.NO_ERROR and \
                not all(isinstance(c, (int, float)) and math.isfinite(c) and c > 0
                        for c in self.costs):
            self.error_msg = f"the timer gave no positive time ({self.costs})"
            self.costs, self.error_no = [], int(MeasureErrorNo.UNKNOWN_ERROR)

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR and bool(self.costs)

    @property
    def mean(self) -> float:
        return sum(self.costs) / len(self.costs) if self.ok else float("inf")

    def gflops(self, flop: float) -> float:
        return flop / self.mean / 1e9 if self.ok else 0.0

    @staticmethod
    def error(error_no: int, msg: str, all_cost: float = 0.0) -> "MeasureResult":
        return MeasureResult([], int(error_no), all_cost, time.time(), msg[:500])


def error_line(err: BaseException, limit: Optional[int] = None) -> str:
    """The line of an exception's message that names the problem: its last non-empty line,
    before the kernel source that TVM appends to a CUDA launch error."""
    text = str(err).split("// func_name=")[0].split("// CUDA Source")[0]
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else repr(err)
