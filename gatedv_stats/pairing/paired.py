"""The one paired structure: two arms, S paired seeds × N units, and what a difference on them means.

The units are documents (loss sums weighted by their targets or bytes: the perplexity scale) or the items of one
downstream task (scores of one metric, weighted equally: the metric's scale). Both kinds are paired by the same
steps here — runs matched by training seed, units matched by id, run-level provenance compared field by field — and
every comparison, verdict, adjustment and plan above takes this one type (docs/statistics.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.io.runfiles import Run
from gatedv_stats.stats.scale import PERPLEXITY, Scale

_SHOWN = 5  # how many offending ids an error message lists


@dataclass(frozen=True)
class Paired:
    """Two arms' values on the same units, row s of each array = seed `seeds[s]`: what every comparison, plan,
    floor, sequential look and ledger entry takes, on the pair's scale.

    Parameters
    ----------
    baseline_arm, variant_arm : str
        The arms compared (variant − baseline).
    seeds : numpy.ndarray
        (S,) the paired training seeds, sorted.
    doc_ids : numpy.ndarray
        (N,) the units' ids (documents or items), sorted.
    n_units : numpy.ndarray
        (N,) each unit's weight: a document's targets (or UTF-8 bytes, per byte); 1 per item or scored document.
    baseline, variant : numpy.ndarray
        (S, N) loss sums, or scores of one metric.
    doc_columns : pandas.DataFrame
        N rows aligned with `doc_ids`: domain and n_bytes, or an item's groups (subtask, ...).
    sources : dict
        {"baseline": [source per seed], "variant": [...]}, with "baseline_sha256" and "variant_sha256".
    dropped_seeds : tuple
        Seeds in one arm only, dropped by `allow_unpaired`.
    mismatches : tuple of str
        Provenance differences accepted through `allow_mismatch`, as notes.
    unit : str
        What `n_units` counts: "token" or "word" (the files' targets), "byte", "item" or "document".
    eval_set : str or None
        The evaluation set every run was scored on.
    scale : Scale
        How a difference is read (`gatedv_stats.stats.scale`).
    task : str or None
        The downstream task of item scores.
    setup : dict
        What every run records alike: evaluation set, tokenizer, size, ...

    Examples
    --------
    >>> paired = gv.pair(example_study(tmp_dir), baseline_arm="baseline", variant_arm="gatedv")
    >>> paired.n_pairs, paired.unit, paired.metric
    (3, 'token', 'loss')
    """

    baseline_arm: str
    variant_arm: str
    seeds: np.ndarray  # (S,) int64, sorted
    doc_ids: np.ndarray  # (N,) object, sorted: the units' ids (documents or items)
    n_units: np.ndarray  # (N,) int64 weights: each document's targets (or UTF-8 bytes, per byte); 1 per item
    baseline: np.ndarray  # (S, N) float64: loss sums, or item scores
    variant: np.ndarray  # (S, N) float64
    doc_columns: pd.DataFrame  # N rows aligned with doc_ids: domain / n_bytes, or an item's groups (subtask, ...)
    sources: dict  # {"baseline": [source per seed], "variant": [...], "baseline_sha256": ..., "variant_sha256": ...}
    dropped_seeds: tuple = field(default=())  # seeds in one arm only, dropped by allow_unpaired
    mismatches: tuple[str, ...] = field(default=())  # provenance differences accepted through allow_mismatch
    unit: str = "token"  # what `n_units` counts: "token" or "word" (the files' targets), "byte", or "item"
    eval_set: str | None = None  # the evaluation set every run was scored on (the runs agree)
    scale: Scale = PERPLEXITY  # how a difference is read
    task: str | None = None  # the downstream task of item scores
    setup: dict = field(default_factory=dict)  # what every run records alike: evaluation set, tokenizer, size, …

    @property
    def n_docs(self) -> int:
        """The units N (documents or items)."""
        return int(self.n_units.shape[0])

    @property
    def n_pairs(self) -> int:
        """The seed pairs S."""
        return int(self.seeds.shape[0])

    @property
    def metric(self) -> str:
        """What the values are: "loss" (loss sums), or a task's metric ("acc")."""
        return self.scale.metric

    @property
    def higher_is_better(self) -> bool:
        """Whether a higher value favours an arm (False for a loss)."""
        return self.scale.higher_is_better

    @property
    def proportion(self) -> bool:
        """Every score lies in [0, 1] (accuracy and the like): differences read as points."""
        return self.scale.proportion

    @property
    def noun(self) -> str:
        """What a unit is called: "document" or "item"."""
        return self.scale.noun

    @property
    def notes(self) -> tuple[str, ...]:
        """What the pairing dropped or accepted, for the output's warnings."""
        prefix = "" if self.task is None else f"{self.task}: "
        dropped = ((f"{prefix}dropped unpaired seeds {', '.join(map(str, self.dropped_seeds))}",)
                   if self.dropped_seeds else ())
        return dropped + self.mismatches

    def differences(self) -> np.ndarray:
        """(S, N) per-unit differences variant − baseline: per target (or byte) of a document, or an item's."""
        return (self.variant - self.baseline) / self.n_units

    def labels(self, cluster: str | None) -> np.ndarray | None:
        """The per-unit values of the `cluster` column (None without clustering)."""
        if cluster is None:
            return None
        if cluster not in self.doc_columns:
            available = ", ".join(self.doc_columns.columns) or "none"
            where = f"the {self.scale.files}" if self.task is None else f"task {self.task}"
            raise ParameterError("cluster", f"no {self.noun} column {cluster!r} in {where} (available: {available})")
        return self.doc_columns[cluster].astype(str).to_numpy()


PairedLosses = Paired  # the name of the loss-file pairing's result, kept for scripts that use it


def runs_by_seed(runs: Sequence[Run], arm: str, *, prefix: str = "", hint: str = "") -> dict[int, Run]:
    """The runs (all of `arm`) by training seed; a seed twice is an error naming both sources (`hint` says what to
    do)."""
    by_seed: dict[int, Run] = {}
    for run in runs:
        if run.seed in by_seed:
            raise InputError(f"{prefix}arm {arm} seed {run.seed} appears twice: {by_seed[run.seed].source} and "
                             f"{run.source}{hint}")
        by_seed[run.seed] = run
    return by_seed


def paired_seeds(baseline: Mapping[int, Run], variant: Mapping[int, Run], baseline_arm: str, variant_arm: str, *,
                 allow_unpaired: bool, prefix: str = "") -> tuple[list[int], tuple[int, ...], list[Run]]:
    """The seeds both arms have, those only one has, and the paired runs (the baseline's seed by seed, then the
    variant's); seeds of one arm only are an error unless `allow_unpaired`."""
    only_baseline = sorted(set(baseline) - set(variant))
    only_variant = sorted(set(variant) - set(baseline))
    seeds = sorted(set(baseline) & set(variant))
    if not seeds:
        raise InputError(f"{prefix}no training seed is shared by {baseline_arm} ({', '.join(map(str, only_baseline))}) "
                         f"and {variant_arm} ({', '.join(map(str, only_variant))}): runs pair by the seed recorded in "
                         "their files (evaluate --hf and import take it as --seed)")
    unpaired = tuple(only_baseline + only_variant)
    if unpaired and not allow_unpaired:
        parts = [f"{arm} {', '.join(map(str, arm_seeds))}" for arm, arm_seeds
                 in ((baseline_arm, only_baseline), (variant_arm, only_variant)) if arm_seeds]
        raise ParameterError("allow_unpaired", f"{prefix}seeds present in one arm only: {'; '.join(parts)} "
                             "({allow_unpaired} drops them)", leading=False)
    return seeds, unpaired, [baseline[seed] for seed in seeds] + [variant[seed] for seed in seeds]


def unit_rows(ids: Sequence[pd.Series], sources: Sequence[str], noun: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The first run's unit ids sorted and, for every run, the rows that hold them in that order; an error naming
    the ids when a run holds other units."""
    first = ids[0].astype(str)
    order = first.argsort(kind="stable").to_numpy()
    doc_ids = first.to_numpy(dtype=object)[order]
    rows = []
    for run_ids, source in zip(ids, sources):
        if run_ids.equals(ids[0]):  # the same units in the same order: the usual case
            rows.append(order)
            continue
        index = pd.Index(run_ids.astype(str).to_numpy(dtype=object))
        found = index.get_indexer(doc_ids) if len(index) == len(doc_ids) and index.is_unique else None
        if found is None or np.any(found < 0):
            ours, theirs = set(doc_ids), set(index)
            parts = [f"{len(missing)} doc_ids missing from {where} (first: {', '.join(sorted(missing)[:_SHOWN])})"
                     for where, missing in ((sources[0], theirs - ours), (source, ours - theirs)) if missing]
            raise InputError(f"{noun}s differ between paired runs {sources[0]} and {source}: "
                             f"{'; '.join(parts) or 'repeated doc_ids'}")
        rows.append(found)
    return doc_ids, rows


def provenance_notes(runs: Sequence[Run], scale: Scale, unit: str, allow_mismatch: Sequence[str]) -> tuple[str, ...]:
    """Refuse to pair runs whose recorded provenance (`scale.provenance_of(unit)`) differs, compared only between
    runs that record it; a field in `allow_mismatch` becomes a note instead, so the output can say what was compared
    anyway (the scale may refuse with a more specific error first)."""
    notes = []
    for name in scale.provenance_of(unit):
        carrying = [(run, value) for run in runs if (value := scale.setup_value(run.meta, name)) not in (None, "")]
        other = next(((run, value) for run, value in carrying[1:] if str(value) != str(carrying[0][1])), None)
        if other is None:
            continue
        (first, recorded), (differing, value) = carrying[0], other
        text = f"{name} differs: {first.source} has {_shown(recorded)}, {differing.source} has {_shown(value)}"
        if name in allow_mismatch:
            notes.append(f"compared although {text}")
            continue
        scale.refuse(name, [(run.arm, value) for run, value in carrying], text)
        raise ParameterError("allow_mismatch", f"{text}; they were not evaluated alike ({{allow_mismatch}} {name} "
                             "compares them anyway)", leading=False)
    return tuple(notes) + scale.unit_notes([run.meta for run in runs], unit)


def shared_setup(runs: Sequence[Run], scale: Scale) -> dict:
    """The setup fields (`scale.setup`) every run records with one value (a field some run lacks or runs differ on
    is left out): what a noise floor measured elsewhere must match."""
    setup = {}
    for name in scale.setup:
        values = [scale.setup_value(run.meta, name) for run in runs]
        if values[0] not in (None, "", {}) and all(value == values[0] for value in values):
            setup[name] = values[0]
    return setup


# The fields of a noise floor's setup that a study is compared on (`analysis.noise_floor`): `allow_mismatch` may name
# them beside the pairing's own.
FLOOR_FIELDS = ("metric", "unit", "size", "step", "eval_set", "eval_set_sha256", "tokenizer_sha256", "scoring", "task",
                "n_shot", "task_config_sha256")


def check_mismatch_fields(allow_mismatch: Sequence[str], fields: Sequence[str]) -> None:
    """`allow_mismatch` may name only fields this kind of pairing compares (or a noise floor's)."""
    fields = tuple(dict.fromkeys((*fields, *FLOOR_FIELDS)))
    unknown = sorted(set(allow_mismatch) - set(fields))
    if unknown:
        raise ParameterError("allow_mismatch", f"{', '.join(unknown)} is not one of {', '.join(fields)}")


def check_distinct_arms(baseline_arm: str | None, variant_arm: str | None) -> None:
    if baseline_arm is not None and baseline_arm == variant_arm:
        raise ParameterError("baseline_arm", f"{{baseline_arm}} and {{variant_arm}} both name {baseline_arm!r}: an arm "
                             "compared with itself has no difference to find; name two different arms",
                             ("variant_arm",), leading=False)


def _shown(value: object) -> str:
    text = str(value)
    return repr(text[:12] + "…") if len(text) == 64 else repr(text)  # a SHA-256 by its first 12 digits
