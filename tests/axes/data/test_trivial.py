"""Trivial baselines on constructed datasets whose answers are known exactly."""

import math

import numpy as np
import pytest
import torch

from gradeff.axes.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset
from gradeff.axes.data.trivial import (
    bigram_loss,
    logistic_regression,
    strongest,
    trivial_baselines,
    unigram_loss,
    visible_histogram_loss,
)


def _text(input_ids: np.ndarray, labels: np.ndarray | None = None, **info) -> Dataset:
    ids = torch.from_numpy(np.asarray(input_ids, dtype=np.int64))
    lab = ids.clone() if labels is None else torch.from_numpy(np.asarray(labels, dtype=np.int64))
    return Dataset(task="t", tensors={"input_ids": ids, "labels": lab}, targets=(lab[:, 1:] != IGNORE_INDEX).sum(1),
                   loss_floor=None, floor_note="", info=info)


def _images(pixels: np.ndarray, labels: np.ndarray) -> Dataset:
    return Dataset(task="i", tensors={"pixel_values": torch.from_numpy(pixels.astype(np.float32)),
                                      "labels": torch.from_numpy(labels.astype(np.int64))},
                   targets=torch.ones(len(labels), dtype=torch.long), loss_floor=None, floor_note="")


# ---------------------------------------------------------------------------------------- causal text


