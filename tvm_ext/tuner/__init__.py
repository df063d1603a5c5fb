"""Tuners: ask/tell objects over a ConfigSpace, one constructor shape
``Tuner(space, *, seed=None, **options)``, and the driver loop ``tune``."""
from .base import Tuner, TuneSummary, tune
from .grid import GridSearchTuner
from .random import RandomTuner

TUNERS = {"random": RandomTuner, "grid": GridSearchTuner}


def make_tuner(name: str, space, *, seed=None, **options) -> Tuner:
    from ..errors import TvmExtError  # noqa: PLC0415
    try:
        cls = TUNERS[name]
    except KeyError:
        raise TvmExtError(f"unknown tuner '{name}' (known: {', '.join(TUNERS)})") from None
    return cls(space, seed=seed, **options)


__all__ = ["Tuner", "TuneSummary", "tune", "RandomTuner", "GridSearchTuner", "TUNERS",
           "make_tuner"]
