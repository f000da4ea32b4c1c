"""A user's own models, optimizers, strategies, methods and datasets on gradeff's axes.

Three ways in, all checked the same way as a built-in entry and all done while pytest configures,
before a grid is parametrized:

- a ``pytest_gradeff_register(registries)`` hook in a conftest or plugin (:mod:`gradeff.specs.hookspecs`);
- entry points of an installed package, one group per axis: ``gradeff.models``, ``gradeff.optimizers``,
  ``gradeff.strategies``, ``gradeff.methods``, ``gradeff.datasets``; an entry point names a spec or a
  list of specs;
- ``--gradeff-model-path [KEY=]PATH[:TASK]``: a local Hugging Face ``save_pretrained`` folder, loaded
  offline, becomes a model of the main study.

A new model, optimizer or strategy joins the main study's grid unless told otherwise (``grids=()``),
so it is crossed with every optimizer × strategy and reported like the built-in ones; a new method or
dataset is run with ``--gradeff-methods`` / ``--gradeff-datasets``, because adding a value to an axis
a grid holds fixed would change every id of that grid.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import io
import json
import pickle
import re
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import fields
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from gradeff.axes.data import TASKS, TaskSpec, make_dataset
from gradeff.axes.methods import METHODS, MethodSpec
from gradeff.axes.models import MODELS, ModelSpec, build_model
from gradeff.axes.optim import OPTIMIZERS, OptimizerSpec, build_optimizer
from gradeff.axes.strategies import STRATEGIES, StrategySpec
from gradeff.specs.profiles import PROFILES
from gradeff.specs.registry import Registry, open_for_registration, validate_key
from gradeff.studies.grid import GRIDS
from gradeff.studies.hparams import HParams, hparams_for, task_default
from gradeff.studies.spec_check import check_against_model

__all__ = ["ENTRY_POINT_GROUPS", "AxisRegistry", "Registries", "add_options", "check_state_law", "dump_registered",
           "load_registered", "model_path_spec", "register_all", "reset"]

# axis → (registry, spec class, entry-point group, grids a new entry joins by default)
_AXES: dict[str, tuple[Registry, type, str, tuple[str, ...]]] = {
    "models": (MODELS, ModelSpec, "gradeff.models", ("main",)),
    "optimizers": (OPTIMIZERS, OptimizerSpec, "gradeff.optimizers", ("main",)),
    "strategies": (STRATEGIES, StrategySpec, "gradeff.strategies", ("main",)),
    "methods": (METHODS, MethodSpec, "gradeff.methods", ()),
    "datasets": (TASKS, TaskSpec, "gradeff.datasets", ()),
}
ENTRY_POINT_GROUPS = {axis: group for axis, (_, _, group, _) in _AXES.items()}


def _grids() -> Registry:
    return GRIDS


class RegistrationError(ValueError):
    """A bad entry; the caller adds where it came from."""


def _findable(module: str) -> bool:
    """Whether ``module``'s top-level package is on ``sys.path``, looked up without importing anything.

    (``find_spec`` of a dotted name imports its parents: torch at configure time, which both slows
    collection and breaks a second in-process session that restores ``sys.modules``.)
    """
    try:
        return bool(module) and importlib.util.find_spec(module.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def _target(value: object, what: str) -> None:
    """A ``"module:name"`` whose module can be found (without importing it), or a callable."""
    if callable(value):
        return
    module, sep, name = str(value).partition(":")
    if not isinstance(value, str) or not sep or not name:
        raise RegistrationError(f"{what} must be 'module:name' or a callable, got {value!r}")
    if not _findable(module):
        raise RegistrationError(f"{what} {value!r}: no module {module!r} on sys.path")


def _check_model(spec: ModelSpec) -> None:
    if spec.builder is None and not spec.module:
        raise RegistrationError("missing builder: give builder=<callable> or module=<module with build()>")
    if spec.builder is not None and not callable(spec.builder):
        raise RegistrationError(f"builder must be callable, got {type(spec.builder).__name__}")
    if spec.builder is None and not _findable(spec.module):
        raise RegistrationError(f"missing builder: no module {spec.module!r} on sys.path")
    if spec.task not in TASKS:
        raise RegistrationError(f"unknown task {spec.task!r}; valid datasets: {', '.join(TASKS)}")
    validate_key(spec.family)  # the family is a pytest marker as well
    unknown = [m for m in spec.methods if m not in METHODS]
    if unknown:
        raise RegistrationError(f"unknown methods {unknown}; valid methods: {', '.join(METHODS)}")
    given = dict(spec.hparams or {})
    bad = [profile for profile, hp in given.items() if not isinstance(hp, HParams)]
    if bad:
        raise RegistrationError(f"hparams[{bad[0]!r}] is not a gradeff.studies.hparams.HParams")
    if "tiny" not in given:
        try:
            task_default(spec.task, "tiny")
        except KeyError as exc:
            raise RegistrationError(str(exc.args[0])) from None
    # A folder's model is a transformers class of the task's own architecture, with no LoRA targets of its own.
    if not (isinstance(spec.builder, functools.partial) and spec.builder.func is _load_folder):
        check_against_model(spec)


def _check_optimizer(spec: OptimizerSpec) -> None:
    _target(spec.target, "target")


def _check_method(spec: MethodSpec) -> None:
    if spec.apply is None and not _findable(spec.module):
        raise RegistrationError(f"missing builder: no module {spec.module!r} (with apply()) on sys.path")


def _check_dataset(spec: TaskSpec) -> None:
    _target(spec.builder, "builder")
    valid = [field.name for field in fields(HParams)]
    for profile, sizes in spec.sizes.items():
        if profile not in PROFILES:
            raise RegistrationError(f"sizes[{profile!r}]: unknown profile; valid profiles: {', '.join(PROFILES)}")
        unknown = sorted(set(sizes) - set(valid))
        if unknown:
            raise RegistrationError(f"sizes[{profile!r}]: {unknown} are not HParams fields; valid: {', '.join(valid)}")


_CHECKS: dict[str, Callable[[object], None]] = {
    "models": _check_model, "optimizers": _check_optimizer, "methods": _check_method, "datasets": _check_dataset,
}


class AxisRegistry:
    """One axis as a registration hook sees it: ``register(spec)`` and read access to what is there."""

    def __init__(self, axis: str, source: str):
        self.axis = axis
        self.source = source
        self._registry, self._spec_class, _, self._default_grids = _AXES[axis]

    def register(self, spec, *, grids: Iterable[str] | None = None):
        """Add ``spec`` to this axis and, for a model, optimizer or strategy, to ``grids`` (default: the main study).

        Returns:
            The spec.

        Raises:
            pytest.UsageError: a spec of the wrong type, a bad or taken key, a missing builder or an
                unknown task / method it refers to; the message names the source, the key and the valid keys.
        """
        key = spec.get("key") if isinstance(spec, dict) else getattr(spec, "key", None)
        grid_keys = self._default_grids if grids is None else tuple(grids)
        if grid_keys and not self._default_grids:
            raise pytest.UsageError(f"gradeff registration from {self.source}: {self.axis} {key!r} cannot join "
                                    f"a grid; select it with --gradeff-{self.axis}")
        try:
            if not isinstance(spec, self._spec_class):
                raise RegistrationError(f"expected a {self._spec_class.__module__}.{self._spec_class.__name__}, "
                                        f"got {type(spec).__name__}")
            validate_key(spec.key)
            _CHECKS.get(self.axis, lambda s: None)(spec)
            self._registry.register(spec, source=self.source)
        except ValueError as exc:
            raise pytest.UsageError(
                f"gradeff registration from {self.source}: {self._registry.axis} {key!r}: {exc}; "
                f"registered {self.axis}: {', '.join(self._registry)}") from None
        for grid in grid_keys:
            _join(grid, self.axis, spec.key, self.source)
        return spec

    def __contains__(self, key: str) -> bool:
        return key in self._registry

    def __iter__(self):
        return iter(self._registry)

    def __getitem__(self, key: str):
        return self._registry[key]


def _join(grid: str, axis: str, key: str, source: str) -> None:
    grids = _grids()
    if grid not in grids:
        raise pytest.UsageError(f"gradeff registration from {source}: unknown grid {grid!r} for {axis} {key!r}; "
                                f"valid grids: {', '.join(grids)}")
    spec = grids[grid]
    values = getattr(spec, axis)
    if key not in values:
        grids.register(dataclasses.replace(spec, **{axis: (*values, key)}), source=source, replace=True)


class Registries:
    """What ``pytest_gradeff_register`` receives: one :class:`AxisRegistry` per axis."""

    def __init__(self, source: str):
        self.source = source
        self.models = AxisRegistry("models", source)
        self.optimizers = AxisRegistry("optimizers", source)
        self.strategies = AxisRegistry("strategies", source)
        self.methods = AxisRegistry("methods", source)
        self.datasets = AxisRegistry("datasets", source)


def _all_registries() -> list[Registry]:
    return [registry for registry, *_ in _AXES.values()] + [_grids()]


def reset() -> None:
    """Back to the built-in entries only (end of a session)."""
    for registry in _all_registries():
        registry.reset()


# ---- --gradeff-model-path --------------------------------------------------------------------------------------

# What a folder's architecture name says about its task, and the Auto class that loads it.
_ARCHITECTURE_TASKS = (("ForCausalLM", "causal_lm"), ("ForMaskedLM", "masked_lm"),
                       ("ForImageClassification", "image_classification"))
_AUTO_CLASSES = {"causal_lm": "AutoModelForCausalLM", "masked_lm": "AutoModelForMaskedLM",
                 "image_classification": "AutoModelForImageClassification"}
_FAMILIES = {"causal_lm": "decoder", "masked_lm": "encoder", "image_classification": "vision"}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradeff", "gradeff benchmark grid")
    group.addoption("--gradeff-model-path", action="append", default=[], metavar="[KEY=]PATH[:TASK]",
                    help="benchmark a local Hugging Face save_pretrained folder (loaded offline) "
                         "as model KEY (default: "
                         "the folder's name) in the main study, on TASK (default: from its architecture: causal_lm, "
                         "masked_lm or image_classification); repeatable")


def _load_folder(folder: str, task_kind: str, key: str, profile: str, *, vocab_size=None, num_labels=None,
                 weights_dir=None, device="cpu"):
    """Build a model-path model: the folder's weights (or ``weights_dir``'s), offline, no repository code."""
    import transformers

    # torch, 2.3 s: the plugin imports this module
    from gradeff.axes.data.dataset import SPECIAL_TOKENS  # noqa: PLC0415
    from gradeff.axes.models._weights import instantiate  # noqa: PLC0415

    auto = getattr(transformers, _AUTO_CLASSES[task_kind])
    model = instantiate(auto, None, weights_dir=weights_dir or folder, device=device,
                        num_labels=num_labels if task_kind == "image_classification" else None)
    if task_kind != "image_classification":
        # The synthetic text tasks use token ids up to their states plus the special tokens (real text: its
        # tokenizer's).
        states = hparams_for(key, profile).num_states
        needed = states + len(SPECIAL_TOKENS) if states is not None else 0
        if model.config.vocab_size < max(needed, vocab_size or 0):
            hint = ("; tokenise the text with the folder's own tokenizer (--gradeff-tokenizer)" if vocab_size
                    else f"; the {profile} text task uses ids up to {needed - 1}")
            raise ValueError(f"{folder}: vocabulary of {model.config.vocab_size} tokens, the data's is "
                             f"{max(needed, vocab_size or 0)}{hint}")
        model.config.use_cache = False
    return model


def _key_of(name: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_") or "model"


def model_path_spec(text: str) -> ModelSpec:
    """The model spec of one ``--gradeff-model-path [KEY=]PATH[:TASK]``.

    Raises:
        pytest.UsageError: no such folder, no ``config.json``, an unknown task, or a task the folder's
            architecture does not say and the option does not give.
    """
    option = f"--gradeff-model-path {text}"
    key, sep, rest = text.partition("=")
    if not sep or "/" in key or not re.fullmatch(r"[a-z0-9_]+", key):
        key, rest = "", text
    path_text, sep, task = rest.rpartition(":")
    if not sep or task not in TASKS:
        if sep and not Path(rest).exists():
            raise pytest.UsageError(f"{option}: unknown task {task!r}; valid tasks: {', '.join(TASKS)}")
        path_text, task = rest, ""
    folder = Path(path_text).expanduser()
    if not folder.is_dir():
        raise pytest.UsageError(f"{option}: no such folder")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"{option}: not a save_pretrained folder (config.json: {exc})") from None
    architectures = config.get("architectures") or []
    if not task:
        task = next((t for arch in architectures for suffix, t in _ARCHITECTURE_TASKS if arch.endswith(suffix)), "")
        if not task:
            raise pytest.UsageError(f"{option}: cannot tell the task from architectures {architectures}; add :TASK "
                                    f"(one of {', '.join(TASKS)})")
    kind = TASKS[task].kind
    if kind not in _AUTO_CLASSES:
        raise pytest.UsageError(f"{option}: task {task!r} ({kind}) cannot be loaded from a folder; valid kinds: "
                                f"{', '.join(_AUTO_CLASSES)}")
    key = key or _key_of(folder.resolve().name)
    # A decoder that says it has no biases (Llama's attention_bias / mlp_bias) is skipped by BitFit with the reason.
    bias_flags = [config[flag] for flag in ("attention_bias", "mlp_bias") if flag in config]
    return ModelSpec(key=key, name=f"{config.get('model_type', 'model')} from {folder}", family=_FAMILIES[kind],
                     task=task, builder=functools.partial(_load_folder, str(folder), kind, key), fine_tunes=True,
                     has_biases=not bias_flags or any(bias_flags))


# ---- the session's entries in a spawned process (--gradeff-isolate) ------------------------------------------


def _load_from_file(module_name: str, path: str, qualname: str):
    """A function of a module that is not importable by name (a conftest under --import-mode=importlib)."""
    module = sys.modules.get(module_name)
    if getattr(module, "__file__", None) != path:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    value = module
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


class _EntryPickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, types.FunctionType):
            module = sys.modules.get(obj.__module__)
            path = getattr(module, "__file__", None)
            # A conftest's functions are pickled by file: its module name need not be importable elsewhere.
            if path and (Path(path).name == "conftest.py" or not _findable(obj.__module__)):
                return _load_from_file, (obj.__module__, path, obj.__qualname__)
        return NotImplemented


def dump_registered() -> bytes:
    """Every entry this session added (the grids they joined included), for :func:`load_registered` elsewhere."""
    entries = [(registry.axis, registry[key], source)
               for registry in _all_registries() for key, source in registry._sources.items()]
    buffer = io.BytesIO()
    _EntryPickler(buffer).dump(entries)
    return buffer.getvalue()


def load_registered(payload: bytes) -> None:
    """Register the entries of :func:`dump_registered` in this process (a cell's spawned process)."""
    by_axis = {registry.axis: registry for registry in _all_registries()}
    entries = pickle.loads(payload)
    with open_for_registration(by_axis.values()):
        for axis, spec, source in entries:
            by_axis[axis].register(spec, source=source, replace=True)


def check_state_law(optimizer: str, model: str = "llm", profile: str = "tiny", steps: int = 2) -> tuple[int, int]:
    """An optimizer's state law held against the state it really keeps, as gradeff's tests hold the built-in ones.

    Takes ``steps`` steps of ``model`` (through a closure, as the loop does) with the optimizer as a cell
    builds it, then compares.

    Returns:
        ``(predicted, measured)`` bytes: :meth:`~gradeff.axes.optim.OptimizerSpec.state_bytes` of the trainable
        parameters, and :func:`gradeff.meters.optimizer_state_bytes` of the optimizer. A registered
        optimizer's test asserts they are equal.
    """
    import torch

    from gradeff.meters import optimizer_state_bytes  # noqa: PLC0415 - torch, 2.3 s: the plugin imports this module

    hp = hparams_for(model, profile)
    batch = make_dataset(MODELS[model].task, hp, seed=0).batch(torch.arange(min(4, hp.batch_size)))
    torch.manual_seed(0)
    network = build_model(model, profile, num_labels=hp.num_classes)
    params = [p for p in network.parameters() if p.requires_grad]
    opt = build_optimizer(optimizer, params, hp.lr)

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = network(**batch).loss
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return OPTIMIZERS[optimizer].state_bytes(params), optimizer_state_bytes(opt)


# ---- the session's registration --------------------------------------------------------------------------------


def _hook_source(impl) -> str:
    return getattr(impl.plugin, "__file__", None) or impl.plugin_name


def _entry_point_specs(installed, group: str) -> Iterable[tuple[str, object]]:
    for point in installed.select(group=group):
        source = f"entry point {point.name} = {point.value} (group {group}" + (
            f", package {point.dist.name})" if getattr(point, "dist", None) is not None else ")")
        try:
            loaded = point.load()
        except Exception as exc:  # noqa: BLE001 - a broken package is the user's to fix: say which one
            raise pytest.UsageError(f"gradeff registration from {source}: cannot load it: "
                                    f"{type(exc).__name__}: {exc}") from None
        specs = loaded if isinstance(loaded, (list, tuple)) else [loaded]
        for spec in specs:
            yield source, spec


def _register_entry_points() -> None:
    installed = entry_points()  # read once: scanning every distribution per group costs 10 ms each
    for axis, group in ENTRY_POINT_GROUPS.items():
        for source, spec in _entry_point_specs(installed, group):
            getattr(Registries(source), axis).register(spec)


def register_all(config: pytest.Config) -> list[tuple[str, str]]:
    """Run every registration of this session: entry points, then hooks, then ``--gradeff-model-path``.

    Returns:
        ``(model key, folder)`` of each model path: its weights, as ``--gradeff-weights`` gives them.
    """
    weights = []
    with open_for_registration(_all_registries()):
        _register_entry_points()
        for impl in config.pluginmanager.hook.pytest_gradeff_register.get_hookimpls():
            source = _hook_source(impl)
            registries = Registries(source)
            try:
                impl.function(**{name: registries for name in impl.argnames})
            except pytest.UsageError:
                raise
            except (ValueError, TypeError, KeyError) as exc:
                # A spec that refuses its own fields (an unknown state law, a bad budget kind) fails in the hook.
                raise pytest.UsageError(f"gradeff registration from {source}: {type(exc).__name__}: {exc}") from None
        for text in config.getoption("gradeff_model_path", default=[]) or []:
            spec = model_path_spec(text)
            Registries(f"--gradeff-model-path {text}").models.register(spec)
            weights.append((spec.key, str(spec.builder.args[0])))
    return weights

