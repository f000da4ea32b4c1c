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
