"""XGBoost cost-model tuner (AutoTVM's XGBTuner, rewritten for our spaces).

Each plan: fit a gradient-boosted model on everything measured so far (and on transferred
records), walk the space with simulated annealing guided by the model, and queue the
``plan_size`` best unvisited configs, of which a ``random_share`` are random picks (so a wrong
model cannot trap the search). The first plan starts from the proposer's configs; until
``min_data`` results exist, the rest are random.

Features: the space's knob features (resolved split sizes, knob values, ...); with
``loop_features`` (a callable index -> vector, e.g. from the scheduled TensorIR, see
``features.task_loop_features``) the annealing still walks with the cheap knob model and the final
pool of candidates is re-ranked by a model over knob + loop features.

Losses: ``rank`` (pairwise ranking: only the order of configs matters) or ``reg`` (squared error
on normalised throughput).
"""
from __future__ import annotations

import heapq
from itertools import zip_longest
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..propose import propose
from .base import PlanningTuner


class XGBTuner(PlanningTuner):
    def __init__(self, space, *, seed=None, loss="rank", plan_size=32, random_share=0.1,
                 min_data=8, sa_chains=64, sa_steps=60, num_boost_round=60,
                 loop_features: Optional[Callable[[int], np.ndarray]] = None,
                 seed_with_proposer: bool = True, **options):
        super().__init__(space, seed=seed, **options)
        if loss not in ("rank", "reg"):
            from ..errors import TvmExtError  # noqa: PLC0415
            raise TvmExtError(f"unknown XGB loss '{loss}' (rank, reg)")
        self.loss, self.plan_size, self.random_share = loss, plan_size, random_share
        self.min_data, self.sa_chains, self.sa_steps = min_data, sa_chains, sa_steps
        self.num_boost_round = num_boost_round
        self.loop_features = loop_features
        self.xs: List[int] = []          # measured indices
        self.ys: List[float] = []        # their throughput (1/cost, 0 if failed)
        self.transfer_x: List[np.ndarray] = []
        self.transfer_y: List[float] = []
        self._fea_cache: Dict[int, np.ndarray] = {}
        self._loop_cache: Dict[int, np.ndarray] = {}
        self.n_plans = 0
        self.n_seeded = 0  # configs of the first plan that came from the proposer
        # False: the first plan is random, as AutoTVM's was (the tuners benchmark compares).
        self.seed_with_proposer = seed_with_proposer

    # ---- data ----
    def tell(self, indices, costs):
        super().tell(indices, costs)
        for i, c in zip(indices, costs):
            self.xs.append(int(i))
            self.ys.append(0.0 if not np.isfinite(c) or c <= 0 else 1.0 / c)

    def add_transfer(self, features: Sequence[np.ndarray], throughputs: Sequence[float],
                     group: Sequence[object]):
        """Warm start from records of other workloads of the same template: throughputs are
        normalised per workload (``group``) so shapes of different sizes mix."""
        features, thr = list(features), np.asarray(throughputs, dtype=float)
        groups = list(group)
        for g in set(groups):
            sel = [k for k, x in enumerate(groups) if x == g]
            top = max(thr[sel].max(), 1e-30)
            for k in sel:
                self.transfer_x.append(np.asarray(features[k], dtype=np.float32))
                self.transfer_y.append(float(thr[k] / top))

    def _knob_fea(self, i: int) -> np.ndarray:
        f = self._fea_cache.get(i)
        if f is None:
            f = self.space.features(self.space.get(i))
            self._fea_cache[i] = f
        return f

    def _full_fea(self, i: int) -> np.ndarray:
        f = self._loop_cache.get(i)
        if f is None:
            try:
                f = np.asarray(self.loop_features(i), dtype=np.float32)
            except Exception:  # noqa: BLE001  (a config the template cannot schedule)
                f = None
            if f is None:
                f = np.full(1, -1.0, dtype=np.float32)
            self._loop_cache[i] = f
        return np.concatenate([self._knob_fea(i), f])

    # ---- model ----
    def _fit(self, X: np.ndarray, y: np.ndarray):
        import xgboost as xgb  # noqa: PLC0415
        params = {"max_depth": 3, "eta": 0.3, "gamma": 1e-4, "min_child_weight": 1,
                  "subsample": 1.0, "nthread": 1, "verbosity": 0,
                  "seed": int(self.rng.integers(1 << 30)),
                  "objective": "rank:pairwise" if self.loss == "rank" else "reg:squarederror"}
        d = xgb.DMatrix(X, label=y)
        if self.loss == "rank":
            d.set_group([len(y)])
        return xgb.train(params, d, num_boost_round=self.num_boost_round)

    @staticmethod
    def _predict(model, X):
        import xgboost as xgb  # noqa: PLC0415
        return model.predict(xgb.DMatrix(np.asarray(X, dtype=np.float32)))

    def _training_set(self, fea):
        y = np.asarray(self.ys, dtype=float)
        if y.size:
            y = y / max(y.max(), 1e-30)
        X = [fea(i) for i in self.xs]
        if X and fea == self._full_fea:
            # a measured config whose schedule cannot be read (its build failed: it is an
            # error record) has no loop features: the model learns from the others
            width = max(len(x) for x in X)
            y = np.asarray([t for x, t in zip(X, y) if len(x) == width], dtype=float)
            X = [x for x in X if len(x) == width]
        if self.transfer_x and fea == self._knob_fea:
            width = len(X[0]) if X else len(self.transfer_x[0])
            pairs = [(x, t) for x, t in zip(self.transfer_x, self.transfer_y)
                     if len(x) == width]
            X += [x for x, _ in pairs]
            y = np.concatenate([y, [t for _, t in pairs]])
        return np.asarray(X, dtype=np.float32), y

    # ---- proposal ----
    def _neighbour(self, i: int) -> int:
        digits = self.space.digits(i)
        k = int(self.rng.integers(len(digits)))
        r = self.space.radix[k]
        if r > 1:
            digits[k] = (digits[k] + int(self.rng.integers(1, r))) % r
        return self.space.index_from_digits(digits)

    def _anneal(self, model, pool_size: int) -> List[int]:
        """Simulated annealing with the knob model; returns up to pool_size unvisited valid
        configs with the best predicted scores."""
        starts = sorted(range(len(self.xs)), key=lambda k: -self.ys[k])[:self.sa_chains // 2]
        points = [self.xs[k] for k in starts]
        points += self.random_valid(self.sa_chains - len(points), set(points))
        scores = self._predict(model, [self._knob_fea(p) for p in points])
        best: List = []  # min-heap of (score, index)
        in_heap = set()

        def offer(score, idx):
            if idx in self.visited or idx in in_heap:
                return
            if len(best) < pool_size:
                heapq.heappush(best, (score, idx))
                in_heap.add(idx)
            elif score > best[0][0]:
                _, old = heapq.heapreplace(best, (score, idx))
                in_heap.discard(old)
                in_heap.add(idx)

        for p, s in zip(points, scores):
            if self.space.is_valid(p):
                offer(float(s), p)
        temp = 1.0
        for step in range(self.sa_steps):
            cand = [self._neighbour(p) for p in points]
            ok = [self.space.is_valid(c) for c in cand]
            cand_scores = self._predict(model, [self._knob_fea(c) for c in cand])
            spread = max(float(np.std(cand_scores)), 1e-9)
            for k, (c, s, v) in enumerate(zip(cand, cand_scores, ok)):
                if not v:
                    continue
                offer(float(s), c)
                accept = s >= scores[k] or self.rng.random() < np.exp(
                    (s - scores[k]) / (spread * max(temp, 1e-3)))
                if accept:
                    points[k], scores[k] = c, s
            temp = 1.0 - (step + 1) / self.sa_steps
        return [i for _, i in sorted(best, reverse=True)]

    def plan(self) -> List[int]:
        taken: set = set()
        valid_data = sum(1 for y in self.ys if y > 0)
        n_model = int(round(self.plan_size * (1 - self.random_share)))
        ready = valid_data + len(self.transfer_x) >= self.min_data
        seeded: List[int] = []
        if self.seed_with_proposer and not self.n_seeded and not (ready and self.xs):
            # The first plan: the proposer's best configs, then a random share; half of it
            # (in turn) beside a model of other shapes' records (which missed gemm1's 171 x 6).
            seeded = propose(self.space, n_model // 2 if ready else n_model,
                             exclude=self.visited)
            self.n_seeded += len(seeded)
            taken.update(seeded)
        if not ready:
            return seeded + self.random_valid(self.plan_size - len(seeded), taken)
        self.n_plans += 1
        knob_model = self._fit(*self._training_set(self._knob_fea))
        pool = self._anneal(knob_model, n_model * (3 if self.loop_features else 1))
        if self.loop_features and len(self.xs) >= self.min_data:
            full_model = self._fit(*self._training_set(self._full_fea))
            full = [self._full_fea(i) for i in pool]
            width = max(len(self._full_fea(i)) for i in self.xs)
            keep = [(i, f) for i, f in zip(pool, full) if len(f) == width]
            if keep:
                pred = self._predict(full_model, [f for _, f in keep])
                pool = [i for _, i in sorted(zip(pred, [i for i, _ in keep]), reverse=True)]
        picks = [i for i in pool if i not in taken][:n_model - len(seeded)]
        plan = [i for p in zip_longest(seeded, picks) for i in p if i is not None]
        taken.update(plan)
        plan += self.random_valid(self.plan_size - len(plan), taken)
        return plan
