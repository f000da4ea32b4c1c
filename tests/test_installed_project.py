"""gradeff as a user installs it: a wheel in a fresh environment, used by a project of one's own outside this
checkout — the plugin loaded by its entry point, a conftest's ``pytest_gradeff_register``, the public fixtures, one
cell of the packaged grid (``--pyargs gradeff.benchmarks``), ``gradeff list`` and ``gradeff --version``.

Offline and small: the wheel is built without build isolation from this environment's setuptools, the new
environment reuses this one's installed dependencies (torch included) through a path file, and the project trains
two tiny one-epoch cells.
"""

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gradeff.records.store import read_records
from tests.report.test_packaging import BUILD_TIMEOUT_S, _clean_env, _pip, _site_packages, source_copy  # noqa: F401

CONFTEST = '''
from gradeff.axes.optim import OptimizerSpec


def pytest_gradeff_register(registries):
    registries.optimizers.register(OptimizerSpec(key="rmsprop", name="RMSprop", target="torch.optim:RMSprop",
                                                 state_per_param=1, step_counter=True))
'''

TEST_MINE = '''
import pytest


@pytest.mark.parametrize("gradeff_optimizer", ["rmsprop"], indirect=True)
@pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
def test_my_step(gradeff_model, gradeff_data, gradeff_optimizer, gradeff_meters):
    with gradeff_meters as meters:
        for epoch in range(gradeff_data.epochs):
            with meters.epoch() as log:
                for batch in gradeff_data.batches(epoch):
                    loss = gradeff_model(**batch).loss
                    loss.backward()
                    gradeff_optimizer.step()
                    gradeff_optimizer.zero_grad()
                    log.step(loss.item(), samples=len(batch["input_ids"]))
    assert gradeff_meters.record.status == "ok"
'''

# Where gradeff, its grids and its plugin were imported from, and the version its metadata gives.
PROBE = """
import importlib.metadata, gradeff, gradeff.benchmarks, gradeff.pytest_plugin
print(gradeff.__file__); print(gradeff.benchmarks.__file__); print(importlib.metadata.version("gradeff"))
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S * 2,
                          check=False)


@pytest.fixture(scope="module")
def installed(source_copy, tmp_path_factory) -> Path:  # noqa: F811
    """A fresh venv with the wheel of this checkout installed and this environment's dependencies on its path."""
    root = tmp_path_factory.mktemp("installed")
    dist = root / "dist"
    built = _pip(sys.executable, "wheel", str(source_copy), "--no-deps", "--no-build-isolation", "--no-index",
                 "-w", str(dist), cwd=root)
    if built.returncode != 0 and "No module named setuptools" in built.stderr:
        pytest.skip("setuptools is not installed here: the wheel cannot be built offline")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("gradeff-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=BUILD_TIMEOUT_S)
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout
    # This environment's packages after the venv's own, without running their .pth files: the checkout's editable
    # install stays inert, and --ignore-installed leaves it alone while the wheel goes into the venv.
    Path(purelib.strip(), "dependencies.pth").write_text("\n".join(_site_packages()) + "\n", encoding="utf-8")
    done = _pip(str(python), "install", "--no-deps", "--no-index", "--ignore-installed", str(wheel), cwd=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return venv


@pytest.mark.slow
def test_a_project_of_ones_own_runs_from_a_wheel(installed, tmp_path):
    """Outside the checkout, with nothing but the wheel: the conftest's optimizer joins the packaged main grid and the
    public fixtures, both cells are recorded, `gradeff list` names the conftest, `gradeff --version` the wheel's."""
    started = time.perf_counter()
    python, gradeff = str(installed / "bin" / "python"), str(installed / "bin" / "gradeff")
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(textwrap.dedent(CONFTEST), encoding="utf-8")
    (project / "test_mine.py").write_text(textwrap.dedent(TEST_MINE), encoding="utf-8")

    probe = _run([python, "-c", PROBE], project)
    assert probe.returncode == 0, probe.stderr[-3000:]
    code, grids, version = probe.stdout.split()
    assert Path(code).is_relative_to(installed) and Path(grids).is_relative_to(installed), probe.stdout

    results = project / "results" / "results.jsonl"
    # No -p, no pytest_plugins: the entry point loads the plugin; the grid comes from the installed package.
    ran = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py", "--pyargs",
                "gradeff.benchmarks.test_grid", "-k", "test_my_step or llm-rmsprop-standard", "--gradeff-epochs", "1",
                f"--gradeff-results={results}"], project)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-3000:]
    assert "2 passed" in ran.stdout, ran.stdout[-3000:]
    records = {(r.grid, r.cell): r for r in read_records(results)}
    assert set(records) == {("main", "llm-rmsprop-standard"), ("custom", "llm-rmsprop-my_step")}, sorted(records)
    assert all(r.status == "ok" and r.optimizer == "rmsprop" and len(r.epochs) == 1 for r in records.values())
    # The session's own records beside the results, for `gradeff compare BASELINE results/last-session.jsonl`.
    assert {r.cell for r in read_records(project / "results" / "last-session.jsonl")} == {c for _, c in records}

    listing = _run([gradeff, "list"], project)
    assert listing.returncode == 0, listing.stderr[-3000:]
    (line,) = [line for line in listing.stdout.splitlines() if line.split()[:2] == ["rmsprop", "RMSprop"]]
    assert line.endswith(f"({project / 'conftest.py'})"), line
    assert "  adam " in listing.stdout and "(built-in)" in listing.stdout
    assert _run([gradeff, "list", "optimizers"], project).stdout.split()[-1] == "rmsprop"
    shown = _run([gradeff, "--version"], project)
    assert shown.stdout.strip() == f"gradeff {version}", shown.stdout + shown.stderr
    assert not (project / ".pytest_cache").exists()
    print(f"the project ran from the wheel in {time.perf_counter() - started:.1f} s")


@pytest.mark.slow
def test_a_project_records_its_own_baseline_and_checks_against_it(installed, tmp_path):
    """`gradeff baseline record` from the wheel: the slice serially, then once per perturbation, both files written;
    `gradeff baseline check` passes the unchanged code and fails a baseline whose loss was moved."""
    import json

    gradeff = str(installed / "bin" / "gradeff")
    project = tmp_path / "project"
    project.mkdir()
    selection = ["--", "--pyargs", "gradeff.benchmarks.test_grid", "-k", "vit-sgd-standard", "--gradeff-epochs", "1",
                 f"--gradeff-results={project / 'results.jsonl'}"]
    recorded = _run([gradeff, "baseline", "record", "--out", "b.jsonl", *selection], project)
    assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-3000:]
    assert "1 cells (numerics probe v1:" in recorded.stderr and "and 3 perturbation runs" in recorded.stderr
    assert [r.cell for r in read_records(project / "b.jsonl")] == ["vit-sgd-standard"]
    assert len(list(read_records(project / "b.perturbed.jsonl"))) == 3
    checked = _run([gradeff, "baseline", "check", "b.jsonl", "--gate-args", "--ignore time_per_epoch", *selection],
                   project)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    line = json.loads((project / "b.jsonl").read_text(encoding="utf-8"))
    line["summary"]["final_loss"] *= 0.9
    (project / "b.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    moved = _run([gradeff, "baseline", "check", "b.jsonl", "--gate-args", "--ignore time_per_epoch", *selection],
                 project)
    assert moved.returncode == 1 and "regression" in moved.stdout.lower(), moved.stdout[-3000:]
