"""Names that say what ran: a tiny random model is not "CLIP ViT-B/16".

A model's registry name is the architecture it stands for at the paper's scale. A record says which
weights it started from (``record.weights``: ``random``, ``pretrained`` by the suite on a synthetic
task, ``local`` from a folder the user gave, or ``real: true`` where the published weights were
loaded) and how many parameters it held; :func:`what_ran` puts both into the name unless the named
model's own weights were loaded (``CLIP-shaped, random init, 0.26 M params``). A dataset's registry name says what it
stands for; :func:`dataset_title` adds the sizes the record trained at (``CIFAR-100-like (synthetic), 100 classes,
32 px``). :func:`scale_note` says at which profile and device a study's cost figures were measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from gradeff.axes.data import TASKS
from gradeff.axes.models import MODELS
from gradeff.records.formatting import as_number
from gradeff.records.results import CellRecord, record_field

__all__ = ["dataset_title", "group_title", "provenance", "real_weights", "scale_note", "weights_source", "what_ran"]

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
    return f"{millions:.2f} M params" if millions < 10 else f"{millions:.0f} M params"


def provenance(record: CellRecord) -> str:
    """How the record's weights came about and its size: ``random init, 0.26 M params`` (parts it lacks left out)."""
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


def _hparam(record: CellRecord, name: str) -> int | None:
    value = as_number((record.hparams or {}).get(name))
    return int(value) if value else None


def dataset_title(record: CellRecord) -> str:
    """The dataset's name with the sizes the record trained at: ``CIFAR-100-like (synthetic), 100 classes, 32 px``,
    ``Topic text (synthetic, next token), 124 token types, sequences of 32`` (sizes it lacks left out)."""
    known = record.dataset in TASKS
    name = TASKS[record.dataset].name if known else (record.dataset or "")
    kind = TASKS[record.dataset].kind if known else ""
    sizes = {"classes": f"{_hparam(record, 'num_classes')} classes" if _hparam(record, "num_classes") else "",
             "px": f"{_hparam(record, 'image_size')} px" if _hparam(record, "image_size") else "",
             "tokens": f"{_hparam(record, 'num_states')} token types" if _hparam(record, "num_states") else "",
             "sequences": f"sequences of {_hparam(record, 'seq_len')}" if _hparam(record, "seq_len") else "",
             "captions": f"captions of {_hparam(record, 'caption_len')}" if _hparam(record, "caption_len") else ""}
    # The sizes that describe a kind's samples; a size the kind does not read (a text task's image side) is left out.
    shown = {"image_classification": ("classes", "px"), "image_captioning": ("px", "tokens", "captions"),
             "causal_lm": ("tokens", "sequences"), "masked_lm": ("tokens", "sequences")}.get(kind, ())
    return ", ".join(part for part in (name, *(sizes[key] for key in shown)) if part)


def group_title(records: Sequence[CellRecord]) -> str:
    """``ViT-S/16-shaped, pretrained here on a synthetic task, 0.20 M params · CIFAR-100-like (synthetic), 100
    classes, 32 px``: what one group of cells (one model on one dataset) ran on; ``""`` for no records."""
    if not records:
        return ""
    record = records[0]
    dataset = dataset_title(record)
    return what_ran(record) + (f" · {dataset}" if dataset else "")


def scale_note(records: Sequence[CellRecord]) -> str:
    """Where a study's time and memory figures come from and why they need not carry to the papers' scale:
    ``Measured at profile tiny on cpu, models of 0.08–0.26 M params. ...`` (``""`` for no records)."""
    if not records:
        return ""
    profiles = sorted({r.profile for r in records if r.profile})
    devices = sorted({r.device.split(":")[0] for r in records if r.device})
    sizes = [as_number(record_field(r, "parameters", "total")) for r in records]
    sizes = sorted(size for size in sizes if size)
    span = ""
    if sizes:
        low, high = _count(sizes[0]).removesuffix(" M params"), _count(sizes[-1])
        span = f", models of {high}" if high.startswith(low + " M") else f", models of {low}–{high}"
    where = f"Measured at profile {', '.join(profiles)} on {', '.join(devices)}{span}"
    if profiles == ["paper"]:
        return where + "."
    return (f"{where}. At the papers' scale (millions of parameters, 224 px images, a GPU) the weights, their "
            "gradients and the activations of a step dominate its memory and time; here a step's fixed costs and "
            "the small layers a method adds weigh more, so time and memory ratios between methods and strategies "
            "can differ from the papers'.")
