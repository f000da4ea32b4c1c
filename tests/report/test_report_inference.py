"""The PEFT section's inference cost, NetScore-family tables and ranking, baselines against fine-tuning, and claims."""

from types import SimpleNamespace

import pytest
from markupsafe import escape

from gradeff.analysis import peft as peft_analysis
from gradeff.analysis.claim_rules import VERDICTS
from gradeff.analysis.claims import CLAIMS, ClaimResult
from gradeff.analysis.netscore import netscore_family
from gradeff.records.formatting import NA, format_energy, format_rate
from gradeff.records.results import Summary
from gradeff.report import SECTIONS, build_view, render_html
from gradeff.report import claims as claims_report
from gradeff.report.inference import ESTIMATED, RANKING_NOTE
from gradeff.report.peft import build_peft_view

SCRIPT = "<script>alert(1)</script>"

# The PEFT study's claims: the paper's four and the raw-pixel sanity check.
_PEFT_CLAIMS = sum(claim.study == "peft" for claim in CLAIMS)


def inference(accuracy, *, parameters=200_000, macs=4_000_000, seconds=0.2, joules=0.9, source="estimate",
              peak=3 * 2**20, images=256):
    """A ``record.inference`` dict as the runner writes it, its scores computed by gradeff.analysis.netscore."""
    power = None if joules is None else joules / seconds
    scores = netscore_family(accuracy, parameters, macs, seconds, power, peak, source)
    return {"parameters": parameters, "macs_per_image": macs, "macs_by_op": {}, "grad_mode": "inference_mode",
            "latency_s": 0.004, "latency_p90_s": 0.006, "latency_samples": 16, "batch_size": 32,
            "throughput_images": images, "throughput_seconds": seconds, "images_per_s": images / seconds,
            "peak_bytes": peak, "peak_by_device": {"cpu": peak}, "allocator_peak_bytes": None,
            "energy_source": source, "energy_joules": joules,
            "energy_per_image_j": None if joules is None else joules / images, "mean_power_w": power,
            "energy_estimated": source == "estimate" and joules is not None,
            "scores": {key: score.as_dict() for key, score in scores.items()}}


@pytest.fixture
def tuned(make_peft_record):
    """A fine-tuning record with its inference cost at its final accuracy."""
    def make(model="vit_s", method="lora", strategy="standard", dataset="cifar100", accuracy=0.6, cost=None,
             **overrides):
        return make_peft_record(model=model, method=method, strategy=strategy, dataset=dataset,
                                accuracies=(0.3, accuracy), weights={"source": "pretrained", "path": "/c",
                                                                     "pretraining": None},
                                **{"inference": inference(accuracy, **(cost or {}))} | overrides)
    return make


@pytest.fixture
def baseline(make_peft_record):
    """A baseline record: zero-shot (no epochs, one evaluation) or a linear probe, random weights by default."""
    def make(model="clip", method="zero_shot", dataset="cifar100", accuracy=0.01, source="random", cost=None,
             **overrides):
        epochs = {} if method != "zero_shot" else {
            "epochs": (), "summary": Summary.of([], 0.5, untrained=SimpleNamespace(loss=4.6, accuracy=accuracy)),
            "meters": {}}
        pretraining = {"optimizer_steps": 256, "heldout_accuracy": 0.91, "seconds": 50.0} \
            if source == "pretrained" else None
        return make_peft_record(model=model, method=method, dataset=dataset, grid="baselines",
                                cell=f"{model}-{method}-{dataset}", accuracies=(0.2, accuracy),
                                weights={"source": source, "path": "/w" if source == "local" else None,
                                         "pretraining": pretraining},
                                inference=inference(accuracy, **(cost or {})), **epochs | overrides)
    return make


def _rows(table):
    return {row.label: row.cells for row in table.rows}


def _inference_table(view, slug_end):
    return next(t for t in view.inference if t.id.endswith(f"{slug_end}-inference"))


