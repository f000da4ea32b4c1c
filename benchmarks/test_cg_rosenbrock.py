"""Conjugate gradient on chained Rosenbrock: function evaluations to SciPy CG's tolerance, against SciPy CG.

f(x) = Σ 100(x_{i+1} − x_i²)² + (1 − x_i)² (SciPy's ``rosen``) from (−1.2, 1, −1.2, 1, …), with its
analytic gradient, until max |∇f| ≤ 1e-5 (SciPy CG's default ``gtol``). One closure call evaluates
f and ∇f together, as one SciPy ``nfev`` does. Each parameter is one dimension and one β rule with
the default strong-Wolfe search; closure calls, iterations, restarts and SciPy's count go into
``extra_info``. The default rule must stay within 3× SciPy's evaluations.
"""

import inspect

import pytest
import torch

from gradeff.axes.optim.cg import BETA_RULES, ConjugateGradient

# torch on the session's --gradeff-threads, as a cell trains, never one thread per core beside another worker.
pytestmark = pytest.mark.usefixtures("gradeff_threads")

DIMENSIONS = (2, 10, 20, 100)
GTOL = 1e-5
# scipy.optimize.minimize(rosen, x0, method="CG", jac=rosen_der).nfev at gtol = 1e-5, measured with
# SciPy 1.17.1: used where SciPy is not installed.
SCIPY_CG_NFEV = {2: 78, 10: 539, 20: 725, 100: 1929}
DEFAULT_BETA = inspect.signature(ConjugateGradient).parameters["beta"].default


def _scipy_nfev(n: int) -> tuple[int, str]:
    try:  # scipy is optional here: without it, the recorded figures stand in
        import numpy as np  # noqa: PLC0415
        import scipy  # noqa: PLC0415
        from scipy.optimize import minimize, rosen, rosen_der  # noqa: PLC0415
    except ImportError:
        return SCIPY_CG_NFEV[n], "SciPy 1.17.1 (recorded)"
    result = minimize(rosen, np.array([-1.2, 1.0] * (n // 2)), method="CG", jac=rosen_der, options={"gtol": GTOL})
    return result.nfev, f"SciPy {scipy.__version__}"


def _minimise(n: int, beta: str) -> dict:
    x = torch.tensor([-1.2, 1.0] * (n // 2), dtype=torch.float64, requires_grad=True)
    optimizer = ConjugateGradient([x], beta=beta, max_iter=100_000, tolerance_grad=GTOL)

    def closure():
        optimizer.zero_grad()
        loss = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    stats = optimizer.stats
    return {"closure_calls": stats["func_evals"], "iterations": stats["iterations"], "restarts": stats["restarts"],
            "max_abs_grad": float(x.grad.abs().max()), "max_error": float((x.detach() - 1).abs().max())}


@pytest.mark.parametrize("beta", BETA_RULES)
@pytest.mark.parametrize("n", DIMENSIONS, ids=lambda n: f"n{n}")
def test_cg_evaluations_on_rosenbrock(benchmark, n, beta):
    """Closure calls to max|g| ≤ 1e-5 from (−1.2, 1, …), beside SciPy CG's nfev; the default rule ≤ 3×."""
    benchmark.group = "cg-rosenbrock"
    result = benchmark.pedantic(_minimise, args=(n, beta), rounds=3)
    scipy_nfev, scipy_source = _scipy_nfev(n)
    ratio = result["closure_calls"] / scipy_nfev
    benchmark.extra_info.update(n=n, beta=beta, scipy_nfev=scipy_nfev, scipy=scipy_source, ratio=ratio, **result)
    print(f"\nCG {beta:>3} n={n:>3}: {result['closure_calls']} closure calls, {result['iterations']} iterations, "
          f"{result['restarts']} restarts; {scipy_source} CG: {scipy_nfev} ({ratio:.2f}x)")
    assert result["max_abs_grad"] <= GTOL
    if beta == DEFAULT_BETA:
        assert ratio <= 3.0
