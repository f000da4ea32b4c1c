"""Shared helpers for the model builders: build on a device, or load local weights."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["classifier_builders", "instantiate"]


def instantiate(model_cls, config, *, weights_dir: str | Path | None, device, num_labels: int | None = None):
    """Instantiate ``model_cls`` from ``config`` (random init) or from a local weights directory.

    Loading never touches the network (``local_files_only``) and never runs repository code
    (no ``trust_remote_code``), so a benchmark run cannot silently download or execute anything.

    Args:
        num_labels: classes of the task head. When loading, a saved head of another size (or a
            folder saved without a head) gets a freshly initialised head of this size, as when a
            pretrained backbone is fine-tuned on a new dataset.
    """
    if weights_dir is not None:
        path = Path(weights_dir)
        if not path.is_dir():
            raise FileNotFoundError(f"weights directory {path} does not exist")
        from transformers.utils import logging  # noqa: PLC0415 - transformers, 1.4 s after torch: a saved folder only

        overrides = {} if num_labels is None else {"num_labels": num_labels, "ignore_mismatched_sizes": True}
        # A head re-initialised for a new dataset is the expected case, not news worth a load report.
        verbosity = logging.get_verbosity()
        logging.set_verbosity_error()
        try:
            return model_cls.from_pretrained(path, local_files_only=True, **overrides).to(device)
        finally:
            logging.set_verbosity(verbosity)
    # The meta device builds the module tree without allocating storage: paper-size
    # parameter counts cost milliseconds and no memory.
    with torch.device(device):
        return model_cls(config)


def classifier_builders(model_cls, config_cls, configs: dict[str, dict], *, resize=None):
    """The ``config(profile, *, num_labels, image_size)`` and ``build(profile, ...)`` functions of an image classifier.

    Every image classifier's module exposes the same two functions over its own ``CONFIGS``; this makes
    them once.

    Args:
        model_cls: the ``PreTrainedModel`` class with a classification head.
        config_cls: its configuration class.
        configs: profile → keyword arguments of ``config_cls``.
        resize: ``resize(kwargs, image_size) -> kwargs``: the configuration for images of another side than the
            profile's (a dataset of its own size); ``None``: the model takes its profile's size only.

    Returns:
        ``(config, build)``.
    """

    def config(profile: str, *, num_labels: int | None = None, image_size: int | None = None):
        """The configuration of a profile, optionally with another number of classes and image side."""
        kwargs = dict(configs[profile])
        if num_labels is not None:
            kwargs["num_labels"] = num_labels
        if image_size is not None and image_size != kwargs.get("image_size"):
            if resize is None:
                raise ValueError(f"{model_cls.__name__} at {profile} takes {kwargs.get('image_size')} px images, "
                                 f"not {image_size}")
            kwargs = resize(kwargs, image_size)
        return config_cls(**kwargs)

    def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu", image_size=None):
        """Build the classifier; ``vocab_size`` is ignored (images have no vocabulary).

        With ``weights_dir`` and a ``num_labels`` other than the saved head's (or a folder saved without a
        head), the head is freshly initialised: a pretrained backbone fine-tuned on a new dataset.
        """
        return instantiate(model_cls, config(profile, num_labels=num_labels, image_size=image_size),
                           weights_dir=weights_dir, device=device, num_labels=num_labels)

    return config, build
