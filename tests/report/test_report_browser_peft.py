"""The PEFT section of a report from a real small run, in headless Chromium: inference, NetScore and claims tables."""

from html.parser import HTMLParser

import pytest

from gradeff.analysis.netscore import LABELS
from gradeff.axes.models import build_model
from gradeff.cell.config import RunConfig
from gradeff.cell.run import run_cell
from gradeff.records.store import append_record, read_records
from gradeff.report import write_report
from gradeff.studies.grid import Cell
from tests.report.test_report_browser import CHROMIUM, _open

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed: apt-get install chromium")

CELLS = (
    Cell(model="vit_s", optimizer="adamw", strategy="standard", method="full", dataset="dtd", grid="peft"),
    Cell(model="vit_s", optimizer="adamw", strategy="standard", method="lora", dataset="dtd", grid="peft"),
    Cell(model="dinov2", optimizer="adamw", strategy="standard", method="linear_probe", dataset="dtd",
         grid="baselines"),
    Cell(model="clip", optimizer="adamw", strategy="standard", method="zero_shot", dataset="dtd", grid="baselines"),
)


class _Tables(HTMLParser):
    """Every table of a page by id: its rows as ``(header text, [(cell text, second line, cell class)])``."""

    def __init__(self, html: str):
        super().__init__()
        self.ids: set[str] = set()
        self.tables: dict[str, list[tuple[str, list[tuple[str, str, str]]]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._sub: list[str] | None = None
        self._css = ""
        self._row: tuple[str, list[tuple[str, str, str]]] | None = None
        self._in_head = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = []
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self._table and not self._in_head:
            self._row = ("", [])
        elif tag in ("th", "td") and self._row is not None:
            self._cell, self._sub, self._css = [], None, attrs.get("class") or ""
        elif tag == "span" and self._cell is not None and attrs.get("class") == "sub":
            self._sub = []

    def handle_endtag(self, tag):
        if tag == "thead":
            self._in_head = False
        elif tag == "th" and self._cell is not None:
            self._row = ("".join(self._cell).strip(), self._row[1])
            self._cell = None
        elif tag == "td" and self._cell is not None:
            self._row[1].append(("".join(self._cell).strip(), "".join(self._sub or ()).strip(), self._css))
            self._cell = self._sub = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._sub is not None:
            self._sub.append(data)
        elif self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def run_records(tmp_path_factory):
    """Four real tiny cells on DTD (ViT-S full and LoRA, a DINOv2 probe, CLIP zero-shot), one epoch each."""
    folder = tmp_path_factory.mktemp("peft-run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADEFF_CACHE", str(folder / "cache"))  # nothing of this run reaches the user's cache
        # Local starting weights: the one-off pretraining of the backbones is not what this test is about.
        weights = []
        for model in ("vit_s", "dinov2"):
            build_model(model, "tiny").save_pretrained(folder / model)
            weights.append((model, str(folder / model)))
        config = RunConfig(epochs=1, device="cpu", session="browser", weights=tuple(weights))
        results = folder / "results.jsonl"
        for cell in CELLS:
            append_record(results, run_cell(cell, config))
    return list(read_records(results)), folder


def test_peft_section_renders_inference_netscore_and_claims_in_chromium(run_records, tmp_path):
    """The real run's report: baselines and claims tables in the DOM; each cell's inference cost and ranking (the
    view's tables, columns as the page would hide them; the page links them as its flat table) estimates labelled."""
    records, _ = run_records
    assert [r.status for r in records] == ["ok"] * 4, [r.detail for r in records]
    assert all(r.inference.get("scores") for r in records)
    page = write_report(records, tmp_path / "report.html", sources=["results.jsonl"])
    dom, console = _open(page, tmp_path)
    assert console == []
    parsed = _Tables(dom)
    assert {"peft", "claims", "peft-ranking", "peft-baselines"} <= parsed.ids
    # Each cell's inference cost and ranking scores: out of the page (in the flat table it links), in the view.
    from gradeff.report import build_view
    from gradeff.report.columns import hide_unmeasured_everywhere

    shown = hide_unmeasured_everywhere(build_view(records))
    parsed.tables |= {t.id: [(r.label, [(c.text, c.sub, c.css) for c in r.cells]) for r in t.rows]
                      for t in (*shown.peft.inference, *shown.peft.ranking)}
    assert "p0-vit_s-dtd-inference" not in dom and "inference.scores" in dom

    by_label = {"Full fine-tuning + standard": records[0], "LoRA + standard": records[1],
                "Linear probe (head only, frozen features)": records[2], "Zero-shot (no training)": records[3]}
    rows = [row for table in ("p0-vit_s-dtd-inference", "b0-clip-dtd-inference", "b1-dinov2-dtd-inference")
            for row in parsed.tables[table]]
    assert sorted(label for label, _ in rows) == sorted(by_label)
    estimated = 0
    for label, cells in rows:
        record = by_label[label]
        assert len(cells) == 9, label
        energy, source, css = cells[3]
        if record.inference["energy_source"] == "estimate" and record.inference["energy_per_image_j"]:
            assert energy.endswith("(est.)") and source == "source: estimate" and "estimated" in css, (label, energy)
            estimated += 1
        elif record.inference["energy_source"] != "estimate":
            assert "(est.)" not in energy
        for (text, _, css), key in zip(cells[5:], LABELS, strict=True):
            score = record.inference["scores"][key]
            if score["value"] is None:
                assert text == "n/a" and "na" in css.split(), (label, key, text)
            else:
                assert text.startswith(f"{score['value']:.1f}")
                assert ("(est.)" in text) == score["estimated"], (label, key, text)
                estimated += score["estimated"]
    assert estimated, "a CPU run's energy is the estimate: some figure must read (est.)"

    ranking = [cells[0] for _, cells in parsed.tables["peft-ranking-0-dtd"]]  # the NetScore column
    assert sorted(text for text, _, _ in ranking) == ["DINOv2 ViT-B/14 (linear probe) · baseline",
                                                      "ViT-S/16 · Full fine-tuning + standard",
                                                      "ViT-S/16 · LoRA + standard"]  # CLIP: random weights, left out
    values = [float(sub.split(" dB")[0]) for _, sub, _ in ranking]
    assert values == sorted(values, reverse=True)

    baselines = {label: cells for label, cells in parsed.tables["peft-baselines-0-dtd-table"]}
    # What ran: CLIP from random weights is a CLIP-shaped stand-in; DINOv2 from a local folder keeps its name.
    assert list(baselines) == ["CLIP-shaped, random init, 0.26 M params", "DINOv2 ViT-B/14 (linear probe)", "ViT-S/16"]
    assert "at chance by construction" in baselines["CLIP-shaped, random init, 0.26 M params"][2][1]
    assert baselines["DINOv2 ViT-B/14 (linear probe)"][1][0] == "local"
    assert "give real weights with --gradeff-weights clip=PATH" in dom

    claims = parsed.tables["claims-peft"]
    assert len(claims) == 5  # the paper's four, then the raw-pixel 1-NN sanity check
    assert "1-nearest-neighbour" in claims[-1][0], claims[-1]
    assert all(cells[1][2].startswith("verdict ") for _, cells in claims), claims
    assert {cells[1][0] for _, cells in claims} <= {"reproduced", "not reproduced", "contradicted",
                                                    "not measurable here"}
