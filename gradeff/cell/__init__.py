"""One cell's path from its settings to its record.

``plan``: what a cell runs with, resolved once before anything is built (its hyper-parameters, its data, whether it
can run at all). ``execute``: how a cell runs besides one training here (in a process of its own, or as a rate search
and its reported run). ``record``: the one builder of a :class:`gradeff.results.CellRecord`. The runner
(:mod:`gradeff.runner`: the dispatch and one training), the public fixtures (:mod:`gradeff.pytest.fixtures`), the
dry run and a sharded cell's coordinator (:mod:`gradeff.distributed`) all go through them, so a cell is planned and
recorded one way whoever runs it.
"""
