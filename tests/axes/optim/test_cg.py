"""Laws of gradeff.axes.optim.cg.ConjugateGradient on quadratics and Rosenbrock, and its counters."""

import copy
import math
from dataclasses import dataclass

import pytest
import torch

# torch imports its compiler on the first optimizer a process builds (torch._dynamo, seconds): imported with this
# module instead, the mutation run's workers, forked from a process that collected it, do not pay it each.
import torch._dynamo
from hypothesis import given, settings
from hypothesis import strategies as st

from gradeff.axes.optim.cg import BETA_RULES, RESTART_REASONS, ConjugateGradient, cg_stats
from gradeff.meters import optimizer_state_bytes

try:  # at import, for the same reason as torch._dynamo (a second each)
    import numpy as np
    from scipy.optimize import minimize, rosen, rosen_der
except ImportError:
    minimize = None

# No example database: the suite must not write .hypothesis/ into the tree.
PROPERTY = settings(max_examples=25, deadline=None, database=None)


@dataclass(frozen=True)
class Quadratic:
    """f(x) = ½xᵀAx − bᵀx with A symmetric positive definite."""

    A: torch.Tensor
    b: torch.Tensor
    x_star: torch.Tensor

    @property
    def n(self) -> int:
        return self.b.numel()


def quadratic(n: int, kappa: float, spectrum: str, seed: int) -> Quadratic:
    """A = Q diag(λ) Qᵀ with Q orthogonal (QR of a seeded Gaussian), λ in [1, κ].

    Spectra are even or uniform-random, never log-spaced: with clustered
    small eigenvalues finite-precision CG loses its n-step termination.
    """
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    if spectrum == "even":
        lam = torch.linspace(1.0, kappa, n, dtype=torch.float64)
    else:
        lam = 1.0 + (kappa - 1.0) * torch.rand(n, generator=gen, dtype=torch.float64)
    a = (q * lam) @ q.T
    a = (a + a.T) / 2
    b = torch.randn(n, generator=gen, dtype=torch.float64)
    return Quadratic(a, b, torch.linalg.solve(a, b))


def spd_quadratics(max_n: int = 100, max_kappa: float = 1e3) -> st.SearchStrategy[Quadratic]:
    return st.builds(
        quadratic,
        n=st.integers(2, max_n),
        kappa=st.floats(1.0, max_kappa),
        spectrum=st.sampled_from(["even", "uniform"]),
        seed=st.integers(0, 2**32 - 1),
    )


def quadratic_closure(params, problem: Quadratic, counter: list[int] | None = None):
    """Closure setting the analytic gradient Ax − b on ``params`` (split flat x).

    The loss is reported as ½(x − x*)ᵀA(x − x*), which differs from f only by
    the constant −½bᵀx*: evaluated directly, f cancels down to rounding noise
    near the minimum and any value-based (Armijo) search stalls around a
    relative error of 1e-6 for κ = 1e3, well before the gradient runs out.
    """

    def closure():
        if counter is not None:
            counter[0] += 1
        x = torch.cat([p.detach().reshape(-1) for p in params])
        grad = problem.A @ x - problem.b
        offset = 0
        for p in params:
            p.grad = grad[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        err = x - problem.x_star
        return 0.5 * err @ (problem.A @ err)

    return closure


def rel_error(x: torch.Tensor, problem: Quadratic) -> float:
    return float((x.detach() - problem.x_star).norm() / problem.x_star.norm())


def start(problem: Quadratic) -> torch.Tensor:
    return torch.zeros(problem.n, dtype=torch.float64, requires_grad=True)


def solves_in_n_exact_iterations(beta: str, problem: Quadratic) -> bool:
    """Whether ``n`` exact-search iterations of rule ``beta`` reach x* = A⁻¹b."""
    x = start(problem)
    # Powell's test on: exact searches keep consecutive gradients
    # orthogonal, so it never fires and the n-step law holds with it.
    opt = ConjugateGradient(
        [x], beta=beta, line_search="exact", max_iter=problem.n, restart_every=problem.n,
        powell_restart=True,
    )
    opt.step(quadratic_closure([x], problem))
    return rel_error(x, problem) <= 1e-6


def solves_in_5n_wolfe_iterations(beta: str, problem: Quadratic) -> bool:
    """Whether ``5n`` strong-Wolfe iterations of rule ``beta`` reach x* = A⁻¹b."""
    x = start(problem)
    # c2 = 0.01 rather than the default 0.1: accepting |φ'(t)| up to 0.1|φ'(0)|
    # costs conjugacy, and small ill-conditioned cases (n = 5, κ = 1e3) were
    # measured to need up to ~6n iterations; with 0.01 the worst of 28 000
    # sampled problems needed 3n.
    opt = ConjugateGradient(
        [x], beta=beta, max_iter=5 * problem.n, restart_every=problem.n, c2=0.01
    )
    opt.step(quadratic_closure([x], problem))
    return rel_error(x, problem) <= 1e-6


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics())
def test_exact_line_search_terminates_in_n_iterations(beta, problem):
    """With exact line searches every β rule solves an SPD quadratic in n iterations."""
    assert solves_in_n_exact_iterations(beta, problem)


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics())
def test_strong_wolfe_converges_within_5n_iterations(beta, problem):
    """Under a strong-Wolfe search every β rule reaches x* = A⁻¹b within 5n iterations."""
    assert solves_in_5n_wolfe_iterations(beta, problem)


