"""Tests of the live-tensor peak tracker on hand-computable programs, exact to the byte."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode
from torch.utils.checkpoint import checkpoint

from gradeff.meters import LivePeakTracker
from gradeff.meters.memory import ActivationCounter, gradient_bytes, parameter_bytes

F32 = 4  # bytes per float32 element


def nbytes(*tensors: torch.Tensor) -> int:
    """Bytes of the given dense tensors' elements."""
    return sum(t.numel() * t.element_size() for t in tensors)


# -- hand-computed chains -------------------------------------------------------------------


def test_chain_peak_live_and_phases():
    """a -> b = 2a -> c = b + 1 -> del b -> d = 3c peaks at a + b + c and ends at a + c + d."""
    n = 256
    size = n * F32
    a = torch.ones(n)
    tracker = LivePeakTracker([a])
    with tracker:
        with tracker.phase("bc"):
            b = a * 2
            c = b + 1
            del b
            after_bc = tracker.live_bytes
        with tracker.phase("d"):
            d = c * 3
    assert tracker.start_bytes == size
    assert after_bc == 2 * size  # a + c: b's death was seen
    assert tracker.peak_bytes == 3 * size  # a + b + c, while c was being made
    assert tracker.peak_op == "aten.add.Tensor"  # set in phase "bc"; d only equals it
    assert tracker.live_bytes == 3 * size  # a + c + d
    assert tracker.peaks_by_phase == {"bc": 3 * size, "d": 3 * size}
    assert tracker.peak_by_device == {"cpu": 3 * size}
    assert d.sum().item() == n * 9


def test_phase_starts_at_the_live_bytes_when_it_opens():
    """A phase that allocates nothing records the live bytes at its opening, not the region's peak."""
    a = torch.ones(64)
    tracker = LivePeakTracker([a])
    with tracker:
        with tracker.phase("big"):
            big = torch.zeros(1024)
            del big
        with tracker.phase("idle"):
            a.mul_(2)
    assert tracker.peaks_by_phase == {"big": 64 * F32 + 1024 * F32, "idle": 64 * F32}


def test_nested_and_repeated_phases():
    """An outer phase sees its inner phases' peaks; a reused name keeps the largest peak."""
    tracker = LivePeakTracker()
    with tracker, tracker.phase("step"):
        for n in (10, 30, 20):
            with tracker.phase("micro"):
                t = torch.ones(n)
                del t
    assert tracker.peaks_by_phase == {"micro": 30 * F32, "step": 30 * F32}


def test_views_and_inplace_ops_add_nothing():
    """view, t(), slicing, detach and add_ of a baseline or a tracked storage cost nothing."""
    x = torch.ones(8, 8)
    tracker = LivePeakTracker([x])
    with tracker:
        y = x * 1
        live = tracker.live_bytes
        for t in (x, y):
            views = [t.view(64), t.t(), t[2:], t.detach(), t.add_(1), t.unsqueeze(0).expand(3, 8, 8)]
        assert tracker.live_bytes == live == 2 * 64 * F32
        del views
    assert tracker.peak_bytes == 2 * 64 * F32


def test_freed_tensor_lowers_live_and_reused_addresses_count_once():
    """Freeing lowers live bytes; a new storage at a freed address is counted, and only once."""
    a = torch.ones(300)
    tracker = LivePeakTracker([a])
    with tracker:
        for _ in range(5):
            t = a * 2  # the allocator typically hands back the address freed just before
            assert tracker.live_bytes == 2 * 300 * F32
            del t
            assert tracker.live_bytes == 300 * F32
        half = torch.ones(150)  # another size, possibly at a freed address
        assert tracker.live_bytes == 300 * F32 + 150 * F32
        del half
    assert tracker.live_bytes == tracker.start_bytes == 300 * F32
    assert tracker.peak_bytes == 2 * 300 * F32


