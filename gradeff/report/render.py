"""The report's Jinja side: where the templates are found, the environment they run in, rendering.

The templates are one folder, ``reports/templates/`` at the top of the source tree, packaged as
``gradeff.report.templates`` (pyproject.toml maps that package to the folder), and read through
:mod:`importlib.resources`: an editable install reads the source tree's files, a wheel its own copy.
A folder of the user's own (``gradeff report --templates DIR``, or the ``GRADEFF_TEMPLATES``
environment variable) is searched first: a template there replaces the packaged one of the same name,
and the templates it does not replace still come from the package (``report.html.j2`` extends
``base.html.j2`` and imports ``macros.html.j2`` by name, so replacing one of them is enough).

Templates run with autoescape on and ``StrictUndefined``, so a field name typo fails a test instead
of printing nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import (
    BaseLoader,
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    StrictUndefined,
    TemplateNotFound,
    select_autoescape,
)
from jinja2.loaders import split_template_path
from markupsafe import Markup

from gradeff.report.columns import hide_unmeasured_everywhere

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "TEMPLATE", "TEMPLATES_ENV", "TEMPLATES_PACKAGE", "ResourceLoader", "jinja_environment", "packaged_templates",
    "render_html", "resolve_template_folder",
]

TEMPLATE = "report.html.j2"
TEMPLATES_PACKAGE = "gradeff.report.templates"
TEMPLATES_ENV = "GRADEFF_TEMPLATES"


def packaged_templates() -> Traversable:
    """The folder of the packaged templates, as :func:`importlib.resources.files` finds it.

    Returns:
        The folder (a :class:`~pathlib.Path` when the templates are files on disk).

    Raises:
        ModuleNotFoundError: gradeff is neither installed nor imported from a source tree.
    """
    source = _source_tree_templates()
    try:
        found = resources.files(TEMPLATES_PACKAGE)
    except ModuleNotFoundError:
        if source is None:
            raise
        return source
    if source is not None and isinstance(found, Path) and found.resolve() != source:
        # The code and its templates come from one tree: an editable install of another checkout of gradeff in
        # the same environment must not lend this one its templates.
        return source
    return found


def _source_tree_templates() -> Path | None:
    # gradeff imported from a source tree: its reports/templates, the folder pyproject.toml maps. Needed when the
    # tree was never installed (PYTHONPATH=the tree, or `python -m pytest` at its root next to an install made
    # elsewhere): no import finder maps the templates package there.
    root = Path(__file__).resolve().parents[2]
    folder = root / "reports" / "templates"
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


def resolve_template_folder(templates: str | os.PathLike[str] | None = None) -> Path | None:
    """The user's template folder: ``templates`` if given, else ``$GRADEFF_TEMPLATES`` if set, else none.

    Raises:
        NotADirectoryError: the folder named does not exist or is not a folder.
    """
    chosen = templates if templates is not None else os.environ.get(TEMPLATES_ENV) or None
    if chosen is None:
        return None
    folder = Path(chosen).expanduser().resolve()
    if not folder.is_dir():
        source = "" if templates is not None else f" (from ${TEMPLATES_ENV})"
        raise NotADirectoryError(f"template folder {chosen}{source} is not a folder")
    return folder


def jinja_environment(templates: str | os.PathLike[str] | None = None) -> Environment:
    """The Jinja environment of the report templates: autoescape on for ``.j2``, ``StrictUndefined``.

    Args:
        templates: a folder searched before the packaged templates (see :func:`resolve_template_folder`).

    Returns:
        The environment, one per template folder.
    """
    folder = resolve_template_folder(templates)
    return _environment(None if folder is None else str(folder))


# Bidirectional controls (LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI, ALM, LRM, RLM): one in a name can
# make the page show "llm-adam-accum" for other characters, so each is replaced by a visible mark.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c\u200e\u200f"
_BIDI_MARKS = {ord(c): f"[U+{ord(c):04X}]" for c in BIDI_CONTROLS}


def neutralise_bidi(value: object) -> object:
    """Every bidirectional control in a printed value shown as ``[U+202E]``: the text reads in its real order
    and the mark flags that the name held one. Markup stays Markup (the marks contain no HTML)."""
    if isinstance(value, str) and any(c in value for c in BIDI_CONTROLS):
        text = str.translate(value, _BIDI_MARKS)
        return Markup(text) if isinstance(value, Markup) else text
    return value


@cache
def _environment(folder: str | None) -> Environment:
    # ``select_autoescape()``'s defaults do not match ``*.html.j2``, hence the explicit extensions.
    loader = ResourceLoader(packaged_templates())
    return Environment(
        loader=loader if folder is None else ChoiceLoader([FileSystemLoader(folder), loader]),
        autoescape=select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=neutralise_bidi,
    )


class ResourceLoader(BaseLoader):
    """Templates from an :mod:`importlib.resources` folder: on disk, in an installed wheel or in a zip."""

    def __init__(self, root: Traversable) -> None:
        self.root = root

    def get_source(self, environment: Environment, template: str) -> tuple[str, str | None, Callable[[], bool]]:
        resource = self.root
        for piece in split_template_path(template):
            resource = resource / piece
        if not resource.is_file():
            raise TemplateNotFound(template)
        source = resource.read_text(encoding="utf-8")
        if not isinstance(resource, Path):
            return source, None, lambda: True
        # A file on disk: its path names it in tracebacks, and an edited template is read again.
        mtime = resource.stat().st_mtime
        return source, str(resource), lambda: resource.is_file() and resource.stat().st_mtime == mtime

    def list_templates(self) -> list[str]:
        return sorted(entry.name for entry in self.root.iterdir() if entry.is_file() and entry.name.endswith(".j2"))


def render_html(view: object, template: str = TEMPLATE, *, templates: str | os.PathLike[str] | None = None) -> str:
    """Render a view model with a report template.

    Args:
        view: a :class:`~gradeff.report.view.ReportView` (any object with the same fields renders the same).
        template: template name, searched in ``templates`` first, then in the packaged templates.
        templates: the user's template folder (default ``$GRADEFF_TEMPLATES``, else none).

    Returns:
        The HTML page, without the columns that are ``n/a`` in every row (:mod:`gradeff.report.columns`).

    Raises:
        jinja2.UndefinedError: the template uses a field the view does not have.
        NotADirectoryError: the template folder named does not exist.
    """
    # The view keeps every column; the page leaves out those nothing measured on this run (GPU meters on a CPU
    # run), each table's note naming them: a column of n/a takes the width a measured one needs.
    return jinja_environment(templates).get_template(template).render(view=hide_unmeasured_everywhere(view))
