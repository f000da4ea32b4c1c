"""What every axis stands on: the registries (one read-only mapping of frozen specs per axis), the plugin's hook
specs (``pytest_gradeff_register``), and the profiles with the :class:`~gradeff.specs.profiles.HParams` a model trains
with at one of them.

May import: nothing of gradeff: it is the floor every other package stands on.
"""
