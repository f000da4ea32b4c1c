"""The gradeff options of pytest: their definitions, and one validated value of all of them.

Every option is checked when the session starts, before the first cell: a path that is a folder
where a file is wanted (or not writable), a baseline that cannot be read, a number that is not
finite or out of range, an unknown key. The message names the option, the bad value and what is
valid. A session then reads its :class:`Settings`, never the raw options.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gradeff.analysis.answer import AnswerOptions
from gradeff.analysis.choice import CHOICE_QUESTIONS, parse_prefer
from gradeff.analysis.margins import parse_margins
from gradeff.analysis.sequential import DEFAULT_FIRST, DEFAULT_MOST, SeedPlan
from gradeff.cell.devices import DEVICES, validate_device
from gradeff.cell.pretrain import cache_root
from gradeff.cell.protocols import DEFAULT_PROTOCOL, PROTOCOLS
from gradeff.data import real, real_sources
from gradeff.gate.compare import parse_compare_args
from gradeff.gate.history import HistoryStore
from gradeff.models import MODELS
from gradeff.models.checkpoint import CheckpointError, check_source, resolve_for
from gradeff.models.weights import WeightSourceError
from gradeff.records.loading import ResultsFileError, load_results
from gradeff.scale.ab import RevisionError, repository_root, resolve_revision
from gradeff.specs.profiles import DEFAULT_PROFILE, PROFILES
from gradeff.strategies import COMPILE_BACKENDS
from gradeff.studies.grid import AXES, PLURALS, axis_registry
from gradeff.studies.hparams import MEMORY_MARGIN, largest_caps, largest_step

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

__all__ = ["DEFAULT_RESULTS", "MAX_SEED", "PRECISION", "SETTINGS", "WORLD_SIZE", "Settings", "add_options",
           "benchmark_storage_given", "default_threads", "parse_seed_plan", "parse_seeds", "read_settings",
           "run_config"]

DEFAULT_RESULTS = "results/results.jsonl"
# A sampler faster than this spends more time reading /proc and NVML than the cell spends training.
_MAX_SAMPLE_HZ = 1000.0


def _number(text: str, kind: type, what: str) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = _number(text, int, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _workers(text: str) -> int:
    value = _number(text, int, "a number of worker processes")
    if not 0 <= value <= _MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be in 0 … {_MAX_WORKERS}, got {value}")
    return value


# More DataLoader workers than this is a typo, not a machine.
_MAX_WORKERS = 256
# numpy's seeds are unsigned 32-bit integers: a larger one fails inside every cell, so it is refused here.
MAX_SEED = 2**32 - 1
# More intra-op threads than this is a typo, not a machine.
_MAX_THREADS = 1024


def _seed(text: str) -> int:
    value = _number(text, int, f"a seed (an integer in 0 … {MAX_SEED})")
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in 0 … {MAX_SEED} (numpy seeds are unsigned 32-bit), got {value}")
    return value


def _threads(text: str) -> int:
    value = _number(text, int, "a thread count (an integer >= 1)")
    if not 1 <= value <= _MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be in 1 … {_MAX_THREADS}, got {value}")
    return value


def default_threads(environ: dict | None = None) -> int:
    """torch's intra-op threads per cell without ``--gradeff-threads``: ``$OMP_NUM_THREADS`` (its first level), else 1.

    Never the core count, nor the cores over the pytest-xdist workers: a cell's float sums run in an order set by
    its thread count, so a count that followed the machine or the way pytest was started would change its numbers.

    Raises:
        pytest.UsageError: ``$OMP_NUM_THREADS`` is set to something other than a thread count.
    """
    text = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if not text:
        return 1
    try:
        return _threads(text)
    except argparse.ArgumentTypeError as exc:
        raise _usage("$OMP_NUM_THREADS", text, f"{exc} (the default of --gradeff-threads)") from None


def _sample_hz(text: str) -> float:
    value = _number(text, float, "a sampling rate in Hz")
    if not 0 < value <= _MAX_SAMPLE_HZ:
        raise argparse.ArgumentTypeError(f"must be in (0, {_MAX_SAMPLE_HZ:g}] Hz, got {text}")
    return value


def _intensity(text: str) -> float:
    value = _number(text, float, "a carbon intensity in gCO2/kWh")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


_BYTE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def _byte_size(text: str) -> int:
    """A positive size in bytes: ``2147483648``, ``2GiB``, ``160 MiB``, ``512MB``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if unit not in _BYTE_UNITS:
        raise argparse.ArgumentTypeError(f"expected a size like 8MiB, 2GiB or a number of bytes, got {text!r}; "
                                         f"units: B, KiB, MiB, GiB, KB, MB, GB")
    value = int(float(match.group(1)) * _BYTE_UNITS[unit])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str) -> float:
    """``90s``, ``5m``, ``1.5h`` or plain seconds → seconds."""
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 5m or 1h, got {text!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return seconds


def _fraction(text: str) -> float:
    value = _number(text, float, "a number in [0, 1)")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


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
    group.addoption("--gradeff-epochs", type=_positive_int, default=None,
                    help="epochs per cell (default: the profile's)")
    group.addoption("--gradeff-seed", type=_seed, default=0, help="seed of weights, data and order (default 0)")
    group.addoption("--gradeff-threads", type=_threads, default=None, metavar="N",
                    help="torch intra-op threads of every cell (default $OMP_NUM_THREADS, else 1): fixed per cell and "
                         "recorded, so a cell's numbers do not depend on -n or the machine's cores")
    group.addoption("--gradeff-seeds", default=None, metavar="N|S1,S2,...|auto[:K]",
                    help="run every cell once per seed: a count N (seeds --gradeff-seed … --gradeff-seed+N-1) or a "
                         "comma-separated list of seeds (0,1,2); with several seeds test ids end in -seedS and the "
                         "summary and report give each cell's mean with a 95 %% t-interval. auto: every cell runs "
                         f"K seeds (default {DEFAULT_FIRST}), then further seeds go only to the cells still in "
                         "contention for the Answer, up to --gradeff-max-seeds (each look tests at the level over "
                         "the looks, so the error rate holds)")
    group.addoption("--gradeff-max-seeds", type=_positive_count, default=DEFAULT_MOST, metavar="N",
                    help=f"with --gradeff-seeds auto: the most seeds any cell runs (default {DEFAULT_MOST})")
    group.addoption("--gradeff-seed-budget", type=_duration, default=None, metavar="DURATION",
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
    group.addoption("--gradeff-sample-hz", type=_sample_hz, default=10.0, metavar="HZ",
                    help=f"sampling rate of the RAM and GPU meters, up to {_MAX_SAMPLE_HZ:g} (default 10)")
    group.addoption("--gradeff-grid-intensity", type=_intensity, default=400.0, metavar="GCO2_PER_KWH",
                    help="grid carbon intensity for CO2-equivalent figures (default 400 g/kWh)")
    group.addoption("--gradeff-resume", action="store_true",
                    help="skip cells that already have a final record (ok, diverged, oom, skipped) in the results "
                         "file for the very same experiment (an equal fingerprint of settings, data and weights "
                         "checksums, threads, kernels, compile, tuning, budget, protocol, rate and code version); "
                         "re-run the rest, saying what differs")
    group.addoption("--gradeff-memory-budget", type=_byte_size, default=None, metavar="SIZE",
                    help="bytes a training step must fit in (e.g. 2GiB): the budget strategies' target (default: "
                         "the profile's: at tiny halfway between each cell's own peaks with every block checkpointed "
                         "and with none, 160MiB at small, 2GiB at paper); any other cell is ended as oom when its "
                         "predicted peak exceeds it (an out-of-memory test on any device)")
    group.addoption("--gradeff-memory-margin", type=_fraction, default=MEMORY_MARGIN, metavar="FRACTION",
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
    group.addoption("--gradeff-tune-points", type=_positive_int, default=5, metavar="N",
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
    group.addoption("--gradeff-workers", type=_workers, default=0, metavar="N",
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


def _usage(option: str, value: object, problem: str) -> pytest.UsageError:
    return pytest.UsageError(f"{option} {value}: {problem}")


def _writable_file(option: str, path: Path) -> Path:
    """A file path that can be created or appended to: not a folder, its folder creatable and writable.

    Checked without creating anything: the plugin configures every pytest session of an environment gradeff is
    installed in, and a project's own unit tests must not leave a results folder behind. The writers create the
    folder when they first write.
    """
    if path.is_dir():
        raise _usage(option, path, "is a folder; give a file path")
    existing = path.parent.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise _usage(option, path, f"cannot create its folder ({existing} is a file)")
    if not os.access(existing, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _usage(option, path, "not writable")
    return path


def _baseline(path_text: str | None) -> Path | None:
    """A readable results file with at least one record."""
    if path_text is None:
        return None
    path = Path(path_text)
    try:
        loaded = load_results([path])
    except ResultsFileError as exc:
        raise pytest.UsageError(f"--gradeff-baseline: {exc}") from None
    if not loaded.records:
        raise _usage("--gradeff-baseline", path, "has no record to compare with")
    return path


def _writable_folder(option: str, text: str | None) -> str | None:
    if text is None:
        return None
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise _usage(option, path, "is a file; give a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _usage(option, path, f"cannot create it ({exc.strerror})") from None
    if not os.access(path, os.W_OK):
        raise _usage(option, path, "not writable")
    return text


def _selection(config: pytest.Config) -> dict[str, set[str]]:
    """The keys each ``--gradeff-<axis>`` option names; unknown keys are named with the valid ones."""
    selection = {}
    for field_name in AXES:
        axis, registry = PLURALS[field_name], axis_registry(field_name)
        value = config.getoption(f"gradeff_{axis}")
        if value is None:
            continue
        keys = {key.strip() for key in value.split(",") if key.strip()}
        unknown = sorted(keys - set(registry))
        if unknown or not keys:
            raise pytest.UsageError(f"--gradeff-{axis}: unknown {field_name} "
                                    f"{', '.join(map(repr, unknown)) or '(none)'}; valid {axis}: {', '.join(registry)}")
        selection[field_name] = keys
    return selection


def _local_weights(config: pytest.Config) -> tuple[tuple[str, str], ...]:
    """``--gradeff-weights MODEL=SOURCE`` pairs, resolved to local paths and checked before any cell.

    A hub id is downloaded here (with ``--gradeff-allow-hub`` only); a state dict's keys and shapes are
    checked against the model at the session's profile through its key map (headers only: no tensor is read).
    """
    items = config.getoption("gradeff_weights")
    if not items:
        return ()
    pairs = []
    for item in items:
        model, sep, text = item.partition("=")
        if not sep or not text:
            raise pytest.UsageError(f"--gradeff-weights {item!r}: expected MODEL=SOURCE (a file, a folder or a hub id)")
        if model not in MODELS:
            raise pytest.UsageError(f"--gradeff-weights: unknown model {model!r}; valid models: {', '.join(MODELS)}")
        profile = config.getoption("gradeff_profile")
        try:
            source = resolve_for(model, text, allow_hub=config.getoption("gradeff_allow_hub"))
            check_source(model, source, profile)
        except (WeightSourceError, CheckpointError) as exc:
            raise pytest.UsageError(f"--gradeff-weights {model}={text} (profile {profile}): {exc}") from None
        pairs.append((model, source.path))
    return tuple(pairs)


def _report(text: str | None) -> Path | None:
    if text is None:
        return None
    path = _writable_file("--gradeff-report", Path(text))
    if path.suffix.lower() != ".csv":
        # A template folder that is not there is refused now, not after the session's cells have run.
        from gradeff.report.render import resolve_template_folder  # noqa: PLC0415 - the report: jinja2 and its modules, 0.07 s

        try:
            resolve_template_folder()
        except NotADirectoryError as exc:
            raise pytest.UsageError(f"--gradeff-report: {exc}") from None
    return path


def _ab(config: pytest.Config, baseline: Path | None) -> str | None:
    """``--gradeff-ab REV``: a commit of the working tree's repository, in a session that can run it."""
    revision = config.getoption("gradeff_ab")
    if revision is None:
        return None
    if baseline is not None:
        raise pytest.UsageError("--gradeff-ab runs the cells side by side instead of one by one, and "
                                "--gradeff-baseline judges one-by-one records: give one of them")
    if config.getoption("dist", "no") != "no" or getattr(config, "workerinput", None) is not None:
        raise pytest.UsageError("--gradeff-ab runs its own two worker processes, one cell at a time: run it without "
                                "-n")
    try:
        resolve_revision(repository_root(), revision)
    except RevisionError as exc:
        raise _usage("--gradeff-ab", revision, str(exc)) from None
    return revision


def _history(text: str | None) -> Path | None:
    """``--gradeff-history PATH``: a writable file that is a history store or not there yet."""
    if text is None:
        return None
    path = _writable_file("--gradeff-history", Path(text))
    if path.exists():
        try:
            HistoryStore(path).close()
        except ValueError as exc:
            raise _usage("--gradeff-history", path, str(exc)) from None
    return path


def _compare_args(text: str, baseline: Path | None) -> str:
    """Check ``--gradeff-compare-args`` parses as `gradeff compare` options (so the gate cannot silently not run)."""
    if not text:
        return text
    if baseline is None:
        raise pytest.UsageError("--gradeff-compare-args: given without --gradeff-baseline, which it configures")
    try:
        parse_compare_args(text)
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-compare-args {text!r}: {exc}") from None
    return text


_SEEDS_FORMS = ("a count N >= 1 (e.g. 3: seeds 0, 1, 2) or a comma-separated list of seeds in 0 … 4294967295 "
                "(e.g. 0,1,2)")


def parse_seeds(text: str | None, seed: int = 0) -> tuple[int, ...]:
    """The seeds of ``--gradeff-seeds``: a count (``3`` → ``seed``, ``seed + 1``, ``seed + 2``) or a list (``0,1,2``).

    A lone number is a count, so that ``--gradeff-seeds 3`` repeats each cell three times from ``--gradeff-seed``;
    one explicit seed is ``--gradeff-seed S`` (or the list ``S,``). A list replaces ``--gradeff-seed``, which must
    then be left at its default or be the list's first seed, so the two options never disagree silently.

    Raises:
        ValueError: anything else, with the valid forms.
    """
    if text is None:
        return (seed,)
    text = text.strip()
    if "," not in text:
        try:
            count = int(text)
        except ValueError:
            raise ValueError(f"expected {_SEEDS_FORMS}") from None
        if count < 1:
            raise ValueError(f"a count must be >= 1; expected {_SEEDS_FORMS}")
        if seed + count - 1 > MAX_SEED:
            raise ValueError(f"seeds {seed} … {seed + count - 1} go past {MAX_SEED} "
                             "(numpy seeds are unsigned 32-bit)")
        return tuple(range(seed, seed + count))
    parts = [part.strip() for part in text.split(",")]
    if parts[-1] == "":
        parts.pop()  # "3," names the single seed 3
    try:
        seeds = tuple(int(part) for part in parts)
    except ValueError:
        raise ValueError(f"expected {_SEEDS_FORMS}") from None
    if not seeds or any(not 0 <= s <= MAX_SEED for s in seeds):
        raise ValueError(f"seeds must be in 0 … {MAX_SEED}; expected {_SEEDS_FORMS}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"a seed is repeated; expected {_SEEDS_FORMS}")
    if seed not in (0, seeds[0]):
        raise ValueError(f"a list of seeds replaces --gradeff-seed {seed}; give one of them, or a count "
                         f"(--gradeff-seed {seed} --gradeff-seeds {len(seeds)}: seeds {seed}..{seed + len(seeds) - 1})")
    return seeds


def parse_seed_plan(text: str | None, most: int) -> SeedPlan | None:
    """``auto`` or ``auto:K`` → the adaptive plan (K first seeds, up to ``most``); anything else → ``None``.

    Raises:
        ValueError: ``auto:K`` with K not a count, or more first seeds than the most.
    """
    if text is None or not text.strip().startswith("auto"):
        return None
    head, _, first = text.strip().partition(":")
    if head != "auto":
        raise ValueError(f"expected auto or auto:K, got {text!r}")
    try:
        first_seeds = int(first) if first else DEFAULT_FIRST
    except ValueError:
        raise ValueError(f"auto:K takes a count K >= 1, got {first!r}") from None
    if first_seeds < 1 or first_seeds > most:
        raise ValueError(f"auto:{first_seeds} needs 1 <= K <= --gradeff-max-seeds ({most})")
    return SeedPlan(first=first_seeds, most=most)


def _seed_plan(config: pytest.Config) -> SeedPlan | None:
    text = config.getoption("gradeff_seeds")
    try:
        plan = parse_seed_plan(text, config.getoption("gradeff_max_seeds"))
    except ValueError as exc:
        raise _usage("--gradeff-seeds", text, str(exc)) from None
    if plan is not None and config.getoption("gradeff_shard", None) is not None:
        raise pytest.UsageError("--gradeff-seeds auto with --gradeff-shard: an adaptive run decides each further seed "
                                "from every cell's results, which shards on other machines do not share; give a "
                                "fixed count (--gradeff-seeds 3) to shard")
    return plan


def _answer_options(config: pytest.Config) -> AnswerOptions:
    try:
        margins = parse_margins(config.getoption("gradeff_margin"))
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-margin: {exc}") from None
    prefer = config.getoption("gradeff_prefer")
    try:
        order = parse_prefer(prefer) if prefer is not None else CHOICE_QUESTIONS
    except ValueError as exc:
        raise _usage("--gradeff-prefer", prefer, str(exc)) from None
    return AnswerOptions(margins=margins, prefer=order)


def _seeds(config: pytest.Config, plan: SeedPlan | None) -> tuple[int, ...]:
    text = config.getoption("gradeff_seeds")
    if plan is not None:
        return parse_seeds(str(plan.most), config.getoption("gradeff_seed"))
    try:
        return parse_seeds(text, config.getoption("gradeff_seed"))
    except ValueError as exc:
        raise _usage("--gradeff-seeds", text, str(exc)) from None


def _data_sources(config: pytest.Config) -> tuple:
    """``--gradeff-data`` sources, each opened and checked (path, format, splits, columns) before any cell."""
    given, columns = config.getoption("gradeff_data"), config.getoption("gradeff_data_columns")
    tokenizer = config.getoption("gradeff_tokenizer")
    selected = _selection(config).get("dataset", set())
    if not (given or columns or tokenizer or selected):
        return ()
    try:
        paths = real_sources.parse_sources(given)
        overrides = real_sources.parse_columns(columns)
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-data: {exc}") from None
    needing = sorted(key for key in selected if key in real_sources.KNOWN and key not in real_sources.BUILTIN
                     and key not in real_sources.SYNTHETIC_TOO and key not in paths)
    if needing:
        raise pytest.UsageError(f"--gradeff-datasets {','.join(needing)}: real data only; give "
                                f"{' '.join(f'--gradeff-data {key}=PATH' for key in needing)}")
    stray = sorted(key for key in overrides if key is not None and key not in paths and key not in real_sources.BUILTIN)
    if stray:
        raise pytest.UsageError(f"--gradeff-data-columns: no --gradeff-data source for {', '.join(stray)}; "
                                f"sources: {', '.join(paths) or '(none)'}")
    if tokenizer is not None and not Path(tokenizer).is_dir():
        raise _usage("--gradeff-tokenizer", tokenizer, "no such folder")
    root = cache_root(config.getoption("gradeff_cache"))
    builtin = {key: "" for key in real_sources.BUILTIN if key in overrides or tokenizer is not None}
    sources = []
    for key, path in (paths | builtin).items():
        text = real_sources.KNOWN[key].kind != "image_classification"
        source = real_sources.DataSource(key=key, path=path, tokenizer=tokenizer if text else None,
                                 columns=tuple(sorted((overrides.get(None, {}) | overrides.get(key, {})).items())),
                                 allow_hub=config.getoption("gradeff_allow_hub"))
        try:
            profile = config.getoption("gradeff_profile")
            real.validate_source(source, root, largest_caps(key, profile), step=largest_step(key, profile))
        except ValueError as exc:
            raise pytest.UsageError(f"--gradeff-data {key}={path or '(built in)'}: {exc}") from None
        sources.append(source)
    return tuple(sources)


# pytest-benchmark's options that store its timings: under pytest-xdist it stores nothing.
_BENCHMARK_STORAGE = (("benchmark_json", "--benchmark-json"), ("benchmark_save", "--benchmark-save"),
                      ("benchmark_autosave", "--benchmark-autosave"))


def benchmark_storage_given(config: pytest.Config) -> list[str]:
    """The pytest-benchmark storage options given on the command line (``--benchmark-json`` …), as flags."""
    return [flag for name, flag in _BENCHMARK_STORAGE if config.getoption(name, None)]


def _benchmark_storage_under_xdist(config: pytest.Config) -> None:
    """Refuse pytest-benchmark's storage options under pytest-xdist, which would otherwise write nothing.

    pytest-benchmark switches itself off when xdist distributes tests (its own test: the ``dist`` option, set by
    ``-n``), because cells timed side by side on shared cores are not benchmarks; ``--benchmark-json`` then
    writes no file and a later ``pytest-benchmark compare`` fails on it. Said before any cell runs instead.
    """
    if getattr(config, "workerinput", None) is not None or config.getoption("dist", "no") == "no":
        return
    if config.getoption("benchmark_disable", False) or config.getoption("benchmark_skip", False):
        return
    given = benchmark_storage_given(config)
    if given:
        workers = config.getoption("numprocesses", None)
        raise pytest.UsageError(
            f"{given[0]}: pytest-benchmark switches itself off under pytest-xdist (-n {workers}): epochs timed while "
            f"other workers share the cores are not benchmarks, so it would write nothing. Run without -n (one cell "
            f"at a time) to keep {given[0]}, or keep -n and read every epoch's seconds from the results file "
            f"(--gradeff-results; `gradeff report RESULTS -o table.csv`, or gradeff.load)")


def read_settings(config: pytest.Config) -> Settings:
    """Every gradeff option, validated (a ``pytest.UsageError`` names the first bad one)."""
    _benchmark_storage_under_xdist(config)
    device = config.getoption("gradeff_device")
    try:
        validate_device(device)
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-device: {exc}") from None
    baseline = _baseline(config.getoption("gradeff_baseline"))
    plan = _seed_plan(config)
    seeds = _seeds(config, plan)
    return Settings(
        profile=config.getoption("gradeff_profile"), epochs=config.getoption("gradeff_epochs"),
        seed=seeds[0], seeds=seeds, device=device,
        threads=config.getoption("gradeff_threads") or default_threads(),
        results=_writable_file("--gradeff-results", Path(config.getoption("gradeff_results"))),
        sample_hz=config.getoption("gradeff_sample_hz"), grid_intensity=config.getoption("gradeff_grid_intensity"),
        memory_budget=config.getoption("gradeff_memory_budget"),
        memory_margin=config.getoption("gradeff_memory_margin"),
        selection=_selection(config), weights=_local_weights(config),
        cache_dir=_writable_folder("--gradeff-cache", config.getoption("gradeff_cache")),
        report=_report(config.getoption("gradeff_report")), baseline=baseline,
        compare_args=_compare_args(config.getoption("gradeff_compare_args"), baseline),
        resume=config.getoption("gradeff_resume"), tune=config.getoption("gradeff_tune"),
        ab=_ab(config, baseline), history=_history(config.getoption("gradeff_history")),
        tune_points=config.getoption("gradeff_tune_points"), protocol=config.getoption("gradeff_protocol"),
        isolate=config.getoption("gradeff_isolate"), fused=config.getoption("gradeff_fused"),
        compile=config.getoption("gradeff_compile"), workers=config.getoption("gradeff_workers"),
        data=_data_sources(config), seed_plan=plan,
        seed_budget=config.getoption("gradeff_seed_budget") if plan is not None else None,
        answer=_answer_options(config),
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
