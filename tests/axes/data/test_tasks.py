"""Synthetic tasks: deterministic, learnable, with correct loss floors."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradeff.axes.data import IGNORE_INDEX, SPECIAL_TOKENS, TASKS, epoch_order, make_dataset
from gradeff.axes.data.markov import make_chain
from gradeff.axes.data.text import masked_posteriors
from gradeff.axes.models import MODELS
from gradeff.studies.hparams import hparams_for


@pytest.mark.parametrize("model", list(MODELS))
def test_same_seed_same_data_other_seed_other_data(model):
    """A task's tensors depend on the seed alone."""
    hp = hparams_for(model, "tiny")
    task = MODELS[model].task
    a, b, c = make_dataset(task, hp, 0), make_dataset(task, hp, 0), make_dataset(task, hp, 1)
    assert all(torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors)
    assert any(not torch.equal(a.tensors[k], c.tensors[k]) for k in a.tensors)
    assert a.loss_floor == b.loss_floor


@pytest.mark.parametrize("model", list(MODELS))
def test_floor_is_below_chance(model):
    """The Bayes floor is non-negative and far below the loss of guessing uniformly (positive where noise hides
    classes)."""
    hp = hparams_for(model, "tiny")
    data = make_dataset(MODELS[model].task, hp, 0)
    classifies = TASKS[MODELS[model].task].kind == "image_classification"
    chance = math.log(hp.num_classes if classifies else hp.num_states)
    assert 0 <= data.loss_floor < 0.8 * chance
    if MODELS[model].task not in ("cifar100", "dtd"):  # their classes are far apart: a Bayes floor of ~0
        assert data.loss_floor > 0


@pytest.mark.parametrize("dataset", ["cifar100", "dtd"])
def test_fine_tuning_datasets_have_a_heldout_split_with_its_own_samples(dataset):
    """cifar100/dtd: the real class counts, a held-out split of other samples of the same classes, Bayes accuracy,
    and a raw-pixel 1-NN far below it (the stand-ins need features)."""
    hp = hparams_for("vit_s", "tiny", dataset=dataset)
    data = make_dataset(dataset, hp, 0)
    heldout = data.heldout
    assert hp.num_classes == {"cifar100": 100, "dtd": 47}[dataset]
    assert len(data) == hp.train_samples and len(heldout) == hp.heldout_samples
    assert not any(torch.equal(a, b) for a in heldout.tensors["pixel_values"][:8] for b in data.tensors["pixel_values"])
    assert 0.9 <= heldout.info["bayes_accuracy"] <= 1.0
    assert heldout.info["sanity_accuracy"] < 0.2
    # The same seed gives the two datasets different classes.
    other_key = "dtd" if dataset == "cifar100" else "cifar100"
    other = make_dataset(other_key, hparams_for("vit_s", "tiny", dataset=other_key), 0)
    assert not torch.equal(other.tensors["pixel_values"][:1], data.tensors["pixel_values"][:1])


def test_heldout_split_leaves_the_training_samples_unchanged():
    """Asking for a held-out split appends samples after the training ones: the training set is the same."""
    from gradeff.axes.data.images import image_classification

    without = image_classification(num_classes=10, image_size=32, num_samples=16, seed=3)
    with_heldout = image_classification(num_classes=10, image_size=32, num_samples=16, seed=3, heldout_samples=8)
    assert torch.equal(without.tensors["pixel_values"], with_heldout.tensors["pixel_values"])
    assert without.heldout is None and len(with_heldout.heldout) == 8


def test_mixed_grids_split_the_classes():
    """Several template grids: class c uses grid[c % n], each constant on its own blocks."""
    import numpy as np

    from gradeff.axes.data.images import make_templates

    templates = make_templates(num_classes=4, image_size=16, rng=np.random.default_rng(0), grid=(4, 8))
    coarse, fine = templates[0], templates[1]
    assert np.all(coarse[:, :4, :4] == coarse[:, 0:1, 0:1])  # 4×4-pixel blocks of the 4-block grid
    assert np.all(fine[:, :2, :2] == fine[:, 0:1, 0:1]) and not np.all(fine[:, :4, :4] == fine[:, 0:1, 0:1])


