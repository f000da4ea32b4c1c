"""Every figure the verdicts read, and the one place that says which figure answers which question.

A study asks three questions of every group of cells it compares (one model, or one backbone on one
dataset), and each has one answer metric, the same in the terminal summary, every report table, the
recommendations, the claims and the Answer:

- **quality**: the test split's loss for language and captioning tasks, its top-1 accuracy for
  classification, its micro-F1 for multi-label classification (:func:`quality_metric`). The training
  loss is a diagnostic: a model can lower it by memorising its training set;
- **speed**: time to target, the seconds until the test loss first reached the task's target
  (:func:`target_reading` tells "not reached" from "n/a", where no target is defined);
- **memory**: the live-tensor peak of a training step, exact on any device. The process RSS stands in
  only where every cell ran in a process of its own (``--gradeff-isolate``), and then a difference
  below :data:`RSS_RESOLUTION_BYTES` is no difference (:func:`memory_metric`);
- **energy**: the joules until the target, with the meter's source (an ``estimate`` is CPU time × a
  fixed power, not a reading).

Records keep the test split under the names ``heldout_*`` (``summary.final_heldout_loss``,
``final_heldout_accuracy``): reading them here and nowhere else keeps a renaming to one place.
:data:`METRICS` holds every figure a table may show, answer and diagnostic alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gradeff.axes.data import TASKS
from gradeff.axes.models import MODELS
from gradeff.axes.strategies import STRATEGIES, micro_batches_per_step
from gradeff.records.formatting import as_number
from gradeff.records.results import CellRecord, meter_field, meter_section, record_field

__all__ = [
    "ANSWER_OBJECTIVES", "MEMORY_PARTS", "METRICS", "OBJECTIVE_TITLES", "QUALITY", "RSS_RESOLUTION_BYTES",
    "Metric", "TargetReading", "forward_backward_passes", "headline", "is_isolated", "memory_metric",
    "memory_parts", "meter_section", "meter_value", "metric_value", "nonfinite_value", "objective_metric",
    "quality_metric", "target_reading", "task_kind", "training_memory_bytes",
]

# The memory breakdown's parts, in the order the report stacks them.
MEMORY_PARTS = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes", "activation_bytes")
# Identical isolated reruns of one cell differ in their RSS high-water mark by up to about 1 MiB (the
# allocator's arenas, a thread's stack); four times that keeps such noise from ever naming a winner.
RSS_RESOLUTION_BYTES = 4 * 2**20


def meter_value(record: CellRecord, meter: str, name: str) -> float | None:
    """One number from ``record.meters[meter][name]``, or ``None`` if absent, ``None`` or not a finite number
    (an unknown meter or field raises :class:`gradeff.records.fields.UnknownRecordField`)."""
    return as_number(meter_field(record, meter, name))


def memory_parts(record: CellRecord) -> list[float] | None:
    """The :data:`MEMORY_PARTS` of a record's breakdown, or ``None`` unless all of them were measured."""
    parts = [meter_value(record, "memory", name) for name in MEMORY_PARTS]
    return None if any(part is None for part in parts) else parts


