"""A record's sections are named once (gradeff.records.fields.SECTION_FIELDS, METER_FIELDS): what the writers
fill, and all that a reader may ask for; a reader naming anything else fails instead of reading "not measured"."""

import ast
import dataclasses
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from gradeff.analysis import metric_value
from gradeff.analysis.metrics import meter_value
from gradeff.axes.models.weights import StartingWeights
from gradeff.axes.optim.cg import ConjugateGradient, cg_stats
from gradeff.cell.config import RunConfig
from gradeff.cell.environment import environment
from gradeff.cell.inference import InferenceCost
from gradeff.cell.metering import SAMPLED_METERS, MeterSettings
from gradeff.cell.run import run_cell
from gradeff.meters import EnergyRecord, GpuRecord, MemoryBreakdown
from gradeff.meters.flops import ComputeRecord
from gradeff.meters.ram import RamRecord
from gradeff.records.fields import METER_FIELDS, SECTION_FIELDS, UnknownRecordField
from gradeff.records.results import meter_field, meter_section, record_field, record_section
from gradeff.specs.profiles import HParams
from gradeff.studies.grid import Cell

CONFIG = RunConfig(profile="tiny", epochs=1, device="cpu", session="test")
SOURCE = Path(__file__).resolve().parents[2] / "gradeff"


def _names(record_class) -> set[str]:
    return {f.name for f in dataclasses.fields(record_class)}


def test_the_meters_table_names_the_meters_own_record_fields():
    """Each meter's fields are those of the frozen record it yields, plus what a cell's aggregate adds."""
    assert METER_FIELDS["ram"] == _names(RamRecord)
    assert METER_FIELDS["gpu"] == _names(GpuRecord)
    assert METER_FIELDS["energy"] == _names(EnergyRecord) | {"co2_grams"}
    assert METER_FIELDS["memory"] == _names(MemoryBreakdown) | {"ranks"}
    assert METER_FIELDS["compute"] == _names(ComputeRecord) | {"not_measured"}
    weight = torch.nn.Parameter(torch.ones(2))
    assert METER_FIELDS["cg"] == set(cg_stats(ConjugateGradient([weight])))


def test_every_meter_of_a_cells_window_has_its_fields_in_the_table():
    """Each entry of SAMPLED_METERS writes exactly its METER_FIELDS, per epoch and combined over epochs."""
    for meter in SAMPLED_METERS:
        with meter.make(MeterSettings(hz=1.0), torch.device("cpu")) as window, window.segment() as segment:
            pass
        record = asdict(segment.record)
        assert set(meter.combine([record, record], 400.0)) == METER_FIELDS[meter.name] == set(record), meter.name


def test_the_sections_table_names_the_writers_fields():
    """hparams: HParams's fields and what the cell's record builder adds; weights, inference and environment: what
    their writers return."""
    extra = {"method", "precision", "protocol", "lr_source", "optimizer_kernel", "world_size"}
    assert SECTION_FIELDS["hparams"] == _names(HParams) | extra
    assert SECTION_FIELDS["weights"] == set(StartingWeights(source="random").to_record())
    assert SECTION_FIELDS["inference"] == _names(InferenceCost) | {"scores"}
    assert SECTION_FIELDS["environment"] == set(environment("cpu")) | {"process"}


@pytest.fixture(scope="module")
def records() -> dict[str, object]:
    """Cells whose records fill every section: conjugate gradient (its counters), an image classifier (its inference
    cost), a budget-adaptive plan and a rate search (tuning)."""
    return {"cg": run_cell(Cell("llm", "cgd", "standard"), CONFIG),
            "classifier": run_cell(Cell("vit", "adam", "standard"), CONFIG),
            "budget": run_cell(Cell("llm", "adam", "budget40", grid="memory"), CONFIG),
            "tuned": run_cell(Cell("llm", "sgd", "standard"), dataclasses.replace(CONFIG, tune="lr", tune_points=1))}


