"""The order the selected cells run in: fine-tuned backbones interleaved so that workers pretrain side by side, and
cells that search their own rate first.

A fine-tuning cell's first run on a machine pretrains its backbone (tens of seconds at ``tiny``) under a file
lock the other pytest-xdist workers wait on (:mod:`gradeff.cell.pretrain`). xdist hands tests out in collection order
and a grid is collected backbone by backbone, so both workers would ask for the same backbone at once and one
would sit idle for the whole pretraining. Taking one cell of each backbone in turn (each backbone's cells in
their own order, every other test where it was) has the workers start on different backbones and pretrain
them at the same time.

A cell that tunes itself (:mod:`gradeff.cell.self_tune`) trains several times over before its reported run: last
in a session (the real grid is collected last), it would hold one worker for a long tail while the others sit
idle. Such cells go first (:func:`to_front`), where the rest of the session evens the workers out. Records,
summaries and reports put cells in the registries' order, whatever the run's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import zip_longest
from typing import TypeVar

import pytest

from gradeff.axes.models import MODELS
from gradeff.pytest.options import SETTINGS, run_config
from gradeff.studies.grid import Cell

# The modules that build, train and meter a cell import torch (2.3 s); the plugin loads this module in every pytest
# session, so the functions that need them import them (noqa: PLC0415 - torch).

__all__ = ["fine_tuned_backbone", "interleave_backbones", "to_front", "tunes_itself"]

T = TypeVar("T")
_GAP = object()  # fills a backbone's turns once its cells have run out


def interleave_backbones(items: Sequence[T], backbone_of: Callable[[T], Hashable | None]) -> list[T]:
    """``items`` with those that have a backbone dealt round-robin over their backbones, in first-seen order.

    Items whose ``backbone_of`` is ``None`` keep their positions; the others fill the positions such items held,
    one of each backbone in turn, each backbone's items in their original order.
    """
    slots: list[int] = []
    groups: dict[Hashable, list[T]] = {}
    for index, item in enumerate(items):
        backbone = backbone_of(item)
        if backbone is not None:
            slots.append(index)
            groups.setdefault(backbone, []).append(item)
    dealt = [item for turn in zip_longest(*groups.values(), fillvalue=_GAP) for item in turn if item is not _GAP]
    out = list(items)
    for index, item in zip(slots, dealt, strict=True):
        out[index] = item
    return out


def fine_tuned_backbone(item) -> str | None:
    """The backbone a collected grid test fine-tunes (whose first cell pretrains it), else ``None``."""
    cell = getattr(getattr(item, "callspec", None), "params", {}).get("cell")
    if not isinstance(cell, Cell) or cell.model not in MODELS or not MODELS[cell.model].fine_tunes:
        return None
    return cell.model


def to_front(items: Sequence[T], first: Callable[[T], bool]) -> list[T]:
    """``items`` with those ``first`` holds for moved ahead of the others, each part in its own order."""
    flags = [first(item) for item in items]
    return [item for item, flag in zip(items, flags, strict=True) if flag] + \
        [item for item, flag in zip(items, flags, strict=True) if not flag]


def tunes_itself(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether a collected grid test's cell searches its own rate in this session (:mod:`gradeff.cell.self_tune`)."""
    from gradeff.cell.plan import plan_cell  # noqa: PLC0415 - torch, see the imports
    from gradeff.cell.self_tune import needs_self_tuning  # noqa: PLC0415 - torch, see the imports

    cell = getattr(getattr(item, "callspec", None), "params", {}).get("cell")
    if not isinstance(cell, Cell):
        return False
    try:
        return needs_self_tuning(plan_cell(cell, run_config(config, config.stash[SETTINGS].seeds[0])))
    except Exception:  # noqa: BLE001 - a cell that cannot be planned says why when it runs; here it keeps its place
        return False
