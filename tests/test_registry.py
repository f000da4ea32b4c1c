"""Registries: lookups, their errors, and the keys that become cell ids."""

import pytest

from gradeff.data import TASKS
from gradeff.grid import cells
from gradeff.models import MODELS
from gradeff.optim import OPTIMIZERS
from gradeff.registry import KEY_PATTERN, Registry, UnknownKeyError
from gradeff.strategies import STRATEGIES


def test_axes_hold_the_papers_grid():
    """4 models × 6 optimizers × 3 strategies, keys as the design names them."""
    assert list(MODELS) == ["vit", "modernbert", "llm", "vlm"]
    assert list(OPTIMIZERS) == ["sgd", "adam", "adamw", "adagrad", "adadelta", "cgd"]
    assert list(STRATEGIES) == ["standard", "checkpoint", "accum"]
    assert len(list(cells())) == 72


@pytest.mark.parametrize("registry", [MODELS, OPTIMIZERS, STRATEGIES, TASKS], ids=lambda r: r.axis)
def test_unknown_key_lists_valid_choices(registry):
    """A typo raises a KeyError whose message names every valid key."""
    with pytest.raises(KeyError) as info:
        registry["nope"]
    message = str(info.value)
    assert "nope" in message
    assert all(key in message for key in registry)


@pytest.mark.parametrize("registry", [MODELS, OPTIMIZERS, STRATEGIES, TASKS], ids=lambda r: r.axis)
def test_spec_keys_match_registry_keys(registry):
    """Each spec is filed under its own key, and keys are safe inside cell ids."""
    for key, spec in registry.items():
        assert spec.key == key
        assert KEY_PATTERN.match(key)


def test_every_model_task_exists():
    """A model's task key resolves in the task registry."""
    for spec in MODELS.values():
        assert TASKS[spec.task].key == spec.task


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
