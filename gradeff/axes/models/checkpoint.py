"""Published checkpoints into the PEFT backbones: check a layout, load it, or build a model from it.

:func:`check_layout` compares a checkpoint's keys and shapes, through the backbone's key map
(:mod:`gradeff.axes.models.keymaps`), with the model a profile builds (on ``meta``: no memory, no weights read); it
is what ``--gradeff-weights`` runs before the first cell, so a corrupt or mismatched checkpoint stops the
session with the offending keys named. :func:`load_checkpoint` loads the tensors into a built model under
the same rules, and :func:`from_checkpoint` does both for a user who wants the model.

The rules: every key of the checkpoint must land on one of the model's, every key of the model must be
given (BatchNorm's ``num_batches_tracked`` may be absent), and shapes must agree. The one exception is the
classification head when the checkpoint's classes are not the cell's (ImageNet's 1000 against CIFAR-100's
100): the head keeps the model's own seeded initialisation, and the report says so. A head whose input width
differs is a mismatch like any other.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gradeff.axes.models import MODELS, build_model
from gradeff.axes.models.keymaps import KEY_MAPS, KeyMap, MappedKeys, unwrap
from gradeff.axes.models.weights import (
    StartingWeights,
    WeightSource,
    WeightSourceError,
    describe,
    load_state_dict,
    read_shapes,
    resolve,
)

if TYPE_CHECKING:
    import torch

__all__ = ["CheckpointError", "Layout", "check_layout", "check_source", "from_checkpoint", "given_weights",
           "load_checkpoint", "model_type", "resolve_for"]

# How many offending keys a message lists before it counts the rest.
_SHOWN = 8


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model: the message names the offending keys.

    Attributes:
        missing: the model's keys the checkpoint does not give.
        unexpected: the checkpoint's keys that land nowhere (reference names).
        mismatched: ``(our key, reference key, checkpoint shape, model shape)`` of keys whose shapes differ.
    """

    def __init__(self, message: str, *, missing=(), unexpected=(), mismatched=()):
        super().__init__(message)
        self.missing, self.unexpected, self.mismatched = tuple(missing), tuple(unexpected), tuple(mismatched)


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """What a checkpoint gives a model, checked.

    Attributes:
        reference: the key map's reference (``timm vit_small_patch16_224``; ``gradeff`` for our own folders).
        unwrapped: how the state dict was found inside the file (``['model']``, a prefix removed), or ``""``.
        keys: tensors loaded.
        checkpoint_classes: rows of the checkpoint's head (``None``: it has none).
        head: ``loaded``, or ``reinitialised`` when the classes differ (or the checkpoint has no head).
    """

    reference: str
    unwrapped: str
    keys: int
    checkpoint_classes: int | None
    head: str

    def to_record(self) -> dict:
        return asdict(self)