def test_epoch_order_is_a_fixed_permutation():
    """Each epoch is a permutation fixed by (seed, epoch); epochs differ."""
    first = epoch_order(64, seed=0, epoch=0)
    assert torch.equal(first, epoch_order(64, seed=0, epoch=0))
    assert sorted(first.tolist()) == list(range(64))
    assert not torch.equal(first, epoch_order(64, seed=0, epoch=1))


def test_markov_entropy_rate_matches_sampled_text():
    """The empirical -log P of long sampled text converges to the analytic entropy rate."""
    rng = np.random.default_rng(0)
    chain = make_chain(20, rng)
    states = chain.sample(rng, 200, 500)
    empirical = -np.log(chain.transition[states[:, :-1], states[:, 1:]]).mean()
    assert empirical == pytest.approx(chain.entropy_rate(), rel=0.02)
    pi = chain.stationary()
    assert np.allclose(pi @ chain.transition, pi, atol=1e-12)


def test_masked_posterior_matches_brute_force():
    """Forward-backward equals enumerating every completion of the masked positions."""
    rng = np.random.default_rng(3)
    chain = make_chain(4, rng, concentration=0.5)
    states = chain.sample(rng, 1, 6)
    masked = np.array([[False, True, True, False, True, False]])
    got = masked_posteriors(chain, states, masked)[0]
    pi, p = chain.stationary(), chain.transition
    hidden = np.flatnonzero(masked[0])
    joint = {}
    for combo in np.ndindex(*(4,) * len(hidden)):
        seq = states[0].copy()
        seq[hidden] = combo
        joint[combo] = pi[seq[0]] * np.prod(p[seq[:-1], seq[1:]])
    total = sum(joint.values())
    for j, position in enumerate(hidden):
        true = states[0, position]
        marginal = sum(v for combo, v in joint.items() if combo[j] == true) / total
        assert got[position] == pytest.approx(marginal, rel=1e-10)
    assert np.all(got[~masked[0]] == 1.0)


def test_masked_lm_masks_about_30_percent():
    """30 % of positions (ModernBERT's rate; plus one guaranteed per sequence) are [MASK] and are the only targets."""
    hp = hparams_for("modernbert", "small")
    data = make_dataset("masked_lm", hp, 0)
    ids, labels = data.tensors["input_ids"], data.tensors["labels"]
    is_mask = ids == SPECIAL_TOKENS["mask"]
    assert TASKS["masked_lm"].options["mask_prob"] == 0.3
    assert torch.equal(is_mask, labels != IGNORE_INDEX)
    assert 0.29 < is_mask.float().mean() < 0.32
    assert torch.equal(data.targets, is_mask.sum(dim=1))


def test_a_caption_is_written_in_its_images_class_topic():
    """The class a caption's words make likeliest under the classes' topics is the class the image's motifs make
    likeliest, for nearly every sample (8 words of a peaked topic, and an image's exact class posterior, each
    decide their class alone, so they agree far above the 1 in 10 of chance); and the floor uses the image: it lies
    below the best any image-blind predictor of the same words reaches."""
    from gradeff.axes.data.images import captioning_world
    from gradeff.axes.data.text import FIRST_STATE_TOKEN

    hp = hparams_for("vlm", "tiny")
    data = make_dataset("image_captioning", hp, 0)
    assert data.tensors["labels"][:, 0].eq(IGNORE_INDEX).all()
    motifs, topics, _ = captioning_world(num_classes=hp.num_classes, image_size=hp.image_size,
                                         num_states=hp.num_states, seed=0, **TASKS["image_captioning"].options)
    words = data.tensors["labels"][:, 1:].numpy() - FIRST_STATE_TOKEN
    by_words = np.log(topics.distributions)[:, words].sum(axis=2).argmax(axis=0)
    images = data.tensors["pixel_values"].numpy().astype(np.float64)
    blocks = images.reshape(len(images), 3, 4, 8, 4, 8).transpose(0, 2, 4, 1, 3, 5).reshape(len(images), 16, 3, 8, 8)
    by_image = motifs.log_posterior(blocks).argmax(axis=1)
    assert (by_words == by_image).mean() > 0.9
    blind = -np.log(topics.predictive(words)).mean()
    assert data.loss_floor < blind - 0.1


