"""The gate end to end: files in, table and exit code out; and a real injected slowdown caught."""

import re
import subprocess
import sys
import time

import pytest
import torch

import gradeff.cell.build
from gradeff.cell.config import RunConfig
from gradeff.cell.run import run_cell
from gradeff.gate.compare import main
from gradeff.records.results import CellRecord, EpochRecord, Summary
from gradeff.records.store import append_record
from gradeff.studies.grid import Cell


def record(cell="llm-adam-standard", *, status="ok", seconds=(1.0, 1.0, 1.0), final_loss=1.5,
           **overrides) -> CellRecord:
    """A record of ``cell`` with the given epoch times and final loss."""
    model, optimizer, strategy = cell.split("-")
    losses = [2.0] * (len(seconds) - 1) + [final_loss]
    epochs = tuple(EpochRecord(epoch=i, loss=loss, seconds=s, optimizer_steps=8, closure_calls=8, samples=64,
                               targets=64) for i, (loss, s) in enumerate(zip(losses, seconds)))
    values = dict(cell=cell, model=model, optimizer=optimizer, strategy=strategy, profile="tiny", seed=0,
                  device="cpu", status=status, epochs=epochs, summary=Summary.of(list(epochs), 5.0))
    return CellRecord(**(values | overrides))


def write(path, *records):
    """Append ``records`` to the results file ``path``; return its name."""
    for r in records:
        append_record(path, r)
    return str(path)


@pytest.fixture
def files(tmp_path):
    """``files(baseline_records, current_records)`` → the two paths."""
    def make(before, after):
        return write(tmp_path / "base.jsonl", *before), write(tmp_path / "cur.jsonl", *after)
    return make


def test_identical_files_exit_0(files, capsys):
    """The same records on both sides: exit 0, no row shown, the total line counts the cells."""
    base, cur = files([record(), record("vit-sgd-accum")], [record(), record("vit-sgd-accum")])
    assert main([base, cur]) == 0
    out = capsys.readouterr().out
    assert "no change beyond tolerance" in out
    assert out.strip().endswith("0 regressions in 0 cells, 0 improvements, 2 cells compared")


def test_regression_exits_1_and_is_counted(files, capsys):
    """A diverged cell and a slower cell: exit 1, both rows shown, the total counts them."""
    base, cur = files([record(), record("vit-sgd-accum"), record("vit-adam-accum")],
                      [record(status="diverged"), record("vit-sgd-accum", seconds=(2, 2, 2)),
                       record("vit-adam-accum", final_loss=1.4)])
    assert main([base, cur]) == 1
    out = capsys.readouterr().out
    assert re.search(r"llm-adam-standard\s+status\s+ok\s+diverged\s+ok → diverged\s+regression", out)
    assert re.search(r"vit-sgd-accum\s+time_per_epoch\s+1 s ±0 \(n=3\)\s+2 s ±0 \(n=3\)\s+×2\s+regression", out)
    # The lower final loss also lowers the mean loss: golden figures that changed for the better still regress.
    assert re.search(r"vit-adam-accum\s+final_loss\s.*\sregression\s+changed: better; tolerance", out)
    # Counted among the regressions, not the improvements, and the total line says so.
    assert ("4 regressions in 3 cells (2 of them changed: better: a deterministic figure must repeat until the "
            "baseline is refreshed), 0 improvements, 3 cells compared") in out


def test_all_rows_shows_every_rule(files, capsys):
    """--all prints one row per cell and rule, including ok and not-compared ones."""
    base, cur = files([record()], [record()])
    assert main([base, cur, "--all"]) == 0
    out = capsys.readouterr().out
    assert "final_loss" in out and "activation_bytes" in out and "absent in baseline and current" in out


def test_last_record_per_cell_wins(files):
    """A cell rerun in the baseline file is judged by its last record."""
    base, cur = files([record(status="diverged"), record()], [record(status="diverged")])
    assert main([base, cur]) == 1
    base, cur = files([record(), record(status="diverged")], [record(status="diverged")])
    assert main([base, cur]) == 0


