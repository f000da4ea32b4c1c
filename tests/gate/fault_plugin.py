"""A pytest plugin that injects one real regression into a grid run, for the gate to catch (or not).

    GRADEFF_FAULT=lr PYTHONPATH=tests/gate .venv/bin/python -m pytest benchmarks/test_grid.py -p fault_plugin ...

``GRADEFF_FAULT``:

* ``lr``: Adam's learning rate 1 % higher (every other optimizer untouched);
* ``accum``: under gradient accumulation, each micro-batch's gradient weighted 1 instead of its share of the
  step's targets (the k micro-batches' gradients summed, not averaged: k times the large-batch gradient), while the
  recorded loss stays right;
* ``checkpoint``: activation checkpointing switched off in the ``checkpoint`` strategy (its losses do not move:
  checkpointing repeats the gradients bit for bit; its memory does).

Unset or empty: the plugin changes nothing.
"""

from __future__ import annotations

import os

ENV = "GRADEFF_FAULT"
FAULTS = ("lr", "accum", "checkpoint")


def inject(fault: str) -> None:
    """Patch gradeff so that every cell built from now on carries ``fault``."""
    if fault not in FAULTS:
        raise ValueError(f"{ENV} must be one of {', '.join(FAULTS)}, got {fault!r}")
    import gradeff.cell.build as build

    if fault == "lr":
        build_one = build.build_optimizer

        def build_optimizer(key, params, lr, **overrides):
            return build_one(key, params, lr * 1.01 if key == "adam" else lr, **overrides)

        build.build_optimizer = build_optimizer
    elif fault == "accum":
        prepare_state = build.prepare_state

        def summed_micro_batches(*args, **kwargs):
            state = prepare_state(*args, **kwargs)
            if state.micro_batches_per_step > 1:
                _sum_gradients(state.optimizer, state.micro_batches_per_step)
            return state

        build.prepare_state = summed_micro_batches
    else:
        import gradeff.axes.strategies.prepare as prepare

        prepare.enable_checkpointing = lambda model: None


def _sum_gradients(optimizer, k: int) -> None:
    """Every closure the optimizer calls leaves k times the right gradients (scaled in place: no tensor is
    allocated, so the memory figures do not move)."""
    step = optimizer.step

    def summed_step(closure):
        def summed():
            loss = closure()
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    if parameter.grad is not None:
                        parameter.grad.mul_(k)
            return loss

        return step(summed)

    optimizer.step = summed_step


def pytest_configure(config) -> None:
    fault = os.environ.get(ENV, "")
    if fault:
        inject(fault)
