"""Nonlinear conjugate gradient optimizer with selectable β rule, line search and restart rule."""

import math

import torch
from torch import Tensor

# torch's own strong-Wolfe search (Nocedal & Wright Alg. 3.5/3.6, cubic zoom)
# already takes c1/c2/max_ls as arguments, so it is reused instead of copied.
from torch.optim.lbfgs import _strong_wolfe
from torch.optim.optimizer import Optimizer, ParamsT

from gradeff.axes.optim.cg_direction import next_direction

__all__ = ["ConjugateGradient", "BETA_RULES", "LINE_SEARCHES", "RESTART_REASONS", "cg_stats"]

BETA_RULES = ("fr", "pr+", "hs", "dy", "hz")
LINE_SEARCHES = ("strong_wolfe", "exact", "fixed")
# Why an iteration's direction was reset to -g (keys of ``stats["restart_reasons"]``).
RESTART_REASONS = ("first", "periodic", "powell", "undefined", "clipped", "non_descent")

def _is_positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def cg_stats(optimizer) -> dict | None:
    """The counters of a :class:`ConjugateGradient`, or None for any other optimizer.

    Returns:
        ``{"steps", "iterations", "restarts", "restart_rate", "restart_reasons",
        "func_evals", "line_search_evals"}`` as documented in
        :attr:`ConjugateGradient.stats`: running totals over the optimizer's life (a loaded
        ``state_dict`` brings its totals along), so a harness reads them after each epoch and
        takes differences for per-epoch figures.
    """
    if not isinstance(optimizer, ConjugateGradient):
        return None
    return optimizer.stats


