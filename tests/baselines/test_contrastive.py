"""Zero-shot contrastive classifiers (CLIP, SigLIP): logits, the text-embedding cache, real tokenizers."""

import pytest
import torch

from gradeff.axes.models import build_model
from gradeff.studies.baselines.classnames import CIFAR100
from gradeff.studies.baselines.contrastive import ZeroShotClassifier

KEYS = ["clip", "siglip"]
CLASSES = 10


def _model(key: str, num_labels: int = CLASSES) -> ZeroShotClassifier:
    torch.manual_seed(0)
    return build_model(key, "tiny", num_labels=num_labels).eval()


def _prototype_case(model: ZeroShotClassifier, per_class: int = 20):
    """One random prototype image per class, text embeddings set to their image embeddings, and noisy copies."""
    generator = torch.Generator().manual_seed(1)
    prototypes = torch.randn(CLASSES, 3, 32, 32, generator=generator)
    with torch.no_grad():
        model.set_class_embeddings(model.image_embeddings(prototypes))
    labels = torch.arange(CLASSES).repeat(per_class)
    images = prototypes[labels] + 0.01 * torch.randn(len(labels), 3, 32, 32, generator=generator)
    return prototypes, images, labels


@pytest.mark.parametrize("key", KEYS)
def test_text_embeddings_equal_to_class_images_classify_perfectly_and_shuffled_labels_at_chance(key):
    """Text embedding of class k = image embedding of its prototype: 100 % on its images, ~1/K on shuffled labels."""
    model = _model(key)
    prototypes, images, labels = _prototype_case(model)
    with torch.no_grad():
        out = model(pixel_values=images, labels=labels)
        shuffled = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(2))]
        wrong = model(pixel_values=images, labels=shuffled)
    assert out.logits.shape == (len(labels), CLASSES)
    assert (out.logits.argmax(-1) == labels).float().mean() == 1.0
    assert (wrong.logits.argmax(-1) == shuffled).float().mean() < 0.25
    assert wrong.loss > out.loss
    # A prototype's own logit is the model's score of a perfect match: exp(scale) · 1 (+ bias).
    with torch.no_grad():
        own = model(pixel_values=prototypes).logits.diagonal()
        expected = model.model.logit_scale.exp() + getattr(model.model, "logit_bias", torch.zeros(1))
    torch.testing.assert_close(own, expected.expand(CLASSES), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("key", KEYS)
def test_text_embeddings_are_cached_until_the_text_weights_change(key, monkeypatch):
    """Evaluation encodes the prompts once; an in-place change of a text weight makes the next call re-encode."""
    model = _model(key)
    calls = []
    encode = model.encode_text
    monkeypatch.setattr(model, "encode_text", lambda: calls.append(1) or encode())
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        first = model(pixel_values=images).logits
        again = model(pixel_values=images).logits
        assert len(calls) == 1 and torch.equal(first, again)
        weight = next(p for n, p in model.model.named_parameters() if n.startswith("text_model."))
        weight.add_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(3)))
        changed = model(pixel_values=images).logits
    assert len(calls) == 2 and not torch.allclose(first, changed)


@pytest.mark.parametrize("key", KEYS)
def test_a_trainable_text_tower_gets_gradients(key):
    """With gradients on and a trainable text tower, the prompts are encoded in the forward pass and get gradients."""
    model = _model(key).train()
    out = model(pixel_values=torch.randn(4, 3, 32, 32), labels=torch.tensor([0, 1, 2, 3]))
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == []


def _word_level_tokenizer(key: str, words: set[str]):
    """A word-level tokenizer over ``words``, with CLIP's or SigLIP's special tokens, built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "</s>", "<unk>", "<|startoftext|>"]
    vocab = {token: i for i, token in enumerate(specials + sorted(words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if key == "clip":
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<|startoftext|> $A </s>", special_tokens=[("<|startoftext|>", 3), ("</s>", 1)])
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|startoftext|>", eos_token="</s>",
                                       pad_token="</s>", unk_token="<unk>")
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="</s>", pad_token="</s>", unk_token="<unk>")


@pytest.mark.parametrize("key", KEYS)
def test_real_weights_with_a_local_tokenizer_prompt_the_real_class_names(key, tmp_path):
    """A weights folder holding a tokenizer: the prompts are its encoding of "a photo of a <CIFAR-100 name>"."""
    words = {"a", "photo", "of"} | {word for name in CIFAR100 for word in name.split()}
    tokenizer = _word_level_tokenizer(key, words)
    source = _model(key, num_labels=100)
    # A checkpoint's configuration agrees with its tokenizer's special ids.
    source.model.config.text_config.eos_token_id = tokenizer.eos_token_id
    source.model.config.text_config.pad_token_id = tokenizer.pad_token_id
    source.model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    loaded = build_model(key, "tiny", num_labels=100, weights_dir=tmp_path).eval()
    for k in (0, 47, 99):  # apple, maple tree, worm
        expected = tokenizer(f"a photo of a {CIFAR100[k]}")["input_ids"]
        row = loaded.class_input_ids[k].tolist()
        assert row[:len(expected)] == expected
        assert set(row[len(expected):]) <= {tokenizer.pad_token_id}
    assert tokenizer.convert_tokens_to_ids("maple") in loaded.class_input_ids[47].tolist()
    with torch.no_grad():
        logits = loaded(pixel_values=torch.randn(2, 3, 32, 32)).logits
    assert logits.shape == (2, 100) and torch.isfinite(logits).all()