def training_memory_bytes(record: CellRecord) -> float | None:
    """Parameters + gradients + optimizer state + activations saved for backward (bytes), or ``None``.

    ``None`` unless all four parts were measured, since a partial sum would flatter the cell that is
    missing a part.
    """
    parts = memory_parts(record)
    return None if parts is None else sum(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Metric:
    """A number read from a record, and which way is better.

    Attributes:
        key: identifier (``test_loss``).
        label: column / axis title.
        unit: formatting unit (see :func:`gradeff.records.formatting.format_value`).
        goal: ``"min"`` or ``"max"``: which end of the scale wins.
        paper: which tables of the main paper show this metric (``""`` if none).
        extract: record → raw value or ``None``.
        resolution: differences up to this size are no difference (a sampled meter's resolution); 0: exact.
    """

    key: str
    label: str
    unit: str
    goal: str
    paper: str
    extract: Callable[[CellRecord], float | None]
    resolution: float = 0.0

    def better(self, a: float, b: float) -> bool:
        """Whether value ``a`` beats value ``b`` strictly (by more than the resolution)."""
        return a < b - self.resolution if self.goal == "min" else a > b + self.resolution


def _summary(name: str) -> Callable[[CellRecord], float | None]:
    def extract(record: CellRecord) -> float | None:
        return as_number(getattr(record.summary, name, None))
    # The value as stored, for nonfinite_value: a NaN must read "NaN", not "not measured".
    extract.raw = lambda record: getattr(record.summary, name, None)
    return extract


def _last_epoch(name: str) -> Callable[[CellRecord], float | None]:
    def extract(record: CellRecord) -> float | None:
        return as_number(getattr(record.epochs[-1], name, None)) if record.epochs else None
    extract.raw = lambda record: getattr(record.epochs[-1], name, None) if record.epochs else None
    return extract


def _meter(meter: str, name: str) -> Callable[[CellRecord], float | None]:
    def extract(record: CellRecord) -> float | None:
        return meter_value(record, meter, name)
    extract.raw = lambda record: meter_field(record, meter, name)
    return extract


def _percent(fraction: Callable[[CellRecord], float | None]) -> Callable[[CellRecord], float | None]:
    # Records hold accuracies as fractions; the "percent" unit prints numbers already in percent.
    def extract(record: CellRecord) -> float | None:
        value = fraction(record)
        return None if value is None else 100 * value
    extract.raw = fraction.raw
    return extract


METRICS: dict[str, Metric] = {m.key: m for m in (
    # The answer's metrics.
    Metric(key="test_loss", label="Test loss", unit="loss", goal="min", paper="",
           extract=_summary("final_heldout_loss")),
    Metric(key="heldout_accuracy", label="Test top-1 accuracy", unit="percent", goal="max", paper="",
           extract=_percent(_summary("final_heldout_accuracy"))),
    Metric(key="test_f1", label="Test micro-F1", unit="percent", goal="max", paper="",
           extract=_percent(_last_epoch("heldout_f1_micro"))),
    Metric(key="seconds_to_target", label="Time to target", unit="seconds", goal="min", paper="",
           extract=_summary("seconds_to_target")),
    Metric(key="joules_to_target", label="Energy to target", unit="joules", goal="min", paper="",
           extract=_summary("joules_to_target")),
    Metric(key="peak", label="Peak tensor memory (live, one step)", unit="bytes", goal="min", paper="",
           extract=_meter("memory", "peak_bytes")),
    # Diagnostics: what the paper's tables show, and what explains an answer.
    Metric(key="mean_loss", label="Mean training loss over the run", unit="loss", goal="min", paper="Tables 4–7",
           extract=_summary("mean_loss")),
    Metric(key="final_loss", label="Final training loss", unit="loss", goal="min", paper="Table 2, Figure 4",
           extract=_summary("final_loss")),
    Metric(key="epoch_seconds", label="Time per epoch", unit="seconds", goal="min", paper="Tables 16–19",
           extract=_summary("mean_epoch_seconds")),
    Metric(key="steps_to_target", label="Optimizer steps to target", unit="count", goal="min", paper="",
           extract=_summary("steps_to_target")),
    Metric(key="gpu_util", label="GPU utilization (mean)", unit="percent", goal="max", paper="Tables 8–11",
           extract=_meter("gpu", "util_mean_percent")),
    Metric(key="ram_peak", label="Peak RAM (process RSS)", unit="bytes", goal="min", paper="Tables 12–15",
           extract=_meter("ram", "peak_rss_bytes"), resolution=RSS_RESOLUTION_BYTES),
    Metric(key="ram_percent", label="Peak system RAM use", unit="percent", goal="min", paper="Tables 12–14",
           extract=_meter("ram", "peak_system_percent")),
    Metric(key="gpu_mem", label="Peak GPU memory (NVML)", unit="bytes", goal="min", paper="Figure 3",
           extract=_meter("gpu", "mem_used_peak_bytes")),
    Metric(key="gpu_alloc", label="Peak GPU memory (torch allocator)", unit="bytes", goal="min", paper="",
           extract=_meter("gpu", "alloc_peak_bytes")),
    Metric(key="activation", label="Activation memory (saved for backward)", unit="bytes", goal="min",
           paper="", extract=_meter("memory", "activation_bytes")),
    Metric(key="train_memory", label="Training memory (params + grads + state + activations)", unit="bytes",
           goal="min", paper="", extract=training_memory_bytes),
    Metric(key="energy", label="Energy of the epochs", unit="joules", goal="min", paper="",
           extract=_meter("energy", "joules")),
    Metric(key="mfu", label="MFU (model FLOP/s over the device's peak)", unit="percent", goal="max", paper="",
           extract=_percent(_meter("compute", "mfu"))),
)}

# Task kind → the key of its quality metric.
QUALITY: Mapping[str, str] = {"causal_lm": "test_loss", "masked_lm": "test_loss", "image_captioning": "test_loss",
                              "image_classification": "heldout_accuracy", "multi_label": "test_f1"}
# The questions every group of cells is asked, in the order the Answer and the recommendations put them.
ANSWER_OBJECTIVES = ("quality", "speed", "memory", "energy")
OBJECTIVE_TITLES = {"quality": "Best quality", "speed": "Fastest to target", "memory": "Least memory",
                    "energy": "Least energy to target"}


def metric_value(record: CellRecord, metric: str | Metric) -> float | None:
    """The raw value of ``metric`` for ``record`` (``None`` when not measured).

    Args:
        record: a cell record.
        metric: a key of :data:`METRICS` or a :class:`Metric`.

    Returns:
        A finite float, or ``None``.
    """
    metric = METRICS[metric] if isinstance(metric, str) else metric
    return metric.extract(record)


def nonfinite_value(record: CellRecord, metric: str | Metric) -> float | None:
    """The NaN or infinity ``record`` stores for ``metric`` (measured, but not a number to rank), else ``None``.

    :func:`metric_value` reads such a value as ``None`` so that it never wins or enters a mean; a report
    must still tell it from a value that was not measured at all.
    """
    metric = METRICS[metric] if isinstance(metric, str) else metric
    raw = getattr(metric.extract, "raw", None)
    value = raw(record) if raw is not None else None
    return value if isinstance(value, float) and not math.isfinite(value) else None


def task_kind(record: CellRecord) -> str:
    """What a record's task asks: ``causal_lm``, ``masked_lm``, ``image_captioning``, ``image_classification``
    or ``multi_label``; from its dataset's registry entry, else its model's own task, else what it recorded."""
    info = record_field(record, "task", "info")
    info = info if isinstance(info, Mapping) else {}
    if info.get("multi_label") or any(getattr(e, "heldout_f1_micro", None) is not None for e in record.epochs):
        return "multi_label"
    key = record.dataset or (MODELS[record.model].task if record.model in MODELS else "")
    if key in TASKS:
        return TASKS[key].kind
    # A task this gradeff does not know: a classifier is one that recorded an accuracy.
    return "image_classification" if record.summary.final_heldout_accuracy is not None else "causal_lm"


def quality_metric(records: Iterable[CellRecord]) -> Metric:
    """The quality metric of a group of cells compared with one another (one task kind).

    Raises:
        ValueError: the records hold tasks of different kinds (no one metric compares them).
    """
    kinds = sorted({task_kind(r) for r in records})
    if len(kinds) > 1:
        raise ValueError(f"cells of different task kinds ({', '.join(kinds)}) have no quality metric in common")
    return METRICS[QUALITY[kinds[0] if kinds else "causal_lm"]]


def is_isolated(record: CellRecord) -> bool:
    """Whether the cell ran in a process of its own (``--gradeff-isolate``): only then is its RSS its own."""
    return record_field(record, "environment", "process") == "isolated"


def memory_metric(records: Iterable[CellRecord]) -> Metric | None:
    """The memory metric of a group of cells: the live-tensor peak where any ``ok`` cell measured it, else the
    process RSS where every cell ran isolated and some measured it, else ``None``.

    In one long pytest process a model's first cell pays for the imports and every later one inherits
    its high-water mark, so an RSS "winner" there would be whichever cell ran first.
    """
    records = [r for r in records if r.status == "ok"]
    if any(metric_value(r, "peak") is not None for r in records):
        return METRICS["peak"]
    if records and all(is_isolated(r) for r in records) and any(metric_value(r, "ram_peak") is not None
                                                                 for r in records):
        return METRICS["ram_peak"]
    return None


def objective_metric(objective: str, records: Sequence[CellRecord]) -> Metric | None:
    """The metric that answers ``objective`` (one of :data:`ANSWER_OBJECTIVES`) for one group of cells."""
    if objective == "quality":
        return quality_metric(records)
    if objective == "speed":
        return METRICS["seconds_to_target"]
    if objective == "memory":
        return memory_metric(records)
    if objective == "energy":
        return METRICS["joules_to_target"]
    raise KeyError(f"unknown objective {objective!r}; valid: {', '.join(ANSWER_OBJECTIVES)}")


@dataclass(frozen=True, slots=True)
class TargetReading:
    """Time to target as recorded: the cost of reaching it, or why there is none.

    ``state`` is ``reached``, ``not reached`` (a target was set and the cell never got there) or ``n/a``
    (no target: a task without a test split, a cell that never trained).
    """

    state: str
    steps: float | None = None
    seconds: float | None = None
    joules: float | None = None
    target: float | None = None


def target_reading(record: CellRecord) -> TargetReading:
    """How far the cell got towards its target (see :class:`TargetReading`)."""
    summary = record.summary
    target = as_number(summary.target_loss)
    if target is None:
        return TargetReading("n/a")
    steps = as_number(summary.steps_to_target)
    if steps is None:
        return TargetReading("not reached", target=target)
    return TargetReading("reached", steps=steps, seconds=as_number(summary.seconds_to_target),
                         joules=as_number(summary.joules_to_target), target=target)


def forward_backward_passes(record: CellRecord) -> int | None:
    """Forward+backward passes the timed epochs ran: closure calls × the micro-batches each closure runs.

    A closure runs every micro-batch of its step (k under gradient accumulation), and a line search
    calls it several times per step; ``None`` for a record without the counts.
    """
    calls = record.summary.closure_calls
    if not isinstance(calls, int) or record.strategy not in STRATEGIES:
        return None  # a strategy this gradeff does not know: how many micro-batches a closure ran is unknown
    accum = as_number(record_field(record, "hparams", "accum_steps"))
    return calls * micro_batches_per_step(record.strategy, int(accum) if accum is not None else 1)


def headline(record: CellRecord) -> tuple[str, float | None]:
    """The one figure that says how good a cell is: its quality metric's label and value (the gate's headline)."""
    metric = quality_metric([record])
    return metric.label, metric_value(record, metric)