def test_formatters_keep_three_digits_and_na():
    """Energy per image in µJ / mJ / J and rates in img/s, three significant digits; None reads n/a."""
    assert format_energy(0.0043) == "4.30 mJ" and format_energy(2.5e-5) == "25.0 µJ" and format_energy(3) == "3.00 J"
    assert format_rate(1362.7) == "1.36k img/s" and format_rate(45.25) == "45.2 img/s"
    assert format_energy(None) == NA and format_rate(float("nan")) == NA


def test_inference_table_labels_estimates_and_never_prints_zero_for_missing(tuned):
    """Estimated energy and NS-E/NS# read (est.); a meter's do not; an unmeasured power is n/a named in the tooltip."""
    records = [tuned(method="full", accuracy=0.5),
               tuned(method="lora", accuracy=0.6, cost={"source": "rapl", "joules": 0.5}),
               tuned(method="bitfit", accuracy=0.55, cost={"source": "none", "joules": None}),
               tuned(method="adalora", accuracy=0.58, inference={}),
               tuned(method="qlora", status="oom", detail="CUDA out of memory")]
    view = build_peft_view(records)
    table = _inference_table(view, "vit_s-cifar100")
    assert table.header == ("cell", "latency (batch 1)", "throughput", "peak inference memory", "energy per image",
                            "MACs per image", "NetScore (dB)", "NS-E (dB)", "NS-M (dB)", "NS# (dB)")
    rows = _rows(table)
    full, lora, bitfit = (rows["Full fine-tuning + standard"], rows["LoRA + standard"],
                          rows["BitFit (biases only) + standard"])
    assert [c.text for c in full[:5]] == ["4.00 ms", "1.28k img/s", "3.00 MiB", f"3.52 mJ {ESTIMATED}", "4.00M"]
    assert full[3].sub == "source: estimate" and full[3].css == "estimated" and full[1].sub == "batches of 32"
    expected = netscore_family(0.5, 200_000, 4_000_000, 0.2, 4.5, 3 * 2**20, "estimate")
    assert full[5].text == f"{expected['netscore'].value:.1f}" and ESTIMATED not in full[5].text
    assert full[6].text == f"{expected['ns_e'].value:.1f} {ESTIMATED}" and full[6].css == "estimated"
    assert full[7].text == f"{expected['ns_m'].value:.1f}" and full[8].text.endswith(ESTIMATED)
    assert not any(ESTIMATED in c.text for c in lora) and lora[3].sub == "source: rapl"
    # No energy meter: energy, NS-E and NS# are n/a with the missing input named, never 0.
    assert [bitfit[i].text for i in (3, 6, 8)] == [NA, NA, NA]
    assert bitfit[3].title == "no energy meter (source none)"
    assert "mean power of the inference pass" in bitfit[6].title and bitfit[6].css == "na"
    assert bitfit[5].text != NA and bitfit[7].text != NA
    assert all(c.text == NA and "no inference cost" in c.title for c in rows["AdaLoRA + standard"])
    qlora = rows["QLoRA (4-bit NF4 + LoRA) + standard"]
    assert qlora[0].text == "oom" and all(c.text == NA for c in qlora[1:])
    assert all(c.text != "0" and not c.text.startswith("0.0 ") for row in table.rows for c in row.cells)
    assert "Energy source: estimate, none, rapl." in table.note


def test_cells_that_deploy_the_standard_cells_model_are_named_once_not_measured_again(tuned):
    """Checkpointing and the adaptive budget train the standard cell's model bit for bit and carry no inference
    cost: they are left out of the cost table and the ranking, named in the note, never shown as n/a rows. A
    checkpoint cell that does carry one (an older record) keeps its row."""
    records = [tuned(method="lora", accuracy=0.7), tuned(method="lora", strategy="checkpoint", inference=None),
               tuned(method="lora", strategy="budget", inference=None),
               tuned(method="full", strategy="checkpoint"), tuned(method="bitfit", strategy="accum", inference=None)]
    view = build_peft_view(records)
    table = _inference_table(view, "vit_s-cifar100")
    assert list(_rows(table)) == ["Full fine-tuning + checkpoint", "LoRA + standard", "BitFit (biases only) + accum"]
    assert "the standard cell's model bit for bit" in table.note
    assert "LoRA + checkpoint; LoRA + budget." in table.note
    ranked = [c.text for c in next(zip(*(row.cells for row in view.ranking[0].rows), strict=True))]
    assert ranked == ["ViT-S/16 · LoRA + standard", "ViT-S/16 · Full fine-tuning + checkpoint"]
    assert "LoRA + checkpoint" not in view.ranking[0].note and "bitfit" in view.ranking[0].note.lower()


