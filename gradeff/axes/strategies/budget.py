"""Fitting a training step into a memory budget: measure once, predict the peak, choose what to recompute.

The PEFT paper's adaptive checkpointing works against an on-device budget ("e.g. 2 GB") with a
safety margin (~10 %), because allocator fragmentation can run out of memory below the budget: it
recomputes only the blocks it must. Here that is a plan made from one measured pass:

1. **Measure** (:func:`profile_step`): one forward and backward pass without checkpointing on a
   training micro-batch, under a live-tensor tracker (the real peak of tensors alive at once) and
   an attribution of every tensor autograd saves to the block that saved it. Each block's cost is
   what it saves (``saved_bytes``) and what checkpointing would keep of it instead, its inputs
   (``boundary_bytes``); checkpointing it saves the difference. The pass leaves no trace
   (:func:`gradeff.meters.untouched.untouched`: buffers such as BatchNorm's running statistics and the RNG are
   restored bit for bit), so the cell trains exactly as if it had not happened.
2. **Predict** (:meth:`StepProfile.predicted_peak`) the peak of a training step when the blocks
   ``S`` are checkpointed, as the larger of two phases:

   - the end of the forward pass: the measured peak, plus the optimizer state (absent in the measured
     pass, present in every training step), minus what checkpointing ``S`` saves;
   - the recomputation of each block ``j`` of ``S`` during backward: the forward's end, plus the
     activations ``j`` rematerialises, minus what the blocks after ``j`` held (already freed by then:
     backward runs in reverse), plus their gradients (made by then). Early blocks recompute last,
     when little else is alive;
   - the optimizer step: parameters + gradients + optimizer state + twice the largest trainable
     tensor (an optimizer step's temporaries, one parameter at a time).

3. **Choose** (:func:`plan`): the fewest blocks whose prediction fits ``budget × (1 - margin)``.
   Blocks are taken greedily by how far each lowers the predicted peak (:func:`greedy_order`; ties to
   the larger savings, then forward order): on the equal-cost blocks of one model the earliest first,
   whose recomputation peaks lowest, and the fewest blocks for a target, hence the fewest
   recomputations. The selection for a smaller budget is always a superset (a longer prefix of the
   same order).
4. **Calibrate** (:func:`calibrated`) where even every block does not fit by the prediction, but by
   less than its error band (:data:`ERROR_BAND`): the prediction sums what one pass measured block by
   block, and overestimates what checkpointing everything leaves (a block's boundary is shared with its
   neighbour's). One more measured pass with every block checkpointed gives the true figure; the
   predictions are shifted by the difference, and the plan is made again. A budget that checkpointing
   every block meets is never refused; one it misses ends the cell ``oom`` before training, with the
   numbers.

The compiler's budget (``compile_budget``) meets the same byte target with torch.compile's own
activation memory budget (:func:`compiler_fraction` turns the target into its fraction); its cell at level
100 % (``compile_budget100``), at the full activation budget, is the compiled cells' reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from gradeff.axes.strategies.layers import checkpoint_only, checkpointable_layers, short_name
from gradeff.meters import LivePeakTracker
from gradeff.meters.memory import parameter_bytes
from gradeff.meters.storage import storage_of
from gradeff.meters.untouched import untouched

__all__ = ["ERROR_BAND", "BudgetPlan", "LayerCost", "StepProfile", "calibrated", "compiler_fraction",
           "measure_checkpointed_peak", "plan", "profile_step"]

# How far above its target a prediction with every block checkpointed may lie and still be checked by a
# measured pass. The prediction overestimates that peak on the suite's tiny models by up to 10 % (llm:
# 2.72 MiB predicted, 2.53 MiB measured; ModernBERT 3.08 against 2.79; ViT-S exact): 25 % covers it with
# room, and beyond it no measurement would fit.
ERROR_BAND = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerCost:
    """One checkpointable block, measured on a forward pass.

    Attributes:
        name: the block's module name.
        saved_bytes: distinct storages autograd saved for backward inside the block (parameters excluded).
        boundary_bytes: its positional tensor inputs: what non-reentrant checkpointing keeps instead.
        gradient_bytes: its trainable parameters' bytes: the gradients its backward makes.
    """

    name: str
    saved_bytes: int
    boundary_bytes: int
    gradient_bytes: int = 0

    @property
    def savings(self) -> int:
        """Bytes checkpointing this block frees at the peak."""
        return max(0, self.saved_bytes - self.boundary_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepProfile:
    """What one measured pass says about a cell's training step.

    Attributes:
        layers: the checkpointable blocks, in forward order.
        forward_backward_peak: live-tensor peak of the pass (parameters, batch, activations, gradients;
            no optimizer state yet).
        activation_bytes: every storage autograd saved in the pass (blocks and the rest).
        parameter_bytes / trainable_bytes / largest_trainable_bytes: of the model being trained.
        optimizer_state_bytes: the optimizer's state, by its state law.
    """

    layers: tuple[LayerCost, ...]
    forward_backward_peak: int
    activation_bytes: int
    parameter_bytes: int
    trainable_bytes: int
    largest_trainable_bytes: int
    optimizer_state_bytes: int

    def predicted_peak(self, checkpointed: Iterable[str] = ()) -> int:
        """The predicted peak of a training step with the blocks ``checkpointed`` (see the module docstring)."""
        names = set(checkpointed)
        forward_end = (self.forward_backward_peak + self.optimizer_state_bytes
                       - sum(layer.savings for layer in self.layers if layer.name in names))
        peak = forward_end
        # Walk backward: what the blocks after j held is freed, their gradients made, when j recomputes.
        freed_after = 0
        for layer in reversed(self.layers):
            if layer.name in names:
                peak = max(peak, forward_end + layer.savings - freed_after)
                freed_after += layer.boundary_bytes - layer.gradient_bytes
            else:
                freed_after += layer.saved_bytes - layer.gradient_bytes
        step = (self.parameter_bytes + self.trainable_bytes + self.optimizer_state_bytes
                + 2 * self.largest_trainable_bytes)
        return max(peak, step)


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPlan:
    """What a budget strategy decided, for the record.

    Attributes:
        budget: bytes the step must fit in.
        margin: fraction of the budget kept free (fragmentation, what the prediction cannot see).
        target: ``budget × (1 - margin)``, what the prediction is held to.
        checkpointed: the blocks chosen, in forward order.
        layers: how many checkpointable blocks the model has.
        predicted_peak: the prediction for the chosen blocks.
        unconstrained_peak: the prediction without checkpointing.
        fits: whether the prediction meets the target (false: even every block does not suffice).
        prefix_peaks: the prediction after each block of the greedy order, from none to all: the
            whole trade-off as the plan sees it (its last entry is the least this model can reach).
        measured_frugal_peak: the measured peak with every block checkpointed, where the plan was calibrated
            against it (``None``: not calibrated; the predictions are then as profiled).
    """

    budget: int
    margin: float
    target: int
    checkpointed: tuple[str, ...]
    layers: int
    predicted_peak: int
    unconstrained_peak: int
    fits: bool
    prefix_peaks: tuple[int, ...] = ()
    measured_frugal_peak: int | None = None

    def to_record(self) -> dict:
        record = {"budget_bytes": self.budget, "margin": self.margin, "target_bytes": self.target,
                  "checkpointed": [short_name(name) for name in self.checkpointed],
                  "checkpointed_layers": len(self.checkpointed), "layers": self.layers,
                  "predicted_peak_bytes": self.predicted_peak, "unconstrained_peak_bytes": self.unconstrained_peak,
                  "fits": self.fits, "prefix_peak_bytes": list(self.prefix_peaks)}
        if self.measured_frugal_peak is not None:
            record["measured_frugal_peak_bytes"] = self.measured_frugal_peak
        return record


def greedy_order(profile: StepProfile) -> list[str]:
    """The blocks in the order the plan takes them: each next the one whose addition lowers the predicted peak most,
    ties to the larger savings, then to forward order (the choice is deterministic).

    By savings alone, a model's last block can come first and lower nothing: it recomputes first in backward,
    with every other block's activations still alive, so the peak stays where it was (Vim-S's two blocks at tiny,
    the second saving 2 % more than the first: with it alone, a LoRA cell's prediction stayed at the unconstrained
    23.6 MiB, with the first alone 15.9). The order is one for every budget, so a smaller budget's blocks are
    still a superset of a larger one's.
    """
    position = {layer.name: i for i, layer in enumerate(profile.layers)}
    remaining = sorted(profile.layers, key=lambda layer: (-layer.savings, position[layer.name]))
    order: list[str] = []
    while remaining:
        best = min(remaining, key=lambda layer: profile.predicted_peak([*order, layer.name]))
        order.append(best.name)
        remaining.remove(best)
    return order


def plan(profile: StepProfile, budget: int, margin: float, *, measured_frugal_peak: int | None = None) -> BudgetPlan:
    """The fewest blocks to checkpoint so that the predicted peak fits ``budget × (1 - margin)``.

    Args:
        profile: the measured pass.
        budget: bytes the step must fit in.
        margin: the share of the budget kept free.
        measured_frugal_peak: the measured peak with every block checkpointed: every prediction is shifted by
            its difference from the prediction for every block (see :func:`calibrated`).

    Raises:
        ValueError: a budget that is not positive or a margin outside [0, 1).
    """
    if budget <= 0 or not 0 <= margin < 1:
        raise ValueError(f"budget must be > 0 and margin in [0, 1), got {budget} and {margin}")
    target = int(budget * (1 - margin))
    order = greedy_order(profile)
    prefix_peaks = tuple(profile.predicted_peak(order[:k]) for k in range(len(order) + 1))
    if measured_frugal_peak is not None:
        shift = measured_frugal_peak - prefix_peaks[-1]
        prefix_peaks = tuple(peak + shift for peak in prefix_peaks)
    k = next((k for k, peak in enumerate(prefix_peaks) if peak <= target), len(order))
    chosen = set(order[:k])
    return BudgetPlan(budget=budget, margin=margin, target=target,
                      checkpointed=tuple(layer.name for layer in profile.layers if layer.name in chosen),
                      layers=len(profile.layers), predicted_peak=prefix_peaks[k], unconstrained_peak=prefix_peaks[0],
                      fits=prefix_peaks[k] <= target, prefix_peaks=prefix_peaks,
                      measured_frugal_peak=measured_frugal_peak)


def within_error_band(chosen: BudgetPlan) -> bool:
    """Whether a plan that does not fit by its prediction misses its target by less than :data:`ERROR_BAND`."""
    return not chosen.fits and chosen.predicted_peak <= chosen.target * (1 + ERROR_BAND)


def calibrated(profile: StepProfile, chosen: BudgetPlan, measure: Callable[[], int]) -> BudgetPlan:
    """``chosen``, or where it does not fit but lies within the error band, the plan made again against a
    measured pass with every block checkpointed (``measure()`` → its peak in bytes).

    Returns:
        The plan to use; it fits whenever checkpointing every block meets the target.
    """
    if not within_error_band(chosen):
        return chosen
    return plan(profile, chosen.budget, chosen.margin, measured_frugal_peak=measure())


def compiler_fraction(profile: StepProfile, target: int) -> float:
    """torch.compile's ``activation_memory_budget`` (a fraction of the activations) that meets ``target`` bytes.

    The activations must shrink by what the unconstrained prediction exceeds the target by; the
    fraction is what is left of them, clamped to [0, 1] (0: recompute everything it can).
    """
    excess = profile.predicted_peak() - target
    if excess <= 0 or profile.activation_bytes == 0:
        return 1.0
    return min(1.0, max(0.0, 1 - excess / profile.activation_bytes))


class _SavedByBlock:
    """Attributes every storage autograd saves to the innermost checkpointable block running, and
    records each block's positional tensor inputs (what checkpointing would keep)."""

    def __init__(self, model: torch.nn.Module, layers: Sequence[tuple[str, torch.nn.Module]]):
        self._excluded = {key for t in (*model.parameters(), *model.buffers())
                          if (key := storage_of(t)[1]) is not None}
        self._layers = layers
        self._stack: list[str] = []
        self._seen: set = set()
        self.saved = {name: 0 for name, _ in layers}
        self.boundary = {name: 0 for name, _ in layers}
        self.total = 0
        self._handles: list = []
        self._hooks = None

    def __enter__(self):
        for name, layer in self._layers:
            self._handles.append(layer.register_forward_pre_hook(self._enter_block(name)))
            self._handles.append(layer.register_forward_hook(self._leave_block))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        for handle in self._handles:
            handle.remove()

    def _enter_block(self, name: str):
        def hook(module, args):
            self._stack.append(name)
            inputs = {key: nbytes for t in args if isinstance(t, torch.Tensor)
                      for _, key, nbytes in [storage_of(t)] if key is not None and key not in self._excluded}
            self.boundary[name] += sum(inputs.values())
        return hook

    def _leave_block(self, module, args, output):
        self._stack.pop()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        _, key, nbytes = storage_of(t)
        if key is None or key in self._excluded or key in self._seen:
            return t
        self._seen.add(key)
        self.total += nbytes
        if self._stack:
            self.saved[self._stack[-1]] += nbytes
        return t


