"""Genetic search over knob digits: elitism, uniform crossover, per-knob mutation."""
from __future__ import annotations

from typing import List

import numpy as np

from .base import PlanningTuner


class GATuner(PlanningTuner):
    """``pop_size`` genes per generation; the ``elite_num`` best survive unchanged as parents'
    favourites; children mix two parents knob by knob and each knob mutates with
    ``mutation_prob``. Fitness is 1 / cost (0 for failed configs)."""

    def __init__(self, space, *, seed=None, pop_size=32, elite_num=4, mutation_prob=0.15,
                 **options):
        super().__init__(space, seed=seed, **options)
        self.pop_size, self.elite_num, self.mutation_prob = pop_size, elite_num, mutation_prob
        self.scores = {}  # index -> fitness

    def tell(self, indices, costs):
        super().tell(indices, costs)
        for i, c in zip(indices, costs):
            self.scores[int(i)] = 0.0 if not np.isfinite(c) else 1.0 / c

    def plan(self) -> List[int]:
        taken: set = set()
        if len(self.scores) < self.elite_num:
            return self.random_valid(self.pop_size, taken)
        ranked = sorted(self.scores, key=lambda i: -self.scores[i])
        parents = ranked[:max(self.elite_num, self.pop_size // 2)]
        weights = np.asarray([self.scores[i] for i in parents]) + 1e-12
        weights /= weights.sum()
        genes = [self.space.digits(i) for i in parents]
        radix = self.space.radix
        children: List[int] = []
        tries = 0
        while len(children) < self.pop_size and tries < 50 * self.pop_size:
            tries += 1
            pa, pb = self.rng.choice(len(parents), size=2, p=weights)
            child = [genes[pa][k] if self.rng.random() < 0.5 else genes[pb][k]
                     for k in range(len(radix))]
            for k, r in enumerate(radix):
                if self.rng.random() < self.mutation_prob:
                    child[k] = int(self.rng.integers(r))
            idx = self.space.index_from_digits(child)
            if idx in self.visited or idx in taken or not self.space.is_valid(idx):
                continue
            children.append(idx)
            taken.add(idx)
        if len(children) < self.pop_size:  # converged population: refill at random
            children += self.random_valid(self.pop_size - len(children), taken)
        return children
