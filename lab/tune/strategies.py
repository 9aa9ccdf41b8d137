"""Sweep strategies behind one interface: ``ask(n)`` proposes points, ``tell`` reports their scores.

A point is a dict {parameter: value} over the sweep's dimensions. Grid and seeded random propose
everything up front (and ignore ``tell``); optuna TPE learns from what it is told.
"""
from __future__ import annotations

import itertools
import random
from typing import Any, Callable, Sequence

from lab.errors import ValidationError
from lab.tune.dimension import Dimension


class Strategy:
    """``ask(n)``: up to n new points ([] when the budget is spent); ``tell(points, scores)``."""
    def __init__(self, dims: Sequence[Dimension], trials: int | None, seed: int) -> None:
        self.dims = tuple(dims)
        self.trials = trials
        self.seed = seed
        self.asked = 0

    def ask(self, n: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def tell(self, points: Sequence[dict[str, Any]], scores: Sequence[float | None]) -> None:
        """Scores of earlier points (None: infeasible or failed)."""
    def total(self) -> int | None:
        """How many points this strategy will propose, when known."""
        return self.trials


class Grid(Strategy):
    """Every combination, in the order the dimensions and values are written (capped by ``trials``)."""
    def __init__(self, dims: Sequence[Dimension], trials: int | None, seed: int) -> None:
        super().__init__(dims, trials, seed)
        self._it = itertools.product(*[d.values for d in self.dims])

    def total(self) -> int:
        n = 1
        for d in self.dims:
            n *= len(d.values)
        return min(n, self.trials) if self.trials else n

    def ask(self, n: int) -> list[dict[str, Any]]:
        left = self.total() - self.asked
        got = [dict(zip((d.name for d in self.dims), combo)) for combo in itertools.islice(self._it, max(0, min(n, left)))]
        self.asked += len(got)
        return got


class RandomSearch(Strategy):
    """``trials`` points drawn with a seeded generator: choices uniformly, ranges uniformly (ints rounded)."""
    def __init__(self, dims: Sequence[Dimension], trials: int | None, seed: int) -> None:
        super().__init__(dims, trials, seed)
        self._rng = random.Random(seed)

    def _draw(self, d: Dimension) -> Any:
        if d.values:
            return self._rng.choice(d.values)
        x = self._rng.uniform(d.low, d.high)
        return int(round(x)) if d.kind is int else x

    def ask(self, n: int) -> list[dict[str, Any]]:
        k = max(0, min(n, (self.trials or 0) - self.asked))
        self.asked += k
        return [{d.name: self._draw(d) for d in self.dims} for _ in range(k)]


class TPE(Strategy):
    """optuna's TPE sampler (seeded), through its ask/tell interface; maximises the objective."""
    def __init__(self, dims: Sequence[Dimension], trials: int | None, seed: int) -> None:
        super().__init__(dims, trials, seed)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
        self._pending: dict[int, Any] = {}

    def _suggest(self, trial, d: Dimension) -> Any:
        if d.values:
            # categorical over the written values (optuna wants hashable primitives)
            return trial.suggest_categorical(d.name, list(d.values))
        if d.kind is int:
            return trial.suggest_int(d.name, int(d.low), int(d.high))
        return trial.suggest_float(d.name, float(d.low), float(d.high))

    def ask(self, n: int) -> list[dict[str, Any]]:
        k = max(0, min(n, (self.trials or 0) - self.asked))
        out = []
        for _ in range(k):
            trial = self._study.ask()
            point = {d.name: self._suggest(trial, d) for d in self.dims}
            self._pending[id(point)] = trial
            out.append(point)
        self.asked += k
        return out

    def tell(self, points: Sequence[dict[str, Any]], scores: Sequence[float | None]) -> None:
        for point, score in zip(points, scores):
            trial = self._pending.pop(id(point), None)
            if trial is None:
                continue
            if score is None:
                self._study.tell(trial, state=self._optuna.trial.TrialState.PRUNED)
            else:
                self._study.tell(trial, float(score))


STRATEGIES: dict[str, Callable[[Sequence[Dimension], int | None, int], Strategy]] = {
    "grid": Grid, "random": RandomSearch, "tpe": TPE,
}


def make_strategy(name: str, dims: Sequence[Dimension], trials: int | None, seed: int) -> Strategy:
    if name not in STRATEGIES:
        raise ValidationError(f"unknown sweep strategy {name!r}; known: {sorted(STRATEGIES)}")
    return STRATEGIES[name](dims, trials, seed)
