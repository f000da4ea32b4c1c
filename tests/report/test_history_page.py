"""The history page (gradeff history report): its view model from a constructed store, the page in headless
Chromium (offline, no console error), and the command's refusals."""

import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gradeff.gate.history import Commit, HistoryStore, Measurement
from gradeff.report.history import build_history_view, render_history
from tests.report.test_report_browser import CHROMIUM, _Ids, _open

CHECKOUT = Path(__file__).resolve().parents[2]
CELL = "llm-adam-standard"


@pytest.fixture
def store_path(tmp_path) -> Path:
    """Twelve commits: time per step steps up x1.2 at the 8th, the final loss moves at the 5th, memory never."""
    rnd = random.Random(0)
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store:
        store.add_machine("m1", "cpu=AMD EPYC; cpu_count=2; torch_threads=1")
        for i in range(12):
            commit = Commit(f"{i:02d}" + "ab" * 19, f"2026-12-0{1 + i // 10}T0{i % 10}:00:00+00:00",
                            f"<b>change</b> {i}")
            store.add_commit(commit)
            t = 0.03 * (1.2 if i >= 7 else 1.0) * math.exp(rnd.gauss(0, 0.01))
            store.add([
                Measurement(commit=commit.commit, machine="m1", cell=CELL, seed=0, metric="time_per_step", value=t,
                            low=t * 0.98, high=t * 1.02),
                Measurement(commit=commit.commit, machine="m1", cell=CELL, seed=0, metric="final_loss",
                            value=1.5 if i < 4 else 1.25, low=None, high=None),
                Measurement(commit=commit.commit, machine="m1", cell=CELL, seed=0, metric="peak_bytes", value=2**20,
                            low=2**20, high=2**20)])
    return path


def test_the_view_lists_each_change_point_with_its_commit_and_size_and_draws_what_moved(store_path):
    with HistoryStore(store_path) as store:
        view = build_history_view(store, generated_at="2026-12-03 00:00 UTC")
    time_change, loss_change = sorted(view.changes, key=lambda c: c.metric, reverse=True)
    assert time_change.metric == "time per optimizer step" and time_change.commit == "07" + "ab" * 4
    ratio = float(time_change.size.split()[0][1:])
    assert ratio == pytest.approx(1.2, rel=0.02) and time_change.message == "<b>change</b> 7"
    assert loss_change.commit == "04" + "ab" * 4 and loss_change.size.startswith("-0.25")
    drawn = [t for t in view.trends if t.figure is not None]
    assert len(drawn) == 2 and all("<svg" in t.figure for t in drawn)
    (flat,) = [t for t in view.trends if t.figure is None]
    assert flat.note == ("peak memory counted from tensors of llm-adam-standard [grid]: 1 MiB at every one of 12 "
                         "commits")
    assert ("change points", "2") in view.overview
    assert ("machine m1", "cpu=AMD EPYC; cpu_count=2; torch_threads=1") in view.overview


@pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium not installed: apt-get install chromium")
def test_the_history_page_loads_in_chromium_offline_with_every_section(store_path, tmp_path):
    with HistoryStore(store_path) as store:
        page = tmp_path / "history.html"
        page.write_text(render_history(build_history_view(store)), encoding="utf-8")
    dom, console = _open(page, tmp_path)
    parsed = _Ids()
    parsed.feed(dom)
    assert {"overview", "changes", "trends", "commits", "method"} <= parsed.ids
    assert parsed.svgs == 2
    assert "<b>change</b>" not in dom  # a commit's subject is text, never markup
    assert console == []
    # No network: nothing loads from elsewhere (the SVG namespaces are names, not requests).
    assert not any(f'{attribute}="http' in page.read_text() for attribute in ("src", "href"))


def test_the_command_renders_a_store_and_refuses_a_missing_one(store_path, tmp_path):
    def history(*args):
        return subprocess.run([sys.executable, "-m", "gradeff", "history", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)

    done = history("report", "--history", str(store_path), "-o", "out.html")
    assert done.returncode == 0, done.stderr
    assert "2 trends" not in done.stderr and "3 trends, 2 change points" in done.stderr
    assert "llm-adam-standard" in (tmp_path / "out.html").read_text()
    missing = history("report", "--history", "nowhere.sqlite")
    assert missing.returncode == 2 and "no history store at nowhere.sqlite" in missing.stderr
    assert not (tmp_path / "nowhere.sqlite").exists()
