"""The report as installed: the package list, a built wheel that carries and renders its templates, and an editable
install that renders the source tree's reports/templates/.

The builds run on a copy of the source tree (pip builds in place, writing build/ and *.egg-info next to the
sources) and offline: setuptools from this environment, no index.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from gradeff.records.store import append_record

CHECKOUT = Path(__file__).resolve().parents[2]
TEMPLATES = CHECKOUT / "reports" / "templates"
TEMPLATE_NAMES = ("base.html.j2", "history.html.j2", "macros.html.j2", "report.html.j2")
BUILD_TIMEOUT_S = 120

# Run by the Python that has gradeff on its path: renders a results file with `gradeff report` and checks that
# gradeff and its templates came from under argv[1].
RENDER = """
import importlib.resources, sys
from pathlib import Path
import gradeff
from gradeff.cli import main
from gradeff.report import jinja_environment
home = Path(sys.argv[1]).resolve()
assert Path(gradeff.__file__).resolve().is_relative_to(home), gradeff.__file__
templates = Path(str(importlib.resources.files("gradeff.report.templates"))).resolve()
filename = Path(jinja_environment().get_template("report.html.j2").filename).resolve()
assert filename == templates / "report.html.j2", (filename, templates)
assert main(["report", sys.argv[2], "-o", sys.argv[3]]) == 0
print(templates)
"""


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    """What a build reads, copied: pyproject.toml, README.md, gradeff/, reports/templates/ and benchmarks/."""
    root = tmp_path_factory.mktemp("source") / "gradeff-src"
    root.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, root / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(CHECKOUT / "gradeff", root / "gradeff", ignore=ignore)
    shutil.copytree(TEMPLATES, root / "reports" / "templates", ignore=ignore)
    shutil.copytree(CHECKOUT / "benchmarks", root / "benchmarks", ignore=ignore)
    return root


@pytest.fixture
def results(tmp_path, grid_records) -> Path:
    path = tmp_path / "results.jsonl"
    for record in grid_records:
        append_record(path, record)
    return path


def _pip(python: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    return subprocess.run([python, "-m", "pip", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S, check=False)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADEFF_TEMPLATES", "PYTHONHOME")}
    return env | extra


def _site_packages() -> list[str]:
    return list(dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib")))


def test_pyproject_lists_every_package():
    """pyproject.toml lists its packages (the templates' mapping rules out finding them): none may be missing."""
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    on_disk = {".".join(init.parent.relative_to(CHECKOUT).parts) for init in (CHECKOUT / "gradeff").rglob("__init__.py")
               if "__pycache__" not in init.parts}
    assert set(setuptools["packages"]) == on_disk | {"gradeff.report.templates", "gradeff.benchmarks"}
    assert setuptools["package-dir"] == {"gradeff.report.templates": "reports/templates",
                                         "gradeff.benchmarks": "benchmarks"}
    assert setuptools["package-data"] == {"gradeff.report.templates": ["*.j2"], "gradeff.cell": ["tuned_rates.json"]}
    assert sorted(p.name for p in TEMPLATES.glob("*.j2")) == list(TEMPLATE_NAMES)


@pytest.mark.slow
def test_wheel_ships_the_templates_and_renders_from_them(source_copy, results, tmp_path):
    """The built wheel holds reports/templates/*.j2 as gradeff/report/templates/, and gradeff imported from the
    unpacked wheel (not from the checkout) renders a report with them."""
    started = time.perf_counter()
    dist = tmp_path / "dist"
    if importlib.util.find_spec("setuptools") is not None:
        built = _pip(sys.executable, "wheel", str(source_copy), "--no-deps", "--no-build-isolation", "--no-index",
                     "-w", str(dist), cwd=tmp_path)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    else:  # an isolated build fetches setuptools: possible only where the package index can be reached
        built = _pip(sys.executable, "wheel", str(source_copy), "--no-deps", "-w", str(dist), cwd=tmp_path)
        if built.returncode != 0:
            reason = (built.stderr.strip() or "no output").splitlines()[-1]
            pytest.skip(f"setuptools is not installed here and an isolated build could not fetch it: {reason}")
    (wheel,) = dist.glob("gradeff-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for name in TEMPLATE_NAMES:
            member = f"gradeff/report/templates/{name}"
            assert member in names, sorted(n for n in names if "template" in n)
            assert archive.read(member) == (TEMPLATES / name).read_bytes()  # the same one copy
        assert not any(n.startswith(("reports/", "gradeff/report_templates/")) for n in names)
        assert {"gradeff/report/__init__.py", "gradeff/analysis/__init__.py", "gradeff/report/render.py"} <= names
        # The tuned protocol's rates travel with the code that reads them.
        table = CHECKOUT / "gradeff" / "cell" / "tuned_rates.json"
        assert archive.read("gradeff/cell/tuned_rates.json") == table.read_bytes()
        archive.extractall(tmp_path / "unpacked")

    # -S: no site-packages .pth files, so no editable install of the checkout can answer the imports; the
    # dependencies come from this environment's site-packages, after the unpacked wheel.
    unpacked = tmp_path / "unpacked"
    out = tmp_path / "report.html"
    ran = subprocess.run(
        [sys.executable, "-S", "-c", RENDER, str(unpacked), str(results), str(out)], cwd=tmp_path,
        env=_clean_env(PYTHONPATH=os.pathsep.join([str(unpacked), *_site_packages()])),
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert Path(ran.stdout.strip()) == (unpacked / "gradeff" / "report" / "templates").resolve()
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and 'id="answer"' in html and "<svg" in html
    print(f"wheel built, unpacked and rendered in {time.perf_counter() - started:.1f} s")


@pytest.mark.slow
def test_editable_install_renders_the_source_tree_templates(source_copy, results, tmp_path):
    """`pip install -e .` (what scripts/setup.sh runs) maps gradeff.report.templates to reports/templates/:
    importlib.resources finds that folder and the report renders from it."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed here: an editable install cannot be built offline")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=BUILD_TIMEOUT_S)
    python = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # This environment's packages (pip, setuptools, the dependencies) on the new venv's path, without running
    # their .pth files: an editable install of the checkout made here must not answer for the copy.
    Path(purelib, "dependencies.pth").write_text("\n".join(_site_packages()) + "\n", encoding="utf-8")
    installed = _pip(python, "install", "--no-deps", "--no-build-isolation", "--no-index", "--ignore-installed",
                     "-e", str(source_copy), cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    out = tmp_path / "report.html"
    ran = subprocess.run([python, "-c", RENDER, str(source_copy), str(results), str(out)], cwd=tmp_path,
                         env=_clean_env(), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert Path(ran.stdout.strip()) == (source_copy / "reports" / "templates").resolve()
    assert 'id="answer"' in out.read_text(encoding="utf-8")

    # Another checkout run in place with that environment (its code first on sys.path) renders its own
    # templates, not those the editable install maps.
    other = tmp_path / "other-checkout"
    shutil.copytree(source_copy, other, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    probe = ("import gradeff; from gradeff.report import jinja_environment; "
             "print(gradeff.__file__); print(jinja_environment().get_template('report.html.j2').filename)")
    ran = subprocess.run([python, "-c", probe], cwd=other, env=_clean_env(), capture_output=True, text=True,
                         timeout=BUILD_TIMEOUT_S, check=False)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    code, template = map(Path, ran.stdout.split())
    assert code.resolve() == (other / "gradeff" / "__init__.py").resolve()
    assert template.resolve() == (other / "reports" / "templates" / "report.html.j2").resolve()
