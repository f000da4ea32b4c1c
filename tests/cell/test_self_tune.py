"""The self-tuning protocol: a cell without a row of the tuned table searches its own rate, cached by fingerprint."""

import json
import math
from dataclasses import asdict, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.axes.data.checksums import CacheRebuiltWarning, sidecar
from gradeff.axes.data.real_sources import DataSource
from gradeff.cell.config import RunConfig
from gradeff.cell.experiment import experiment_inputs
from gradeff.cell.plan import plan_cell
from gradeff.cell.protocols import SELF_TUNED, choose_rate
from gradeff.cell.self_tune import SearchBudget, fingerprint, needs_self_tuning, run_self_tuned
from gradeff.records.results import Summary
from gradeff.studies.grid import Cell
from gradeff.studies.hparams import hparams_for

REAL = Cell("vit", "adamw", "standard", dataset="digits", grid="real")
HP = asdict(hparams_for("vit", "tiny", dataset="digits"))
BUDGET = SearchBudget()


class FakeTraining:
    """``train(plan)`` whose final validation loss is a parabola in log10(rate) with its minimum at ``best``;
    the rate ``best`` itself only wins at the full epochs (a first-rung trial sees a flatter, shifted curve)."""

    def __init__(self, make_record, best: float = 3e-3, fail_above: float = math.inf):
        self.make_record, self.best, self.fail_above = make_record, best, fail_above
        self.configs: list[RunConfig] = []

    def __call__(self, plan, **reported):
        config = plan.config
        self.configs.append(config)
        if config.lr is None:  # the cell at its protocol's rate
            return self.make_record()
        if config.lr > self.fail_above:
            return self.make_record(status="diverged")
        loss = 1.0 + (math.log10(config.lr) - math.log10(self.best)) ** 2 / (config.epochs or 3)
        return self.make_record(summary=replace(Summary.of([], 1.0), final_validation_loss=loss),
                                hparams={"lr": config.lr})


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One cache folder for the module: the digits' prepared tensors are built once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def cache(shared_cache):
    """The module's cache folder without any self-tuned choice in it."""
    import shutil

    shutil.rmtree(shared_cache / "self-tuned", ignore_errors=True)
    return shared_cache


def _run(make_record, cache_dir, training=None, config=None, budget=BUDGET):
    training = training or FakeTraining(make_record)
    config = config or RunConfig(profile="tiny", device="cpu", cache_dir=str(cache_dir), epochs=3)
    warmed = []
    warm = lambda plan: warmed.append(plan.config)  # noqa: E731
    record = run_self_tuned(plan_cell(REAL, config), train=training, warm=warm, budget=budget)
    return record, training, warmed


@given(epochs=st.integers(1, 400), points=st.integers(2, 40), eta=st.integers(2, 6))
def test_successive_halving_spends_a_fraction_of_the_epochs_on_a_fraction_of_the_rates(epochs, points, eta):
    """The first rung never trains longer than the cell and at least one epoch; at least two rates, and never more
    than there are, go on."""
    budget = SearchBudget(points=points, eta=eta)
    assert 1 <= budget.first_epochs(epochs) <= epochs and budget.first_epochs(epochs) >= epochs / eta
    assert 2 <= budget.survivors(points) <= points and budget.survivors(points) >= points / eta


def test_a_bad_budget_is_refused():
    with pytest.raises(ValueError, match="points >= 2"):
        SearchBudget(points=1)
    with pytest.raises(ValueError, match="eta >= 2"):
        SearchBudget(eta=1)


def test_the_search_halves_then_trains_the_survivors_to_the_full_epochs_and_keeps_the_best(make_record, cache):
    """Six rates at one epoch, the best two at three; every trial on the validation split; the reported run at the
    chosen rate, its record marked self-tuned with every trial and the search's cost."""
    record, training, warmed = _run(make_record, cache)
    trials = record.tuning["trials"]
    first = [t for t in trials if t["rung"] == "first"]
    full = [t for t in trials if t["rung"] == "full"]
    assert len(first) == 6 and {t["epochs"] for t in first} == {1}
    assert len(full) == 2 and {t["epochs"] for t in full} == {3}
    ranked = sorted(first, key=lambda t: t["validation_loss"])
    assert {t["lr"] for t in full} == {t["lr"] for t in ranked[:2]}
    assert record.tuning["chosen"] == min(full, key=lambda t: t["validation_loss"])["lr"]
    assert all(c.trial for c in training.configs[:-1]) and len(warmed) == 1 and warmed[0].trial
    reported = training.configs[-1]
    assert not reported.trial and reported.self_tuned and reported.lr == record.tuning["chosen"]
    assert reported.epochs == 3 and reported.lr_source.startswith(f"{SELF_TUNED}: successive halving over 6 rates")
    assert record.tuning["cached"] is False and record.tuning["seconds"] > 0
    assert record.tuning["budget"]["epochs"] == {"first": 1, "full": 3}


