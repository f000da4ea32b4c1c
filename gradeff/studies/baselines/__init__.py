"""Foundation-model baselines of the PEFT study, as classifiers the suite evaluates like any other.

The PEFT paper compares fine-tuning with foundation models used without training or with a light one:

- zero-shot contrastive vision-language models (:mod:`~gradeff.studies.baselines.clip`,
  :mod:`~gradeff.studies.baselines.siglip`): the logits are the image's similarity to one text prompt per
  class (:mod:`~gradeff.studies.baselines.contrastive`);
- a self-supervised backbone read by a linear probe (:mod:`~gradeff.studies.baselines.dinov2`, trained with
  the ``linear_probe`` method);
- small autoregressive VLMs prompted to classify (:mod:`~gradeff.studies.baselines.smolvlm`,
  :mod:`~gradeff.studies.baselines.vlm_prompt`): the logits are the log-likelihoods of each class's name
  after a fixed prompt, given the image (:mod:`~gradeff.studies.baselines.prompted`).

Every model module has the builders' interface (``CONFIGS`` and ``build(profile, *, vocab_size,
num_labels, weights_dir, device)``) and every model returns ``loss`` and ``logits`` of shape
``(batch, num_classes)``. Class prompts are built by :mod:`~gradeff.studies.baselines.prompts`.
"""
