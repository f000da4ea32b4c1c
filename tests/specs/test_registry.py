"""Registries: lookups, their errors, and the keys that become cell ids."""

import dataclasses

import pytest

from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES
from gradeff.specs.registry import KEY_PATTERN, Registry, UnknownKeyError
from gradeff.studies.grid import GRIDS, cells
from gradeff.studies.study import STUDIES


def test_axes_hold_the_papers_grids():
    """Main: 4 models × 6 optimizers × 3 strategies; PEFT: 4 backbones × 5 methods × (3 strategies on the first dataset
    + the standard strategy on the second)."""
    assert list(MODELS) == ["vit", "modernbert", "llm", "vlm", "vit_s", "tinyvit", "vim_s", "mambavision_t", "clip",
                            "siglip", "dinov2", "smolvlm", "vlm_prompt", "paligemma", "mobilevlm"]
    assert list(OPTIMIZERS)[:6] == ["sgd", "adam", "adamw", "adagrad", "adadelta", "cgd"]
    assert list(OPTIMIZERS)[6:] == ["adafactor", "adamw8bit", "sgdm"]
    assert list(STRATEGIES)[:6] == ["standard", "checkpoint", "accum", "budget", "compile_budget", "offload"]
    assert list(METHODS) == ["full", "lora", "adalora", "qlora", "bitfit", "linear_probe", "zero_shot"]
    main, peft = list(cells("main")), list(cells("peft"))
    assert len(main) == 72 and main[0].id == "vit-sgd-standard"
    assert len(peft) == 80 and {c.optimizer for c in peft} == {"adamw"}
    assert {c.strategy for c in peft} == {"standard", "checkpoint", "budget"}
    assert {c.strategy for c in peft if c.dataset == "dtd"} == {"standard"}
    assert {c.id for c in main}.isdisjoint(c.id for c in peft)


def test_main_ids_keep_their_form_and_fixed_axes_appear_only_when_changed():
    """A main cell's id is model-optimizer-strategy; a method or dataset other than the grid's is appended."""
    from gradeff.studies.grid import Cell

    assert Cell("llm", "adam", "accum").id == "llm-adam-accum"
    assert Cell("llm", "adam", "accum", method="lora").id == "llm-adam-accum-lora"
    assert Cell("vit", "adam", "standard", dataset="cifar100").id == "vit-adam-standard-cifar100"
    assert Cell("vit_s", "adamw", "checkpoint", "qlora", "dtd", grid="peft").id == "vit_s-qlora-checkpoint-dtd"
    assert Cell("vit_s", "sgd", "checkpoint", "qlora", "dtd", grid="peft").id == "vit_s-qlora-checkpoint-dtd-sgd"


@pytest.mark.parametrize("registry", [MODELS, OPTIMIZERS, STRATEGIES, TASKS, METHODS, GRIDS, STUDIES],
                         ids=lambda r: r.axis)
def test_unknown_key_lists_valid_choices(registry):
    """A typo raises a KeyError whose message names every valid key, under the axis's plural."""
    with pytest.raises(KeyError) as info:
        registry["nope"]
    message = str(info.value)
    assert "nope" in message
    assert all(key in message for key in registry)
    assert f"valid {registry.plural}: " in message


def test_an_irregular_plural_is_named_and_a_regular_one_derived():
    assert (STRATEGIES.plural, STUDIES.plural, MODELS.plural) == ("strategies", "studies", "models")


@pytest.mark.parametrize("registry", [MODELS, OPTIMIZERS, STRATEGIES, TASKS, METHODS, GRIDS, STUDIES],
                         ids=lambda r: r.axis)
def test_spec_keys_match_registry_keys(registry):
    """Each spec is filed under its own key, and keys are safe inside cell ids."""
    for key, spec in registry.items():
        assert spec.key == key
        assert KEY_PATTERN.match(key)


def test_every_model_task_exists():
    """A model's task key resolves in the task registry."""
    for spec in MODELS.values():
        assert TASKS[spec.task].key == spec.task


def test_keys_are_unique_across_axes():
    """No key names two axes' values, so a cell id's parts and -k terms are unambiguous."""
    keys = [key for registry in (MODELS, OPTIMIZERS, STRATEGIES, METHODS, TASKS) for key in registry]
    assert len(keys) == len(set(keys))


def test_a_grid_names_a_registered_study_or_is_refused():
    """Every grid names its study; a grid that names none, or one not registered, is refused where it is declared
    (the error names the valid studies), so no grid is read as another study's by default."""
    assert {grid.study for grid in GRIDS.values()} == set(STUDIES)
    main = GRIDS["main"]
    with pytest.raises(KeyError, match="unknown study 'mine'; valid studies: main, peft, baselines, memory, real"):
        dataclasses.replace(main, key="mine", study="mine")
    fields = {f.name: getattr(main, f.name) for f in dataclasses.fields(main) if f.name != "study"}
    with pytest.raises(TypeError, match="study"):
        type(main)(**fields)


def test_grids_name_known_keys():
    """Every grid's axis values resolve in their registries."""
    from gradeff.studies.grid import AXES, axis_registry

    for grid in GRIDS.values():
        for model in grid.models:
            for axis in AXES:
                assert all(axis_registry(axis)[key].key == key for key in grid.values(axis, model))


def test_registry_rejects_duplicates_and_bad_keys():
    """Duplicate keys and keys with '-' (the id separator) are refused at construction."""
    spec = MODELS["llm"]
    with pytest.raises(ValueError, match="duplicate"):
        Registry("model", [spec, spec])
    bad = type("Spec", (), {"key": "my-model"})()
    with pytest.raises(ValueError, match="a-z0-9_"):
        Registry("model", [bad])


def test_registry_is_read_only():
    """Registries cannot be filled by side effects."""
    with pytest.raises(TypeError):
        MODELS["new"] = MODELS["llm"]  # type: ignore[index]


def test_cells_validate_their_keys():
    """Asking the grid for an unknown axis value fails with the valid choices."""
    with pytest.raises(UnknownKeyError, match="valid optimizers: sgd, adam"):
        list(cells(optimizers=["adan"]))


def test_a_strategy_that_trains_as_standard_runs_once_per_model_unless_the_datasets_are_named():
    """The PEFT grid runs checkpointing and the adaptive budget on its first dataset only (they repeat the standard
    cell's training bit for bit); accumulation changes the training, so it runs on every dataset, and naming the
    datasets brings every strategy back on each."""
    from gradeff.axes.strategies import STRATEGIES

    strategies = ["standard", "checkpoint", "budget", "accum"]
    ran = {(c.strategy, c.dataset) for c in cells("peft", models=["vit_s"], methods=["lora"], strategies=strategies)}
    assert ran == {("standard", "cifar100"), ("checkpoint", "cifar100"), ("budget", "cifar100"),
                   ("accum", "cifar100"), ("standard", "dtd"), ("accum", "dtd")}
    assert {s for s in strategies if STRATEGIES[s].trains_as_standard} == {"checkpoint", "budget"}
    named = {(c.strategy, c.dataset) for c in cells("peft", models=["vit_s"], methods=["lora"], strategies=strategies,
                                                    datasets=["dtd", "cifar100"])}
    assert len(named) == 8
    # A grid without the setting runs the full product.
    assert len(list(cells("baselines", models=["dinov2"]))) == 2
