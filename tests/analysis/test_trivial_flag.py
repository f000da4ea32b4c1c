"""The Answer sets each line's best cell beside its task's strongest trivial baseline, on the quality metric: a best
cell that does not beat it is flagged in the "use this" text, one that beats it says by how much, and records
without baselines claim nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.analysis.answer import answer, line_text, use_text
from gradeff.analysis.metrics import METRICS
from gradeff.analysis.runs import by_cell
from gradeff.analysis.trivial import lead_p_value, strongest_baseline, trivial_check
from tests.analysis.factories import run


def _text_task(unigram: float, bigram: float) -> dict:
    return {"trivial_baselines": {
        "unigram": {"metric": "loss", "value": unigram, "k": 0.1, "what": "unigram counts"},
        "bigram": {"metric": "loss", "value": bigram, "k": 0.1, "what": "bigram counts"}}}


def _image_task(nn: float, lr: float, lr_loss: float = 1.5) -> dict:
    return {"trivial_baselines": {
        "pixel_1nn": {"metric": "accuracy", "value": nn, "what": "1-NN"},
        "logistic_regression": {"metric": "accuracy", "value": lr, "loss": lr_loss, "c": 0.1, "what": "LR"}}}


def _llm(test_adam: float, test_sgd: float, task: dict | None, seeds: int = 1) -> list:
    extra = {} if task is None else {"task": task}
    return [run(cell, seed, test=test, **extra)
            for seed in range(seeds) for cell, test in (("llm-adam-standard", test_adam),
                                                         ("llm-sgd-standard", test_sgd))]


def test_a_model_whose_best_cell_loses_to_the_bigram_is_flagged_in_its_use_line():
    """Lower is better for a loss: a best test loss of 4.42 against the bigram's 4.29 learned less than the counts."""
    (line,) = answer(_llm(4.42, 4.9, _text_task(5.0, 4.29)))
    assert line.flagged and line.trivial.baseline.name == "bigram"
    assert use_text(line).endswith("— its best cell learned less than the bigram count model (4.42 against 4.29)")
    assert line_text(line).startswith("llm: use adam for now")  # one seed each: quality is open
    assert "learned less than the bigram count model (4.42 against 4.29)" in line_text(line).split(" | ")[0]


def test_a_model_that_beats_the_strongest_baseline_says_by_how_much_beside_its_quality():
    (line,) = answer(_llm(3.0, 3.5, _text_task(4.4, 3.2)))
    assert not line.flagged and line.trivial.beaten
    assert line.trivial.margin == pytest.approx(0.2)
    assert "learned less" not in line_text(line)
    quality = line_text(line).split(" | ")[1]
    assert quality.startswith("test loss: ") and quality.endswith(" · beats the bigram count model (3.2) by 0.2")


def test_accuracy_is_higher_is_better_and_in_percent():
    """Image classification's metric is test top-1 (%): the baselines' fractions are read in percent, the strongest
    is the highest, and a best cell at or below it is flagged."""
    records = [run("vit-adam-standard", accuracy=0.60, task=_image_task(0.39, 0.64)),
               run("vit-sgd-standard", accuracy=0.30, task=_image_task(0.39, 0.64))]
    (line,) = answer(records)
    assert line.trivial.baseline.name == "logistic_regression" and line.trivial.baseline.value == pytest.approx(64.0)
    assert line.flagged
    assert "its best cell learned less than the logistic regression on pixels (60.0 % against 64.0 %)" in \
        use_text(line)
    (good,) = answer([run("vit-adam-standard", accuracy=0.90, task=_image_task(0.39, 0.64))])
    assert not good.flagged and line_text(good).split(" | ")[1].endswith(
        "· beats the logistic regression on pixels (64.0 %) by 26.0 points")
    # Equal is not better: a best cell level with the baseline is flagged too.
    (level,) = answer([run("vit-adam-standard", accuracy=0.64, task=_image_task(0.39, 0.64))])
    assert level.flagged and "learned no more than the logistic regression" in use_text(level)


def test_records_without_baselines_claim_nothing():
    """Older records (no trivial_baselines field), a None field, or a metric no baseline has: no check, no words."""
    for task in (None, {"trivial_baselines": None}, {"trivial_baselines": {}}):
        (line,) = answer(_llm(4.42, 4.9, task))
        assert line.trivial is None and not line.flagged
        assert "learned" not in line_text(line) and "beats the" not in line_text(line)
    # Text baselines say nothing about an accuracy, nor image ones about a loss.
    only_loss = run("vit-adam-standard", accuracy=0.5, task=_text_task(4.0, 3.0))
    assert strongest_baseline([only_loss], METRICS["heldout_accuracy"]) is None
    assert strongest_baseline([only_loss], METRICS["test_f1"]) is None


