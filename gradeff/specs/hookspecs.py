"""The gradeff plugin's own pytest hooks (added with ``pytest_addhooks``)."""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_gradeff_register(registries) -> None:
    """Add models, optimizers, strategies, fine-tuning methods or datasets to gradeff's axes.

    Called once per session while pytest configures, before any grid is parametrized, so the new
    keys get cells, ids, markers and ``--gradeff-<axis>`` selection like the built-in ones. Implement
    it in a ``conftest.py`` (the rootdir's or one given on the command line) or a plugin::

        from gradeff.axes.models import ModelSpec

        def pytest_gradeff_register(registries):
            registries.models.register(ModelSpec(key="mymodel", name="My model", family="decoder",
                                                 task="causal_lm", builder=build_my_model))

    Args:
        registries: a :class:`gradeff.studies.extend.Registries`: ``models``, ``optimizers``, ``strategies``,
            ``methods`` and ``datasets``, each with ``register(spec, grids=...)``. Every entry is
            checked as a built-in one would be; a bad one stops the session with a usage error naming
            this hook's file and the key.
    """
