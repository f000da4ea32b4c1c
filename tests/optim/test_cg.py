"""Laws of gradeff.optim.cg.ConjugateGradient on quadratics and Rosenbrock."""

import copy
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradeff.optim.cg import BETA_RULES, LINE_SEARCHES, ConjugateGradient

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


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics())
def test_exact_line_search_terminates_in_n_iterations(beta, problem):
    """With exact line searches every β rule solves an SPD quadratic in n iterations."""
    x = start(problem)
    # Powell's test stays on: exact searches keep consecutive gradients
    # orthogonal, so it never fires and the n-step law holds with it.
    opt = ConjugateGradient(
        [x], beta=beta, line_search="exact", max_iter=problem.n, restart_every=problem.n
    )
    opt.step(quadratic_closure([x], problem))
    assert rel_error(x, problem) <= 1e-6


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics())
def test_strong_wolfe_converges_within_5n_iterations(beta, problem):
    """Under a strong-Wolfe search every β rule reaches x* = A⁻¹b within 5n iterations."""
    x = start(problem)
    # c2 = 0.01 rather than the default 0.1: accepting |φ'(t)| up to 0.1|φ'(0)|
    # costs conjugacy, and small ill-conditioned cases (n = 5, κ = 1e3) were
    # measured to need up to ~6n iterations; with 0.01 the worst of 28 000
    # sampled problems needed 3n.
    opt = ConjugateGradient(
        [x], beta=beta, max_iter=5 * problem.n, restart_every=problem.n, c2=0.01
    )
    opt.step(quadratic_closure([x], problem))
    assert rel_error(x, problem) <= 1e-6


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics(max_n=40))
def test_strong_wolfe_decreases_f_monotonically(beta, problem):
    """Each strong-Wolfe iteration (default constants) never increases f."""
    x = start(problem)
    opt = ConjugateGradient([x], beta=beta)
    closure = quadratic_closure([x], problem)
    losses = [float(opt.step(closure)) for _ in range(2 * problem.n)]
    assert all(after <= before for before, after in zip(losses, losses[1:]))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("beta", BETA_RULES)
@PROPERTY
@given(problem=spd_quadratics())
def test_first_iteration_is_steepest_descent_with_exact_step(beta, problem):
    """The first iteration is x1 = x0 − (gᵀg / gᵀAg) g."""
    x0 = torch.linspace(-1.0, 1.0, problem.n, dtype=torch.float64)
    x = x0.clone().requires_grad_(True)
    opt = ConjugateGradient([x], beta=beta, line_search="exact")
    opt.step(quadratic_closure([x], problem))
    g = problem.A @ x0 - problem.b
    expected = x0 - (g @ g) / (g @ problem.A @ g) * g
    torch.testing.assert_close(x.detach(), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n", [2, 10])
def test_rosenbrock_converges_to_ones(n):
    """PR+ with strong Wolfe takes chained Rosenbrock from (−1.2, 1, …) to all ones."""
    x = torch.tensor([-1.2, 1.0] * (n // 2), dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], beta="pr+", line_search="strong_wolfe", max_iter=1000)

    def closure():
        opt.zero_grad()
        loss = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    torch.testing.assert_close(x.detach(), torch.ones(n, dtype=torch.float64), rtol=0, atol=1e-4)


@pytest.mark.parametrize("line_search", ["exact", "strong_wolfe"])
def test_split_parameters_follow_the_flat_trajectory(line_search):
    """Splitting x over tensors of different shapes does not change the iterates."""
    problem = quadratic(20, 1e3, "uniform", seed=0)
    flat = start(problem)
    parts = [torch.zeros(3, 4, dtype=torch.float64, requires_grad=True),
             torch.zeros(8, dtype=torch.float64, requires_grad=True)]
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
BETA_FORMULAS = {
    "fr": lambda g1, g0, d0: (g1 @ g1) / (g0 @ g0),
    "pr+": lambda g1, g0, d0: max(0.0, float(g1 @ (g1 - g0) / (g0 @ g0))),
    "hs": lambda g1, g0, d0: (g1 @ (g1 - g0)) / (d0 @ (g1 - g0)),
    "dy": lambda g1, g0, d0: (g1 @ g1) / (d0 @ (g1 - g0)),
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
    # HS < 0 is kept) and every d1 is a descent direction, so a mixed-up rule
    # cannot pass.
    betas = {rule: float(f(g1, g0, -g0)) for rule, f in BETA_FORMULAS.items()}
    assert len({round(b, 6) for b in betas.values()}) == len(BETA_RULES)
    d1 = -g1 - betas[beta] * g0
    assert float(g1 @ d1) < 0
    torch.testing.assert_close(x.detach(), x1 + lr * d1, rtol=1e-12, atol=1e-14)


def test_non_descent_direction_resets_to_steepest_descent():
    """When −g + βd is not a descent direction the step falls back to −g."""
    x = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    opt = ConjugateGradient([x], lr=2.5, beta="fr", line_search="fixed", max_iter=2,
                            restart_every=100, powell_restart=False)

    def closure():
        x.grad = x.detach().clone()
        return 0.5 * float(x.detach() @ x.detach())

    opt.step(closure)
    # x1 = 1 − 2.5 = −1.5, g1 = −1.5, β_FR = 2.25, −g1 + β·d0 = −0.75 points
    # uphill (g1·d = 1.125), so the second step uses −g1 = 1.5 instead.
    torch.testing.assert_close(x.detach(), torch.tensor([-1.5 + 2.5 * 1.5], dtype=torch.float64))
    assert opt.state[x]["restarts"] == 2


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
    with pytest.raises(ValueError, match="beta") as info:
        ConjugateGradient([torch.zeros(2, requires_grad=True)], beta="cd")
    assert all(rule in str(info.value) for rule in BETA_RULES)


def test_unknown_line_search_lists_valid_choices():
    """An unknown line search raises ValueError naming every valid one."""
    with pytest.raises(ValueError, match="line_search") as info:
        ConjugateGradient([torch.zeros(2, requires_grad=True)], line_search="armijo")
    assert all(name in str(info.value) for name in LINE_SEARCHES)


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
        {"c2": 1.0},
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
    with pytest.raises(ValueError, match="parameter groups"):
        ConjugateGradient(groups)


def test_step_without_closure_raises():
    """step() without a closure raises an error explaining what the closure must do."""
    opt = ConjugateGradient([torch.zeros(2, requires_grad=True)])
    with pytest.raises(RuntimeError, match="requires a closure"):
        opt.step()
