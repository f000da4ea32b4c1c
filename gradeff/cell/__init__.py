"""One cell's path from its settings to its record.

``record``: the one builder of a :class:`gradeff.results.CellRecord`, used by a grid cell
(:mod:`gradeff.runner`), a sharded cell that left no record (:mod:`gradeff.distributed`) and a benchmark of the
user's own (:mod:`gradeff.fixtures`), so that every record carries the same identity, data, weights and environment
fields, filled the same way.
"""