def test_cells_of_one_file_are_listed(files, capsys):
    """A baseline cell absent from current is a regression (--allow-missing lists it); a new cell is listed."""
    base, cur = files([record(), record("vit-sgd-accum")], [record(), record("llm-sgd-accum")])
    assert main([base, cur]) == 1
    out = capsys.readouterr().out
    assert re.search(r"vit-sgd-accum\s+presence\s+present\s+missing\s+regression\s+only in baseline", out)
    assert "only in baseline: vit-sgd-accum" in out and "only in current: llm-sgd-accum" in out
    assert out.strip().endswith("1 cell compared, 1 missing, 1 only in baseline, 1 only in current")
    assert main([base, cur, "--allow-missing"]) == 0
    assert re.search(r"vit-sgd-accum\s+presence\s+present\s+missing\s+not compared", capsys.readouterr().out)
    assert main([base, cur, "--missing-is-regression"]) == 1  # the old spelling of the default


def test_selected_cells_judge_a_slice_on_its_own_cells(files, tmp_path, capsys):
    """--cells: baseline cells outside the slice are out of scope; a selected cell with no record is missing."""
    base, cur = files([record(), record("vit-sgd-accum"), record("vit-cgd-accum")], [record()])
    cells = tmp_path / "cells.txt"
    cells.write_text("# the session's selection\nllm-adam-standard\n")
    assert main([base, cur, "--cells", str(cells)]) == 0
    assert capsys.readouterr().out.strip().endswith("1 cell compared")
    # An interrupted slice: two selected cells never recorded (one the baseline lacks as well).
    cells.write_text("llm-adam-standard\nvit-sgd-accum\nllm-sgd-accum\n")
    assert main([base, cur, "--cells", str(cells)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"vit-sgd-accum\s+presence\s+present\s+missing\s+regression\s+only in baseline", out)
    assert re.search(r"llm-sgd-accum\s+presence\s+missing\s+regression\s+selected, no record", out)
    assert "2 regressions in 2 cells" in out
    assert main([base, cur, "--cells", str(cells), "--allow-missing"]) == 0
    # A slice that recorded nothing at all: every selected cell is missing, not "unusable input".
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main([base, str(empty), "--cells", str(cells)]) == 1
    assert main([base, cur, "--cells", str(tmp_path / "absent.txt")]) == 2


def test_environment_difference_comes_first_and_makes_time_advisory(files, capsys):
    """Another CPU: printed before the table; a 2x time is advisory (exit 0); without perturbation runs the
    losses fall back to --loose (a 1e-4 change passes, 10 % fails), and the line says so;
    --strict-environment exits 2."""
    here = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 2, "torch_threads": 2, "device": "cpu",
            "torch": "2.13.0+cpu", "transformers": "5.24.0"}
    there = here | {"cpu": "AMD EPYC 7B13", "cpu_count": 4}
    base, cur = files([record(environment=here)], [record(environment=there, seconds=(2, 2, 2))])
    assert main([base, cur]) == 0
    out = capsys.readouterr().out
    assert out.startswith("environment differs: cpu differs: Intel(R) Xeon(R) Processor (baseline) vs AMD EPYC 7B13 "
                          "(current) (1 cell: llm-adam-standard)\nenvironment differs: cpu_count differs: 2")
    assert re.search(r"time_per_epoch\s.*×2\s+advisory\s+would be regression \(environment differs\)", out)
    assert main([base, cur, "--strict-environment"]) == 2
    assert "--strict-environment: cpu differs" in capsys.readouterr().err
    base, cur = files([record(environment=here)], [record(environment=there, final_loss=1.5 * (1 + 1e-4))])
    assert main([base, cur]) == 0
    assert ("numerics environment differs (cpu Intel(R) Xeon(R) Processor (baseline) vs AMD EPYC 7B13 (current)) and "
            "the baseline has no perturbation run of these cells: losses compared at --loose tolerance (rtol 0.05) "
            "(1 cell: llm-adam-standard)") in capsys.readouterr().out
    base, cur = files([record(environment=here)], [record(environment=there, final_loss=1.5 * 1.1)])
    assert main([base, cur]) == 1
    # The same environment: the slowdown is a regression again.
    capsys.readouterr()
    base, cur = files([record(environment=here)], [record(environment=here, seconds=(2, 2, 2))])
    assert main([base, cur]) == 1
    assert "environment differs" not in capsys.readouterr().out