def test_zero_energy_and_zero_macs_read_na(tuned):
    """An estimate that read 0 J and a model with no counted MACs show n/a with why, and their scores n/a too."""
    record = tuned(cost={"joules": 0.0, "macs": 0})
    cells = _rows(_inference_table(build_peft_view([record]), "vit_s-cifar100"))["LoRA + standard"]
    assert cells[3].text == NA and "below its resolution" in cells[3].title
    assert cells[4].text == NA and "no registered formula" in cells[4].title
    assert cells[5].text == NA and "MACs per image" in cells[5].title
    assert cells[6].text == NA and "mean power" in cells[6].title


def test_netscore_ranking_orders_each_score_top_first(tuned, baseline):
    """Per dataset, fine-tuned cells and baselines ranked by each score, highest first; unscorable cells noted."""
    records = [tuned(method="full", accuracy=0.4), tuned(method="lora", accuracy=0.7),
               tuned(model="tinyvit", method="lora", accuracy=0.6, cost={"source": "none", "joules": None}),
               tuned(method="bitfit", status="diverged", detail="nan"),
               baseline(model="dinov2", method="linear_probe", accuracy=0.5, source="pretrained"),
               baseline(model="clip", accuracy=0.01),
               tuned(dataset="dtd", accuracy=0.3)]
    view = build_peft_view(records)
    assert [t.id for t in view.ranking] == ["peft-ranking-0-cifar100", "peft-ranking-1-dtd"]
    table = view.ranking[0]
    assert table.header == ("rank", "NetScore", "NS-E", "NS-M", "NS#")
    columns = list(zip(*(row.cells for row in table.rows), strict=True))
    netscore = [c.text for c in columns[0]]
    assert netscore == ["ViT-S/16 · LoRA + standard", "TinyViT · LoRA + standard",
                        "DINOv2-shaped, pretrained here on a synthetic task, 0.10 M params · baseline",
                        "ViT-S/16 · Full fine-tuning + standard"]
    values = [float(c.sub.split(" dB")[0]) for c in columns[0]]
    assert values == sorted(values, reverse=True)
    # NS-E needs a power: TinyViT without a meter is not ranked there, and the padding cell is empty, not 0.
    assert [c.text for c in columns[1]] == ["ViT-S/16 · LoRA + standard",
                                            "DINOv2-shaped, pretrained here on a synthetic task, 0.10 M params"
                                            " · baseline",
                                            "ViT-S/16 · Full fine-tuning + standard", ""]
    assert all(c.sub.endswith(f"dB {ESTIMATED}") for c in columns[1][:3]) and columns[1][3].css == "empty"
    assert ESTIMATED not in columns[0][0].sub and ESTIMATED not in columns[2][0].sub
    assert [row.label for row in table.rows] == ["1", "2", "3", "4"]
    assert "No NS-E (an input not measured): TinyViT · LoRA + standard." in table.note
    assert ("Left out, random weights (at chance by construction): CLIP-shaped, random init, 0.10 M params · baseline."
            in table.note)
    assert "Left out, no seed ended ok: vit_s-bitfit-standard-cifar100." in table.note
    assert not any("CLIP" in c.text for c in columns[0])
    assert view.ranking_note == RANKING_NOTE and "MiB" in RANKING_NOTE and "never read one alone" in RANKING_NOTE
    assert [c.text for c in view.ranking[1].rows[0].cells] == ["ViT-S/16 · LoRA + standard"] * 4


