"""Random search without repeats."""
from __future__ import annotations

from typing import List

from .base import Tuner

_ENUMERATE_BELOW = 200_000  # spaces this small are listed once; larger ones are sampled


class RandomTuner(Tuner):
    def __init__(self, space, *, seed=None, **options):
        super().__init__(space, seed=seed, **options)
        self._pool = None
        if len(space) <= _ENUMERATE_BELOW:
            self._pool = [i for i in range(len(space)) if space.is_valid(i)]
            self.rng.shuffle(self._pool)

    def has_next(self) -> bool:
        if self._pool is not None:
            return any(i not in self.visited for i in self._pool)
        return super().has_next()

    def ask(self, n: int) -> List[int]:
        out: List[int] = []
        if self._pool is not None:
            while self._pool and len(out) < n:
                i = self._pool.pop()
                if i not in self.visited:
                    out.append(i)
                    self.visited.add(i)
            return out
        # Large space: rejection sampling, bounded so a heavily constrained space ends.
        out = self.space.random_valid(self.rng, n, skip=(self.visited,), max_draws=1000 * n)
        self.visited.update(out)
        return out
