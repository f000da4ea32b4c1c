"""Nonlinear conjugate gradient optimizer with selectable β rule and line search."""

import math

import torch
from torch import Tensor

# torch's own strong-Wolfe search (Nocedal & Wright Alg. 3.5/3.6, cubic zoom)
# already takes c1/c2/max_ls as arguments, so it is reused instead of copied.
from torch.optim.lbfgs import _strong_wolfe
from torch.optim.optimizer import Optimizer, ParamsT


__all__ = ["ConjugateGradient", "BETA_RULES", "LINE_SEARCHES"]

BETA_RULES = ("fr", "pr+", "hs", "dy")
LINE_SEARCHES = ("strong_wolfe", "exact", "fixed")

# Powell (1977): once consecutive gradients are this far from orthogonal the
# directions have lost conjugacy and steepest descent is the better restart.
_POWELL_THRESHOLD = 0.2


def _beta(rule: str, g: Tensor, g_prev: Tensor, d_prev: Tensor, g_sq: float, prev_sq: float) -> float | None:
    """β for ``rule``, or None when the rule is undefined and CG must restart.

    ``g_sq`` and ``prev_sq`` are ``g·g`` and ``g_prev·g_prev``, already on the host. ``g_prev``
    is overwritten with ``y = g - g_prev``: the caller refreshes that buffer right afterwards,
    and reusing it avoids a transient parameter-sized allocation on every iteration.
    """
    if rule == "fr":
        num, den = g_sq, prev_sq
    else:
        y = g_prev.neg_().add_(g)
        if rule == "pr+":
            num, den = float(g.dot(y)), prev_sq
        elif rule == "hs":
            num, den = torch.stack((g.dot(y), d_prev.dot(y))).tolist()
        else:
            num, den = g_sq, float(d_prev.dot(y))
    # FR/PR+: the previous gradient was zero.  HS/DY: no positive curvature
    # along d_prev (impossible under a Wolfe search, common with fixed steps).
    if not den > 0.0:
        return None
    beta = num / den
    if not math.isfinite(beta):
        return None
    if rule == "pr+":
        # Gilbert & Nocedal (1992): clipping at 0 is what makes PR globally
        # convergent.
        beta = max(beta, 0.0)
    return beta


