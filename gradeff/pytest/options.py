"""The gradeff options of pytest: their definitions, and one validated value of all of them.

Every option is checked when the session starts, before the first cell: a path that is a folder
where a file is wanted (or not writable), a baseline that cannot be read, a number that is not
finite or out of range, an unknown key. The message names the option, the bad value and what is
valid. A session then reads its :class:`Settings`, never the raw options. Each option's text is parsed by
:mod:`gradeff.pytest.option_values` and checked against files, registries and the other options by
:mod:`gradeff.pytest.option_checks`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gradeff.analysis.answer import AnswerOptions
from gradeff.analysis.sequential import DEFAULT_FIRST, DEFAULT_MOST, SeedPlan
from gradeff.axes.strategies import COMPILE_BACKENDS
from gradeff.cell.devices import DEVICES, validate_device
from gradeff.cell.protocols import DEFAULT_PROTOCOL, PROTOCOLS
from gradeff.pytest.option_checks import (
    ab_revision,
    answer_options,
    axis_selection,
    baseline_results,
    checked_compare_args,
    data_sources,
    history_path,
    local_weights,
    read_seed_plan,
    read_seeds,
    refuse_benchmark_storage_under_xdist,
    report_path,
    writable_file,
    writable_folder,
)
from gradeff.pytest.option_values import (
    MAX_SAMPLE_HZ,
    byte_size,
    carbon_intensity,
    default_threads,
    duration,
    fraction,
    positive_count,
    positive_int,
    sample_rate,
    seed_number,
    thread_count,
    worker_count,
)
from gradeff.specs.profiles import DEFAULT_PROFILE, PROFILES
from gradeff.studies.grid import AXES, PLURALS, axis_registry
from gradeff.studies.hparams import MEMORY_MARGIN

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

__all__ = ["DEFAULT_RESULTS", "PRECISION", "SETTINGS", "WORLD_SIZE", "Settings", "add_options", "read_settings",
           "run_config"]

DEFAULT_RESULTS = "results/results.jsonl"


def add_options(parser: pytest.Parser) -> None:
    """Register every ``--gradeff-*`` option."""
    group = parser.getgroup("gradeff", "gradeff benchmark grid")
    group.addoption("--gradeff-profile", choices=PROFILES, default=DEFAULT_PROFILE,
                    help=f"size of models, data and training (default {DEFAULT_PROFILE})")
    for axis in AXES:
        plural = PLURALS[axis]
        group.addoption(f"--gradeff-{plural}", default=None, metavar="KEYS",
                        help=f"comma-separated {plural} to run in every grid instead of the grid's own (valid: "
                             f"{','.join(axis_registry(axis))}); unlike -k, an unknown key is an error")
    group.addoption("--gradeff-epochs", type=positive_int, default=None,
                    help="epochs per cell (default: the profile's)")
    group.addoption("--gradeff-seed", type=seed_number, default=0, help="seed of weights, data and order (default 0)")
    group.addoption("--gradeff-threads", type=thread_count, default=None, metavar="N",
                    help="torch intra-op threads of every cell (default $OMP_NUM_THREADS, else 1): fixed per cell and "
                         "recorded, so a cell's numbers do not depend on -n or the machine's cores")
    group.addoption("--gradeff-seeds", default=None, metavar="N|S1,S2,...|auto[:K]",
                    help="run every cell once per seed: a count N (seeds --gradeff-seed … --gradeff-seed+N-1) or a "
                         "comma-separated list of seeds (0,1,2); with several seeds test ids end in -seedS and the "
                         "summary and report give each cell's mean with a 95 %% t-interval. auto: every cell runs "
                         f"K seeds (default {DEFAULT_FIRST}), then further seeds go only to the cells still in "
                         "contention for the Answer, up to --gradeff-max-seeds (each look tests at the level over "
                         "the looks, so the error rate holds)")
    group.addoption("--gradeff-max-seeds", type=positive_count, default=DEFAULT_MOST, metavar="N",
                    help=f"with --gradeff-seeds auto: the most seeds any cell runs (default {DEFAULT_MOST})")
    group.addoption("--gradeff-seed-budget", type=duration, default=None, metavar="DURATION",
                    help="with --gradeff-seeds auto: no further seed starts once the session has run this long "
                         "(e.g. 90s, 5m, 1h); the questions still open say so and how many seeds would decide them")
    group.addoption("--gradeff-margin", action="append", default=[], metavar="QUESTION=VALUE",
                    help="practical-equivalence margin of a question (quality, speed, memory, energy): a share of "
                         "the best cell's mean (1%%) or a size in the metric's unit (0.02, 1pt, 1MiB, 0.5s); "
                         "defaults: quality 1%% of a loss or 1 pt of accuracy, speed 5%%, memory 2%%, energy 5%%")
    group.addoption("--gradeff-prefer", default=None, metavar="Q1,Q2,...",
                    help="the order the 'use this' line weighs quality, time and memory in (default "
                         "quality,time,memory: the best quality, then among equivalent cells the fastest)")
    group.addoption("--gradeff-device", default="auto",
                    help=f"device to train on: {', '.join(DEVICES)} or cuda:N (default auto)")
    group.addoption("--gradeff-sample-hz", type=sample_rate, default=10.0, metavar="HZ",
                    help=f"sampling rate of the RAM and GPU meters, up to {MAX_SAMPLE_HZ:g} (default 10)")
    group.addoption("--gradeff-grid-intensity", type=carbon_intensity, default=400.0, metavar="GCO2_PER_KWH",
                    help="grid carbon intensity for CO2-equivalent figures (default 400 g/kWh)")
    group.addoption("--gradeff-resume", action="store_true",
                    help="skip cells that already have a final record (ok, diverged, oom, skipped) in the results "
                         "file for the very same experiment (an equal fingerprint of settings, data and weights "
                         "checksums, threads, kernels, compile, tuning, budget, protocol, rate and code version); "
                         "re-run the rest, saying what differs")
    group.addoption("--gradeff-memory-budget", type=byte_size, default=None, metavar="SIZE",
                    help="bytes a training step must fit in (e.g. 2GiB): the budget strategies' target (default: "
                         "the profile's: at tiny halfway between each cell's own peaks with every block checkpointed "
                         "and with none, 160MiB at small, 2GiB at paper); any other cell is ended as oom when its "
                         "predicted peak exceeds it (an out-of-memory test on any device)")
    group.addoption("--gradeff-memory-margin", type=fraction, default=MEMORY_MARGIN, metavar="FRACTION",
                    help=f"share of the memory budget the budget strategies keep free (default {MEMORY_MARGIN})")
    group.addoption("--gradeff-weights", action="append", default=[], metavar="MODEL=SOURCE",
                    help="start MODEL's cells from given weights (repeatable): a state-dict file (.safetensors, "
                         ".pth, .bin; the PEFT backbones, through their key maps), a folder holding one (a hub "
                         "snapshot), a save_pretrained folder, or a hub id with --gradeff-allow-hub ('hub': the "
                         "model's published repository); without it the fine-tuning study's backbones start from "
                         "the suite's own cached pretraining")
    group.addoption("--gradeff-cache", default=None, metavar="DIR",
                    help="folder of the pretrained-backbone cache (default $GRADEFF_CACHE, else ~/.cache/gradeff)")
    group.addoption("--gradeff-protocol", choices=PROTOCOLS, default=DEFAULT_PROTOCOL,
                    help="where each cell's learning rate comes from: tuned (default; per optimizer and method, from "
                         "the committed table scripts/tune_rates.py produced on the validation split) or shared (the "
                         "papers' protocol: one rate per model, the PEFT paper's fixed rates)")
    group.addoption("--gradeff-tune", choices=("lr",), default=None,
                    help="search each cell's learning rate on a log grid around its optimizer's own centre and keep "
                         "the best final validation loss (the test split is never read by the search; its trials, "
                         "cost and whether the choice sits at the grid's edge are recorded)")
    group.addoption("--gradeff-tune-points", type=positive_int, default=5, metavar="N",
                    help="learning rates the search tries, besides the profile's shared one (default 5)")
    group.addoption("--gradeff-fused", action="store_true",
                    help="train with the optimizer's fused kernel where torch has one (Adam, AdamW, SGD, Adagrad: "
                         "one kernel a step for every parameter), else its multi-tensor (foreach) path; each "
                         "record's hparams.optimizer_kernel says which ran (default: torch's own choice)")
    group.addoption("--gradeff-compile", nargs="?", const="inductor", default=None, choices=COMPILE_BACKENDS,
                    metavar="BACKEND",
                    help="train every cell's model through torch.compile, whatever its strategy and method: "
                         "inductor (the default: the fastest compiled backend on a GPU and, measured, on a CPU too) "
                         "or aot_eager_decomp_partition (compiles in seconds, runs slower than eager on a CPU); the "
                         "compile runs before the first epoch and is recorded in the plan with its seconds, never "
                         "in an epoch's time. The memory grid's compile_budget cells are compiled already")
    group.addoption("--gradeff-workers", type=worker_count, default=0, metavar="N",
                    help="gather each epoch's micro-batches in N torch DataLoader worker processes ahead of the steps "
                         "(pinned memory on a GPU); 0 (the default): the training process gathers each when its "
                         "step needs it. The same samples in the same order, so the same numbers; the time waiting "
                         "for data is recorded per epoch either way")
    group.addoption("--gradeff-isolate", action="store_true",
                    help="train each cell in a fresh process, so per-cell RSS peaks are comparable (costs a process "
                         "start per cell); without it RSS is the long-lived pytest process's and names no winner")
    group.addoption("--gradeff-allow-hub", action="store_true",
                    help="allow Hugging Face hub access (off by default: runs never download anything)")
    group.addoption("--gradeff-data", action="append", default=[], metavar="KEY=PATH",
                    help="train the KEY task on a local dataset read with Hugging Face datasets (repeatable): a "
                         "save_to_disk folder, an imagefolder, a folder of or one parquet/csv/json/txt file; keys: "
                         "cifar100, dtd (replace the synthetic stand-ins), images, text, mmimdb (poster → plot), "
                         "mmimdb_genres (poster → genres)")
    group.addoption("--gradeff-data-columns", action="append", default=[], metavar="[KEY:]ROLE=COLUMN,...",
                    help="the columns holding each role (image, label, text) where they are not the key's usual "
                         "ones, e.g. cifar100:label=coarse_label (repeatable; without KEY: every source)")
    group.addoption("--gradeff-tokenizer", default=None, metavar="DIR",
                    help="a local tokenizer folder (AutoTokenizer, local files only) for real text; without it a "
                         "byte-level BPE is trained on the training split and cached")
    group.addoption("--gradeff-baseline", default=None, metavar="PATH",
                    help="compare this session's cells with a baseline results file after the summary and fail "
                         "the session on a regression (see `gradeff compare`)")
    group.addoption("--gradeff-compare-args", default="", metavar="ARGS",
                    help="extra `gradeff compare` options for --gradeff-baseline, e.g. \"--time-ratio 3\"")
    group.addoption("--gradeff-report", default=None, metavar="PATH",
                    help="write the HTML report of this session's cells to PATH at the end (a .csv PATH writes the "
                         "flat table); templates in the folder $GRADEFF_TEMPLATES replace the packaged ones")
    group.addoption("--gradeff-results", default=DEFAULT_RESULTS, metavar="PATH",
                    help=f"JSON-lines file each cell's record is appended to (default {DEFAULT_RESULTS})")
    group.addoption("--gradeff-ab", default=None, metavar="REV",
                    help="run the selected cells side by side at git revision REV and at the working tree instead of "
                         "one by one, and fail on a time regression or a changed deterministic figure (`gradeff ab "
                         "REV`; docs/gate.md)")
    group.addoption("--gradeff-history", default=None, metavar="PATH",
                    help="add this session's figures (time per step, final losses, test accuracy, peak memory) to "
                         "the history store PATH, an SQLite file, under the commit checked out (`gradeff history`)")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """A session's gradeff options, validated.

    Attributes:
        selection: axis → the keys ``--gradeff-<axis>`` names (absent: each grid's own).
        weights: ``(model, local path)`` pairs of ``--gradeff-weights``, resolved and checked.
        seeds: the seeds every cell runs with (``--gradeff-seeds``; else ``(seed,)``), ``seed`` being the first.
        threads: torch's intra-op threads in every cell (``--gradeff-threads``, see :func:`default_threads`).
        settled: ``(cell id, seed)`` → the final record ``--gradeff-resume`` may keep for it
            (:class:`gradeff.pytest.resume.Earlier`: its status and experiment fingerprint; filled by the plugin). A
            cell keeps it only where its own fingerprint is equal (:func:`gradeff.pytest.resume.judge`).
        seed_plan: with ``--gradeff-seeds auto``, the adaptive plan (``seeds`` then run from ``seed`` to the
            plan's most); ``None`` for a fixed set of seeds.
        seed_budget: with an adaptive plan, the wall-clock seconds after which no further seed starts.
        answer: the Answer's margins and the order of its "use this" choice.
    """

    profile: str
    epochs: int | None
    seed: int
    device: str
    results: Path
    sample_hz: float
    grid_intensity: float
    memory_budget: int | None
    memory_margin: float
    selection: dict[str, set[str]]
    weights: tuple[tuple[str, str], ...]
    cache_dir: str | None
    report: Path | None
    baseline: Path | None
    compare_args: str
    resume: bool
    ab: str | None = None
    history: Path | None = None
    tune: str | None = None
    tune_points: int = 5
    protocol: str = DEFAULT_PROTOCOL
    isolate: bool = False
    fused: bool = False
    compile: str | None = None
    workers: int = 0
    data: tuple = ()
    session: str = ""
    seeds: tuple[int, ...] = ()
    threads: int = 1
    settled: dict[tuple[str, int], object] = field(default_factory=dict)
    seed_plan: SeedPlan | None = None
    seed_budget: float | None = None
    answer: AnswerOptions = AnswerOptions()

    def __post_init__(self):
        if not self.seeds:
            object.__setattr__(self, "seeds", (self.seed,))


def read_settings(config: pytest.Config) -> Settings:
    """Every gradeff option, validated (a ``pytest.UsageError`` names the first bad one)."""
    refuse_benchmark_storage_under_xdist(config)
    device = config.getoption("gradeff_device")
    try:
        validate_device(device)
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-device: {exc}") from None
    baseline = baseline_results(config.getoption("gradeff_baseline"))
    plan = read_seed_plan(config)
    seeds = read_seeds(config, plan)
    return Settings(
        profile=config.getoption("gradeff_profile"), epochs=config.getoption("gradeff_epochs"),
        seed=seeds[0], seeds=seeds, device=device,
        threads=config.getoption("gradeff_threads") or default_threads(),
        results=writable_file("--gradeff-results", Path(config.getoption("gradeff_results"))),
        sample_hz=config.getoption("gradeff_sample_hz"), grid_intensity=config.getoption("gradeff_grid_intensity"),
        memory_budget=config.getoption("gradeff_memory_budget"),
        memory_margin=config.getoption("gradeff_memory_margin"),
        selection=axis_selection(config), weights=local_weights(config),
        cache_dir=writable_folder("--gradeff-cache", config.getoption("gradeff_cache")),
        report=report_path(config.getoption("gradeff_report")), baseline=baseline,
        compare_args=checked_compare_args(config.getoption("gradeff_compare_args"), baseline),
        resume=config.getoption("gradeff_resume"), tune=config.getoption("gradeff_tune"),
        ab=ab_revision(config, baseline), history=history_path(config.getoption("gradeff_history")),
        tune_points=config.getoption("gradeff_tune_points"), protocol=config.getoption("gradeff_protocol"),
        isolate=config.getoption("gradeff_isolate"), fused=config.getoption("gradeff_fused"),
        compile=config.getoption("gradeff_compile"), workers=config.getoption("gradeff_workers"),
        data=data_sources(config), seed_plan=plan,
        seed_budget=config.getoption("gradeff_seed_budget") if plan is not None else None,
        answer=answer_options(config),
    )


# Where the plugin keeps the session's settings, read once from the command line (pytest_configure): the
# options, the mixed precision (read with the device) and a sharded cell's world size.
SETTINGS = pytest.StashKey["Settings"]()
PRECISION = pytest.StashKey[str]()
WORLD_SIZE = pytest.StashKey[int]()


def run_config(config: pytest.Config, seed: int):
    """The runner's settings for a cell of this session with ``seed`` (the grid's cells and the public fixtures')."""
    # torch, see the imports
    from gradeff.cell.config import RunConfig  # noqa: PLC0415
    from gradeff.cell.metering import MeterSettings  # noqa: PLC0415

    settings = config.stash[SETTINGS]
    run = RunConfig(profile=settings.profile, seed=seed, epochs=settings.epochs,
                    device=settings.device, session=settings.session,
                    meters=MeterSettings(hz=settings.sample_hz, grid_gco2_per_kwh=settings.grid_intensity,
                                         peak_tflops=config.getoption("gradeff_peak_tflops")),
                    memory_budget=settings.memory_budget, memory_margin=settings.memory_margin,
                    weights=settings.weights, cache_dir=settings.cache_dir, tune=settings.tune,
                    tune_points=settings.tune_points, protocol=settings.protocol, isolate=settings.isolate,
                    data=settings.data, threads=settings.threads, fused=settings.fused, compile=settings.compile,
                    workers=settings.workers, named_strategies=tuple(sorted(settings.selection.get("strategy", ()))))
    return dataclasses.replace(run, precision=config.stash[PRECISION], world_size=config.stash[WORLD_SIZE])