def _chain(transition: np.ndarray, count: int, length: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    states = np.empty((count, length), dtype=np.int64)
    states[:, 0] = rng.integers(0, len(transition), count)
    for t in range(1, length):
        states[:, t] = [rng.choice(len(transition), p=transition[s]) for s in states[:, t - 1]]
    return states


def test_bigram_of_a_deterministic_chain_is_exact():
    """A cycle 0 → 1 → 2 → 0: every counted pair is seen c times, so the add-k loss is -log((c + k) / (c + kV))
    exactly; as k → 0 it reaches the chain's entropy rate, 0."""
    cycle = np.array([[0, 1, 2, 0, 1, 2, 0], [1, 2, 0, 1, 2, 0, 1]])
    data = _text(cycle)
    # Pairs: 12 in all, each of the three transitions 4 times; a context's row total is 4 as well.
    assert bigram_loss(data, data, k=0.5, vocab_size=3) == pytest.approx(-math.log(4.5 / 5.5))
    assert bigram_loss(data, data, k=0.0, vocab_size=3) == 0.0
    assert bigram_loss(data, data, k=1e-9, vocab_size=3) == pytest.approx(0.0, abs=1e-8)
    # The unigram knows nothing of order: the three targets are equally frequent, log 3.
    assert unigram_loss(data, data, k=0.0, vocab_size=3) == pytest.approx(math.log(3))


def test_maximum_likelihood_bigram_on_its_training_text_is_the_empirical_conditional_entropy():
    """On the text it counted, the k = 0 bigram's loss is H(next | current) of the empirical pairs, computed here
    independently; on fresh text of the same chain it is close to the chain's entropy rate."""
    transition = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    train, test = _text(_chain(transition, 200, 30, 0)), _text(_chain(transition, 200, 30, 1))
    pairs = np.stack([train.tensors["input_ids"][:, :-1].reshape(-1).numpy(),
                      train.tensors["input_ids"][:, 1:].reshape(-1).numpy()], axis=1)
    joint = np.zeros((3, 3))
    np.add.at(joint, (pairs[:, 0], pairs[:, 1]), 1)
    conditional = joint / joint.sum(axis=1, keepdims=True)
    expected = -(joint * np.log(conditional)).sum() / joint.sum()
    assert bigram_loss(train, train, k=0.0) == pytest.approx(expected, rel=1e-12)
    stationary = np.linalg.matrix_power(transition, 100)[0]
    entropy_rate = -(stationary[:, None] * transition * np.log(transition)).sum()
    assert bigram_loss(train, test, k=0.01) == pytest.approx(entropy_rate, abs=0.03)
    assert unigram_loss(train, test, k=0.01) > entropy_rate + 0.1  # order matters in this chain


def test_only_the_positions_the_loss_counts_are_scored():
    """A label at the ignore index is not predicted (a caption's BOS, padding): there the baseline would be
    certainly wrong, so counting it would show as an infinite loss."""
    inputs = np.array([[2, 5, 6, 0, 0], [2, 6, 5, 0, 0]])
    labels = np.array([[IGNORE_INDEX, 5, 6, IGNORE_INDEX, IGNORE_INDEX], [IGNORE_INDEX, 6, 5, IGNORE_INDEX,
                                                                         IGNORE_INDEX]])
    data = _text(inputs, labels)
    # Counted pairs: (2→5), (5→6), (2→6), (6→5). From 5 and 6 the next is certain; from 2 it is 5 or 6.
    assert bigram_loss(data, data, k=0.0, vocab_size=7) == pytest.approx(math.log(2) / 2)
    # Targets 5, 6, 6, 5: the unigram puts 1/2 on each.
    assert unigram_loss(data, data, k=0.0, vocab_size=7) == pytest.approx(math.log(2))


def test_causal_entry_point_chooses_smoothing_on_validation_never_on_test():
    """The smoothing is the one validation prefers: a test split of unseen pairs (where more smoothing helps) does
    not move it."""
    transition = np.array([[0.9, 0.1, 0.0], [0.0, 0.9, 0.1], [0.1, 0.0, 0.9]]) + 1e-12
    transition /= transition.sum(axis=1, keepdims=True)
    train, validation = _text(_chain(transition, 100, 20, 0)), _text(_chain(transition, 100, 20, 2))
    odd = _text(np.array([[0, 2, 1, 0, 2, 1]] * 4))  # only transitions training never saw
    one = trivial_baselines((train, odd, validation), "causal_lm")
    two = trivial_baselines((train, validation, validation), "causal_lm")
    assert one["bigram"]["k"] == two["bigram"]["k"]
    assert one["bigram"]["value"] > two["bigram"]["value"]
    assert set(one) == {"unigram", "bigram"} and all(b["metric"] == "loss" for b in one.values())


def test_caption_bigram_reads_no_image():
    """The captioning baseline is the bigram of the caption tokens: the same counts whatever the images."""
    inputs = np.array([[2, 5, 6, 7], [2, 6, 7, 5], [2, 5, 6, 7]])
    labels = np.concatenate([np.full((3, 1), IGNORE_INDEX), inputs[:, 1:]], axis=1)

    def captions(pixels: np.ndarray) -> Dataset:
        return Dataset(task="c", tensors={"pixel_values": torch.from_numpy(pixels.astype(np.float32)),
                                          "input_ids": torch.from_numpy(inputs), "labels": torch.from_numpy(labels)},
                       targets=torch.full((3,), 3), loss_floor=None, floor_note="")

    a = trivial_baselines((captions(np.zeros((3, 3, 2, 2))), captions(np.ones((3, 3, 2, 2)))), "image_captioning")
    b = trivial_baselines((captions(np.ones((3, 3, 2, 2))), captions(np.zeros((3, 3, 2, 2)))), "image_captioning")
    assert a == b and set(a) == {"caption_unigram", "caption_bigram"}
    assert a["caption_bigram"]["value"] == pytest.approx(bigram_loss(_text(inputs, labels), _text(inputs, labels),
                                                                     k=a["caption_bigram"]["k"], vocab_size=8))


# ---------------------------------------------------------------------------------------- masked text


def _masked(tokens: np.ndarray, masked: np.ndarray) -> Dataset:
    return Dataset(task="m", tensors={"input_ids": torch.from_numpy(np.where(masked, SPECIAL_TOKENS["mask"], tokens)),
                                      "attention_mask": torch.ones(tokens.shape, dtype=torch.long),
                                      "labels": torch.from_numpy(np.where(masked, tokens, IGNORE_INDEX))},
                   targets=torch.from_numpy(masked.sum(axis=1)), loss_floor=None, floor_note="")


def test_visible_histogram_of_a_repeated_token_is_near_certain():
    """A sequence of one repeated token, some positions masked: the visible tokens say which it is. With prior
    strength s over n visible tokens, P = (n + s·prior) / (n + s), exactly."""
    tokens = np.array([[7] * 10, [9] * 10])
    masked = np.zeros_like(tokens, dtype=bool)
    masked[:, [2, 5]] = True
    data = _masked(tokens, masked)
    prior = np.full(12, 1 / 12)
    expected = -math.log((8 + 0.5 / 12) / (8 + 0.5))
    assert visible_histogram_loss(data, prior, strength=0.5) == pytest.approx(expected)
    baselines = trivial_baselines((data, data), "masked_lm")
    # The unigram of these two sequences is a coin flip between 7 and 9; the histogram knows.
    assert baselines["unigram"]["value"] > 0.6
    assert baselines["visible_histogram"]["value"] < 0.2
    assert strongest(baselines)[0] == "visible_histogram"


def test_visible_histogram_never_counts_masked_or_special_tokens():
    """Masked positions (the [MASK] id) and special ids are not evidence: a sequence whose only visible token is
    4 predicts its masked tokens from 4's count alone."""
    tokens = np.array([[4, 5, 5, 5]])
    masked = np.array([[False, True, True, True]])
    data = _masked(tokens, masked)
    prior = np.full(8, 1 / 8)
    # One visible token (4), three masked 5s: P(5) = (0 + 1·1/8) / (1 + 1).
    assert visible_histogram_loss(data, prior, strength=1.0) == pytest.approx(-math.log(1 / 16))


# ---------------------------------------------------------------------------------------- images


def test_logistic_regression_separates_a_linearly_separable_set():
    """Two classes on either side of a hyperplane, at least 1 from it along its normal and with unit noise in the
    47 other directions (standardising the pixels is an affine map of each, which keeps them separable): the
    regression gets every test image right, where nearest neighbours, swamped by the noise, do not."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=3 * 4 * 4)
    w /= np.linalg.norm(w)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        noise = rng.normal(size=(n, 3 * 4 * 4))
        labels = rng.integers(0, 2, n)
        along = (2 * labels - 1) * rng.uniform(1.0, 2.0, n)
        x = noise - np.outer(noise @ w, w) + np.outer(along, w)
        return x.reshape(-1, 3, 4, 4), labels

    train, test = _images(*draw(400)), _images(*draw(200))
    result = logistic_regression(train, test, c=100.0)
    assert result["accuracy"] == 1.0
    assert 0 < result["loss"] < 0.2
    baselines = trivial_baselines((train, test), "image_classification")
    assert baselines["logistic_regression"]["metric"] == "accuracy"
    # Random directions in 48 dimensions: nearest neighbours are far from always right where a hyperplane is.
    assert baselines["pixel_1nn"]["value"] < baselines["logistic_regression"]["value"]


def test_nearest_neighbour_on_duplicated_points_is_exact():
    """Test images that are copies of training images take their labels: 100 %, even with labels no hyperplane
    separates (each label arbitrary)."""
    rng = np.random.default_rng(1)
    pixels, labels = rng.normal(size=(30, 1, 2, 2)), rng.integers(0, 5, 30)
    baselines = trivial_baselines((_images(pixels, labels), _images(pixels[::-1].copy(), labels[::-1].copy())),
                                  "image_classification")
    assert baselines["pixel_1nn"] == pytest.approx({"metric": "accuracy", "value": 1.0,
                                                    "what": baselines["pixel_1nn"]["what"]})


def test_a_class_unseen_in_training_costs_an_infinite_cross_entropy_but_is_still_scored():
    train = _images(np.array([[0.0], [0.1], [5.0], [5.1]]).reshape(4, 1, 1, 1), np.array([0, 0, 1, 1]))
    test = _images(np.array([[0.05], [5.05], [2.5]]).reshape(3, 1, 1, 1), np.array([0, 1, 2]))
    result = logistic_regression(train, test, c=10.0)
    assert result["accuracy"] == pytest.approx(2 / 3) and math.isinf(result["loss"])


# ---------------------------------------------------------------------------------------- entry point


def test_a_dataset_with_its_splits_attached_is_scored_on_its_test_split():
    tokens = np.array([[4, 5, 4, 5, 4, 5]] * 3)
    train = _text(tokens).with_heldout(_text(np.array([[5, 4, 5, 4, 5, 4]] * 2)))
    assert trivial_baselines(train, "causal_lm") == trivial_baselines({"train": train, "test": train.heldout},
                                                                      "causal_lm")


def test_unknown_kinds_and_missing_test_splits_are_refused():
    data = _text(np.array([[4, 5, 6]]))
    with pytest.raises(ValueError, match="no trivial baselines"):
        trivial_baselines((data, data), "regression")
    with pytest.raises(ValueError, match="test split"):
        trivial_baselines(data, "causal_lm")


def test_strongest_takes_the_highest_accuracy_or_the_lowest_finite_loss():
    assert strongest({"a": {"metric": "loss", "value": 2.0}, "b": {"metric": "loss", "value": 1.5}})[0] == "b"
    assert strongest({"a": {"metric": "accuracy", "value": 0.4}, "b": {"metric": "accuracy", "value": 0.9}})[0] == "b"
    assert strongest({"a": {"metric": "loss", "value": math.inf}, "b": {"metric": "loss", "value": 3.0}})[0] == "b"


@pytest.mark.parametrize("task", ["causal_lm", "masked_lm", "image_captioning", "image_classification"])
def test_every_main_task_gets_baselines_below_chance_and_above_its_floor(task):
    """On each main task (small sizes), every loss baseline lies between the task's floor and the uniform guess
    over its vocabulary, and every accuracy between chance and 1: counts learn something, never the impossible."""
    from gradeff.axes.data import TASKS

    sizes = dict(num_samples=64, seed=0, heldout_samples=32, validation_samples=32)
    fields = {"num_states": 20, "seq_len": 16, "num_classes": 4, "image_size": 16, "caption_len": 8}
    data = TASKS[task].build(**sizes, **{name: fields[name] for name in TASKS[task].fields if name in fields})
    baselines = trivial_baselines(data, TASKS[task].kind)
    for name, baseline in baselines.items():
        if baseline["metric"] == "loss":
            assert data.heldout.loss_floor - 1e-9 < baseline["value"] < math.log(20 + 4), name
        else:
            assert 1 / 4 < baseline["value"] <= 1.0, name


@pytest.mark.parametrize("n_train", [30, 60])
def test_projecting_onto_the_training_span_changes_no_prediction(n_train):
    """More pixels than images (48 > 30): the regression on the span's coordinates is scikit-learn's on the full
    standardised pixels, to the solver's tolerance; more images than pixels (60 > 48): the full standardised pixels
    themselves, the same figures."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(3)
    centres = rng.normal(size=(3, 48))
    y_train, y_test = np.arange(n_train) % 3, np.arange(21) % 3
    x_train = centres[y_train] + 2.0 * rng.normal(size=(n_train, 48))
    x_test = centres[y_test] + 2.0 * rng.normal(size=(21, 48))
    scaler = StandardScaler().fit(x_train)
    full = LogisticRegression(C=0.5, max_iter=10_000, tol=1e-10).fit(scaler.transform(x_train), y_train)
    proba = full.predict_proba(scaler.transform(x_test))
    got = logistic_regression(_images(x_train.reshape(n_train, 3, 4, 4), y_train),
                              _images(x_test.reshape(21, 3, 4, 4), y_test), c=0.5)
    assert got["loss"] == pytest.approx(-np.log(proba[np.arange(21), y_test]).mean(), rel=1e-3)
    assert got["accuracy"] == pytest.approx((proba.argmax(axis=1) == y_test).mean())
    assert 0 < got["accuracy"] < 1
