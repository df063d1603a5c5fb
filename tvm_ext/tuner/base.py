"""The tuner contract (ask / tell); the loop that drives it is ``tvm_ext.session.tune_loop``.

A tuner proposes indices of its space (``ask``), only valid ones it has not proposed or been
told about before, and learns from results (``tell``). Everything random comes from the tuner's
own ``numpy.random.Generator(seed)``: same seed + same prior records = same run.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ..space import ConfigSpace


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
