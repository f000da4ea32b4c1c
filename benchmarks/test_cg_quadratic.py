"""Conjugate gradient on quadratics: iterations to the analytic solution against the dimension n.

With an exact line search, nonlinear CG on f(x) = ½xᵀAx − bᵀx is linear CG and reaches A⁻¹b in
at most n iterations (fewer when A has repeated eigenvalues). Each parameter is one dimension
and one condition number; the measured iterations and closure calls go into ``extra_info``.
"""

import pytest
import torch

from gradeff.axes.optim.cg import BETA_RULES, ConjugateGradient

# torch on the session's --gradeff-threads, as a cell trains, never one thread per core beside another worker.
pytestmark = pytest.mark.usefixtures("gradeff_threads")

DIMENSIONS = (10, 25, 50, 100)
TOLERANCE = 1e-6


def _problem(n: int, kappa: float, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    eigenvalues = torch.linspace(1.0, kappa, n, dtype=torch.float64)
    a = q @ torch.diag(eigenvalues) @ q.T
    b = torch.randn(n, generator=generator, dtype=torch.float64)
    return a, b, torch.linalg.solve(a, b)


def _iterations_to_solution(n: int, kappa: float, beta: str) -> tuple[int, int]:
    a, b, solution = _problem(n, kappa)
    x = torch.zeros(n, dtype=torch.float64, requires_grad=True)
    optimizer = ConjugateGradient([x], beta=beta, line_search="exact", max_iter=1, restart_every=n)

    def closure():
        optimizer.zero_grad()
        with torch.no_grad():
            x.grad = a @ x - b
            return 0.5 * x @ (a @ x) - b @ x

    for iteration in range(1, 3 * n + 1):
        optimizer.step(closure)
        if torch.linalg.norm(x.detach() - solution) / torch.linalg.norm(solution) <= TOLERANCE:
            return iteration, optimizer.state[x]["func_evals"]
    return 3 * n + 1, optimizer.state[x]["func_evals"]


@pytest.mark.parametrize("beta", BETA_RULES)
@pytest.mark.parametrize("n", DIMENSIONS, ids=lambda n: f"n{n}")
def test_cg_iterations_to_analytic_solution(benchmark, n, beta):
    """Exact-line-search CG reaches A⁻¹b (relative error ≤ 1e-6) within n iterations, κ = 100."""
    benchmark.group = "cg-quadratic"
    iterations, evaluations = benchmark.pedantic(_iterations_to_solution, args=(n, 100.0, beta), rounds=3)
    benchmark.extra_info.update(n=n, beta=beta, iterations=iterations, closure_calls=evaluations)
    print(f"\nCG {beta:>3} n={n:>3}: {iterations} iterations, {evaluations} closure calls")
    assert iterations <= n
