"""Which memory a model's cells are compared on: the live-tensor peak, never a shared process's RSS."""

from gradeff.analysis import memory_metric_for


def test_rss_names_no_winner_unless_every_cell_ran_isolated(make_record, make_meters):
    """Only RSS measured: shared-process cells get no memory metric; isolated ones are compared on RSS."""
    meters = make_meters()
    meters["memory"] = {}
    shared = [make_record("llm-adam-standard", meters=meters), make_record("llm-sgd-standard", meters=meters)]
    assert memory_metric_for(shared) is None
    isolated = [make_record("llm-adam-standard", meters=meters, environment={"process": "isolated"}),
                make_record("llm-sgd-standard", meters=meters, environment={"process": "isolated"})]
    assert memory_metric_for(isolated) == "ram_peak"


def test_the_live_peak_is_the_memory_metric(make_record, make_meters):
    """A measured live peak is the metric; the breakdown sum, which misses transients, never stands in for it."""
    meters = make_meters()
    assert memory_metric_for([make_record(meters=meters)]) is None
    meters["memory"]["peak_bytes"] = 5 * 2**20
    assert memory_metric_for([make_record(meters=meters)]) == "peak"