def test_ranking_ties_keep_study_order(tuned):
    """Equal scores keep the study's order (method, then strategy), so a page rendered twice reads the same."""
    records = [tuned(method="lora", strategy="checkpoint"), tuned(method="lora"), tuned(method="full")]
    ranked = peft_analysis.netscore_ranking(peft_analysis.sort_peft(records), "netscore")
    assert [r.cell for r, _ in ranked] == ["vit_s-full-standard-cifar100", "vit_s-lora-standard-cifar100",
                                          "vit_s-lora-checkpoint-cifar100"]


def test_baselines_stand_apart_from_the_fine_tuning_tables(tuned, baseline):
    """Baselines are in their own table, next to each backbone's best fine-tuned cell, not in method × strategy."""
    records = [tuned(method="full", accuracy=0.5), tuned(method="lora", accuracy=0.7),
               tuned(model="tinyvit", method="full", accuracy=0.65),
               baseline(model="clip", accuracy=0.01),
               baseline(model="dinov2", method="linear_probe", accuracy=0.45, source="pretrained"),
               baseline(model="siglip", accuracy=0.2, source="local", dataset="dtd")]
    view = build_view(records)
    peft = view.peft
    assert [g.title.split(",")[0] for g in peft.groups] == ["ViT-S/16-shaped", "TinyViT-shaped"]
    assert [t.id for t in peft.inference] == ["p0-vit_s-cifar100-inference", "p1-tinyvit-cifar100-inference",
                                              "b0-clip-cifar100-inference", "b1-siglip-dtd-inference",
                                              "b2-dinov2-cifar100-inference"]
    assert [b.title for b in peft.baselines] == ["CIFAR-100-like (synthetic)", "DTD-like (synthetic textures)"]
    cifar = peft.baselines[0]
    rows = _rows(cifar.table)
    assert list(rows) == ["CLIP-shaped, random init, 0.10 M params",
                          "DINOv2-shaped, pretrained here on a synthetic task, 0.10 M params", "ViT-S/16", "TinyViT"]
    assert cifar.table.header[:6] == ("model", "kind", "starting weights", "held-out accuracy",
                                      "training / probe time", "training energy")
    clip, dinov2, vit = (rows["CLIP-shaped, random init, 0.10 M params"],
                         rows["DINOv2-shaped, pretrained here on a synthetic task, 0.10 M params"], rows["ViT-S/16"])
    assert [c.text for c in clip[:5]] == ["baseline: zero-shot", "random", "1.0 %", "none", "none"]
    assert clip[2].css == "random" and "at chance by construction, not a finding" in clip[2].sub
    assert clip[8].css.endswith("random") and clip[8].sub == "random weights"
    assert [c.text for c in dinov2[:5]] == ["baseline: linear probe", "pretrained", "45.0 %", "2.00 s",
                                            f"10.0 J {ESTIMATED}"]
    assert dinov2[2].css == "" and dinov2[3].sub == "2 epochs"
    assert vit[0].text == "best fine-tuned: LoRA + standard" and vit[2].text == "70.0 %"
    assert cifar.weights[0] == ("CLIP-shaped, random init, 0.10 M params: random weights, so it scores at chance by "
                                "construction; "
                                "its accuracy is not a finding; give real weights with --gradeff-weights clip=PATH.")
    assert cifar.weights[1].startswith("DINOv2-shaped, pretrained here on a synthetic task, 0.10 M params: "
                                       "the suite's own "
                                       "pretraining on a synthetic "
                                       "source task (cached; 256 steps, source-task held-out accuracy 91.0 %)")
    dtd = peft.baselines[1]
    assert "No fine-tuning cell ran on this dataset." in dtd.table.note
    assert dtd.weights == ("SigLIP B/16-224 (zero-shot): weights loaded from the local folder /w (--gradeff-weights).",)
    html = render_html(view)
    section = html.split('<section class="top" id="peft">', 1)[1].split("</section>", 1)[0]
    assert 'id="peft-baselines-0-cifar100-table"' in section and "scores at chance by construction" in section
    appendix = html.split('<section class="top" id="tables">', 1)[1].split("</section>", 1)[0]
    # The method × strategy tables are the fine-tuning cells' (in the flat table behind the appendix's link).
    assert all("CLIP" not in row.label for group in peft.groups for t in group.tables for row in t.rows)
    assert "CLIP" not in appendix and "Zero-shot" not in appendix


