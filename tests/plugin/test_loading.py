"""How the plugin is found: its pytest11 entry point, the same plugin whatever names it, and what `gradeff list` and
`gradeff --version` read from an installed gradeff."""

import subprocess
import sys
from importlib.metadata import distributions, version

import pytest

import gradeff
from gradeff.cli import main

# A project's conftest adding an entry to every axis (methods and datasets are not in a grid: selection only).
REGISTER = """
from gradeff.axes.data import TASKS
import dataclasses
from gradeff.axes.methods import MethodSpec
from gradeff.axes.optim import OptimizerSpec


def pytest_gradeff_register(registries):
    registries.optimizers.register(OptimizerSpec(key="rmsprop", name="RMSprop", target="torch.optim:RMSprop",
                                                 state_per_param=1, step_counter=True))
    registries.methods.register(MethodSpec(key="all_weights", name="Every weight", module="gradeff.axes.methods.full"))
    registries.datasets.register(dataclasses.replace(TASKS["causal_lm"], key="markov_again", name="Markov again"))
"""

PROBE = """
import gradeff.pytest.plugin as plugin
import gradeff.pytest_plugin as public_name


def test_probe(pytestconfig):
    manager = pytestconfig.pluginmanager
    assert public_name is plugin  # the public name is the plugin's module, not a second one holding its hooks
    assert [name for name, p in manager.list_name_plugin() if p is plugin] == ["gradeff.pytest_plugin"]
    assert len(manager.hook.pytest_gradeff_register.get_hookimpls()) == 1  # the conftest's, once
    assert pytestconfig.getoption("gradeff_profile") == "tiny"
"""


def test_the_entry_point_bears_the_plugins_public_name():
    """Installed metadata: one pytest11 entry point, named gradeff.pytest_plugin (what -p and pytest_plugins say)
    and loading the plugin's code, gradeff.pytest.plugin."""
    # Every distribution, as pytest reads them (a checkout's own gradeff.egg-info may stand first on sys.path).
    points = {(p.name, p.value) for dist in distributions() for p in dist.entry_points
              if p.group == "pytest11" and p.value.startswith("gradeff")}
    assert points == {("gradeff.pytest_plugin", "gradeff.pytest.plugin")}


@pytest.mark.parametrize("how", [(), ("-p", "gradeff.pytest_plugin")], ids=["entry-point", "and-dash-p"])
def test_the_plugin_is_registered_once_however_it_is_named(pytester, how):
    """Loaded by its entry point, named again by -p and by a conftest's pytest_plugins: one plugin, hooks once."""
    pytester.makeconftest('pytest_plugins = ["gradeff.pytest_plugin"]\n' + REGISTER)
    pytester.makepyfile(test_probe=PROBE)
    pytester.runpytest(*how, "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_without_autoloading_dash_p_loads_it(pytester, monkeypatch):
    """PYTEST_DISABLE_PLUGIN_AUTOLOAD: -p gradeff.pytest_plugin (the entry point's name) brings options and hooks."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(REGISTER)
    pytester.makepyfile(test_probe=PROBE)
    pytester.runpytest_subprocess("-p", "gradeff.pytest_plugin", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    unloaded = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gradeff-profile", "tiny")
    assert unloaded.ret == pytest.ExitCode.USAGE_ERROR


def test_gradeff_list_shows_every_registry_with_each_entrys_source(pytester):
    """Run in a project: every axis, the built-in entries marked so, the conftest's with the conftest's path."""
    conftest = pytester.makeconftest(REGISTER)
    listing = subprocess.run([sys.executable, "-m", "gradeff", "list"], cwd=pytester.path, capture_output=True,
                             text=True, timeout=120, check=False)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert [line for line in lines if not line.startswith(" ")] == [
        "models:", "optimizers:", "strategies:", "methods:", "datasets:"]
    by_key = {line.split()[0]: line for line in lines if line.startswith(" ")}
    assert by_key["llm"].endswith("(built-in)") and by_key["lora"].endswith("(built-in)")
    for key, name in (("rmsprop", "RMSprop"), ("all_weights", "Every weight"), ("markov_again", "Markov again")):
        assert name in by_key[key] and by_key[key].endswith(f"({conftest})"), by_key[key]
    methods = subprocess.run([sys.executable, "-m", "gradeff", "list", "methods"], cwd=pytester.path,
                             capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert methods[0] == "full" and methods[-1] == "all_weights"


def test_gradeff_list_stops_on_a_bad_registration(pytester):
    """A conftest registering a taken key: exit 2 and pytest's usage error naming the conftest and the key."""
    pytester.makeconftest("from gradeff.axes.optim import OPTIMIZERS\n\ndef pytest_gradeff_register(registries):\n"
                          "    registries.optimizers.register(OPTIMIZERS['adam'])\n")
    listing = subprocess.run([sys.executable, "-m", "gradeff", "list"], cwd=pytester.path, capture_output=True,
                             text=True, timeout=120, check=False)
    assert listing.returncode == 2
    assert "conftest.py: optimizer 'adam': duplicate optimizer key 'adam'" in listing.stderr


def test_version_is_the_installed_one(capsys):
    """`gradeff --version` prints gradeff.__version__, which the installed metadata carries (one source)."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"gradeff {gradeff.__version__}" == f"gradeff {version('gradeff')}"
