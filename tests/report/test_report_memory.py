"""The memory strategies section: the three-way split, ratios and claim lines, the figure, PEFT budget cells, gaps."""

import dataclasses
import re

import pytest

from gradeff.analysis import memory as ma
from gradeff.analysis import peft as peft_analysis
from gradeff.pytest.summary import summary_lines
from gradeff.records.formatting import NA
from gradeff.records.store import append_record, read_records
from gradeff.report import MAIN_MISSING_NOTE, SECTIONS, build_view, render_html, write_report
from gradeff.report.csv_export import csv_table
from gradeff.report.memory import MISSING_NOTE, TABLE_HEADER, build_memory_view, format_change, format_range
from gradeff.report.peft import build_peft_view
from tests.report.conftest import self_contained_page, without_own_script

MIB = 2**20
SCRIPT = "<script>alert(1)</script>"
OOM_DETAIL = ("even checkpointing every block does not fit: predicted peak 5.00 MiB > 4.50 MiB (budget 5.00 MiB "
              "less a 10% margin); without checkpointing 10.00 MiB")


@pytest.fixture
def memory_record(make_record, make_meters):
    """A memory-grid record factory: breakdown = 1 + 1 + 1 MiB + ``activation``, live ``peak``, ``seconds`` per
    epoch."""
    def build(strategy="standard", status="ok", *, model="llm", peak=10 * MIB, activation=7 * MIB, seconds=1.0,
              joules=10.0, plan=None, device="cpu", **overrides):
        recorded = make_meters(joules=joules, activation=activation, state=MIB)
        recorded["memory"]["peak_bytes"] = peak
        epochs = (seconds if isinstance(seconds, tuple) else (seconds, seconds)) if status == "ok" else ()
        record = make_record(f"{model}-adamw-{strategy}", status, meters=recorded, plan=plan or {}, device=device,
                             losses=(2.0, 1.5)[:len(epochs)], seconds=epochs, **overrides)
        # The memory grid's ids name the model and the strategy only.
        return dataclasses.replace(record, cell=f"{model}-{strategy}", grid="memory")
    return build


def adaptive_plan(level, chosen=1, layers=2, budget=9 * MIB, predicted=7 * MIB, fits=True):
    """An adaptive budget plan as :func:`gradeff.axes.strategies.prepare.prepare` records it."""
    return {"kind": "adaptive", "budget_fraction": level, "budget_bytes": budget, "margin": 0.1,
            "target_bytes": int(budget * 0.9), "checkpointed": [f"model.layers.{i}" for i in range(chosen)],
            "checkpointed_layers": chosen, "layers": layers, "predicted_peak_bytes": predicted,
            "unconstrained_peak_bytes": 10 * MIB, "fits": fits, "prefix_peak_bytes": [10 * MIB, 7 * MIB]}


def compiler_plan(level, budget=9 * MIB, fraction=0.75, seconds=2.5):
    """A compiler budget plan (no prediction, an activation memory budget and a compile time)."""
    return {"kind": "compiler", "budget_fraction": level, "budget_bytes": budget, "margin": 0.1,
            "target_bytes": int(budget * 0.9), "unconstrained_peak_bytes": 10 * MIB,
            "activation_memory_budget": fraction, "compile_backend": "aot_eager_decomp_partition",
            "compile_seconds": seconds}