@pytest.mark.parametrize("key, value", [("cpu_capability", "AVX2"), ("torch", "2.14.0+cpu")])
def test_other_kernels_compare_losses_at_loose_tolerance(files, capsys, key, value):
    """Another instruction set or library version sums in another order: a 1e-4 loss change passes (it
    would fail on the same kernels), a 10 % one still fails; the difference is named first."""
    here = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_capability": "AVX512", "cpu_count": 2, "torch_threads": 1,
            "device": "cpu", "torch": "2.13.0+cpu", "transformers": "5.24.0"}
    there = here | {key: value}
    base, cur = files([record(environment=here)], [record(environment=there, final_loss=1.5 * (1 + 1e-4))])
    assert main([base, cur]) == 0
    out = capsys.readouterr().out
    assert f"environment differs: {key} differs: {here[key]} (baseline) vs {value} (current)" in out
    assert f"numerics environment differs ({key} {here[key]} (baseline) vs {value} (current)) and the baseline " \
           "has no perturbation run of these cells: losses compared at --loose tolerance" in out
    base, cur = files([record(environment=here)], [record(environment=there, final_loss=1.5 * 1.1)])
    assert main([base, cur]) == 1
    base, cur = files([record(environment=here)], [record(environment=here, final_loss=1.5 * (1 + 1e-4))])
    assert main([base, cur]) == 1


def test_missing_file_exits_2_with_the_path(tmp_path, capsys):
    """A baseline that does not exist: exit 2, its path on stderr."""
    cur = write(tmp_path / "cur.jsonl", record())
    missing = tmp_path / "nope" / "base.jsonl"
    assert main([str(missing), cur]) == 2
    assert f"results file not found: {missing}" in capsys.readouterr().err


def test_malformed_files(tmp_path, capsys):
    """Garbage only → 2; garbage among good lines → a warning, or 2 under --strict."""
    cur = write(tmp_path / "cur.jsonl", record())
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n{\"cell\": 1}\n")
    assert main([str(garbage), cur]) == 2
    assert "no readable record" in capsys.readouterr().err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    assert main([str(binary), cur]) == 2
    mixed = write(tmp_path / "mixed.jsonl", record())
    with open(mixed, "a") as handle:
        handle.write("{truncated\n")
    assert main([mixed, cur]) == 0
    assert f"warning: {mixed}: skipped 1 unreadable line: {mixed}:2:" in capsys.readouterr().out
    assert main([mixed, cur, "--strict"]) == 2
    assert "unreadable line under --strict" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main([str(empty), cur]) == 2


def test_mismatched_profile_or_seed_exits_2(files, capsys):
    """Another profile or seed makes the inputs unusable, unless --allow-mismatch (then a warning)."""
    base, cur = files([record()], [record(profile="small")])
    assert main([base, cur]) == 2
    assert "profile differs: tiny (baseline) vs small (current) (1 cell: llm-adam-standard)" in capsys.readouterr().err
    base, cur = files([record("vit-sgd-accum")], [record("vit-sgd-accum", seed=1)])  # one record a side
    assert main([base, cur]) == 2
    assert main([base, cur, "--allow-mismatch"]) == 0
    assert "warning: seed differs" in capsys.readouterr().out


def test_another_precision_is_another_experiment(files, capsys):
    """A bf16 run against an fp32 baseline is refused (exit 2) naming the precisions; a record without one is fp32."""
    base, cur = files([record()], [record(hparams={"precision": "bf16"})])
    assert main([base, cur]) == 2
    assert "precision differs: fp32 (baseline) vs bf16 (current) (1 cell: llm-adam-standard)" in capsys.readouterr().err
    base, cur = files([record(hparams={"precision": "bf16"})], [record(hparams={"precision": "bf16"})])
    assert main([base, cur]) == 0
    base, cur = files([record(hparams={"precision": "fp32"})], [record()])
    assert main([base, cur]) == 0
    base, cur = files([record(hparams={"precision": "fp16"})], [record(hparams={"precision": "bf16"})])
    assert main([base, cur, "--allow-mismatch"]) == 0
    assert "warning: precision differs: fp16 (baseline) vs bf16 (current)" in capsys.readouterr().out


def test_no_cell_in_common_exits_2(files, capsys):
    """Disjoint files have nothing to compare: exit 2."""
    base, cur = files([record()], [record("vit-sgd-accum")])
    assert main([base, cur]) == 2
    assert "no cell in common" in capsys.readouterr().err


def test_other_device_kind_is_a_warning(files, capsys):
    """cpu vs cuda:0 is compared, with a warning line."""
    base, cur = files([record()], [record(device="cuda:0")])
    assert main([base, cur]) == 0
    assert "warning: device differs: cpu (baseline) vs cuda (current)" in capsys.readouterr().out