def check_strong_wolfe_decreases_f_monotonically(beta: str, problem: Quadratic) -> None:
    x = start(problem)
    opt = ConjugateGradient([x], beta=beta)
    closure = quadratic_closure([x], problem)
    losses = [float(opt.step(closure)) for _ in range(2 * problem.n)]
    assert all(after <= before for before, after in zip(losses, losses[1:]))
    assert losses[-1] < losses[0]


def check_first_iteration_is_steepest_descent_with_exact_step(beta: str, problem: Quadratic) -> None:
    x0 = torch.linspace(-1.0, 1.0, problem.n, dtype=torch.float64)
    x = x0.clone().requires_grad_(True)
    opt = ConjugateGradient([x], beta=beta, line_search="exact")
    opt.step(quadratic_closure([x], problem))
    g = problem.A @ x0 - problem.b
    expected = x0 - (g @ g) / (g @ problem.A @ g) * g
    torch.testing.assert_close(x.detach(), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics(max_n=40))
def test_strong_wolfe_decreases_f_monotonically(beta, problem):
    """Each strong-Wolfe iteration (default constants) never increases f."""
    check_strong_wolfe_decreases_f_monotonically(beta, problem)


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics())
def test_first_iteration_is_steepest_descent_with_exact_step(beta, problem):
    """The first iteration is x1 = x0 − (gᵀg / gᵀAg) g."""
    check_first_iteration_is_steepest_descent_with_exact_step(beta, problem)


# The four laws above on three fixed problems, small enough for the mutation run (``[tool.mutmut]`` leaves the
# properties out: each of a CG mutant's runs would cost seconds), and a fast first check in every run.
# (Built in the test, not at import: a process that ran torch before forking leaves its workers hung, and the
# mutation run forks its workers from one that has collected this module.)
SMALL_PROBLEMS = [(2, 10.0, "even", 0), (7, 1e3, "uniform", 1), (16, 1e2, "even", 2)]


@pytest.mark.parametrize("beta", BETA_RULES)
def test_laws_on_small_quadratics(beta):
    """The n-step law of exact searches, the 5n law and the monotone descent of strong-Wolfe searches, and the
    steepest-descent first step, on three fixed quadratics."""
    for problem in (quadratic(*small) for small in SMALL_PROBLEMS):
        assert solves_in_n_exact_iterations(beta, problem)
        assert solves_in_5n_wolfe_iterations(beta, problem)
        check_strong_wolfe_decreases_f_monotonically(beta, problem)
        check_first_iteration_is_steepest_descent_with_exact_step(beta, problem)


