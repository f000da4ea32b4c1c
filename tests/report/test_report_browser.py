"""The report in a real browser: headless Chromium loads it offline, without console errors, every section there."""

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gradeff.report import SECTIONS, write_report

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
    assert {"heatmap-grid", "m2-llm-curves", "m2-llm-pareto", "m2-llm-memory", "best-loss"} <= parsed.ids
    assert parsed.svgs >= 13
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
    assert re.search(r'<td class="nonfinite" title="measured, but not a finite number[^"]*">NaN</td>', dom)
    assert re.search(r'<td class="nonfinite" title="measured, but not a finite number[^"]*">inf</td>', dom)


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
