"""Every ```bash block of README.md and docs/*.md works as written: a renamed option, a removed file, a selection
that selects nothing or a broken `gradeff` command fails here.

Each block runs in bash, in a scratch folder laid out like a checkout, whose ``.venv/bin/python``,
``.venv/bin/gradeff`` and ``scripts/setup.sh`` record the commands instead of running them (bash still expands the
arrays, variables and continuations as a reader's shell would). The recorded commands then run in one Python process:
quick ones for real (`gradeff report`, `compare`, `list`), long ones checked without training (a pytest run of the
grids collects, a `gradeff launch` parses its options and collects its selection, `gradeff launch status|collect`
parse theirs), and those that need what only a reader has (local copies of datasets and models, hours of training)
have their options checked against pytest's and the scripts' own. The test suite's command is the one `.ci/run`
runs: CI runs it whole; here it must be that line. A command no rule knows fails the test: a new kind of command
needs a rule.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
PAGES = (CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md")))
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)
# Paths a reader supplies: commands naming them cannot run here, their options are checked instead.
READERS_FILES = re.compile(r"(^|[=\s])(/data/|/models/|~/models)")
CI_RUN = (CHECKOUT / ".ci" / "run").read_text(encoding="utf-8")
# Bash runs the blocks with these, as a Slurm array job's task would see them.
SLURM = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "8"}

RECORDER = """#!/bin/sh
# Records its name and arguments (one JSON list per line) instead of running.
exec "{python}" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' {name} "$@" >> "{log}"
"""

# Runs the recorded commands in one process (pytest's collection of the grids is seconds; a process per command
# would be most of this test's time) and prints one JSON line per command: its exit code and output's tail.
RUNNER = r'''
import contextlib, io, json, sys, time
import pytest
from gradeff.cli import build_parser, main as gradeff_main, parse_args

COLLECT = ["--collect-only", "-q", "-p", "no:cacheprovider"]


def pytest_options():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        pytest.main(["--help", "-p", "no:cacheprovider"])
    return set(__import__("re").findall(r"--[a-z][a-z0-9-]*", out.getvalue()))


def without_workers(args):
    # Collection needs no workers: -n N is parsed (xdist's option) but set to 0.
    return [("0" if i and args[i - 1] == "-n" else a) for i, a in enumerate(args)]


def run(kind, argv):
    started = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        if kind == "collect":
            code = pytest.main(without_workers(argv) + COLLECT)
        elif kind == "gradeff":
            code = gradeff_main(argv)
        elif kind == "launch" and argv[1] in ("status", "collect"):
            parse_args(argv)  # a launch's folder is a reader's: its options are checked; SystemExit(2) on a bad one
            code = 0
        elif kind == "launch":
            cut = argv.index("--")
            build_parser().parse_args(argv[:cut])  # launch's own options; SystemExit(2) on a bad one
            code = pytest.main(without_workers(argv[cut + 1:]) + COLLECT)
        elif kind == "parse":
            # Minutes of training side by side (gradeff ab, gradeff history run|find) or a store only they make (gradeff
            # history report): the options parse and the cells they name exist; the commands themselves are run by
            # tests/scale/test_ab.py, tests/scale/test_history.py and tests/report/test_history_page.py.
            from gradeff.scale.ab import select_cells

            args = build_parser().parse_args(argv)
            ids = [i for i in (getattr(args, "cells", None) or getattr(args, "cell", None) or "").split(",") if i]
            select_cells(getattr(args, "grid", "main"), ids=ids or None)
            code = 0
        elif kind == "options":
            unknown = sorted({a.split("=")[0] for a in argv if a.startswith("--")} - KNOWN)
            print("unknown options:", unknown)
            code = 1 if unknown else 0
    return int(code), f"{time.perf_counter() - started:.1f} s\n" + out.getvalue()[-3000:]


KNOWN = pytest_options()
for line in sys.stdin:
    kind, argv = json.loads(line)
    try:
        code, tail = run(kind, argv)
    except SystemExit as exc:
        code, tail = exc.code if isinstance(exc.code, int) else 2, "SystemExit"
    print(json.dumps([kind, argv, code, tail]), flush=True)
'''


def _blocks() -> list[tuple[str, str]]:
    return [(f"{page.name}:{page.read_text(encoding='utf-8')[:m.start()].count(chr(10)) + 1}", m.group(1))
            for page in PAGES for m in BLOCK.finditer(page.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder laid out like a checkout: the sources linked, the commands that would install or train recorded."""
    root = tmp_path_factory.mktemp("checkout")
    for name in ("benchmarks", "tests", "baselines", "reports", "gradeff", "pyproject.toml", "conftest.py", ".ci"):
        (root / name).symlink_to(CHECKOUT / name)
    log = root / "commands.jsonl"
    for shim, name in ((".venv/bin/python", "python"), (".venv/bin/gradeff", "gradeff"),
                       ("scripts/setup.sh", "setup.sh")):
        (root / shim).parent.mkdir(parents=True, exist_ok=True)
        (root / shim).write_text(RECORDER.format(python=sys.executable, name=name, log=log), encoding="utf-8")
        (root / shim).chmod(0o755)
    # What the pages' gate, report and shard commands read: records of a session (the committed baseline's, so the
    # gate compares equal numbers), a template folder.
    (root / "results").mkdir()
    for name in ("results.jsonl", "last-session.jsonl", "earlier.jsonl"):
        shutil.copy(CHECKOUT / "baselines" / "tiny-cpu.jsonl", root / "results" / name)
    (root / "my-templates").mkdir()
    return root


