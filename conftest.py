"""Root conftest: load the gradeff pytest plugin for the benchmarks and the tests."""

pytest_plugins = ["gradeff.pytest_plugin"]