@pytest.fixture
def llm_cells(memory_record):
    """One model: standard, checkpoint, offload, two adaptive levels (one oom) and their compiler twins."""
    return [
        memory_record("standard", peak=10 * MIB, activation=7 * MIB, seconds=1.0, joules=10.0),
        memory_record("checkpoint", peak=5 * MIB, activation=2 * MIB, seconds=1.5, joules=15.0,
                      plan={"checkpointed_layers": 2, "layers": 2}),
        memory_record("offload", peak=5 * MIB, activation=0, seconds=1.6, joules=16.0,
                      plan={"checkpointed_layers": 2, "layers": 2, "offload": True,
                            "offloaded_bytes_per_step": 2 * MIB}),
        # Breakdown 3 + 4 = 7 MiB against the compiler's 8 MiB, in 1.2 s against 1.4 s: adaptive beats it.
        memory_record("budget60", peak=7 * MIB, activation=4 * MIB, seconds=1.2, joules=11.0,
                      plan=adaptive_plan(0.6)),
        memory_record("budget20", "oom", peak=None, plan=adaptive_plan(0.2, chosen=2, budget=5 * MIB,
                                                                       predicted=5 * MIB, fits=False),
                      detail=OOM_DETAIL, failed_step=0),
        # The compiled anchor: compiled at the full activation budget, 1.1 s (its backend 10 % slower than eager). The
        # compiler's recomputation at 60 % costs 1.4 / 1.1 = +27 %, adaptive's 1.2 / 1.0 = +20 %: 0.94×.
        memory_record("compile_budget100", peak=None, activation=7 * MIB, seconds=1.1, joules=11.0,
                      plan=compiler_plan(1.0, budget=int(10 * MIB / 0.9), fraction=1.0)),
        memory_record("compile_budget60", peak=None, activation=5 * MIB, seconds=1.4, joules=14.0,
                      plan=compiler_plan(0.6)),
        memory_record("compile_budget20", peak=None, activation=3 * MIB, seconds=1.8, joules=18.0,
                      plan=compiler_plan(0.2, budget=5 * MIB, fraction=0.3)),
    ]


def _section(html: str, section: str) -> str:
    return html.split(f'<section class="top" id="{section}">', 1)[1].split("</section>", 1)[0]


def _rows(table):
    return {row.label: row.cells for row in table.rows}


def test_split_is_three_way(make_record, make_peft_record, llm_cells):
    """The main grid (and the fixtures' cells), the PEFT grid and the memory grid each go to their own sections only."""
    main = [make_record("vit-sgd-standard"), make_record("llm-adam-standard", grid="custom")]
    peft = [make_peft_record(method="lora")]
    studies = ma.split_studies(main + peft + llm_cells)
    assert studies.real == []
    assert [r.cell for r in studies.main] == ["vit-sgd-standard", "llm-adam-standard"]
    assert [r.cell for r in studies.peft] == ["vit_s-lora-standard-cifar100"]
    assert [r.cell for r in studies.memory] == [r.cell for r in llm_cells]
    view = build_view(main + peft + llm_cells)
    assert [m.key for m in view.models] == ["vit", "llm"]
    # The main study's llm has Adam alone: no AdamW row from the memory grid's llm cells.
    loss = next(t for t in view.models[1].tables if t.id.endswith("-final_loss"))
    assert [row.label for row in loss.rows] == ["Adam"] and loss.header == ("optimizer", "standard")
    assert [g.title for g in view.peft.groups] == [
        "ViT-S/16-shaped, random init, 0.10 M params · CIFAR-100-like (synthetic)"]
    assert [g.title for g in view.memory_strategies.groups] == ["Llama-3.2-1B-shaped"]
    only_memory = build_view(llm_cells)
    assert only_memory.main_note == MAIN_MISSING_NOTE and only_memory.models == ()
    assert only_memory.peft.missing_note != "" and only_memory.memory_strategies.missing_note == ""
    assert build_view(main).memory_strategies.missing_note == MISSING_NOTE


