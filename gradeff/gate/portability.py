"""When a cell's numbers must repeat to the last bit, and how far they may move when they cannot.

A seeded CPU cell is deterministic for one *numerics environment*: the kernels' summation order, set by the
instruction set paths ATen, MKL and oneDNN take, torch's intra-op thread count, the device and the torch and
transformers versions. Every record carries the digest of a *numerics probe* (:mod:`gradeff.cell.probe`: a fixed
small computation through those kernels at the cell's thread count), and where both records of a pair have one,
the probe decides (:data:`PROBE_KEYS`): equal probes repeat every loss bit for bit whatever the CPU's name, so the
gate compares exactly (golden: any change is the code's). A record made before probes existed has none; a pair with
such a record falls back to the CPU model and its kernel settings (:data:`NUMERICS_KEYS`), and the gate says so.
Across two (other kernels, another thread count) float sums run in another order, and the last-bit differences
grow by how sensitive the cell's training is: an Adam cell's losses agree to ~1e-6, while conjugate gradient's
line search amplifies them to 1-2 % in three epochs. No single
tolerance fits both, so a baseline carries its own measure of each cell's sensitivity: *perturbation runs*, the
same cells recorded beside it with only the summation order changed (torch intra-op threads 2 and 3 instead of 1;
``scripts/record_baseline.py`` records both files), in ``<baseline stem>.perturbed.jsonl``.

On a foreign numerics environment each loss figure of a cell is then judged within a band (:class:`Band`)::

    relative tolerance = max(floor, factor × the largest relative change any perturbation run made
                                             to a loss figure of any cell of the same optimizer)

and its held-out accuracy within the same number as an absolute tolerance (accuracy is a fraction; the floor
is a fraction of one sample of 256). Memory counted from tensors is exact everywhere unless the perturbation runs
moved it: a conjugate-gradient step's line search keeps a trial's tensors alive or not by comparisons a last bit
can flip, so the peak of its measured step follows the summation order (the committed slice's llm-cgd-accum:
14.3 MiB natively, 13.7 MiB under every perturbation). Counted memory then gets ``factor ×`` the largest relative
change the runs made to a memory figure of a cell of the same optimizer; an optimizer whose memory they never
moved keeps the exact rule. Statuses stay exact everywhere; time is advisory on another machine (see
:mod:`gradeff.gate.compare`). A cell without perturbation runs falls back to the ``--loose`` tolerances, and the gate
says so.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gradeff.records.formatting import as_number
from gradeff.records.results import CellRecord, meter_field, record_field

__all__ = ["COUNTED_MEMORY", "NUMERICS_KEYS", "PERTURBATIONS", "PERTURBED_SUFFIX", "PROBE_KEYS", "Band",
           "Perturbation", "Sensitivity", "deviation", "has_probe", "memory_deviation", "numerics",
           "numerics_differences", "perturbations", "perturbed_path", "same_numerics", "sensitivities"]

# What fixes the order of every float sum of a CPU run. cpu_id (vendor, family, model, stepping) tells apart
# two CPU generations a virtual machine shows under one model name; the core count is not here, as the
# thread count is fixed per cell (--gradeff-threads).
NUMERICS_KEYS = ("cpu", "cpu_id", "cpu_capability", "kernel_env", "torch_threads", "device", "device_name", "torch",
                 "transformers")
PERTURBED_SUFFIX = ".perturbed.jsonl"


def _value(record: CellRecord, key: str) -> object:
    value = record_field(record, "environment", key)
    if key == "device" and value is not None:
        return str(value).split(":")[0]  # cuda:0 and cuda:1 are the same kind of device
    return value


# What fixes the order of every float sum where both records carry a numerics probe: the probe's digest (the kernels'
# own answer, at the cell's thread count), the thread count (a cell's larger sums may split where the probe's do
# not), the device kind and, on a GPU, its name (the probe runs the CPU's kernels), and the libraries' versions (a
# new torch may change a kernel the probe does not reach). The CPU's name, id and instruction set are not here:
# two CPUs whose kernels give the probe's bits give the cells' bits.
PROBE_KEYS = ("numerics_probe", "torch_threads", "device", "torch", "transformers")


def has_probe(record: CellRecord) -> bool:
    """Whether the record's environment carries a numerics probe (records made before probes do not)."""
    return bool(record_field(record, "environment", "numerics_probe"))


def _keys(record: CellRecord, probe: bool) -> tuple[str, ...]:
    if not probe:
        return NUMERICS_KEYS
    # On a GPU the probe (CPU kernels) says nothing of the device's: its name stays a key.
    return PROBE_KEYS + (("device_name",) if _value(record, "device") == "cuda" else ())


def numerics(record: CellRecord, *, probe: bool | None = None) -> tuple:
    """The record's numerics environment: the values of :data:`PROBE_KEYS` where it carries a probe, else of
    :data:`NUMERICS_KEYS` (``None`` where not recorded); ``probe`` forces one form (a pair where one record lacks a
    probe is compared on the CPU's keys).

    Returns:
        ``("probe", values...)`` or ``("cpu", values...)``: the two forms never compare equal.
    """
    probe = has_probe(record) if probe is None else probe
    return ("probe" if probe else "cpu", *(_value(record, key) for key in _keys(record, probe)))