def rosenbrock(n: int, **kwargs) -> tuple[torch.Tensor, ConjugateGradient, list[int]]:
    """Minimise chained Rosenbrock (SciPy's ``rosen``) from (−1.2, 1, −1.2, 1, …) in one step of 400 iterations.

    Every β rule needs at most 133 (n = 10); the limit makes a CG that stopped converging fail fast.
    Returns the final x, the optimizer and the closure-call counter.
    """
    x = torch.tensor([-1.2, 1.0] * (n // 2), dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], max_iter=400, **kwargs)
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return x, opt, calls


@pytest.mark.parametrize("beta", BETA_RULES)
@pytest.mark.parametrize("n", [2, 10])
def test_rosenbrock_converges_to_ones(n, beta):
    """Every β rule with the default strong-Wolfe search takes Rosenbrock from (−1.2, 1, …) to all ones."""
    x, _, _ = rosenbrock(n, beta=beta)
    torch.testing.assert_close(x.detach(), torch.ones(n, dtype=torch.float64), rtol=0, atol=1e-4)


# scipy.optimize.minimize(rosen, x0, method="CG", jac=rosen_der).nfev at its default gtol = 1e-5
# (max |g|), x0 = (−1.2, 1, …): measured with SciPy 1.17.1; used where SciPy is not installed.
SCIPY_CG_NFEV = {2: 78, 10: 539}
SCIPY_GTOL = 1e-5


def scipy_cg_nfev(n: int) -> int:
    if minimize is None:
        return SCIPY_CG_NFEV[n]
    result = minimize(rosen, np.array([-1.2, 1.0] * (n // 2)), method="CG", jac=rosen_der,
                      options={"gtol": SCIPY_GTOL})
    assert result.success
    return result.nfev


@pytest.mark.parametrize("n", [2, 10])
def test_rosenbrock_costs_at_most_three_times_scipy_cg(n):
    """Default CG reaches SciPy CG's tolerance (max|g| ≤ 1e-5) in at most 3× SciPy's function evaluations.

    One closure call evaluates f and its analytic gradient together, as one SciPy ``nfev`` does.
    Measured with the defaults: 80 calls for n = 2 (SciPy: 78), 233 for n = 10 (SciPy: 539).
    """
    x, opt, calls = rosenbrock(n, tolerance_grad=SCIPY_GTOL)
    assert float(x.grad.abs().max()) <= SCIPY_GTOL
    torch.testing.assert_close(x.detach(), torch.ones(n, dtype=torch.float64), rtol=0, atol=1e-4)
    assert opt.stats["func_evals"] == calls[0]
    assert calls[0] <= 3 * scipy_cg_nfev(n)


@pytest.mark.parametrize("line_search", ["exact", "strong_wolfe"])
def test_split_parameters_follow_the_flat_trajectory(line_search):
    """Splitting x over tensors of different shapes does not change the iterates."""
    problem = quadratic(20, 1e3, "uniform", seed=0)
    flat = start(problem)
    # Three parts, so the third one's offset is the sum of two sizes.
    parts = [torch.zeros(3, 4, dtype=torch.float64, requires_grad=True),
             torch.zeros(5, dtype=torch.float64, requires_grad=True),
             torch.zeros(3, dtype=torch.float64, requires_grad=True)]
    opts = [ConjugateGradient(ps, line_search=line_search, max_iter=7) for ps in ([flat], parts)]
    for opt, ps in zip(opts, ([flat], parts)):
        opt.step(quadratic_closure(ps, problem))
    split = torch.cat([p.detach().reshape(-1) for p in parts])
    torch.testing.assert_close(split, flat.detach(), rtol=1e-12, atol=1e-14)


def test_parameter_without_gradient_is_left_unchanged():
    """A parameter whose grad stays None counts as zero gradient and never moves."""
    problem = quadratic(6, 1e3, "uniform", seed=0)
    x = start(problem)
    unused = torch.full((5,), 3.0, dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x, unused], line_search="exact", max_iter=6, restart_every=6)
    opt.step(quadratic_closure([x], problem))
    assert unused.grad is None
    assert torch.equal(unused.detach(), torch.full((5,), 3.0, dtype=torch.float64))
    assert rel_error(x, problem) <= 1e-6


def test_float32_parameters_converge_and_keep_their_dtype():
    """float32 parameters reach the float32-level solution and stay float32."""
    problem = quadratic(10, 10.0, "uniform", seed=0)
    x = torch.zeros(problem.n, dtype=torch.float32, requires_grad=True)
    as_f32 = Quadratic(problem.A.float(), problem.b.float(), problem.x_star.float())
    opt = ConjugateGradient([x], max_iter=5 * problem.n)
    opt.step(quadratic_closure([x], as_f32))
    assert x.dtype == torch.float32
    assert opt.state[x]["d"].dtype == torch.float32
    assert rel_error(x.double(), problem) <= 1e-4


def test_single_iteration_steps_reproduce_one_long_step():
    """n steps of max_iter=1 follow the same iterates as one step of max_iter=n."""
    problem = quadratic(12, 1e3, "uniform", seed=0)
    x_long, x_short = start(problem), start(problem)
    ConjugateGradient([x_long], line_search="exact", max_iter=12).step(
        quadratic_closure([x_long], problem))
    opt = ConjugateGradient([x_short], line_search="exact")
    closure = quadratic_closure([x_short], problem)
    for _ in range(12):
        opt.step(closure)
    torch.testing.assert_close(x_short.detach(), x_long.detach(), rtol=1e-12, atol=1e-14)


def test_state_dict_round_trip_continues_the_recurrence():
    """An optimizer restored from state_dict takes the same next step as the original."""
    problem = quadratic(8, 1e3, "uniform", seed=0)
    x = start(problem)
    opt = ConjugateGradient([x], line_search="exact", max_iter=3)
    opt.step(quadratic_closure([x], problem))
    saved_x, saved_state = x.detach().clone(), copy.deepcopy(opt.state_dict())
    opt.step(quadratic_closure([x], problem))

    y = saved_x.clone().requires_grad_(True)
    restored = ConjugateGradient([y], line_search="exact", max_iter=3)
    restored.load_state_dict(saved_state)
    restored.step(quadratic_closure([y], problem))
    torch.testing.assert_close(y.detach(), x.detach(), rtol=1e-12, atol=1e-14)


def test_step_returns_loss_at_start_of_step():
    """step() returns the closure's loss at the parameters it started from."""
    problem = quadratic(5, 1e3, "uniform", seed=0)
    x = start(problem)
    opt = ConjugateGradient([x], max_iter=4)
    closure = quadratic_closure([x], problem)
    expected = closure()
    assert float(opt.step(closure)) == float(expected)
    assert float(closure()) < float(expected)


def test_step_at_minimiser_stops_after_one_evaluation():
    """A gradient below tolerance_grad ends the step after the initial closure call."""
    problem = quadratic(5, 1e3, "uniform", seed=0)
    x = problem.x_star.clone().requires_grad_(True)
    opt = ConjugateGradient([x], tolerance_grad=1e-8, max_iter=10)
    opt.step(quadratic_closure([x], problem))
    assert opt.state[x]["func_evals"] == 1
    assert opt.state[x]["n_iter"] == 0
    assert torch.equal(x.detach(), problem.x_star)


def test_fixed_first_step_is_lr_times_negative_gradient():
    """With line_search='fixed' the first iteration is x1 = x0 − lr·g0."""
    problem = quadratic(5, 1e3, "uniform", seed=0)
    x = start(problem)
    ConjugateGradient([x], lr=0.01, line_search="fixed").step(quadratic_closure([x], problem))
    torch.testing.assert_close(x.detach(), 0.01 * problem.b, rtol=1e-12, atol=0)


# β_k as printed in Nocedal & Wright (5.41)-(5.49) and Dai & Yuan (1999).
def hager_zhang(g1, g0, d0):
    """Hager & Zhang (2005) eq. (1.6)-(1.7): β^N truncated below at −1/(‖d‖ min(0.01, ‖g0‖))."""
    y = g1 - g0
    dy = d0 @ y
    beta_n = (y - 2 * d0 * (y @ y) / dy) @ g1 / dy
    return max(float(beta_n), -1.0 / (float(d0.norm()) * min(0.01, float(g0.norm()))))


BETA_FORMULAS = {
    "fr": lambda g1, g0, d0: (g1 @ g1) / (g0 @ g0),
    "pr+": lambda g1, g0, d0: max(0.0, float(g1 @ (g1 - g0) / (g0 @ g0))),
    "hs": lambda g1, g0, d0: (g1 @ (g1 - g0)) / (d0 @ (g1 - g0)),
    "dy": lambda g1, g0, d0: (g1 @ g1) / (d0 @ (g1 - g0)),
    "hz": hager_zhang,
}


@pytest.mark.parametrize("beta", BETA_RULES)
def test_second_direction_follows_beta_formula(beta):
    """After a fixed (inexact) step, d1 = −g1 + β1·d0 with the rule's own β."""
    problem = quadratic(5, 10.0, "uniform", seed=0)
    lr = 0.1
    x0 = torch.linspace(-1.0, 1.0, problem.n, dtype=torch.float64)
    x = x0.clone().requires_grad_(True)
    # Powell's test would fire on these far-from-orthogonal gradients.
    opt = ConjugateGradient([x], lr=lr, beta=beta, line_search="fixed", max_iter=2,
                            restart_every=100, powell_restart=False)
    opt.step(quadratic_closure([x], problem))

    g0 = problem.A @ x0 - problem.b
    x1 = x0 - lr * g0
    g1 = problem.A @ x1 - problem.b
    # At this point the rules disagree (raw PR < 0 exercises the PR+ clip,
    # HS < 0 is kept, HZ is not truncated) and every d1 is a descent direction,
    # so a mixed-up rule cannot pass.
    betas = {rule: float(f(g1, g0, -g0)) for rule, f in BETA_FORMULAS.items()}
    assert len({round(b, 6) for b in betas.values()}) == len(BETA_RULES)
    d1 = -g1 - betas[beta] * g0
    assert float(g1 @ d1) < 0
    torch.testing.assert_close(x.detach(), x1 + lr * d1, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_non_descent_direction_resets_to_steepest_descent(scale):
    """When −g + βd is not a descent direction the step falls back to −g (also when g·d is below 1)."""
    x = torch.tensor([scale], dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], lr=2.5, beta="fr", line_search="fixed", max_iter=2,
                            restart_every=100, powell_restart=False)

    def closure():
        x.grad = x.detach().clone()
        return 0.5 * float(x.detach() @ x.detach())

    opt.step(closure)
    # x1 = 1 − 2.5 = −1.5, g1 = −1.5, β_FR = 2.25, −g1 + β·d0 = −0.75 points
    # uphill (g1·d = 1.125; 0.01125 at scale 0.1), so the second step uses −g1 = 1.5 instead.
    torch.testing.assert_close(x.detach(), torch.tensor([(-1.5 + 2.5 * 1.5) * scale], dtype=torch.float64))
    assert opt.state[x]["restarts"] == 2
    assert opt.stats["restart_reasons"] == reasons(first=1, non_descent=1)


@pytest.mark.parametrize(("powell", "expected_restarts"), [(True, 10), (False, 1)])
def test_powell_restart_fires_when_gradients_stay_parallel(powell, expected_restarts):
    """Tiny fixed steps keep g_k ∥ g_{k-1}, so Powell's test restarts every iteration."""
    problem = quadratic(5, 1e3, "uniform", seed=0)
    x = start(problem)
    # FR's β is always positive, so without Powell nothing but the first
    # iteration restarts.
    opt = ConjugateGradient([x], lr=1e-6, beta="fr", line_search="fixed", max_iter=10,
                            restart_every=1000, powell_restart=powell)
    opt.step(quadratic_closure([x], problem))
    assert opt.state[x]["restarts"] == expected_restarts
    assert opt.stats["restart_reasons"] == reasons(first=1, powell=expected_restarts - 1)


def test_restart_every_iteration_is_steepest_descent():
    """restart_every=1 turns CG into steepest descent with exact steps."""
    problem = quadratic(10, 1e3, "uniform", seed=0)
    x = start(problem)
    opt = ConjugateGradient([x], beta="fr", line_search="exact", max_iter=4, restart_every=1)
    opt.step(quadratic_closure([x], problem))
    expected = torch.zeros(problem.n, dtype=torch.float64)
    for _ in range(4):
        g = problem.A @ expected - problem.b
        expected = expected - (g @ g) / (g @ problem.A @ g) * g
    torch.testing.assert_close(x.detach(), expected, rtol=1e-9, atol=1e-12)
    assert opt.stats["restart_reasons"] == reasons(first=1, periodic=3)


@pytest.mark.parametrize(("line_search", "calls_per_step"), [("exact", 10), ("fixed", 5)])
def test_func_evals_per_step_is_documented_count(line_search, calls_per_step):
    """A step costs 2·max_iter closure calls with 'exact' and max_iter with 'fixed'."""
    problem = quadratic(30, 1e3, "uniform", seed=0)
    x = start(problem)
    counter = [0]
    opt = ConjugateGradient([x], lr=1e-3, line_search=line_search, max_iter=5)
    closure = quadratic_closure([x], problem, counter)
    for step in range(1, 4):
        opt.step(closure)
        assert counter[0] == step * calls_per_step
        assert opt.state[x]["func_evals"] == counter[0]
        assert opt.stats["steps"] == step
        assert opt.stats["line_search_evals"] == step * (calls_per_step - 1)


def test_func_evals_counts_every_strong_wolfe_call():
    """state['func_evals'] equals the closure calls actually made by strong-Wolfe steps."""
    problem = quadratic(30, 1e3, "uniform", seed=0)
    x = start(problem)
    counter = [0]
    opt = ConjugateGradient([x], max_iter=5)
    closure = quadratic_closure([x], problem, counter)
    for _ in range(3):
        opt.step(closure)
    assert opt.state[x]["func_evals"] == counter[0]
    assert counter[0] >= 3 + opt.state[x]["n_iter"]


def test_unknown_beta_lists_valid_rules():
    """An unknown β rule raises ValueError naming every valid rule."""
    with pytest.raises(ValueError, match="beta rule 'cd'; expected one of fr, pr\\+, hs, dy, hz$"):
        ConjugateGradient([torch.zeros(2, requires_grad=True)], beta="cd")


def test_unknown_line_search_lists_valid_choices():
    """An unknown line search raises ValueError naming every valid one."""
    with pytest.raises(ValueError, match="line_search 'armijo'; expected one of strong_wolfe, exact, fixed$"):
        ConjugateGradient([torch.zeros(2, requires_grad=True)], line_search="armijo")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": 0.0},
        {"lr": -1.0},
        {"max_iter": 0},
        {"max_iter": 1.5},
        {"restart_every": 0},
        {"c1": 0.0},
        {"c1": 0.5, "c2": 0.4},
        {"c1": 0.1, "c2": 0.1},
        {"c2": 1.0},
        {"powell_threshold": 0.0},
        {"powell_threshold": 1.01},
        {"max_ls": 0},
        {"tolerance_grad": -1.0},
        {"tolerance_change": -1.0},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_invalid_hyperparameters_raise(kwargs):
    """Out-of-range hyperparameters raise ValueError naming the offending argument."""
    with pytest.raises(ValueError, match="|".join(kwargs)):
        ConjugateGradient([torch.zeros(2, requires_grad=True)], **kwargs)


def test_multiple_parameter_groups_rejected():
    """More than one parameter group raises ValueError."""
    groups = [{"params": [torch.zeros(2, requires_grad=True)]},
              {"params": [torch.zeros(2, requires_grad=True)], "lr": 0.1}]
    with pytest.raises(ValueError,
                       match="^ConjugateGradient doesn't support per-parameter options \\(parameter groups\\)$"):
        ConjugateGradient(groups)


def test_complex_parameters_rejected():
    """Complex parameters raise ValueError: the inner products CG takes are real."""
    with pytest.raises(ValueError, match="^ConjugateGradient does not support complex parameters$"):
        ConjugateGradient([torch.zeros(2, dtype=torch.complex64, requires_grad=True)])


def test_step_without_closure_raises():
    """step() without a closure raises an error explaining what the closure must do."""
    opt = ConjugateGradient([torch.zeros(2, requires_grad=True)])
    with pytest.raises(RuntimeError, match="requires a closure"):
        opt.step()


# -- counters ---------------------------------------------------------------------------------


def reasons(**counts: int) -> dict[str, int]:
    """A full ``restart_reasons`` mapping: the given counts, 0 elsewhere."""
    return {reason: counts.get(reason, 0) for reason in RESTART_REASONS}


def test_stats_of_a_hand_checked_strong_wolfe_run():
    """½x² from x = 1: one restart, one trial step that lands on 0, then a step that stops at once.

    Step 1 opens with g = 1 (call 1); the first iteration restarts to d = −1 and tries
    t0 = lr·min(1, 1/‖g‖₁) = 1 (call 2): x = 0, f = 0 and g = 0 pass both Wolfe conditions.
    Step 2 opens at x = 0 (call 3) where g = 0 ≤ tolerance_grad: no iteration.
    """
    x = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x])
    assert opt.stats == {"steps": 0, "iterations": 0, "restarts": 0, "restart_rate": None,
                         "restart_reasons": reasons(), "func_evals": 0, "line_search_evals": 0}

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    assert x.item() == 0.0
    assert opt.stats == {"steps": 1, "iterations": 1, "restarts": 1, "restart_rate": 1.0,
                         "restart_reasons": reasons(first=1), "func_evals": 2, "line_search_evals": 1}
    opt.step(closure)
    assert opt.stats == {"steps": 2, "iterations": 1, "restarts": 1, "restart_rate": 1.0,
                         "restart_reasons": reasons(first=1), "func_evals": 3, "line_search_evals": 1}


def test_stats_of_conjugate_iterations_on_a_quadratic():
    """Exact searches on a 2-D quadratic: the first iteration restarts, the second is CG, 2 calls each."""
    problem = quadratic(2, 10.0, "even", seed=0)
    x = start(problem)
    opt = ConjugateGradient([x], line_search="exact", max_iter=2, restart_every=2)
    opt.step(quadratic_closure([x], problem))
    assert rel_error(x, problem) <= 1e-9
    assert opt.stats == {"steps": 1, "iterations": 2, "restarts": 1, "restart_rate": 0.5,
                         "restart_reasons": reasons(first=1), "func_evals": 4, "line_search_evals": 3}


def test_pr_plus_clipping_is_counted_as_a_restart():
    """PR+ clips the negative raw β of a short fixed step to 0: d = −g, reason ``clipped``."""
    problem = quadratic(5, 10.0, "uniform", seed=0)
    x = torch.linspace(-1.0, 1.0, problem.n, dtype=torch.float64).requires_grad_(True)
    opt = ConjugateGradient([x], lr=0.1, beta="pr+", line_search="fixed", max_iter=2, restart_every=100)
    opt.step(quadratic_closure([x], problem))
    assert opt.stats["restart_reasons"] == reasons(first=1, clipped=1)


def test_undefined_beta_is_counted_as_a_restart():
    """HS on a linear function: y = 0, so d·y = 0 and β is undefined: reason ``undefined``."""
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], lr=0.1, beta="hs", line_search="fixed", max_iter=3, restart_every=100)

    def closure():
        x.grad = torch.ones_like(x)
        return x.detach().sum()

    opt.step(closure)
    assert opt.stats["restart_reasons"] == reasons(first=1, undefined=2)
    assert opt.stats["restart_rate"] == 1.0