def test_markdown_is_a_valid_table(files, tmp_path, capsys):
    """--markdown: a header, a separator row, and rows with as many cells; --output writes it."""
    base, cur = files([record(), record("vit-sgd-accum")],
                      [record(status="error", detail="boom | bang"), record("vit-sgd-accum", seconds=(3, 3, 3))])
    out_file = tmp_path / "report" / "gate.md"
    assert main([base, cur, "--markdown", "--output", str(out_file)]) == 1
    assert capsys.readouterr().out.strip() == "2 regressions in 2 cells, 0 improvements, 2 cells compared"
    table = [line for line in out_file.read_text().splitlines() if line.startswith("|")]
    assert table[0] == "| cell | metric | before | after | change | verdict | note |"
    assert re.fullmatch(r"\|(---\|){7}", table[1])
    # Escaped pipes do not split a cell.
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 8 for line in table) and len(table) == 4


def test_rule_overrides_on_the_command_line(files, capsys):
    """--rule and --time-ratio change a verdict; --ignore drops a metric; bad ones exit 2."""
    base, cur = files([record()], [record(final_loss=1.51)])
    assert main([base, cur]) == 1
    assert main([base, cur, "--rule", "final_loss:rtol=0.01"]) == 1  # mean_loss still regresses
    assert main([base, cur, "--rule", "*_loss:rtol=0.01"]) == 0
    assert main([base, cur, "--loose"]) == 0
    base, cur = files([record()], [record(seconds=(1.2, 1.2, 1.2))])
    assert main([base, cur, "--time-ratio", "1.1"]) == 1
    assert main([base, cur, "--time-ratio", "1.1", "--ignore", "time_per_epoch"]) == 0
    capsys.readouterr()
    assert main([base, cur, "--rule", "final_loss=0.1"]) == 2
    assert "expected METRIC:KEY=VALUE" in capsys.readouterr().err
    assert main([base, cur, "--ignore", "speed"]) == 2


def test_python_dash_m_runs_the_gate(files):
    """`python -m gradeff.gate.compare BASELINE CURRENT` exits with the gate's code."""
    base, cur = files([record()], [record(status="oom")])
    done = subprocess.run([sys.executable, "-m", "gradeff.gate.compare", base, cur], capture_output=True, text=True)
    assert done.returncode == 1 and "ok → oom" in done.stdout


SLEEP_PER_FORWARD_S = 0.1  # × 24 forward passes per tiny llm epoch: +2.4 s on ≈ 0.5 s epochs


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test: on a small shared CPU, spinning OpenMP threads make a
    tiny epoch swing from 0.08 s to 3 s whenever a neighbour runs; one thread stays near 0.08 s."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.serial
@pytest.mark.usefixtures("one_torch_thread")
def test_real_injected_slowdown_is_flagged(tmp_path, monkeypatch, capsys):
    """A real tiny cell rerun unchanged keeps its exact losses; a sleep in forward is a time_per_epoch regression."""
    cell, config = Cell("llm", "sgd", "standard"), RunConfig(profile="tiny", seed=0, epochs=3, device="cpu")
    base = write(tmp_path / "base.jsonl", run_cell(cell, config))
    rerun = write(tmp_path / "rerun.jsonl", run_cell(cell, config))

    # Seeded CPU runs are deterministic: the loss rows match to the last digit shown.
    assert main([base, rerun, "--all", "--ignore", "time_per_epoch"]) == 0
    rows = capsys.readouterr().out
    assert re.search(r"final_loss\s+(\S+)\s+\1\s+\+0%\s+ok", rows) and re.search(r"mean_loss\s+(\S+)\s+\1\s+", rows)
    # Time under the default rule: the verdict is not asserted, as other processes share this
    # machine's CPUs, but the gate must come to one (0 or 1), not fail on its input.
    assert main([base, rerun]) in (0, 1)
    unchanged = capsys.readouterr().out

    original = gradeff.cell.build.build_model

    def slow_build(*args, **kwargs):
        model = original(*args, **kwargs)
        model.register_forward_pre_hook(lambda module, inputs: time.sleep(SLEEP_PER_FORWARD_S))
        return model

    monkeypatch.setattr(gradeff.cell.build, "build_model", slow_build)
    slow = write(tmp_path / "slow.jsonl", run_cell(cell, config))
    assert main([base, slow]) == 1
    gate = capsys.readouterr().out
    assert re.search(r"llm-sgd-standard\s+time_per_epoch\s.*\sregression", gate)
    assert "1 regression in 1 cell" in gate  # the sleep changes no number: losses stay identical
    print(f"--- unchanged rerun, default rules ---\n{unchanged}--- injected slowdown ---\n{gate}")
