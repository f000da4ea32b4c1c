"""Cell ids and markers are public API: lock what -k and -m select."""

import subprocess
import sys

import pytest

OPTIMIZER_KEYS = ["sgd", "adam", "adamw", "adagrad", "adadelta", "cgd"]


def _collected(result: pytest.RunResult) -> list[str]:
    return [line.split("[", 1)[1].rstrip("]") for line in result.outlines if "::test_cell[" in line]


def test_k_llm_and_accum_selects_exactly_six_cells(grid_pytester):
    """`-k "llm and accum"` selects the six llm accumulation cells and nothing else."""
    result = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "-k", "llm and accum")
    assert _collected(result) == [f"llm-{opt}-accum" for opt in OPTIMIZER_KEYS]


def test_exact_cell_marker_separates_adam_from_adamw(grid_pytester):
    """`-m "cell(optimizer='adam')"` selects adam cells only; `-k adam` would also match adamw."""
    result = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                     "-m", "cell(optimizer='adam')")
    ids = _collected(result)
    assert len(ids) == 12
    assert all(cell.split("-")[1] == "adam" for cell in ids)
    loose = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "-k", "adam"))
    assert any("-adamw-" in cell for cell in loose)


def test_axis_options_select_and_validate_keys(grid_pytester):
    """--gradeff-models/--gradeff-optimizers select exact keys; an unknown key is a usage error naming the valid ones."""
    result = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "--gradeff-models=vit,llm",
                                     "--gradeff-optimizers=adam")
    assert _collected(result) == [f"{m}-adam-{s}" for m in ("vit", "llm") for s in ("standard", "checkpoint", "accum")]
    bad = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "--gradeff-optimizers=adan")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--gradeff-optimizers: unknown optimizer 'adan'; valid optimizers: sgd, adam, adamw*"])


def test_family_marker_selects_a_model(grid_pytester):
    """`-m multimodal` selects the 18 vlm cells."""
    ids = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "-m", "multimodal"))
    assert len(ids) == 18 and all(cell.startswith("vlm-") for cell in ids)


def test_collection_does_not_import_transformers(request):
    """Collecting the whole grid leaves transformers (and torch) unimported."""
    grid = request.config.rootpath / "benchmarks" / "test_grid.py"
    code = (
        "import sys, pytest\n"
        f"code = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', {str(grid)!r}])\n"
        "assert code == 0, code\n"
        "print('IMPORTED', sorted(m for m in ('transformers', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=request.config.rootpath).stdout
    assert "72 tests collected" in out
    assert "IMPORTED []" in out
