"""The report's Jinja templates, installed as the package ``gradeff.report.templates`` (see pyproject.toml).

A package so that an editable install finds this folder as well as a wheel does; the templates are the ``.j2``
files next to this one. To change the report without editing them, put templates of the same names in a
folder of your own and pass it to ``gradeff report --templates DIR`` (or set ``GRADEFF_TEMPLATES``).
"""
