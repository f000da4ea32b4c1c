"""What every backbone of the PEFT study must do: local weights, a fresh head for a new dataset, 4-bit loading."""

import pytest
import torch
from torch import nn

from gradeff.axes.models import MODELS, build_model
from gradeff.studies.grid import GRIDS

BACKBONES = list(GRIDS["peft"].models)


def _batch(num_labels: int, n: int = 4):
    generator = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, 32, 32, generator=generator), torch.randint(0, num_labels, (n,), generator=generator)


def _trained_once(key: str):
    torch.manual_seed(1)
    model = build_model(key, "tiny")
    pixels, labels = _batch(model.config.num_labels)
    model(pixel_values=pixels, labels=labels).loss.backward()  # moves any BatchNorm statistics off their init
    return model, pixels


@pytest.mark.parametrize("key", BACKBONES)
def test_local_weights_round_trip(key, tmp_path):
    """save_pretrained → build(weights_dir=...) gives identical parameters, buffers and outputs, offline."""
    model, pixels = _trained_once(key)
    model.save_pretrained(tmp_path)
    loaded = build_model(key, "tiny", weights_dir=tmp_path)
    assert type(loaded) is type(model)
    source, target = model.state_dict(), loaded.state_dict()
    assert source.keys() == target.keys() and all(torch.equal(source[k], target[k]) for k in source)
    with torch.no_grad():
        assert torch.equal(model.eval()(pixel_values=pixels).logits, loaded.eval()(pixel_values=pixels).logits)


@pytest.mark.parametrize("key", BACKBONES)
def test_another_class_count_keeps_the_backbone_and_starts_a_fresh_head(key, tmp_path):
    """Loaded for a 47-class dataset: every backbone tensor as saved, a new head of 47 outputs."""
    model, _ = _trained_once(key)
    model.save_pretrained(tmp_path)
    loaded = build_model(key, "tiny", weights_dir=tmp_path, num_labels=47)
    assert loaded.classifier.out_features == 47
    head = MODELS[key].head
    source, target = model.state_dict(), loaded.state_dict()
    backbone = [k for k in source if not any(k.startswith(h + ".") for h in head)]
    assert backbone and all(torch.equal(source[k], target[k]) for k in backbone)


@pytest.mark.parametrize("key", BACKBONES)
def test_transformers_4bit_loading_quantises_the_targets_and_lora_trains(key, tmp_path):
    """from_pretrained with NF4: the LoRA targets become Linear4bit, the head stays full precision, LoRA learns."""
    bnb = pytest.importorskip("bitsandbytes")
    peft = pytest.importorskip("peft")
    from transformers import BitsAndBytesConfig

    model, pixels = _trained_once(key)
    model.save_pretrained(tmp_path)
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32,
                               llm_int8_skip_modules=list(MODELS[key].head))
    loaded = type(model).from_pretrained(tmp_path, local_files_only=True, quantization_config=quant)
    targets = MODELS[key].lora_targets
    types = {type(m) for n, m in loaded.named_modules() if n.rsplit(".", 1)[-1] in targets}
    assert types == {bnb.nn.Linear4bit} and type(loaded.classifier) is nn.Linear
    adapted = peft.get_peft_model(loaded, peft.LoraConfig(r=4, lora_alpha=8, target_modules=list(targets),
                                                          modules_to_save=list(MODELS[key].head))).train()
    _, labels = _batch(loaded.config.num_labels)
    loss = adapted(pixel_values=pixels, labels=labels).loss
    loss.backward()
    grads = {n: p.grad for n, p in adapted.named_parameters() if "lora_" in n}
    assert torch.isfinite(loss) and grads and all(g is not None and torch.isfinite(g).all() for g in grads.values())
    # lora_B starts at zero, so lora_A's first gradient is zero; lora_B's must not be.
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)