def test_table_plans_measurements_and_ratios(llm_cells):
    """Each strategy's plan, budget, prediction, live peak, breakdown, time, compile time, energy, ratio to standard."""
    (group,) = build_memory_view(llm_cells).groups
    assert group.table.header == TABLE_HEADER
    rows = _rows(group.table)
    assert list(rows) == ["standard", "checkpoint", "offload", "budget60", "budget20", "compile_budget100",
                          "compile_budget60", "compile_budget20"]
    assert [c.text for c in rows["standard"]] == ["ok", "none", NA, NA, "10.0 MiB", "10.0 MiB", "1.00 s", NA,
                                                  "10.0 J"]
    budget = rows["budget60"]
    assert (budget[1].text, budget[1].sub) == ("1 / 2 blocks", "model.layers.0")
    assert budget[2].text == "9.00 MiB" and budget[2].sub == "level 60 %, target 8.10 MiB (10 % margin)"
    assert (budget[3].text, budget[3].sub) == ("7.00 MiB", "fits the target")
    assert (budget[4].text, budget[4].sub) == ("7.00 MiB", "0.70×\u00a0(-30\u00a0%)")
    assert (budget[6].text, budget[6].sub) == ("1.20 s", "1.20×\u00a0(+20\u00a0%)")
    compiled = rows["compile_budget60"]
    assert compiled[1].text == "activation budget 0.75" and compiled[3].text == NA
    assert compiled[4].text == NA and "dispatch mode" in compiled[4].title  # no live peak, and why
    assert compiled[5].text == "8.00 MiB" and compiled[7].text == "2.50 s"  # compile time: its own column
    assert compiled[6].text == "1.40 s"  # not 3.9 s: the compile is not in the epochs
    assert compiled[2].sub.endswith("met or missed: not measurable here (no allocator peak, no live peak of compiled "
                                    "code)")
    # A compiled cell is read against the compiled anchor, the anchor against standard (the backend's own cost).
    assert compiled[6].sub == "1.27×\u00a0(+27\u00a0%)\u00a0of\u00a0compile_budget100"
    assert compiled[5].sub == "0.80×\u00a0(-20\u00a0%)\u00a0of\u00a0compile_budget100"
    anchor = rows["compile_budget100"]
    assert anchor[6].sub == "1.10×\u00a0(+10\u00a0%)" and "compiled anchor" in group.table.note
    offload = rows["offload"]
    # Host = device on a CPU: the 2 MiB sent to the host stay in the one memory there is.
    assert offload[5].text == "5.00 MiB" and "incl. 2.00 MiB host copies" in offload[5].sub
    oom = rows["budget20"]
    assert oom[0].text == "oom" and oom[0].sub == OOM_DETAIL and "status oom" in oom[0].css
    assert oom[1].text == "2 / 2 blocks" and oom[3].sub == "over the target"  # the plan is kept
    assert oom[4].text == "oom" and oom[6].text == "oom"
    on_gpu = dataclasses.replace(llm_cells[2], device="cuda:0")
    assert ma.host_copies_bytes(on_gpu) == 0 and ma.device_memory_bytes(on_gpu) == 3 * MIB  # the copies left it


def test_claim_lines_per_level_and_overall(llm_cells):
    """The paper's claim per level, an oom level n/a with its reason, adaptive against the compiler, overall."""
    view = build_memory_view(llm_cells)
    (group,) = view.groups
    assert group.claims == (
        "adaptive at 60 %: peak -30 % for +20 % time and +10 % energy (budget60 / standard; 1 of 2 blocks "
        "checkpointed)",
        f"adaptive at 20 %: n/a: budget20 ended oom ({OOM_DETAIL})",
    )
    sixty, twenty = group.versus
    assert sixty.startswith("at 60 % (target 8.10 MiB): against the compiler's knapsack, adaptive beats it: lower "
                            "memory at equal or less time (memory 0.88× of compile_budget60's on the breakdown sum; "
                            "recomputation time 0.94× of the compiler's, each against its own cell at the full budget: "
                            "budget60 / standard over compile_budget60 / the compiled anchor")
    # The anchor is the compiled cells' reference, not a budget level of its own.
    assert len(group.versus) == 2 and not any(line.startswith("at 100 %") for line in group.versus)
    assert "2.50 s compile is not in its epochs" in sixty
    assert twenty.startswith("at 20 % (target 4.50 MiB): against the compiler's knapsack n/a: budget20 ended oom")
    assert view.claims[0] == "adaptive at 60 %, 1 model: peak -30 % for +20 % time and +10 % energy"
    assert view.claims[1].startswith("adaptive at 20 %, 1 model: n/a: Llama-3.2-1B-shaped: budget20 ended oom")
    assert view.claims[-1] == ("adaptive against the compiler's knapsack at the same target, every level and model: "
                               "beats in 1, loses in 0 of 1 comparisons.")
    for line in (*group.claims, *group.versus, *view.claims):
        assert not re.search(r"(?<![\d.])0 %", line), line  # a missing side is n/a, never 0


