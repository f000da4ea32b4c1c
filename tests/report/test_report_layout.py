"""The page answers first: the Answer and the overview open, each study's detail collapsed, few tables in view,
unmeasured columns left out with a note, long tables marked sortable, expected oom cells read as findings."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from gradeff.records.formatting import NA
from gradeff.report import build_view, render_html, write_report
from gradeff.report.columns import HIDDEN_PREFIX, hide_unmeasured
from gradeff.report.view import SORTABLE_ROWS, Cell, Row, Table
from tests.report.test_report_memory import llm_cells, memory_record  # noqa: F401  (fixtures)

MAX_VISIBLE_TABLES = 25


class _Layout(HTMLParser):
    """Tables outside any closed ``<details>`` (seen before the reader expands anything), in page order, and the
    ids of the sections in ``<main>`` in order."""

    def __init__(self, html: str):
        super().__init__()
        self.closed = 0  # depth of closed <details> around the current position
        self.stack: list[bool] = []
        self.visible_tables: list[str] = []
        self.sections: list[str] = []
        self.sortable: list[str] = []
        self.rows: dict[str, int] = {}  # body rows per table id
        self._table: str | None = None
        self._body = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "details":
            closed = "open" not in attrs
            self.stack.append(closed)
            self.closed += closed
        elif tag == "tbody":
            self._body = True
        elif tag == "tr" and self._body and self._table:
            self.rows[self._table] = self.rows.get(self._table, 0) + 1
        elif tag == "table":
            self._table = attrs.get("id")
            if not self.closed:
                self.visible_tables.append(attrs.get("id") or "")
            if "data-sortable" in attrs:
                self.sortable.append(attrs.get("id") or "")
        elif tag == "section":
            self.sections.append(attrs.get("id") or "")

    def handle_endtag(self, tag):
        if tag == "details":
            self.closed -= self.stack.pop()
        elif tag == "tbody":
            self._body = False
        elif tag == "table":
            self._table = None


@pytest.fixture
def page(grid_records, llm_cells, make_peft_record, tmp_path):  # noqa: F811
    """A report of the three studies: the main grid, two PEFT backbones × five methods × two strategies, and the
    memory study (one budget oom)."""
    peft = [make_peft_record(model=b, method=m, strategy=s) for b in ("vit_s", "tinyvit")
            for m in ("full", "lora", "adalora", "qlora", "bitfit") for s in ("standard", "checkpoint")]
    records = [*grid_records, *peft, *llm_cells]
    return write_report(records, tmp_path / "report.html").read_text(encoding="utf-8"), records


def test_the_answer_comes_first_and_the_detail_is_collapsed(page):
    """The Answer is the first section, then the figures a reader of the papers looks at first, open; every other
    section is a closed <details>; at most 25 tables are in view before anything is expanded, the Answer's among
    them."""
    html, _ = page
    layout = _Layout(html)
    assert layout.sections[:5] == ["answer", "curves", "pareto", "memory-time", "peft-figures"]
    assert html.count('<details class="section">') == len(layout.sections) - 5
    assert len(layout.visible_tables) <= MAX_VISIBLE_TABLES, layout.visible_tables
    assert layout.visible_tables[0].startswith("brief-")  # the Answer in brief; every verdict in full one click on
    hidden = _Layout(html.replace('<details class="section">', '<details class="section" open>'))
    assert len(hidden.visible_tables) > len(layout.visible_tables)  # the detail is there, one click away


@pytest.mark.parametrize("limit", [SORTABLE_ROWS, 7])
def test_long_tables_are_sortable_and_short_ones_not(page, limit, monkeypatch):
    """Exactly the tables of more than SORTABLE_ROWS rows carry data-sortable (the page's script adds the controls
    to those); every row is in the HTML, so the page reads the same without the script."""
    _, records = page
    monkeypatch.setattr("gradeff.report.view.SORTABLE_ROWS", limit)
    layout = _Layout(render_html(build_view(records)))
    long = {table for table, rows in layout.rows.items() if rows > limit}
    assert set(layout.sortable) == long, (long, layout.sortable)
    assert long or limit == SORTABLE_ROWS  # the lower limit reaches the claims and versus-full tables


def _table(*columns: tuple[str, tuple[Cell, ...]]) -> Table:
    rows = tuple(Row(label=f"cell {i}", cells=tuple(column[i] for _, column in columns))
                 for i in range(len(columns[0][1])))
    return Table(id="t", caption="t", header=("cell", *(name for name, _ in columns)), rows=rows, note="Means.")


def test_a_column_of_na_is_hidden_and_named():
    """A GPU column n/a in every row goes, the note names it and why; a column with one value stays."""
    na = Cell(text=NA, css="na", title="no GPU meter")
    table = _table(("loss", (Cell(text="1.0"), Cell(text="2.0"))), ("GPU util.", (na, na)),
                   ("GPU memory", (na, Cell(text="3 MiB"))))
    hidden = hide_unmeasured(table)
    assert hidden.header == ("cell", "loss", "GPU memory")
    assert [[c.text for c in row.cells] for row in hidden.rows] == [["1.0", NA], ["2.0", "3 MiB"]]
    assert hidden.note.startswith("Means. " + HIDDEN_PREFIX + "GPU util.: n/a in every row on this run (no GPU meter)")
    assert "no GPU meters" in hidden.note


def test_reasons_statuses_and_all_na_tables_stay():
    """An "n/a: reason" cell (the Answer's "not measurable here"), a status, or a table with nothing measured
    keeps its columns."""
    na = Cell(text=NA, css="na")
    reasoned = _table(("energy", (Cell(text=f"{NA}: no energy meter", css="na"),) * 2), ("loss", (na, na)))
    assert hide_unmeasured(reasoned).header == ("cell", "energy")
    status = _table(("loss", (Cell(text="oom", css="status oom"), na)), ("time", (Cell(text="1 s"), na)))
    assert hide_unmeasured(status) == status
    nothing = _table(("loss", (na, na)), ("time", (na, na)))
    assert hide_unmeasured(nothing) == nothing
    blank = _table(("loss", (Cell(text="1"), na)), ("note", (Cell(text=""), Cell(text=""))))
    assert hide_unmeasured(blank).header == ("cell", "loss") and hide_unmeasured(blank).note == "Means."


def test_gpu_columns_of_a_cpu_run_are_not_on_the_page(make_record, make_meters):
    """CPU records (no GPU meter): no table of the page shows a GPU column, and a note says they were hidden."""
    records = [make_record(f"llm-{o}-{s}", meters=make_meters()) for o in ("sgd", "adam")
               for s in ("standard", "checkpoint")]
    html = render_html(build_view(records))
    headers = [h for h in html.split("<th scope=\"col\">")[1:]]
    assert not [h for h in headers if h.startswith("GPU")]
    assert re.search(HIDDEN_PREFIX + r"[^<]*GPU utilization[^<]*A run without a GPU has no GPU meters", html)


def test_expected_oom_budget_cells_are_findings_not_a_warning(page, llm_cells):  # noqa: F811
    """The memory study's budget cell refused as oom raises no notice; the overview names it as a finding. An oom
    that is not a budget's does."""
    html, records = page
    view = build_view(records)
    failed = sum(r.status not in ("ok",) for r in records)
    expected = [r for r in records if r.grid == "memory" and r.status == "oom"]
    assert expected and failed > len(expected)
    notice = next(n for n in view.notices if "did not end ok" in n)
    assert notice.startswith(f"{failed - len(expected)} run(s)")
    assert dict(view.overview)["budgets out of reach"].startswith("1 budget cell(s) ended oom by design")
    only_memory = build_view(llm_cells)
    assert not [n for n in only_memory.notices if "did not end ok" in n]
