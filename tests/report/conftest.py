"""Hand-made records for the report tests: one full synthetic grid (the record factories are in tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from html.parser import HTMLParser

import pytest

from gradeff.records.results import CellRecord, Summary
from tests.conftest import build_record, meters

MODEL_KEYS = ("vit", "modernbert", "llm", "vlm")
OPTIMIZER_KEYS = ("sgd", "adam", "adamw", "adagrad", "adadelta", "cgd")
STRATEGY_KEYS = ("standard", "checkpoint", "accum")


def synthetic_grid(seed: int = 0) -> list[CellRecord]:
    """Every cell of the paper's grid with plausible numbers, GPU meters, and a few failures."""
    rng = random.Random(seed)
    records = []
    for m, model in enumerate(MODEL_KEYS):
        for o, optimizer in enumerate(OPTIMIZER_KEYS):
            for s, strategy in enumerate(STRATEGY_KEYS):
                cell = f"{model}-{optimizer}-{strategy}"
                start = 3.0 + m
                rate = 0.15 + 0.05 * o + 0.1 * s + rng.random() * 0.05
                losses = tuple(1.0 + start * math.exp(-rate * e) for e in range(6))
                seconds = tuple(0.5 + 0.2 * s + 0.05 * o + rng.random() * 0.01 for _ in range(6))
                extra = {"meters": meters(util=40 + 10 * m + o + rng.random(), rss=(300 + 10 * o) * 2**20,
                                          joules=20 + 5 * s + o, activation=(16 >> s) * 2**20,
                                          state=o * 2**20, gpu_alloc=(100 + 20 * o - 30 * (s == 1)) * 2**20)}
                status = "ok"
                if cell == "llm-cgd-standard":
                    status, losses, seconds = "diverged", losses[:2], seconds[:2]
                    extra |= {"failed_step": 37, "detail": "loss became nan at step 37"}
                elif cell == "vlm-adadelta-checkpoint":
                    status, losses, seconds = "oom", (), ()
                    extra |= {"failed_step": 3, "detail": "CUDA out of memory"}
                elif cell == "vit-adamw-accum":
                    extra["meters"] = {}  # an older record, before the meters existed
                record = build_record(cell, status, losses=losses, seconds=seconds, device="cuda", loss_floor=1.0,
                                      **extra)
                records.append(_with_test_split(record, 0.2 + 0.05 * ((o + s) % 3)))
    return records


def _with_test_split(record: CellRecord, gap: float) -> CellRecord:
    """``record`` with a test loss ``gap`` above each epoch's training loss, and a test accuracy for the classifier
    (the quality metric's input)."""
    classifier = record.model == "vit"
    epochs = tuple(dataclasses.replace(e, heldout_loss=e.loss + gap,
                                       heldout_accuracy=1 / (1 + e.loss + gap) if classifier else None)
                   for e in record.epochs)
    return dataclasses.replace(record, epochs=epochs,
                               summary=Summary.of(list(epochs), record.summary.total_seconds))


@pytest.fixture
def grid_records() -> list[CellRecord]:
    """:func:`synthetic_grid` with seed 0."""
    return synthetic_grid()


class Page(HTMLParser):
    """Every id attribute and every URL-bearing attribute of a page."""

    def __init__(self, html: str):
        super().__init__()
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id":
                self.ids.append(value)
            if name in ("src", "href", "xlink:href", "action", "data") and value:
                self.urls.append(value)


def self_contained_page(html: str) -> Page:
    """Parse a report page and check what every page must hold: every section, ids unique and safe to link to,
    and no link that leaves the page but the one to its flat table beside it."""
    from gradeff.report import SECTIONS

    page = Page(html)
    assert {s.id for s in SECTIONS} <= set(page.ids)
    assert not {i for i in page.ids if page.ids.count(i) > 1}
    assert all(re.fullmatch(r"[A-Za-z0-9_.:-]+", i) for i in page.ids), [i for i in page.ids if "<" in i]
    # One link may leave the page: the flat table of every cell, a file written next to it (no folder, no scheme).
    local = [u for u in page.urls if not u.startswith("#")]
    assert all(re.fullmatch(r"[\w.-]+\.csv", u) for u in local) and len(local) <= 1, local
    return page


_OWN_SCRIPT = re.compile(r"<script>\n// A few lines, no network.*?</script>", re.S)


def without_own_script(html: str) -> str:
    """The page without its one script of its own (sortable tables): what is left must hold no ``<script``."""
    stripped, found = _OWN_SCRIPT.subn("", html)
    assert found == 1, "the page's own script is missing or doubled"
    return stripped