def test_missing_standard_is_na_never_zero(llm_cells):
    """Without a standard cell: claims n/a with the reason, no ratios, no figure, and no zero anywhere."""
    view = build_memory_view([r for r in llm_cells if r.strategy != "standard"])
    (group,) = view.groups
    assert group.claims[0] == "adaptive at 60 %: n/a: no standard cell to compare with"
    assert group.figure.svg is None and group.figure.note == "n/a: no standard cell, so there is nothing to divide by."
    # Nothing to divide by, except for the compiled cells, whose reference is the compiled anchor.
    assert all("×" not in c.sub or "of\u00a0compile_budget100" in c.sub for row in group.table.rows for c in row.cells)
    assert "of\u00a0compile_budget100" in _rows(group.table)["compile_budget60"][6].sub
    assert group.table.note.startswith("No standard cell here: no ratios.")
    # Without standard the adaptive side's time has nothing to be read against: the verdict is n/a, not a guess.
    assert group.versus[0] == ("at 60 % (target 8.10 MiB): against the compiler's knapsack n/a: no standard cell to "
                               "read the adaptive cell's time against")
    html = render_html(build_view([r for r in llm_cells if r.strategy != "standard"]))
    section = re.sub(r"<svg.*?</svg>", "", _section(html, "memory-strategies"), flags=re.S)
    assert not re.search(r">0(\.0+)? ?(%|J|B|ms|s|MiB|GiB|×)<", section)
    failed_standard = build_memory_view([dataclasses.replace(llm_cells[0], status="error", detail="boom")] +
                                        llm_cells[1:]).groups[0]
    assert failed_standard.claims[0] == "adaptive at 60 %: n/a: standard ended error"
    assert failed_standard.figure.note.startswith("n/a: standard ended error")


def test_unmeasured_side_is_named(llm_cells, memory_record):
    """A standard cell without energy leaves the energy change n/a and says which quantity is missing."""
    cells = [memory_record("standard", joules=None), *llm_cells[1:]]
    (group,) = build_memory_view(cells).groups
    assert group.claims[0] == ("adaptive at 60 %: peak -30 % for +20 % time and n/a energy (budget60 / standard; 1 of "
                               "2 blocks checkpointed); energy not measured on one side")


def test_uneven_epochs_make_the_time_uncertain(llm_cells, memory_record):
    """A standard cell whose epochs took 0.5 s and 1.5 s: its range is shown and the claim says time is uncertain."""
    cells = [memory_record("standard", seconds=(0.5, 1.5)), *llm_cells[1:]]
    (group,) = build_memory_view(cells).groups
    time = _rows(group.table)["standard"][6]
    assert time.text == "1.00 s" and time.sub == "the reference · epochs 500 ms to 1.50 s"
    assert "within standard" in group.table.note and "uncertain" in group.table.note
    assert group.claims[0].endswith("; time uncertain: uneven epochs in standard (500 ms to 1.50 s)")
    assert "(time uncertain for Llama-3.2-1B-shaped: uneven epochs)" in build_memory_view(cells).claims[0]
    (steady,) = build_memory_view(llm_cells).groups
    assert "uncertain" not in " ".join(steady.claims) and "epochs" not in _rows(steady.table)["standard"][6].sub


