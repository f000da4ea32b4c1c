"""The files pytest and its other loaded plugins will write, checked with gradeff's own before the first cell.

gradeff refuses two of its own outputs on one path (:func:`gradeff.pytest.gate.path_conflicts`), but a results file
is just as gone when pytest's ``--junitxml`` or pytest-benchmark's ``--benchmark-json`` writes over it at the end of
the session (the JUnit file even under ``--collect-only``). :func:`plugin_outputs` names every output file the
session's loaded plugins were asked to write; the gradeff plugin checks them with its own when it configures, before
pytest's logging plugin (``trylast``) opens ``--log-file`` for writing, and refuses the session naming both options.

The file ``--benchmark-save`` will write is named by pytest-benchmark's storage, open only once that plugin has
configured: this module checks it when the session starts, after every plugin has configured and before anything
runs (a refusal there ends the session before its end writes any file). pytest-benchmark never writes over an
existing file there, but one of gradeff's files yet to be written could be that very path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gradeff.pytest.gate import path_conflicts
from gradeff.pytest.options import SETTINGS

__all__ = ["KNOWN_OUTPUTS", "benchmark_save_file", "plugin_outputs"]

# (the option's dest, its flag): files pytest and common plugins write. A plugin that is not loaded has no such
# option, and getoption's default leaves it out.
KNOWN_OUTPUTS = (
    ("xmlpath", "--junitxml"),  # pytest's JUnit XML, written at the session's end
    ("log_file", "--log-file"),  # pytest's logging plugin, opened when it configures ("w" by default)
    ("report_log", "--report-log"),  # pytest-reportlog
    ("htmlpath", "--html"),  # pytest-html
    ("json_report_file", "--json-report-file"),  # pytest-json-report (used with --json-report)
    ("benchmark_json", "--benchmark-json"),  # pytest-benchmark's JSON of every round
)
_BENCHMARK_SAVE = "--benchmark-save (in --benchmark-storage)"


def plugin_outputs(config: pytest.Config) -> dict[str, Path]:
    """The output files this session's loaded plugins (pytest's own included) were asked to write, by the option that
    names each (``{"--junitxml": Path("r.xml"), ...}``); options not given, or of plugins not loaded, are left out.

    Args:
        config: the session's configuration.

    Returns:
        Option (as a user would name it) → the path it writes.
    """
    outputs: dict[str, Path] = {}
    for dest, flag in KNOWN_OUTPUTS:
        value = config.getoption(dest, None)
        if dest == "log_file" and not value:
            try:
                value = config.getini("log_file")  # the ini setting where the option is not given
            except ValueError:
                value = None
        if value and not isinstance(value, bool):
            outputs[flag] = Path(value)
    debug = config.getoption("debug", None)
    if isinstance(debug, str) and debug:
        outputs["--debug"] = Path(debug)
    return outputs


def benchmark_save_file(config: pytest.Config) -> Path | None:
    """The file ``--benchmark-save NAME`` / ``--benchmark-autosave`` will write: ``STORAGE/<machine>/NNNN_NAME.json``,
    NNNN the storage's next number (``None``: not saving, pytest-benchmark not configured, or a storage that is not
    a folder)."""
    session = getattr(config, "_benchmarksession", None)
    save = config.getoption("benchmark_save", None) or config.getoption("benchmark_autosave", None)
    if session is None or not save:
        return None
    storage = getattr(session, "storage", None)
    folder, number = getattr(storage, "path", None), getattr(storage, "_next_num", None)
    if not isinstance(folder, Path) or number is None:
        return None  # a storage elsewhere (Elasticsearch): nothing on this disk
    machine = getattr(storage, "default_machine_id", None)
    return (folder / machine if machine else folder) / f"{number}_{save}.json"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse the session where ``--benchmark-save``'s file is one of the session's other outputs."""
    config = session.config
    settings = config.stash.get(SETTINGS, None)
    saved = benchmark_save_file(config)
    if settings is None or saved is None:
        return
    conflicts = [conflict for conflict in path_conflicts(
        results=settings.results, report=settings.report, baseline=settings.baseline,
        compare_args=settings.compare_args, others=plugin_outputs(config) | {_BENCHMARK_SAVE: saved})
        if _BENCHMARK_SAVE in conflict]
    if conflicts:
        raise pytest.UsageError("; ".join(conflicts))
