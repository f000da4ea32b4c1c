"""Prompted VLM classifiers (SmolVLM, nanoVLM): one-pass class scoring, and the class the decoder prefers wins."""

import pytest
import torch
from torch import nn

from gradeff.axes.models import build_model
from gradeff.axes.models.vlm import build as build_vlm
from gradeff.studies.baselines.prompted import tree_attention
from gradeff.studies.baselines.prompts import ClassTokens
from gradeff.studies.baselines.vlm_prompt import PromptedNanoVLM

KEYS = ["smolvlm", "vlm_prompt"]


def _model(key: str, num_labels: int = 100):
    torch.manual_seed(0)
    return build_model(key, "tiny", num_labels=num_labels).eval()


def _lm_head(model) -> nn.Linear:
    return model.model.lm_head if hasattr(model, "model") else model.vlm.decoder.lm_head


def _one_sequence_per_class(model, pixel_values) -> torch.Tensor:
    """Reference scores: each class's prompt + name decoded as its own causal sequence."""
    prefix = model.prefix(pixel_values)
    batch, length = prefix.shape[:2]
    scores = []
    for ids, mask in zip(model.name_ids, model.name_mask):
        ids = ids[mask]
        inputs = torch.cat([prefix, model.embed(ids).expand(batch, -1, -1)], dim=1)
        causal = torch.full((inputs.shape[1],) * 2, torch.finfo(inputs.dtype).min).triu(1)
        positions = torch.arange(inputs.shape[1]).expand(batch, -1)
        hidden = model.decode(inputs, causal.expand(batch, 1, -1, -1), positions)
        log_probs = model.head(hidden).float().log_softmax(-1)
        scores.append(sum(log_probs[:, length - 1 + j, token] for j, token in enumerate(ids.tolist())))
    return torch.stack(scores, dim=1)


def test_tree_attention_sees_the_prefix_and_its_own_branch_only():
    """Branch token (k, j) attends to the whole prefix and to (k, 0..j); its position is prefix + j."""
    allowed, positions = tree_attention(3, 2, 2)
    assert positions.tolist() == [0, 1, 2, 3, 4, 3, 4]
    assert allowed[:3, :3].equal(torch.ones(3, 3, dtype=torch.bool).tril())
    assert allowed[3:, :3].all() and not allowed[:3, 3:].any()
    assert allowed[4, 3:].tolist() == [True, True, False, False]
    assert allowed[6, 3:].tolist() == [False, False, True, True]


@pytest.mark.parametrize("key", KEYS)
def test_one_pass_scores_equal_one_sequence_per_class(key):
    """All classes scored in one tree-masked pass give the log-likelihoods of decoding each class on its own."""
    model = _model(key, num_labels=12)
    pixel_values = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = _one_sequence_per_class(model, pixel_values)
        torch.testing.assert_close(model(pixel_values=pixel_values).logits, expected, rtol=1e-4, atol=1e-4)


def test_names_of_different_lengths_are_scored_on_their_own_tokens():
    """Right-padded names (a tokenizer's names differ in length) score exactly their tokens, not the padding."""
    torch.manual_seed(0)
    tokens = ClassTokens(prompt=(4, 5, 6, 4), names=((7,), (8, 9, 10), (9, 7), (10, 10, 10, 11)), source="tokenizer")
    model = PromptedNanoVLM(build_vlm("tiny"), tokens, bos=2, pad=0).eval()
    pixel_values = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = _one_sequence_per_class(model, pixel_values)
        torch.testing.assert_close(model(pixel_values=pixel_values).logits, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("target", [0, 55, 99])
def test_the_class_whose_tokens_the_output_layer_favours_wins(key, target):
    """A bias of the decoder's output layer towards class t's name tokens makes every image classified as t."""
    model = _model(key)
    name = model.name_ids[target][model.name_mask[target]]
    # Classes 0, 55 and 99 are written with one digit twice: favouring it favours that class alone.
    assert len(name) == 2 and name[0] == name[1]
    head = _lm_head(model)
    bias = torch.zeros(head.out_features)
    bias[name] = 30.0
    head.bias = nn.Parameter(bias)
    labels = torch.full((6,), target)
    with torch.no_grad():
        out = model(pixel_values=torch.randn(6, 3, 32, 32), labels=labels)
    assert out.logits.shape == (6, 100)
    assert (out.logits.argmax(-1) == target).all()
    assert out.loss < 1e-3


def test_smolvlm_with_a_local_tokenizer_uses_its_chat_format_and_the_real_class_names(tmp_path):
    """A SmolVLM folder with a tokenizer: BOS, "User:", the image block, the question, then the prompt and names."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from gradeff.studies.baselines.classnames import CIFAR100
    from gradeff.studies.baselines.smolvlm import CHAT

    specials = ["<unk>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<global-img>"]
    words = {"a", "photo", "of", *CHAT[0].split(), *CHAT[1].replace("<end_of_utterance>", " ").split()}
    words |= {word for name in CIFAR100 for word in name.split()}
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials + sorted(words))}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<|im_start|>")
    _model("smolvlm").model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    model = build_model("smolvlm", "tiny", num_labels=100, weights_dir=tmp_path).eval()
    ids = tokenizer.convert_tokens_to_ids
    assert model.token_source == "tokenizer"
    assert model.before_ids.tolist() == [ids("<|im_start|>"), ids("User:"), ids("<fake_token_around_image>"),
                                         ids("<global-img>")]
    after = model.after_ids.tolist()
    assert after[0] == ids("<fake_token_around_image>") and ids("<end_of_utterance>") in after
    assert after[-4:] == [ids("a"), ids("photo"), ids("of"), ids("a")]
    assert model.name_ids[47][model.name_mask[47]].tolist() == [ids("maple"), ids("tree")]
    with torch.no_grad():
        assert model(pixel_values=torch.randn(2, 3, 32, 32)).logits.shape == (2, 100)


def test_vlm_prompt_loads_the_trained_projector_with_the_towers(tmp_path):
    """vision/, decoder/ and projector.safetensors: the prompted nanoVLM starts from all three, projector too."""
    from safetensors.torch import save_file

    source = _model("vlm_prompt")
    source.vlm.vision.save_pretrained(tmp_path / "vision")
    source.vlm.decoder.save_pretrained(tmp_path / "decoder")
    save_file(source.vlm.projector.state_dict(), tmp_path / "projector.safetensors")
    torch.manual_seed(1)
    loaded = build_model("vlm_prompt", "tiny", num_labels=100, weights_dir=tmp_path).eval()
    for name, tensor in source.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    pixel_values = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(pixel_values=pixel_values).logits, source(pixel_values=pixel_values).logits)