@pytest.mark.parametrize(("memory", "time", "outcome"), [
    (3, 1.0, "beats"), (5, 1.2, "loses"), (4, 1.2, "ties"), (3, 1.4, "less memory, more time"),
    (5, 1.0, "more memory, less time"), (4.001, 1.199, "ties"),
])
def test_verdict_against_the_compiler(memory_record, memory, time, outcome):
    """Lower memory at equal or less time beats; the reverse loses; judged as printed (0.999× is a tie)."""
    from gradeff.analysis.runs import by_cell

    cells = by_cell([
        memory_record("budget60", activation=memory * MIB, seconds=time, plan=adaptive_plan(0.6)),
        memory_record("compile_budget60", peak=None, activation=4 * MIB, seconds=1.2, plan=compiler_plan(0.6)),
        memory_record("standard", seconds=1.0),
        # The anchor as fast as standard: the recomputation ratio is then the plain time ratio.
        memory_record("compile_budget100", peak=None, seconds=1.0, plan=compiler_plan(1.0, fraction=1.0))])
    adaptive, compiler, standard, anchor = (cells[f"llm-{key}"] for key in
                                            ("budget60", "compile_budget60", "standard", "compile_budget100"))
    assert ma.verdict(adaptive, compiler, standard=standard, anchor=anchor).outcome == outcome
    assert ma.verdict(adaptive, None).outcome == "n/a" and ma.verdict(None, compiler).reason == \
        "no adaptive cell at this level"
    # Without the anchor the compiler's time carries its backend's speed: no verdict.
    blind = ma.verdict(adaptive, compiler, standard=standard)
    assert blind.outcome == "n/a" and blind.reason.startswith("no compiled anchor") and blind.time is None


def test_a_slower_backend_is_not_charged_to_the_compilers_recomputation(memory_record):
    """A backend that runs everything twice as slow: the compiler at 2.4 s against its 2.0 s anchor (+20 %) ties
    with adaptive's 1.2 s against standard's 1.0 s (+20 %), where a plain time ratio would hand adaptive a 2×
    win; per seed, over three seeds."""
    from gradeff.analysis.runs import by_cell

    records = []
    for seed in range(3):
        scale = 1 + seed / 10
        records += [
            memory_record("standard", seconds=1.0 * scale, seed=seed),
            memory_record("budget60", activation=4 * MIB, seconds=1.2 * scale, plan=adaptive_plan(0.6), seed=seed),
            memory_record("compile_budget100", peak=None, seconds=2.0 * scale, plan=compiler_plan(1.0, fraction=1.0),
                          seed=seed),
            memory_record("compile_budget60", peak=None, activation=4 * MIB, seconds=2.4 * scale,
                          plan=compiler_plan(0.6), seed=seed)]
    cells = by_cell(records)
    standard, adaptive, anchor, compiler = (cells[f"llm-{key}"] for key in
                                            ("standard", "budget60", "compile_budget100", "compile_budget60"))
    result = ma.verdict(adaptive, compiler, standard=standard, anchor=anchor)
    assert result.outcome == "ties" and result.time == pytest.approx(1.0) and result.memory == pytest.approx(1.0)
    ratio = ma.recomputation_time(adaptive, standard, compiler, anchor)
    assert ratio.seeds == (0, 1, 2) and ratio.interval.n == 3
    failed = by_cell([dataclasses.replace(r, status="error", detail="boom") if r.strategy == "compile_budget100"
                      else r for r in records])
    assert ma.verdict(*(failed[f"llm-{k}"] for k in ("budget60", "compile_budget60")),
                      standard=failed["llm-standard"], anchor=failed["llm-compile_budget100"]).reason == \
        "compile_budget100 ended error"


