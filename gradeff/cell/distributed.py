"""Sharded cells: a cell's W processes, their process group, and their records made into one.

A cell whose strategy shards (``fsdp``) is trained by ``--gradeff-world-size`` processes started
here — spawned, so each imports torch afresh, with the session's registered entries sent along as
to an isolated cell — joined into one ``torch.distributed`` process group: gloo on CPU, NCCL on
GPUs (rank r on the r-th GPU from the cell's own). Each process runs the ordinary cell path with
its rank set, where :mod:`gradeff.axes.strategies.sharded` shards its model and slices its data, and
sends back its record. Rank 0's record is the cell's, with every rank's memory breakdown under
``meters.memory.ranks``. A rank that ends badly (diverged, oom, error, interrupted, or dead) gives
the cell its status; the others, waiting in a collective that will never complete, are stopped
after a short grace instead of waiting out the process group's timeout.
"""

from __future__ import annotations

import json
import multiprocessing
import queue as queues
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from gradeff.cell import stop
from gradeff.cell.devices import gpu_count, process_group_backend, resolve_device
from gradeff.records.results import CellRecord, Summary

if TYPE_CHECKING:
    import pytest

    from gradeff.cell.config import RunConfig
    from gradeff.studies.grid import Cell

__all__ = ["DEFAULT_WORLD_SIZE", "add_options", "merge_ranks", "read_world_size", "run_sharded",
           "validate_world_size"]

DEFAULT_WORLD_SIZE = 2
# How long the other ranks get to end by themselves once one has ended badly, before they are stopped.
_GRACE_SECONDS = 15.0
# A collective that waits longer than this fails instead of hanging (a rank lost outside this module's sight).
_COLLECTIVE_TIMEOUT = timedelta(minutes=10)
_SILENT = "process exited with code"


def validate_world_size(value: object) -> int:
    """``value`` as a world size (an integer >= 1).

    Raises:
        ValueError: anything else, saying what is valid.
    """
    try:
        size = int(str(value).strip())
    except ValueError:
        raise ValueError(f"expected a number of processes, an integer >= 1, got {value!r}") from None
    if size < 1:
        raise ValueError(f"must be an integer >= 1 (processes a sharded cell trains across), got {size}")
    return size


def add_options(parser: pytest.Parser) -> None:
    """``--gradeff-world-size``."""
    group = parser.getgroup("gradeff")
    group.addoption("--gradeff-world-size", default=str(DEFAULT_WORLD_SIZE), metavar="W",
                    help=f"processes a sharded strategy's cell (--gradeff-strategies fsdp) trains across, an "
                         f"integer >= 1 (default {DEFAULT_WORLD_SIZE}); gloo on CPU, one GPU per process with NCCL")


def read_world_size(config: pytest.Config) -> int:
    """``--gradeff-world-size``, checked before any cell (``pytest.UsageError``)."""
    import pytest  # noqa: PLC0415 - pytest, 0.4 s: a spawned rank imports this module

    text = config.getoption("gradeff_world_size")
    try:
        return validate_world_size(text)
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-world-size {text}: {exc}") from None


def _rank_device(device: str, rank: int) -> str:
    resolved = resolve_device(device)
    if resolved.type != "cuda":
        return str(resolved)
    return f"cuda:{((resolved.index or 0) + rank) % gpu_count()}"


