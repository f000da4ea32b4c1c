"""Learning-rate search on a log grid: the one search behind ``--gradeff-tune lr`` and ``scripts/tune_rates.py``.

A search scores every rate of a grid (lower is better: a final validation loss; ``None`` or NaN for a rate whose
runs failed, which is never chosen) and keeps the best. A best rate at the grid's smallest or largest point may
only be the best of the rates tried, not a minimum: the outcome says so (``at_edge``), and with ``widen`` the
search adds the next point of the grid's own spacing beyond that edge and scores it, until the best rate sits
inside the grid or the widening is spent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["SearchOutcome", "Trial", "at_edge", "log_grid", "search"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """One scored rate: ``score`` ``None`` when it could not be scored (every run diverged or failed)."""

    lr: float
    score: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchOutcome:
    """What a search found.

    Attributes:
        chosen: the best-scoring rate, ``None`` when no rate could be scored.
        trials: every rate tried with its score, in ascending order of rate.
        at_edge: ``"low"`` / ``"high"`` when ``chosen`` is the smallest / largest rate tried (the optimum may lie
            beyond it), else ``None``.
        widened: points added beyond the first grid's edges.
    """

    chosen: float | None
    trials: tuple[Trial, ...]
    at_edge: str | None
    widened: int = 0


def log_grid(centre: float, points: int, spread: float) -> tuple[float, ...]:
    """``points`` rates evenly spaced in log10 over ``centre × 10^[−spread/2, +spread/2]`` (one point: the centre)."""
    if points < 1:
        raise ValueError(f"a learning-rate grid needs at least one point, got {points}")
    if not centre > 0 or not spread > 0:
        raise ValueError(f"a log grid needs a positive centre and spread, got {centre} and {spread}")
    if points == 1:
        return (centre,)
    return tuple(centre * 10 ** (spread * (i / (points - 1) - 0.5)) for i in range(points))


def at_edge(chosen: float | None, rates: Iterable[float]) -> str | None:
    """``"low"`` / ``"high"`` if ``chosen`` is the smallest / largest of ``rates`` (of two or more), else ``None``."""
    ordered = sorted(set(rates))
    if chosen is None or len(ordered) < 2:
        return None
    return "low" if chosen == ordered[0] else "high" if chosen == ordered[-1] else None


def _usable(score: float | None) -> bool:
    return score is not None and not math.isnan(score)


def search(score: Callable[[float], float | None], grid: Iterable[float], *, widen: int = 0) -> SearchOutcome:
    """Score every rate of ``grid``, then widen past an edge best (at most ``widen`` extra points).

    Args:
        score: a rate → its score (lower is better), ``None`` or NaN when it could not be scored.
        grid: the rates to try first (any order; duplicates are tried once).
        widen: how many points the search may add beyond the grid's edges, each one step of the grid's
            smallest spacing (in log) past the edge the best rate sits on.

    Returns:
        The outcome; ``at_edge`` is set when the best rate is still at an edge once the widening is spent.
    """
    rates = sorted(set(grid))
    if not rates:
        raise ValueError("a search needs at least one rate")
    ratios = [b / a for a, b in zip(rates, rates[1:])]
    step = min(ratios) if ratios else 10.0
    scores = {lr: score(lr) for lr in rates}
    added = 0
    while True:
        usable = {lr: s for lr, s in scores.items() if _usable(s)}
        chosen = min(usable, key=usable.get) if usable else None
        edge = at_edge(chosen, scores)
        if edge is None or added >= widen:
            break
        lr = min(scores) / step if edge == "low" else max(scores) * step
        scores[lr] = score(lr)
        added += 1
    trials = tuple(Trial(lr=lr, score=scores[lr]) for lr in sorted(scores))
    return SearchOutcome(chosen=chosen, trials=trials, at_edge=edge, widened=added)