def test_a_compiled_cell_on_a_gpu_is_judged_on_the_allocators_peak(memory_record, make_meters):
    """On a GPU the compiled cells' peak is the allocator's, labelled so, and each budget reads met or missed on
    it; an adaptive cell is never judged that way (its own prediction and live peak say whether it fits)."""
    def on_gpu(record, alloc):
        meters = make_meters(util=90.0, gpu_alloc=alloc, activation=record.meters["memory"]["activation_bytes"])
        return dataclasses.replace(record, device="cuda:0", meters=meters | {"memory": record.meters["memory"]})

    cells = [on_gpu(memory_record("standard"), 12 * MIB),
             on_gpu(memory_record("compile_budget60", peak=None, plan=compiler_plan(0.6)), 8 * MIB),
             on_gpu(memory_record("compile_budget20", peak=None, plan=compiler_plan(0.2, budget=5 * MIB)), 6 * MIB),
             on_gpu(memory_record("budget60", plan=adaptive_plan(0.6)), 20 * MIB)]
    rows = _rows(build_memory_view(cells).groups[0].table)
    sixty, twenty = rows["compile_budget60"], rows["compile_budget20"]
    assert (sixty[4].text, sixty[4].sub) == ("8.00 MiB", "allocator peak: compiled code has no live peak here")
    assert sixty[2].sub.endswith("met on the allocator's peak")  # 8 MiB within its 8.1 MiB target
    assert twenty[2].sub.endswith("missed: the allocator's peak is over the target")  # 6 MiB over 4.5 MiB
    assert "allocator" not in rows["budget60"][2].sub and ma.compiled_within_target(cells[3]) is None
    assert ma.compiled_within_target(dataclasses.replace(cells[1], status="oom")) is None


def test_figure_draws_one_marker_per_measured_cell(llm_cells):
    """Standard, checkpoint, offload, one adaptive and three compiler points: seven markers; the oom cell is named."""
    (group,) = build_memory_view(llm_cells).groups
    figure = group.figure
    assert figure.svg is not None
    assert len(re.findall(rf'id="{figure.id}-series-\d+-point-\d+"', figure.svg)) == 7
    assert "breakdown sum" in figure.caption and "compiled cells included" in figure.caption
    assert "Not drawn: budget20 (oom)." in figure.note and "host memory is the device memory" in figure.note
    for label in ("standard", "checkpoint", "offload", "adaptive (level %)", "torch.compile (level %)"):
        assert f">{label}<" in figure.svg
    three = build_memory_view([r for r in llm_cells if r.strategy in ("standard", "checkpoint", "budget60")])
    assert len(re.findall(r'id="[^"]*-point-\d+"', three.groups[0].figure.svg)) == 3


def test_format_change_and_range():
    """Changes are signed percents; a range runs lowest to highest, one value when both ends print alike."""
    assert format_change(0.72) == "-28 %" and format_change(1.2) == "+20 %" and format_change(None) == NA
    assert format_range([0.9, None, 0.7]) == "-30 % to -10 %" and format_range([0.7001, 0.7]) == "-30 %"
    assert format_range([None]) == NA and format_range([]) == NA