def test_free_on_another_thread_is_seen():
    """A storage whose last reference dies on another thread is subtracted there."""
    tracker = LivePeakTracker()
    with tracker:
        box = [torch.ones(500)]
        assert tracker.live_bytes == 500 * F32
        worker = threading.Thread(target=box.clear)
        worker.start()
        worker.join()
        assert tracker.live_bytes == 0
    assert tracker.peak_bytes == 500 * F32


def test_storages_from_before_entry_are_invisible():
    """A tensor made before entry and not in the baseline, its views and in-place results count zero."""
    outside = torch.ones(100)
    tracker = LivePeakTracker()
    with tracker:
        outside.add_(1)
        view = outside.view(10, 10)
        assert tracker.live_bytes == 0
        inside = outside * 2  # a new storage made from it counts
        assert tracker.live_bytes == 100 * F32
        del view, inside


def test_torch_tensor_out_and_resize_are_counted():
    """torch.tensor (built outside the dispatcher), out= into an empty tensor and resize_ all allocate."""
    a = torch.ones(100)
    tracker = LivePeakTracker([a])
    with tracker:
        scalar = torch.tensor([1.0, 2.0])
        assert tracker.live_bytes - tracker.start_bytes == 2 * F32
        out = torch.empty(0)
        torch.mul(a, 2, out=out)
        assert tracker.live_bytes - tracker.start_bytes == 2 * F32 + 100 * F32
        out.resize_(250)  # a new buffer of 250 floats replaces the old 100
        assert tracker.live_bytes - tracker.start_bytes == 2 * F32 + 250 * F32
        del out
        assert tracker.live_bytes - tracker.start_bytes == 2 * F32
    assert tracker.peak_bytes == tracker.start_bytes + 2 * F32 + 250 * F32
    assert scalar.tolist() == [1.0, 2.0]


def test_sparse_tensors_count_their_components():
    """A COO tensor costs its indices and values, shared with the tensors it was built from, not its dense size."""
    tracker = LivePeakTracker()
    with tracker:
        indices = torch.tensor([[0, 1], [1, 0]])  # 4 int64
        values = torch.tensor([1.0, 2.0])  # 2 float32
        sparse = torch.sparse_coo_tensor(indices, values, (1000, 1000), check_invariants=True)
        assert tracker.live_bytes == 4 * 8 + 2 * F32
        del indices, values
        assert tracker.live_bytes == 4 * 8 + 2 * F32  # still held by the sparse tensor
        del sparse
        assert tracker.live_bytes == 0


def test_meta_tensors_hold_nothing():
    """Tensors on the meta device are not memory."""
    tracker = LivePeakTracker()
    with tracker:
        meta = torch.empty(10_000, device="meta") * 2
    assert tracker.peak_bytes == 0
    assert meta.shape == (10_000,)


# -- baseline and region --------------------------------------------------------------------


def test_baseline_is_deduplicated_and_never_subtracted():
    """Views of one storage in the baseline count once; freeing a baseline tensor inside keeps it counted."""
    a = torch.ones(100)
    p = nn.Parameter(torch.ones(10))
    baseline = [a, a[10:], a.view(10, 10), a, p, p.detach()]
    tracker = LivePeakTracker(baseline)
    del baseline
    with tracker:
        assert tracker.start_bytes == tracker.live_bytes == 110 * F32
        a.mul_(3)
        p.data.add_(1)
        del a  # the caller frees it: a baseline storage is pinned for the region
        assert tracker.live_bytes == 110 * F32
    assert tracker.peak_bytes == tracker.live_bytes == 110 * F32


def test_baseline_generator_is_read_once_without_keeping_tensors_alive():
    """A one-shot generator baseline serves every entry, and a baseline tensor freed before entry is not counted."""
    kept = torch.ones(100)
    dropped = torch.ones(50)
    tracker = LivePeakTracker(t for t in (kept, dropped))
    with tracker:
        assert tracker.start_bytes == 150 * F32
    del dropped
    with tracker:
        assert tracker.start_bytes == 100 * F32


