"""Where the report's templates come from: the checkout's reports/templates, and a user's folder searched first."""

import zipfile
from pathlib import Path

import jinja2
import pytest

from gradeff.cli import main
from gradeff.records.exits import EXIT_BAD_INPUT, EXIT_OK
from gradeff.records.store import append_record
from gradeff.report import build_view, jinja_environment, render_html, write_report
from gradeff.report.render import TEMPLATES_ENV, ResourceLoader, packaged_templates

CHECKOUT = Path(__file__).resolve().parents[2]
TEMPLATE_NAMES = ["base.html.j2", "history.html.j2", "macros.html.j2", "report.html.j2"]
# A page shell of the user's: the packaged report.html.j2 extends it by name.
SHELL = ("<!DOCTYPE html>\n<html><head><title>{{ view.title }}</title></head>\n"
         "<body><p class=\"custom-shell\">{{ view.title }}</p>{% block content %}{% endblock %}</body></html>\n")
PACKAGED_STYLE = "--ink: #1f2328"  # in the packaged base.html.j2's stylesheet


@pytest.fixture(autouse=True)
def no_user_templates(monkeypatch):
    """A GRADEFF_TEMPLATES set in the caller's shell must not leak into these tests."""
    monkeypatch.delenv(TEMPLATES_ENV, raising=False)


@pytest.fixture
def shell_folder(tmp_path):
    """A user folder that replaces base.html.j2 only."""
    folder = tmp_path / "my-templates"
    folder.mkdir()
    (folder / "base.html.j2").write_text(SHELL, encoding="utf-8")
    return folder


def test_the_checkout_renders_its_reports_templates():
    """Run from the source tree (editable install or not), the report reads reports/templates/, the one copy."""
    env = jinja_environment()
    assert Path(env.get_template("report.html.j2").filename) == CHECKOUT / "reports" / "templates" / "report.html.j2"
    assert Path(str(packaged_templates())) == CHECKOUT / "reports" / "templates"
    assert env.list_templates() == TEMPLATE_NAMES
    assert not (CHECKOUT / "gradeff" / "report_templates").exists()
    assert not list((CHECKOUT / "gradeff").rglob("*.j2"))


def test_templates_inside_a_zip_render_the_same(tmp_path):
    """The loader reads any importlib.resources folder (a zipped install too), not only files on disk."""
    archive = tmp_path / "templates.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted(packaged_templates().iterdir()):
            if path.name.endswith(".j2"):
                out.write(path, f"gradeff/report/templates/{path.name}")
    loader = ResourceLoader(zipfile.Path(archive, "gradeff/report/templates/"))
    env = jinja_environment()
    zipped = jinja2.Environment(loader=loader, autoescape=env.autoescape, undefined=env.undefined,
                                trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    assert loader.list_templates() == TEMPLATE_NAMES
    view = build_view([], generated_at="2026-01-01 00:00 UTC")
    assert zipped.get_template("report.html.j2").render(view=view) == render_html(view)
    with pytest.raises(jinja2.TemplateNotFound):
        zipped.get_template("../report.html.j2")


def test_a_user_template_replaces_the_packaged_one_of_its_name(grid_records, shell_folder, tmp_path):
    """base.html.j2 from the user's folder; report.html.j2 and macros.html.j2 still from the package."""
    html = write_report(grid_records, tmp_path / "report.html", title="<b>mine</b>",
                        templates=shell_folder).read_text(encoding="utf-8")
    assert '<p class="custom-shell">&lt;b&gt;mine&lt;/b&gt;</p>' in html  # autoescape holds for user templates
    assert PACKAGED_STYLE not in html
    assert 'id="answer"' in html and "<table" in html  # the packaged report.html.j2 and its macros
    plain = render_html(build_view(grid_records))
    assert PACKAGED_STYLE in plain and "custom-shell" not in plain


def test_user_templates_run_with_strict_undefined(shell_folder):
    """A user template that prints a field the view lacks fails, as the packaged ones do."""
    (shell_folder / "base.html.j2").write_text(SHELL.replace("view.title }}</p>", "view.subtitle }}</p>"),
                                               encoding="utf-8")
    env = jinja_environment(shell_folder)
    assert env.undefined is jinja2.StrictUndefined and env.autoescape("base.html.j2") is True
    with pytest.raises(jinja2.UndefinedError, match="subtitle"):
        render_html(build_view([]), templates=shell_folder)


def test_the_environment_variable_names_the_folder(shell_folder, monkeypatch):
    """GRADEFF_TEMPLATES is the default folder (the pytest plugin's --gradeff-report reads it too)."""
    monkeypatch.setenv(TEMPLATES_ENV, str(shell_folder))
    assert "custom-shell" in render_html(build_view([]))
    assert jinja_environment() is jinja_environment(str(shell_folder)) is jinja_environment(shell_folder / ".")


def test_cli_templates_option(grid_records, shell_folder, tmp_path, monkeypatch, capsys):
    """--templates DIR renders with the folder and wins over GRADEFF_TEMPLATES; a missing folder exits 2."""
    results = tmp_path / "results.jsonl"
    for record in grid_records[:6]:
        append_record(results, record)
    monkeypatch.setenv(TEMPLATES_ENV, str(tmp_path / "elsewhere"))  # not a folder: the option must win
    out = tmp_path / "report.html"
    assert main(["report", str(results), "-o", str(out), "--templates", str(shell_folder)]) == EXIT_OK
    assert "custom-shell" in out.read_text(encoding="utf-8")

    missing = tmp_path / "no-such-folder"
    out2 = tmp_path / "report2.html"
    assert main(["report", str(results), "-o", str(out2), "--templates", str(missing)]) == EXIT_BAD_INPUT
    assert f"template folder {missing} is not a folder" in capsys.readouterr().err
    assert not out2.exists()
    assert main(["report", str(results), "-o", str(out2)]) == EXIT_BAD_INPUT  # the variable's folder is missing
    assert f"${TEMPLATES_ENV}" in capsys.readouterr().err
    # A CSV table does not use templates.
    assert main(["report", str(results), "-o", str(tmp_path / "t.csv")]) == EXIT_OK
