"""gradeff's grids and benchmarks, one parametrized test per grid.

Run from a checkout with ``pytest benchmarks ...``, or wherever gradeff is installed with
``pytest --pyargs gradeff.benchmarks ...`` (this folder is installed as ``gradeff.benchmarks``; see
``[tool.setuptools.package-dir]`` in pyproject.toml). The fixtures and options come from the gradeff
pytest plugin, which its ``pytest11`` entry point loads in every session.
"""
