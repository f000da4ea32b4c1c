"""Trivial baselines: what a task gives away to a model that learns nothing a count or a pixel match would not.

A trained cell's test figure means something only beside what no learning gives. For each kind of task:

* ``image_classification``: a 1-nearest-neighbour classifier on raw pixels (the PEFT study's sanity baseline,
  :mod:`gradeff.axes.data.sanity`) and a multinomial logistic regression on standardised pixels (scikit-learn's
  ``LogisticRegression``): test top-1 accuracy, and the regression's test cross-entropy.
* ``causal_lm``: unigram and bigram count models with add-k smoothing fitted on the training split: test loss in
  nats per predicted token, over exactly the positions a causal LM's loss counts (input token ``t`` predicts label
  ``t + 1`` where that label is not the ignore index).
* ``masked_lm``: the visible-token histogram (a masked token predicted from the histogram of the visible tokens of
  its own sequence, smoothed towards the training unigram) and the training-split unigram: test loss per masked
  token.
* ``image_captioning``: the image-blind caption bigram (the causal LM's counts on the caption, the image unread).

Every figure is on the test split (``heldout``) and fitted on the training split only; where a baseline has a
smoothing strength, it is chosen on the validation split when there is one (the test split is never read to fit
anything), else a fixed default. Everything is a pure function of the tensors: the same splits give the same
figures. :func:`trivial_baselines` is the entry point, keyed by task kind, so any dataset of a known kind, a
registered one included, gets its baselines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from gradeff.axes.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset
from gradeff.axes.data.sanity import pixel_nearest_neighbour_accuracy

__all__ = ["KINDS", "SMOOTHING_GRID", "bigram_loss", "logistic_regression", "strongest", "trivial_baselines",
           "unigram_loss", "visible_histogram_loss"]

# Add-k strengths (pseudo-counts per token) tried on the validation split; without one, DEFAULT_K. A count model's
# best k depends on how many times each context was seen: tiny corpora want ~0.1–1, large ones less.
SMOOTHING_GRID = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
DEFAULT_K = 0.1
# The visible-token histogram's prior strength (pseudo-tokens of the training unigram) tried on validation.
PRIOR_GRID = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
DEFAULT_PRIOR = 1.0
# LogisticRegression's inverse regularisation strengths tried on validation (standardised pixels).
C_GRID = (0.01, 0.1, 1.0)
DEFAULT_C = 0.1

KINDS = ("image_classification", "causal_lm", "masked_lm", "image_captioning")


def _splits(data: Dataset | Sequence[Dataset | None] | Mapping[str, Dataset | None]):
    """(train, test, validation or None) from a training split with its splits attached, a (train, test[,
    validation]) sequence or a {"train", "test", "validation"} mapping."""
    if isinstance(data, Dataset):
        train, test, validation = data, data.heldout, data.validation
    elif isinstance(data, Mapping):
        train, test, validation = data["train"], data.get("test", data.get("heldout")), data.get("validation")
    else:
        train, test, *rest = data
        validation = rest[0] if rest else None
    if test is None or len(test) == 0:
        raise ValueError("trivial baselines are scored on a test split: the dataset has none")
    return train, test, validation


def _vocab_size(*splits: Dataset | None) -> int:
    """The vocabulary the counts are spread over: the task's own where it says, else one past the largest id."""
    for split in splits:
        if split is not None and split.info.get("vocab_size"):
            return int(split.info["vocab_size"])
    largest = max(int(t.max()) for split in splits if split is not None
                  for name, t in split.tensors.items() if name in ("input_ids", "labels"))
    return largest + 1


# ------------------------------------------------------------------------------------------- causal text