def same_numerics(reference: CellRecord, other: CellRecord) -> bool:
    """Whether two runs sum in the same order: their probes and :data:`PROBE_KEYS` agree where both carry a probe,
    else their :data:`NUMERICS_KEYS` do (the rule before probes)."""
    probe = has_probe(reference) and has_probe(other)
    return numerics(reference, probe=probe) == numerics(other, probe=probe)


def numerics_differences(before: CellRecord, after: CellRecord) -> dict[str, tuple[object, object]]:
    """``{key: (before's value, after's value)}`` for each key that differs: :data:`PROBE_KEYS` where both carry a
    probe, else :data:`NUMERICS_KEYS`."""
    probe = has_probe(before) and has_probe(after)
    keys = _keys(before, probe) if probe else NUMERICS_KEYS
    return {key: (b, a) for key, b, a in zip(keys, numerics(before, probe=probe)[1:], numerics(after, probe=probe)[1:])
            if b != a}


def perturbed_path(baseline: str | Path) -> Path:
    """Where a baseline's perturbation runs are: ``tiny-cpu.jsonl`` → ``tiny-cpu.perturbed.jsonl``."""
    baseline = Path(baseline)
    return baseline.with_name(baseline.name.removesuffix(".jsonl") + PERTURBED_SUFFIX)


def perturbations(records: Iterable[CellRecord]) -> dict[tuple[str, int], list[CellRecord]]:
    """The perturbation runs of each ``(cell, seed)``: the last record of each numerics environment, in file order."""
    runs: dict[tuple[str, int], dict[tuple, CellRecord]] = defaultdict(dict)
    for record in records:
        runs[record.cell, record.seed][numerics(record)] = record
    return {key: list(by_numerics.values()) for key, by_numerics in runs.items()}


def _loss_figures(record: CellRecord) -> list[float | None]:
    """Every loss a cell reports: final, mean and final held-out, and each epoch's training and held-out loss."""
    summary = record.summary
    figures = [summary.final_loss, summary.mean_loss, summary.final_heldout_loss]
    for epoch in record.epochs:
        figures += [epoch.loss, epoch.heldout_loss]
    return [as_number(value) for value in figures]


# The memory figures counted from tensors (``meters.memory``): the ones the gate compares exactly.
COUNTED_MEMORY = ("parameter_bytes", "trainable_parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
                  "activation_bytes", "peak_bytes")


def _memory_figures(record: CellRecord) -> list[float | None]:
    return [as_number(meter_field(record, "memory", key)) for key in COUNTED_MEMORY]


def memory_deviation(reference: CellRecord, other: CellRecord) -> float | None:
    """The largest relative change between two ok runs' counted memory figures (``None``: nothing to compare)."""
    if reference.status != "ok" or other.status != "ok":
        return None
    changes = [abs(b - a) / abs(a) for a, b in zip(_memory_figures(reference), _memory_figures(other))
               if a is not None and b is not None and a != 0]
    return max(changes) if changes else None


def deviation(reference: CellRecord, other: CellRecord) -> float | None:
    """The largest relative change between two runs' loss figures (see :func:`_loss_figures`).

    Returns:
        The change, or ``None`` when either run did not end ok or they share no finite, nonzero figure.
    """
    if reference.status != "ok" or other.status != "ok":
        return None
    changes = [abs(b - a) / abs(a) for a, b in zip(_loss_figures(reference), _loss_figures(other))
               if a is not None and b is not None and a != 0]
    return max(changes) if changes else None


def _dynamics(record: CellRecord) -> tuple:
    """The cells whose sensitivity is pooled: one optimizer's cells of a grid, method and seed, across models and
    strategies. Whether a perturbation moves a cell depends on which kernels it reaches; how far it can move one
    depends on the optimizer. A conjugate-gradient step accepts or rejects line-search trials and restarts, and a
    last-bit change can flip one of those decisions: on the committed slice modernbert-cgd-accum moved by 1.4e-6
    under three perturbations recorded on one summation order and by 8.7e-5 on another (scalar kernels against
    AVX-512), and vlm-cgd-accum did not move at all under two threads while vlm-cgd-standard moved 6 %. Pooled
    per strategy, 2 of 6 cross-checks of three recorded environments put modernbert-cgd-accum beyond its band;
    pooled per optimizer, none did. Adam cells move by ~1e-7 whatever the model: their band stays the floor."""
    return record.grid, record.optimizer, record.method, record.seed


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """How far last-bit noise moved a cell's losses: the largest relative change, over how many perturbation runs."""

    change: float
    runs: int
    memory_change: float = 0.0  # the largest relative change of a counted memory figure (0: never moved)


