"""Top-K: measure the configs the hardware-aware proposer ranks best (``tvm_ext.propose``).

The first ``ask`` hands out the proposer's best configs in its order; once they are measured,
the next best follow (a budget above K keeps walking down the ranking). Nothing random: the
proposer samples a space too large to score whole with a fixed seed.
"""
from __future__ import annotations

from typing import List

from ..propose import propose
from .base import Tuner


class TopKTuner(Tuner):
    def __init__(self, space, *, seed=None, k: int = 20, **options):
        super().__init__(space, seed=seed, **options)
        self.k = k
        self._ranked: List[int] = []

    def ask(self, n: int) -> List[int]:
        if not self._ranked:
            # Rank once, deep enough for budgets beyond K (the whole scored list is cheap).
            self._ranked = propose(self.space, max(self.k, 4096), exclude=self.visited)
        out = []
        while self._ranked and len(out) < n:
            i = self._ranked.pop(0)
            if i not in self.visited:
                out.append(i)
                self.visited.add(i)
        if len(out) < n:  # the ranking ran dry: valid configs the proposer did not score
            out += self.random_valid(n - len(out), set(out))
            self.visited.update(out)
        return out