def test_the_next_run_reads_the_choice_from_the_cache_and_spends_nothing(make_record, cache):
    first, _, _ = _run(make_record, cache)
    again, training, warmed = _run(make_record, cache)
    assert len(training.configs) == 1 and not warmed  # the reported run alone
    assert again.tuning["cached"] is True and again.tuning["chosen"] == first.tuning["chosen"]
    assert again.tuning["seconds"] == 0.0 and again.tuning["search_seconds"] == first.tuning["search_seconds"]
    assert "read from the cache" in training.configs[0].lr_source


def test_a_damaged_cache_file_is_searched_again_with_a_warning(make_record, cache):
    _run(make_record, cache)
    [path] = (cache / "self-tuned").glob("*.json")
    path.write_text(path.read_text().replace('"chosen": ', '"chosen": 1'))
    with pytest.warns(CacheRebuiltWarning, match=path.name):
        again, training, _ = _run(make_record, cache)
    assert again.tuning["cached"] is False and len(training.configs) == 9


def test_a_best_rate_at_the_edge_widens_past_it(make_record, cache):
    """The best rate lies below the grid: the search adds rates past the low edge, at the full epochs."""
    training = FakeTraining(make_record, best=1e-7)
    record, _, _ = _run(make_record, cache, training)
    full = sorted(t["lr"] for t in record.tuning["trials"] if t["rung"] == "full")
    grid = sorted(t["lr"] for t in record.tuning["trials"] if t["rung"] == "first")
    assert len(full) == 2 + BUDGET.widen and full[0] < grid[0] and record.tuning["chosen"] == full[0]
    assert record.tuning["at_edge"] == "low"


def test_failed_rates_are_never_chosen(make_record, cache):
    training = FakeTraining(make_record, best=1.0, fail_above=5e-3)
    record, _, _ = _run(make_record, cache, training)
    assert record.tuning["chosen"] <= 5e-3
    assert any(t["status"] == "diverged" and t["validation_loss"] is None for t in record.tuning["trials"])


def test_a_search_no_rate_survives_trains_at_the_shared_rate_and_caches_nothing(make_record, cache):
    training = FakeTraining(make_record, fail_above=0.0)
    record, _, _ = _run(make_record, cache, training)
    reported = training.configs[-1]
    assert reported.lr == pytest.approx(HP["lr"]) and reported.self_tuned
    assert "no trial of 7 ended ok" in reported.lr_source  # six, and one to the full epochs
    assert record.tuning["chosen"] is None and record.tuning["picked_on"] == "nothing ended ok"
    assert not list((cache / "self-tuned").glob("*.json"))


def test_data_that_cannot_be_built_is_the_cells_own_failure(make_record, cache, monkeypatch):
    """run_cell never raises: the data's error reaches the cell's training, whose record names it."""
    def broken(*args, **kwargs):
        raise ValueError("cannot decode the image")

    monkeypatch.setattr("gradeff.cell.self_tune.cell_data", broken)
    training = FakeTraining(make_record)
    _run(make_record, cache, training)
    assert len(training.configs) == 1 and not training.configs[0].self_tuned and training.configs[0].lr is None


def test_an_interrupted_trial_is_the_cells_record_and_nothing_is_cached(make_record, cache):
    def interrupted(plan, **reported):
        return make_record(status="interrupted", detail="interrupted by the user (Ctrl-C)")

    record, _, _ = _run(make_record, cache, interrupted)
    assert record.status == "interrupted" and not list((cache / "self-tuned").glob("*.json"))


def test_one_epoch_has_no_cheaper_rung():
    assert SearchBudget().first_epochs(1) == 1


DEFAULT = RunConfig()


def _key(cell=REAL, config=DEFAULT, budget=BUDGET, hparams=HP, data="d" * 64):
    return fingerprint(cell, config, budget, hparams=hparams, data_digest=data)


def test_the_fingerprint_changes_with_what_the_choice_is_a_function_of():
    """Data, model, optimizer, method, sizes, profile, precision, budget: each gives another key; the seed, the
    rate and the strategies that train as standard do not."""
    base = _key()
    changed = [
        _key(data="e" * 64), _key(cell=replace(REAL, model="llm")), _key(cell=replace(REAL, optimizer="sgd")),
        _key(cell=replace(REAL, method="bitfit")), _key(hparams=HP | {"batch_size": 16}),
        _key(config=RunConfig(profile="small")), _key(config=RunConfig(precision="bf16")),
        _key(budget=SearchBudget(points=5)), _key(cell=replace(REAL, strategy="accum")),
    ]
    assert len({base, *changed}) == len(changed) + 1
    assert _key(config=RunConfig(seed=7)) == base and _key(hparams=HP | {"lr": 9.0}) == base
    assert _key(cell=replace(REAL, strategy="checkpoint")) == base