def sensitivities(baseline: Iterable[CellRecord], perturbed: Iterable[CellRecord]) -> dict[tuple[str, int],
                                                                                          Sensitivity]:
    """Each baseline run's sensitivity, ``(cell, seed)`` → the largest change any perturbation run made to it or to
    a run pooled with it (:func:`_dynamics`: the same optimizer's cells).

    A cell's own perturbation runs bound its sensitivity from below; the other cells of its optimizer tell what the
    same kind of training does to last-bit noise. Runs with no measurable change (a failed one) are left out; a
    run without any is absent.
    """
    latest = {(r.cell, r.seed): r for r in baseline}
    runs = perturbations(perturbed)
    pooled: dict[tuple, list[float]] = defaultdict(list)
    memory: dict[tuple, list[float]] = defaultdict(list)
    for key, record in latest.items():
        changes = (deviation(record, run) for run in runs.get(key, []))
        pooled[_dynamics(record)] += [change for change in changes if change is not None]
        moved = (memory_deviation(record, run) for run in runs.get(key, []))
        memory[_dynamics(record)] += [change for change in moved if change is not None]
    return {key: Sensitivity(max(pooled[_dynamics(record)]), len(pooled[_dynamics(record)]),
                             max(memory[_dynamics(record)], default=0.0))
            for key, record in latest.items() if pooled[_dynamics(record)]}


@dataclass(frozen=True, slots=True, kw_only=True)
class Perturbation:
    """One way of recording a baseline's cells again with only the summation order changed.

    Attributes:
        name: how the recording names it.
        threads: torch intra-op threads per cell (``--gradeff-threads``): parallel kernels split their sums.
        env: variables that choose other kernels (see ``gradeff.cell.environment.KERNEL_VARIABLES``): ATen's
            vectorised kernels for another instruction set, MKL's and oneDNN's for an older one.
    """

    name: str
    threads: int = 1
    env: tuple[tuple[str, str], ...] = ()


# What scripts/record_baseline.py records beside a baseline. Each reaches other cells: on the committed slice two
# threads moved vlm-cgd-standard by 6 % and left vlm-cgd-accum bit for bit unchanged, AVX2 kernels moved
# vit-cgd-standard by 3.4 %, scalar kernels (MKL's SSE4.2 path among them, as a CPU of another vendor takes
# another path through MKL) moved every conjugate-gradient cell, vlm-cgd-accum by 1.2 %.
PERTURBATIONS = (
    Perturbation(name="two threads", threads=2),
    Perturbation(name="AVX2 kernels", env=(("ATEN_CPU_CAPABILITY", "avx2"),)),
    Perturbation(name="scalar kernels", env=(("ATEN_CPU_CAPABILITY", "default"), ("MKL_ENABLE_INSTRUCTIONS", "SSE4_2"),
                                             ("ONEDNN_MAX_CPU_ISA", "SSE41"))),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Band:
    """How far a cell's loss figures may move on a foreign numerics environment.

    Attributes:
        factor: multiples of the sensitivity. Each perturbation run is one draw of last-bit noise and another CPU
            another draw. Measured leave-one-out on the committed slice (each of four summation orders, two and
            three threads, AVX2 and scalar kernels, judged against the largest change the other three made to a
            cell of the same optimizer), a conjugate-gradient cell moved at most 1.03 times that; across three
            environments recorded with scripts/record_baseline.py (native AVX-512, ATen's AVX2 kernels, scalar
            kernels), each judged against the others' baselines, at most 1.00 times. 3 leaves room for a CPU
            whose kernels differ in ways these do not.
        floor: the smallest relative tolerance, for the cells last-bit noise barely moves: Adam cells move by
            ~1e-7 between summation orders here and by ~1e-6 between CPU models, while a learning rate 1 % off
            moved every tiny Adam cell's losses by 9.3e-5 or more (modernbert-adam-accum's final loss the least).
            1e-5 sits ten times above the one and nine times under the other.
        accuracy_floor: the smallest absolute tolerance of held-out accuracy (fractions): under one sample of
            the tiny profile's 256, so an Adam cell's accuracy must not move at all.
    """

    factor: float = 3.0
    floor: float = 1e-5
    accuracy_floor: float = 1e-3

    def __post_init__(self):
        for name in ("factor", "floor", "accuracy_floor"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"band {name} must be a finite number >= 0, got {value}")

    def loss_rtol(self, change: float) -> float:
        """The relative tolerance of a cell's loss figures, from its perturbation runs' largest change."""
        return max(self.floor, self.factor * change)

    def accuracy_atol(self, change: float) -> float:
        """The absolute tolerance of its held-out accuracy: the same number, with the accuracy floor."""
        return max(self.accuracy_floor, self.factor * change)

    def memory_rtol(self, change: float) -> float:
        """The relative tolerance of counted memory: ``factor ×`` its change under perturbation, 0 (exact) when
        the perturbation runs never moved it."""
        return self.factor * change

    def rule(self) -> str:
        """The band's rule in words, as the gate prints it."""
        return (f"relative tolerance max({self.floor:g}, {self.factor:g} × the largest relative change the "
                f"perturbation runs made to the losses of a cell of the same optimizer); held-out accuracy "
                f"max({self.accuracy_floor:g}, the same number) absolute; counted memory {self.factor:g} × the "
                f"largest relative change those runs made to it (exact where they never moved it)")
