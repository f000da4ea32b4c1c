"""A fixed random Markov chain over tokens: text a model can learn, with a known best loss.

The chain's entropy rate is the lowest per-token cross-entropy any next-token predictor can
reach on text it generates, so a run's loss can be read against an absolute floor instead of
only against other runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MarkovChain", "make_chain"]


@dataclass(frozen=True, slots=True)
class MarkovChain:
    """A first-order chain: ``transition[a, b] = P(next = b | current = a)``."""

    transition: np.ndarray  # (V, V), rows sum to 1

    @property
    def num_states(self) -> int:
        return self.transition.shape[0]

    def stationary(self, tol: float = 1e-13, max_iter: int = 100_000) -> np.ndarray:
        """The stationary distribution π (π P = π), by power iteration.

        Power iteration is a few hundred vector-matrix products for these fast-mixing chains,
        where a dense eigendecomposition costs seconds for a few hundred states.
        """
        pi = np.full(self.num_states, 1.0 / self.num_states)
        for _ in range(max_iter):
            nxt = pi @ self.transition
            if np.abs(nxt - pi).sum() < tol:
                return nxt / nxt.sum()
            pi = nxt
        raise RuntimeError("stationary distribution did not converge")

    def entropy_rate(self) -> float:
        """H = -Σ_a π_a Σ_b P_ab log P_ab in nats: the floor of next-token cross-entropy."""
        p = self.transition
        with np.errstate(divide="ignore", invalid="ignore"):
            row_entropy = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
        return float(self.stationary() @ row_entropy)

    def sample(self, rng: np.random.Generator, num_sequences: int, length: int,
               first: np.ndarray | None = None) -> np.ndarray:
        """Sample ``(num_sequences, length)`` state ids.

        Args:
            first: the first state of each sequence; drawn from the stationary distribution if ``None``.
        """
        states = np.empty((num_sequences, length), dtype=np.int64)
        states[:, 0] = rng.choice(self.num_states, size=num_sequences, p=self.stationary()) if first is None else first
        cumulative = np.cumsum(self.transition, axis=1)
        for t in range(1, length):
            u = rng.random(num_sequences)[:, None]
            row = cumulative[states[:, t - 1]]
            # Clip guards against the last cumulative value being 1 - ε in float arithmetic.
            states[:, t] = np.minimum((u > row).sum(axis=1), self.num_states - 1)
        return states


def make_chain(num_states: int, rng: np.random.Generator, concentration: float = 0.1) -> MarkovChain:
    """A random chain whose rows are Dirichlet(``concentration``) draws.

    A small concentration makes each row peaked on a few successors: the text is far from
    uniform (entropy rate well under log V), so learning shows as a large drop in loss.
    """
    rows = rng.dirichlet(np.full(num_states, concentration), size=num_states)
    # A Dirichlet draw can underflow to exact zeros; a floor keeps the chain irreducible, so the
    # stationary distribution is unique.
    rows = np.maximum(rows, 1e-6)
    return MarkovChain(rows / rows.sum(axis=1, keepdims=True))
