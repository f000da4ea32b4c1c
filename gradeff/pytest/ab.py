"""``--gradeff-ab REV``: the session's selected grid cells run side by side at REV and at the working tree.

Instead of running the grid's tests one by one, the session hands the cells they select (``-k``, ``-m``,
``--gradeff-<axis>``) to :func:`gradeff.scale.ab.run_revisions`, prints its table (per cell the paired time ratio, its
interval and the smallest slowdown the run could detect; every deterministic figure that changed) and fails on a
regression. A grid test that is not a cell of a built-in grid (a benchmark of one's own) is named and left out: the
workers know the built-in registries only.
"""

from __future__ import annotations

import pytest

from gradeff.gate.ab import ab_lines
from gradeff.pytest.options import SETTINGS
from gradeff.scale.ab import ABSettings, RevisionError, WorkerError, repository_root, run_revisions

__all__ = ["ab_cells"]


def ab_cells(items) -> tuple[list, list[str]]:
    """The grid cells of the collected items, once each, and the node ids of the tests that are not grid cells."""
    cells, others = {}, []
    for item in items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get("cell") if callspec is not None else None
        if cell is not None and hasattr(cell, "grid"):
            cells.setdefault(cell.id, cell)
        else:
            others.append(item.nodeid)
    return list(cells.values()), others


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    config = session.config
    settings = config.stash.get(SETTINGS, None)
    if settings is None or settings.ab is None or config.option.collectonly:
        return None
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    cells, others = ab_cells(session.items)
    for nodeid in others:
        reporter.write_line(f"gradeff ab: {nodeid} is not a cell of a built-in grid: left out")
    if not cells:
        reporter.write_line("gradeff ab: no grid cell selected")
        return True
    settings_ab = ABSettings()
    reporter.write_line(f"gradeff ab: {len(cells)} cells at {settings.ab} and the working tree, {settings_ab.rounds} "
                        f"rounds, {settings_ab.clock} clock, threshold {settings_ab.threshold:.0%}")
    config_fields = {"profile": settings.profile, "seed": settings.seed, "threads": settings.threads,
                     "device": settings.device, "protocol": settings.protocol}
    try:
        run = run_revisions(repository_root(config.rootpath), settings.ab, None, cells, config_fields, settings_ab,
                            echo=lambda line: reporter.write_line(f"  {line}"))
    except (RevisionError, WorkerError) as exc:
        raise pytest.UsageError(f"--gradeff-ab {settings.ab}: {exc}") from None
    reporter.section(f"gradeff ab against {settings.ab}")
    for line in ab_lines(run.results, base=run.base, current=run.current):
        reporter.write_line(line)
    session.testsfailed = sum(result.regressed for result in run.results)
    return True
