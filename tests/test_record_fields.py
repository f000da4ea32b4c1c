"""A record's ``meters`` fields are named once (gradeff.results.METER_FIELDS): what the meters write, and all that a
reader may ask for; a reader naming anything else fails instead of reading "not measured"."""

import dataclasses

import pytest
import torch

from gradeff.analysis import metric_value
from gradeff.analysis.metrics import meter_value
from gradeff.grid import Cell
from gradeff.meters import EnergyRecord, GpuRecord, MemoryBreakdown
from gradeff.meters.flops import ComputeRecord
from gradeff.meters.ram import RamRecord
from gradeff.optim.cg import ConjugateGradient, cg_stats
from gradeff.results import METER_FIELDS, CellRecord, UnknownMeterField, meter_field, meter_section
from gradeff.runner import RunConfig, run_cell


def _names(record_class) -> set[str]:
    return {f.name for f in dataclasses.fields(record_class)}


def test_the_table_names_the_meters_own_record_fields():
    """Each meter's fields are those of the frozen record it yields, plus what a cell's aggregate adds."""
    assert METER_FIELDS["ram"] == _names(RamRecord)
    assert METER_FIELDS["gpu"] == _names(GpuRecord)
    assert METER_FIELDS["energy"] == _names(EnergyRecord) | {"co2_grams"}
    assert METER_FIELDS["memory"] == _names(MemoryBreakdown) | {"ranks"}
    assert METER_FIELDS["compute"] == _names(ComputeRecord) | {"not_measured"}
    weight = torch.nn.Parameter(torch.ones(2))
    assert METER_FIELDS["cg"] == set(cg_stats(ConjugateGradient([weight])))


@pytest.fixture(scope="module")
def cg_record() -> CellRecord:
    return run_cell(Cell("llm", "cgd", "standard"), RunConfig(profile="tiny", epochs=1, device="cpu", session="test"))


def test_a_cells_record_writes_only_declared_fields(cg_record):
    """A real cell (conjugate gradient: every meter, its counters too) and each of its epochs."""
    assert cg_record.status == "ok", cg_record.detail
    written = {meter: set(section) for meter, section in cg_record.meters.items()}
    assert set(written) == {"ram", "gpu", "energy", "cost", "memory", "compute", "cg"}
    assert {meter: fields - METER_FIELDS[meter] for meter, fields in written.items()} == dict.fromkeys(written, set())
    for epoch in cg_record.epochs:
        assert set(epoch.meters) == {"ram", "gpu", "energy", "cost"}
        assert all(set(section) <= METER_FIELDS[meter] for meter, section in epoch.meters.items())
    assert meter_field(cg_record, "energy", "joules") == cg_record.meters["energy"]["joules"] > 0
    assert meter_field(cg_record.epochs[0], "ram", "samples") == cg_record.epochs[0].meters["ram"]["samples"]


def test_a_field_no_meter_writes_is_an_error_naming_the_valid_ones(cg_record):
    with pytest.raises(UnknownMeterField, match=r"no field 'joule'; its fields: co2_grams, duration_s, joules"):
        meter_field(cg_record, "energy", "joule")
    with pytest.raises(UnknownMeterField, match=r"no meter is named 'enrgy'; the meters: ram, gpu, energy"):
        meter_section(cg_record, "enrgy")
    with pytest.raises(UnknownMeterField):
        meter_value(cg_record, "ram", "peak_rss")


@pytest.mark.parametrize("meters", [{}, {"energy": None}, {"energy": {}}, {"energy": "1.0"}, ["energy"]],
                         ids=["none", "null-section", "empty-section", "string-section", "not-a-mapping"])
def test_a_declared_field_a_record_lacks_reads_as_not_measured(cg_record, meters):
    """Older and hand-edited records: an absent or malformed section is "not measured", never an error."""
    record = dataclasses.replace(cg_record, meters=meters)
    assert meter_field(record, "energy", "joules") is None
    assert meter_field(record, "energy", "source", "none") == "none"
    assert meter_section(record, "energy") == {}
    assert metric_value(record, "energy") is None
