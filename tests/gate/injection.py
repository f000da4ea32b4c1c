"""Source that a test or calibration appends to a module of a commit it makes, to load a plugin of this folder
(``slowdown_plugin.py``, ``fault_plugin.py``) from that commit's own checkout when the module is imported."""


def loader_source(plugin: str, then: str, *, comment: str = "") -> str:
    """Python source defining ``_load_<plugin>()`` (the plugin module, read from ``tests/gate/<plugin>.py`` two
    folders above the module it is appended to) followed by ``then``, which calls it.

    Args:
        plugin: the plugin's module name (``slowdown_plugin``).
        then: the statement run at import (``optimizer_step = _load_slowdown_plugin().slowed(optimizer_step, 3.0,
            "spin")``).
        comment: a line saying why the commit carries it.
    """
    note = f"# {comment}\n" if comment else ""
    return f'''

{note}def _load_{plugin}():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tests" / "gate" / "{plugin}.py"
    spec = importlib.util.spec_from_file_location("{plugin}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


{then}
'''
