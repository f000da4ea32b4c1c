"""One cell's path from its settings to its record.

``plan``: what a cell runs with, resolved once before anything is built (its hyper-parameters, its data, whether it
can run at all). ``execute``: how a cell runs besides one training here (in a process of its own, or as a rate search
and its reported run). ``record``: the one builder of a :class:`gradeff.records.results.CellRecord`. The runner
(:mod:`gradeff.cell.run`: the dispatch and one training), the public fixtures (:mod:`gradeff.pytest.fixtures`), the
dry run and a sharded cell's coordinator (:mod:`gradeff.cell.distributed`) all go through them, so a cell is planned and
recorded one way whoever runs it.

May import: the floors below it (the specs, meters, axes, studies, records, analysis, gate and report); never
:mod:`gradeff.scale` or the front doors.
"""