def test_hager_zhang_truncation_bounds_beta_below():
    """β_HZ never falls below −1/(‖d‖ min(0.01, ‖g_prev‖)) (Hager & Zhang 2005, eq. 1.7)."""
    from gradeff.axes.optim.cg_direction import _beta

    # g·y = −100, y·y = 1, d·y = 1, d·g = 0, ‖d‖ = 2, ‖g_prev‖ = 1: β^N = −100, floor −1/(2 · 0.01) = −50.
    assert _beta("hz", 1.0, -100.0, 1.0, 1.0, 0.0, 4.0, 1.0) == pytest.approx(-50.0)
    assert _beta("hz", 1.0, -10.0, 1.0, 1.0, 0.0, 4.0, 1.0) == pytest.approx(-10.0)
    assert _beta("hz", 1.0, 1.0, 1.0, 0.0, 0.0, 4.0, 1.0) is None


def test_cg_stats_is_none_for_other_optimizers():
    """cg_stats reads a ConjugateGradient's counters and answers None for any other optimizer."""
    p = torch.zeros(2, requires_grad=True)
    opt = ConjugateGradient([p])
    assert cg_stats(opt) == opt.stats
    assert cg_stats(torch.optim.SGD([p], lr=0.1)) is None


def test_counters_cost_no_state_bytes_and_survive_state_dict():
    """The counters are Python numbers: the state stays two flat buffers, and state_dict keeps them."""
    problem = quadratic(8, 1e3, "uniform", seed=0)
    x = start(problem)
    opt = ConjugateGradient([x], max_iter=3)
    for _ in range(2):
        opt.step(quadratic_closure([x], problem))
    assert optimizer_state_bytes(opt) == 2 * x.numel() * x.element_size()
    restored = ConjugateGradient([x.detach().clone().requires_grad_(True)], max_iter=3)
    restored.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert restored.stats == opt.stats
    assert opt.stats["iterations"] == 6 and opt.stats["func_evals"] > opt.stats["steps"] == 2


