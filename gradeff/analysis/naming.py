"""Names that say what ran: a tiny random model is not "CLIP ViT-B/16".

A model's registry name is the architecture it stands for at the paper's scale. A record says which
weights it started from (``record.weights``: ``random``, ``pretrained`` by the suite on a synthetic
task, ``local`` from a folder the user gave, or ``real: true`` where the published weights were
loaded) and how many parameters it held; :func:`what_ran` puts both into the name unless the named
model's own weights were loaded (``CLIP-shaped, random init, 0.26 M``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gradeff.data import TASKS
from gradeff.models import MODELS
from gradeff.records.formatting import as_number
from gradeff.records.results import CellRecord, record_field

__all__ = ["group_title", "provenance", "real_weights", "weights_source", "what_ran"]

# First words of a model name that name no model alone.
_GENERIC = frozenset({"Vision"})
_STARTS = {"random": "random init", "pretrained": "pretrained here on a synthetic task",
           "local": "weights from a local folder"}


def weights_source(record: CellRecord) -> str | None:
    """``random``, ``pretrained``, ``local``, or ``None`` where the record does not say."""
    source = record_field(record, "weights", "source")
    return source if isinstance(source, str) and source else None


def real_weights(record: CellRecord) -> bool:
    """Whether the record started from the named model's real weights: the record says so (``weights.real``),
    or they came from a folder the user gave (what ``--gradeff-weights`` is for)."""
    real = record_field(record, "weights", "real")
    return real if isinstance(real, bool) else weights_source(record) == "local"


def _count(value: float) -> str:
    # Millions with two decimals below 10 M: tiny models are 0.05-0.5 M and must not all read "0 M".
    millions = value / 1e6
    return f"{millions:.2f} M" if millions < 10 else f"{millions:.0f} M"


def provenance(record: CellRecord) -> str:
    """How the record's weights came about and its size: ``random init, 0.26 M`` (parts it lacks left out)."""
    total = as_number(record_field(record, "parameters", "total"))
    parts = [_STARTS.get(weights_source(record) or "", ""), _count(total) if total else ""]
    return ", ".join(part for part in parts if part)


def what_ran(record: CellRecord) -> str:
    """The model's name where its real weights were loaded, else ``<family>-shaped`` with :func:`provenance`."""
    name = MODELS[record.model].name if record.model in MODELS else record.model
    if real_weights(record):
        return name
    words = name.split(" ")
    # The first word names the family ("CLIP ViT-B/16" → "CLIP"), unless it names none alone ("Vision Mamba").
    family = " ".join(words[:2] if words[0] in _GENERIC and len(words) > 1 else words[:1]).removesuffix("-style")
    detail = provenance(record)
    return f"{family}-shaped" + (f", {detail}" if detail else "")


def group_title(records: Sequence[CellRecord]) -> str:
    """``ViT-S/16-shaped, pretrained here on a synthetic task, 0.20 M · CIFAR-100 (synthetic, 100 classes)``:
    what one group of cells (one model on one dataset) ran on; ``""`` for no records."""
    if not records:
        return ""
    record = records[0]
    dataset = TASKS[record.dataset].name if record.dataset in TASKS else record.dataset
    return what_ran(record) + (f" · {dataset}" if dataset else "")
