"""The class names of the PEFT study's datasets, in label order, for prompts read by a real tokenizer.

The synthetic stand-ins (:mod:`gradeff.axes.data.images`) number their classes 0..K-1 with the real
datasets' class counts; with real copies of the datasets, label ``i`` is the ``i``-th name below
(the order of the datasets' own label lists: alphabetical for both).
"""

from __future__ import annotations

__all__ = ["CIFAR100", "DTD", "class_names"]

CIFAR100: tuple[str, ...] = tuple(name.replace("_", " ") for name in """
apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly camel can castle
caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup dinosaur dolphin elephant flatfish
forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree motorcycle
mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine
possum rabbit raccoon ray road rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel streetcar
sunflower sweet_pepper table tank telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree
wolf woman worm
""".split())

DTD: tuple[str, ...] = tuple("""
banded blotchy braided bubbly bumpy chequered cobwebbed cracked crosshatched crystalline dotted fibrous flecked freckled
frilly gauzy grid grooved honeycombed interlaced knitted lacelike lined marbled matted meshed paisley perforated pitted
pleated polka-dotted porous potholed scaly smeared spiralled sprinkled stained stratified striped studded swirly veined
waffled woven wrinkled zigzagged
""".split())

_BY_COUNT = {len(CIFAR100): CIFAR100, len(DTD): DTD}


def class_names(num_classes: int) -> tuple[str, ...]:
    """The names of a dataset of the study, found by its number of classes (100: CIFAR-100, 47: DTD).

    Raises:
        ValueError: no dataset of the study has that many classes.
    """
    try:
        return _BY_COUNT[num_classes]
    except KeyError:
        raise ValueError(f"no class names for {num_classes} classes; known: CIFAR-100 (100), DTD (47)") from None
