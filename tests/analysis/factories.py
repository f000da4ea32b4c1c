"""Hand-made records over seeds for the analysis tests: a cell's test loss, time and memory per seed."""

from __future__ import annotations

from gradeff.records.results import CellRecord, EpochRecord, Summary
from tests.conftest import meters


def _axes(cell: str, grid: str) -> dict:
    parts = cell.split("-")
    if grid == "real":
        return dict(model=parts[0], optimizer=parts[1], strategy="standard", dataset=parts[2])
    if grid == "memory":
        return dict(model=parts[0], optimizer="adamw", strategy=parts[1])
    if grid == "peft":
        return dict(model=parts[0], optimizer="adamw", method=parts[1], strategy=parts[2], dataset=parts[3])
    if grid == "baselines":
        return dict(model=parts[0], optimizer="adamw", method=parts[1], strategy="standard", dataset=parts[2])
    return dict(model=parts[0], optimizer=parts[1], strategy=parts[2])


def run(cell: str = "llm-adam-standard", seed: int = 0, *, test: float = 2.0, train: float | None = None,
        seconds: float = 1.0, peak: float | None = 4 * 2**20, joules: float = 10.0, status: str = "ok",
        grid: str = "main", accuracy: float | None = None, energy_source: str = "estimate",
        finished_at: float = 10.0, summary: dict | None = None, **overrides) -> CellRecord:
    """One seed of a cell: two epochs ending at test loss ``test`` (and top-1 ``accuracy``, a fraction).

    ``summary`` overrides fields of the computed summary (time to target); ``overrides`` any field of the record.
    """
    train = test - 0.5 if train is None else train
    half = None if accuracy is None else accuracy / 2
    epochs = tuple(EpochRecord(epoch=i, loss=loss, seconds=seconds, optimizer_steps=8, closure_calls=8, samples=64,
                               targets=64, heldout_loss=held, heldout_accuracy=acc)
                   for i, (loss, held, acc) in enumerate(((train + 1, test + 1, half), (train, test, accuracy))))
    if status != "ok":
        epochs = ()
    computed = Summary.of(list(epochs), 2 * seconds + 1)
    if summary:
        computed = Summary(**{name: getattr(computed, name) for name in Summary.__slots__} | summary)
    recorded = meters(joules=joules)
    recorded["memory"]["peak_bytes"] = peak
    recorded["energy"]["source"] = energy_source
    values = dict(cell=cell, grid=grid, **_axes(cell, grid), profile="tiny", seed=seed, device="cpu", status=status,
                  epochs=epochs, summary=computed, loss_floor=0.5, session="s", finished_at=finished_at,
                  environment={"python": "3.11"}, hparams={"lr": 1e-3, "accum_steps": 4}, meters=recorded)
    return CellRecord(**(values | overrides))


def runs(cell: str, tests, **kwargs) -> list[CellRecord]:
    """One :func:`run` per seed, seed ``i`` ending at test loss ``tests[i]``."""
    return [run(cell, seed, test=value, **kwargs) for seed, value in enumerate(tests)]