def test_strong_wolfe_pair_comes_from_the_searched_mini_batch():
    """With a closure that switches batches between steps, y is the searched batch's own gradient change.

    Two "mini-batches" are two quadratics; step k evaluates batch k mod 2 only. After step 1
    (batch A from x0 to x1) the stored y is A(x1) − A(x0), not B(x1) − A(x0).
    """
    batches = [quadratic(6, 10.0, "uniform", seed=seed) for seed in (0, 1)]
    x = start(batches[0])
    opt = ConjugateGradient([x])
    current = [0]

    def closure():
        problem = batches[current[0]]
        xd = x.detach()
        x.grad = problem.A @ xd - problem.b
        err = xd - problem.x_star
        return 0.5 * err @ (problem.A @ err)

    x0 = x.detach().clone()
    opt.step(closure)
    x1 = x.detach().clone()
    a = batches[0]
    torch.testing.assert_close(opt.state[x]["y"], a.A @ (x1 - x0), rtol=1e-12, atol=1e-14)
    # The next step's direction uses the new batch's gradient with A's pair: still a descent direction.
    current[0] = 1
    opt.step(closure)
    assert opt.stats["restarts"] == 1
    assert opt.stats["iterations"] == 2
    assert math.isfinite(float(x.detach().sum()))


# -- trial steps, restarts at their limits, gradients of every layout ---------------------------------------------


