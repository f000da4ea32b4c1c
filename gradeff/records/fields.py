"""The names of a record's fields: what each section of a :class:`~gradeff.records.results.CellRecord` and each meter
under its ``meters`` holds, the one list writers are held to and readers may ask for (a name outside it fails at once,
:class:`UnknownRecordField`).
"""

from __future__ import annotations

__all__ = ["METER_FIELDS", "SECTION_FIELDS", "SELF_TUNED", "UnknownRecordField"]


# What a record's ``meters`` holds, meter by meter (a cell's, and each epoch's ram, gpu, energy and cost): the fields
# of the records the meters yield (gradeff/meters/: RamRecord, GpuRecord, EnergyRecord, MemoryBreakdown,
# ComputeRecord; conjugate gradient's counters, gradeff.axes.optim.cg.cg_stats), what gradeff.cell.metering.aggregate
# adds for a cell (energy's grams of CO2, the metering cost's share of the epochs' time), why the FLOPs were not
# counted, and a sharded cell's per-rank breakdowns. Named here, not read off those classes, because reading records
# never imports torch; tests/records/test_record_fields.py holds the two to each other. A reader naming a field outside
# this table fails at once (UnknownRecordField) rather than reading "not measured" in every table.
METER_FIELDS: dict[str, frozenset[str]] = {
    "ram": frozenset({"peak_rss_bytes", "peak_source", "mean_rss_bytes", "peak_system_percent", "samples",
                      "duration_s"}),
    "gpu": frozenset({"available", "device_name", "util_mean_percent", "util_max_percent", "mem_used_peak_bytes",
                      "power_mean_w", "alloc_peak_bytes", "reserved_peak_bytes", "samples", "short_window",
                      "duration_s"}),
    "energy": frozenset({"joules", "source", "duration_s", "co2_grams"}),
    "cost": frozenset({"reads_s", "sampler_cpu_s", "epoch_s", "fraction"}),
    "memory": frozenset({"parameter_bytes", "trainable_parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
                         "activation_bytes", "peak_bytes", "peak_by_device", "ranks"}),
    "compute": frozenset({"flops_per_sample", "model_flops", "seconds", "achieved_flops_per_s", "peak_flops_per_s",
                          "peak_source", "mfu", "not_measured"}),
    "cg": frozenset({"steps", "iterations", "restarts", "restart_rate", "restart_reasons", "func_evals",
                     "line_search_evals"}),
}


# What a record's other sections hold, section by section. Writers: gradeff/cell/record.py (task, parameters,
# weights: StartingWeights.to_record, environment: gradeff.cell.environment.environment and the process, hparams:
# HParams's fields, the method's settings and how the rate was chosen), the runner (plan: what a strategy did,
# inference: InferenceCost and the NetScore family, tuning: the rate search, evaluation: the held-out passes' cost)
# and a sharded cell's coordinator (plan and hparams: its world). A strategy registered by a project may write plan
# fields of its own; the readers here ask only for these. tests/records/test_record_fields.py holds the table to the
# writers.
# What ``hparams.protocol`` says for a cell of the tuned protocol that had no row of the table and searched its own
# rate (gradeff.cell.self_tune): never ``tuned``, which names the committed table's rates.
SELF_TUNED = "self-tuned"

SECTION_FIELDS: dict[str, frozenset[str]] = {
    # trivial_baselines: name → {"metric": "accuracy" | "loss", "value", "what", ...} on the test split
    # (gradeff.axes.data.trivial); absent from records written before it (read as None, never as a 0).
    "task": frozenset({"key", "name", "train_samples", "loss_floor", "heldout_samples", "heldout_loss_floor",
                       "bayes_accuracy", "sanity_accuracy", "trivial_baselines", "info"}),
    "parameters": frozenset({"total", "trainable"}),
    "weights": frozenset({"source", "path", "pretraining", "format", "checkpoint", "stand_in", "real"}),
    "plan": frozenset({
        # checkpointing and offload
        "checkpointed_layers", "layers", "offload", "offloaded_bytes_per_step",
        # a budget: its kind, the step's profile, the plan chosen (BudgetPlan.to_record) or the compiler's fraction
        "kind", "budget_fraction", "profile", "budget_bytes", "margin", "target_bytes", "checkpointed",
        "predicted_peak_bytes", "unconstrained_peak_bytes", "fits", "prefix_peak_bytes", "measured_frugal_peak_bytes",
        "activation_memory_budget", "compile_backend", "compile_seconds",
        # a sharded cell
        "sharded_blocks", "row_bytes", "world_size", "backend", "devices"}),
    "inference": frozenset({"parameters", "macs_per_image", "macs_by_op", "grad_mode", "latency_s", "latency_p90_s",
                            "latency_samples", "batch_size", "throughput_images", "throughput_seconds",
                            "images_per_s", "peak_bytes", "peak_by_device", "allocator_peak_bytes", "energy_source",
                            "energy_joules", "energy_per_image_j", "mean_power_w", "energy_estimated", "scores"}),
    "tuning": frozenset({"param", "tuning_free", "trials", "seconds", "joules", "chosen", "reference",
                         "reference_source", "at_edge", "picked_on", "budget",
                         # a self-tuned cell's (gradeff.cell.self_tune.SelfTuned.tuning)
                         "protocol", "fingerprint", "cached", "searched_at", "seed", "search_seconds",
                         "search_joules"}),
    "evaluation": frozenset({"every_steps", "points", "test_seconds", "validation_seconds", "fraction"}),
    "hparams": frozenset({"lr", "batch_size", "accum_steps", "epochs", "train_samples", "heldout_samples",
                          "validation_samples", "eval_every", "warmup_ratio", "seq_len", "num_states", "num_classes",
                          "image_size", "caption_len", "method", "precision", "protocol", "lr_source",
                          "optimizer_kernel", "world_size"}),
    # how many seeds the run spent and why this one ran (gradeff.analysis.sequential.SeedPlan.to_record)
    "seeding": frozenset({"plan", "first", "most", "level", "why"}),
    "experiment": frozenset({"fingerprint", "inputs", "error"}),
    "environment": frozenset({"python", "torch", "transformers", "cuda", "platform", "cpu", "cpu_id", "cpu_count",
                              "cpu_capability", "kernel_env", "device", "device_name", "gpu_driver", "gpu_index",
                              "gpu_uuid", "torch_threads", "numerics_probe", "process", "project_commit"}),
}


class UnknownRecordField(LookupError):
    """A reader asked for a section, meter or field no writer fills (a typo, a renamed field)."""
