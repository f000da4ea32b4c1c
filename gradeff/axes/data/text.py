"""Text tasks with exact loss floors: causal and masked LM on topic text (each sequence draws its tokens from one of
a few topics), and the Markov-chain text the causal task used to be.

**Causal LM** (``causal_lm``, the LLM's task): each sequence draws one of 16 topics, then every token independently
from that topic's distribution over 124 states (Dirichlet(0.05): a handful of likely tokens each, shared between
topics here and there); topics come in equal shares in every split. The best next-token prediction is the mixture
of the topics weighted by how well each explains the tokens so far, which a decoder's causal attention reads off
the prefix by averaging it from its first step; one token says little (a likely token of several topics), so a
count of what follows what misses most of it. Why not Markov text, the task this replaced: there the previous token
is all a predictor may use, so a bigram count of the training split is the Bayes predictor's own form and stands
within 0.12 nats of the floor (3.13 against 3.00 at tiny), where the tiny Llama reached 3.46 after its 72 steps: the
task measured how fast an optimizer fits a 124 × 124 table that counting fits in one pass. On topic text the same
decoder reaches 2.50 in the same steps (floor 2.37), the bigram 3.10, the unigram 4.37. The Markov variant stays
available (``num_topics=0``).

**Masked LM** (``masked_lm``, ModernBERT's task): topic text as above, with 30 % of the positions masked,
ModernBERT's own pre-training rate. A masked token is read off the whole visible sequence (which topic it is), what
a bidirectional encoder's attention does by averaging from its first step. On Markov text, the task this replaced,
a masked token is known only from its two neighbours: attending to ±1 positions is a skill a two-layer ModernBERT
had not learned after 192 steps (2 % of the gap closed). At tiny the sequences are 16 tokens, not 32 (twice as many
of them, the same tokens an epoch): the histogram of a sequence's own visible tokens, the task's trivial baseline,
is a good guess of its topic's few tokens after 22 visible ones (3.01 nats, where ModernBERT reached 2.96 after its
72 steps; floor 2.31) and a poor one after 11 (3.35), while the encoder knows the topics' whole distributions
(2.67 after 144 steps of 16 tokens; floor 2.34).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from gradeff.axes.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset
from gradeff.axes.data.markov import MarkovChain, make_chain

__all__ = ["FIRST_STATE_TOKEN", "Topics", "causal_lm", "masked_lm", "masked_posteriors"]

FIRST_STATE_TOKEN = len(SPECIAL_TOKENS)  # token id of Markov state 0


def _chain_and_states(num_states: int, seq_len: int, counts: tuple[int, ...], seed: int):
    """The chain, then the sequences of each split in turn (training, test, validation): a split drawn after
    another never changes it, so asking for a test or validation split leaves the training set as it was.
    A split of no samples is ``None``."""
    rng = np.random.default_rng(seed)
    chain = make_chain(num_states, rng)
    return chain, [chain.sample(rng, count, seq_len) if count else None for count in counts]


def _with_splits(train: Dataset, heldout: Dataset | None, validation: Dataset | None) -> Dataset:
    if heldout is not None:
        train = train.with_heldout(heldout)
    return train.with_validation(validation) if validation is not None else train


def causal_lm(*, num_states: int, seq_len: int, num_samples: int, seed: int, heldout_samples: int = 0,
              validation_samples: int = 0, num_topics: int = 0, concentration: float = 0.1) -> Dataset:
    """Next-token prediction; floor = the Bayes predictor's loss -log P(s_t | s_<t) on the samples.

    Args:
        heldout_samples: sequences of the test split from the same source, never trained on.
        validation_samples: sequences of the validation split, drawn after the test split.
        num_topics: 0: Markov text (P(s_t | s_<t) = P(s_t | s_{t-1}), the chain's). ``K > 0``: topic text, as in
            :func:`masked_lm` (each sequence one of ``K`` topics, Dirichlet(``concentration``) over the states); the
            prediction mixes the topics by their likelihood of the tokens so far.
    """
    counts = (num_samples, heldout_samples, validation_samples)
    if num_topics:
        source, splits = _topics_and_states(num_states, num_topics, concentration, seq_len, counts, seed)
    else:
        source, splits = _chain_and_states(num_states, seq_len, counts, seed)
    return _with_splits(*(_causal_split(source, states) if states is not None else None for states in splits))


def _causal_split(source: MarkovChain | Topics, states: np.ndarray) -> Dataset:
    num_samples, seq_len = states.shape
    tokens = torch.from_numpy(states + FIRST_STATE_TOKEN)
    info = {"num_states": source.num_states, "seq_len": seq_len}
    if isinstance(source, Topics):
        bayes = -np.log(source.predictive(states)[:, 1:])
        note = f"Bayes loss of the {len(source.distributions)} topics' mixture given each prefix, on these samples"
        info["num_topics"] = len(source.distributions)
    else:
        # The Bayes predictor knows the chain: its loss at each position is -log P[prev, next].
        bayes = -np.log(source.transition[states[:, :-1], states[:, 1:]])
        info["entropy_rate"] = source.entropy_rate()
        note = (f"Bayes loss of the generating Markov chain on these samples "
                f"(entropy rate {info['entropy_rate']:.4f} nats)")
    return Dataset(
        task="causal_lm",
        # transformers' causal-LM loss shifts labels itself: labels = inputs.
        tensors={"input_ids": tokens, "labels": tokens.clone()},
        targets=torch.full((num_samples,), seq_len - 1),
        loss_floor=float(bayes.mean()),
        floor_note=note,
        info=info,
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
              heldout_samples: int = 0, validation_samples: int = 0, num_topics: int = 0,
              concentration: float = 0.1) -> Dataset:
    """Masked-token prediction (``mask_prob`` of positions replaced by [MASK]).

    At least one position per sequence is masked so every sample carries loss. Floor = mean
    -log posterior of the masked tokens given every visible token (exact).

    Args:
        heldout_samples: sequences of the test split (their own masks), never trained on.
        validation_samples: sequences of the validation split, drawn after the test split.
        num_topics: 0: Markov text (posterior by forward-backward). ``K > 0``: topic text — each sequence
            draws one of ``K`` topics, then every token independently from that topic's distribution over the
            states (a Dirichlet(``concentration``) draw); the posterior mixes the topics by their likelihood of
            the visible tokens.
    """
    counts = (num_samples, heldout_samples, validation_samples)
    if num_topics:
        source, splits = _topics_and_states(num_states, num_topics, concentration, seq_len, counts, seed)
    else:
        source, splits = _chain_and_states(num_states, seq_len, counts, seed)
    return _with_splits(*(_masked_split(source, states, np.random.default_rng([seed, 1 + i]), mask_prob)
                          if states is not None else None for i, states in enumerate(splits)))


def _topics_and_states(num_states: int, num_topics: int, concentration: float, seq_len: int,
                       counts: tuple[int, ...], seed: int):
    rng = np.random.default_rng([seed, 7])
    topics = Topics(np.maximum(rng.dirichlet(np.full(num_states, concentration), size=num_topics), 1e-12))
    return topics, [topics.sample(rng, count, seq_len) if count else None for count in counts]


@dataclass(frozen=True, slots=True)
class Topics:
    """``K`` topics: ``distributions[k, s]`` = P(token s | topic k); a sequence's topic is uniform."""

    distributions: np.ndarray

    @property
    def num_states(self) -> int:
        return self.distributions.shape[1]

    def sample(self, rng: np.random.Generator, num_sequences: int, length: int) -> np.ndarray:
        """Sequences whose topics come in equal shares (a shuffled ``0, 1, ..., K-1, 0, ...``): every split holds
        every topic, as often as the others."""
        return self.sample_of(rng.permutation(np.arange(num_sequences) % len(self.distributions)), rng, length)

    def predictive(self, states: np.ndarray, log_prior: np.ndarray | None = None) -> np.ndarray:
        """P(s_t = its state | s_<t) at every position: the topics mixed by their posterior given the tokens before
        (and ``log_prior`` ``(N, K)``, what else is known of each sequence's topic: an image's class; uniform if
        ``None``)."""
        log_p = np.log(self.distributions)  # (K, V)
        per_token = log_p[:, states]  # (K, N, L)
        before = np.cumsum(per_token, axis=2) - per_token  # log P(s_<t | k)
        if log_prior is not None:
            before = before + log_prior.T[:, :, None]
        weights = np.exp(before - before.max(axis=0, keepdims=True))
        weights /= weights.sum(axis=0, keepdims=True)
        return (weights * np.exp(per_token)).sum(axis=0)

    def sample_of(self, topic: np.ndarray, rng: np.random.Generator, length: int) -> np.ndarray:
        """Sequences of the given topics ``(N,)``: ``(N, length)`` states."""
        cumulative = np.cumsum(self.distributions, axis=1)[topic]
        u = rng.random((len(topic), length))
        return np.minimum((u[:, :, None] > cumulative[:, None, :]).sum(axis=2), self.num_states - 1)

    def posteriors(self, states: np.ndarray, masked: np.ndarray) -> np.ndarray:
        """P(s_t = true state | the visible tokens) at every position (1.0 where visible)."""
        log_p = np.log(self.distributions)  # (K, V)
        per_token = log_p[:, states]  # (K, N, L)
        evidence = np.where(masked[None], 0.0, per_token).sum(axis=2)  # log P(visible | k), (K, N)
        weights = np.exp(evidence - evidence.max(axis=0, keepdims=True))
        weights /= weights.sum(axis=0, keepdims=True)
        predictive = np.einsum("kn,knl->nl", weights, np.exp(per_token))
        return np.where(masked, predictive, 1.0)


def _masked_split(chain: MarkovChain | Topics, states: np.ndarray, rng: np.random.Generator, mask_prob: float
                  ) -> Dataset:
    num_samples, seq_len = states.shape
    num_states = chain.num_states
    masked = rng.random(states.shape) < mask_prob
    masked[np.arange(num_samples), rng.integers(0, seq_len, num_samples)] = True
    tokens = states + FIRST_STATE_TOKEN
    input_ids = np.where(masked, SPECIAL_TOKENS["mask"], tokens)
    labels = np.where(masked, tokens, IGNORE_INDEX)
    # Forward-backward holds (chunk, L, V) arrays: chunking bounds memory at paper sizes.
    chunk = max(1, 2**25 // (seq_len * num_states))
    posterior_of = chain.posteriors if isinstance(chain, Topics) else partial(masked_posteriors, chain)
    posterior = np.concatenate([posterior_of(states[i:i + chunk], masked[i:i + chunk])
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