def _next_token_pairs(split: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(context token, target token) of every position a causal LM's loss counts.

    transformers shifts the labels itself: the logits at position ``t`` (having read ``input_ids[:t+1]``) are scored
    against ``labels[t+1]``, and a label equal to the ignore index is skipped (a caption's BOS, padding).
    """
    inputs = split.tensors["input_ids"][:, :-1].numpy().astype(np.int64)
    labels = split.tensors["labels"][:, 1:].numpy().astype(np.int64)
    counted = labels != IGNORE_INDEX
    return inputs[counted], labels[counted]


def _targets(split: Dataset) -> np.ndarray:
    return _next_token_pairs(split)[1]


def unigram_loss(train: Dataset, test: Dataset, *, k: float, vocab_size: int | None = None) -> float:
    """Test loss (nats per counted token) of the training split's target-token frequencies, add-``k`` smoothed."""
    vocab = vocab_size or _vocab_size(train, test)
    counts = np.bincount(_targets(train), minlength=vocab).astype(np.float64)
    with np.errstate(divide="ignore"):  # k = 0: a token never seen has probability 0 (infinite loss if asked)
        log_p = np.log((counts + k) / (counts.sum() + k * vocab))
    return float(-log_p[_targets(test)].mean())


def bigram_loss(train: Dataset, test: Dataset, *, k: float, vocab_size: int | None = None) -> float:
    """Test loss (nats per counted token) of P(next | current) counted on the training split, add-``k`` smoothed.

    ``k = 0`` is the maximum-likelihood bigram: finite only where every test pair was seen in training.
    """
    vocab = vocab_size or _vocab_size(train, test)
    context, target = _next_token_pairs(train)
    counts = np.zeros((vocab, vocab))
    np.add.at(counts, (context, target), 1.0)
    context, target = _next_token_pairs(test)
    with np.errstate(divide="ignore"):
        log_p = np.log(counts[context, target] + k) - np.log(counts[context].sum(axis=1) + k * vocab)
    return float(-log_p.mean())


def _chosen(fit, grid: Sequence[float], default: float, validation: Dataset | None) -> float:
    """The smoothing of ``grid`` with the lowest validation loss (``fit(split, value) -> loss``); ``default``
    without a validation split."""
    if validation is None or len(validation) == 0:
        return default
    return min(grid, key=lambda value: fit(validation, value))


def _causal(train: Dataset, test: Dataset, validation: Dataset | None, *, image_blind: bool = False) -> dict:
    vocab = _vocab_size(train, test, validation)
    out = {}
    for name, loss in (("unigram", unigram_loss), ("bigram", bigram_loss)):
        k = _chosen(lambda split, k, loss=loss: loss(train, split, k=k, vocab_size=vocab), SMOOTHING_GRID,
                    DEFAULT_K, validation)
        key = f"caption_{name}" if image_blind else name
        out[key] = {"metric": "loss", "value": loss(train, test, k=k, vocab_size=vocab), "k": k,
                    "what": f"{name} counts of the training split, add-k smoothed"
                            + (", the image unread" if image_blind else "")}
    return out


# ------------------------------------------------------------------------------------------- masked text


def _masked(split: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(labels, visible): labels ``(N, L)`` (ignore index where not scored) and which positions are visible
    tokens (neither masked nor padding nor a special token)."""
    labels = split.tensors["labels"].numpy().astype(np.int64)
    inputs = split.tensors["input_ids"].numpy().astype(np.int64)
    attention = split.tensors.get("attention_mask")
    visible = (labels == IGNORE_INDEX) & ~np.isin(inputs, list(SPECIAL_TOKENS.values()))
    if attention is not None:
        visible &= attention.numpy().astype(bool)
    return labels, visible


def _training_unigram(train: Dataset, vocab: int, k: float) -> np.ndarray:
    """P(token) over every token of the training split (masked ones by their labels), add-``k`` smoothed."""
    labels, visible = _masked(train)
    inputs = train.tensors["input_ids"].numpy().astype(np.int64)
    tokens = np.concatenate([labels[labels != IGNORE_INDEX], inputs[visible]])
    counts = np.bincount(tokens, minlength=vocab).astype(np.float64)
    return (counts + k) / (counts.sum() + k * vocab)


def visible_histogram_loss(test: Dataset, prior: np.ndarray, *, strength: float) -> float:
    """Test loss (nats per masked token) of predicting each masked token from its own sequence's visible tokens:
    P(token) = (count among the visible tokens + ``strength`` × prior(token)) / (visible tokens + ``strength``).

    ``prior`` is a distribution over the vocabulary (the training unigram): where the sequence says nothing, it does.
    """
    labels, visible = _masked(test)
    inputs = test.tensors["input_ids"].numpy().astype(np.int64)
    vocab = len(prior)
    rows = np.nonzero(visible)[0]
    counts = np.zeros((len(labels), vocab))
    np.add.at(counts, (rows, inputs[visible]), 1.0)
    scored = labels != IGNORE_INDEX
    seq, _ = np.nonzero(scored)
    target = labels[scored]
    p = (counts[seq, target] + strength * prior[target]) / (visible.sum(axis=1)[seq] + strength)
    return float(-np.log(p).mean())


def _masked_baselines(train: Dataset, test: Dataset, validation: Dataset | None) -> dict:
    vocab = _vocab_size(train, test, validation)

    def unigram_on(split: Dataset, k: float) -> float:
        labels, _ = _masked(split)
        return float(-np.log(_training_unigram(train, vocab, k)[labels[labels != IGNORE_INDEX]]).mean())

    k = _chosen(unigram_on, SMOOTHING_GRID, DEFAULT_K, validation)
    prior = _training_unigram(train, vocab, k)
    strength = _chosen(lambda split, s: visible_histogram_loss(split, prior, strength=s), PRIOR_GRID, DEFAULT_PRIOR,
                       validation)
    return {
        "visible_histogram": {"metric": "loss", "value": visible_histogram_loss(test, prior, strength=strength),
                              "strength": strength, "k": k,
                              "what": "histogram of the sequence's own visible tokens, smoothed towards the "
                                      "training unigram"},
        "unigram": {"metric": "loss", "value": unigram_on(test, k), "k": k,
                    "what": "token frequencies of the training split, add-k smoothed"},
    }


# ------------------------------------------------------------------------------------------- images


def _pixels(split: Dataset) -> np.ndarray:
    # Through ``batch``, so stored uint8 images are decoded as a model sees them.
    return split.batch(torch.arange(len(split)))["pixel_values"].flatten(1).double().numpy()


def _features(train: Dataset, *others: Dataset) -> list[np.ndarray]:
    """Standardised pixels (the training split's per-pixel mean and spread), projected onto the span of the
    standardised training images.

    The projection changes no prediction: an L2-penalised linear model's weights lie in the span of its training
    inputs (the loss's gradient is a combination of them, and any component outside it only adds to the penalty),
    and the projection onto an orthonormal basis of that span keeps every inner product with it. What it changes is
    the cost: the tiny profile's 32 px images are 3,072 numbers each, upsampled digits span only 64 directions and
    256 stand-in images at most 256, and the solver's every iteration is a product with the feature matrix. With at
    least as many images as pixels there is nothing to save (and the Gram matrix would be the larger one): the
    standardised pixels are the features.
    """
    x = _pixels(train)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0  # a constant pixel (a digit's border) carries nothing and stays 0
    x = (x - mean) / scale
    if len(x) >= x.shape[1]:  # as many images as pixels (CIFAR-100 at full size): the span is the whole space
        return [x, *(((_pixels(split) - mean) / scale) for split in others)]
    # The span's basis from the n × n Gram matrix (n training images, fewer than their pixels): its eigenvectors
    # u with eigenvalue λ give the basis vectors xᵀu / √λ.
    eigenvalues, vectors = np.linalg.eigh(x @ x.T)
    keep = eigenvalues > eigenvalues.max() * 1e-10
    basis = x.T @ (vectors[:, keep] / np.sqrt(eigenvalues[keep]))
    return [x @ basis, *(((_pixels(split) - mean) / scale) @ basis for split in others)]


def logistic_regression(train: Dataset, test: Dataset, *, c: float = DEFAULT_C) -> dict:
    """Multinomial logistic regression on standardised pixels (L2, inverse strength ``c``): test top-1 accuracy and
    cross-entropy (nats per image; a class absent from training gets probability 0 and an infinite loss)."""
    with threadpool_limits(1):  # see _image_baselines
        x_train, x_test = _features(train, test)
        return _fit_and_score(x_train, train.tensors["labels"].numpy(), [(x_test, test.tensors["labels"].numpy())],
                              c=c)[0]


def _fit_and_score(x_train: np.ndarray, y_train: np.ndarray, scored: list[tuple[np.ndarray, np.ndarray]], *,
                   c: float) -> list[dict]:
    """Fit on the training features, then the accuracy and cross-entropy on each ``(features, labels)``."""
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415 - sklearn, 3.8 s: the logistic baseline only

    model = LogisticRegression(C=c, max_iter=1_000).fit(x_train, y_train)
    probabilities = [model.predict_proba(x) for x, _ in scored]
    column = {label: i for i, label in enumerate(model.classes_)}
    out = []
    for proba, (_, y) in zip(probabilities, scored, strict=True):
        known = np.array([label in column for label in y])
        p_true = np.zeros(len(y))
        p_true[known] = proba[np.nonzero(known)[0], [column[label] for label in y[known]]]
        with np.errstate(divide="ignore"):
            loss = float(-np.log(p_true).mean())
        out.append({"accuracy": float((model.classes_[proba.argmax(axis=1)] == y).mean()), "loss": loss})
    return out


def _image_baselines(train: Dataset, test: Dataset, validation: Dataset | None) -> dict:
    if train.tensors["labels"].dim() != 1:
        raise ValueError("trivial baselines of image classification take one label per image (not multi-label)")
    # One thread for numpy's BLAS and scikit-learn's OpenMP loops: beside torch's own OpenMP pool in one process
    # they spin against each other (the digits' regressions took 30 s instead of 1 on two loaded cores), and
    # problems this small gain nothing from a second thread.
    with threadpool_limits(1):
        return _image_baselines_serial(train, test, validation)


def _image_baselines_serial(train: Dataset, test: Dataset, validation: Dataset | None) -> dict:
    y_train, y_test = train.tensors["labels"].numpy(), test.tensors["labels"].numpy()
    if validation is not None and len(validation):
        # Each strength fitted once, scored on validation (which chooses) and on test (what is reported).
        x_train, x_test, x_validation = _features(train, test, validation)
        fits = {c: _fit_and_score(x_train, y_train, [(x_validation, validation.tensors["labels"].numpy()),
                                                     (x_test, y_test)], c=c) for c in C_GRID}
        c = min(C_GRID, key=lambda c: fits[c][0]["loss"])
        lr = fits[c][1]
    else:
        x_train, x_test = _features(train, test)
        c, lr = DEFAULT_C, _fit_and_score(x_train, y_train, [(x_test, y_test)], c=DEFAULT_C)[0]
    return {
        "pixel_1nn": {"metric": "accuracy", "value": pixel_nearest_neighbour_accuracy(train, test),
                      "what": "label of the nearest training image in raw pixels"},
        "logistic_regression": {"metric": "accuracy", "value": lr["accuracy"], "loss": lr["loss"], "c": c,
                                "what": "multinomial logistic regression on standardised pixels"},
    }


# ------------------------------------------------------------------------------------------- entry point


def trivial_baselines(data: Dataset | Sequence[Dataset | None] | Mapping[str, Dataset | None], kind: str
                      ) -> dict[str, dict]:
    """Every trivial baseline of a task of ``kind`` on its test split.

    Args:
        data: the training split with its test (and validation) splits attached, as a task builds it; or
            ``(train, test[, validation])``; or ``{"train": ..., "test": ..., "validation": ...}``.
        kind: the task's kind (:data:`KINDS`; ``TaskSpec.kind``).

    Returns:
        name → ``{"metric": "accuracy" | "loss", "value": ..., "what": ..., ...}`` (the smoothing chosen, an image
        baseline's cross-entropy as ``loss``). Losses are nats per scored target, as a cell's test loss is.
    """
    train, test, validation = _splits(data)
    if kind == "image_classification":
        return _image_baselines(train, test, validation)
    if kind == "causal_lm":
        return _causal(train, test, validation)
    if kind == "image_captioning":
        return _causal(train, test, validation, image_blind=True)
    if kind == "masked_lm":
        return _masked_baselines(train, test, validation)
    raise ValueError(f"no trivial baselines for {kind!r} tasks; known kinds: {', '.join(KINDS)}")


def strongest(baselines: Mapping[str, dict]) -> tuple[str, dict]:
    """The best of a task's baselines: the highest accuracy, else the lowest loss (a task's baselines share a
    metric, or accuracy wins where some are classifiers' accuracies)."""
    accuracy = {name: b for name, b in baselines.items() if b["metric"] == "accuracy"}
    if accuracy:
        return max(accuracy.items(), key=lambda item: item[1]["value"])
    finite = {name: b for name, b in baselines.items() if math.isfinite(b["value"])} or baselines
    return min(finite.items(), key=lambda item: item[1]["value"])
