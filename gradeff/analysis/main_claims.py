"""The main study's claims: accumulation's and checkpointing's time and loss, each optimizer's place, host RAM,
GPU utilisation and the LLM's loss scale, each read per model over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from gradeff.analysis.claim_rules import (
    CONTRADICTED,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    cell_axes,
    effect_of,
    effect_verdict,
    paired_changes,
    percent_change,
)
from gradeff.analysis.metrics import METRICS, Metric, is_isolated, memory_metric, quality_metric
from gradeff.analysis.pairing import EQUIVALENT, IDENTICAL, OPEN, WINNER, Ranking, rank
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.records.results import CellRecord, record_field

__all__ = ["EQUAL_TRAINING_LOSS", "MAIN_CLAIMS"]

_ADAPTIVE = ("adam", "adamw", "adagrad", "adadelta")


def _tally(hits: int, misses: int, opposed: int) -> str:
    """Per-model claims: reproduced on every model, contradicted where it is opposed on every one."""
    total = hits + misses + opposed
    return REPRODUCED if hits == total else CONTRADICTED if opposed == total else NOT_REPRODUCED


def _strategies(records: Sequence[CellRecord], numerator: str, metric: str | Metric,
                change: Callable[[float, float], float]) -> dict[str, dict[int, float]]:
    """``numerator`` cells against the ``standard`` cell of the same model, optimizer, method and dataset."""
    return paired_changes([r for r in records if r.strategy == numerator],
                          [r for r in records if r.strategy == "standard"], cell_axes, metric, change)


def _by_model(records: Sequence[CellRecord]) -> dict[str, dict[str, CellRuns]]:
    models: dict[str, list[CellRecord]] = {}
    for record in records:
        models.setdefault(record.model, []).append(record)
    return {model: by_cell(group) for model, group in models.items()}


def _ranking(runs: Mapping[str, CellRuns], metric: Metric) -> Ranking[str] | None:
    return rank({cell: r.values(metric) for cell, r in runs.items()}, goal=metric.goal, resolution=metric.resolution,
                fingerprints={cell: r.fingerprint() for cell, r in runs.items()})


def _winner_axis(runs: Mapping[str, CellRuns], ranking: Ranking[str] | None, axis: str) -> str | None:
    """The axis value (optimizer) of an outright first place: its members share it and nothing ties with it.

    ``None`` where the first place is shared (equivalent cells, or an open question: neither is a win) or there is
    no ranking.
    """
    if ranking is None or ranking.outcome not in (WINNER, IDENTICAL):
        return None
    values = {getattr(runs[cell].first, axis) for cell in ranking.identical}
    return values.pop() if len(values) == 1 else None


def _place_text(runs: Mapping[str, CellRuns], ranking: Ranking[str] | None) -> str:
    if ranking is None:
        return "n/a"
    groups = [ranking.identical, *ranking.equivalent, *ranking.open]
    names = " ; ".join(" ≡ ".join(runs[c].cell for c in group) for group in groups)
    return f"{ranking.outcome}: {names}" if ranking.outcome in (EQUIVALENT, OPEN) else names


def _seeds_of(runs: Iterable[Mapping[str, CellRuns]]) -> int:
    counts = [len(r.ok) for group in runs for r in group.values() if r.ok]
    return min(counts) if counts else 0


def _accum_lowest_loss(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """Per model, the best accumulation cell against the best cell on the quality metric: tied or within 5 %."""
    parts, hits, misses = [], 0, 0
    models = _by_model(records)
    for model, runs in models.items():
        metric = quality_metric(r for cell_runs in runs.values() for r in cell_runs.runs)
        ranking = _ranking(runs, metric)
        accum = {c: r for c, r in runs.items() if r.first.strategy == "accum" and r.mean(metric) is not None}
        if ranking is None or not accum:
            continue
        best_accum = _ranking(accum, metric).best
        best, value = runs[ranking.best].mean(metric), accum[best_accum].mean(metric)
        gap = 100 * (value / best - 1) * (1 if metric.goal == "min" else -1) if best else math.inf
        near = best_accum in ranking.members or gap <= 5
        hits, misses = hits + near, misses + (not near)
        parts.append(f"{model}: best accum {best_accum} {gap:+.1f} % from the best ({metric.label.lower()})"
                     + (", tied with it" if best_accum in ranking.members else ""))
    if not parts:
        return "n/a", NOT_MEASURABLE, "needs ok accum and other cells of a model", 0
    verdict = REPRODUCED if not misses else CONTRADICTED if not hits else NOT_REPRODUCED
    return "; ".join(parts), verdict, ("near-lowest = tied with the model's best cell over seeds, or within 5 % of "
                                       "its quality metric (test loss; test top-1 for classifiers)"), \
        _seeds_of(models.values())


def _time_change(records: Sequence[CellRecord], numerator: str, **only) -> dict:
    kept = [r for r in records if all(getattr(r, axis) in values for axis, values in only.items())]
    return _strategies(kept, numerator, "epoch_seconds", percent_change)


def _accum_time(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """accum/standard time per epoch: ViT with adaptive optimizers −23 %, ModernBERT −11…−20 %."""
    parts, verdicts, seeds = [], [], []
    for name, changes, low, high in (
            ("ViT (adaptive)", _time_change(records, "accum", model=("vit",), optimizer=_ADAPTIVE), -23, -23),
            ("ModernBERT", _time_change(records, "accum", model=("modernbert",)), -20, -11)):
        effect = effect_of(changes)
        if effect is not None:
            parts.append(f"{name}: time {effect.text()}")
            verdicts.append(effect_verdict(effect, low, high, wrong_sign=1))
            seeds.append(effect.n)
    if not parts:
        return "n/a", NOT_MEASURABLE, "needs ok accum and standard cells of vit or modernbert", 0
    verdict = CONTRADICTED if CONTRADICTED in verdicts else REPRODUCED if set(verdicts) == {REPRODUCED} \
        else NOT_REPRODUCED
    return "; ".join(parts), verdict, ("time per epoch, the paper's quantity, seed by seed; each against the "
                                       "paper's range; accumulation slower beyond the seed spread contradicts"), \
        min(seeds)


def _checkpoint_time(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """checkpoint/standard time per epoch: +20…60 % overall (LLM +45…58 %)."""
    effect = effect_of(_time_change(records, "checkpoint"))
    if effect is None:
        return "n/a", NOT_MEASURABLE, "needs ok checkpoint and standard cells", 0
    llm = effect_of(_time_change(records, "checkpoint", model=("llm",)))
    measured = f"time {effect.text()}" + (f"; llm {llm.text()}" if llm is not None else "")
    return measured, effect_verdict(effect, 20, 60, wrong_sign=-1), \
        "time per epoch, the paper's quantity, seed by seed: median over pairs against 20–60 %", effect.n


def _checkpoint_loss(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """checkpoint vs standard on the quality metric: the paper saw large changes; checkpointing cannot make any."""
    pairs, identical, changes = 0, 0, {}
    for model, runs in _by_model(records).items():
        metric = quality_metric(r for cell_runs in runs.values() for r in cell_runs.runs)
        sides: dict[str, dict[str, CellRuns]] = {}
        for cell_runs in runs.values():
            if cell_runs.first.strategy in ("checkpoint", "standard"):
                sides.setdefault(cell_runs.first.optimizer, {})[cell_runs.first.strategy] = cell_runs
        for optimizer, pair in sides.items():
            if len(pair) < 2:
                continue
            top, bottom = pair["checkpoint"].values(metric), pair["standard"].values(metric)
            seeds = sorted(set(top) & set(bottom))
            if not seeds:
                continue
            pairs += 1
            same = all(top[s] == bottom[s] for s in seeds) and \
                pair["checkpoint"].fingerprint() == pair["standard"].fingerprint()
            identical += same
            changes[(model, optimizer)] = {s: percent_change(top[s], bottom[s]) for s in seeds if bottom[s]}
    if not pairs:
        return "n/a", NOT_MEASURABLE, "needs ok checkpoint and standard cells", 0
    effect = effect_of({k: {s: abs(v) for s, v in values.items()} for k, values in changes.items()})
    measured = f"identical in {identical} of {pairs} optimizer pairs (the same numbers on every seed)"
    if identical == pairs:
        return measured, CONTRADICTED, ("checkpointing recomputes the same activations (bit-identical gradients, "
                                        "tests/axes/strategies/test_laws.py): every pair is identical, it cannot "
                                        "change the loss"), effect.n if effect else 0
    measured += f"; largest change {effect.text()}" if effect is not None else ""
    verdict = REPRODUCED if effect is not None and not effect.within_spread and effect.value > 0.01 else NOT_REPRODUCED
    return measured, verdict, "a change of the quality metric beyond the seed spread", effect.n if effect else 0


def _optimizer_places(records: Sequence[CellRecord], metric_of: Callable[[Sequence[CellRecord]], Metric | None]
                      ) -> dict[str, tuple[dict[str, CellRuns], Ranking[str] | None]]:
    result = {}
    for model, runs in _by_model(records).items():
        metric = metric_of([r for cell_runs in runs.values() for r in cell_runs.runs])
        result[model] = (runs, _ranking(runs, metric) if metric is not None else None)
    return result


def _members_axis(runs: Mapping[str, CellRuns], ranking: Ranking[str] | None) -> set[str]:
    return set() if ranking is None else {runs[c].first.optimizer for c in ranking.members}


def _sole_optimizer_claim(records: Sequence[CellRecord], metric_of, claimed: Mapping[str, str] | str,
                          rule: str) -> tuple[str, str, str, int]:
    places = _optimizer_places(records, metric_of)
    parts, hits, misses, opposed = [], 0, 0, 0
    for model, (runs, ranking) in places.items():
        wanted = claimed if isinstance(claimed, str) else claimed.get(model)
        if wanted is None or ranking is None:
            continue
        winner = _winner_axis(runs, ranking, "optimizer")
        parts.append(f"{model}: {_place_text(runs, ranking)}" + ("" if isinstance(claimed, str) else
                                                                 f" (paper: {wanted})"))
        if winner == wanted:
            hits += 1
        elif wanted in _members_axis(runs, ranking):
            misses += 1  # sharing the first place: never a win
        else:
            opposed += 1
    if not parts:
        return "n/a", NOT_MEASURABLE, "needs ok cells of the models", 0
    return "; ".join(parts), _tally(hits, misses, opposed), rule, _seeds_of(r for r, _ in places.values())


def _sgd_fastest(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    return _sole_optimizer_claim(records, lambda _: METRICS["epoch_seconds"], "sgd",
                                 "time per epoch, the paper's quantity: an SGD cell must win outright on every "
                                 "model (a shared first place is not a win; paired over seeds, Holm, 5 %)")


def _best_loss_optimizers(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    claimed = {"modernbert": "adadelta", "llm": "adadelta", "vit": "adagrad", "vlm": "adam"}
    return _sole_optimizer_claim(records, quality_metric, claimed,
                                 "the paper's optimizer wins the quality metric (test loss; test top-1 on ViT) "
                                 "outright; sharing the first place is not a win, absent from the first place "
                                 "contradicts")


def _cg_never_best(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    llm_cg = [r for r in records if r.model == "llm" and r.optimizer == "cgd"]
    if not llm_cg:
        return "n/a", NOT_MEASURABLE, "needs cgd cells", 0
    wins = []
    for name, metric_of in (("quality", quality_metric), ("time per epoch", lambda _: METRICS["epoch_seconds"]),
                            ("memory", memory_metric)):
        for model, (runs, ranking) in _optimizer_places(records, metric_of).items():
            if _winner_axis(runs, ranking, "optimizer") == "cgd":
                wins.append(f"{model} {name}")
    diverged = sorted({r.cell for r in llm_cg if r.status == "diverged"})
    measured = f"CG wins outright: {', '.join(wins) or 'nowhere'}; llm cgd diverged: {', '.join(diverged) or 'none'}"
    verdict = REPRODUCED if not wins and diverged else CONTRADICTED if wins and not diverged else NOT_REPRODUCED
    return measured, verdict, ("both halves: never an outright winner (quality, time per epoch, live-tensor peak; "
                               "a shared first place is not a win), and diverging on the LLM"), \
        _seeds_of(runs for runs, _ in _optimizer_places(records, quality_metric).values())


def _adam_most_ram(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    llm = [r for r in records if r.model == "llm" and r.status == "ok"]
    if not llm or not all(is_isolated(r) for r in llm):
        return "n/a", NOT_MEASURABLE, ("host RAM is comparable only per process: run with --gradeff-isolate (in one "
                                       "pytest process a model's first cell pays for every import)"), 0
    runs = by_cell(llm)
    ram = METRICS["ram_peak"]
    ranking = rank({cell: r.values(ram) for cell, r in runs.items()}, goal="max", resolution=ram.resolution,
                   fingerprints={cell: r.fingerprint() for cell, r in runs.items()})
    winner = _winner_axis(runs, ranking, "optimizer")
    measured = f"most RSS: {_place_text(runs, ranking)}"
    verdict = REPRODUCED if winner == "adam" else NOT_REPRODUCED
    return measured, verdict, (f"the llm cell with the highest process RSS peak must be an Adam cell outright; gaps "
                               f"under {ram.resolution / 2**20:.0f} MiB are no difference"), _seeds_of([runs])


def _llm_gpu_util(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    runs = by_cell(r for r in records if r.model == "llm")
    per_pair = {cell: values for cell, r in runs.items() if (values := r.values("gpu_util"))}
    effect = effect_of(per_pair)
    if effect is None:
        return "n/a", NOT_MEASURABLE, "GPU utilisation needs cells run on a GPU", 0
    return f"llm GPU utilisation {effect.text()}", effect_verdict(effect, 8, 15, wrong_sign=0), \
        "median over cells against 8–15 %", effect.n


# The accumulation-as-a-regulariser claim compares cells that fit their training data equally well: final training
# losses within this share of each other. A smaller generalisation gap from a higher training loss is under-training,
# not regularisation (accumulation takes k times fewer steps in the same epochs).
EQUAL_TRAINING_LOSS = 0.02


def _accum_regularises(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    ok = [r for r in records if r.status == "ok"]
    training = _strategies(ok, "accum", "final_loss", lambda top, bottom: top / bottom - 1)
    test = _strategies(ok, "accum", "test_loss", lambda top, bottom: top - bottom)
    pairs = sum(1 for cell, by_seed in training.items() for seed in by_seed if seed in test.get(cell, {}))
    matched = {cell: {seed: test[cell][seed] for seed, change in by_seed.items()
                      if seed in test.get(cell, {}) and abs(change) <= EQUAL_TRAINING_LOSS}
               for cell, by_seed in training.items()}
    matched = {cell: by_seed for cell, by_seed in matched.items() if by_seed}
    if not pairs:
        return "n/a", NOT_MEASURABLE, "needs test and training losses of accum and standard cells", 0
    within = sum(len(by_seed) for by_seed in matched.values())
    equal = (f"at equal training loss (within {EQUAL_TRAINING_LOSS * 100:.0f} %: {within} of {pairs} cell pairs over "
             "seeds)")
    if not matched:
        return (f"training loss differs in every pair: {equal}", NOT_MEASURABLE,
                "accumulation and standard end at different training losses, and a smaller gap from a higher "
                "training loss is under-training, not regularisation", 0)
    effect = effect_of(matched)
    verdict = NOT_REPRODUCED if effect.within_spread or effect.value == 0 else \
        REPRODUCED if effect.value < 0 else CONTRADICTED
    return (f"test loss, accum minus standard, {equal}: {effect.text('')}", verdict,
            "a lower test loss under accumulation at the same training loss (below 0 beyond the seed spread)",
            effect.n)


def _accum_memory(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    changes = _strategies(records, "accum", "activation", percent_change)
    effect = effect_of(changes)
    if effect is None:
        return "n/a", NOT_MEASURABLE, "needs the memory breakdown of accum and standard cells", 0
    largest = max(v for values in changes.values() for v in values.values())
    return (f"activation memory accum vs standard: {effect.text()}, largest {largest:+.1f} %",
            REPRODUCED if largest <= 0 else NOT_REPRODUCED,
            "a k× larger effective batch with at most the standard micro-batch's activations", effect.n)


def _llm_loss_scale(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    llm = [r for r in records if r.model == "llm" and r.epochs]
    if not llm:
        return "n/a", NOT_MEASURABLE, "needs llm cells", 0
    vocab = max(int(record_field(r, "hparams", "num_states") or 0) + 4 for r in llm)
    highest = max((e.loss for r in llm for e in r.epochs if math.isfinite(e.loss)), default=math.nan)
    measured = (f"highest llm loss {highest:.3f} (mean cross-entropy per target token; uniform over the "
                f"{vocab}-token vocabulary: ln V = {math.log(vocab):.3f})")
    return measured, NOT_MEASURABLE, (f"a per-token loss scales with the vocabulary: {vocab} tokens here against "
                                      "Llama-3.2's 128,256 (ln V = 11.8), so the paper's 60–1000 cannot be held "
                                      "against these losses; its values exceed ln V, which a per-token mean of a "
                                      "run that has not diverged does not"), 0


MAIN_CLAIMS: tuple[Claim, ...] = tuple(Claim(study="main", grids=("main",), key=key, claim=claim, check=check)
                                     for key, claim, check in (
    ("accum_lowest_loss", "gradient accumulation gives the lowest or near-lowest loss on every model",
     _accum_lowest_loss),
    ("accum_time", "accumulation reduces time (ViT −23 % for adaptive optimizers, ModernBERT −11…−20 %)", _accum_time),
    ("checkpoint_time", "checkpointing adds 20–60 % time (LLM +45…58 %)", _checkpoint_time),
    ("checkpoint_loss", "checkpointing changes the loss (ViT lower, ModernBERT 7–16× worse, LLM Adam −38 %, "
     "CG −76 %)", _checkpoint_loss),
    ("sgd_fastest", "SGD is the fastest configuration on every model", _sgd_fastest),
    ("best_loss_optimizers", "Adadelta has the best loss on ModernBERT and the LLM, Adagrad on ViT, Adam on the VLM",
     _best_loss_optimizers),
    ("cg_never_best", "CG is never best for any (model, metric) and diverges on the LLM", _cg_never_best),
    ("adam_most_ram", "Adam uses the most host RAM on the LLM", _adam_most_ram),
    ("llm_gpu_util", "LLM GPU utilisation is 8–15 %", _llm_gpu_util),
    ("accum_regularises", "accumulation is an implicit regulariser (less overfitting)", _accum_regularises),
    ("accum_memory", "accumulation gives a larger batch without more memory", _accum_memory),
    ("llm_loss_scale", "the LLM's losses of 60–1000 (main paper, Tables 4–7)", _llm_loss_scale),
))
