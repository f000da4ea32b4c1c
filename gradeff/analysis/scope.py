"""Which records each study reads, from the studies' registry and the grid each record names.

A study's tables, figures, recommendations, claims and Answer lines read its own grids' records and
nothing else: a real-data cell divided by a synthetic one, or a memory-grid cell pooled into the PEFT
study's claim, is a number about nothing. Every reader takes its records through :func:`of_study`
(or :func:`split`). Each grid names its study (:attr:`gradeff.studies.grid.GridSpec.study`); a record
of a grid that no registered study reads is refused (:class:`UnknownGridError`), never read as another
study's. Records of older versions, which had no grid, read as the main study's grid ``main``.
"""

from __future__ import annotations

from collections.abc import Iterable

from gradeff.records.results import CellRecord
from gradeff.specs.registry import UnknownKeyError
from gradeff.studies.grid import GRIDS
from gradeff.studies.study import STUDIES, StudySpec

__all__ = ["STUDIES", "StudySpec", "UnknownGridError", "grids_of", "of_study", "split", "study_of", "study_of_grid"]


class UnknownGridError(UnknownKeyError):
    """Records of a grid that no registered study reads; the message names the grids that are read."""


def grids_of(*studies: str) -> tuple[str, ...]:
    """The grids the given studies read (their grids in :data:`~gradeff.studies.grid.GRIDS` order, then the
    grids they read records of only), in the order given.

    Raises:
        KeyError: a study that is not registered (the valid keys are named).
    """
    found: list[str] = []
    for key in studies:
        spec = STUDIES[key]
        found += [grid for grid, grid_spec in GRIDS.items() if grid_spec.study == key]
        found += spec.record_grids
    return tuple(found)


def study_of_grid(grid: str) -> str:
    """The key of the study that reads ``grid``'s records.

    Raises:
        UnknownGridError: no registered study reads it (the grids that are read are named).
    """
    if grid in GRIDS:
        return GRIDS[grid].study
    for spec in STUDIES.values():
        if grid in spec.record_grids:
            return spec.key
    raise UnknownGridError(f"records of grid {grid!r}, which no study of this gradeff reads; the grids read: "
                           f"{', '.join(grids_of(*STUDIES))}")


def study_of(record: CellRecord) -> str:
    """The key of the study ``record`` belongs to.

    Raises:
        UnknownGridError: its grid is read by no registered study.
    """
    return study_of_grid(record.grid)


def of_study(records: Iterable[CellRecord], *studies: str) -> list[CellRecord]:
    """The records of the given studies, in the order given.

    Raises:
        KeyError: a study that is not registered (the valid keys are named).
        UnknownGridError: a record of a grid that no study reads.
    """
    for key in studies:
        STUDIES[key]
    return [r for r in records if study_of(r) in studies]


def split(records: Iterable[CellRecord]) -> dict[str, list[CellRecord]]:
    """Every study's records (empty lists included), studies in :data:`STUDIES` order.

    Raises:
        UnknownGridError: a record of a grid that no study reads.
    """
    result: dict[str, list[CellRecord]] = {key: [] for key in STUDIES}
    for record in records:
        result[study_of(record)].append(record)
    return result