def test_topic_predictive_matches_brute_force():
    """Causal topic text: P(s_t | s_<t[, a prior on the topic]) equals enumerating the topics by hand."""
    from gradeff.axes.data.text import Topics

    rng = np.random.default_rng(2)
    topics = Topics(rng.dirichlet(np.full(5, 0.5), size=3))
    states = topics.sample(rng, 4, 6)
    log_prior = np.log(rng.dirichlet(np.ones(3), size=4))
    for prior in (None, log_prior):
        got = topics.predictive(states, log_prior=prior)
        for n in range(4):
            for t in range(6):
                weights = np.exp(prior[n]) if prior is not None else np.ones(3)
                weights = weights * np.array([np.prod(topics.distributions[k, states[n, :t]]) for k in range(3)])
                weights /= weights.sum()
                assert got[n, t] == pytest.approx(weights @ topics.distributions[:, states[n, t]], rel=1e-9)


def test_causal_topic_text_needs_more_than_the_previous_token():
    """The causal task's floor lies well below what a bigram count of its training split reaches on its test split
    (the previous token says little of the topic), and its Markov variant's floor is the chain's own."""
    from gradeff.axes.data.trivial import trivial_baselines

    hp = hparams_for("llm", "tiny")
    data = make_dataset("causal_lm", hp, 0)
    assert TASKS["causal_lm"].options["num_topics"] == 16 and data.heldout.info["num_topics"] == 16
    bigram = trivial_baselines(data, "causal_lm")["bigram"]["value"]
    assert data.heldout.loss_floor < bigram - 0.5
    from gradeff.axes.data.text import causal_lm

    markov = causal_lm(num_states=20, seq_len=16, num_samples=400, seed=0)
    assert "entropy_rate" in markov.info and markov.loss_floor == pytest.approx(markov.info["entropy_rate"], rel=0.1)


def test_task_needs_its_hyperparameters():
    """A task built without its sizes names what is missing."""
    hp = hparams_for("vit", "tiny")
    with pytest.raises(ValueError, match="seq_len"):
        make_dataset("causal_lm", hp, 0)
    assert set(TASKS) == {"causal_lm", "masked_lm", "image_classification", "image_captioning", "cifar100", "dtd",
                          "digits", "pydoc", "images", "text", "mmimdb", "mmimdb_genres"}
    with pytest.raises(ValueError, match="'digits' is real data"):
        make_dataset("digits", hp, 0)


def _rows(split, name):
    return {bytes(row.numpy().tobytes()) for row in split.tensors[name]}


@pytest.mark.parametrize("model", ["vit", "modernbert", "llm", "vlm"])
def test_the_three_splits_are_disjoint(model):
    """Training, test and validation splits of every main task share no sample, and have the profile's sizes."""
    hp = hparams_for(model, "tiny")
    data = make_dataset(MODELS[model].task, hp, 0)
    assert (len(data), len(data.heldout), len(data.validation)) == \
        (hp.train_samples, hp.heldout_samples, hp.validation_samples)
    name = "pixel_values" if "pixel_values" in data.tensors else "input_ids"
    train, test, validation = (_rows(split, name) for split in (data, data.heldout, data.validation))
    assert len(train) == len(data) and len(test) == len(data.heldout)  # no repeats inside a split either
    assert not train & test and not train & validation and not test & validation


def test_the_splits_are_stratified():
    """Every split holds every class, in shares that differ by at most one sample (the captioning task's images are
    the same draw, :meth:`gradeff.axes.data.images.Motifs.sample`)."""
    hp = hparams_for("vit", "tiny")
    data = make_dataset("image_classification", hp, 0)
    for split in (data, data.heldout, data.validation):
        counts = torch.bincount(split.tensors["labels"]).tolist()
        assert len(counts) == hp.num_classes and max(counts) - min(counts) <= 1, counts


def test_adding_a_validation_split_leaves_the_others_unchanged():
    """The validation split is drawn after the test split: asking for it changes neither training nor test."""
    hp = hparams_for("vit", "tiny")
    without = make_dataset("image_classification", dataclasses.replace(hp, validation_samples=0), 0)
    with_validation = make_dataset("image_classification", hp, 0)
    assert torch.equal(without.tensors["pixel_values"], with_validation.tensors["pixel_values"])
    assert torch.equal(without.heldout.tensors["pixel_values"], with_validation.heldout.tensors["pixel_values"])
    assert without.validation is None and len(with_validation.validation) == hp.validation_samples


