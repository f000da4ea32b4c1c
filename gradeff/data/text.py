"""Text tasks on Markov-chain text: causal LM and masked LM, with their exact loss floors."""

from __future__ import annotations

import numpy as np
import torch

from gradeff.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset
from gradeff.data.markov import MarkovChain, make_chain

__all__ = ["FIRST_STATE_TOKEN", "causal_lm", "masked_lm", "masked_posteriors"]

FIRST_STATE_TOKEN = len(SPECIAL_TOKENS)  # token id of Markov state 0


def _chain_and_states(num_states: int, seq_len: int, num_samples: int, seed: int, heldout_samples: int = 0):
    """The chain, the training sequences and the held-out ones, drawn after them (so the training set does
    not depend on whether a held-out split is asked for)."""
    rng = np.random.default_rng(seed)
    chain = make_chain(num_states, rng)
    states = chain.sample(rng, num_samples, seq_len)
    heldout = chain.sample(rng, heldout_samples, seq_len) if heldout_samples else None
    return chain, states, heldout


def causal_lm(*, num_states: int, seq_len: int, num_samples: int, seed: int, heldout_samples: int = 0) -> Dataset:
    """Next-token prediction on Markov text; floor = Bayes loss -log P(s_t | s_{t-1}) on the samples.

    Args:
        heldout_samples: sequences of a held-out split from the same chain, never trained on.
    """
    chain, states, heldout = _chain_and_states(num_states, seq_len, num_samples, seed, heldout_samples)
    train = _causal_split(chain, states)
    return train.with_heldout(_causal_split(chain, heldout)) if heldout is not None else train


def _causal_split(chain: MarkovChain, states: np.ndarray) -> Dataset:
    num_samples, seq_len = states.shape
    num_states = chain.num_states
    tokens = torch.from_numpy(states + FIRST_STATE_TOKEN)
    # The Bayes predictor knows the chain: its loss at each position is -log P[prev, next].
    bayes = -np.log(chain.transition[states[:, :-1], states[:, 1:]])
    entropy_rate = chain.entropy_rate()
    return Dataset(
        task="causal_lm",
        # transformers' causal-LM loss shifts labels itself: labels = inputs.
        tensors={"input_ids": tokens, "labels": tokens.clone()},
        targets=torch.full((num_samples,), seq_len - 1),
        loss_floor=float(bayes.mean()),
        floor_note=f"Bayes loss of the generating Markov chain on these samples "
                   f"(entropy rate {entropy_rate:.4f} nats)",
        info={"num_states": num_states, "seq_len": seq_len, "entropy_rate": entropy_rate},
    )


def masked_posteriors(chain: MarkovChain, states: np.ndarray, masked: np.ndarray) -> np.ndarray:
    """P(s_t = true state | all unmasked tokens) at every position, by forward-backward.

    Masked positions are unobserved states of the chain; observed ones are clamped. The
    posterior is the Bayes-optimal masked-LM prediction, so -log of it is the loss floor.

    Args:
        chain: the generating chain.
        states: ``(N, L)`` true state ids.
        masked: ``(N, L)`` bool, True where the token is hidden.

    Returns:
        ``(N, L)`` posterior probability of the true state (1.0 at observed positions).
    """
    n, length = states.shape
    v = chain.num_states
    p = chain.transition
    evidence = np.ones((n, length, v))
    observed = ~masked
    evidence[observed] = 0.0
    rows, cols = np.nonzero(observed)
    evidence[rows, cols, states[observed]] = 1.0
    # Normalising alpha and beta at each step avoids underflow; the posterior is a ratio anyway.
    alpha = np.empty((n, length, v))
    a = chain.stationary()[None, :] * evidence[:, 0]
    alpha[:, 0] = a / a.sum(axis=1, keepdims=True)
    for t in range(1, length):
        a = (alpha[:, t - 1] @ p) * evidence[:, t]
        alpha[:, t] = a / a.sum(axis=1, keepdims=True)
    beta = np.empty((n, length, v))
    beta[:, -1] = 1.0
    for t in range(length - 2, -1, -1):
        b = (evidence[:, t + 1] * beta[:, t + 1]) @ p.T
        beta[:, t] = b / b.sum(axis=1, keepdims=True)
    posterior = alpha * beta
    posterior /= posterior.sum(axis=2, keepdims=True)
    return np.take_along_axis(posterior, states[..., None], axis=2)[..., 0]


def masked_lm(*, num_states: int, seq_len: int, num_samples: int, seed: int, mask_prob: float = 0.15,
              heldout_samples: int = 0) -> Dataset:
    """Masked-token prediction on Markov text (``mask_prob`` of positions replaced by [MASK]).

    At least one position per sequence is masked so every sample carries loss. Floor = mean
    -log posterior of the masked tokens given every visible token (exact, by forward-backward).

    Args:
        heldout_samples: sequences of a held-out split (their own masks), never trained on.
    """
    chain, states, heldout = _chain_and_states(num_states, seq_len, num_samples, seed, heldout_samples)
    train = _masked_split(chain, states, np.random.default_rng([seed, 1]), mask_prob)
    if heldout is None:
        return train
    return train.with_heldout(_masked_split(chain, heldout, np.random.default_rng([seed, 2]), mask_prob))


def _masked_split(chain: MarkovChain, states: np.ndarray, rng: np.random.Generator, mask_prob: float) -> Dataset:
    num_samples, seq_len = states.shape
    num_states = chain.num_states
    masked = rng.random(states.shape) < mask_prob
    masked[np.arange(num_samples), rng.integers(0, seq_len, num_samples)] = True
    tokens = states + FIRST_STATE_TOKEN
    input_ids = np.where(masked, SPECIAL_TOKENS["mask"], tokens)
    labels = np.where(masked, tokens, IGNORE_INDEX)
    # Forward-backward holds (chunk, L, V) arrays: chunking bounds memory at paper sizes.
    chunk = max(1, 2**25 // (seq_len * num_states))
    posterior = np.concatenate([masked_posteriors(chain, states[i:i + chunk], masked[i:i + chunk])
                                for i in range(0, num_samples, chunk)])
    return Dataset(
        task="masked_lm",
        tensors={
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.ones(num_samples, seq_len, dtype=torch.long),
            "labels": torch.from_numpy(labels),
        },
        targets=torch.from_numpy(masked.sum(axis=1)),
        loss_floor=float(-np.log(posterior[masked]).mean()),
        floor_note="Bayes loss: exact posterior of each masked token given all visible tokens (forward-backward)",
        info={"num_states": num_states, "seq_len": seq_len, "mask_prob": mask_prob,
              "masked_fraction": float(masked.mean())},
    )
