"""The axes of a grid, each a registry of frozen specs: the models (:mod:`.models`), the optimizers (:mod:`.optim`),
the memory strategies (:mod:`.strategies`), the fine-tuning methods (:mod:`.methods`) and the datasets
(:mod:`.data`). A cell is one value on each; the studies (:mod:`gradeff.studies`) cross them.

May import: :mod:`gradeff.specs` and :mod:`gradeff.meters`, and each other (one floor, one-way: the cycle test keeps
it so). Nothing is imported here, so importing one axis loads no other.
"""
