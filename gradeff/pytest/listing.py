"""``pytest --gradeff-list`` (what ``gradeff list`` runs): every registry's entries and where each came from.

A user's entries come from ``pytest_gradeff_register`` hooks (a conftest, a plugin), installed packages'
entry points and ``--gradeff-model-path``; they are registered while pytest configures. So the listing is
made by a pytest configuration of the current directory, the one ``pytest`` there would make: the
conftest files and plugins it loads are the ones whose entries are listed.
"""

from __future__ import annotations

import sys
from typing import TextIO

import pytest

from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES

__all__ = ["AXES", "listing_lines"]

# The registries a user can add to, in the order `gradeff list` prints them.
AXES = ("models", "optimizers", "strategies", "methods", "datasets")
BUILT_IN = "built-in"


def _registries() -> dict:
    return dict(zip(AXES, (MODELS, OPTIMIZERS, STRATEGIES, METHODS, TASKS), strict=True))


def listing_lines(axis: str | None = None) -> list[str]:
    """The registries as `gradeff list` prints them.

    Args:
        axis: one of :data:`AXES`: its keys only, one per line; ``None``: every axis, each entry with its
            name and its source (``built-in``, a conftest's path, an entry point, a ``--gradeff-model-path``).
    """
    registries = _registries()
    if axis is not None:
        return list(registries[axis])
    lines = []
    for name, registry in registries.items():
        lines.append(f"{name}:")
        width = max(map(len, registry))
        names = {key: spec.name for key, spec in registry.items()}
        name_width = max(map(len, names.values()))
        for key, title in names.items():
            lines.append(f"  {key:<{width}}  {title:<{name_width}}  ({registry.source(key) or BUILT_IN})")
    return lines


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("gradeff").addoption(
        "--gradeff-list", nargs="?", const="all", default=None, choices=("all", *AXES), metavar="AXIS",
        help="print every registry (models, optimizers, strategies, methods, datasets) with where each entry came "
             "from, after this session's conftests and plugins registered theirs, and run nothing; with AXIS, "
             "that registry's keys only")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    axis = config.getoption("gradeff_list")
    if axis is None:
        return None
    # The same steps as pytest's own --markers: configure (every registration runs here), print, unconfigure
    # (which drops the registered entries again).
    config._do_configure()
    try:
        _print(listing_lines(None if axis == "all" else axis), sys.stdout)
    finally:
        config._ensure_unconfigure()
    return 0


def _print(lines: list[str], stream: TextIO) -> None:
    stream.write("".join(f"{line}\n" for line in lines))
    stream.flush()
