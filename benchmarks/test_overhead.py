"""What measuring costs: the harness and its samplers against a bare PyTorch loop.

Three loops train copies of the same tiny decoder on the same batches, epoch by epoch in turn
(rotating the order every round) so that machine drift hits all three alike: a bare loop
(zero_grad, forward, backward, step), the harness without meters (closure step path, per-step
loss check, bookkeeping), and the harness with every meter on. The medians of the per-round time ratios are the overheads.
"""

import copy
import statistics
import time

import pytest
import torch

from gradeff.grid import Cell
from gradeff.hparams import hparams_for
from gradeff.loop import train_epoch, warm_up
from gradeff.metering import EpochMetering
from gradeff.runner import RunConfig, prepare_state

ROUNDS = 15
# Targets of the suite (harness ≤ 1.02 × bare, samplers ≤ 1 %) are reported; the asserts are
# looser guards so that a shared CI machine's noise does not fail the build, while a real
# regression (an extra sync or pass per step) still does.
HARNESS_GUARD = 1.15
SAMPLER_GUARD = 1.25


def _bare_epoch(model, optimizer, batches):
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()


def test_measurement_overhead(benchmark):
    """Epoch time ratios harness / bare and metered / harness, side by side in one run."""
    hp = hparams_for("llm", "tiny")
    config = RunConfig(profile="tiny", seed=0, device="cpu")
    harness = prepare_state(Cell("llm", "adam", "standard"), config, hp, torch.device("cpu"))
    metered = prepare_state(Cell("llm", "adam", "standard"), config, hp, torch.device("cpu"))
    bare_model = copy.deepcopy(harness.model)
    bare_optimizer = torch.optim.Adam(bare_model.parameters(), lr=hp.lr)
    for state in (harness, metered):
        warm_up(state)
        # Rounds repeat epoch 0's order so every loop sees identical batches each round.
        state.step_groups = lambda epoch, s=state, groups=state.step_groups(0): groups
    batches = [harness.dataset.batch(group[0]) for group in harness.step_groups(0)]
    metering = EpochMetering(device=torch.device("cpu"))
    times = {"bare": [], "harness": [], "metered": []}

    loops = [("bare", lambda: _bare_epoch(bare_model, bare_optimizer, batches)),
             ("harness", lambda: train_epoch(harness)),
             ("metered", lambda: metering.run(lambda: train_epoch(metered)))]

    def one_round():
        # Rotating the order each round spreads any first-or-last-in-the-round effect over all
        # three loops instead of charging it to one of them.
        shift = len(times["bare"]) % len(loops)
        for name, run in loops[shift:] + loops[:shift]:
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)

    benchmark.group = "overhead"
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    median = {name: statistics.median(values[-ROUNDS:]) for name, values in times.items()}
    # Ratios within a round, then their median: a slow moment of the machine hits all three
    # loops of that round and cancels out of the ratio.
    harness_ratio = statistics.median(h / b for h, b in zip(times["harness"][-ROUNDS:], times["bare"][-ROUNDS:]))
    sampler_ratio = statistics.median(m / h for m, h in zip(times["metered"][-ROUNDS:], times["harness"][-ROUNDS:]))
    benchmark.extra_info.update(median_seconds=median, harness_over_bare=harness_ratio,
                                metered_over_harness=sampler_ratio)
    print(f"\noverhead: bare {median['bare'] * 1e3:.1f} ms, harness {median['harness'] * 1e3:.1f} ms "
          f"({harness_ratio:.3f}×), metered {median['metered'] * 1e3:.1f} ms ({sampler_ratio:.3f}× harness)")
    assert harness_ratio < HARNESS_GUARD
    assert sampler_ratio < SAMPLER_GUARD


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-s"]))
