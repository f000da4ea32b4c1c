"""The claims engine: crafted records give each verdict, with the figures and the rule."""

import pytest

from gradeff.analysis.claims import CONTRADICTED, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, evaluate_claims


def _claim(records, key):
    (result,) = [r for r in evaluate_claims(records, study="peft") if r.key == key]
    return result


def _cheap(make_peft_record, *, full_joules=100.0, cheap_joules=75.0, full_acc=0.80, cheap_acc=0.785):
    return [make_peft_record(method="full", accuracies=(full_acc,), seconds=(1.0,), joules=full_joules),
            make_peft_record(method="qlora", accuracies=(cheap_acc,), seconds=(1.0,), joules=cheap_joules),
            make_peft_record(method="bitfit", accuracies=(cheap_acc,), seconds=(1.0,), joules=cheap_joules)]


@pytest.mark.parametrize(("cheap_joules", "cheap_acc", "verdict"), [
    (75.0, 0.785, REPRODUCED),        # 25 % less energy for 1.5 points
    (98.0, 0.785, NOT_REPRODUCED),    # 2 % less energy: not the claimed cut
    (130.0, 0.785, CONTRADICTED),     # more energy than full fine-tuning
])
def test_cheap_methods_verdicts(make_peft_record, cheap_joules, cheap_acc, verdict):
    """QLoRA/BitFit vs full: reproduced in range, not reproduced out of it, contradicted when they cost more energy."""
    result = _claim(_cheap(make_peft_record, cheap_joules=cheap_joules, cheap_acc=cheap_acc), "cheap_methods")
    assert result.verdict == verdict
    assert "energy cut median" in result.measured and "n=2" in result.measured
    assert "tiny profile" in result.scale


def test_a_claim_without_its_cells_is_not_measurable(make_peft_record):
    """No full fine-tuning cell: n/a, said why, and no scale caveat on a verdict that was not reached."""
    result = _claim([make_peft_record(method="qlora")], "cheap_methods")
    assert (result.verdict, result.measured, result.scale) == (NOT_MEASURABLE, "n/a", "")
    assert "full fine-tuning" in result.why


def _budget_pair(make_peft_record, *, peak_std, peak_budget, joules_std=100.0, joules_budget=115.0, blocks=2):
    standard = make_peft_record(method="lora", accuracies=(0.7,), seconds=(1.0,), joules=joules_std)
    budget = make_peft_record(method="lora", strategy="budget", accuracies=(0.7,), seconds=(1.2,), joules=joules_budget,
                              plan={"kind": "adaptive", "checkpointed_layers": blocks, "layers": 4})
    for record, peak in ((standard, peak_std), (budget, peak_budget)):
        record.meters["memory"]["peak_bytes"] = peak
    return [standard, budget]


@pytest.mark.parametrize(("peak_budget", "blocks", "verdict"), [
    (40, 2, REPRODUCED),         # 60 % less peak for 15 % more energy
    (90, 2, NOT_REPRODUCED),     # 10 % less: short of 43–79 %
    (120, 2, CONTRADICTED),      # more memory than standard
    (40, 0, NOT_MEASURABLE),     # it fit without checkpointing: nothing adaptive to judge
])
def test_adaptive_memory_verdicts(make_peft_record, peak_budget, blocks, verdict):
    """Adaptive vs standard on the live peak: the paper's range, a shortfall, an increase, no checkpointing at all."""
    records = _budget_pair(make_peft_record, peak_std=100, peak_budget=peak_budget, blocks=blocks)
    assert _claim(records, "adaptive_memory").verdict == verdict


def test_dinov2_claim_needs_real_or_pretrained_weights(make_peft_record):
    """Random DINOv2: not measurable; pretrained and ahead at lower energy: reproduced; behind: contradicted."""
    tuned = make_peft_record(method="full", accuracies=(0.80,), seconds=(1.0,), joules=100.0)
    probe = dict(model="dinov2", method="linear_probe", seconds=(1.0,), grid="baselines")

    def dino(accuracy, joules, source="pretrained"):
        return make_peft_record(**probe, accuracies=(accuracy,), joules=joules, weights={"source": source},
                                cell="dinov2-linear_probe-cifar100")

    assert _claim([tuned, dino(0.9, 10.0, "random")], "dinov2").verdict == NOT_MEASURABLE
    assert _claim([tuned, dino(0.9, 10.0)], "dinov2").verdict == REPRODUCED
    assert _claim([tuned, dino(0.9, 150.0)], "dinov2").verdict == NOT_REPRODUCED
    assert _claim([tuned, dino(0.5, 10.0)], "dinov2").verdict == CONTRADICTED


