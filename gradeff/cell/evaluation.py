"""Held-out evaluation: mean loss per target and top-1 accuracy on a split the cell never trains on.

A cell evaluates its **test** split before training, every ``eval_every`` optimizer steps (a pause of the loop,
outside the epoch's clock and meters) and after each epoch; its **validation** split once, after the last epoch
(the final validation loss is what tuning reads; no decision reads it earlier, so earlier passes would only cost). Every
pass runs in eval mode (dropout off, batch-norm running statistics) and without autograd;
the model goes back to training mode after. A tuning trial evaluates the validation split alone: the test split
is not even handed to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from gradeff.axes.data.dataset import IGNORE_INDEX, Dataset
from gradeff.cell.loop import Pause, TrainState, move_batch, sync
from gradeff.records.curve import CurvePoint

if TYPE_CHECKING:
    from gradeff.cell.metering import EpochMetering

__all__ = ["EVAL_BATCHES", "CellEvaluation", "Evaluation", "evaluate", "scoring"]

# Evaluation keeps no activations for backward, so it runs in batches this many times the training
# batch: fewer, larger passes cost less per sample (the memory the training step needed is the bound).
EVAL_BATCHES = 4


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


def scoring(kind: str, info: dict) -> bool | str:
    """What :func:`evaluate` scores besides the loss on a task of ``kind`` whose dataset says ``info``.

    Classification counts top-1 hits (micro- and macro-F1 for a multi-label one); real text its next-token
    top-1; synthetic text is judged by its loss against the floor alone.
    """
    if kind == "image_classification":
        return "multilabel" if info.get("multi_label") else True
    return "token" if kind == "causal_lm" and info.get("real") else False


def _f1(counts: torch.Tensor) -> dict:
    """Micro- and macro-F1 from per-label (true positive, false positive, false negative) counts."""
    tp, fp, fn = counts.double()
    micro = float(2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum())) if (tp.sum() + fp.sum() + fn.sum()) else 1.0
    denominator = 2 * tp + fp + fn
    per_label = torch.where(denominator > 0, 2 * tp / denominator.clamp(min=1), torch.ones_like(tp))
    return {"f1_micro": micro, "f1_macro": float(per_label.mean())}


def _joules(epochs: list[dict]) -> float | None:
    """The energy of metered epochs (or pieces), ``None`` unless every one has a figure."""
    values = [(e.get("energy") or {}).get("joules") for e in epochs]
    return None if any(v is None for v in values) else float(sum(values))


@dataclass(kw_only=True)
class CellEvaluation:
    """A cell's evaluations: the test curve at step resolution and each epoch's test and validation figures.

    Attributes:
        state: the training state (its model is read at each evaluation: a strategy may have replaced it).
        test / validation: the splits (``None``: not evaluated; a tuning trial has no test split).
        batch_size: samples per evaluation pass.
        accuracy: what :func:`evaluate` scores besides the loss.
        every: optimizer steps between two test evaluations inside an epoch (0: epoch ends only).
        total_epochs: the epochs the cell trains; the validation split is evaluated after the last.
        curve: the test evaluations so far, the untrained model's first.
        epochs: per finished epoch, its ``(test, validation)`` evaluations.
        initial: the untrained model's test evaluation.
    """

    state: TrainState
    test: Dataset | None
    validation: Dataset | None
    batch_size: int
    accuracy: bool | str
    every: int = 0
    total_epochs: int = 1
    curve: list[CurvePoint] = field(default_factory=list)
    epochs: list[tuple[Evaluation | None, Evaluation | None]] = field(default_factory=list)
    initial: Evaluation | None = None

    def _evaluate(self, split: Dataset) -> Evaluation:
        return evaluate(self.state.model, split, batch_size=self.batch_size, device=self.state.device,
                        accuracy=self.accuracy)

    def _point(self, evaluation: Evaluation, *, epoch: int, seconds: float, joules: float | None) -> None:
        self.curve.append(CurvePoint(step=self.state.global_step, epoch=epoch, seconds=seconds, joules=joules,
                                     loss=evaluation.loss, accuracy=evaluation.accuracy,
                                     eval_seconds=evaluation.seconds))

    def untrained(self) -> Evaluation | None:
        """Evaluate the test split before any step: where time to target starts (and a zero-shot cell's result)."""
        if self.test is not None:
            self.initial = self._evaluate(self.test)
            # Nothing trained yet: no seconds and no joules spent, a measured zero.
            self._point(self.initial, epoch=0, seconds=0.0, joules=0.0)
        return self.initial

    def pause(self, metering: EpochMetering) -> Pause | None:
        """The loop's pause that evaluates the test split every ``every`` steps, outside the meters."""
        if self.test is None or not self.every:
            return None

        def run(epoch_seconds: float) -> None:
            with metering.paused() as so_far:
                before = _joules(metering.epochs)
                now = (so_far.get("energy") or {}).get("joules")
                self._point(self._evaluate(self.test), epoch=self.state.epoch,
                            seconds=sum(e.seconds for e in self.state.history) + epoch_seconds,
                            joules=None if before is None or now is None else before + now)

        return Pause(every=self.every, run=run)

    def after_epoch(self, metering: EpochMetering) -> None:
        """Evaluate the test split after an epoch, and the validation split after the last (outside the epochs'
        clocks and meters)."""
        last = len(self.epochs) + 1 >= self.total_epochs
        validation = self._evaluate(self.validation) if self.validation is not None and last else None
        test = None
        if self.test is not None:
            test = self._evaluate(self.test)
            self._point(test, epoch=self.state.epoch - 1, seconds=sum(e.seconds for e in self.state.history),
                        joules=_joules(metering.epochs))
        self.epochs.append((test, validation))

    def record(self, wall_seconds: float) -> dict:
        """How the splits were evaluated, for the cell's record (``{}`` when nothing was)."""
        validation = sum(v.seconds for _, v in self.epochs if v is not None)
        test = sum(point.eval_seconds for point in self.curve)
        if not self.curve and not validation:
            return {}
        return {"every_steps": self.every, "points": len(self.curve), "test_seconds": test,
                "validation_seconds": validation,
                "fraction": (test + validation) / wall_seconds if wall_seconds > 0 else None}