def measure_checkpointed_peak(model: torch.nn.Module, batch: dict, profile: StepProfile, *,
                              device: torch.device) -> int:
    """The measured peak of a training step with every block checkpointed: one forward and backward under the
    live-tensor tracker, plus the optimizer state a training step also holds, or the optimizer step's phase,
    whichever is larger (as :meth:`StepProfile.predicted_peak` composes them). The pass leaves no trace.
    """
    checkpoint_only(model, [layer.name for layer in profile.layers])
    devices = [device] if device.type == "cuda" else []
    with untouched(model, devices):
        with LivePeakTracker(baseline=[*model.parameters(), *model.buffers(), *batch.values()]) as tracker:
            loss = model(**batch).loss
            loss.backward()
            del loss
    step = (profile.parameter_bytes + profile.trainable_bytes + profile.optimizer_state_bytes
            + 2 * profile.largest_trainable_bytes)
    return max(tracker.peak_bytes + profile.optimizer_state_bytes, step)


def profile_step(model: torch.nn.Module, batch: dict, *, state_bytes: int, device: torch.device) -> StepProfile:
    """Measure one forward + backward of ``model`` on ``batch`` (no checkpointing, gradients dropped after).

    Args:
        model: the model as it will train (fine-tuning method applied, checkpointing off).
        batch: one training micro-batch, on ``device``.
        state_bytes: the optimizer's state, by its law, for the model's trainable parameters.
        device: where the model runs (its RNG is forked too).
    """
    layers = checkpointable_layers(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    devices = [device] if device.type == "cuda" else []
    # Dropout draws and BatchNorm statistics of this pass do not shift the cell's training.
    with untouched(model, devices):
        # The batch was made before the region: it is resident like the parameters.
        with LivePeakTracker(baseline=[*model.parameters(), *model.buffers(), *batch.values()]) as tracker:
            with _SavedByBlock(model, layers) as saved:
                loss = model(**batch).loss
            loss.backward()
            del loss
    return StepProfile(
        layers=tuple(LayerCost(name=name, saved_bytes=saved.saved[name], boundary_bytes=saved.boundary[name],
                               gradient_bytes=sum(p.numel() * p.element_size() for p in layer.parameters()
                                                  if p.requires_grad))
                     for name, layer in layers),
        forward_backward_peak=tracker.peak_bytes, activation_bytes=saved.total,
        parameter_bytes=parameter_bytes(model), trainable_bytes=sum(p.numel() * p.element_size() for p in trainable),
        largest_trainable_bytes=max((p.numel() * p.element_size() for p in trainable), default=0),
        optimizer_state_bytes=state_bytes,
    )
