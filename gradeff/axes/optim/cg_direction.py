"""The search direction of nonlinear conjugate gradient (:class:`gradeff.axes.optim.cg.ConjugateGradient`): β by each
rule from an iteration's inner products, and the decision to restart to steepest descent (and why)."""

import math

import torch
from torch import Tensor

__all__ = ["next_direction"]

# Hager & Zhang (2005): lower bound of β_HZ, -1 / (||d|| min(η, ||g_prev||)).
_HZ_ETA = 0.01


def _beta(rule: str, g_sq: float, g_y: float, y_sq: float, d_y: float, d_g: float, d_sq: float,
          prev_sq: float) -> float | None:
    """β for ``rule`` from the iteration's inner products, or None when it is undefined.

    ``g`` is the new gradient, ``d`` the previous direction, ``y`` the gradient change along it
    and ``prev_sq`` the squared norm of the previous gradient; ``g_y`` is ``g·y``, ``d_g`` is
    ``d·g`` and so on.  Undefined means a zero (FR, PR+) or non-positive (HS, DY, HZ: no positive
    curvature along ``d``, impossible under a Wolfe search, common with fixed steps)
    denominator, or a non-finite value: CG must restart.
    """
    if rule == "fr":
        num, den = g_sq, prev_sq
    elif rule == "pr+":
        num, den = g_y, prev_sq
    elif rule == "hs":
        num, den = g_y, d_y
    elif rule == "dy":
        num, den = g_sq, d_y
    else:
        num, den = g_y - 2.0 * y_sq * d_g / d_y if d_y > 0.0 else math.nan, d_y
    if not den > 0.0:
        return None
    beta = num / den
    if not math.isfinite(beta):
        return None
    if rule == "pr+":
        # Gilbert & Nocedal (1992): clipping at 0 is what makes PR globally
        # convergent.
        beta = max(beta, 0.0)
    elif rule == "hz":
        # Hager & Zhang (2005), eq. (1.6)-(1.7): the truncation keeps global
        # convergence for general nonconvex f without clipping at 0.
        scale = math.sqrt(d_sq) * min(_HZ_ETA, math.sqrt(prev_sq))
        if scale > 0.0:
            beta = max(beta, -1.0 / scale)
    return beta


def next_direction(state: dict, group: dict, g: Tensor, numel: int) -> tuple[Tensor, str | None, float, float]:
    """New direction (reusing the stored buffer), the restart reason (None: CG), ``g·d``, ``g·g``.

    Every scalar the host needs is read in one transfer: each one makes the host wait for
    the device, and CG runs between forward/backward passes.  The buffer holding the
    previous gradient (or, after a strong-Wolfe search, the gradient change ``y``) holds
    ``y`` on return; the caller refreshes it.  ``numel`` (the number of scalar parameters) is the restart
    interval when the group sets none.
    """
    d = state.get("d")
    restart_every = group["restart_every"] or numel

    reason = beta = g_sq = None
    if d is None:
        reason = "first"
    elif state["since_restart"] >= restart_every:
        reason = "periodic"
    else:
        if "y" in state:
            y = state["y"]
        else:
            y = state["prev_flat_grad"].neg_().add_(g)
        g_sq, g_y, y_sq, d_y, d_g, d_sq = torch.stack(
            (g.dot(g), g.dot(y), y.dot(y), d.dot(y), d.dot(g), d.dot(d))
        ).tolist()
        if "y" in state:
            # Decided by the last search, on the two gradients of its own mini-batch.
            powell = state.get("powell", False)
        else:
            # g·g_prev = g·g - g·y.
            powell = abs(g_sq - g_y) >= group["powell_threshold"] * g_sq
        if group["powell_restart"] and powell:
            reason = "powell"
        else:
            beta = _beta(group["beta"], g_sq, g_y, y_sq, d_y, d_g, d_sq, state["g_sq"])
            if beta is None:
                reason = "undefined"
            elif beta == 0.0:
                # β = 0 (PR+ clipping) yields -g as well, so it counts as a restart.
                reason = "clipped"
            else:
                d.mul_(beta).sub_(g)
                gtd = float(g.dot(d))
                if gtd < 0.0:
                    return d, None, gtd, g_sq
                reason = "non_descent"
    d = g.neg() if d is None else d.copy_(g).neg_()
    if g_sq is None:
        g_sq = float(g.dot(g))
    return d, reason, -g_sq, g_sq