class ConjugateGradient(Optimizer):
    r"""Nonlinear conjugate gradient (Nocedal & Wright, ch. 5.2; Hager & Zhang 2005).

    With :math:`g_k = \nabla f(x_k)` and :math:`y_k = g_k - g_{k-1}`:

    .. math::
        d_k = -g_k + \beta_k d_{k-1}, \qquad x_{k+1} = x_k + t_k d_k

    where :math:`t_k` comes from the line search and :math:`\beta_k` is

    * ``"fr"`` Fletcher–Reeves: :math:`g_k^\top g_k / g_{k-1}^\top g_{k-1}`
    * ``"pr+"`` Polak–Ribière+: :math:`\max(0, g_k^\top y_k / g_{k-1}^\top g_{k-1})`
    * ``"hs"`` Hestenes–Stiefel: :math:`g_k^\top y_k / d_{k-1}^\top y_k`
    * ``"dy"`` Dai–Yuan: :math:`g_k^\top g_k / d_{k-1}^\top y_k`
    * ``"hz"`` Hager–Zhang (CG_DESCENT):
      :math:`\max\bigl(\frac{1}{d^\top y}\bigl(y - 2 d \frac{\|y\|^2}{d^\top y}\bigr)^\top g_k,\;
      \frac{-1}{\|d\| \min(0.01, \|g_{k-1}\|)}\bigr)` with :math:`d = d_{k-1}`.
      Whatever the step, :math:`g_k^\top d_k \le -\tfrac78 \|g_k\|^2` whenever
      :math:`d^\top y > 0` (which any Wolfe search guarantees): every direction is a descent
      direction without a restart.  With ``"fixed"`` steps on noisy gradients :math:`d^\top y`
      can be tiny and β, which divides by it, unbounded: use it with a line search.

    On a strictly convex quadratic with exact line searches all five rules
    coincide with linear CG and reach the minimiser in at most ``n`` iterations.

    **Restarts.** The direction restarts to :math:`-g_k` (steepest descent) on the first
    iteration (reason ``"first"``), every ``restart_every`` iterations (``"periodic"``), when
    Powell's test :math:`|g_k^\top g_{k-1}| \ge \theta \|g_k\|^2` fires (``"powell"``; on
    when ``powell_restart``, :math:`\theta` = ``powell_threshold``), when β is undefined
    (``"undefined"``), when PR+ clips β to 0 (``"clipped"``), and whenever :math:`d_k` is not
    a descent direction, :math:`g_k^\top d_k \ge 0` (``"non_descent"``).  Powell's test
    presumes steps that (nearly) minimise along :math:`d_{k-1}`, which leave consecutive
    gradients close to orthogonal: with a fixed step (``"fixed"``) the gradients of two
    short steps are nearly parallel, the test fires on almost every iteration and CG is
    steepest descent, so it is meant for the line searches.

    **Mini-batches.** The closure may evaluate another mini-batch at each :meth:`step`.  With
    ``"strong_wolfe"``, :math:`y_{k-1}` is the change of the gradient *of the mini-batch the
    search ran on* between :math:`x_{k-1}` and :math:`x_k`: the search's last evaluation
    already has it, so it costs no closure call.  Differencing two mini-batches' gradients
    instead would make :math:`y` mostly sampling noise (the curvature it should carry is
    :math:`t\,\nabla^2 f\, d`, small for short steps), with a random sign of :math:`d^\top y`;
    the same-batch pair is the one stochastic quasi-Newton methods use for the same reason
    (Schraudolph, Yu & Günter 2007; Byrd et al. 2016), and with a Wolfe search on the pair's
    batch :math:`d^\top y \ge (1 - c_2)|g^\top d| > 0` always.  Powell's test is applied to
    the same pair (the two gradients of that mini-batch).  Only the new gradient
    :math:`g_k`, of the new mini-batch, enters β's numerator and the direction.  On a
    deterministic closure the pair is exactly the classic one.  ``"exact"`` and ``"fixed"``
    difference consecutive gradients as usual.

    **The mini-batch variant (the grid's ``cgd``):** ``beta="hz"``, ``"strong_wolfe"`` with
    ``c2=0.9``, ``powell_restart=False``.  Why:

    * A fixed step gives CG no step scale.  With a learning rate sized for SGD the step stops
      far short of the minimum along :math:`d`, consecutive gradients stay nearly parallel,
      Powell's test fires and PR+ clips β to 0 on almost every iteration: fixed-step PR+ with
      Powell's restarts *is* SGD on mini-batches (bit-identical losses under gradient
      accumulation).  Without the test, the fixed-step β is noise: FR/PR+ sit near 1, an
      undamped momentum whose steps grow without bound, and HS/DY/HZ divide by a noisy
      :math:`d^\top y`.
    * A Wolfe search on the step's own mini-batch sizes every step to its direction and, with
      the same-batch pair above, guarantees :math:`d^\top y > 0`, the precondition of HZ's
      descent bound, so no restart is needed to keep descent.  Powell's test is off: it
      presumes near-exact minimisation along :math:`d`, and CG_DESCENT does without it.
    * ``c2`` (σ) = 0.9 is CG_DESCENT's default: HZ directions need the curvature condition
      only for :math:`d^\top y > 0`, not an exact search.  An exact search overfits each
      mini-batch (with ``c2=0.1`` the tiny grid's 8-sample batches cost 3–4 closure calls a
      step and ended epochs above SGD's loss), while σ = 0.9 accepts the first trial step on
      most iterations: about 2 closure calls a step, the least a line search can cost.

    On the tiny grid only the first iteration of a cell restarts, and the loss series leaves
    SGD's from the first epoch on.

    **The class defaults** (``beta="hz"``, ``c2=0.1``, a restart every ``n`` iterations, no
    Powell test) are tuned for deterministic problems: chained Rosenbrock from
    :math:`(-1.2, 1, \dots)` to :math:`\max|g| \le 10^{-5}` takes 80 closure calls for
    ``n = 2`` and 233 for ``n = 10``, where SciPy's CG (PR+, Wolfe search with
    :math:`c_2 = 0.4`) takes 78 and 539 function evaluations.  ``c2 = 0.1`` is Nocedal &
    Wright's recommendation for CG; Powell's test and PR+ clipping cost evaluations
    there (86 and 278 with PR+ and the test).

    Line searches (closure calls = forward+backward passes):

    * ``"strong_wolfe"``: bracketing + cubic-interpolation zoom (N&W Alg.
      3.5/3.6) with constants ``c1``, ``c2``.  Iterations cost a variable
      number of calls, from 1 to ``max_ls + 1``.
    * ``"exact"``: one trial point :math:`x + s d` and the secant root of the
      directional derivative, :math:`t = s\, g_0^\top d / (g_0^\top d - g_s^\top d)`,
      which is the exact minimiser for quadratics.  Exactly 2 calls per
      iteration; if the secant curvature is not positive (non-convex along
      ``d``) the trial point is kept and the iteration costs 1 call.
    * ``"fixed"``: :math:`t_k = \text{lr}`.  1 call per iteration.

    Counted per :meth:`step`: one call at the start, then the line search's
    calls; ``"exact"`` and ``"fixed"`` skip evaluating the point reached by the
    last iteration because the next :meth:`step` evaluates it anyway, so a
    step costs exactly ``2 * max_iter`` (exact) or ``max_iter`` (fixed) calls
    unless it terminates early.  With ``"strong_wolfe"`` the call opening a
    step repeats the last evaluation of the previous step, as in LBFGS; that is
    what lets the closure switch mini-batches between steps.

    The initial trial step of the line searches is ``lr * min(1, 1/||g||_1)``
    on the first iteration and :math:`t_{k-1} g_{k-1}^\top d_{k-1} / g_k^\top d_k`
    (N&W eq. 3.60) afterwards, since CG directions carry no natural scale.

    **Statistics.** :attr:`stats` (and :func:`cg_stats`) returns running totals kept as
    Python integers in the optimizer state (saved with :meth:`state_dict`, zero tensor
    bytes): ``steps`` (calls of :meth:`step`), ``iterations`` (directions computed),
    ``restarts`` (iterations whose direction was :math:`-g`, the first included) with
    ``restart_reasons`` (a count per :data:`RESTART_REASONS` entry) and ``restart_rate``
    (restarts / iterations, None before the first iteration), ``func_evals`` (closure calls)
    and ``line_search_evals`` (the calls after the one opening each step: the line search's
    trial points, or with ``"fixed"`` the evaluations of the new iterates when
    ``max_iter > 1``; ``func_evals = steps + line_search_evals``).  Every decision they count
    is taken on the host from values the step reads anyway, so keeping them costs no
    device synchronisation.

    .. warning::
        Like :class:`torch.optim.LBFGS`, only one parameter group is
        supported and all parameters must live on one device.

    .. note::
        Memory: the persistent state is two flat buffers, the previous direction and the
        previous gradient (with ``"strong_wolfe"``, the gradient change :math:`y` in its
        place), about ``2 * param_bytes``.  Each :meth:`step` additionally
        gathers a flat gradient (``param_bytes``); the strong-Wolfe search also
        keeps a copy of the parameters plus a few gradient-sized buffers while
        it runs.

    Args:
        params (iterable): parameters to optimize (real-valued).
        lr (float, optional): step length of ``"fixed"``; scale of the first
            trial step of the line searches (default: 1).
        beta (str, optional): one of :data:`BETA_RULES` (default: ``"hz"``).
        line_search (str, optional): one of :data:`LINE_SEARCHES`
            (default: ``"strong_wolfe"``).
        max_iter (int, optional): iterations per :meth:`step` (default: 1).
        restart_every (int, optional): periodic restart interval in iterations
            (default: number of scalar parameters).
        powell_restart (bool, optional): apply Powell's restart test
            (default: False).
        powell_threshold (float, optional): :math:`\theta` of Powell's test, in (0, 1]
            (default: 0.2, Powell 1977).
        c1 (float, optional): sufficient-decrease constant (default: 1e-4).
        c2 (float, optional): curvature constant; FR, PR+, HS and DY need it small,
            with ``c2 < 1/2`` required by FR's convergence theory, while HZ keeps descent
            for any ``c2 < 1`` (CG_DESCENT uses 0.9) (default: 0.1).
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
        beta: str = "hz",
        line_search: str = "strong_wolfe",
        max_iter: int = 1,
        restart_every: int | None = None,
        powell_restart: bool = False,
        powell_threshold: float = 0.2,
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
        if not 0.0 < powell_threshold <= 1.0:
            raise ValueError(f"Invalid powell_threshold: {powell_threshold} (must be in (0, 1])")
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
            "powell_threshold": powell_threshold,
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

    @property
    def stats(self) -> dict:
        """Running counters (see the class docstring, *Statistics*); all zero before a step."""
        state = self.state[self._params[0]]
        iterations = state.get("n_iter", 0)
        restarts = state.get("restarts", 0)
        reasons = state.get("restart_reasons", {})
        steps = state.get("steps", 0)
        func_evals = state.get("func_evals", 0)
        return {
            "steps": steps,
            "iterations": iterations,
            "restarts": restarts,
            "restart_rate": restarts / iterations if iterations else None,
            "restart_reasons": {reason: reasons.get(reason, 0) for reason in RESTART_REASONS},
            "func_evals": func_evals,
            "line_search_evals": func_evals - steps,
        }

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
        state.setdefault("steps", 0)
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        state.setdefault("restarts", 0)
        reasons = state.setdefault("restart_reasons", {})
        state.setdefault("since_restart", 0)

        state["steps"] += 1
        orig_loss = closure()
        loss = orig_loss
        state["func_evals"] += 1
        g = self._gather_flat_grad()
        if float(g.abs().max()) <= tolerance_grad:
            return orig_loss

        for i in range(max_iter):
            last = i == max_iter - 1
            state["n_iter"] += 1

            d, reason, gtd, g_sq = next_direction(state, group, g, self._numel)
            if reason is not None:
                state["restarts"] += 1
                reasons[reason] = reasons.get(reason, 0) + 1
                state["since_restart"] = 0
            state["since_restart"] += 1

            # The buffer of the previous gradient (or y) now takes this gradient.
            g_prev = state.pop("y", None)
            if g_prev is None:
                g_prev = state.get("prev_flat_grad")
            if g_prev is None:
                g_prev = g.clone(memory_format=torch.contiguous_format)
            else:
                g_prev.copy_(g)
            state["d"] = d
            state["prev_flat_grad"] = g_prev
            state["g_sq"] = g_sq
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
                # The pair (y, Powell's test) of this search's own closure: the buffer
                # becomes y = g(x + t d) - g(x).
                if group["powell_restart"]:
                    g_gprev, g_sq_new = torch.stack((g.dot(g_prev), g.dot(g))).tolist()
                    state["powell"] = abs(g_gprev) >= group["powell_threshold"] * g_sq_new
                state["y"] = state.pop("prev_flat_grad").neg_().add_(g)

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
