"""The studies: each study's spec, which its grids name (:mod:`.study`); each grid's product of axes, its cells,
their ids and why a cell cannot run (:mod:`.grid`); a cell's hyper-parameters put together from its specs
(:mod:`.hparams`); a user's own entries on the axes (:mod:`.extend`); the foundation-model baselines
(:mod:`.baselines`).

May import: the axes, :mod:`gradeff.meters` and :mod:`gradeff.specs`.
"""