def _record(scratch: Path) -> list[tuple[str, list[str]]]:
    """Run every block in bash with the recorders; every command it would have run, with where it came from."""
    log = scratch / "commands.jsonl"
    recorded = []
    for where, text in _blocks():
        log.write_text("")
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=scratch, capture_output=True, text=True,
                             env=os.environ | SLURM, timeout=60, check=False)
        assert ran.returncode == 0, f"{where}: bash failed on\n{text}\n{ran.stderr}"
        commands = [json.loads(line) for line in log.read_text().splitlines()]
        assert commands, f"{where}: a block that runs nothing gradeff knows:\n{text}"
        recorded += [(where, argv) for argv in commands]
    return recorded


def _plan(where: str, argv: list[str]) -> tuple[str, list[str]] | None:
    """How to check one recorded command: (kind, arguments) for the runner, or ``None`` when checked here."""
    program, args = argv[0], argv[1:]
    text = " ".join(args)
    if program == "setup.sh":
        # Installs from the package index (CI runs it on every clone): checked for its syntax here.
        subprocess.run(["bash", "-n", str(CHECKOUT / "scripts" / "setup.sh")], check=True)
        return None
    if program == "python" and args[:3] == ["-m", "pytest", "tests"]:
        # The test suite: what CI runs, with these very arguments (collecting it alone takes a minute).
        assert f".venv/bin/python -m pytest {text[len('-m pytest '):]}".rstrip() in CI_RUN, f"{where}: not in .ci/run"
        return "options", args[2:]
    if program == "python" and args[:2] == ["-m", "pytest"]:
        return ("options" if READERS_FILES.search(text) else "collect"), args[2:]
    if program == "python" and args and args[0].startswith("scripts/"):
        # Minutes to hours of training (a baseline's refresh): the script must exist and parse its options.
        script = CHECKOUT / args[0]
        shown = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                               check=False)
        assert shown.returncode == 0, f"{where}: {args[0]} --help failed: {shown.stderr[-2000:]}"
        return None
    if program == "gradeff" and args[:1] == ["launch"]:
        return "launch", args
    if program == "gradeff" and args[:1] in (["ab"], ["history"], ["baseline"]):
        return "parse", args
    if program == "gradeff" and args[:1] in (["report"], ["compare"], ["list"], ["--version"]):
        return "gradeff", args
    raise AssertionError(f"{where}: no rule for {argv}; add one to tests/test_docs_commands.py")


