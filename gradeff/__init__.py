"""gradeff: which optimizer and which memory strategy for your model on your hardware."""

import importlib

__version__ = "0.1.0"
__all__ = ["BATCH_KEYS", "__version__", "load", "move_batch"]

# The public names below are imported on first use, so `import gradeff` (every pytest session of an environment with
# gradeff installed loads its plugin) imports neither pandas nor torch:
#   load(paths) -> pandas.DataFrame: the records as one flat table;
#   move_batch(batch, device): a batch's tensors on a device, as the cells move theirs;
#   BATCH_KEYS: the tensors of a batch of each task kind, which every cell passes as model(**batch).
_PUBLIC = {"load": "gradeff.report.dataframe", "move_batch": "gradeff.cell.loop", "BATCH_KEYS": "gradeff.axes.data"}


def __getattr__(name: str):
    if name in _PUBLIC:

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'gradeff' has no attribute {name!r}")
