"""Which records each study reads: the one place that says which grid belongs to which study.

A study's tables, figures, recommendations, claims and Answer lines read its own grids' records and
nothing else: a real-data cell divided by a synthetic one, or a memory-grid cell pooled into the PEFT
study's claim, is a number about nothing. Every reader takes its records through :func:`of_study`
(or :func:`split`), and each :class:`Study` says which grids it reads. A grid this gradeff does not
know reads as the main study, as the records of older versions (which had no grid) did.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gradeff.records.results import CellRecord

__all__ = ["STUDIES", "Study", "grids_of", "of_study", "split", "study_of"]


@dataclass(frozen=True, slots=True)
class Study:
    """One study of the report.

    Attributes:
        key: identifier (``main``).
        title: its name on the page.
        grids: the grids whose records it reads.
    """

    key: str
    title: str
    grids: tuple[str, ...]


STUDIES: dict[str, Study] = {s.key: s for s in (
    # ``custom``: cells written with the public fixtures, read beside the model's grid cells.
    Study("main", "Main study: optimizers × memory strategies", ("main", "custom")),
    Study("peft", "PEFT study: fine-tuning methods and checkpointing", ("peft",)),
    Study("baselines", "PEFT study: foundation-model baselines", ("baselines",)),
    Study("memory", "Memory strategies side by side", ("memory",)),
    Study("real", "Real data", ("real",)),
)}
_DEFAULT = "main"


def study_of(record: CellRecord) -> str:
    """The key of the study ``record`` belongs to (an unknown grid: the main study)."""
    return next((s.key for s in STUDIES.values() if record.grid in s.grids), _DEFAULT)


def grids_of(*studies: str) -> tuple[str, ...]:
    """The grids the given studies read, in order."""
    return tuple(grid for key in studies for grid in STUDIES[key].grids)


def of_study(records: Iterable[CellRecord], *studies: str) -> list[CellRecord]:
    """The records of the given studies, in the order given.

    Raises:
        KeyError: a study this module does not define (the valid keys are named).
    """
    unknown = [s for s in studies if s not in STUDIES]
    if unknown:
        raise KeyError(f"unknown study {unknown[0]!r}; valid: {', '.join(STUDIES)}")
    return [r for r in records if study_of(r) in studies]


def split(records: Iterable[CellRecord]) -> dict[str, list[CellRecord]]:
    """Every study's records (empty lists included), studies in :data:`STUDIES` order."""
    result: dict[str, list[CellRecord]] = {key: [] for key in STUDIES}
    for record in records:
        result[study_of(record)].append(record)
    return result
