"""The torch optimizers of the grid against their textbook update rules.

References are written element by element in plain Python floats, so they
share no code with torch.  Two steps are taken with different gradients: the
first checks the update from a fresh state, the second the state recurrence
(bias correction, accumulators, lr decay).
"""

import math

import pytest
import torch

from gradeff.axes.optim import build_optimizer

P0 = [0.5, -1.0, 2.0]
GRADS = [[0.1, -0.3, 0.2], [-0.05, 0.4, 0.25]]


def sgd(p, g, state, *, lr, weight_decay=0.0):
    return [pi - lr * (gi + weight_decay * pi) for pi, gi in zip(p, g)]


def adam(p, g, state, *, lr, betas, eps, weight_decay=0.0, decoupled=False):
    b1, b2 = betas
    t = state["t"] = state.get("t", 0) + 1
    m = state.setdefault("m", [0.0] * len(p))
    v = state.setdefault("v", [0.0] * len(p))
    out = []
    for i, (pi, gi) in enumerate(zip(p, g)):
        if decoupled:
            pi = pi * (1 - lr * weight_decay)
        else:
            gi = gi + weight_decay * pi
        m[i] = b1 * m[i] + (1 - b1) * gi
        v[i] = b2 * v[i] + (1 - b2) * gi * gi
        m_hat = m[i] / (1 - b1**t)
        v_hat = v[i] / (1 - b2**t)
        out.append(pi - lr * m_hat / (math.sqrt(v_hat) + eps))
    return out


def adagrad(p, g, state, *, lr, lr_decay, weight_decay, initial_accumulator_value, eps):
    t = state["t"] = state.get("t", 0) + 1
    s = state.setdefault("sum", [initial_accumulator_value] * len(p))
    clr = lr / (1 + (t - 1) * lr_decay)
    out = []
    for i, (pi, gi) in enumerate(zip(p, g)):
        gi = gi + weight_decay * pi
        s[i] += gi * gi
        out.append(pi - clr * gi / (math.sqrt(s[i]) + eps))
    return out


def adadelta(p, g, state, *, lr, rho, eps, weight_decay):
    sq = state.setdefault("square_avg", [0.0] * len(p))
    acc = state.setdefault("acc_delta", [0.0] * len(p))
    out = []
    for i, (pi, gi) in enumerate(zip(p, g)):
        gi = gi + weight_decay * pi
        sq[i] = rho * sq[i] + (1 - rho) * gi * gi
        delta = math.sqrt(acc[i] + eps) / math.sqrt(sq[i] + eps) * gi
        acc[i] = rho * acc[i] + (1 - rho) * delta * delta
        out.append(pi - lr * delta)
    return out


def grid(key, lr):
    """The optimizer exactly as the grid builds it (registry kwargs included)."""
    return lambda params: build_optimizer(key, params, lr)


def torch_optimizer(cls, **kwargs):
    return lambda params: cls(params, **kwargs)


# (builder, reference, reference hyperparameters).  The "grid" cases pin the registry's
# settings on top of torch's documented defaults; the others use values large enough that
# every term of the rule moves the result (eps, weight decay, lr decay, initial accumulator).
CASES = {
    "sgd-grid": (grid("sgd", 0.1), sgd, {"lr": 0.1}),
    "sgd-weight_decay": (torch_optimizer(torch.optim.SGD, lr=0.1, weight_decay=0.3), sgd,
                         {"lr": 0.1, "weight_decay": 0.3}),
    "adam-grid": (grid("adam", 1e-3), adam, {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}),
    "adam-all-terms": (torch_optimizer(torch.optim.Adam, lr=0.1, betas=(0.8, 0.9), eps=0.05, weight_decay=0.3),
                       adam, {"lr": 0.1, "betas": (0.8, 0.9), "eps": 0.05, "weight_decay": 0.3}),
    "adamw-grid": (grid("adamw", 1e-3), adam,
                   {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "decoupled": True}),
    "adamw-all-terms": (torch_optimizer(torch.optim.AdamW, lr=0.1, betas=(0.8, 0.9), eps=0.05, weight_decay=0.3),
                        adam, {"lr": 0.1, "betas": (0.8, 0.9), "eps": 0.05, "weight_decay": 0.3,
                               "decoupled": True}),
    "adagrad-grid": (grid("adagrad", 1e-2), adagrad,
                     {"lr": 1e-2, "lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0,
                      "eps": 1e-10}),
    "adagrad-all-terms": (torch_optimizer(torch.optim.Adagrad, lr=0.1, lr_decay=0.5, weight_decay=0.3,
                                          initial_accumulator_value=0.2, eps=0.05),
                          adagrad, {"lr": 0.1, "lr_decay": 0.5, "weight_decay": 0.3,
                                    "initial_accumulator_value": 0.2, "eps": 0.05}),
    "adadelta-grid": (grid("adadelta", 1.0), adadelta, {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 0.0}),
    "adadelta-all-terms": (torch_optimizer(torch.optim.Adadelta, lr=0.5, rho=0.7, eps=0.05, weight_decay=0.3),
                           adadelta, {"lr": 0.5, "rho": 0.7, "eps": 0.05, "weight_decay": 0.3}),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_step_matches_textbook_update(case):
    """Each optimizer's step equals its textbook update written out by hand."""
    build, reference, ref_kwargs = CASES[case]
    param = torch.tensor(P0, dtype=torch.float64, requires_grad=True)
    opt = build([param])
    expected, ref_state = list(P0), {}
    for grad in GRADS:
        param.grad = torch.tensor(grad, dtype=torch.float64)
        opt.step()
        expected = reference(expected, grad, ref_state, **ref_kwargs)
        torch.testing.assert_close(
            param.detach(), torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-15
        )
