"""The --gradeff-* options checked where their parsed values meet the world: files that must be writable or
readable, registry keys, weight and data sources, revisions, the seeds, and the options that exclude each other.
Each check runs before the first cell and raises a ``pytest.UsageError`` that names the option and what is valid.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradeff.analysis.answer import AnswerOptions
from gradeff.analysis.choice import CHOICE_QUESTIONS, parse_prefer
from gradeff.analysis.margins import parse_margins
from gradeff.analysis.sequential import DEFAULT_FIRST, SeedPlan
from gradeff.axes.data import real, real_sources
from gradeff.axes.models import MODELS
from gradeff.axes.models.checkpoint import CheckpointError, check_source, resolve_for
from gradeff.axes.models.weights import WeightSourceError
from gradeff.cell.pretrain import cache_root
from gradeff.gate.compare import parse_compare_args
from gradeff.gate.history import HistoryStore
from gradeff.pytest.option_values import MAX_SEED, usage_error
from gradeff.records.loading import ResultsFileError, load_results
from gradeff.scale.ab import RevisionError, repository_root, resolve_revision
from gradeff.studies.grid import AXES, PLURALS, axis_registry
from gradeff.studies.hparams import largest_caps, largest_step

__all__ = ["ab_revision", "answer_options", "axis_selection", "baseline_results", "benchmark_storage_given",
           "checked_compare_args", "data_sources", "history_path", "local_weights", "parse_seed_plan", "parse_seeds",
           "read_seed_plan", "read_seeds", "refuse_benchmark_storage_under_xdist", "report_path", "writable_file",
           "writable_folder"]


def writable_file(option: str, path: Path) -> Path:
    """A file path that can be created or appended to: not a folder, its folder creatable and writable.

    Checked without creating anything: the plugin configures every pytest session of an environment gradeff is
    installed in, and a project's own unit tests must not leave a results folder behind. The writers create the
    folder when they first write.
    """
    if path.is_dir():
        raise usage_error(option, path, "is a folder; give a file path")
    existing = path.parent.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise usage_error(option, path, f"cannot create its folder ({existing} is a file)")
    if not os.access(existing, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise usage_error(option, path, "not writable")
    return path


def baseline_results(path_text: str | None) -> Path | None:
    """A readable results file with at least one record."""
    if path_text is None:
        return None
    path = Path(path_text)
    try:
        loaded = load_results([path])
    except ResultsFileError as exc:
        raise pytest.UsageError(f"--gradeff-baseline: {exc}") from None
    if not loaded.records:
        raise usage_error("--gradeff-baseline", path, "has no record to compare with")
    return path


def writable_folder(option: str, text: str | None) -> str | None:
    if text is None:
        return None
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise usage_error(option, path, "is a file; give a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise usage_error(option, path, f"cannot create it ({exc.strerror})") from None
    if not os.access(path, os.W_OK):
        raise usage_error(option, path, "not writable")
    return text


def axis_selection(config: pytest.Config) -> dict[str, set[str]]:
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


def local_weights(config: pytest.Config) -> tuple[tuple[str, str], ...]:
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


def report_path(text: str | None) -> Path | None:
    if text is None:
        return None
    path = writable_file("--gradeff-report", Path(text))
    if path.suffix.lower() != ".csv":
        # A template folder that is not there is refused now, not after the session's cells have run.
        from gradeff.report.render import resolve_template_folder  # noqa: PLC0415 - the report: jinja2 and its modules, 0.07 s

        try:
            resolve_template_folder()
        except NotADirectoryError as exc:
            raise pytest.UsageError(f"--gradeff-report: {exc}") from None
    return path


def ab_revision(config: pytest.Config, baseline: Path | None) -> str | None:
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
        raise usage_error("--gradeff-ab", revision, str(exc)) from None
    return revision


def history_path(text: str | None) -> Path | None:
    """``--gradeff-history PATH``: a writable file that is a history store or not there yet."""
    if text is None:
        return None
    path = writable_file("--gradeff-history", Path(text))
    if path.exists():
        try:
            HistoryStore(path).close()
        except ValueError as exc:
            raise usage_error("--gradeff-history", path, str(exc)) from None
    return path


def checked_compare_args(text: str, baseline: Path | None) -> str:
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


def read_seed_plan(config: pytest.Config) -> SeedPlan | None:
    text = config.getoption("gradeff_seeds")
    try:
        plan = parse_seed_plan(text, config.getoption("gradeff_max_seeds"))
    except ValueError as exc:
        raise usage_error("--gradeff-seeds", text, str(exc)) from None
    if plan is not None and config.getoption("gradeff_shard", None) is not None:
        raise pytest.UsageError("--gradeff-seeds auto with --gradeff-shard: an adaptive run decides each further seed "
                                "from every cell's results, which shards on other machines do not share; give a "
                                "fixed count (--gradeff-seeds 3) to shard")
    return plan


def answer_options(config: pytest.Config) -> AnswerOptions:
    try:
        margins = parse_margins(config.getoption("gradeff_margin"))
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-margin: {exc}") from None
    prefer = config.getoption("gradeff_prefer")
    try:
        order = parse_prefer(prefer) if prefer is not None else CHOICE_QUESTIONS
    except ValueError as exc:
        raise usage_error("--gradeff-prefer", prefer, str(exc)) from None
    return AnswerOptions(margins=margins, prefer=order)


def read_seeds(config: pytest.Config, plan: SeedPlan | None) -> tuple[int, ...]:
    text = config.getoption("gradeff_seeds")
    if plan is not None:
        return parse_seeds(str(plan.most), config.getoption("gradeff_seed"))
    try:
        return parse_seeds(text, config.getoption("gradeff_seed"))
    except ValueError as exc:
        raise usage_error("--gradeff-seeds", text, str(exc)) from None


def data_sources(config: pytest.Config) -> tuple:
    """``--gradeff-data`` sources, each opened and checked (path, format, splits, columns) before any cell."""
    given, columns = config.getoption("gradeff_data"), config.getoption("gradeff_data_columns")
    tokenizer = config.getoption("gradeff_tokenizer")
    selected = axis_selection(config).get("dataset", set())
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
        raise usage_error("--gradeff-tokenizer", tokenizer, "no such folder")
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


def refuse_benchmark_storage_under_xdist(config: pytest.Config) -> None:
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
