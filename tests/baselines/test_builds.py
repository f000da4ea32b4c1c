"""Every baseline: published sizes on meta, tiny logits on a CIFAR-100 batch, its registry entries and prompts."""

import math

import pytest
import torch

from gradeff.axes.data import make_dataset
from gradeff.axes.methods import METHODS, apply_method
from gradeff.axes.models import MODELS, build_model
from gradeff.cell.evaluation import evaluate
from gradeff.studies.baselines.prompts import synthetic_class_tokens, tokenizer_class_tokens
from gradeff.studies.hparams import hparams_for, method_hparams_for

# The baselines with an implementation (MobileVLM's row only skips, saying why).
BASELINES = [key for key, spec in MODELS.items() if spec.family == "foundation" and not spec.unavailable]

# Published sizes of the checkpoints the paper profiles take the shape of, and the tolerance of the match.
PAPER_PARAMETERS = {
    "clip": (149.62e6, 1e-4),       # openai/clip-vit-base-patch16
    "siglip": (203.16e6, 1e-4),     # google/siglip-base-patch16-224
    "dinov2": (88.12e6, 1e-3),      # facebook/dinov2-base (86.58 M) + a 1000-class head on [CLS; mean patch]
    "smolvlm": (2.246e9, 1e-3),     # HuggingFaceTB/SmolVLM-Instruct (2.25 B)
    "vlm_prompt": (222.1e6, 1e-3),  # nanoVLM-222M: prompting adds no parameter
    "paligemma": (2.92e9, 2e-3),    # google/paligemma-3b-pt-224 ("2.92 B", rounded)
}


@pytest.fixture(scope="module")
def cifar100_batch():
    data = make_dataset("cifar100", hparams_for("vit_s", "tiny", dataset="cifar100"), 0)
    return data.batch(torch.arange(8))


def test_the_registry_holds_the_seven_baselines_with_their_own_methods():
    """clip, siglip, dinov2, smolvlm, vlm_prompt, paligemma (and mobilevlm's row): CIFAR-100 models whose methods
    exist; zero_shot does not train."""
    assert BASELINES == ["clip", "siglip", "dinov2", "smolvlm", "vlm_prompt", "paligemma"]
    assert MODELS["mobilevlm"].unavailable and MODELS["mobilevlm"].needs_weights
    for key in BASELINES:
        spec = MODELS[key]
        assert spec.task == "cifar100" and spec.methods and all(METHODS[m].key == m for m in spec.methods)
    assert MODELS["dinov2"].methods == ("linear_probe",) and MODELS["dinov2"].head == ("classifier",)
    assert not METHODS["zero_shot"].trains and METHODS["linear_probe"].trains and METHODS["full"].trains
    assert all(spec.methods == () for key, spec in MODELS.items() if key not in (*BASELINES, "mobilevlm"))


@pytest.mark.parametrize("key", BASELINES)
def test_paper_profile_has_the_published_size(key):
    """Paper configs built on the meta device match the released checkpoints' parameter counts."""
    model = build_model(key, "paper", device="meta")
    published, tolerance = PAPER_PARAMETERS[key]
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(published, rel=tolerance)


def test_paper_dinov2_backbone_is_vit_b14():
    """The DINOv2 backbone alone is ViT-B/14's 86.58 M parameters, with 14 px patches."""
    model = build_model("dinov2", "paper", device="meta")
    assert sum(p.numel() for p in model.dinov2.parameters()) == pytest.approx(86.58e6, rel=1e-4)
    assert model.config.patch_size == 14 and model.config.hidden_size == 768


@pytest.mark.parametrize("key", BASELINES)
def test_tiny_baseline_returns_class_logits_and_a_finite_loss_on_cifar100(key, cifar100_batch):
    """A tiny build on a CIFAR-100 batch: logits (batch, 100) and a finite scalar loss."""
    torch.manual_seed(0)
    model = build_model(key, "tiny", num_labels=100)
    out = model(**cifar100_batch)
    assert out.logits.shape == (8, 100)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("key", ["clip", "vlm_prompt"])
def test_zero_shot_freezes_everything_and_evaluates_like_any_classifier(key):
    """zero_shot leaves nothing trainable; the held-out evaluation reads its loss and accuracy."""
    hp = hparams_for("vit_s", "tiny", dataset="cifar100")
    heldout = make_dataset("cifar100", hp, 0).heldout
    torch.manual_seed(0)
    model = build_model(key, "tiny", num_labels=hp.num_classes)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    adapted = apply_method("zero_shot", model, method_hparams_for("full", "vit_s", "tiny"), total_steps=0)
    assert not any(p.requires_grad for p in adapted.model.parameters())
    result = evaluate(adapted.model, heldout, batch_size=128, device=torch.device("cpu"), accuracy=True)
    assert result.samples == len(heldout) and 0.0 <= result.accuracy <= 1.0
    assert math.isfinite(result.loss) and result.loss > 0
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


@pytest.mark.parametrize("classes", [2, 47, 100])
def test_synthetic_names_are_distinct_equal_length_words(classes):
    """Synthetic class names: one per class, all different, all two ordinary ids, never a reserved id."""
    tokens = synthetic_class_tokens(classes, vocab_size=128, reserved={0, 1, 2, 3, 5})
    assert len(set(tokens.names)) == classes and {len(name) for name in tokens.names} == {2}
    used = set(tokens.prompt) | {i for name in tokens.names for i in name}
    assert min(used) >= 4 and 5 not in used and max(used) < 128
    assert tokens.prompt[0] == tokens.prompt[3] and len(set(tokens.prompt)) == 3


def test_too_small_a_vocabulary_is_refused():
    """A vocabulary without enough ordinary ids for the prompt and the digits is an error, not a collision."""
    with pytest.raises(ValueError, match="ordinary ids"):
        synthetic_class_tokens(100, vocab_size=12)


def test_tokenizer_names_follow_the_prompt():
    """With a tokenizer, a name's ids are those that follow the prompt's in "a photo of a <name>"."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["<unk>", "a", "photo", "of", "maple", "tree", "apple"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    tokens = tokenizer_class_tokens(tokenizer, ["apple", "maple tree"])
    assert tokens.prompt == (1, 2, 3, 1) and tokens.names == ((6,), (4, 5)) and tokens.source == "tokenizer"
