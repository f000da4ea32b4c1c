"""The optimizer axis: OPTIMIZERS registry and ``build_optimizer``.

Every optimizer is stepped the same way, ``optimizer.step(closure)``; the spec's flags say what
else the harness needs to know about it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradeff.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["OPTIMIZERS", "OptimizerSpec", "build_optimizer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerSpec:
    """One optimizer of the grid.

    Attributes:
        key: registry key ("adam"); also what ``-k``/``-m cell(optimizer=...)`` selects.
        name: human-readable name.
        target: ``"module:Class"`` of the ``torch.optim.Optimizer``; imported only when built.
        kwargs: fixed constructor arguments beside ``lr`` (torch defaults otherwise).
        state_per_param: optimizer-state tensors per parameter, each the parameter's size
            (the memory law the meters check: Adam keeps m and v → 2).
    """

    key: str
    name: str
    target: str
    kwargs: dict = field(default_factory=dict)
    state_per_param: int = 0


OPTIMIZERS: Registry[OptimizerSpec] = Registry(
    "optimizer",
    (
        # Plain SGD without momentum, as in the paper's baseline: no state at all.
        OptimizerSpec(key="sgd", name="SGD", target="torch.optim:SGD"),
        OptimizerSpec(key="adam", name="Adam", target="torch.optim:Adam", state_per_param=2),
        OptimizerSpec(key="adamw", name="AdamW", target="torch.optim:AdamW", kwargs={"weight_decay": 0.01},
                      state_per_param=2),
        OptimizerSpec(key="adagrad", name="Adagrad", target="torch.optim:Adagrad", state_per_param=1),
        OptimizerSpec(key="adadelta", name="Adadelta", target="torch.optim:Adadelta", state_per_param=2),
        # Nonlinear CG on mini-batches: Polak-Ribière+ directions, a fixed step along them
        # (a line search on a noisy mini-batch loss buys little for several extra passes), and
        # restarts that keep every direction a descent direction. It keeps the previous
        # gradient and direction: 2 × parameter bytes.
        OptimizerSpec(key="cgd", name="Conjugate Gradient", target="gradeff.optim.cg:ConjugateGradient",
                      kwargs={"beta": "pr+", "line_search": "fixed"}, state_per_param=2),
    ),
)


def build_optimizer(key: str, params: Iterable[torch.nn.Parameter], lr: float, **overrides) -> torch.optim.Optimizer:
    """Instantiate the optimizer ``key`` over ``params`` with learning rate ``lr``.

    Args:
        key: optimizer key (see ``OPTIMIZERS``).
        params: the trainable parameters.
        lr: learning rate (the cell's, shared by all optimizers of a model).
        **overrides: constructor arguments that replace the spec's.

    Returns:
        The optimizer.
    """
    spec = OPTIMIZERS[key]
    module_name, _, class_name = spec.target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(params, lr=lr, **(spec.kwargs | overrides))
