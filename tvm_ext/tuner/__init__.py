"""Tuners: ask/tell objects over a ConfigSpace, one constructor shape
``Tuner(space, *, seed=None, **options)``, and the driver loop ``tune``."""
import functools

from .base import Tuner, TuneSummary, tune
from .ga import GATuner
from .grid import GridSearchTuner
from .random import RandomTuner
from .xgb import XGBTuner

TUNERS = {"random": RandomTuner, "grid": GridSearchTuner, "ga": GATuner, "xgb": XGBTuner,
          "xgb-reg": functools.partial(XGBTuner, loss="reg")}


def make_tuner(name: str, space, *, seed=None, **options) -> Tuner:
    from ..errors import TvmExtError  # noqa: PLC0415
    try:
        cls = TUNERS[name]
    except KeyError:
        raise TvmExtError(f"unknown tuner '{name}' (known: {', '.join(TUNERS)})") from None
    return cls(space, seed=seed, **options)


def warm_start(tuner: Tuner, task, records) -> int:
    """Transfer learning: give an XGB tuner the valid records of the same template for other
    workloads (their features come from their own spaces). Returns how many were used."""
    if not isinstance(tuner, XGBTuner):
        return 0
    from ..task import Task  # noqa: PLC0415
    feats, thr, groups, spaces = [], [], [], {}
    for r in records:
        if r.task_name != task.name or r.key() == task.workload.key() or not r.result.ok:
            continue
        if r.key() not in spaces:
            spaces[r.key()] = Task(r.workload, task.target, template=task.name,
                                   space_file=task.space_file).space
        space = spaces[r.key()]
        if set(space.knobs) != set(r.config):
            continue
        feats.append(space.features(r.config))
        thr.append(1.0 / r.result.mean)
        groups.append(r.key())
    if feats:
        tuner.add_transfer(feats, thr, groups)
    return len(feats)


__all__ = ["Tuner", "TuneSummary", "tune", "RandomTuner", "GridSearchTuner", "GATuner",
           "XGBTuner", "TUNERS", "make_tuner", "warm_start"]
