"""Tuners: ask/tell objects over a ConfigSpace, one constructor shape
``Tuner(space, *, seed=None, **options)``; ``transfer`` warm-starts a tuner from records of
other workloads; ``features`` reads loop-structure features from a scheduled kernel. The loop
that drives a tuner is ``tvm_ext.session``'s."""
import functools

from .base import Tuner
from .ga import GATuner
from .grid import GridSearchTuner
from .random import RandomTuner
from .topk import TopKTuner
from .transfer import warm_start
from .xgb import XGBTuner

TUNERS = {"random": RandomTuner, "grid": GridSearchTuner, "ga": GATuner, "xgb": XGBTuner,
          "xgb-reg": functools.partial(XGBTuner, loss="reg"), "topk": TopKTuner}


def make_tuner(name: str, space, *, seed=None, **options) -> Tuner:
    from ..errors import TvmExtError  # noqa: PLC0415
    try:
        cls = TUNERS[name]
    except KeyError:
        raise TvmExtError(f"unknown tuner '{name}' (known: {', '.join(TUNERS)})") from None
    if seed is not None and (not isinstance(seed, int) or seed < 0):
        raise TvmExtError(f"a tuner's seed must be an integer >= 0, got {seed!r}")
    return cls(space, seed=seed, **options)


__all__ = ["Tuner", "RandomTuner", "TopKTuner", "GridSearchTuner", "GATuner",
           "XGBTuner", "TUNERS", "make_tuner", "warm_start"]
