"""Held-out evaluation: exact loss per target and top-1 accuracy, in eval mode, without autograd."""

from types import SimpleNamespace

import pytest
import torch

from gradeff.axes.data.dataset import Dataset
from gradeff.cell.evaluation import evaluate


class FixedLogits(torch.nn.Module):
    """Returns stored logits per sample and the mean cross-entropy of the batch, recording its mode."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits
        self.modes: list[tuple[bool, bool]] = []
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, index, labels):
        self.modes.append((self.training, torch.is_grad_enabled()))
        logits = self.logits[index] + self.weight
        return SimpleNamespace(logits=logits, loss=torch.nn.functional.cross_entropy(logits, labels))


def test_accuracy_and_loss_are_exact_over_uneven_batches():
    """5 samples in batches of 2: accuracy counts argmax hits, loss is the mean over all samples."""
    logits = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0], [0.0, 1.0], [5.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 1, 1])
    data = Dataset(task="t", tensors={"index": torch.arange(5), "labels": labels},
                   targets=torch.ones(5, dtype=torch.long),
                   loss_floor=None, floor_note="")
    model = FixedLogits(logits).train()
    result = evaluate(model, data, batch_size=2, device=torch.device("cpu"), accuracy=True)
    assert result.accuracy == pytest.approx(3 / 5)
    assert result.loss == pytest.approx(torch.nn.functional.cross_entropy(logits, labels).item(), rel=1e-6)
    assert result.samples == 5
    assert model.modes == [(False, False)] * 3 and model.training


def test_loss_is_weighted_by_targets_per_sample():
    """Samples with more targets weigh more: the mean is per target, as the training loss is."""

    class PerSampleLoss(torch.nn.Module):
        def forward(self, loss, labels):
            return SimpleNamespace(loss=loss.mean(), logits=None)

    data = Dataset(task="t", tensors={"loss": torch.tensor([1.0, 4.0]), "labels": torch.zeros(2)},
                   targets=torch.tensor([3, 1]), loss_floor=None, floor_note="")
    result = evaluate(PerSampleLoss(), data, batch_size=1, device=torch.device("cpu"), accuracy=False)
    assert result.loss == pytest.approx((1.0 * 3 + 4.0 * 1) / 4)
    assert result.accuracy is None
