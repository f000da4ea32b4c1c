"""Shards: every selected cell in exactly one shard, the same split everywhere, balanced by recorded cost."""

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradeff.records.store import read_records
from gradeff.scale.shard import Shard, assign, cell_costs, parse_shard

BASELINE = Path(__file__).parents[2] / "baselines" / "tiny-cpu.jsonl"
PLUGIN = ("-p", "gradeff.pytest_plugin")

keys = st.lists(st.text("abcdefgh-_0123", min_size=1, max_size=12), unique=True, max_size=60)
costs_for = st.dictionaries(st.text("abcdefgh-_0123", min_size=1, max_size=12),
                            st.floats(0.001, 1000, allow_nan=False), max_size=60)


@settings(max_examples=200, deadline=None)
@given(keys=keys, count=st.integers(1, 7), costs=costs_for, seed=st.randoms())
def test_every_key_in_exactly_one_shard_whatever_the_order(keys, count, costs, seed):
    shards = assign(keys, count, costs)
    assert len(shards) == count
    flat = [key for shard in shards for key in shard]
    assert sorted(flat) == sorted(keys) and len(flat) == len(set(flat))
    shuffled = list(keys)
    seed.shuffle(shuffled)
    # Every job computes the split itself: the order its collection found the tests in must not matter.
    assert assign(shuffled, count, dict(reversed(list(costs.items())))) == shards


@given(n_keys=st.integers(0, 50), count=st.integers(1, 7))
def test_without_costs_shard_sizes_differ_by_at_most_one(n_keys, count):
    sizes = [len(shard) for shard in assign([f"cell{i:02d}" for i in range(n_keys)], count)]
    assert max(sizes) - min(sizes) <= 1


def _balance(costs: dict[str, float], count: int) -> float:
    """Largest shard load over the ideal one: the mean load, or the longest cell when it alone is longer."""
    loads = [sum(costs[key] for key in shard) for shard in assign(costs, count, costs)]
    return max(loads) / max(sum(costs.values()) / count, max(costs.values()))


@pytest.mark.parametrize("count", range(1, 8))
def test_recorded_grid_is_balanced_within_ten_percent(count):
    """baselines/tiny-cpu.jsonl's 24 cells (their recorded wall times) split into 1..7 shards."""
    costs = cell_costs([BASELINE])
    assert len(costs) == len(list(read_records(BASELINE))) == 24
    assert _balance(costs, count) <= 1.10


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), count=st.integers(1, 7))
def test_noisy_recorded_costs_stay_balanced(seed, count):
    """The recorded costs perturbed by ±30 % (another run's timings) still split within 10 %."""
    rng = random.Random(seed)
    costs = {cell: seconds * rng.uniform(0.7, 1.3) for cell, seconds in cell_costs([BASELINE]).items()}
    assert _balance(costs, count) <= 1.10


def test_unknown_cells_weigh_the_median():
    shards = assign(["a", "b", "c", "new"], 2, {"a": 10.0, "b": 1.0, "c": 1.0})
    assert shards == [["a"], ["b", "c", "new"]]


@pytest.mark.parametrize(("text", "shard"), [("1/1", Shard(1, 1)), ("3/4", Shard(3, 4)), (" 2 / 7 ", Shard(2, 7))])
def test_parse_shard(text, shard):
    assert parse_shard(text) == shard and str(shard) == text.replace(" ", "")


@pytest.mark.parametrize(("text", "message"), [("0/2", "in 1..2"), ("3/2", "in 1..2"), ("1/0", ">= 1"),
                                                 ("2", "expected I/N"), ("a/b", "expected I/N"), ("-1/2", "I/N")])
def test_bad_shards_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_shard(text)


@pytest.mark.parametrize(("args", "message"), [
    (("--gradeff-shard", "3/2"), "*--gradeff-shard: shard index must be in 1..2, got '3/2'*"),
    (("--gradeff-shard", "0/2"), "*--gradeff-shard: shard index must be in 1..2*"),
    (("--gradeff-shard", "half"), "*--gradeff-shard: expected I/N*"),
    (("--gradeff-shard-costs", "x.jsonl"), "*--gradeff-shard-costs: given without --gradeff-shard*"),
    (("--gradeff-shard", "1/2", "--gradeff-shard-costs", "absent.jsonl"), "*--gradeff-shard-costs*no such file*"),
])
def test_bad_shard_options_are_usage_errors(grid_pytester, args, message):
    outcome = grid_pytester.runpytest(*PLUGIN, "-k", "vit-sgd-standard", *args)
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines([message])


@pytest.mark.parametrize("count", [2, 3])
def test_shards_of_a_collected_selection_partition_it(grid_pytester, count):
    """--collect-only per shard: the shards' tests together are the selection, each once; deselected counts shown."""
    selection = ("-m", "main", "-k", "vit or llm")
    every = grid_pytester.runpytest(*PLUGIN, *selection, "--collect-only", "-q")
    everything = {line for line in every.outlines if "::" in line}
    assert len(everything) == 36
    seen = []
    for index in range(1, count + 1):
        outcome = grid_pytester.runpytest(*PLUGIN, *selection, "--collect-only", "-q", "--gradeff-shard",
                                          f"{index}/{count}", "--gradeff-shard-costs", str(BASELINE))
        mine = [line for line in outcome.outlines if "::" in line]
        line = (f"*gradeff shard {index}/{count}: {len(mine)} of 36 selected tests, {36 - len(mine)} deselected "
                "(balanced by recorded wall time*")
        outcome.stdout.fnmatch_lines([line])
        seen.extend(mine)
    assert sorted(seen) == sorted(everything)


def test_a_shard_runs_under_xdist(grid_pytester):
    """Workers of one shard all collect and deselect alike: -n 2 with shard 1/2 of three cells runs its two."""
    results = grid_pytester.path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(*PLUGIN, "-n", "2", "-m", "main", "-k", "vit-sgd", "--gradeff-epochs",
                                                 "1", "--gradeff-shard", "1/2", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=2)
    # By count, sorted ids: accum → shard 1, checkpoint → shard 2, standard → shard 1.
    assert sorted(r.cell for r in read_records(results)) == ["vit-sgd-accum", "vit-sgd-standard"]
    # Shards of one run share a folder: none leaves last-session files for another to replace.
    assert sorted(p.name for p in grid_pytester.path.iterdir() if p.name.startswith("last-session")) == []
