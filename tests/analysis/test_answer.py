"""The Answer: verdicts per model over every seed, each study its own lines, names that say what ran."""

import random

from gradeff.analysis import naming
from gradeff.analysis.answer import SANITY_METHOD, answer, cell_label, line_text, sanity_accuracy, verdict_text
from gradeff.analysis.runs import by_cell
from gradeff.analysis.verdicts import verdict, verdicts
from tests.analysis.factories import run, runs


def _reached(seconds):
    return {"target_loss": 5.0, "steps_to_target": 8, "seconds_to_target": seconds, "joules_to_target": seconds}


def test_quality_winner_with_interval_and_n():
    """Over three seeds the best test loss wins with its mean ± half-width and n; training loss plays no part."""
    records = [*runs("llm-adam-standard", (1.0, 1.1, 1.05), train=9.0),
               *runs("llm-sgd-standard", (2.0, 2.1, 2.2), train=0.1)]
    found = verdicts(records)["quality"]
    assert found.ranking.outcome == "winner" and found.best.cell == "llm-adam-standard"
    assert found.interval.n == 3 and found.metric.key == "test_loss"
    text = verdict_text(found, {"llm-adam-standard": "adam/standard", "llm-sgd-standard": "sgd/standard"})
    assert text.startswith("winner adam/standard 1.05 ± ") and "(n=3)" in text
    assert "ahead of every other cell (n=3, detects ±" in text
    assert [g[0].cell for g in found.groups()] == ["llm-adam-standard"]


def test_open_equivalent_identical_and_one_seed_in_words():
    """Open names the cells against the best and what would decide it; identical cells are one entry; one seed is
    open; cells within the margin are equivalent."""
    labels = {c: c.split("-", 1)[1] for c in ("llm-adam-standard", "llm-adam-checkpoint", "llm-sgd-standard")}
    tied = verdicts([*runs("llm-adam-standard", (1.0, 1.4, 1.2)), *runs("llm-sgd-standard", (1.3, 1.1, 1.25))])
    text = verdict_text(tied["quality"], labels)
    assert text.startswith("open: adam-standard 1.2 ± 0.4968 (n=3) against sgd-standard (n=3, detects ±")
    assert text.endswith("more seeds than the spread can tell)")
    close = verdicts([*runs("llm-adam-standard", (1.0, 1.2, 1.1, 1.05)),
                      *runs("llm-sgd-standard", (1.001, 1.2015, 1.1005, 1.0512))])
    assert verdict_text(close["quality"], labels).startswith("equivalent adam-standard 1.087 ± ")
    assert "; sgd-standard (within ±1 %, n=4, detects ±" in verdict_text(close["quality"], labels)
    same = verdicts([*runs("llm-adam-standard", (1.0, 1.4)), *runs("llm-adam-checkpoint", (1.0, 1.4))])
    assert verdict_text(same["quality"], labels).startswith("adam-standard ≡ adam-checkpoint (identical) 1.2 ± ")
    assert verdict_text(same["quality"], labels).endswith("every cell gave the same numbers")
    draw = verdicts([run("llm-adam-standard", test=1.0), run("llm-sgd-standard", test=2.0)])
    assert verdict_text(draw["quality"], labels) == \
        "open: adam-standard 1 against sgd-standard (n=1; one seed cannot be tested)"
    equal = verdicts([run("llm-adam-standard", test=1.0), run("llm-sgd-standard", test=1.0, train=0.2)])
    assert verdict_text(equal["quality"], labels) == \
        "open: sgd-standard 1 against adam-standard (n=1; one seed cannot be tested)"
    alone = verdicts([*runs("llm-adam-standard", (1.0, 1.4))])
    assert verdict_text(alone["quality"], labels) == "winner adam-standard 1.2 ± 2.541 (n=2) (the only cell)"


def test_speed_and_energy_need_the_target_on_every_seed():
    """A cell that missed the target on a seed does not compete; without any, speed is n/a and says why."""
    fast = [run("llm-adam-standard", s, summary=_reached(1.0 + s / 10), energy_source="rapl") for s in range(2)]
    slow = [run("llm-sgd-standard", s, summary=_reached(5.0 + s / 10), energy_source="rapl") for s in range(2)]
    missed = [run("llm-cgd-standard", 0, summary=_reached(0.1), energy_source="rapl"),
              run("llm-cgd-standard", 1, summary={"target_loss": 5.0}, energy_source="rapl")]
    found = verdicts([*fast, *slow, *missed])
    assert found["speed"].best.cell == "llm-adam-standard" and found["speed"].ranking.outcome == "winner"
    assert found["speed"].left_out == ("llm-cgd-standard: not reached on 1 of 2 seeds",)
    assert found["energy"].best.cell == "llm-adam-standard"
    none = verdicts([run("llm-adam-standard", summary={"target_loss": 5.0})])["speed"]
    assert none.ranking is None and none.reason == "no cell reached the target on every seed"
    na = verdicts([run("llm-adam-standard")])["speed"]
    assert na.ranking is None and na.reason == "no target to reach (no test split, or no epoch trained)"
    assert na.left_out == ("llm-adam-standard: n/a on 1 of 1 seeds",)
    assert verdict_text(none, {}) == "n/a: no cell reached the target on every seed"