def _is_positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class ConjugateGradient(Optimizer):
    r"""Nonlinear conjugate gradient (Nocedal & Wright, ch. 5.2).

    With :math:`g_k = \nabla f(x_k)` and :math:`y_k = g_k - g_{k-1}`:

    .. math::
        d_k = -g_k + \beta_k d_{k-1}, \qquad x_{k+1} = x_k + t_k d_k

    where :math:`t_k` comes from the line search and :math:`\beta_k` is

    * ``"fr"`` Fletcher–Reeves: :math:`g_k^\top g_k / g_{k-1}^\top g_{k-1}`
    * ``"pr+"`` Polak–Ribière+: :math:`\max(0, g_k^\top y_k / g_{k-1}^\top g_{k-1})`
    * ``"hs"`` Hestenes–Stiefel: :math:`g_k^\top y_k / d_{k-1}^\top y_k`
    * ``"dy"`` Dai–Yuan: :math:`g_k^\top g_k / d_{k-1}^\top y_k`

    On a strictly convex quadratic with exact line searches all four rules
    coincide with linear CG and reach the minimiser in at most ``n`` iterations.

    The direction restarts to :math:`-g_k` (steepest descent) on the first
    iteration, every ``restart_every`` iterations, when Powell's test
    :math:`|g_k^\top g_{k-1}| \ge 0.2\,\|g_k\|^2` fires (``powell_restart``),
    when β is undefined (zero denominator), and whenever :math:`d_k` is not a
    descent direction (:math:`g_k^\top d_k \ge 0`).

    Line searches (closure calls = forward+backward passes):

    * ``"strong_wolfe"``: bracketing + cubic-interpolation zoom (N&W Alg.
      3.5/3.6) with constants ``c1``, ``c2``.  Iterations cost a variable
      number of calls, from 1 to ``max_ls + 1``.
    * ``"exact"``: one trial point :math:`x + s d` and the secant root of the
      directional derivative, :math:`t = s\, g_0^\top d / (g_0^\top d - g_s^\top d)`,
      which is the exact minimiser for quadratics.  Exactly 2 calls per
      iteration; if the secant curvature is not positive (non-convex along
      ``d``) the trial point is kept and the iteration costs 1 call.
    * ``"fixed"``: :math:`t_k = \text{lr}`, for the stochastic / mini-batch
      setting.  1 call per iteration.

    Counted per :meth:`step`: one call at the start, then the line search's
    calls; ``"exact"`` and ``"fixed"`` skip evaluating the point reached by the
    last iteration because the next :meth:`step` evaluates it anyway, so a
    step costs exactly ``2 * max_iter`` (exact) or ``max_iter`` (fixed) calls
    unless it terminates early.  With ``"strong_wolfe"`` the call opening a
    step repeats the last evaluation of the previous step, as in LBFGS; that is
    what lets the closure switch mini-batches between steps.
    ``state["func_evals"]`` holds the running total.

    The initial trial step of the line searches is ``lr * min(1, 1/||g||_1)``
    on the first iteration and :math:`t_{k-1} g_{k-1}^\top d_{k-1} / g_k^\top d_k`
    (N&W eq. 3.60) afterwards, since CG directions carry no natural scale.

    .. warning::
        Like :class:`torch.optim.LBFGS`, only one parameter group is
        supported and all parameters must live on one device.

    .. note::
        Memory: the persistent state is the previous gradient and the previous
        direction, about ``2 * param_bytes``.  Each :meth:`step` additionally
        gathers a flat gradient (``param_bytes``); the strong-Wolfe search also
        keeps a copy of the parameters plus a few gradient-sized buffers while
        it runs.

    Args:
        params (iterable): parameters to optimize (real-valued).
        lr (float, optional): step length of ``"fixed"``; scale of the first
            trial step of the line searches (default: 1).
        beta (str, optional): one of :data:`BETA_RULES` (default: ``"pr+"``).
        line_search (str, optional): one of :data:`LINE_SEARCHES`
            (default: ``"strong_wolfe"``).
        max_iter (int, optional): iterations per :meth:`step` (default: 1).
        restart_every (int, optional): periodic restart interval in iterations
            (default: number of scalar parameters).
        powell_restart (bool, optional): apply Powell's restart test
            (default: True).
        c1 (float, optional): sufficient-decrease constant (default: 1e-4).
        c2 (float, optional): curvature constant; CG needs it small, with
            ``c2 < 1/2`` required by FR's convergence theory (default: 0.1).
        max_ls (int, optional): maximal closure calls per strong-Wolfe search
            (default: 25).
        tolerance_grad (float, optional): stop when ``max|g| <= tolerance_grad``
            (default: 1e-10).
        tolerance_change (float, optional): stop when the update
            ``t * max|d|`` is at most this.  Changes of the loss are
            deliberately not tested: near a minimum they fall below rounding
            while the gradient still carries information (default: 1e-12).
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1.0,
        beta: str = "pr+",
        line_search: str = "strong_wolfe",
        max_iter: int = 1,
        restart_every: int | None = None,
        powell_restart: bool = True,
        c1: float = 1e-4,
        c2: float = 0.1,
        max_ls: int = 25,
        tolerance_grad: float = 1e-10,
        tolerance_change: float = 1e-12,
    ) -> None:
        if not lr > 0.0:
            raise ValueError(f"Invalid lr (learning rate): {lr} (must be > 0)")
        if beta not in BETA_RULES:
            raise ValueError(
                f"Invalid beta rule {beta!r}; expected one of {', '.join(BETA_RULES)}"
            )
        if line_search not in LINE_SEARCHES:
            raise ValueError(
                f"Invalid line_search {line_search!r}; "
                f"expected one of {', '.join(LINE_SEARCHES)}"
            )
        if not _is_positive_int(max_iter):
            raise ValueError(f"Invalid max_iter: {max_iter} (must be an int >= 1)")
        if restart_every is not None and not _is_positive_int(restart_every):
            raise ValueError(
                f"Invalid restart_every: {restart_every} (must be None or an int >= 1)"
            )
        if not 0.0 < c1 < c2 < 1.0:
            raise ValueError(f"Invalid c1={c1}, c2={c2} (need 0 < c1 < c2 < 1)")
        if not _is_positive_int(max_ls):
            raise ValueError(f"Invalid max_ls: {max_ls} (must be an int >= 1)")
        if not tolerance_grad >= 0.0:
            raise ValueError(f"Invalid tolerance_grad: {tolerance_grad} (must be >= 0)")
        if not tolerance_change >= 0.0:
            raise ValueError(
                f"Invalid tolerance_change: {tolerance_change} (must be >= 0)"
            )
        defaults = {
            "lr": lr,
            "beta": beta,
            "line_search": line_search,
            "max_iter": max_iter,
            "restart_every": restart_every,
            "powell_restart": powell_restart,
            "c1": c1,
            "c2": c2,
            "max_ls": max_ls,
            "tolerance_grad": tolerance_grad,
            "tolerance_change": tolerance_change,
        }
        super().__init__(params, defaults)

        self._params = self.param_groups[0]["params"]
        if any(torch.is_complex(p) for p in self._params):
            raise ValueError("ConjugateGradient does not support complex parameters")
        self._numel = sum(p.numel() for p in self._params)

    def add_param_group(self, param_group: dict) -> None:
        # The CG recurrence spans all parameters at once, so per-group
        # hyperparameters would be meaningless.
        if self.param_groups:
            raise ValueError(
                "ConjugateGradient doesn't support per-parameter options "
                "(parameter groups)"
            )
        super().add_param_group(param_group)

    def _gather_flat_grad(self) -> Tensor:
        views = []
        for p in self._params:
            if p.grad is None:
                views.append(p.new_zeros(p.numel()))
            elif p.grad.is_sparse:
                views.append(p.grad.to_dense().view(-1))
            else:
                views.append(p.grad.reshape(-1))
        return torch.cat(views, 0)

    def _add_dir(self, step_size: float, d: Tensor) -> None:
        offset = 0
        for p in self._params:
            numel = p.numel()
            p.add_(d[offset : offset + numel].view_as(p), alpha=step_size)
            offset += numel

    def _evaluate(self, closure) -> tuple[Tensor, Tensor]:
        # The loss stays a tensor: only the strong-Wolfe search reads its value, and reading
        # it would make the host wait for the device.
        return closure(), self._gather_flat_grad()

    def _directional_evaluate(self, closure, x, t, d):
        # Restores from a copy rather than stepping back by -t*d, so a long
        # search does not accumulate rounding drift in the parameters.
        self._add_dir(float(t), d)
        loss, flat_grad = self._evaluate(closure)
        for p, pdata in zip(self._params, x, strict=True):
            p.copy_(pdata)
        return float(loss), flat_grad

    def _direction(self, state, group, g: Tensor) -> tuple[Tensor, bool, float]:
        """New direction (reusing the stored buffer), whether CG restarted, and ``g·d``.

        Every scalar the host needs is read in as few transfers as possible: each one makes
        the host wait for the device, and CG runs between forward/backward passes.
        """
        d = state.get("d")
        g_prev = state.get("prev_flat_grad")
        restart_every = group["restart_every"] or self._numel

        beta = None
        if d is not None and state["since_restart"] < restart_every:
            g_sq, g_gprev, prev_sq = torch.stack((g.dot(g), g.dot(g_prev), g_prev.dot(g_prev))).tolist()
            powell = group["powell_restart"] and abs(g_gprev) >= _POWELL_THRESHOLD * g_sq
            if not powell:
                beta = _beta(group["beta"], g, g_prev, d, g_sq, prev_sq)

        # β = 0 (PR+ clipping) yields -g as well, so it counts as a restart.
        if beta:
            d.mul_(beta).sub_(g)
            gtd = float(g.dot(d))
            if gtd < 0.0:
                return d, False, gtd
        d = g.neg() if d is None else d.copy_(g).neg_()
        return d, True, float(g.dot(d))

    def _initial_step(self, state, group, g: Tensor, gtd: float) -> float:
        t_prev, gtd_prev = state.get("t"), state.get("gtd")
        if t_prev is not None and t_prev > 0.0 and gtd_prev is not None:
            t = t_prev * gtd_prev / gtd
            if math.isfinite(t) and t > 0.0:
                return t
        return min(1.0, 1.0 / float(g.abs().sum())) * group["lr"]

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        """Perform ``max_iter`` CG iterations.

        Args:
            closure (Callable): re-evaluates the model: zeroes the gradients,
                computes the loss, calls ``backward()`` and returns the loss.

        Returns:
            The loss returned by the closure at the start of the step.
        """
        if closure is None:
            raise RuntimeError(
                "ConjugateGradient.step() requires a closure that zeroes the "
                "gradients, computes the loss, calls backward() and returns it"
            )
        closure = torch.enable_grad()(closure)

        group = self.param_groups[0]
        line_search = group["line_search"]
        max_iter = group["max_iter"]
        tolerance_grad = group["tolerance_grad"]
        tolerance_change = group["tolerance_change"]

        # Global state lives on the first parameter, as in LBFGS, so that
        # load_state_dict casts it along with the parameters.
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        state.setdefault("restarts", 0)
        state.setdefault("since_restart", 0)

        orig_loss = closure()
        loss = orig_loss
        state["func_evals"] += 1
        g = self._gather_flat_grad()
        if float(g.abs().max()) <= tolerance_grad:
            return orig_loss

        for i in range(max_iter):
            last = i == max_iter - 1
            state["n_iter"] += 1

            d, restarted, gtd = self._direction(state, group, g)
            if restarted:
                state["restarts"] += 1
                state["since_restart"] = 0
            state["since_restart"] += 1

            g_prev = state.get("prev_flat_grad")
            if g_prev is None:
                g_prev = g.clone(memory_format=torch.contiguous_format)
            else:
                g_prev.copy_(g)
            state["d"] = d
            state["prev_flat_grad"] = g_prev
            # d = -g with g·g underflowing to 0 (or NaN from a diverged model)
            # leaves no descent direction to search along.
            if not gtd < 0.0:
                break

            evals = 0
            if line_search == "fixed":
                t = float(group["lr"])
                self._add_dir(t, d)
                if not last:
                    loss, g = self._evaluate(closure)
                    evals = 1
            elif line_search == "exact":
                s = self._initial_step(state, group, g, gtd)
                self._add_dir(s, d)
                loss_s, g_s = self._evaluate(closure)
                evals = 1
                gtd_s = float(g_s.dot(d))
                if gtd_s > gtd:
                    t = s * gtd / (gtd - gtd_s)
                    self._add_dir(t - s, d)
                    if not last:
                        loss, g = self._evaluate(closure)
                        evals = 2
                else:
                    t, loss, g = s, loss_s, g_s
            else:
                t0 = self._initial_step(state, group, g, gtd)
                x0 = [p.clone(memory_format=torch.contiguous_format) for p in self._params]

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, g, t, evals = _strong_wolfe(
                    obj_func,
                    x0,
                    t0,
                    d,
                    float(loss),
                    g,
                    g.dot(d),
                    c1=group["c1"],
                    c2=group["c2"],
                    tolerance_change=tolerance_change,
                    max_ls=group["max_ls"],
                )
                del x0
                t = float(t)
                self._add_dir(t, d)

            state["func_evals"] += evals
            state["t"] = t
            state["gtd"] = gtd

            if last:
                break
            if float(g.abs().max()) <= tolerance_grad:
                break
            if abs(t) * float(d.abs().max()) <= tolerance_change:
                break

        return orig_loss