def test_peft_budget_column_ratios_and_claims(make_peft_record):
    """The PEFT grid's budget strategy: its column, budget / standard ratios, and the claim per backbone."""
    def cell(method, strategy, peak, seconds, joules, **kw):
        record = make_peft_record(method=method, strategy=strategy, seconds=(seconds, seconds), joules=joules, **kw)
        record.meters["memory"]["peak_bytes"] = peak
        return record

    budget = {"kind": "adaptive", "budget_fraction": None, "budget_bytes": 10 * MIB, "margin": 0.1,
              "checkpointed_layers": 2, "layers": 4}
    records = [
        cell("full", "standard", 20 * MIB, 2.0, 20.0), cell("full", "checkpoint", 10 * MIB, 3.0, 30.0),
        cell("full", "budget", 12 * MIB, 2.4, 22.0, plan=budget),
        cell("lora", "standard", 10 * MIB, 1.0, 10.0), cell("lora", "budget", 9 * MIB, 1.1, 12.0, plan=budget),
        cell("bitfit", "budget", 8 * MIB, 1.0, 9.0, plan=budget),  # no standard to divide by
        cell("qlora", "standard", 11 * MIB, 1.0, 10.0),
        dataclasses.replace(cell("qlora", "budget", 11 * MIB, 1.0, 10.0, plan=budget), status="oom",
                            detail="over budget"),
    ]
    peft = build_peft_view(records)
    group = peft.groups[0]
    memory = next(t for t in group.tables if "Training memory" in t.caption)
    assert memory.header == ("method", "standard", "checkpoint", "budget") and memory.id.endswith("-peak")
    assert "live-tensor peak" in memory.note
    assert {t.id for t in peft.ratios} == {"peft-ratio-peak", "peft-ratio-epoch_seconds", "peft-ratio-energy"}
    checkpoint = _rows(next(t for t in peft.ratios if t.id == "peft-ratio-peak"))
    assert checkpoint["Full fine-tuning"][0].text == "0.50×"
    ratios = {t.id: _rows(t) for t in peft.budget_ratios}
    assert set(ratios) == {"peft-ratio-budget-peak", "peft-ratio-budget-epoch_seconds", "peft-ratio-budget-energy"}
    assert ratios["peft-ratio-budget-peak"]["Full fine-tuning"][0].text == "0.60×"
    assert ratios["peft-ratio-budget-peak"]["LoRA"][0].text == "0.90×"
    assert ratios["peft-ratio-budget-peak"]["BitFit (biases only)"][0].text == NA
    ratio = peft_analysis.checkpoint_ratios(records, "energy", numerator="budget")[("vit_s", "cifar100", "lora")]
    assert ratio.interval.mean == pytest.approx(1.2) and ratio.seeds == (0,)
    (line,) = build_memory_view([], records).peft_claims
    assert line == ("ViT-S/16: adaptive (budget 10.0 MiB): peak -40 % to -10 % for +10 % to +20 % time and +10 % to "
                    "+20 % energy over 2 method × dataset pairs (peak: the live-tensor peak of a step); n/a for "
                    "qlora/cifar100: budget ended oom (over budget); bitfit/cifar100: no standard cell to compare with")
    assert build_peft_view([r for r in records if r.strategy != "budget"]).budget_ratios == ()
    none = build_memory_view([], [r for r in records if r.strategy != "budget"])
    assert none.peft_claims == () and none.peft_note.startswith("n/a: no PEFT cell used the budget strategy")


@pytest.mark.parametrize("plan", [{}, {"something_new": [1, 2]}, {"budget_bytes": "big", "kind": "mystery",
                                                                  "checkpointed_layers": None, "fits": "yes"}, []])
def test_records_without_a_plan_or_with_unknown_keys_render(llm_cells, plan):
    """Older and hand-edited plans: the summary and the section render, unknown values read as n/a."""
    odd = dataclasses.replace(llm_cells[3], plan=plan)
    records = [llm_cells[0], odd]
    html = render_html(build_view(records))
    assert "memory-strategies" in html
    row = _rows(build_memory_view(records).groups[0].table)["budget60"]
    assert row[2].text == NA and row[3].text == NA and row[4].text == "7.00 MiB"
    if plan == {}:
        assert row[1].title.startswith("this record carries no plan")
    if plan in ({}, {"something_new": [1, 2]}, []):
        assert any(line.startswith("llm-budget60") for line in summary_lines(records))


def test_methods_explain_the_section(llm_cells):
    """Live peak, the plan's prediction, the margin in use, compile time out of epochs, offload with host = device."""
    methods = dict(build_memory_view(llm_cells).methods)
    assert "dispatch mode" in methods["Live peak"]
    assert "fewest blocks" in methods["Plan's prediction"]
    assert "These plans kept 10 % free." in methods["Margin"]
    assert "never part of the time per epoch" in methods["Compile time"]
    assert "saves nothing" in methods["Host offload"] and "ran on cpu: host = device" in methods["Host offload"]
    assert "estimate" in methods["Energy"]