def test_an_energy_estimate_follows_time():
    """CPU time × a fixed power orders cells as time does: no energy winner of its own."""
    found = verdicts([run("llm-adam-standard", s, summary=_reached(1.0 + s)) for s in range(2)])["energy"]
    assert found.ranking is None and verdict_text(found, {}) == "estimate, follows time"


def test_memory_without_a_live_peak_or_isolation_names_no_winner():
    """No live peak and a shared process: memory has no metric, and says why."""
    found = verdict(by_cell([run(peak=None), run("llm-sgd-standard", peak=None)]), "memory")
    assert found.metric is None and found.ranking is None and "live-tensor peak" in found.reason
    assert found.interval is None and found.best is None and found.groups() == ()


def test_each_study_answers_with_its_own_cells():
    """Main, PEFT and real-data lines each read their own grid; memory-grid and baseline cells answer nothing."""
    records = [*runs("vit-adam-standard", (1.0, 1.1), accuracy=0.9), *runs("vit-sgd-standard", (2.0, 2.1),
                                                                           accuracy=0.2),
               run("vit-adamw-digits", grid="real", accuracy=0.95), run("vit-sgd-digits", grid="real", accuracy=0.1),
               run("vit_s-lora-standard-cifar100", grid="peft", accuracy=0.5),
               run("llm-budget40", grid="memory"), run("clip-zero_shot-cifar100", grid="baselines",
                                                       optimizer="adamw", strategy="standard", method="zero_shot",
                                                       dataset="cifar100", model="clip")]
    lines = answer(records)
    assert [(line.study, line.subject) for line in lines] == [
        ("main", "vit"), ("peft", "vit_s · cifar100"), ("real", "vit · digits")]
    main = lines[0]
    assert set(main.labels) == {"vit-adam-standard", "vit-sgd-standard"}
    assert main.quality.best.cell == "vit-adam-standard" and main.quality.metric.key == "heldout_accuracy"
    assert lines[2].quality.best.cell == "vit-adamw-digits"
    text = line_text(main)
    assert text.startswith("vit: use adam: best quality, ahead of sgd | test top-1 accuracy: winner adam 90.0 % ± "
                           "0.0 % (n=2), ahead of every other cell")
    assert "| fastest to target: n/a" in text and "| least memory: " in text
    # The same records in any order: the same lines.
    shuffled = list(records)
    random.Random(1).shuffle(shuffled)
    assert [line_text(line) for line in answer(shuffled)] == [line_text(line) for line in lines]


def test_a_model_with_two_datasets_gets_a_line_per_dataset():
    """Accuracy on two datasets is not one comparison: a main-study model on two datasets answers twice."""
    records = [run("vit-adam-standard", accuracy=0.5, dataset="image_classification"),
               run("vit-adam-standard-cifar100", accuracy=0.4, dataset="cifar100")]
    assert [line.subject for line in answer(records)] == ["vit · image_classification", "vit · cifar100"]
    (line,) = answer([run("llm-adam-standard"), run("llm-sgd-standard")])
    assert line.subject == "llm" and set(line.labels.values()) == {"adam", "sgd"}
    assert cell_label(records[0], ("optimizer", "strategy")) == "adam/standard"
    assert cell_label(records[0], ()) == "vit-adam-standard"


def test_the_sanity_baseline_flags_fine_tuning_that_learned_nothing():
    """A raw-pixel 1-NN record (or a task field) sets the bar; a winner at or below it is flagged."""
    tuned = [run("vit_s-lora-standard-cifar100", grid="peft", accuracy=0.30),
             run("vit_s-full-standard-cifar100", grid="peft", accuracy=0.20)]
    assert sanity_accuracy(tuned, "cifar100") is None and answer(tuned)[0].notes == ()
    with_field = [run("vit_s-lora-standard-cifar100", grid="peft", accuracy=0.30,
                      task={"sanity_accuracy": 0.35}), tuned[1]]
    assert sanity_accuracy(with_field, "cifar100") == 35.0
    (line,) = answer(with_field)
    # One seed each: the first place is open between them, and neither beats the baseline.
    assert line.notes == ("lora, full do not beat the raw-pixel nearest-neighbour baseline (35.0 %): "
                          "fine-tuning learned nothing the pixels did not already hold",)
    assert line_text(line).endswith("already hold]")
    baseline = run(f"vit_s-{SANITY_METHOD}-standard-cifar100", grid="peft", accuracy=0.10)
    assert sanity_accuracy([*tuned, baseline], "cifar100") == 10.0
    assert answer([*tuned, baseline])[0].notes == () and len(answer([*tuned, baseline])) == 1
    assert sanity_accuracy([*tuned, baseline], "dtd") is None