def _split(value, parts: int) -> tuple:
    """One fused tensor (or its shape, when only shapes were read) in ``parts`` equal parts along dimension 0."""
    if isinstance(value, tuple):
        return tuple((value[0] // parts, *value[1:]) for _ in range(parts))
    return tuple(value.chunk(parts, dim=0))


def _listed(keys) -> str:
    keys = list(keys)
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more


def _identity(model: str) -> KeyMap:
    """A save_pretrained folder of our own class holds our own keys."""
    return KeyMap(model=model, reference="gradeff", rules=(), containers=(), prefixes=())


def _map(key_map: KeyMap, state: Mapping, split) -> tuple[MappedKeys, str]:
    state, how = unwrap(state, key_map) if key_map.rules else (dict(state), "")
    if not key_map.rules:
        return MappedKeys(ours=state, origin={key: key for key in state}, unexpected=()), how
    return key_map.apply(state, split), how


def check_layout(key_map: KeyMap, checkpoint: Mapping, model_shapes: Mapping[str, tuple], *,
                 num_labels: int | None) -> Layout:
    """Check a checkpoint's shapes (or tensors) against the model's, through ``key_map``.

    Args:
        checkpoint: the file's content as read (a state dict or a dict wrapping one); values are tensors or
            shapes.
        model_shapes: the model's state-dict keys → shapes (its head at ``num_labels`` classes).
        num_labels: the classes the cell trains on; ``None`` adopts the checkpoint's.

    Raises:
        CheckpointError: missing, unexpected or mismatched keys, named.
    """
    try:
        mapped, how = _map(key_map, checkpoint, _split)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    shapes = {key: tuple(getattr(value, "shape", value)) for key, value in mapped.ours.items()}
    # A reference key split in several (fused qkv) is named once.
    unexpected = list(mapped.unexpected) + list(dict.fromkeys(
        f"{mapped.origin[key]} (as {key})" if mapped.origin[key] != key else key
        for key in shapes if key not in model_shapes))
    head_rows = shapes.get(key_map.head[0], (None,))[0]
    head_in_checkpoint = all(key in shapes for key in key_map.head)
    reinitialise = not head_in_checkpoint or (num_labels is not None and head_rows != num_labels)
    missing = [key for key in model_shapes if key not in shapes and not key_map.is_optional(key)
               and not (reinitialise and key in key_map.head)]
    mismatched = []
    for key in model_shapes:  # in the model's order: embeddings first, the head last
        shape = shapes.get(key)
        if shape is None or model_shapes[key] == shape:
            continue
        # A head of other classes is replaced; one of another input width cannot be.
        if reinitialise and key in key_map.head and shape[1:] == model_shapes[key][1:]:
            continue
        mismatched.append((key, mapped.origin[key], shape, model_shapes[key]))
    if missing or unexpected or mismatched:
        # Shapes first: a checkpoint of the right model at another size is told apart by them at once.
        parts = []
        if mismatched:
            parts.append(f"{len(mismatched)} of another shape (checkpoint, model): " + _listed(
                f"{ours} {list(got)}, {list(want)}" + (f" (from {ref})" if ref != ours else "")
                for ours, ref, got, want in mismatched))
        if missing:
            parts.append(f"{len(missing)} missing (model keys the checkpoint does not give): {_listed(missing)}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (checkpoint keys that land nowhere): {_listed(unexpected)}")
        raise CheckpointError(f"does not fit {key_map.model} ({key_map.reference} layout): " + "; ".join(parts),
                              missing=missing, unexpected=unexpected, mismatched=mismatched)
    return Layout(reference=key_map.reference, unwrapped=how, keys=len(shapes),
                  checkpoint_classes=head_rows if head_in_checkpoint else None,
                  head="reinitialised" if reinitialise else "loaded")


def model_type(model: str) -> str | None:
    """The ``model_type`` of a model's own config class (what its ``save_pretrained`` folders say), if it has one."""
    spec = MODELS[model]
    if not spec.module:
        return None
    config = getattr(importlib.import_module(spec.module), "config", None)
    try:
        return config("tiny").model_type if config is not None else None
    except Exception:  # noqa: BLE001 - a builder module whose config() needs more than a profile
        return None


def resolve_for(model: str, text: str, *, allow_hub: bool = False) -> WeightSource:
    """Resolve ``text`` (a path or a hub id) as a weight source for ``model``
    (see :func:`gradeff.axes.models.weights.resolve`).

    A bare ``hub`` stands for the model's published repository (:attr:`gradeff.axes.models.ModelSpec.hub_id`).
    """
    key_map, hub_id = KEY_MAPS.get(model), MODELS[model].hub_id
    if text == "hub":
        if not hub_id:
            raise WeightSourceError(f"{model} has no default hub repository; give its id")
        text = hub_id
    # The default repository's documented checkpoint, where its snapshot holds another copy beside it.
    prefer = key_map.hub_file if key_map is not None and text == hub_id else None
    return resolve(text, allow_hub=allow_hub, model_type=model_type(model), state_dicts=key_map is not None,
                   prefer=prefer)


def _model_shapes(model: str, profile: str, num_labels: int | None) -> dict[str, tuple]:
    built = build_model(model, profile, num_labels=num_labels, device="meta")
    return {key: tuple(tensor.shape) for key, tensor in built.state_dict().items()}


def _save_pretrained_shapes(model: str, folder: Path) -> dict[str, tuple]:
    """The shapes of the model a ``save_pretrained`` folder's config builds (on ``meta``).

    The config, not the weight file, is compared: transformers may store a model's tensors under other
    names than its modules have (its checkpoint conversion), and ``from_pretrained`` builds from the config.
    """
    import torch

    model_class = type(build_model(model, "tiny", device="meta"))
    try:
        config = model_class.config_class.from_pretrained(folder)
    except Exception as exc:  # noqa: BLE001 - a config.json transformers cannot read
        raise WeightSourceError(f"{folder}/config.json: {type(exc).__name__}: {exc}") from None
    with torch.device("meta"):
        built = model_class(config)
    return {key: tuple(tensor.shape) for key, tensor in built.state_dict().items()}


def check_source(model: str, source: WeightSource, profile: str, *, num_labels: int | None = None) -> Layout | None:
    """Check a resolved source against ``model`` at ``profile``, reading headers only where it can.

    A state dict goes through the key map; the model a backbone's ``save_pretrained`` folder configures is
    checked key for key against the profile's model. Other ``save_pretrained`` folders (the baselines', whose
    architecture the folder's own config decides) are only opened by their loader: ``None``.

    Raises:
        CheckpointError: keys that do not fit, named. WeightSourceError: a file that cannot be read.
    """
    key_map = KEY_MAPS.get(model)
    if key_map is None:
        return None
    if source.format == "save_pretrained":
        key_map, shapes = _identity(model), _save_pretrained_shapes(model, Path(source.path))
    else:
        shapes = read_shapes(source.path)
    if num_labels is None:
        # The configuration the checkpoint implies: its own classes (the profile's where it has no head).
        num_labels = _head_rows(key_map, shapes)
    return check_layout(key_map, shapes, _model_shapes(model, profile, num_labels), num_labels=num_labels)


def _head_rows(key_map: KeyMap, shapes: Mapping) -> int | None:
    try:
        mapped, _ = _map(key_map, shapes, _split)
    except ValueError:
        return None  # check_layout names what is wrong with the file
    head = mapped.ours.get(key_map.head[0])
    return head[0] if head else None


def load_checkpoint(model: torch.nn.Module, key: str, path: str | Path, *, num_labels: int | None) -> Layout:
    """Load a state-dict file into ``model`` (built, at the checkpoint's shapes) by its key map.

    The model's head keeps its own (seeded) initialisation when the checkpoint's classes differ from
    ``num_labels``; every other tensor is replaced.

    Returns:
        What was loaded.

    Raises:
        CheckpointError: keys that do not fit, named. WeightSourceError: a file that cannot be read.
    """
    import torch

    key_map = KEY_MAPS[key]
    checkpoint = load_state_dict(path)
    own = model.state_dict()
    layout = check_layout(key_map, checkpoint, {k: tuple(v.shape) for k, v in own.items()}, num_labels=num_labels)
    mapped, _ = _map(key_map, checkpoint, _split)
    tensors = {k: v for k, v in mapped.ours.items() if not (layout.head == "reinitialised" and k in key_map.head)}
    with torch.no_grad():
        for name, tensor in tensors.items():
            # copy_ keeps the model's dtype and device (and any parameter wrapper), converting the checkpoint's.
            own[name].copy_(tensor)
    return layout


def from_checkpoint(key: str, source: str | Path, *, num_labels: int | None = None, profile: str = "paper",
                    allow_hub: bool = False, device: str = "cpu") -> torch.nn.Module:
    """A PEFT backbone with a published checkpoint's weights.

    Args:
        key: ``vit_s``, ``tinyvit``, ``vim_s`` or ``mambavision_t`` (or another model, from a ``save_pretrained``
            folder or hub id only).
        source: a state-dict file, a folder holding one, a ``save_pretrained`` folder, or a hub id
            (see :mod:`gradeff.axes.models.weights`; ``"hub"`` is the backbone's default repository).
        num_labels: classes of the head; ``None`` keeps the checkpoint's. Other classes than the checkpoint's
            get a fresh head (seed it with ``torch.manual_seed`` before the call).
        profile: the configuration to build (``paper``: the published shapes); a ``save_pretrained`` folder
            brings its own.
        allow_hub: download a hub id (off: a hub id is refused).
        device: where the model is built.

    Returns:
        The model in evaluation mode, its load record in ``model.gradeff_weights``.

    Raises:
        WeightSourceError: a source that cannot be resolved or read. CheckpointError: keys that do not fit.
    """
    resolved = resolve_for(key, str(source), allow_hub=allow_hub)
    if resolved.format == "save_pretrained":
        model = build_model(key, profile, num_labels=num_labels, weights_dir=resolved.path, device=device)
        record = describe(resolved)
    else:
        if num_labels is None:
            # The configuration the checkpoint implies: its own number of classes.
            num_labels = check_source(key, resolved, profile).checkpoint_classes
        else:
            check_source(key, resolved, profile, num_labels=num_labels)
        model = build_model(key, profile, num_labels=num_labels, device=device)
        record = describe(resolved) | load_checkpoint(model, key, resolved.path, num_labels=num_labels).to_record()
    model.gradeff_weights = record
    return model.eval()


def given_weights(model: str, text: str, profile: str, *, num_labels: int | None, seed: int):
    """The :class:`gradeff.axes.models.weights.StartingWeights` of a cell whose weights the user gave
    (``--gradeff-weights``).

    ``text`` was resolved and checked when the session started (it is a local path by now); here its record
    is made, with the head's fate for this cell's classes (re-initialised from ``seed`` or loaded).
    """
    source = resolve_for(model, text)
    record = describe(source)
    layout = check_source(model, source, profile, num_labels=num_labels)
    if layout is not None:
        record |= layout.to_record()
        if layout.head == "reinitialised":
            record["head_seed"] = seed
    return StartingWeights(source="local", path=source.path, format=source.format, checkpoint=record)