@pytest.mark.slow
def test_every_bash_block_of_the_readme_and_docs_works(scratch):
    """Quick commands run, long ones collect, those needing a reader's files have known options; all succeed."""
    started = time.perf_counter()
    planned = [(where, plan) for where, argv in _record(scratch) if (plan := _plan(where, argv)) is not None]
    assert {plan[0] for _, plan in planned} >= {"collect", "gradeff"}  # the README's own two kinds at least
    stdin = "".join(json.dumps(plan) + "\n" for _, plan in planned)
    ran = subprocess.run([sys.executable, "-c", textwrap.dedent(RUNNER)], input=stdin, cwd=scratch, text=True,
                         capture_output=True, env={k: v for k, v in os.environ.items() if k != "GRADEFF_TEMPLATES"},
                         timeout=600, check=False)
    results = [json.loads(line) for line in ran.stdout.splitlines()]
    assert len(results) == len(planned), ran.stderr[-3000:]
    failed = [f"{where}: {kind} {' '.join(argv)} -> exit {code}\n{tail}"
              for (where, _), (kind, argv, code, tail) in zip(planned, results, strict=True) if code != 0]
    assert not failed, "\n\n".join(failed)
    print(f"{len(planned)} commands from {len(_blocks())} blocks checked in {time.perf_counter() - started:.1f} s")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens (code spans' text kept)."""
    headings = re.findall(r"^#+ (.+)$", BLOCK.sub("", page.read_text(encoding="utf-8")), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_of_the_readme_and_docs_resolves():
    """A page moved or a heading renamed breaks no link: every relative link names a file, every anchor a heading."""
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (anchor and anchor not in _anchors(linked)):
                broken.append(f"{page.name}: {target}")
    assert not broken, broken


# A path the docs name in backticks (`gradeff/cell/plan.py`, `tests/records/`) as a file or folder of this checkout.
NAMED_PATH = re.compile(r"`((?:gradeff|tests|scripts|benchmarks|baselines|reports|docs)/[^`\s<>*{}]*)`")


def test_every_path_the_docs_name_exists():
    """The layout, the "where a change goes" table and every page name files that are there: a moved or deleted
    module fails here instead of sending a reader to nothing."""
    missing = [f"{page.relative_to(CHECKOUT)}: {path}" for page in PAGES
               for path in NAMED_PATH.findall(page.read_text(encoding="utf-8"))
               if not (CHECKOUT / path.split("::")[0].rstrip("/")).exists()]
    assert missing == []


def test_the_named_path_pattern_finds_paths_and_skips_placeholders():
    found = NAMED_PATH.findall("`gradeff/cell/plan.py` `gradeff/axes/models/<family>.py` `tests/records/` `a/b.py`")
    assert found == ["gradeff/cell/plan.py", "tests/records/"]


# A README selection whose comment counts its cells: "# the 6 llm accumulation cells".
_COUNTED = re.compile(r"^\.venv/bin/python -m pytest (?P<args>.+?)\s+# the (?:same )?(?P<count>\d+) ", re.MULTILINE)


@pytest.mark.slow
def test_the_readmes_selections_collect_the_cells_their_comments_count():
    """Each README example that says how many cells it selects collects exactly that many (a `-k` word that also
    matches another method or optimizer would select more than the comment says)."""
    import shlex

    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    counted = list(_COUNTED.finditer(readme))
    assert len(counted) >= 4
    for match in counted:
        args = shlex.split(match["args"])
        if "--gradeff-seeds" in args:  # seeds repeat each cell's run, not its collection: dropped with their value
            at = args.index("--gradeff-seeds")
            del args[at:at + 2]
        done = subprocess.run([sys.executable, "-m", "pytest", *args, "--collect-only", "-q", "-p", "no:cacheprovider"],
                              cwd=CHECKOUT, capture_output=True, text=True, timeout=300)
        collected = re.search(r"(\d+)(?:/\d+)? tests? collected", done.stdout)
        assert collected, done.stdout[-2000:] + done.stderr[-2000:]
        assert int(collected[1]) == int(match["count"]), f"{match[0]}: collected {collected[1]}"
