"""The report in a real browser: headless Chromium loads it offline, without console errors, every section there."""

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gradeff.report import SECTIONS, write_report
from tests.report.test_report_memory import llm_cells, memory_record  # noqa: F401  (fixtures)

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT_COPY = Path("/tmp/gradeff-report.png")
# No network, no GPU, no sandbox (containers run as root), nothing that phones home.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed: apt-get install chromium")


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.svgs = 0

    def handle_starttag(self, tag, attrs):
        self.ids.update(value for name, value in attrs if name == "id")
        self.svgs += tag == "svg"


def _open(page: Path, tmp_path: Path, screenshot: Path | None = None) -> tuple[str, list[str]]:
    """Load ``page`` in headless Chromium; return its DOM and the console messages it logged."""
    args = [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--enable-logging=stderr", "--v=0", "--dump-dom"]
    if screenshot is not None:
        args += [f"--screenshot={screenshot}", "--window-size=1280,4000"]
    proc = subprocess.run([*args, page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Chromium logs page console output as "…:CONSOLE(line)] message"; uncaught exceptions say "Uncaught".
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return proc.stdout, console


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_report_loads_in_chromium_with_every_section(grid_records, make_record, tmp_path):
    """The full grid report: all section ids in the DOM, figures drawn, no console error, a screenshot."""
    records = [*grid_records, make_record("<script>alert(1)</script>-sgd-standard")]
    page = write_report(records, tmp_path / "report.html", skipped_lines=["results.jsonl:7: Expecting value"],
                        sources=["results.jsonl"])
    screenshot = tmp_path / "report.png"
    dom, console = _open(page, tmp_path, screenshot)

    parsed = _Ids()
    parsed.feed(dom)
    missing = {s.id for s in SECTIONS} - parsed.ids
    assert not missing, f"sections missing from the DOM: {missing}"
    assert {"heatmap-grid", "m2-llm-curves", "m2-llm-pareto", "best-loss"} <= parsed.ids
    assert parsed.svgs >= 9
    assert "<script>alert" not in dom
    assert console == []
    assert _png_size(screenshot) == (1280, 4000) and screenshot.stat().st_size > 50_000
    shutil.copyfile(screenshot, SCREENSHOT_COPY)  # a stable place to look at the last rendering


def test_console_check_catches_a_broken_page(tmp_path):
    """Control: the same console check does flag a page that throws (so an empty list means something)."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><p id=x>x</p><script>undefinedFunction();</script>", encoding="utf-8")
    dom, console = _open(page, tmp_path)
    assert 'id="x"' in dom
    assert any("Uncaught" in line for line in console)


# Measures the rendered page: every table row's first data cell must start inside the window, and the page
# must not be wider than the window. The result lands in the DOM that --dump-dom prints.
_LAYOUT_PROBE = ("""<script>
window.addEventListener('load', () => {
  const offscreen = [];
  for (const row of document.querySelectorAll('tbody tr')) {
    const cell = row.querySelector('td');
    if (cell && cell.getBoundingClientRect().left >= window.innerWidth) """
    """offscreen.push(row.id || row.textContent.slice(0, 40));
  }
  const probe = document.createElement('pre');
  probe.id = 'layout-probe';
  probe.textContent = JSON.stringify({offscreen: offscreen.length, pageWidth: document.documentElement.scrollWidth,
                                      window: window.innerWidth});
  document.body.appendChild(probe);
});
</script>""")


def test_hostile_names_and_non_finite_values_render_safely(grid_records, make_record, tmp_path):
    """A name with a right-to-left override, a 10 000-character name, and NaN / inf measured in an ok cell: the
    override shows as a visible mark, the long name is cut (full name in the tooltip) without pushing any table's
    data off the window, and the non-finite values read "NaN" / "inf", flagged, not "n/a"."""
    import json
    import math
    import re

    spoof = "llm\u202eevil"  # would render as "llmlive" reversed
    long_name = "x" * 10_000
    # Reruns of two grid cells (finished later, so they supersede them).
    nan_cell = make_record("vit-adam-accum", losses=(2.0, math.nan), finished_at=1.0)
    inf_cell = make_record("vit-sgd-accum", meters={"ram": {"peak_rss_bytes": math.inf}}, finished_at=1.0)
    records = [*grid_records, make_record(f"{spoof}-sgd-standard"), make_record(f"{long_name}-sgd-standard"),
               nan_cell, inf_cell]
    page = write_report(records, tmp_path / "report.html", sources=["results.jsonl"])
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _LAYOUT_PROBE + "</body>"),
                      encoding="utf-8")
    dom, console = _open(probed, tmp_path, tmp_path / "hostile.png")
    assert console == []
    assert "\u202e" not in dom and "llm[U+202E]evil" in dom
    layout = json.loads(re.search(r'<pre id="layout-probe">(.*?)</pre>', dom).group(1).replace("&quot;", '"'))
    assert layout["offscreen"] == 0 and layout["pageWidth"] <= layout["window"], layout
    assert re.search(r'<th scope="row" title="x{10000}[^"]*">', dom)  # the full name on hover
    # The per-model tables are the flat table's now (the page links it): the view still reads them "NaN" / "inf".
    from gradeff.report import build_view

    cells = [c for m in build_view(records).models for t in m.tables for row in t.rows for c in row.cells]
    assert any(c.text == "NaN" and c.css == "nonfinite" and c.title.startswith("measured, but not a finite number")
               for c in cells)
    assert any(c.text == "inf" and c.css == "nonfinite" for c in cells)


# Measures what a reader sees before scrolling or expanding anything: where the Answer's first table starts,
# whether the page is wider than the window, and how many tables are rendered (not inside a closed <details>).
_FIRST_SCREEN_PROBE = """<script>
window.addEventListener('load', () => {
  const answer = document.querySelector('#answer table');
  const box = answer ? answer.getBoundingClientRect() : null;
  // checkVisibility: false inside a closed <details>, whose content keeps boxes but is not rendered.
  const shown = [...document.querySelectorAll('table')].filter((t) => t.checkVisibility()).length;
  const probe = document.createElement('pre');
  probe.id = 'first-screen-probe';
  probe.textContent = JSON.stringify({answerTop: box && box.top, answerHeight: box && box.height,
                                      height: window.innerHeight, width: window.innerWidth,
                                      pageWidth: document.documentElement.scrollWidth, tables: shown});
  document.body.appendChild(probe);
});
</script>"""


@pytest.mark.parametrize("width", [1400, 800])
def test_first_screen_shows_the_answer_without_horizontal_overflow(grid_records, make_peft_record, width, tmp_path):
    """At 1400 and 800 px the Answer's table starts on the first screen, no table pushes the page wider than the
    window, and at most 25 tables are rendered before any section is expanded."""
    import json
    import re

    peft = [make_peft_record(model=b, method=m) for b in ("vit_s", "tinyvit")
            for m in ("full", "lora", "adalora", "qlora", "bitfit")]
    page = write_report([*grid_records, *peft], tmp_path / "report.html", sources=["results.jsonl"])
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _FIRST_SCREEN_PROBE + "</body>"),
                      encoding="utf-8")
    args = [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr",
            "--v=0", f"--window-size={width},900", "--dump-dom", probed.as_uri()]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    seen = json.loads(re.search(r'<pre id="first-screen-probe">(.*?)</pre>', proc.stdout).group(1)
                      .replace("&quot;", '"'))
    assert seen["width"] == width, seen
    assert seen["answerTop"] is not None and 0 < seen["answerTop"] < seen["height"] * 0.6, seen
    assert seen["pageWidth"] <= seen["width"], seen
    assert 0 < seen["tables"] <= 25, seen
    shot = tmp_path / f"first-screen-{width}.png"
    subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'chromium-shot'}",
                    f"--screenshot={shot}", f"--window-size={width},900", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert _png_size(shot) == (width, 900)
    shutil.copyfile(shot, Path(f"/tmp/gradeff-report-first-screen-{width}.png"))  # a stable place to look at it


# What a reader gets before clicking anything: each figure shown (not in a closed <details>) with its size and
# position, the tables shown outside the appendix, and, in every shown figure's SVG, the pairs of texts whose
# rendered boxes overlap (the browser's own layout of the text, not a prediction of it).
_FIGURES_PROBE = """<script>
window.addEventListener('load', () => {
  const figures = [...document.querySelectorAll('figure')].map((f) => {
    const svg = f.querySelector('svg');
    const box = svg ? svg.getBoundingClientRect() : null;
    return {id: f.id, shown: f.checkVisibility(), top: box && box.top + window.scrollY, width: box && box.width,
            height: box && box.height};
  });
  const appendix = document.getElementById('tables');
  const tables = [...document.querySelectorAll('table')].filter((t) => !appendix.contains(t)).length;
  const overlaps = [];
  for (const svg of document.querySelectorAll('figure svg')) {
    if (!svg.checkVisibility()) continue;
    const boxes = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim())
      .map((t) => [t.textContent, t.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, p] = boxes[i], [b, q] = boxes[j];
      const x = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const y = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (x > 1 && y > 1) overlaps.push([svg.closest('figure').id, a, b]);
    }
  }
  const probe = document.createElement('pre');
  probe.id = 'figures-probe';
  probe.textContent = JSON.stringify({figures, tables, overlaps, screen: window.innerHeight});
  document.body.appendChild(probe);
});
</script>"""

# The default run's page was 1.40 MB with every table inline; the figure-first page must stay under this.
MAX_PAGE_BYTES = 500_000
# Tables in the page outside the collapsed appendix (the default run's page had 162 in all).
MAX_PAGE_TABLES = 40


def _probe_figures(page: Path, tmp_path: Path) -> dict:
    import json
    import re

    probed = tmp_path / "figures-probe.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _FIGURES_PROBE + "</body>"),
                      encoding="utf-8")
    args = [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'chromium-figures'}", "--enable-logging=stderr",
            "--v=0", "--window-size=1280,900", "--dump-dom", probed.as_uri()]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return json.loads(re.search(r'<pre id="figures-probe">(.*?)</pre>', proc.stdout).group(1).replace("&quot;", '"'))


def _full_grid(grid_records, make_peft_record, memory_cells) -> list:
    """Every cell of the default run: the main grid, the PEFT grid (4 backbones × 5 methods × 3 strategies × 2
    datasets, accuracies and costs that differ by method) and the memory study."""
    methods = {"full": (0.55, 0.70, 100_000, 12.0), "lora": (0.50, 0.66, 2_000, 10.0),
               "adalora": (0.48, 0.65, 2_500, 10.5), "qlora": (0.47, 0.64, 2_000, 8.5),
               "bitfit": (0.45, 0.61, 400, 8.0)}
    peft = [make_peft_record(model=backbone, method=method, strategy=strategy, dataset=dataset,
                             accuracies=(first - 0.03 * b, last - 0.03 * b), trainable=trainable * (b + 1),
                             total=100_000 * (b + 1), joules=joules * (1.3 if strategy == "checkpoint" else 1.0))
            for b, backbone in enumerate(("vit_s", "tinyvit", "vim_s", "mambavision_t"))
            for method, (first, last, trainable, joules) in methods.items()
            for strategy in ("standard", "checkpoint", "budget") for dataset in ("cifar100", "dtd")]
    return [*grid_records, *peft, *memory_cells]


def test_figures_are_open_and_the_page_is_small(grid_records, make_peft_record, llm_cells, tmp_path):  # noqa: F811
    """The default run's full grid: the loss curves, Pareto fronts, memory vs time and PEFT cost figures are shown
    without a click, right after the Answer and drawn at a readable size; no two texts of a shown figure overlap as
    rendered; at most 40 tables outside the appendix; the page under 500 KB, its cells' numbers in the flat table
    it links to."""
    page = write_report(_full_grid(grid_records, make_peft_record, llm_cells), tmp_path / "report.html",
                        sources=["results.jsonl"])
    size = page.stat().st_size
    assert size < MAX_PAGE_BYTES, size
    assert (tmp_path / "report.cells.csv").stat().st_size > 10_000  # every cell's numbers, linked from the appendix
    seen = _probe_figures(page, tmp_path)
    shown = {f["id"]: f for f in seen["figures"] if f["shown"]}
    first = {"m0-vit-curves", "m2-llm-curves", "m0-vit-pareto", "m3-vlm-pareto", "peft-costs", "peft-curves"}
    assert first <= set(shown), sorted(shown)
    assert any(key.endswith("-tradeoff") for key in shown), sorted(shown)
    assert all(f["width"] > 400 and f["height"] > 150 for f in shown.values()), shown
    # Shown first: every open figure comes before the first collapsed section's figures (the heat maps).
    hidden = [f for f in seen["figures"] if not f["shown"]]
    assert hidden and all(f["id"] == "heatmap-grid" for f in hidden), hidden
    assert min(f["top"] for f in shown.values()) < 3 * seen["screen"], shown  # after the Answer in brief
    assert seen["overlaps"] == [], seen["overlaps"][:10]
    assert 0 < seen["tables"] <= MAX_PAGE_TABLES, seen["tables"]


def test_overlap_probe_catches_overprinted_svg_text(tmp_path):
    """Control: two labels written at the same place in a shown figure are reported by the same probe."""
    page = tmp_path / "overprinted.html"
    page.write_text('<!DOCTYPE html><section id="tables"></section><figure id="f"><svg width="300" height="100">'
                    '<text x="10" y="50">adam/standard</text><text x="14" y="52">sgd/checkpoint</text>'
                    '<text x="200" y="90">apart</text></svg></figure></body>', encoding="utf-8")
    seen = _probe_figures(page, tmp_path)
    assert seen["overlaps"] == [["f", "adam/standard", "sgd/checkpoint"]]
    assert [f["shown"] for f in seen["figures"]] == [True]
