"""The linear probe: only the head trains, on features that stay frozen (weights, batch statistics, dropout)."""

import pytest
import torch
from torch import nn

from gradeff.axes.data.dataset import Dataset
from gradeff.axes.methods import apply_method
from gradeff.axes.models import MODELS, build_model
from gradeff.cell.evaluation import evaluate
from gradeff.cell.loop import TrainState, train
from gradeff.studies.hparams import method_hparams_for

CLASSES = 3
HP = method_hparams_for("full", "vit_s", "tiny")  # the probe reads no setting of its own


def _features(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """What the DINOv2 head reads: [CLS] and the mean patch token of the last layer."""
    with torch.no_grad():
        hidden = model.dinov2(pixel_values=pixel_values).last_hidden_state
    return torch.cat([hidden[:, 0], hidden[:, 1:].mean(dim=1)], dim=1)


def _separable_data(model) -> Dataset:
    """Images labelled by a random linear function of the frozen features, keeping those with a clear margin."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(400, 3, 32, 32, generator=generator)
    model.eval()
    features = _features(model, images)
    features = (features - features.mean(0)) / features.std(0)
    scores = features @ torch.randn(features.shape[1], CLASSES, generator=generator)
    top = scores.topk(2, dim=1).values
    keep = (top[:, 0] - top[:, 1] > scores.std()).nonzero().squeeze(1)[:96]
    labels = scores[keep].argmax(1)
    assert len(keep) == 96 and len(labels.unique()) == CLASSES
    return Dataset(task="separable", tensors={"pixel_values": images[keep], "labels": labels},
                   targets=torch.ones(len(keep), dtype=torch.long), loss_floor=None, floor_note="")


def test_linear_probe_separates_linearly_separable_features_and_moves_no_backbone_parameter():
    """Classes linear in the frozen DINOv2 features: the probe, trained by the suite's loop, gets them all right."""
    torch.manual_seed(0)
    model = build_model("dinov2", "tiny", num_labels=CLASSES)
    data = _separable_data(model)
    model.train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    adapted = apply_method("linear_probe", model, HP, total_steps=1, head=MODELS["dinov2"].head)
    trainable = [p for p in adapted.model.parameters() if p.requires_grad]
    state = TrainState(model=adapted.model, optimizer=torch.optim.AdamW(trainable, lr=5e-2), dataset=data,
                       batch_size=16, micro_batches_per_step=1, seed=0, device=torch.device("cpu"))
    train(state, 15)
    result = evaluate(adapted.model, data, batch_size=96, device=torch.device("cpu"), accuracy=True)
    assert result.accuracy == 1.0
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert moved == {"classifier.weight", "classifier.bias"}
    assert {name for name, p in model.named_parameters() if p.requires_grad} == moved


class _Probe(nn.Module):
    """A backbone with batch normalisation and dropout under a linear head."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5))
        self.classifier = nn.Linear(16, 2)

    def forward(self, x):
        return self.classifier(self.backbone(x))


def test_the_backbone_runs_in_evaluation_mode_even_when_the_model_trains():
    """Under the probe, model.train() leaves batch statistics untouched and dropout off; the head keeps its mode."""
    torch.manual_seed(0)
    model = _Probe()
    apply_method("linear_probe", model, HP, total_steps=1, head=("classifier",))
    statistics = model.backbone[1].running_mean.clone()
    model.train()
    x = torch.randn(32, 8) + 3.0
    first, second = model(x), model(x)
    assert torch.equal(first, second)
    assert torch.equal(model.backbone[1].running_mean, statistics)
    assert model.training and model.classifier.training


def test_a_model_without_a_head_has_nothing_to_probe():
    """The probe refuses a model whose head names match no parameter."""
    with pytest.raises(ValueError, match="nothing to train"):
        apply_method("linear_probe", _Probe(), HP, total_steps=1, head=("head",))
