"""Beyond one process: a selection split into shards the same way on every machine (:mod:`.shard`), and ``gradeff
launch``, which runs them through submitit on a Slurm cluster or as local processes (:mod:`.launch`, the
orchestration): each shard's job sized from the dry run or earlier records (:mod:`.resources`), Slurm's side
(whether a cluster answers, the array's sbatch parameters, sacct's states: :mod:`.slurm`), the callable each job runs,
which stops so that a requeued shard resumes (:mod:`.shard_job`), the launch's folder (:mod:`.manifest`), where its
shards stand (:mod:`.status`) and their records merged, nothing silently missing (:mod:`.collect`); the commands
``gradeff launch`` (:mod:`.launch_command`), ``gradeff ab`` and ``gradeff history`` (:mod:`.side_by_side_commands`).

May import: :mod:`gradeff.cell` and everything below it; never the front doors.
"""