def test_a_random_linear_probe_is_not_called_a_finding(baseline, tuned):
    """A probe of random features is flagged too, without claiming chance accuracy."""
    view = build_peft_view([tuned(), baseline(model="dinov2", method="linear_probe", accuracy=0.3)])
    (line,) = view.baselines[0].weights
    assert "random weights: the probe reads random features" in line and "--gradeff-weights dinov2=PATH" in line
    accuracy = _rows(view.baselines[0].table)["DINOv2-shaped, random init, 0.10 M params"][2]
    assert accuracy.css == "random" and "a probe of random features, not a finding" in accuracy.sub


def test_only_baselines_render_without_fine_tuning_parts(baseline):
    """With baselines alone, the fine-tuning parts give one note and the baselines and scores still show."""
    records = [baseline(model="dinov2", method="linear_probe", accuracy=0.4, source="pretrained")]
    view = build_view(records)
    assert view.peft.tuned_note and view.peft.groups == () and len(view.peft.baselines) == 1
    from gradeff.report.csv_export import csv_table

    header, rows = csv_table(records)  # the flat table the page links: each cell's inference cost and scores
    latency = rows[0][header.index("inference.latency_s")]
    assert latency == repr(records[0].inference["latency_s"]) and "inference.energy_per_image_j" in header
    html = render_html(view)
    assert view.peft.tuned_note in html and 'id="peft-pick-table"' not in html
    # Each cell's inference cost and ranking scores are in the view, and in the page's flat table of every cell.
    assert [t.id for t in view.peft.inference] == ["b0-dinov2-cifar100-inference"]
    assert [t.id for t in view.peft.ranking][:1] == ["peft-ranking-0-cifar100"]
    assert "inference.scores" in html and 'id="peft-baselines-0-cifar100-table"' in html


def test_overview_and_methods_name_inference_netscore_and_claims(tuned):
    """The overview counts the cells carrying inference cost and the verdicts; the methods explain units and rules."""
    view = build_view([tuned(), tuned(method="full", inference={})])
    overview = dict(view.overview)
    assert overview["inference cost"].startswith("1 of 2 cells: latency at batch 1")
    assert "dB in the papers' units" in overview["inference cost"] and "(est.)" in overview["inference cost"]
    assert overview["claims"].startswith(f"{_PEFT_CLAIMS} not measurable here: ")
    methods = dict(view.methods)
    assert "MiB" in methods["NetScore family"] and "never 0" in methods["NetScore family"]
    assert "1 of the 2 cells here carry it." in methods["Inference cost"]
    assert "with no other tolerance" in methods["Claims"] and "--gradeff-weights" in methods["Baselines"]


def test_claims_table_renders_each_verdict_grouped_by_study(monkeypatch, make_record, tuned):
    """Every verdict gets its own style; each study present gets its own group, the main study first."""
    results = [ClaimResult(study="main", key=f"m{i}", claim=f"main claim {i} {SCRIPT}", measured=f"figure {i}",
                           verdict=verdict, why=f"rule {i}", scale="" if verdict == VERDICTS[3] else "tiny profile",
                           grids=("main",))
               for i, verdict in enumerate(VERDICTS)]
    results.insert(0, ClaimResult(study="peft", key="p", claim="peft claim", measured="n/a", verdict=VERDICTS[3],
                                  why="needs cells", grids=("peft", "baselines")))
    monkeypatch.setattr(claims_report, "evaluate_claims", lambda records: results)
    view = build_view([make_record("vit-sgd-standard"), tuned()])
    assert [g.title for g in view.claims.groups] == [claims_report.claims_title("main"),
                                                     claims_report.claims_title("peft")]
    main = view.claims.groups[0].table
    assert main.header == ("claim", "measured here", "verdict", "why", "scale")
    assert main.caption.endswith("(grids read: main)")
    assert view.claims.groups[1].table.caption.endswith("(grids read: peft, baselines)")
    assert [row.cells[1].css for row in main.rows] == ["verdict reproduced", "verdict not-reproduced",
                                                       "verdict contradicted", "verdict not-measurable-here"]
    assert [row.cells[3].text for row in main.rows] == ["tiny profile"] * 3 + [NA]
    assert main.note == "1 reproduced, 1 not reproduced, 1 contradicted, 1 not measurable here."
    assert view.claims.groups[1].table.rows[0].cells[0].text == NA
    html = render_html(view)
    section = html.split('<section class="top" id="claims">', 1)[1].split("</section>", 1)[0]
    for verdict in VERDICTS:
        css = claims_report.verdict_css(verdict)
        assert f'<td class="{css}" title="{escape(claims_report.VERDICT_MEANINGS[verdict])}">{verdict}</td>' in section
    assert section.index('id="claims-main"') < section.index('id="claims-peft"')
    assert SCRIPT not in html and "&lt;script&gt;" in section
    assert "claims" in {s.id for s in SECTIONS}
    assert dict(view.overview)["claims"].startswith("1 reproduced, 1 not reproduced, 1 contradicted, 2 not measurable")


