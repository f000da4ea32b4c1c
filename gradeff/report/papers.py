"""The two papers the report reproduces, and how a label cites one of their tables or figures.

A label such as "paper Table 3" means nothing to a reader who does not know which paper; every such label in the
page names the paper by title and year (:func:`cite`), and the page's header lists both in full.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAIN", "PAPERS", "PEFT", "Paper", "cite"]


@dataclass(frozen=True, slots=True)
class Paper:
    """One paper: its title as published, year, authors and where to find it, and the short form a label uses.

    Attributes:
        title: the title; a copy without one is described in brackets instead, and says so.
        year: the year it appeared.
        authors: as the paper lists them (``""`` where the copy does not).
        where: an identifier to look it up by (``""`` where none is known).
        short: the title shortened for labels, with the year.
    """

    title: str
    year: int
    authors: str
    where: str
    short: str


# The main study's copy carries no title ("Untitled"); its references were accessed in 2026. The bracketed
# description says what it studies rather than inventing a title.
MAIN = Paper(
    title="[untitled in its copy] Optimizers × memory strategies: SGD, Adam, Adagrad, Adadelta and conjugate "
          "gradient under standard training, checkpointing and accumulation on ViT, ModernBERT, Llama and NanoVLM",
    year=2026, authors="", where="",
    short="Optimizers × memory strategies, 2026")
PEFT = Paper(
    title="Efficient PEFT Methods with Adaptive Checkpointing for Vision Models and VLMs on Resource Constrained "
          "Consumer-GPUs",
    year=2026, authors="Altay Toktassyn, Jurn-Gyu Park", where="arXiv:2607.02158",
    short="Efficient PEFT Methods with Adaptive Checkpointing, 2026")
PAPERS: dict[str, Paper] = {"main": MAIN, "peft": PEFT}


def cite(item: str, paper: Paper = MAIN) -> str:
    """``item`` of ``paper`` as a label prints it: ``Optimizers × memory strategies, 2026: Table 3``."""
    return f"{paper.short}: {item}"
