"""Exact peak of tensor memory alive at once during a region, on any device.

:class:`LivePeakTracker` answers "what must fit" for one training step (forward, backward,
optimizer step) the way a GPU allocator's ``max_memory_allocated`` would, but from the
tensors themselves: it is exact to the byte, identical on CPU and GPU, and free of the
allocator's history. It is a ``TorchDispatchMode``, the documented hook that sees every
ATen op and the tensors it returns, whatever the device, including the ops autograd runs
for ``.backward()``, the recomputation of activation checkpointing and those run inside
saved-tensor hooks.

What is counted: the storages of the baseline tensors given on entry (parameters,
buffers, gradients, optimizer state, ...) plus every storage an op inside the region
creates, while it is alive. Storages are deduplicated by address and device, as in
:mod:`gradeff.meters.memory`, so views and in-place results cost nothing, and each new
storage is followed through a weak reference, so its death lowers the live figure at the
moment it happens. The peak is read after every op, when its outputs exist and its inputs
are still alive, which is when an allocator's peak is reached too.

What is not seen, by construction:

* Storages alive before entry that are neither in the baseline nor created inside (a
  batch built before the region, a preallocated buffer), and views or in-place results
  of them: an op output aliasing an op input is never new.
* Memory a kernel allocates and frees before returning (matmul packing buffers,
  cuBLAS/cuDNN workspaces, reduction scratch) and memory that never backs a returned
  tensor; tensors made in C++ outside the dispatcher (the RNG states checkpointing
  keeps, ``torch.get_rng_state()``) and ops on tensor subclasses' inner tensors, which
  run with the mode switched off. (``torch.tensor`` and ``torch.from_numpy`` do reach
  it, through ``aten.lift_fresh``, and count as new, even when a NumPy array made
  before entry owns the memory.)
* The allocator itself: rounding of requests to block sizes, blocks cached after being
  freed, fragmentation, plus the CUDA context, kernels and library handles; and anything
  that is not a tensor (Python objects, NumPy arrays, data-loader workers).
* Ops run on other threads, as the mode is per thread (autograd's device threads inherit
  it and are seen), and compiled code (``torch.compile``, custom kernels called without
  the dispatcher).

The figure is still the one to plan with: every tensor it counts must be resident at the
same moment in any correct execution, whatever the allocator, so it is the floor that
memory must clear; it depends only on the program, so it is reproducible across runs,
machines and devices; and what the allocator adds on top (the difference to the GPU
meter's ``alloc_peak_bytes`` and ``reserved_peak_bytes``) is then its overhead, measured
apart rather than mixed in.

The tracker costs one Python call per op while entered (and nothing otherwise), so use it
on a single measurement step, never in timed epochs.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gradeff.meters.storage import storage_of

if TYPE_CHECKING:
    from typing import Self

__all__ = ["LivePeakTracker"]

_Key = tuple[str, int]
# ``torch.tensor(...)`` builds its data outside the dispatcher and hands it to this op, whose
# output aliases its input by schema although the storage is brand new.
_FRESH_OPS = frozenset({torch.ops.aten.lift_fresh.default})
_COMPRESSED_ROWS = (torch.sparse_csr, torch.sparse_bsr)
_COMPRESSED_COLUMNS = (torch.sparse_csc, torch.sparse_bsc)


def _parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors whose storages hold ``t``'s data: its components for a sparse layout."""
    layout = t.layout
    if layout == torch.sparse_coo:
        # ``_indices``/``_values`` rather than the public ones, which refuse uncoalesced tensors.
        return t._indices(), t._values()
    if layout in _COMPRESSED_ROWS:
        return t.crow_indices(), t.col_indices(), t.values()
    if layout in _COMPRESSED_COLUMNS:
        return t.ccol_indices(), t.row_indices(), t.values()
    return (t,)


def _followed(t: torch.Tensor) -> Iterator[tuple[Any, _Key, int, str]]:
    """(object to follow, dedup key, bytes, device) for each piece of memory behind ``t``."""
    for part in _parts(t):
        storage, key, nbytes = storage_of(part)
        device = str(part.device)
        if key is not None:
            yield storage, key, nbytes, device
        elif nbytes and part.device.type != "meta":
            # No address to deduplicate or follow (a subclass without a storage of its
            # own): follow the tensor object, which torch keeps for as long as the tensor
            # lives. Its views are separate objects and count again, an overestimate.
            yield part, ("tensor@" + device, id(part)), nbytes, device
        # Empty storages and meta tensors hold no memory.


# op -> whether it writes to an input; filled on first sight, as schemas never change.
_WRITES_INPUTS: dict[Any, bool] = {}


def _writes_inputs(func: Any) -> bool:
    """Whether an op may write to one of its inputs (in-place or ``out=``), by its schema."""
    writes = _WRITES_INPUTS.get(func)
    if writes is None:
        schema = getattr(func, "_schema", None)
        writes = schema is None or any(a.alias_info is not None and a.alias_info.is_write
                                       for a in (*schema.arguments, *schema.returns))
        _WRITES_INPUTS[func] = writes
    return writes