def test_claim_groups_take_their_titles_and_order_from_the_study_registry(monkeypatch, make_record):
    """A claim of any registered study is grouped under that study's registered title, in the registry's order;
    its table is present when the records hold a grid the claim reads, though none of the study's own."""
    from gradeff.studies.study import STUDIES

    results = [ClaimResult(study=study, key=study, claim=f"{study} claim", measured="n/a", verdict=VERDICTS[3],
                           why="", grids=grids) for study, grids in (("real", ("main",)), ("main", ("main",)))]
    monkeypatch.setattr(claims_report, "evaluate_claims", lambda records: results)
    view = build_view([make_record("vit-sgd-standard")])
    assert [g.title for g in view.claims.groups] == [STUDIES["main"].title, STUDIES["real"].title]
    assert all(g.table.rows for g in view.claims.groups)


def test_a_study_without_records_gets_one_line_not_a_table_of_na(tuned):
    """With PEFT records only, the main study's claims are one note; the summary counts the PEFT claims alone."""
    view = build_view([tuned()])
    groups = {g.title: g.table for g in view.claims.groups}
    main = groups[claims_report.claims_title("main")]
    assert main.rows == () and main.note.startswith("n/a: no records of this study in these results")
    assert len(groups[claims_report.claims_title("peft")].rows) == _PEFT_CLAIMS
    assert view.claims.summary == f"{_PEFT_CLAIMS} not measurable here"


def test_claims_section_evaluates_the_records(tuned, baseline):
    """From real records: a self-pretrained DINOv2 stand-in is not measurable; with real weights, a probe trailing
    fine-tuning contradicts the claim, with the scale caveat."""
    records = [tuned(accuracy=0.7), baseline(model="dinov2", method="linear_probe", accuracy=0.45,
                                             source="pretrained")]

    def rows_of(records):
        group = next(g for g in build_view(records).claims.groups if g.id == "claims-peft-group")
        return {row.label: row.cells for row in group.table.rows}

    dinov2 = next(cells for claim, cells in rows_of(records).items() if claim.startswith("DINOv2 surpasses"))
    assert dinov2[1].text == "not measurable here" and "a stand-in, not the named model's weights" in dinov2[2].text
    records[1] = baseline(model="dinov2", method="linear_probe", accuracy=0.45, source="local")
    rows = rows_of(records)
    dinov2 = next(cells for claim, cells in rows.items() if claim.startswith("DINOv2 surpasses"))
    assert dinov2[1].text == "contradicted" and dinov2[1].css == "verdict contradicted"
    assert dinov2[1].sub == "single draw"
    assert dinov2[0].text.startswith("DINOv2 probe 45.0 % vs best fine-tuned 70.0 %")
    assert "tiny profile" in dinov2[3].text
    prompted = next(cells for claim, cells in rows.items() if "autoregressive VLMs" in claim)
    assert prompted[1].text == "not measurable here" and prompted[3].text == NA
