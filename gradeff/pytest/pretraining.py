"""The backbones of the selected fine-tuning cells pretrained before the first cell, each once per machine: under
pytest-xdist the workers pretrain different backbones side by side."""

from __future__ import annotations

import pytest

from gradeff.cell.devices import resolve_device
from gradeff.cell.pretrain import pretrain_ahead
from gradeff.pytest.options import SETTINGS
from gradeff.pytest.schedule import fine_tuned_backbone

# gradeff.cell.arithmetic imports torch (2.3 s); the plugin loads this module in every pytest session, so the function
# that needs it imports it (noqa: PLC0415 - torch).

__all__ = ["pretrain_selected"]


def pretrain_selected(session: pytest.Session) -> None:
    """Pretrain the selected cells' backbones before the first cell, each by the process that claims it first
    (:func:`gradeff.cell.pretrain.pretrain_ahead`): under pytest-xdist the workers pretrain side by side. Not on
    xdist's controller (it runs no cell), nor in a session that runs none."""
    config = session.config
    if config.option.collectonly or config.pluginmanager.get_plugin("dsession") is not None or not session.items:
        return
    from gradeff.cell.arithmetic import intra_op_threads  # noqa: PLC0415 - torch, see the imports

    settings = config.stash[SETTINGS]
    needed = [(model, item.callspec.params.get("gradeff_seed", settings.seed)) for item in session.items
              if (model := fine_tuned_backbone(item)) is not None]
    if not needed:
        return
    # The cells' thread count: it is part of a pretraining's recipe (see gradeff.cell.pretrain).
    with intra_op_threads(settings.threads):
        pretrain_ahead(needed, settings.profile, local=dict(settings.weights), cache_dir=settings.cache_dir,
                       device=str(resolve_device(settings.device)))
