"""Held-out evaluation: mean loss per target and top-1 accuracy on a split the cell never trains on.

It runs after each epoch, outside the epoch's timing and meters, in eval mode (dropout off,
batch-norm running statistics) and without autograd; the model goes back to training mode after.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from gradeff.data.dataset import IGNORE_INDEX, Dataset
from gradeff.loop import move_batch, sync

__all__ = ["Evaluation", "evaluate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation:
    """One pass over a held-out split.

    Attributes:
        loss: mean cross-entropy per target (the training loss's unit).
        accuracy: top-1 accuracy (classification; next-token top-1 on real text; ``None`` otherwise).
        f1_micro / f1_macro: multi-label classification (a logit above 0 predicts the label): F1 over every
            (sample, label) decision, and the mean of the labels' own F1 (a label never true nor predicted: 1).
        samples: samples evaluated.
        seconds: wall time of the pass.
    """

    loss: float
    accuracy: float | None
    samples: int
    seconds: float
    f1_micro: float | None = None
    f1_macro: float | None = None


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: Dataset, *, batch_size: int, device: torch.device,
             accuracy: bool | str) -> Evaluation:
    """Evaluate ``model`` on every sample of ``data``.

    Args:
        batch_size: samples per forward pass.
        accuracy: also count top-1 hits: ``True`` for classification (``logits.argmax(-1) == labels``),
            ``"token"`` for a causal language model (the prediction at each position against the next
            token, over the positions that carry loss), ``"multilabel"`` for micro- and macro-F1 instead.
    """
    was_training = model.training
    model.eval()
    sync(device)
    start = time.perf_counter()
    loss_sum, correct, targets, scored_total = 0.0, 0, 0, 0
    label_counts = None  # multi-label: true positives, false positives, false negatives per label
    try:
        for indices in torch.arange(len(data)).split(batch_size):
            batch = move_batch(data.batch(indices), device)
            output = model(**batch)
            count = int(data.targets[indices].sum())
            # transformers losses are means over the batch's targets: weight them back to sums.
            loss_sum += float(output.loss) * count
            targets += count
            if accuracy == "multilabel":
                predicted, truth = output.logits > 0, batch["labels"] > 0.5
                counts = torch.stack([(predicted & truth).sum(0), (predicted & ~truth).sum(0),
                                      (~predicted & truth).sum(0)])
                label_counts = counts if label_counts is None else label_counts + counts
            elif accuracy == "token":
                predicted, following = output.logits[:, :-1].argmax(dim=-1), batch["labels"][:, 1:]
                scored = following != IGNORE_INDEX
                correct += int(((predicted == following) & scored).sum())
                scored_total += int(scored.sum())
            elif accuracy:
                correct += int((output.logits.argmax(dim=-1) == batch["labels"]).sum())
    finally:
        model.train(was_training)
    sync(device)
    if accuracy == "multilabel":
        return Evaluation(loss=loss_sum / targets, accuracy=None, samples=len(data),
                          seconds=time.perf_counter() - start, **_f1(label_counts))
    hits_of = scored_total if accuracy == "token" else len(data)
    return Evaluation(loss=loss_sum / targets, accuracy=correct / max(hits_of, 1) if accuracy else None,
                      samples=len(data), seconds=time.perf_counter() - start)


def _f1(counts: torch.Tensor) -> dict:
    """Micro- and macro-F1 from per-label (true positive, false positive, false negative) counts."""
    tp, fp, fn = counts.double()
    micro = float(2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum())) if (tp.sum() + fp.sum() + fn.sum()) else 1.0
    denominator = 2 * tp + fp + fn
    per_label = torch.where(denominator > 0, 2 * tp / denominator.clamp(min=1), torch.ones_like(tp))
    return {"f1_micro": micro, "f1_macro": float(per_label.mean())}