def run_sharded(cell: Cell, config: RunConfig, run: Callable[[Cell, RunConfig], CellRecord]) -> CellRecord:
    """Train ``cell`` across ``config.world_size`` processes and return its one record (see the module's text).

    ``run``: what each rank runs once it has joined the group, the cell's ordinary path
    (:func:`gradeff.cell.run.run_cell`, a module-level function: the spawned ranks import it by name).
    """
    import torch

    # pytest (studies.extend): a spawned process imports this
    from gradeff.studies.extend import dump_registered  # noqa: PLC0415

    size, backend, started = config.world_size, process_group_backend(config.device), time.time()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    folder = tempfile.mkdtemp(prefix="gradeff-pg-")
    init_method = (Path(folder) / "store").as_uri()
    # The cores this process may use are shared between the ranks (one intra-op pool each).
    threads = max(1, torch.get_num_threads() // size)
    registered = dump_registered()
    ranks = [context.Process(target=_rank_main, daemon=True, name=f"gradeff-rank{rank}",
                             args=(rank, cell, replace(config, rank=rank, device=_rank_device(config.device, rank),
                                                       isolate=False, tune=None, process="isolated",
                                                       threads=threads),
                                   backend, init_method, threads, registered, results, run))
             for rank in range(size)]
    interrupted = False
    try:
        for process in ranks:
            process.start()
        outcomes = _gather(ranks, results)
    except KeyboardInterrupt:
        outcomes, interrupted = {}, True
    finally:
        for process in ranks:
            if process.is_alive():
                process.terminate()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        shutil.rmtree(folder, ignore_errors=True)
    record = merge_ranks(cell, config, outcomes, backend=backend, started=started)
    return replace(record, status="interrupted", detail=stop.interruption()) if interrupted else record


def _rank_main(rank: int, cell: Cell, config: RunConfig, backend: str, init_method: str, threads: int,
               registered: bytes, results, run: Callable[[Cell, RunConfig], CellRecord]) -> None:
    """One rank: join the group, run the cell's ordinary path, send back its record's JSON line (or why not)."""
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        if registered:
            # pytest (studies.extend): a spawned process imports this
            from gradeff.studies.extend import load_registered  # noqa: PLC0415

            load_registered(registered)
        device = torch.device(config.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL's communicator and every default-device call: this rank's GPU
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=config.world_size,
                                timeout=_COLLECTIVE_TIMEOUT, device_id=device if device.type == "cuda" else None)
        try:
            line = run(cell, config).to_json()
        finally:
            dist.destroy_process_group()
        results.put((rank, line))
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the parent must hear of it
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({frame.filename}:{frame.lineno})" if frame else ""
        results.put((rank, f"{type(exc).__name__}: {exc}{where}"))


def _gather(ranks: list, results) -> dict[int, str]:
    """Each rank's JSON line or failure text, until all have answered or one failed and the grace ran out."""
    outcomes: dict[int, str] = {}
    failed_at = None
    while len(outcomes) < len(ranks):
        try:
            rank, line = results.get(timeout=1.0)
            outcomes[rank] = line
        except queues.Empty:
            for rank, process in enumerate(ranks):
                # A rank gone without a word (killed, crashed in C++): its last message would have arrived by now.
                if rank not in outcomes and process.exitcode is not None:
                    outcomes[rank] = f"{_SILENT} {process.exitcode} and sent no record"
        if failed_at is None and any(not _ok(line) for line in outcomes.values()):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > _GRACE_SECONDS:
            break
    return outcomes


def _ok(line: str) -> bool:
    return line.startswith("{") and json.loads(line).get("status") == "ok"


def merge_ranks(cell: Cell, config: RunConfig, outcomes: dict[int, str], *, backend: str,
                started: float) -> CellRecord:
    """The cell's one record from its ranks' JSON lines (or failure texts), by rank.

    Rank 0's record is the cell's when every rank ended ``ok``; otherwise one rank that ended badly names the
    status (``rank r: ...`` in the detail): of the ranks with a record of their own, the first to end (a failing
    rank closes its connections, and the others' failures follow from it); else a rank's own failure text; else
    a rank that died without a word or was stopped.
    """
    records = {rank: CellRecord.from_json(line) for rank, line in outcomes.items() if line.startswith("{")}
    size = config.world_size
    bad = [rank for rank in range(size) if rank not in records or records[rank].status != "ok"]

    def telling(rank: int) -> int:
        # A rank's own record first, then its own failure text, then one that died silently or was stopped.
        if rank in records:
            return 0
        return 1 if rank in outcomes and not outcomes[rank].startswith(_SILENT) else 2

    # Among records, the first to end: a rank that fails closes its connections, and the others then fail too.
    culprit = min(bad, key=lambda rank: (telling(rank), records[rank].finished_at if rank in records else 0, rank),
                  default=None)
    base = records.get(culprit if culprit in records else 0) or next(iter(records.values()), None)
    if base is None:
        base = _bare_record(cell, config, started)
    if culprit is not None:
        why = records[culprit].detail if culprit in records else outcomes.get(culprit, "stopped: another rank failed")
        status = records[culprit].status if culprit in records else "error"
        base = replace(base, status=status, detail=f"rank {culprit}: {why}")
    meters = dict(base.meters)
    if "memory" in meters:
        meters["memory"] = dict(meters["memory"]) | {
            "ranks": [records[rank].meters.get("memory") if rank in records else None for rank in range(size)]}
    plan = base.plan | {"world_size": size, "backend": backend,
                        "devices": [records[rank].device if rank in records else None for rank in range(size)]}
    return replace(base, meters=meters, plan=plan, hparams=base.hparams | {"world_size": size},
                   started_at=started, finished_at=time.time())


def _bare_record(cell: Cell, config: RunConfig, started: float) -> CellRecord:
    """A record with no training in it: no rank sent one back (its status and detail are set by the caller)."""
    from gradeff.cell.record import cell_record  # noqa: PLC0415 - torch, 2.3 s: the plugin imports this module

    return cell_record(cell, config, device=str(resolve_device(config.device)), started=started, finished=time.time(),
                       process="sharded", status="error", summary=Summary.of([], time.time() - started),
                       hparams={"precision": config.precision})