def test_mixed_results_file_of_three_grids_renders(llm_cells, memory_record, make_peft_record, grid_records,
                                                   tmp_path):
    """A results file holding all three grids renders every section with unique safe ids, inline SVG, escaping."""
    path = tmp_path / "results.jsonl"
    odd = memory_record("standard", model=SCRIPT, detail=SCRIPT)
    peft = [make_peft_record(method="full"), make_peft_record(method="lora"),
            make_peft_record(method="lora", strategy="budget",
                              plan={"kind": "adaptive", "budget_bytes": 10 * MIB, "margin": 0.1})]
    for record in (*grid_records, *peft, *llm_cells, *[memory_record(r.strategy, model="vit_s", plan=r.plan,
                                                                         peak=r.meters["memory"]["peak_bytes"])
                                                           for r in llm_cells if r.status == "ok"], odd):
        append_record(path, record)
    records = list(read_records(path))
    html = write_report(records, tmp_path / "report.html", sources=[str(path)]).read_text(encoding="utf-8")
    self_contained_page(html)
    assert "<script" not in without_own_script(html).lower() and "&lt;script&gt;" in html
    assert "@import" not in html and "url(http" not in html and "<?xml" not in html
    # The main study's 9 figures, the PEFT study's 2, and one per memory-study model with a standard cell (3).
    assert html.count("<svg ") == 4 * 2 + 1 + 2 + 3
    memory = _section(html, "memory-strategies")
    assert "Llama-3.2-1B-shaped" in memory and "ViT-S/16" in memory and "adaptive at 60 %" in memory
    assert "PEFT study: budget against standard" in memory and "ViT-S/16: adaptive (budget 10.0 MiB)" in memory
    for section in ("tables", "pareto", "curves"):
        assert "budget60" not in _section(html, section) and "compile_budget" not in _section(html, section)
    assert "budget60" not in _section(html, "peft")
    assert [s.id for s in SECTIONS].index("memory-strategies") == [s.id for s in SECTIONS].index("peft") + 1
    header, rows = csv_table(records)
    grids = [row[header.index("grid")] for row in rows]
    assert grids == sorted(grids, key=["main", "peft", "memory", "real"].index)  # each study's rows together


def test_levels_with_the_same_adaptive_plan_are_one_entry(memory_record):
    """Four levels whose plans checkpoint the same block: one claim line and one point, the levels named together."""
    cells = [memory_record("standard", peak=10 * MIB, seconds=1.0)]
    for percent, seconds in ((80, 1.20), (60, 1.21), (40, 1.19), (20, 1.22)):
        cells.append(memory_record(f"budget{percent}", peak=7 * MIB, activation=4 * MIB, seconds=seconds,
                                   joules=11.0, plan=adaptive_plan(percent / 100)))
    cells.append(memory_record("compile_budget80", peak=None, activation=5 * MIB, seconds=1.4,
                               plan=compiler_plan(0.8)))
    view = build_memory_view(cells)
    (group,) = view.groups
    assert group.claims == ("adaptive at 80/60/40/20 % (the same plan at each: one entry): peak -30 % for +20 % "
                            "time and +10 % energy (budget80 / standard; 1 of 2 blocks checkpointed)",)
    assert len(group.versus) == 4  # the compiler's levels still differ, each against its own
    assert view.claims[0].startswith("adaptive at 80/60/40/20 % (the same plan at each: one entry), 1 model:")
    assert len(re.findall(rf'id="{group.figure.id}-series-\d+-point-\d+"', group.figure.svg)) == 3
    assert ">80/60/40/20<" in group.figure.svg
    # A level whose plan differs stays apart.
    cells[-2] = memory_record("budget20", peak=5 * MIB, activation=2 * MIB, seconds=1.5,
                              plan=adaptive_plan(0.2, chosen=2))
    assert [line.split(":")[0] for line in build_memory_view(cells).groups[0].claims] == [
        "adaptive at 80/60/40 % (the same plan at each", "adaptive at 20 %"]
