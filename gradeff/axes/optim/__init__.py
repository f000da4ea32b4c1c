"""The optimizer axis: OPTIMIZERS registry and ``build_optimizer``.

Every optimizer is stepped the same way, ``optimizer.step(closure)``; the spec's flags say what
else the harness needs to know about it, and its state law says how many bytes of state it keeps
(what :func:`gradeff.meters.optimizer_state_bytes` measures after a step).

May import: :mod:`gradeff.specs`, :mod:`gradeff.meters` and the other axes (never in a cycle).
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradeff.specs.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["OPTIMIZERS", "STATE_LAWS", "OptimizerSpec", "build_optimizer", "optimizer_kernel"]

# bitsandbytes' blockwise 8-bit state: 256 values share one float32 scale (absmax), and each
# state is decoded through a 256-entry float32 quantisation map. Tensors with fewer elements
# than ``min_8bit_size`` (its default: 4096) keep 32-bit state instead.
BNB_BLOCK_SIZE = 256
BNB_QMAP_ENTRIES = 256
BNB_MIN_8BIT_SIZE = 4096


# What build_optimizer passes every optimizer itself: a spec's kwargs may not name them.
_CELL_ARGUMENTS = ("params", "lr", "fused", "foreach")


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerSpec:
    """One optimizer of the grid.

    Attributes:
        key: registry key ("adam"); also what ``-k``/``-m cell(optimizer=...)`` selects.
        name: human-readable name.
        target: ``"module:Class"`` of the ``torch.optim.Optimizer``; imported only when built.
        kwargs: fixed constructor arguments beside ``lr`` (the class's defaults otherwise); not ``params``,
            ``lr``, ``fused`` or ``foreach``, which the cell sets (an optimizer's own rate is its ``lr_centre``, where
            a search starts, or a row of the tuned table; without one the cell tunes itself).
        state_law: name of its memory law in :data:`STATE_LAWS`; :meth:`state_bytes` applies it.
        state_per_param: for the ``"dense"`` law, the optimizer-state tensors per parameter, each
            the parameter's size (Adam keeps m and v → 2); ``None`` for the other laws, whose state
            is not a whole number of parameter-sized tensors.
        step_counter: for the ``"dense"`` law, whether it also keeps a scalar ``step`` tensor per
            parameter (torch's Adam, AdamW, Adagrad and Adadelta do; SGD and CG do not).
        scalars_per_param: for the ``"dense"`` law, further scalar tensors per parameter besides the step, each of
            torch's scalar dtype (torch's NAdam keeps ``mu_product``: 1; RAdam none).
        tuning_free: why the learning rate is no knob of this optimizer (``""``: it is one). A rate search
            skips such an optimizer and its records say why, instead of reporting trials that differ only by
            noise as a search.
        lr_centre: the centre of its learning-rate search (``--gradeff-tune lr``, ``scripts/tune_rates.py``): the
            rate its authors or the usual practice start from; ``None``: the cell's own rate (the model's).
    """

    key: str
    name: str
    target: str
    kwargs: dict = field(default_factory=dict)
    state_law: str = "dense"
    state_per_param: int | None = 0
    step_counter: bool = False
    scalars_per_param: int = 0
    tuning_free: str = ""
    lr_centre: float | None = None

    def __post_init__(self) -> None:
        taken = sorted(set(self.kwargs) & set(_CELL_ARGUMENTS))
        if taken:
            raise ValueError(f"optimizer {self.key!r}: kwargs {taken} are the cell's to set (it passes "
                             f"{', '.join(_CELL_ARGUMENTS)}); give the optimizer's own rate as lr_centre=..., where "
                             "its search starts")
        if self.lr_centre is not None and not self.lr_centre > 0:
            raise ValueError(f"optimizer {self.key!r}: lr_centre must be > 0, got {self.lr_centre}")
        if self.state_law not in STATE_LAWS:
            raise ValueError(f"optimizer {self.key!r}: unknown state law {self.state_law!r}; "
                             f"known: {', '.join(STATE_LAWS)}")
        if self.scalars_per_param < 0 or (self.scalars_per_param and self.state_law != "dense"):
            raise ValueError(f"optimizer {self.key!r}: scalars_per_param is a count >= 0 of the 'dense' law")
        if (self.state_law == "dense") != isinstance(self.state_per_param, int):
            raise ValueError(f"optimizer {self.key!r}: state_per_param is an integer for the 'dense' law "
                             f"and None for the others")

    def state_bytes(self, params: Iterable[torch.Tensor]) -> int:
        """Predicted bytes of this optimizer's state once it has stepped ``params``.

        The figure is what :func:`gradeff.meters.optimizer_state_bytes` measures after a step:
        every state tensor, scalar step counters included, a tensor shared by several parameters
        (bitsandbytes' quantisation maps) once; Python numbers count zero.

        Args:
            params: the trainable parameters, each of which receives a gradient (torch creates
                state lazily, only for parameters with a gradient; Adagrad, which allocates at
                construction, and CG, which flattens every parameter, hold state for all of them
                anyway). Only their shapes and dtypes are read, so meta tensors do as well.

        Returns:
            The bytes, exact for every optimizer of the registry as built by
            :func:`build_optimizer` with the spec's own arguments.
        """
        return STATE_LAWS[self.state_law](self, list(params))


def _nbytes(p: torch.Tensor) -> int:
    return p.numel() * p.element_size()


def _step_counter_bytes() -> int:
    """Bytes of torch's scalar ``step`` tensor: float32, or float64 when that is the default dtype."""
    import torch

    return 8 if torch.get_default_dtype() == torch.float64 else 4


def _dense_law(spec: OptimizerSpec, params: Sequence[torch.Tensor]) -> int:
    """``state_per_param`` tensors of each parameter's size and dtype (+ a scalar step each if kept, + its other
    scalars).

    bytes = k · Σ numel(p)·elsize(p) + ([step_counter] + scalars_per_param) · s · #params, s = 4 (float32 scalars).
    """
    counter = _step_counter_bytes() * (int(spec.step_counter) + spec.scalars_per_param)
    return sum(spec.state_per_param * _nbytes(p) + counter for p in params)


def _adafactor_law(spec: OptimizerSpec, params: Sequence[torch.Tensor]) -> int:
    """torch.optim.Adafactor: a factored second moment and a scalar step, no first moment.

    A parameter of shape (..., m, n) (two or more dims) keeps ``row_var`` of shape (..., m, 1)
    and ``col_var`` of shape (..., 1, n): numel/n + numel/m values, m + n for a matrix. A vector
    (or a scalar) keeps ``variance`` of its own size. Both in the parameter's dtype (they are
    made from its gradient), plus the float32 step:

        bytes = Σ_p [ s + elsize(p) · (numel/n + numel/m  if dim ≥ 2 else numel) ].
    """
    counter = _step_counter_bytes()
    total = 0
    for p in params:
        shape = tuple(p.shape)
        if len(shape) >= 2:
            lead = math.prod(shape[:-2])
            values = lead * shape[-2] + lead * shape[-1]
        else:
            values = p.numel()
        total += counter + values * p.element_size()
    return total


def _blockwise_8bit_law(spec: OptimizerSpec, params: Sequence[torch.Tensor]) -> int:
    """bitsandbytes' 8-bit two-state optimizers (AdamW8bit): m and v quantised blockwise.

    A parameter of n ≥ ``min_8bit_size`` elements keeps m and v as uint8 (n bytes each) and one
    float32 absmax per block of 256 for each: 2n + 2·4·⌈n/256⌉ bytes (≈ 2.03 bytes a value).
    A smaller one keeps m and v in float32, whatever its dtype: 2·4·n bytes. The two 256-entry
    float32 quantisation maps (signed for m, unsigned for v) are shared by every quantised
    tensor: 2·256·4 = 2048 bytes, once, if any tensor is quantised. The step is a Python int
    (0 bytes).
    """
    min_8bit = spec.kwargs.get("min_8bit_size", BNB_MIN_8BIT_SIZE)
    total = 0
    quantised = False
    for p in params:
        n = p.numel()
        if n < min_8bit:
            total += 2 * 4 * n
        else:
            quantised = True
            total += 2 * n + 2 * 4 * math.ceil(n / BNB_BLOCK_SIZE)
    return total + (2 * 4 * BNB_QMAP_ENTRIES if quantised else 0)


# Name -> law(spec, params) -> bytes. A spec names its law, so specs stay plain data.
STATE_LAWS: dict[str, Callable[[OptimizerSpec, Sequence[torch.Tensor]], int]] = {
    "dense": _dense_law,
    "adafactor": _adafactor_law,
    "blockwise_8bit": _blockwise_8bit_law,
}


OPTIMIZERS: Registry[OptimizerSpec] = Registry(
    "optimizer",
    (
        # The main paper's six come first; grids list their own keys (gradeff.studies.grid).
        # Plain SGD without momentum, as in the paper's baseline: no state at all.
        OptimizerSpec(key="sgd", name="SGD", target="torch.optim:SGD", lr_centre=1e-1),
        OptimizerSpec(key="adam", name="Adam", target="torch.optim:Adam", state_per_param=2, step_counter=True,
                      lr_centre=1e-3),
        OptimizerSpec(key="adamw", name="AdamW", target="torch.optim:AdamW", kwargs={"weight_decay": 0.01},
                      state_per_param=2, step_counter=True, lr_centre=1e-3),
        OptimizerSpec(key="adagrad", name="Adagrad", target="torch.optim:Adagrad", state_per_param=1,
                      step_counter=True, lr_centre=1e-2),
        OptimizerSpec(key="adadelta", name="Adadelta", target="torch.optim:Adadelta", state_per_param=2,
                      step_counter=True, lr_centre=1.0),
        # Nonlinear CG on mini-batches, as CG_DESCENT (Hager & Zhang 2005): Hager-Zhang directions,
        # descent whatever the step, so no Powell restarts; a strong-Wolfe search on the step's own
        # mini-batch with sigma = 0.9, whose first trial usually passes (about 2 closure calls a
        # step); the curvature pair y from that mini-batch's two gradients. The cell's lr only
        # scales the first trial step. A fixed step instead (line_search="fixed") makes CG
        # steepest descent on mini-batches: see gradeff.axes.optim.cg. It keeps the previous
        # direction and y: 2 × parameter bytes. The search brackets away whatever first step lr
        # gives (tiny llm, 3 epochs: final losses within 0.1 % from lr 1e-3 to 10 on Markov text,
        # within 1.1 % on the topic text that replaced it, the same steps from 1e-2 to 10), so it has
        # no rate to tune.
        OptimizerSpec(key="cgd", name="Conjugate Gradient", target="gradeff.axes.optim.cg:ConjugateGradient",
                      kwargs={"beta": "hz", "line_search": "strong_wolfe", "c2": 0.9, "powell_restart": False},
                      state_per_param=2,
                      tuning_free="its strong-Wolfe line search sizes every step; lr only scales the first "
                                  "trial step, which the search's bracketing corrects"),
        # The memory-saving optimizers practitioners reach for.
        # Adafactor: the second moment of a matrix factored into a row and a column vector,
        # no first moment: (m + n) values for an m × n weight instead of Adam's 2mn.
        OptimizerSpec(key="adafactor", name="Adafactor", target="torch.optim:Adafactor",
                      state_law="adafactor", state_per_param=None, lr_centre=1e-2),
        # AdamW with m and v quantised to 8 bits in blocks of 256 (bitsandbytes): ≈ 2 bytes a value
        # instead of 8; tensors under min_8bit_size elements stay in 32 bits.
        OptimizerSpec(key="adamw8bit", name="AdamW (8-bit)", target="bitsandbytes.optim:AdamW8bit",
                      kwargs={"weight_decay": 0.01, "min_8bit_size": BNB_MIN_8BIT_SIZE},
                      state_law="blockwise_8bit", state_per_param=None, lr_centre=1e-3),
        # SGD with heavy-ball momentum: one momentum buffer per parameter.
        OptimizerSpec(key="sgdm", name="SGD with momentum", target="torch.optim:SGD", kwargs={"momentum": 0.9},
                      state_per_param=1, lr_centre=3e-2),
    ),
)


def build_optimizer(key: str, params: Iterable[torch.nn.Parameter], lr: float, *, fused: bool = False,
                    **overrides) -> torch.optim.Optimizer:
    """Instantiate the optimizer ``key`` over ``params`` with learning rate ``lr``.

    Args:
        key: optimizer key (see ``OPTIMIZERS``).
        params: the trainable parameters.
        lr: learning rate (the cell's, shared by all optimizers of a model).
        fused: use the class's fused kernel (``fused=True``: one kernel a step over every parameter) where it has
            one and the parameters' device supports it, else its multi-tensor path (``foreach=True``) where it
            has that; a class with neither (CG, 8-bit AdamW) is built as it is. ``False``: torch's own choice.
        **overrides: constructor arguments that replace the spec's (the spec's state law
            assumes its own arguments).

    Returns:
        The optimizer.
    """
    spec = OPTIMIZERS[key]
    module_name, _, class_name = spec.target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    arguments = spec.kwargs | overrides
    if not fused:
        return cls(params, lr=lr, **arguments)
    params = list(params)
    accepted = inspect.signature(cls.__init__).parameters
    if "fused" in accepted:
        try:
            return cls(params, lr=lr, **arguments | {"fused": True})
        except RuntimeError:  # torch has no fused kernel for these parameters' device or dtype
            pass
    if "foreach" in accepted:
        return cls(params, lr=lr, **arguments | {"foreach": True})
    return cls(params, lr=lr, **arguments)


def optimizer_kernel(optimizer: torch.optim.Optimizer | None) -> str | None:
    """Which implementation ``optimizer`` steps with: ``fused``, ``foreach`` (multi-tensor), or ``default`` (torch
    decides at each step: per-parameter loops on a CPU, multi-tensor on a GPU; or a class with no choice);
    ``None`` without an optimizer."""
    if optimizer is None:
        return None
    defaults = optimizer.defaults
    return "fused" if defaults.get("fused") else "foreach" if defaults.get("foreach") else "default"