def test_names_say_what_ran():
    """A tiny random or self-pretrained model is '<family>-shaped', with its size; real weights keep the name."""
    clip = run("clip-zero_shot-cifar100", grid="baselines", model="clip", method="zero_shot", strategy="standard",
               optimizer="adamw", dataset="cifar100", parameters={"total": 260_000},
               weights={"source": "random"})
    assert naming.what_ran(clip) == "CLIP-shaped, random init, 0.26 M params"
    pretrained = run("dinov2-linear_probe-cifar100", grid="baselines", model="dinov2", method="linear_probe",
                     strategy="standard", optimizer="adamw", dataset="cifar100", parameters={"total": 227_000},
                     weights={"source": "pretrained"})
    assert naming.what_ran(pretrained) == "DINOv2-shaped, pretrained here on a synthetic task, 0.23 M params"
    real = run("dinov2-linear_probe-cifar100", grid="baselines", model="dinov2", method="linear_probe",
               strategy="standard", optimizer="adamw", dataset="cifar100", weights={"source": "local", "path": "/m"})
    assert naming.what_ran(real) == "DINOv2 ViT-B/14 (linear probe)" and naming.real_weights(real)
    assert not naming.real_weights(run(weights={"source": "local", "real": False}))
    assert naming.real_weights(run(weights={"source": "pretrained", "real": True}))
    big = run(parameters={"total": 1.24e9}, weights={})
    assert naming.what_ran(big) == "Llama-3.2-1B-shaped, 1240 M params" and naming.weights_source(big) is None
    assert naming.what_ran(run("mystery-adam-standard", grid="elsewhere", weights=[])) == "mystery-shaped"
    vim = run("vim_s-lora-standard-cifar100", grid="peft", weights={"source": "pretrained"}, parameters={})
    assert naming.what_ran(vim) == "Vision Mamba-shaped, pretrained here on a synthetic task"
    assert naming.group_title([]) == ""
    assert naming.group_title([clip]) == "CLIP-shaped, random init, 0.26 M params · CIFAR-100-like (synthetic)"


def test_dataset_titles_carry_the_sizes_their_kind_reads():
    """Images: classes and side; text: token types and sequence length; captions: side, tokens and length. A size the
    kind does not read, or the record lacks, is left out."""
    images = run("vit_s-lora-standard-cifar100", grid="peft", model="vit_s", dataset="cifar100",
                 hparams={"num_classes": 100, "image_size": 32, "seq_len": 7})
    assert naming.dataset_title(images) == "CIFAR-100-like (synthetic), 100 classes, 32 px"
    text = run(dataset="causal_lm", hparams={"num_states": 124, "seq_len": 32, "image_size": None})
    assert naming.dataset_title(text) == "Topic text (synthetic, next token), 124 token types, sequences of 32"
    captions = run("vlm-adam-standard", model="vlm", dataset="image_captioning",
                   hparams={"num_classes": 10, "image_size": 32, "num_states": 124, "caption_len": 8})
    assert naming.dataset_title(captions) == "Motif captions (synthetic), 32 px, 124 token types, captions of 8"
    assert naming.dataset_title(run(grid="elsewhere", dataset="mine", hparams={"image_size": 32})) == "mine"


def test_the_scale_note_names_profile_device_and_sizes():
    small = [run(parameters={"total": 80_000}), run("vit-adam-standard", model="vit", parameters={"total": 660_000})]
    note = naming.scale_note(small)
    assert note.startswith("Measured at profile tiny on cpu, models of 0.08–0.66 M params. At the papers' scale")
    assert naming.scale_note(small[:1]).startswith("Measured at profile tiny on cpu, models of 0.08 M params.")
    paper = [run(profile="paper", device="cuda:0", parameters={"total": 1.24e9})]
    assert naming.scale_note(paper) == "Measured at profile paper on cuda, models of 1240 M params."
    assert naming.scale_note([]) == ""


def test_a_dataset_without_the_checkpointing_cells_says_where_they_ran():
    """The PEFT grid runs checkpointing on its first dataset only: the second dataset's line says so, rather than
    naming the least memory among the cells it has as if checkpointing had been weighed."""
    records = [run("vit_s-lora-standard-cifar100", grid="peft", accuracy=0.3),
               run("vit_s-lora-checkpoint-cifar100", grid="peft", accuracy=0.3, peak=2**20),
               run("vit_s-lora-budget-cifar100", grid="peft", accuracy=0.3, peak=2**21),
               run("vit_s-lora-standard-dtd", grid="peft", accuracy=0.4),
               run("tinyvit-lora-standard-dtd", grid="peft", accuracy=0.2)]
    lines = {line.subject: line for line in answer(records)}
    assert lines["vit_s · cifar100"].notes == ()
    assert lines["vit_s · dtd"].notes == ("checkpoint, budget ran on cifar100 only: they change nothing but the time "
                                          "and memory of a step, which the cifar100 line measures",)
    # Another backbone's cells do not count: tinyvit ran no checkpointing anywhere.
    assert lines["tinyvit · dtd"].notes == ()