def test_a_registered_spec_is_fingerprinted_by_its_fields_not_its_address():
    """A spec holding a builder function keys the same in every process (its repr would carry an address)."""
    from gradeff.cell.self_tune import _stable

    def builder():
        return None

    assert _stable({"b": builder, "a": (1, 2.0)}) == {"a": [1, 2.0], "b": f"{__name__}.{builder.__qualname__}"}


def test_which_cells_tune_themselves():
    """No row of the table: the real-data grid, data the user gave; not a cell with a row, a tuning-free optimizer,
    a method that trains nothing, the shared protocol, a rate searched otherwise."""
    config = RunConfig(profile="tiny")
    peft = Cell("vit_s", "adamw", "standard", method="lora", dataset="cifar100", grid="peft")
    def tunes_itself(cell, config):
        return needs_self_tuning(plan_cell(cell, config))

    assert tunes_itself(REAL, config) and not tunes_itself(peft, config)
    given_data = replace(config, data=(DataSource(key="cifar100", path="/data/mine.parquet"),))
    assert tunes_itself(peft, given_data)
    assert not tunes_itself(replace(REAL, optimizer="cgd"), config)
    assert not tunes_itself(Cell("clip", "adamw", "standard", "zero_shot", "dtd", grid="baselines"), config)
    assert tunes_itself(Cell("dinov2", "adamw", "standard", "linear_probe", "dtd", grid="baselines"), config)
    assert not tunes_itself(REAL, replace(config, protocol="shared"))
    assert not tunes_itself(REAL, replace(config, tune="lr"))
    assert not tunes_itself(REAL, replace(config, lr=1e-3))


def test_a_row_tuned_on_the_stand_in_is_not_read_for_the_users_data():
    axes = dict(profile="tiny", model="vit_s", optimizer="adamw", method="lora", dataset="cifar100", shared_lr=1e-3)
    assert choose_rate("tuned", **axes).row is not None
    given = choose_rate("tuned", **axes, given_data=True)
    assert given.row is None and given.lr == 1e-3 and "--gradeff-data" in given.source


def test_a_self_tuned_record_is_the_same_experiment_as_the_one_a_resumed_session_plans():
    """Resume matches a self-tuned record: its experiment is the planned cell's, not the chosen rate's."""
    planned = RunConfig(profile="tiny", device="cpu")
    reported = replace(planned, lr=4e-3, lr_source="self-tuned: ...", self_tuned=True)
    assert experiment_inputs(REAL, reported) == experiment_inputs(REAL, planned)
    assert experiment_inputs(REAL, replace(planned, lr=4e-3)) != experiment_inputs(REAL, planned)


def test_the_record_says_self_tuned_never_tuned():
    from gradeff.cell.record import hparams_record

    config = RunConfig(profile="tiny", lr=4e-3, lr_source="self-tuned: ...", self_tuned=True)
    hparams = hparams_record(plan_cell(REAL, config).settings, config, None)
    assert hparams["protocol"] == SELF_TUNED and hparams["lr"] == 4e-3 and hparams["lr_source"].startswith(SELF_TUNED)
    plain = replace(config, self_tuned=False)
    assert hparams_record(plan_cell(REAL, plain).settings, plain, None)["protocol"] == "tuned"


def test_the_cache_file_is_checksummed_json(make_record, cache):
    _run(make_record, cache)
    [path] = (cache / "self-tuned").glob("*.json")
    payload = json.loads(path.read_text())
    assert payload["fingerprint"].startswith(path.stem) and sidecar(path).exists()


@pytest.mark.slow
def test_a_real_cell_on_given_data_tunes_itself_end_to_end(cache, monkeypatch):
    """The digits given as a local file: the tuned table's rows are not read, the cell searches (one epoch: every
    rate at the full epochs, no cheaper rung), no trial reads the test split, and the record says self-tuned."""
    import gradeff.cell.run as runner
    from gradeff.axes.data.builtin_data import builtin_path
    from gradeff.cell.run import run_cell

    path = builtin_path("digits", cache)
    heldout_reads = []
    real_evaluate = runner.CellEvaluation.after_epoch

    def watched(self, metering):
        heldout_reads.append(self.test is not None)
        return real_evaluate(self, metering)

    monkeypatch.setattr(runner.CellEvaluation, "after_epoch", watched)
    config = RunConfig(profile="tiny", device="cpu", cache_dir=str(cache), epochs=1,
                       data=(DataSource(key="digits", path=str(path)),))
    record = run_cell(REAL, config)
    assert record.status == "ok", record.detail
    assert record.hparams["protocol"] == SELF_TUNED and record.tuning["cached"] is False
    assert len(record.tuning["trials"]) >= BUDGET.points and {t["rung"] for t in record.tuning["trials"]} == {"full"}
    assert record.hparams["lr"] == record.tuning["chosen"]
    assert heldout_reads.count(True) == 1 and heldout_reads[-1]  # the reported run alone
    assert record.summary.final_heldout_accuracy is not None