def test_second_entry_starts_fresh():
    """Entering again resets the peak, the phases and the live bytes."""
    a = torch.ones(100)
    tracker = LivePeakTracker([a])
    with tracker, tracker.phase("first"):
        kept = a * 2  # alive across both regions, but not in the baseline
        tmp = torch.ones(1000)
        del tmp
    assert tracker.peak_bytes == 100 * F32 + 100 * F32 + 1000 * F32
    with tracker, tracker.phase("second"):
        b = a + 1
    assert tracker.start_bytes == 100 * F32
    assert tracker.peak_bytes == tracker.live_bytes == 200 * F32  # a + b; `kept` is invisible now
    assert tracker.peaks_by_phase == {"second": 200 * F32}
    assert tracker.peak_op == "aten.add.Tensor"
    del kept, b


def test_figures_freeze_on_exit_and_nothing_is_seen_outside():
    """After exit no death or op changes the figures; construction alone installs no mode."""
    tracker = LivePeakTracker()
    assert _get_current_dispatch_mode() is None
    torch.ones(10) * 2
    with tracker:
        assert _get_current_dispatch_mode() is tracker
        t = torch.ones(100)
    assert _get_current_dispatch_mode() is None
    del t
    torch.ones(1000) * 2
    assert tracker.live_bytes == tracker.peak_bytes == 100 * F32


def test_misuse_raises():
    """A phase outside the region and a nested entry of the same tracker are refused."""
    tracker = LivePeakTracker()
    with pytest.raises(RuntimeError, match="entered"), tracker.phase("x"):
        pass
    with tracker, pytest.raises(RuntimeError, match="reentrant"), tracker:
        pass


# -- autograd ---------------------------------------------------------------------------------


def test_linear_forward_backward_by_hand():
    """Linear(16 -> 8) on a 4 x 16 batch: the peak is params + input + output + loss + seed + gradients."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    tracker = LivePeakTracker(lin.parameters())
    with tracker:
        x = torch.randn(4, 16)
        y = lin(x)
        loss = y.sum()
        loss.backward()
    params = 8 * 16 * F32 + 8 * F32  # weight + bias: the baseline
    inputs = 4 * 16 * F32  # x, made inside the region
    output = 4 * 8 * F32  # y (addmm's result)
    saved = 0  # addmm saves x and the weight for backward: both already counted
    loss_bytes = F32  # the 0-d loss
    seed = F32  # ones_like(loss), the gradient backward starts from; freed when backward ends
    grads = 8 * 16 * F32 + 8 * F32  # weight.grad (mm) + bias.grad (sum over the batch)
    assert tracker.start_bytes == params == parameter_bytes(lin)
    assert grads == gradient_bytes(lin)
    assert tracker.peak_bytes == params + inputs + output + saved + loss_bytes + seed + grads
    assert tracker.live_bytes == params + inputs + output + loss_bytes + grads


def test_no_grad_forward_keeps_no_activations():
    """Under no_grad each layer's input is freed as the next is made; with grad, ReLU outputs are kept."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))
    x = torch.randn(4, 8)
    hidden, out = 4 * 32 * F32, 4 * 8 * F32
    results = {}
    for grad in (False, True):
        tracker = LivePeakTracker([*mlp.parameters(), x])
        with tracker, torch.set_grad_enabled(grad):
            y = mlp(x)
        results[grad] = (tracker.peak_bytes - tracker.start_bytes, tracker.live_bytes - tracker.start_bytes)
        del y
    # no_grad: at most a layer's input and output at once (e.g. Linear 1's output and its ReLU).
    assert results[False] == (2 * hidden, out)
    # grad: both ReLU outputs are saved for backward; the peak is at the second ReLU, with the
    # first ReLU's output (saved) and the second Linear's output (its input) alive.
    assert results[True] == (3 * hidden, 2 * hidden + out)


