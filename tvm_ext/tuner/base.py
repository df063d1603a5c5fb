"""The tuner contract (ask / tell) and the driver loop.

A tuner proposes indices of its space (``ask``), only valid ones it has not proposed or been
told about before, and learns from results (``tell``). Everything random comes from the tuner's
own ``numpy.random.Generator(seed)``: same seed + same prior records = same run.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import numpy as np

from ..space import ConfigSpace

logger = logging.getLogger("tvm_ext")


class Tuner:
    def __init__(self, space: ConfigSpace, *, seed: Optional[int] = None, **options):
        if options:
            raise TypeError(f"{type(self).__name__} got unknown options: {', '.join(options)}")
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.visited = set()
        self.best_cost = float("inf")
        self.best_index: Optional[int] = None

    def ask(self, n: int) -> List[int]:
        """Up to n new valid indices (fewer when the space is exhausted)."""
        raise NotImplementedError

    def tell(self, indices: Sequence[int], costs: Sequence[float]) -> None:
        """Results of measured indices; cost = seconds (inf for a failed config)."""
        for i, c in zip(indices, costs):
            self.visited.add(int(i))
            if c < self.best_cost:
                self.best_cost, self.best_index = c, int(i)

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def load_history(self, indices: Sequence[int], costs: Sequence[float]) -> None:
        """Records measured earlier (resume, transfer): never proposed again."""
        self.tell(indices, costs)

    def random_valid(self, n: int, taken: set) -> List[int]:
        """Up to n random valid indices, neither visited nor in ``taken`` (which grows)."""
        out = self.space.random_valid(self.rng, n, skip=(self.visited, taken))
        taken.update(out)
        return out


class PlanningTuner(Tuner):
    """A tuner that proposes a whole plan (a generation, a model's picks) at a time; ``ask``
    hands out its unvisited entries and asks for a new plan when it runs dry."""

    def __init__(self, space, *, seed=None, **options):
        super().__init__(space, seed=seed, **options)
        self.queue: List[int] = []

    def plan(self) -> List[int]:
        raise NotImplementedError

    def ask(self, n: int) -> List[int]:
        out: List[int] = []
        while len(out) < n:
            if not self.queue:
                self.queue = self.plan()
                if not self.queue:
                    break
            i = self.queue.pop(0)
            if i not in self.visited:
                out.append(i)
                self.visited.add(i)
        return out


@dataclass
class TuneSummary:
    trials: int = 0
    errors: int = 0
    best_cost: float = float("inf")
    best_config: object = None
    best_gflops: float = 0.0
    elapsed: float = 0.0
    history: List[float] = field(default_factory=list)  # best GFLOP/s after each trial


def tune(task, tuner: Tuner, measurer, *, n_trial: int, batch_size: int = 8,
         early_stopping: Optional[int] = None, stop_at_cost: Optional[float] = None,
         callbacks: Sequence[Callable] = ()) -> TuneSummary:
    """Ask, measure, tell until ``n_trial`` configs are measured, the space is exhausted,
    ``early_stopping`` trials pass without a better config, or (``stop_at_cost``, seconds) a
    config at least that fast is found. Each callback is called as ``cb(task, configs, results)``
    after every batch (log writer, progress line)."""
    summary = TuneSummary()
    start = time.time()
    last_improvement = 0
    while summary.trials < n_trial:
        indices = tuner.ask(min(batch_size, n_trial - summary.trials))
        if not indices:
            break
        configs = [task.config(i) for i in indices]
        results = measurer.measure(task, configs)
        tuner.tell(indices, [r.mean for r in results])
        for cfg, res in zip(configs, results):
            summary.trials += 1
            if not res.ok:
                summary.errors += 1
            elif res.mean < summary.best_cost:
                summary.best_cost, summary.best_config = res.mean, cfg
                summary.best_gflops = task.flop / res.mean / 1e9
                last_improvement = summary.trials
            summary.history.append(summary.best_gflops)
        summary.elapsed = time.time() - start
        for cb in callbacks:
            cb(task, configs, results)
        if early_stopping and summary.trials - last_improvement >= early_stopping:
            logger.info("tvm_ext: early stop after %d trials without improvement",
                        early_stopping)
            break
        if stop_at_cost is not None and summary.best_cost <= stop_at_cost:
            break
    summary.elapsed = time.time() - start
    return summary