def recording_closure(x: torch.Tensor, grad, points: list[torch.Tensor]):
    """A closure setting ``x.grad = grad(x)`` and recording every point it is evaluated at; the loss is ½‖x‖²."""

    def closure():
        xd = x.detach().clone()
        points.append(xd)
        x.grad = grad(xd)
        return 0.5 * float(xd @ xd)

    return closure


@pytest.mark.parametrize(("x0", "lr", "first_trial"), [
    ([2.0, 2.0], 1.0, [1.5, 1.5]),     # ‖g‖₁ = 4: t0 = 1/4
    ([2.0, 2.0], 0.5, [1.75, 1.75]),   # and half of it
    ([0.1, 0.2], 0.5, [0.05, 0.1]),    # ‖g‖₁ = 0.3: t0 = lr, never more
])
def test_first_trial_step_is_lr_times_min_of_one_and_inverse_gradient_norm(x0, lr, first_trial):
    """The strong-Wolfe search on ½‖x‖² first tries x − lr·min(1, 1/‖g‖₁)·g."""
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    points: list[torch.Tensor] = []
    ConjugateGradient([x], lr=lr).step(recording_closure(x, lambda xd: xd, points))
    torch.testing.assert_close(points[1], torch.tensor(first_trial, dtype=torch.float64), rtol=1e-12, atol=0)


