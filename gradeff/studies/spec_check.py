"""A registered model's spec checked against the model it builds, before any cell runs.

The spec's names are promises about the model: ``lora_targets`` are module names LoRA, AdaLoRA and QLoRA adapt,
and the task's batch (:data:`gradeff.axes.data.BATCH_KEYS`) is passed to its ``forward`` as keyword arguments. A wrong
promise would otherwise fail in every cell that relies on it (peft's ``NoMatchingPeftModuleError``, a
``TypeError`` from ``forward``). The model is built once, on the ``meta`` device (shapes without memory) at the
``tiny`` profile, with the sizes a cell's build passes.
"""

from __future__ import annotations

import importlib
import inspect
import warnings

from gradeff.axes.data import BATCH_KEYS, TASKS
from gradeff.axes.models import ModelSpec
from gradeff.studies.hparams import task_default

__all__ = ["SpecMismatch", "check_against_model", "lora_target_misses", "missing_batch_keys"]

_PROFILE = "tiny"


class SpecMismatch(ValueError):
    """The spec promises what the model it builds does not have."""


def lora_target_misses(targets, module_names) -> list[str]:
    """The targets that name no module: peft matches a target to a module whose full name is the target or ends
    in ``.`` + the target."""
    names = list(module_names)
    return [target for target in targets
            if not any(name == target or name.endswith("." + target) for name in names)]


def missing_batch_keys(forward, keys) -> list[str]:
    """The batch keys ``forward`` cannot take as keyword arguments (none where it takes ``**kwargs``)."""
    parameters = inspect.signature(forward).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return []
    named = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                        inspect.Parameter.KEYWORD_ONLY)}
    return [key for key in keys if key not in named]


def _build_on_meta(spec: ModelSpec):
    given = dict(spec.hparams or {})
    hp = given.get(_PROFILE) or task_default(spec.task, _PROFILE)
    build = spec.builder if spec.builder is not None else importlib.import_module(spec.module).build
    sized = {"image_size": hp.image_size} if spec.native_image_size and hp.image_size is not None else {}
    return build(_PROFILE, vocab_size=None, num_labels=hp.num_classes, weights_dir=None, device="meta", **sized)


def check_against_model(spec: ModelSpec) -> None:
    """Build ``spec``'s model on meta and check its LoRA targets and its ``forward``'s arguments.

    A builder that cannot build on meta leaves the spec unchecked, with a warning that says why: its cells are
    still checked when they build.

    Raises:
        SpecMismatch: a LoRA target that names no module, or a batch key ``forward`` cannot take; the message
            names what the model has.
    """
    try:
        model = _build_on_meta(spec)
    except Exception as exc:  # noqa: BLE001 - a builder's own failure is reported, and its cells report theirs
        warnings.warn(f"model {spec.key!r}: not checked against its model: building it on meta at {_PROFILE} "
                      f"failed ({type(exc).__name__}: {exc})", stacklevel=2)
        return
    import torch  # the builder has imported it by now

    misses = lora_target_misses(spec.lora_targets, (name for name, _ in model.named_modules()))
    if misses:
        linears = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                          if isinstance(module, torch.nn.Linear)})
        raise SpecMismatch(f"lora_targets {misses} match no module of the model it builds; its linear layers end in: "
                           f"{', '.join(linears) or 'none'}")
    kind = TASKS[spec.task].kind
    keys = BATCH_KEYS.get(kind, ())
    missing = missing_batch_keys(model.forward, keys)
    if missing:
        raise SpecMismatch(f"its forward() takes no {', '.join(missing)}: every cell calls model(**batch), and the "
                           f"batch of a {kind} task holds {', '.join(keys)} (gradeff.axes.data.BATCH_KEYS)")
