"""Setup (a Table 1 analogue): per arm its sizes, parameters, training budget, learning rates and seeds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core.formatting import format_count, format_lr
from gatedv_stats.io.runrecords import record_arm
from gatedv_stats.pairing.selection import arm_order, lr_of
from gatedv_stats.reporting.cells import MISSING
from gatedv_stats.reporting.model import RowGroup, Section, Table, row

COLUMNS = (  # header, alignment
    ("Arm", "l"), ("Knobs", "l"), ("Size", "l"), ("Layers / width", "l"), ("Heads / head width", "l"),
    ("FFN hidden width", "r"), ("Vocabulary", "r"), ("Parameters", "r"), ("Updates", "r"), ("Warmup", "r"),
    ("Batch", "r"), ("Target exposures", "r"), ("Peak LR", "l"), ("Seeds", "l"),
)


def setup_section(analysis: ExperimentAnalysis) -> Section:
    """One row per arm from run.json records and loss-file metadata; columns no input records are left out."""
    by_arm, configs = _collect(analysis)
    rows = []
    for arm in arm_order(by_arm, analysis.reference):
        entry, config = by_arm[arm], configs.get(arm) or {}
        rows.append(row(
            arm,
            *(_joined(entry[key], str) for key in ("knobs", "size")),
            *(_config_text(config, *keys) for keys in (("n_layers", "d_model"), ("n_heads", "head_dim"), ("d_ff",),
                                                       ("vocab_size",))),
            *(_joined(entry[key], format_count) for key in ("parameters", "updates", "warmup", "batch", "exposures")),
            _joined(entry["lr"], format_lr),
            _seed_text(entry["seed"]),
        ))
    keep = [i for i in range(len(COLUMNS)) if i == 0 or any(cells[i].text != MISSING for cells in rows)]
    table = Table("setup", "Setup: models, training budget, learning rates and seeds per arm.",
                  tuple(COLUMNS[i][0] for i in keep), "".join(COLUMNS[i][1] for i in keep),
                  (RowGroup(None, tuple(tuple(cells[i] for i in keep) for cells in rows)),),
                  ("Knobs: what a variant changes from its size's baseline model (docs/method.md §2). Sizes, "
                   "parameters and the training budget come from run.json files or the loss files' config "
                   "metadata; updates also from the evaluated checkpoints' step; target exposures = updates × batch × "
                   "context; '—' marks what the inputs do not record.",))
    return Section("setup", "Setup", tables=(table,))


def _collect(analysis: ExperimentAnalysis) -> tuple[dict, dict]:
    """Per arm the sets of recorded values (size, lr, seed, ...; None for a value a record lacks, left out where
    shown) and the first model config seen."""
    by_arm: dict = defaultdict(lambda: defaultdict(set))
    configs: dict = {}
    for info in analysis.inputs.run_infos:  # trainer run directories: the training record
        arm = record_arm(info)
        if arm is None:
            continue
        config = info.get("model_config") or info.get("config") or {}
        configs.setdefault(arm, config)
        entry = by_arm[arm]
        for key in ("size", "lr", "seed", "updates", "warmup", "parameters"):
            entry[key].add(info.get(key))
        entry["knobs"].add(_knobs_text(info.get("knobs")))
        batch = info.get("batch_size")
        entry["batch"].add(batch)
        if batch and info.get("updates") and config.get("seq_len"):
            entry["exposures"].add(int(info["updates"]) * int(batch) * int(config["seq_len"]))
    for run in analysis.inputs.runs:  # loss files: what was evaluated
        if run.meta.get("config"):
            configs.setdefault(run.arm, run.meta["config"])
        entry = by_arm[run.arm]
        entry["lr"].add(lr_of(run))
        entry["seed"].add(run.seed)
        entry["updates"].add(run.meta.get("step"))
        entry["knobs"].add(_knobs_text(run.meta.get("knobs")))
    return by_arm, configs


def _knobs_text(knobs) -> str | None:
    """What a variant changes from its size's baseline, "key_act=silu, qk_norm=True"; None when unrecorded."""
    if not isinstance(knobs, dict) or not knobs:
        return None
    return ", ".join(f"{name}={value}" for name, value in sorted(knobs.items()))


def _config_text(config: dict, *keys: str) -> str:
    """The model config's values of `keys` joined by " / " ("12 / 384"), '—' for one not recorded (alone when none
    is)."""
    texts = []
    for key in keys:
        value = config.get(key)
        if key == "head_dim" and value is None and config.get("d_model") and config.get("n_heads"):
            value = config["d_model"] // config["n_heads"]
        texts.append(MISSING if value is None else format_count(value) if isinstance(value, (int, float)) else
                     str(value))
    return MISSING if set(texts) == {MISSING} else " / ".join(texts)


def _joined(values: set, fmt: Callable) -> str:
    recorded = sorted(values - {None})
    return ", ".join(map(fmt, recorded)) if recorded else MISSING


def _seed_text(seeds: set) -> str:
    ordered = sorted(int(seed) for seed in seeds if seed is not None)
    if len(ordered) > 2 and ordered[-1] - ordered[0] == len(ordered) - 1:  # distinct, so consecutive
        return f"{len(ordered)} ({ordered[0]}–{ordered[-1]})"
    return f"{len(ordered)} ({', '.join(map(str, ordered))})"
