"""The "use this" line: best quality, then among equivalent cells the fastest to target, then the least memory."""

from dataclasses import replace

import pytest

from gradeff.analysis.choice import choose, parse_prefer
from gradeff.analysis.margins import parse_margins
from gradeff.analysis.runs import by_cell
from gradeff.analysis.verdicts import ESTIMATE_FOLLOWS_TIME, step_time_noise, verdict
from tests.analysis.factories import run

SEEDS = range(4)


def _group(spec):
    """spec: cell → (test losses per seed, seconds to target per seed, peak bytes, steps to target)."""
    records = []
    for cell, (tests, seconds, peak, steps) in spec.items():
        for seed in SEEDS:
            records.append(run(cell, seed, test=tests[seed], peak=peak,
                               summary={"target_loss": 3.0, "steps_to_target": steps,
                                        "seconds_to_target": seconds[seed]}))
    return by_cell(records)


def _labels(runs):
    return {cell: "/".join(cell.split("-")[1:]) for cell in runs}


def test_quality_equivalent_then_the_fastest_is_chosen_with_its_gain():
    """adam and adamw are the same quality within 1 %; adamw reaches the target ~20 % sooner: use adamw."""
    runs = _group({
        "llm-adam-standard": ((2.000, 2.010, 1.990, 2.005), (10.0, 10.4, 9.8, 10.2), 4_000_000, 16),
        "llm-adamw-standard": ((2.001, 2.011, 1.992, 2.004), (8.0, 8.2, 7.9, 8.1), 4_000_000, 16),
        "llm-sgd-standard": ((3.0, 3.1, 2.9, 3.05), (5.0, 5.0, 5.0, 5.0), 2_000_000, 8),
    })
    chosen = choose(runs, _labels(runs))
    assert chosen.cell == "llm-adamw-standard" and chosen.decided
    assert "quality equivalent to adam/standard (±1 %)" in chosen.reason
    assert "faster to target" in chosen.reason and "95 % CI" in chosen.reason
    assert [step.question for step in chosen.steps] == ["quality", "speed"]


def test_a_quality_winner_ends_the_choice_whatever_its_speed():
    runs = _group({
        "llm-adam-standard": ((2.0, 2.01, 1.99, 2.0), (20.0, 20.0, 20.0, 20.0), 8_000_000, 32),
        "llm-sgd-standard": ((3.0, 3.1, 2.9, 3.05), (5.0, 5.0, 5.0, 5.0), 2_000_000, 8),
    })
    chosen = choose(runs, _labels(runs))
    assert chosen.cell == "llm-adam-standard" and chosen.decided and chosen.reason.startswith("best quality")


def test_an_open_quality_question_makes_the_choice_provisional_and_says_how_many_seeds():
    runs = _group({
        "llm-adam-standard": ((2.0, 2.3, 1.9, 2.2), (10.0, 10.0, 10.0, 10.0), 4_000_000, 16),
        "llm-adamw-standard": ((2.25, 2.1, 2.3, 2.15), (8.0, 8.0, 8.0, 8.0), 4_000_000, 16),
    })
    chosen = choose(runs, _labels(runs))
    # Quality cannot tell them apart yet: the choice for now is its leader (adam, the lower mean loss), not the
    # faster adamw, which may yet prove worse; the line says so and how many seeds would decide it.
    assert chosen.cell == "llm-adam-standard" and not chosen.decided and chosen.seeds_needed > 4
    assert chosen.reason.startswith("quality open against adamw/standard (about ")
    assert [(step.question, step.remaining) for step in chosen.steps] == [("quality", ("llm-adam-standard",))]


def test_an_open_question_passes_on_its_leader_with_the_cells_identical_to_it():
    """Checkpointing trains bit for bit as standard: with quality open against sgd, the leader's identical twin
    still competes on time, and the memory-thriftier sgd does not jump the quality queue."""
    runs = _group({
        "llm-adam-standard": ((2.0, 2.3, 1.9, 2.2), (10.0, 10.1, 9.9, 10.0), 8_000_000, 32),
        "llm-adam-checkpoint": ((2.0, 2.3, 1.9, 2.2), (12.0, 12.1, 11.9, 12.0), 2_000_000, 32),
        "llm-sgd-checkpoint": ((2.25, 2.1, 2.3, 2.15), (14.0, 14.1, 13.9, 14.0), 1_000_000, 32),
    })
    chosen = choose(runs, _labels(runs))
    assert chosen.cell == "llm-adam-standard" and not chosen.decided
    assert chosen.steps[0].remaining == ("llm-adam-standard", "llm-adam-checkpoint")
    assert "sgd/checkpoint" in chosen.reason.split(";")[0]


