"""Beyond one process: a selection split into shards the same way on every machine (:mod:`.shard`), and the shards
launched through submitit, on Slurm or as local processes, then merged (:mod:`.launch`).

May import: :mod:`gradeff.cell` and everything below it; never the front doors.
"""
