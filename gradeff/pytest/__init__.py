"""The pytest layer: what a pytest session adds around the cells.

``plugin`` (hooks: options, collection, the session's end) → ``options`` (every ``--gradeff-*`` option checked into
one ``Settings``), ``fixtures`` (the grid's ``cell`` fixture and the public ``gradeff_*`` fixtures), ``summary`` and
``progress`` (what the terminal shows), ``dryrun`` (``--gradeff-dry-run``), ``gate`` (the session's records and
selection handed to :func:`gradeff.gate.compare.run`). Imports run one way: this package reads the cell
(:mod:`gradeff.cell`, :mod:`gradeff.cell.run`) and the core, and nothing outside it imports it
(``tests/test_architecture.py``).

May import: anything below it; nothing but the plugin's public name (:mod:`gradeff.pytest_plugin`) imports it.
"""