def _input_keys(args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[_Key]:
    """Dedup keys of the storages behind an op's tensor arguments."""
    return {key for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)
            for _, key, _, _ in _followed(a)}


def _piece_of(obj: Any) -> tuple[_Key, int, str] | None:
    """(key, bytes, device) of an object :func:`_followed` yields, read now; ``None`` if empty."""
    if isinstance(obj, torch.Tensor):  # a tensor without a storage of its own, followed as itself
        return next(((key, nbytes, device) for _, key, nbytes, device in _followed(obj)), None)
    ptr = obj.data_ptr()
    return ((str(obj.device), ptr), obj.nbytes(), str(obj.device)) if ptr else None


class LivePeakTracker(TorchDispatchMode):
    """Context manager measuring the peak bytes of tensors alive at once in a region.

    Example::

        tracker = LivePeakTracker.for_training(model, optimizer)
        with tracker:
            with tracker.phase("forward_backward"):
                model(**batch).loss.backward()
            with tracker.phase("optimizer"):
                optimizer.step()
        print(tracker.peak_bytes, tracker.peaks_by_phase)

    Baseline storages are pinned: they count as alive for the whole region, even if the
    caller frees one inside it, and nothing done to them (views, in-place updates) counts
    again. Clear gradients before entering rather than inside the region if their memory
    is not to be counted. Storages alive on entry but outside the baseline are invisible
    (see the module's documentation for everything the tracker cannot see).

    Entering again starts afresh: the baseline is read anew and every figure is reset.
    The figures are updated while the region is open (from any thread) and frozen when it
    closes; the tracker then holds no reference to any tensor.

    Attributes:
        start_bytes: Bytes of the distinct baseline storages on entry.
        live_bytes: Bytes alive now (baseline included) while the region is open; after
            it closes, the bytes alive when it closed.
        peak_bytes: Largest ``live_bytes`` reached in the region.
        peak_by_device: Per device (``"cpu"``, ``"cuda:0"``, ...), the largest live bytes
            on that device; the maxima of different devices may fall at different times.
        peaks_by_phase: Per phase name, the largest ``live_bytes`` reached while a phase
            of that name was open (the largest over the phase's openings).
        peak_op: Name of the op whose outputs set ``peak_bytes`` (e.g.
            ``"aten.mm.default"``); ``None`` if the baseline alone is the peak.
    """

    def __init__(self, baseline: Iterable[torch.Tensor] | Callable[[], Iterable[torch.Tensor]] = ()) -> None:
        """Create a tracker; it measures nothing until entered.

        Args:
            baseline: Tensors that are alive when the region opens and are to be counted,
                either as an iterable, read now and followed through weak references to
                their storages (nothing is kept alive; a storage freed before entry is
                not counted, and the iterable may be a one-shot generator), or as a
                callable returning them, called at every entry (use it when the baseline
                changes between entries, e.g. optimizer state appears after a first step,
                or when the model moves device after the tracker is built).
        """
        super().__init__()
        if callable(baseline):
            self._baseline_fn: Callable[[], Iterable[torch.Tensor]] | None = baseline
            self._baseline_refs: list[weakref.ref[Any]] = []
        else:
            self._baseline_fn = None
            self._baseline_refs = [weakref.ref(obj) for t in baseline for obj, *_ in _followed(t)]
        # Dispatch handlers of autograd's device threads and weak-reference callbacks from any
        # thread update these; the lock is reentrant because a garbage collection triggered in
        # the locked section can free a storage and run a callback on the same thread.
        self._lock = threading.RLock()
        self._active = False
        # key -> (weak reference to the storage, its bytes, device, id of the storage)
        self._live: dict[_Key, tuple[weakref.ref[Any], int, str, int]] = {}
        # id of a followed storage -> its key, to notice a storage whose buffer moved (resize_).
        self._key_of: dict[int, _Key] = {}
        # key -> weak reference to the baseline storage at that address.
        self._pinned: dict[_Key, weakref.ref[Any]] = {}
        self._live_by_device: dict[str, int] = {}
        self._open_phases: list[list[Any]] = []  # [name, peak] per open phase, innermost last
        self.start_bytes = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_by_device: dict[str, int] = {}
        self.peaks_by_phase: dict[str, int] = {}
        self.peak_op: str | None = None

    @classmethod
    def for_training(cls, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> LivePeakTracker:
        """A tracker whose baseline is everything a training step holds on entry.

        The baseline is read at each entry: the model's parameters and buffers, the
        gradients present, and every tensor in the optimizer's state.

        Args:
            model: The model being trained.
            optimizer: Its optimizer, if its state is to be counted.

        Returns:
            The tracker, not yet entered.
        """

        def resident() -> list[torch.Tensor]:
            params = list(model.parameters())
            tensors = [*params, *model.buffers(), *(p.grad for p in params if p.grad is not None)]
            if optimizer is not None:
                tensors += [v for state in optimizer.state.values() for v in state.values()
                            if isinstance(v, torch.Tensor)]
            return tensors

        return cls(resident)

    # -- region ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._active:
            raise RuntimeError("LivePeakTracker is already entered; it is not reentrant")
        if self._baseline_fn is not None:
            pinned = [obj for t in self._baseline_fn() for obj, *_ in _followed(t)]
        else:
            pinned = [obj for obj in (ref() for ref in self._baseline_refs) if obj is not None]
        with self._lock:
            self._live, self._key_of, self._pinned, self._live_by_device = {}, {}, {}, {}
            self._open_phases = []
            self.peak_by_device, self.peaks_by_phase, self.peak_op = {}, {}, None
            self.live_bytes = 0
            for obj in pinned:
                self._pin(obj)
            self.start_bytes = self.peak_bytes = self.live_bytes
            self.peak_by_device = dict(self._live_by_device)
            self._active = True
        try:
            super().__enter__()
        except BaseException:
            self._active = False
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        with self._lock:
            self._active = False
            # Dropping the weak references drops their callbacks: the figures freeze and
            # no storage dying later reaches this object.
            self._live, self._key_of, self._pinned = {}, {}, {}
            self._open_phases = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the peak reached while this block runs under ``peaks_by_phase[name]``.

        Phases may nest (an open outer phase keeps recording) and a name may be reused (e.g.
        one ``"forward"`` per micro-batch): the largest peak is kept.

        Args:
            name: The phase's name.

        Raises:
            RuntimeError: If the tracker is not entered.
        """
        with self._lock:
            if not self._active:
                raise RuntimeError("LivePeakTracker.phase() needs the tracker to be entered")
            record = [name, self.live_bytes]
            self._open_phases.append(record)
        try:
            yield
        finally:
            with self._lock:
                if any(r is record for r in self._open_phases):
                    self._open_phases = [r for r in self._open_phases if r is not record]
                    self.peaks_by_phase[name] = max(self.peaks_by_phase.get(name, 0), record[1])

    # -- dispatch -------------------------------------------------------------------------

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        # An output that shares a storage with an input is a view or an in-place result, never
        # a new allocation. Input addresses are read before the op when it writes to an input
        # (``resize_`` and ``out=`` may give it a new buffer), and otherwise only if needed.
        input_keys = _input_keys(args, kwargs) if _writes_inputs(func) else None
        out = func(*args, **kwargs)
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if not outputs:
            return out
        if func in _FRESH_OPS:
            input_keys = set()
        with self._lock:
            if not self._active:
                return out
            for t in outputs:
                for obj, key, nbytes, device in _followed(t):
                    if self._is_known(obj, key):
                        continue
                    moved = self._key_of.get(id(obj))
                    entry = self._live.get(moved) if moved is not None else None
                    if entry is not None and entry[0]() is obj:
                        # A followed storage under a new address: ``resize_`` gave it a new
                        # buffer and freed the old one.
                        self._retire(moved)
                    else:
                        if input_keys is None:
                            input_keys = _input_keys(args, kwargs)
                        if key in input_keys:
                            continue  # a view or in-place result of a storage from before entry
                    self._follow(obj, key, nbytes, device, func)
        return out

    def _is_known(self, obj: Any, key: _Key) -> bool:
        pinned = self._pinned.get(key)
        if pinned is not None and pinned() is obj:
            return True
        entry = self._live.get(key)
        if entry is None:
            return False
        if entry[0]() is obj:
            return True
        # A storage freed without its callback having run yet (it waits for the lock on
        # another thread), whose address is now reused: retire it before counting the new.
        self._retire(key)
        return False

    def _pin(self, obj: Any) -> None:
        piece = _piece_of(obj)
        if piece is None or piece[0] in self._pinned:
            return
        key, nbytes, device = piece
        self._pinned[key] = weakref.ref(obj)
        self._change(device, nbytes)

    def _follow(self, obj: Any, key: _Key, nbytes: int, device: str, func: Any) -> None:
        ref = weakref.ref(obj, functools.partial(self._freed, key))
        self._live[key] = (ref, nbytes, device, id(obj))
        self._key_of[id(obj)] = key
        self._change(device, nbytes)
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_op = str(func)
        for record in self._open_phases:
            record[1] = max(record[1], self.live_bytes)
        self.peak_by_device[device] = max(self.peak_by_device.get(device, 0), self._live_by_device[device])

    def _change(self, device: str, nbytes: int) -> None:
        self.live_bytes += nbytes
        self._live_by_device[device] = self._live_by_device.get(device, 0) + nbytes

    def _retire(self, key: _Key) -> None:
        _, nbytes, device, obj_id = self._live.pop(key)
        if self._key_of.get(obj_id) == key:
            del self._key_of[obj_id]
        self._change(device, -nbytes)

    def _freed(self, key: _Key, ref: weakref.ref[Any]) -> None:
        with self._lock:
            entry = self._live.get(key)
            # The entry may already belong to a newer storage at the same address.
            if entry is not None and entry[0] is ref:
                self._retire(key)