@pytest.mark.parametrize(("eigenvalues", "x0"), [((2.0, 5.0), (1.0, 1.0)),       # a second trial step of 4.3
                                                 ((1.0, 100.0), (1.0, 0.01))])   # and one of 1e-6
def test_later_trial_steps_carry_the_previous_step_over(eigenvalues, x0):
    """From the second iteration on the trial step is t_{k−1} g_{k−1}ᵀd_{k−1} / g_kᵀd_k (N&W eq. 3.60), above
    or below 1.

    Steepest descent with exact steps (restart_every=1) on a diagonal quadratic: every t is gᵀg / gᵀAg < 1, and
    the second iteration's trial point is x1 − t0 (g0ᵀg0 / g1ᵀg1) g1.
    """
    a = torch.diag(torch.tensor(eigenvalues, dtype=torch.float64))
    x0 = torch.tensor(x0, dtype=torch.float64)
    x = x0.clone().requires_grad_(True)
    points: list[torch.Tensor] = []
    opt = ConjugateGradient([x], line_search="exact", max_iter=2, restart_every=1)
    opt.step(recording_closure(x, lambda xd: a @ xd, points))
    g0 = a @ x0
    t0 = float(g0 @ g0 / (g0 @ a @ g0))
    x1 = x0 - t0 * g0
    g1 = a @ x1
    assert t0 < 1
    torch.testing.assert_close(points[2], x1, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(points[3], x1 - t0 * float(g0 @ g0 / (g1 @ g1)) * g1, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("line_search", ["strong_wolfe", "exact", "fixed"])
def test_powell_restarts_every_iteration_in_one_dimension(line_search):
    """In one dimension consecutive gradients are parallel, so Powell's test fires on every iteration after the
    first, under every line search (on x⁴, which no search minimises in one step)."""
    x = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], line_search=line_search, lr=0.1, powell_restart=True, max_iter=5, restart_every=100)

    def closure():
        opt.zero_grad()
        loss = (x**4).sum()
        loss.backward()
        return loss

    opt.step(closure)
    assert opt.stats["restart_reasons"] == reasons(first=1, powell=4)


def test_powell_threshold_is_relative_to_the_gradients_size():
    """|g·g_prev| ≥ θ g·g compares like with like: the same steps on gradients 100 times smaller fire the same."""
    for scale in (1.0, 0.01):
        x = torch.tensor([scale], dtype=torch.float64, requires_grad=True)
        opt = ConjugateGradient([x], lr=0.1, beta="fr", line_search="fixed", max_iter=3, restart_every=100,
                                powell_restart=True)
        opt.step(recording_closure(x, lambda xd: xd, []))
        assert opt.stats["restart_reasons"] == reasons(first=1, powell=2)