def test_the_check_pairs_the_best_cell_with_its_own_seeds_baselines():
    """Each seed draws its own data, so its own baselines: the best cell's mean is set against the mean of the same
    seeds' baselines, and a seed whose record lacks them is left out of both."""
    records = [run("llm-adam-standard", 0, test=3.0, task=_text_task(4.0, 3.4)),
               run("llm-adam-standard", 1, test=3.2, task=_text_task(4.0, 3.6)),
               run("llm-adam-standard", 2, test=9.0)]
    (best,) = by_cell(records).values()
    check = trivial_check(best, METRICS["test_loss"])
    assert check.baseline.by_seed == {0: 3.4, 1: 3.6}
    assert check.best == pytest.approx(3.1) and check.baseline.value == pytest.approx(3.5)
    assert check.beaten and check.margin == pytest.approx(0.4)


def test_a_flagged_peft_line_says_it_once():
    """The PEFT line's raw-pixel sanity note is left out where the trivial flag already says no cell beat the
    strongest baseline; without baselines the sanity note still speaks."""
    task = _image_task(0.35, 0.20) | {"sanity_accuracy": 0.35}
    flagged = [run("vit_s-lora-standard-cifar100", grid="peft", accuracy=0.30, task=task),
               run("vit_s-full-standard-cifar100", grid="peft", accuracy=0.20, task=task)]
    (line,) = answer(flagged)
    assert line.flagged and line.trivial.baseline.name == "pixel_1nn" and line.notes == ()
    assert "learned less than the raw-pixel 1-NN (30.0 % against 35.0 %)" in use_text(line)
    unflagged = [run(r.cell, grid="peft", accuracy=0.30 if "lora" in r.cell else 0.20,
                     task={"sanity_accuracy": 0.35}) for r in flagged]
    (plain,) = answer(unflagged)
    assert plain.trivial is None and plain.notes and "raw-pixel nearest-neighbour" in plain.notes[0]


def test_a_failed_best_cell_or_no_ranking_claims_nothing():
    records = [run("llm-adam-standard", status="diverged", task=_text_task(4.0, 3.0))]
    (line,) = answer(records)
    assert line.trivial is None and not line.flagged


def test_an_accuracys_lead_of_a_few_test_images_is_not_shown():
    """12.1 % against a 1-NN's 7.8 % on 256 test images is 11 images (one-sided p ≈ 0.05): flagged as not shown;
    the same lead on four seeds' 1,024 images is shown, and beats."""
    task = _image_task(0.078125, 0.05) | {"heldout_samples": 256}
    (line,) = answer([run("vit_s-lora-standard-cifar100", grid="peft", accuracy=0.12109375, task=task)])
    assert line.flagged and line.trivial.ahead and not line.trivial.beaten and line.trivial.images == 256
    assert line.trivial.p_value == pytest.approx(lead_p_value(31, 20, 256)) and 0.05 < line.trivial.p_value < 0.06
    assert "not shown to beat the raw-pixel 1-NN (12.1 % against 7.8 %; one-sided p = 0.05 over 256 test images)" \
        in use_text(line)
    (seeds,) = answer([run("vit_s-lora-standard-cifar100", seed, grid="peft", accuracy=0.12109375, task=task)
                       for seed in range(4)])
    assert seeds.trivial.images == 1024 and seeds.trivial.beaten and not seeds.flagged


@given(right=st.integers(0, 500), baseline=st.integers(0, 500), extra=st.integers(1, 50))
def test_the_lead_p_value_is_a_probability_that_falls_as_the_lead_grows(right, baseline, extra):
    images = 500
    p = lead_p_value(right, baseline, images)
    assert 0.0 <= p <= 1.0
    if right + extra <= images:
        assert lead_p_value(right + extra, baseline, images) <= p
    if right == baseline:
        assert p == pytest.approx(0.5) or right in (0, images)


def test_a_split_of_unknown_size_compares_means():
    (line,) = answer([run("vit-adam-standard", accuracy=0.70, task=_image_task(0.39, 0.64))])
    assert line.trivial.p_value is None and line.trivial.beaten
