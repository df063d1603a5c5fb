"""Grid search: every valid config in index order."""
from __future__ import annotations

from typing import List

from .base import Tuner


class GridSearchTuner(Tuner):
    def __init__(self, space, *, seed=None, **options):
        super().__init__(space, seed=seed, **options)
        self._next = 0

    def has_next(self) -> bool:
        return self._next < len(self.space)

    def ask(self, n: int) -> List[int]:
        out: List[int] = []
        while len(out) < n and self._next < len(self.space):
            i = self._next
            self._next += 1
            if i not in self.visited and self.space.is_valid(i):
                out.append(i)
                self.visited.add(i)
        return out
