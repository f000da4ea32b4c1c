"""Learning-rate protocols: where a cell's rate comes from, and the committed table of tuned rates.

* ``tuned`` (the default): each (model, optimizer) of the main study and each (backbone, method, dataset) of the
  PEFT study trains at its own rate, read from ``gradeff/cell/tuned_rates.json``. ``scripts/tune_rates.py`` writes that
  table from a log-grid search over two or more seeds, scored on the validation split (never the test split), and
  records its provenance (command, seeds, epochs, budget, code version) beside the rates. The rate tuned on the
  ``standard`` strategy serves every strategy that trains the same steps on the same batches (checkpointing,
  offload and the adaptive budget change no number); a strategy that changes the effective batch (accumulation:
  k micro-batches per optimizer step, k times fewer steps) has rows of its own
  (:func:`gradeff.axes.strategies.rate_strategy`), since the best rate of a 4× batch in 4× fewer steps is not the
  small batch's, and an accumulation cell at the standard cell's rate measures under-training, not accumulation.
  Without such a row it falls back to the standard row, and says so. A cell the table has no row for (another
  profile, an optimizer outside the grids, a user's model or data, data given with ``--gradeff-data``) tunes itself
  (:mod:`gradeff.cell.self_tune`: a budgeted search on its validation split, cached, recorded as ``self-tuned`` with
  its trials and cost); a rate tuned on a built-in stand-in is never applied to data the user gave.
* ``shared``: the papers' own protocol — one rate per model and profile for every optimizer and strategy (the
  main paper's section 3), and the PEFT paper's fixed rates (the model's rate times the method's scale).

An optimizer with nothing to tune (conjugate gradient: its line search sizes every step) has a row that says
so and keeps the shared rate.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gradeff.axes.strategies import rate_strategy
from gradeff.records.fields import SELF_TUNED
from gradeff.records.outputs import write_text

__all__ = ["DEFAULT_PROTOCOL", "PROTOCOLS", "SELF_TUNED", "TABLE_PATH", "RateChoice", "TunedRate", "TunedTable",
           "choose_rate", "tuned_table"]

PROTOCOLS = ("tuned", "shared")
DEFAULT_PROTOCOL = "tuned"
TABLE_PATH = Path(__file__).with_name("tuned_rates.json")
_TABLE_SCHEMA = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TunedRate:
    """One row of the table: the rate a search chose for one cell's axes at one profile.

    Attributes:
        profile / model / optimizer / method / dataset: the cell's axes.
        strategy: the strategy the rate was tuned on: ``standard`` serves every strategy that trains the same
            steps on the same batches, a strategy that changes the effective batch has its own
            (:func:`gradeff.axes.strategies.rate_strategy`).
        lr: the rate the optimizer gets (the method's scale is already in it).
        grid: the rates tried, ascending.
        scores: each rate's final validation loss, the mean over the seeds (``None``: no seed ended ok).
        seeds: the seeds each rate was trained with.
        at_edge: ``"low"`` / ``"high"`` when ``lr`` is the smallest / largest rate tried, else ``None``.
        tuning_free: why the optimizer has nothing to tune (its ``lr`` is then the shared rate); ``""`` otherwise.
        search: the key of the search that produced the row in the table's ``searches``.
    """

    profile: str
    model: str
    optimizer: str
    method: str = "full"
    dataset: str
    lr: float
    grid: tuple[float, ...] = ()
    scores: tuple[float | None, ...] = ()
    seeds: tuple[int, ...] = ()
    at_edge: str | None = None
    tuning_free: str = ""
    search: str = ""
    strategy: str = "standard"

    def __post_init__(self):
        if not self.lr > 0:
            raise ValueError(f"a tuned rate must be > 0, got {self.lr}")
        if len(self.grid) != len(self.scores):
            raise ValueError("a tuned rate has one score per rate of its grid")
        if self.at_edge not in (None, "low", "high"):
            raise ValueError(f"at_edge is None, 'low' or 'high', got {self.at_edge!r}")

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        return (self.profile, self.model, self.optimizer, self.method, self.dataset, self.strategy)

    @classmethod
    def from_dict(cls, data: dict) -> TunedRate:
        return cls(**data | {name: tuple(data.get(name, ())) for name in ("grid", "scores", "seeds")})


@dataclass(frozen=True, kw_only=True)
class TunedTable:
    """The tuned rates and the searches they came from (``searches``: key → provenance)."""

    rows: dict[tuple[str, str, str, str, str, str], TunedRate] = field(default_factory=dict)
    searches: dict[str, dict] = field(default_factory=dict)

    def lookup(self, profile: str, model: str, optimizer: str, method: str, dataset: str,
               strategy: str = "standard") -> TunedRate | None:
        """The row of these axes tuned on ``strategy`` (a strategy key: the row of its rate strategy,
        :func:`gradeff.axes.strategies.rate_strategy`), or ``None``."""
        return self.rows.get((profile, model, optimizer, method, dataset, rate_strategy(strategy)))

    def merged(self, rows: list[TunedRate], search: str, provenance: dict) -> TunedTable:
        """This table with ``rows`` added or replacing the rows of the same axes, and their search's provenance.

        A search no row refers to any more is dropped, so the table never keeps provenance of rates it lost.
        """
        merged = dict(self.rows) | {row.key: row for row in rows}
        searches = dict(self.searches) | {search: provenance}
        used = {row.search for row in merged.values()}
        return TunedTable(rows=merged, searches={key: value for key, value in searches.items() if key in used})

    def to_json(self) -> str:
        rows = sorted(self.rows.values(), key=lambda row: row.key)
        return json.dumps({"schema": _TABLE_SCHEMA, "searches": dict(sorted(self.searches.items())),
                           "rates": [asdict(row) for row in rows]}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TunedTable:
        data = json.loads(text)
        if data.get("schema") != _TABLE_SCHEMA:
            raise ValueError(f"tuned-rate table schema {data.get('schema')!r}; this gradeff reads {_TABLE_SCHEMA}")
        rows = [TunedRate.from_dict(row) for row in data.get("rates", ())]
        missing = sorted({row.search for row in rows} - set(data.get("searches", {})))
        if missing:
            raise ValueError(f"tuned-rate table: rows refer to unknown searches {missing}")
        return cls(rows={row.key: row for row in rows}, searches=dict(data.get("searches", {})))

    @classmethod
    def load(cls, path: str | Path = TABLE_PATH) -> TunedTable:
        path = Path(path)
        return cls.from_json(path.read_text()) if path.exists() else cls()

    def dump(self, path: str | Path = TABLE_PATH) -> None:
        """Write the table whole (:func:`gradeff.records.outputs.write_text`: a reader never sees half of it).

        Raises:
            OutputError: the disk refused; the old table stays, the message names the file and why.
        """
        write_text(path, self.to_json())


_LOADED: dict[Path, TunedTable] = {}


def tuned_table(path: str | Path = TABLE_PATH) -> TunedTable:
    """The committed table (read once per process)."""
    path = Path(path)
    if path not in _LOADED:
        _LOADED[path] = TunedTable.load(path)
    return _LOADED[path]


@dataclass(frozen=True, slots=True, kw_only=True)
class RateChoice:
    """The rate a cell trains at under a protocol, and where it came from (both go into the record).

    ``replaces``: the rate is the optimizer's whole rate, in place of the model's rate times the method's scale.
    """

    lr: float
    source: str
    row: TunedRate | None = None
    replaces: bool = False


def choose_rate(protocol: str, *, profile: str, model: str, optimizer: str, method: str, dataset: str,
                shared_lr: float, table: TunedTable | None = None, strategy: str = "standard",
                given_data: bool = False) -> RateChoice:
    """The rate of a cell under ``protocol``.

    Args:
        shared_lr: the shared protocol's rate for this cell (the model's rate times the method's scale).
        table: the tuned rates (default: the committed table).
        strategy: the cell's strategy: one that changes the effective batch reads its own row, else the standard
            row (saying so).
        given_data: the cell trains on data the user gave (``--gradeff-data``): the table's rows were tuned on the
            built-in data and are not read (the cell tunes itself).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid protocols: {', '.join(PROTOCOLS)}")
    if protocol == "shared":
        return RateChoice(lr=shared_lr, source="shared: the model's rate at this profile (× the method's scale)")
    if given_data:
        return RateChoice(lr=shared_lr, source="shared: the tuned table's rates are the built-in data's, not the data "
                                               "given (--gradeff-data)")
    table = table if table is not None else tuned_table()
    own = rate_strategy(strategy)
    row = table.lookup(profile, model, optimizer, method, dataset, own)
    fallback = ""
    if row is None and own != "standard":
        row = table.lookup(profile, model, optimizer, method, dataset)
        fallback = f" (the standard strategy's: the table has no {own} row for this cell)"
    if row is None:
        return RateChoice(lr=shared_lr, source="shared: the tuned table has no rate for this cell at this profile")
    if row.tuning_free:
        return RateChoice(lr=shared_lr, source=f"shared: tuning-free ({row.tuning_free})", row=row)
    seeds = ",".join(map(str, row.seeds))
    return RateChoice(lr=row.lr, row=row, replaces=True,
                      source=f"tuned table: search {row.search}, seeds {seeds}, best final validation loss of "
                             f"{len(row.grid)} rates" + (f" (at the grid's {row.at_edge} edge)" if row.at_edge else "")
                             + (f", tuned on {row.strategy}" if row.strategy != "standard" else "") + fallback)