def test_the_order_of_the_questions_can_be_changed():
    """--gradeff-prefer time,quality: the fastest cell wins though its quality is worse."""
    runs = _group({
        "llm-adam-standard": ((2.0, 2.01, 1.99, 2.0), (20.0, 20.5, 19.5, 20.2), 8_000_000, 32),
        "llm-sgd-standard": ((3.0, 3.1, 2.9, 3.05), (5.0, 5.1, 4.9, 5.05), 2_000_000, 8),
    })
    assert choose(runs, _labels(runs), prefer=parse_prefer("time,quality")).cell == "llm-sgd-standard"
    assert parse_prefer("memory") == ("memory", "quality", "speed")
    with pytest.raises(ValueError, match="valid: quality, time, memory"):
        parse_prefer("loss")
    with pytest.raises(ValueError, match="twice"):
        parse_prefer("time,speed")


def test_equivalent_on_every_question_says_any_will_do():
    runs = _group({
        "llm-adam-standard": ((2.0, 2.01, 1.99, 2.0), (10.0, 10.0, 10.0, 10.0), 4_000_000, 16),
        "llm-adam-checkpoint": ((2.0, 2.01, 1.99, 2.0), (10.0, 10.0, 10.0, 10.0), 4_000_000, 16),
    })
    chosen = choose(runs, _labels(runs))
    assert chosen.cell == "llm-adam-standard" and chosen.decided and "any of" in chosen.reason


def test_no_ok_cell_chooses_nothing():
    runs = by_cell([run("llm-adam-standard", 0, status="error")])
    assert choose(runs, {}).cell is None


def test_same_step_to_target_within_the_timers_noise_is_equivalent():
    """Two cells at the same step, 3 % apart in seconds, with a per-step time that moves 5 % epoch to epoch."""
    records = []
    for seed in range(3):
        for cell, scale in (("vit-adam-standard", 1.0), ("vit-adamw-standard", 1.03)):
            record = run(cell, seed, test=2.0 + 0.001 * seed,
                         summary={"target_loss": 3.0, "steps_to_target": 8, "seconds_to_target": 10.0 * scale})
            epochs = tuple(replace(e, seconds=(1.0, 1.1)[i] * scale) for i, e in enumerate(record.epochs))
            records.append(replace(record, epochs=epochs))
    runs = by_cell(records)
    assert step_time_noise(runs["vit-adam-standard"].first) == pytest.approx(0.0673, abs=1e-3)
    # A constant 3 % gap on three seeds is significant, and with a 1 % margin not equivalent by the tests: only the
    # same-step rule makes it equivalent.
    tight = {"speed": parse_margins(["speed=1%"])["speed"]}
    found = verdict(runs, "speed", margins=tight)
    assert found.ranking.outcome == "equivalent"
    shifted = [replace(r, summary=replace(r.summary, steps_to_target=16)) for r in runs["vit-adamw-standard"].runs]
    apart = by_cell([*runs["vit-adam-standard"].runs, *shifted])
    assert verdict(apart, "speed", margins=tight).ranking.outcome == "winner"  # another step: the rule is silent


def test_an_energy_estimate_follows_time_and_names_no_winner():
    records = [run("llm-adam-standard", s, joules=10.0 + s, energy_source="estimate") for s in range(2)] + \
              [run("llm-sgd-standard", s, joules=5.0 + s, energy_source="estimate") for s in range(2)]
    found = verdict(by_cell(records), "energy")
    assert found.ranking is None and found.reason == ESTIMATE_FOLLOWS_TIME
    measured = [run("llm-adam-standard", s, energy_source="rapl", summary={"target_loss": 3.0, "steps_to_target": 8,
                                                                            "joules_to_target": 10.0 + s})
                for s in range(2)]
    assert verdict(by_cell(measured), "energy").ranking is not None
