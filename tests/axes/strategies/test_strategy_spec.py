"""What a strategy spec says about the model it trains."""

from gradeff.axes.strategies import STRATEGIES, StrategySpec


def test_only_strategies_that_move_or_recompute_exact_values_train_as_standard():
    """Checkpointing, offload and the adaptive budget train the standard cell's model bit for bit; accumulation,
    sharding and the compiler compute other sums, so a strategy that adds any of them does not."""
    same = {key for key in STRATEGIES if STRATEGIES[key].trains_as_standard}
    assert same == {"checkpoint", "offload", "budget", "budget80", "budget60", "budget40", "budget20"}
    assert not STRATEGIES["standard"].trains_as_standard  # it is the standard
    for other in ({"accumulate": True}, {"budget": "compiler"}):
        assert not StrategySpec(key="x", name="x", checkpointing=True, **other).trains_as_standard
