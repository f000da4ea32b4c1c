"""The sizes the built-in models share, per study and profile: the blocks their ``ModelSpec.hparams`` are made of.

A model's own rows are on its spec (:data:`gradeff.axes.models.MODELS`), as a registered model's are; what the rows of
one study have in common is here, with why it is so. A dataset's own sizes (CIFAR-100's 100 classes) are on its
``TaskSpec.sizes`` and replace these where a cell trains on it.
"""

from __future__ import annotations

from types import MappingProxyType

from gradeff.specs.profiles import HParams

__all__ = ["FINE_TUNING", "SMALL_MAIN", "TINY_CAPTION", "TINY_CLASSIFIER", "TINY_IMAGE", "TINY_MAIN", "TINY_MASKED",
           "TINY_TEXT"]

# The main study at tiny: every model learns its task and generalises within its few CPU seconds a cell. 768
# training samples, the same each epoch, in batches of 32 (24 steps; 6 under accumulation), 3 epochs: 2,304 samples
# seen, 768 distinct, far more than a tiny model memorises in these steps (training and test losses stay within a
# few hundredths), and enough steps for the adaptive optimizers to close more than half the gap from the untrained
# loss to the floor. 64 test and 64 validation samples (2,048 tokens each for text; the image tasks' classes in
# equal shares; the classifier's test split is larger, TINY_CLASSIFIER). The test split is evaluated every 12 steps
# and after each epoch, the validation split once at the end, all outside the timed epochs: time to target at
# half-epoch resolution for a few per cent of a cell's time.
_TINY_SPLITS = dict(heldout_samples=64, validation_samples=64, eval_every=12)
TINY_MAIN = MappingProxyType(dict(lr=1e-3, batch_size=32, epochs=3, train_samples=768, **_TINY_SPLITS))
TINY_TEXT = MappingProxyType(dict(seq_len=32, num_states=124))  # model vocab 128 = 4 special ids + 124 states
# The masked task in sequences of 16 (twice as many of them, in training and in the test and validation splits: the
# same tokens as the others', 48 steps of 32 an epoch instead of 24): a sequence's 11 visible tokens, not 22, no
# longer spell out its topic's few tokens for a histogram of them to read (see gradeff.axes.data.text), while
# ModernBERT, which learns the topics' whole distributions, needs no more than these to tell the topic.
TINY_MASKED = MappingProxyType(dict(TINY_MAIN) | dict(train_samples=1536, heldout_samples=128, validation_samples=128)
                           | dict(TINY_TEXT) | dict(seq_len=16))
TINY_IMAGE = MappingProxyType(dict(image_size=32, num_classes=10))
# The image classifier's test split: 512 images, where 64 made one image 1.56 accuracy points (the default run's
# leaders were 3 images apart). An image is one decision where a text sample is 32 tokens of loss; the 512 cost
# about 0.05 s an evaluation on one thread, 0.4 s a cell over its ten evaluations. Validation stays at 64: it only
# ranks the rates of a search.
TINY_CLASSIFIER = MappingProxyType(dict(TINY_MAIN) | dict(TINY_IMAGE) | dict(heldout_samples=512))
# Captions of 8 words (see gradeff.axes.data.images.image_captioning): the image decides more of each.
TINY_CAPTION = MappingProxyType(dict(TINY_MAIN) | dict(TINY_IMAGE) | dict(caption_len=8, num_states=124))
# small: the same tasks with 4,096 samples an epoch (128 steps of 32), the test split evaluated every 32 steps;
# minutes per cell on a CPU.
SMALL_MAIN = MappingProxyType(dict(lr=3e-4, batch_size=32, epochs=3, train_samples=4096, heldout_samples=512,
                                   validation_samples=512, eval_every=32))

# The PEFT study's backbones and its foundation-model baselines (DINOv2's probe trains like a cell), fine-tuned with
# AdamW on a dataset of the study, whose own sizes (classes, split sizes at paper) replace these.
FINE_TUNING: MappingProxyType[str, HParams] = MappingProxyType({
    # ~0.8 s per cell on two cores (8 steps of 32 per epoch, a held-out pass after each).
    "tiny": HParams(lr=1e-3, batch_size=32, epochs=3, train_samples=256, heldout_samples=256,
                    validation_samples=128, image_size=32),
    "small": HParams(lr=3e-4, batch_size=32, epochs=5, train_samples=2048, heldout_samples=1024,
                     validation_samples=512, image_size=64),
    # 224 px, as in the PEFT study; 10 epochs (the abstract gives no count).
    "paper": HParams(lr=1e-4, batch_size=64, epochs=10, train_samples=49_920, heldout_samples=10_000,
                     validation_samples=5_000, eval_every=200, image_size=224),
})