def test_prompted_vlms_at_chance_from_random_weights_are_not_evidence(make_peft_record):
    """Random-weight prompted VLMs are not measurable; with real weights, 30 points behind is uncompetitive."""
    tuned = make_peft_record(method="full", accuracies=(0.80,), seconds=(1.0,))

    def prompted(accuracy, source):
        return make_peft_record(model="smolvlm", method="zero_shot", grid="baselines", accuracies=(accuracy,),
                                seconds=(1.0,), weights={"source": source}, cell="smolvlm-zero_shot-cifar100")

    assert _claim([tuned, prompted(0.01, "random")], "prompted_vlms").verdict == NOT_MEASURABLE
    assert _claim([tuned, prompted(0.50, "local")], "prompted_vlms").verdict == REPRODUCED
    assert _claim([tuned, prompted(0.95, "local")], "prompted_vlms").verdict == CONTRADICTED


def _main_claim(records, key):
    (result,) = [r for r in evaluate_claims(records, study="main") if r.key == key]
    return result


def test_checkpointing_that_leaves_the_loss_unchanged_contradicts_the_paper(make_record):
    """Equal losses with and without checkpointing: the paper's loss changes are contradicted, with the reason."""
    records = [make_record("llm-adam-standard", losses=(3.0, 2.5)), make_record("llm-adam-checkpoint", losses=(3.0, 2.5))]
    result = _main_claim(records, "checkpoint_loss")
    assert result.verdict == CONTRADICTED and "bit-identical gradients" in result.why
    changed = [make_record("llm-adam-standard", losses=(3.0, 2.5)), make_record("llm-adam-checkpoint", losses=(3.0, 2.0))]
    assert _main_claim(changed, "checkpoint_loss").verdict == REPRODUCED


@pytest.mark.parametrize(("accum_seconds", "verdict"), [(0.77, REPRODUCED), (0.98, NOT_REPRODUCED),
                                                         (1.30, CONTRADICTED)])
def test_accumulation_time_against_the_paper(make_record, accum_seconds, verdict):
    """ViT with adaptive optimizers at −23 %: reproduced; −2 %: not reproduced; slower: contradicted."""
    records = []
    for optimizer in ("adam", "adagrad"):
        records += [make_record(f"vit-{optimizer}-standard", seconds=(1.0, 1.0)),
                    make_record(f"vit-{optimizer}-accum", seconds=(accum_seconds, accum_seconds))]
    assert _main_claim(records, "accum_time").verdict == verdict


def test_fastest_optimizer_over_seeds_ties_when_seeds_overlap(make_record):
    """Three seeds whose times overlap: SGD ties with Adam for fastest, so "SGD fastest" holds; one seed says so."""
    records = [make_record("vit-sgd-standard", seed=s, seconds=(t, t)) for s, t in enumerate((1.0, 1.2, 0.9))]
    records += [make_record("vit-adam-standard", seed=s, seconds=(t, t)) for s, t in enumerate((1.1, 0.95, 1.05))]
    result = _main_claim(records, "sgd_fastest")
    assert result.verdict == REPRODUCED and "adam, sgd" in result.measured and "one seed" not in result.why
    single = _main_claim([make_record("vit-sgd-standard", seconds=(2.0, 2.0)),
                          make_record("vit-adam-standard", seconds=(1.0, 1.0))], "sgd_fastest")
    assert single.verdict == CONTRADICTED and "single draw" in single.why


def test_llm_losses_far_above_uniform_cannot_be_per_token_means(make_record):
    """Per-token losses at most ln V contradict the paper's 60–1000; GPU and RAM claims need what they need."""
    records = [make_record("llm-adam-standard", losses=(4.8, 4.5), hparams={"num_states": 124})]
    assert _main_claim(records, "llm_loss_scale").verdict == CONTRADICTED
    assert _main_claim(records, "llm_gpu_util").verdict == NOT_MEASURABLE
    assert "--gradeff-isolate" in _main_claim(records, "adam_most_ram").why