def test_saved_tensors_hooks_copies_are_counted():
    """A pack hook that saves a float16 copy adds the copy, which dies with the graph."""
    w = torch.ones(100, requires_grad=True)
    tracker = LivePeakTracker([w])
    with tracker:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.to(torch.float16), lambda t: t.float()):
            s = w.sin()  # sin saves its input, w, packed as a half copy
        assert tracker.live_bytes - tracker.start_bytes == 100 * F32 + 100 * 2  # s + the copy
        s.sum().backward()
        assert tracker.live_bytes - tracker.start_bytes == 100 * F32 + 100 * F32  # s + w.grad
    assert torch.allclose(w.grad, torch.ones(100).cos(), atol=1e-3)


def _blocks(width: int) -> nn.ModuleList:
    torch.manual_seed(0)
    return nn.ModuleList(
        nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()) for _ in range(4)
    )


@pytest.mark.parametrize("checkpointed", [False, True])
def test_checkpointing_agrees_with_activation_counter(checkpointed):
    """With both active, what the forward leaves alive is exactly ActivationCounter's saved bytes plus the loss."""
    batch, width = 64, 32
    blocks = _blocks(width)
    tracker = LivePeakTracker.for_training(blocks)
    with tracker:
        with ActivationCounter(blocks) as counter:
            h = torch.randn(batch, width)
            for block in blocks:
                h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
            loss = h.sum()
        del h
        left_by_forward = tracker.live_bytes - tracker.start_bytes
        loss.backward()
    activation = batch * width * F32
    # Saved: every block input (the batch, then each block's output) and, without
    # checkpointing, both ReLU outputs inside each block, the first of which is the input
    # of the second Linear.
    assert counter.saved_bytes == (4 if checkpointed else 1 + 4 * 2) * activation
    assert left_by_forward == counter.saved_bytes + F32  # + the loss
    assert gradient_bytes(blocks) == parameter_bytes(blocks)
    # Backward frees every saved activation, the batch included: the loss and the gradients remain.
    assert tracker.live_bytes == tracker.start_bytes + F32 + gradient_bytes(blocks)


def test_checkpointing_lowers_the_forward_backward_peak():
    """Checkpointing each block of an MLP stack lowers its forward+backward peak, recomputation included."""
    peaks = {}
    for checkpointed in (False, True):
        blocks = _blocks(32)
        tracker = LivePeakTracker.for_training(blocks)
        with tracker, tracker.phase("forward_backward"):
            h = torch.randn(64, 32)
            for block in blocks:
                h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
            h.sum().backward()
        peaks[checkpointed] = tracker.peaks_by_phase["forward_backward"]
        assert peaks[checkpointed] == tracker.peak_bytes
    # Without checkpointing the peak holds 9 saved activations plus the gradients being made;
    # with it, at most 4 block inputs plus one recomputed block.
    assert peaks[True] < peaks[False]
    assert peaks[False] - peaks[True] >= 2 * 64 * 32 * F32


def test_adam_state_appears_in_the_optimizer_phase():
    """Adam's first step adds 2 x param bytes + a 4-byte step per tensor; its transients are sqrt and div."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    optimizer = torch.optim.Adam(lin.parameters(), lr=1e-3, foreach=False)
    lin(torch.randn(4, 16)).sum().backward()
    params = parameter_bytes(lin)
    largest = 8 * 16 * F32  # the weight
    # The denominator of the largest parameter's update: sqrt(exp_avg_sq), then its quotient
    # by the bias correction, alive together before the sqrt is freed.
    transient = 2 * largest
    state = 2 * params + 2 * F32  # exp_avg + exp_avg_sq per tensor, and a float32 step each

    tracker = LivePeakTracker.for_training(lin, optimizer)
    for first in (True, False):
        with tracker:
            before = tracker.live_bytes
            with tracker.phase("optimizer"):
                optimizer.step()
            added = tracker.live_bytes - before
        # Parameters and gradients, plus (from the second entry) the state made by the first.
        assert tracker.start_bytes == 2 * params + (0 if first else state)
        assert added == (state if first else 0)
        assert tracker.peaks_by_phase["optimizer"] == before + added + transient
