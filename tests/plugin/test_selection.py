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
    """--gradeff-models/--gradeff-optimizers run exact keys; an unknown key is a usage error naming the valid ones."""
    result = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "--gradeff-models=vit,llm",
                                     "--gradeff-optimizers=adam", "-m", "main")
    assert _collected(result) == [f"{m}-adam-{s}" for m in ("vit", "llm") for s in ("standard", "checkpoint", "accum")]
    bad = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "--gradeff-optimizers=adan")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--gradeff-optimizers: unknown optimizer 'adan'; valid optimizers: sgd, adam, adamw*"])


def test_axis_options_extend_a_grid_beyond_its_own_keys(grid_pytester):
    """--gradeff-methods lora runs the main study with LoRA; --gradeff-optimizers sgd the PEFT study with SGD."""
    main = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                              "--gradeff-methods=lora", "-m", "main"))
    assert len(main) == 72 and main[0] == "vit-sgd-standard-lora" and all(c.endswith("-lora") for c in main)
    peft = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                              "--gradeff-optimizers=sgd", "--gradeff-models=vit_s", "-m", "peft"))
    assert len(peft) == 20 and peft[0] == "vit_s-full-standard-cifar100-sgd"


def test_a_model_from_the_other_study_trains_on_its_own_kind_of_data(grid_pytester):
    """The PEFT grid with the LLM: its cells fine-tune on the LLM's own text task, not on image datasets."""
    ids = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                             "--gradeff-models=llm", "-m", "peft"))
    assert ids[:2] == ["llm-full-standard-causal_lm", "llm-full-checkpoint-causal_lm"] and len(ids) == 15


def test_family_marker_selects_a_model(grid_pytester):
    """`-m multimodal` selects the 18 vlm cells."""
    ids = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "-m", "multimodal"))
    assert len(ids) == 18 and all(cell.startswith("vlm-") for cell in ids)


def test_collection_does_not_import_transformers(request):
    """Collecting both grids leaves transformers, torch, peft and bitsandbytes unimported."""
    benchmarks = request.config.rootpath / "benchmarks"
    grids = [str(benchmarks / name)
             for name in ("test_grid.py", "test_peft_grid.py", "test_memory_grid.py", "test_baselines_grid.py")]
    code = (
        "import sys, pytest\n"
        f"code = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', *{grids!r}])\n"
        "assert code == 0, code\n"
        "print('IMPORTED', sorted(m for m in ('transformers', 'torch', 'peft', 'bitsandbytes', 'numpy')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=request.config.rootpath).stdout
    assert "190 tests collected" in out  # 72 main + 80 PEFT + 24 memory + 14 baselines cells
    assert "IMPORTED []" in out


def test_the_grid_marker_selects_every_grids_cells_and_none_of_the_suites_own_benchmarks(request):
    """`-m grid` (the README's main job) collects exactly the cells of every grid; `-m "not grid"` the harness's
    overhead and CG's test problems, which CI runs."""
    from gradeff.studies.grid import GRIDS, cells

    def collected(marker):
        out = subprocess.run([sys.executable, "-m", "pytest", str(request.config.rootpath / "benchmarks"), "-m", marker,
                              "--collect-only", "-q", "-p", "no:cacheprovider"], capture_output=True, text=True,
                             check=True, cwd=request.config.rootpath).stdout
        return [line for line in out.splitlines() if "::" in line]

    grid = collected("grid")
    assert sorted(line.split("[", 1)[1].rstrip("]") for line in grid) == sorted(
        cell.id for key in GRIDS for cell in cells(key))
    rest = collected("not grid")
    assert rest and {line.split("::")[0].rsplit("/", 1)[-1] for line in rest} == {
        "test_overhead.py", "test_cg_rosenbrock.py", "test_cg_quadratic.py"}


PEFT_BACKBONES = ["vit_s", "tinyvit", "vim_s", "mambavision_t"]


def test_k_backbone_and_method_selects_the_peft_cells(grid_pytester):
    """`-k "vit_s and lora"` selects ViT-S cells whose method contains "lora" (lora, adalora, qlora), nothing else:
    every strategy on CIFAR-100, the grid's first dataset, and the standard cells on DTD."""
    ids = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                             "-k", "vit_s and lora"))
    assert sorted(ids) == sorted([*(f"vit_s-{m}-{s}-cifar100" for m in ("lora", "adalora", "qlora")
                                    for s in ("standard", "checkpoint", "budget")),
                                  *(f"vit_s-{m}-standard-dtd" for m in ("lora", "adalora", "qlora"))])


def test_exact_method_marker_selects_qlora_only(grid_pytester):
    """`-m "cell(method='qlora')"` selects the 16 QLoRA cells: every backbone, and every strategy on the grid's first
    dataset; naming both datasets runs every strategy on each (24)."""
    ids = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                             "-m", "cell(method='qlora')"))
    assert sorted(ids) == sorted([*(f"{b}-qlora-{s}-cifar100" for b in PEFT_BACKBONES
                                    for s in ("standard", "checkpoint", "budget")),
                                  *(f"{b}-qlora-standard-dtd" for b in PEFT_BACKBONES)])
    both = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                              "--gradeff-datasets=cifar100,dtd", "-m", "cell(method='qlora')"))
    assert sorted(both) == sorted(f"{b}-qlora-{s}-{d}" for b in PEFT_BACKBONES
                                  for s in ("standard", "checkpoint", "budget") for d in ("cifar100", "dtd"))


def test_grid_marker_and_dataset_option_select_the_peft_grid(grid_pytester):
    """`-m peft` selects the 80 PEFT cells; --gradeff-datasets=dtd keeps the 60 DTD ones (every strategy: DTD is then
    the grid's only dataset); a typo names the valid keys."""
    assert len(_collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                                  "-m", "peft"))) == 80
    ids = _collected(grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q",
                                             "--gradeff-datasets=dtd", "-m", "peft"))
    assert len(ids) == 60 and all(cell.endswith("-dtd") for cell in ids)
    bad = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "--collect-only", "-q", "--gradeff-methods=lorra")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--gradeff-methods: unknown method 'lorra'; valid methods: full, lora, adalora*"])