def test_motif_posterior_is_the_bayes_rule():
    """The motif task's class posterior equals Bayes' rule computed directly from the Gaussian likelihoods."""
    from scipy.special import logsumexp

    from gradeff.axes.data.images import Motifs

    rng = np.random.default_rng(0)
    motifs = Motifs.draw(num_classes=3, num_motifs=4, block=2, rng=rng, amplitude=1.0, concentration=1.0)
    images, classes, log_post = motifs.sample(5, 2, rng)
    blocks = images.reshape(5, 3, 2, 2, 2, 2).transpose(0, 2, 4, 1, 3, 5).reshape(5, 4, -1).astype(np.float64)
    patterns = motifs.patterns.reshape(4, -1)
    for n in range(5):
        per_class = []
        for c in range(3):
            per_block = [logsumexp([np.log(motifs.mixtures[c, m]) - 0.5 * ((b - patterns[m]) ** 2).sum()
                                    for m in range(4)]) for b in blocks[n]]
            per_class.append(sum(per_block))
        expected = np.array(per_class) - logsumexp(per_class)
        assert np.allclose(log_post[n], expected, atol=1e-4)  # images are float32


def test_topic_posterior_matches_brute_force():
    """Topic text: the masked-token posterior equals enumerating the topics by hand."""
    from gradeff.axes.data.text import Topics

    rng = np.random.default_rng(1)
    topics = Topics(rng.dirichlet(np.full(5, 0.5), size=3))
    states = topics.sample(rng, 4, 6)
    masked = rng.random(states.shape) < 0.4
    masked[:, 0] = True
    got = topics.posteriors(states, masked)
    for n in range(4):
        visible = states[n][~masked[n]]
        weights = np.array([np.prod(topics.distributions[k, visible]) for k in range(3)])
        weights /= weights.sum()
        for t in np.flatnonzero(masked[n]):
            assert got[n, t] == pytest.approx(weights @ topics.distributions[:, states[n, t]], rel=1e-9)
    assert np.all(got[~masked] == 1.0)


@pytest.mark.parametrize("model", list(MODELS))
def test_a_batch_is_the_samples_rows_in_the_order_asked(model):
    """``Dataset.batch`` gives each tensor's rows at the indices, in their order and with repeats, decoded as the
    dataset says (the row-by-row reference below shares nothing with its gather)."""
    data = make_dataset(MODELS[model].task, hparams_for(model, "tiny"), 0)
    indices = torch.tensor([5, 0, len(data) - 1, 5, 3])
    batch = data.batch(indices)
    assert set(batch) == set(data.tensors)
    for name, tensor in data.tensors.items():
        rows = torch.stack([tensor[int(i)] for i in indices])
        if name in data.decode:
            scale, offset = data.decode[name]
            rows = rows.float() * scale + offset
        assert batch[name].dtype == rows.dtype
        assert torch.equal(batch[name], rows), name
        # The layout advanced indexing gives, which a convolution's last bits depend on.
        assert _layout(batch[name]) == _layout(tensor[indices]), name


def _layout(tensor):
    return [stride for stride, size in zip(tensor.stride(), tensor.shape) if size > 1]


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       order=st.randoms(use_true_random=False), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=6))
def test_a_gather_is_advanced_indexing_in_values_and_layout(shape, order, picks):
    """Whatever layout a dataset's tensor is stored in (any permutation of its dimensions in memory), a batch holds
    exactly ``tensor[indices]``: the same values, in the same layout."""
    from gradeff.axes.data.dataset import _gather

    shape = [max(shape[0], 2), *shape[1:]]
    memory = list(range(len(shape)))
    order.shuffle(memory)
    stored = torch.randn([shape[d] for d in memory]).permute([memory.index(d) for d in range(len(shape))])
    indices = torch.tensor([p % shape[0] for p in picks])
    gathered = _gather(stored, indices)
    assert torch.equal(gathered, stored[indices]) and _layout(gathered) == _layout(stored[indices])