@pytest.mark.slow
def test_real_records_write_only_declared_fields(records):
    assert {key: r.status for key, r in records.items()} == dict.fromkeys(records, "ok")
    for key, record in records.items():
        for section, fields in SECTION_FIELDS.items():
            assert set(getattr(record, section)) <= fields, (key, section, set(getattr(record, section)) - fields)
        assert all(set(values) <= METER_FIELDS[meter] for meter, values in record.meters.items()), key
        for epoch in record.epochs:
            assert set(epoch.meters) == {"ram", "gpu", "energy", "cost"}
            assert all(set(values) <= METER_FIELDS[meter] for meter, values in epoch.meters.items())
    assert set(records["cg"].meters) == {"ram", "gpu", "energy", "cost", "memory", "compute", "cg"}
    assert records["classifier"].inference and records["budget"].plan and records["tuned"].tuning
    assert set(records["cg"].task) == SECTION_FIELDS["task"]
    assert set(records["cg"].evaluation) == SECTION_FIELDS["evaluation"]
    assert set(records["cg"].parameters) == SECTION_FIELDS["parameters"]


def test_the_readers_return_what_is_stored(records):
    cg, tuned = records["cg"], records["tuned"]
    assert meter_field(cg, "energy", "joules") == cg.meters["energy"]["joules"] > 0
    assert meter_field(cg.epochs[0], "ram", "samples") == cg.epochs[0].meters["ram"]["samples"]
    assert record_field(tuned, "tuning", "chosen") == tuned.tuning["chosen"] == tuned.hparams["lr"]
    assert record_field(records["budget"], "plan", "fits") is records["budget"].plan["fits"] is True
    assert record_section(cg, "hparams") is cg.hparams


def test_a_field_no_writer_fills_is_an_error_naming_the_valid_ones(records):
    cg = records["cg"]
    with pytest.raises(UnknownRecordField, match=r"no field 'joule'; its fields: co2_grams, duration_s, joules"):
        meter_field(cg, "energy", "joule")
    with pytest.raises(UnknownRecordField, match=r"no meter is named 'enrgy'; the meters: ram, gpu, energy"):
        meter_section(cg, "enrgy")
    with pytest.raises(UnknownRecordField):
        meter_value(cg, "ram", "peak_rss")
    with pytest.raises(UnknownRecordField, match=r"hparams has no field 'learning_rate'; its fields: accum_steps,"):
        record_field(cg, "hparams", "learning_rate")
    with pytest.raises(UnknownRecordField, match=r"no section 'meters'; its sections: task, parameters, weights"):
        record_section(cg, "meters")


@pytest.mark.parametrize("value", [{}, None, "1.0", ["energy"]], ids=["empty", "null", "string", "list"])
def test_a_declared_field_a_record_lacks_reads_as_not_measured(records, value):
    """Older and hand-edited records: an absent or malformed section is "not measured", never an error."""
    record = dataclasses.replace(records["cg"], meters={"energy": value}, hparams=value)
    assert meter_field(record, "energy", "joules") is None
    assert meter_field(record, "energy", "source", "none") == "none"
    assert meter_section(record, "energy") == {} and record_section(record, "hparams") == {}
    assert metric_value(record, "energy") is None
    assert record_field(record, "hparams", "precision", "fp32") == "fp32"


# The readers and which of their arguments name a section (or meter) and a field; an argument that is not a literal
# string is checked where it runs.
_READERS = {"record_field": (1, 2), "meter_field": (1, 2), "meter_value": (1, 2), "_meter": (0, 1),
            "plan_number": ("plan", 1), "inference_number": ("inference", 1)}


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def test_every_field_the_code_reads_by_name_is_declared():
    """Every call of a reader with literal names, in every module: a typo fails here, before any record is read."""
    tables = SECTION_FIELDS | {f"meter:{meter}": fields for meter, fields in METER_FIELDS.items()}
    read, unknown = 0, []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name not in _READERS:
                continue
            where, field = _READERS[name]
            if isinstance(where, str):
                table = where
            else:
                table = _literal(node.args[where]) if len(node.args) > where else None
            if table is not None and "meter" in name:
                table = f"meter:{table}"
            value = _literal(node.args[field]) if len(node.args) > field else None
            if table is None or value is None:
                continue
            read += 1
            if table not in tables or value not in tables[table]:
                unknown.append(f"{path.relative_to(SOURCE.parent)}:{node.lineno}: {table}.{value}")
    assert unknown == []
    assert read > 50  # the readers were found: the scan is not vacuous