def test_powell_threshold_one_fires_on_repeated_gradients():
    """θ = 1, the largest allowed, fires exactly when |g·g_prev| = g·g: on a linear function's constant gradient."""
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], lr=0.1, beta="hs", line_search="fixed", max_iter=3, restart_every=100,
                            powell_restart=True, powell_threshold=1.0)
    opt.step(recording_closure(x, torch.ones_like, []))
    assert opt.stats["restart_reasons"] == reasons(first=1, powell=2)


def test_powell_on_mini_batches_uses_the_searched_batch():
    """With Powell's test on, it too is decided on the gradient pair of the batch the search ran on.

    Step 1 searches batch A (a quadratic) from x0, landing near its minimum along −g_A(x0), where g_A(x1) is
    almost orthogonal to g_A(x0): no restart. Step 2 switches to batch B, a linear function whose gradient is
    g_A(x0): parallel to the old gradient, which a test on the new batch's gradient would take for a restart.
    """
    a = torch.diag(torch.tensor([1.0, 3.0], dtype=torch.float64))
    x0 = torch.tensor([1.0, 1.0], dtype=torch.float64)
    x = x0.clone().requires_grad_(True)
    opt = ConjugateGradient([x], powell_restart=True, restart_every=100)
    batch = ["A"]

    def closure():
        xd = x.detach()
        x.grad = a @ xd if batch[0] == "A" else a @ x0
        return 0.5 * float(xd @ a @ xd) if batch[0] == "A" else float(a @ x0 @ xd)

    opt.step(closure)
    batch[0] = "B"
    opt.step(closure)
    assert opt.stats["iterations"] == 2
    assert opt.stats["restart_reasons"] == reasons(first=1)


def test_a_direction_orthogonal_to_the_gradient_is_not_descent():
    """g·d = 0 exactly is no descent direction: restart to −g (½x², fixed step 2 from 1 lands on −1, where FR's
    −g + βd is 0·g); the step goes on."""
    x = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], lr=2.0, beta="fr", line_search="fixed", max_iter=2, restart_every=100)
    opt.step(recording_closure(x, lambda xd: xd, []))
    assert opt.stats["restart_reasons"] == reasons(first=1, non_descent=1)
    assert x.item() == 1.0


def test_direction_buffers_are_reused_across_restarts():
    """A restart writes −g into the direction buffer it has: no new tensor per iteration."""
    problem = quadratic(6, 10.0, "uniform", seed=0)
    x = start(problem)
    opt = ConjugateGradient([x], line_search="exact", restart_every=1)
    closure = quadratic_closure([x], problem)
    opt.step(closure)
    buffer = opt.state[x]["d"]
    for _ in range(3):
        opt.step(closure)
    assert opt.state[x]["d"] is buffer and opt.stats["restart_reasons"] == reasons(first=1, periodic=3)


def test_a_search_without_decrease_gives_up_after_max_ls():
    """A closure whose loss only rises along the descent its gradient promises: the strong-Wolfe search stops
    after max_ls further calls (25 by default) plus one, and leaves x where it was."""
    for kwargs, calls in (({}, 27), ({"max_ls": 3}, 5)):
        x = torch.zeros(2, dtype=torch.float64, requires_grad=True)
        opt = ConjugateGradient([x], tolerance_change=0.0, **kwargs)

        def closure(x=x):
            x.grad = torch.ones_like(x)
            return -x.detach().sum()

        opt.step(closure)
        assert opt.stats["func_evals"] == calls and torch.equal(x.detach(), torch.zeros(2, dtype=torch.float64))


def test_zero_tolerances_are_valid():
    """tolerance_grad = tolerance_change = 0 (run every iteration) is accepted and still converges."""
    problem = quadratic(5, 10.0, "uniform", seed=0)
    x = start(problem)
    opt = ConjugateGradient([x], line_search="exact", max_iter=5, tolerance_grad=0.0, tolerance_change=0.0)
    opt.step(quadratic_closure([x], problem))
    assert rel_error(x, problem) <= 1e-9


def test_sparse_gradients_follow_the_dense_trajectory():
    """A sparse gradient (an embedding's) is densified: the iterates are those of the same dense gradient."""
    problem = quadratic(6, 10.0, "uniform", seed=0)
    dense, sparse = start(problem), start(problem)
    for x, layout in ((dense, torch.Tensor.clone), (sparse, torch.Tensor.to_sparse)):
        opt = ConjugateGradient([x], line_search="exact", max_iter=4)
        opt.step(recording_closure(x, lambda xd, layout=layout: layout(problem.A @ xd - problem.b), []))
    torch.testing.assert_close(sparse.detach(), dense.detach(), rtol=0, atol=0)
    assert rel_error(dense, problem) < 1


def test_hager_zhang_without_a_scale_is_not_truncated():
    """The HZ floor −1/(‖d‖ min(0.01, ‖g_prev‖)) needs ‖d‖ and ‖g_prev‖ > 0; without one, β^N stands."""
    from gradeff.axes.optim.cg_direction import _beta

    assert _beta("hz", 1.0, -100.0, 1.0, 1.0, 0.0, 4.0, 0.0) == pytest.approx(-100.0)
    assert _beta("hz", 1.0, -100.0, 1.0, 1.0, 0.0, 0.0, 1.0) == pytest.approx(-100.0)
