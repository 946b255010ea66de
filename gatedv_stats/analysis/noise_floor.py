"""A setup's noise floor measured from runs (A/A runs of one configuration, or earlier paired studies) and checked
against a study before its seed variance is used (docs/noise-floor.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.paired import Paired, shared_setup
from gatedv_stats.stats.noise_floor import MIN_FLOOR_DF, FloorEstimate, SeedVariance, aa_floor, pooled_floor
from gatedv_stats.stats.scale import PERPLEXITY, MetricScale, Scale


@dataclass(frozen=True)
class NoiseFloor:
    """A setup's seed variance τ² of a paired comparison's D, with what it is valid for and where it came from."""

    estimate: FloorEstimate
    metric: str  # "loss", or a task's metric
    unit: str  # what D is per: token, word, byte, item
    setup: dict  # what the runs record alike: evaluation set and tokenizer hashes, size, updates, task, …
    arm: str | None  # the A/A runs' configuration (None for paired studies)
    seeds: tuple[int, ...]
    inputs: tuple[dict, ...]  # {"source", "sha256"} per file read
    path: str | None = None  # the file it was read from
    sha256: str | None = None  # that file's recorded content hash

    @property
    def seed(self) -> SeedVariance:
        return self.estimate.seed

    @property
    def scale(self) -> Scale:
        """The scale the floor's D is read on (its effects planned on)."""
        return PERPLEXITY if self.metric == PERPLEXITY.metric else MetricScale(metric=self.metric)

    def summary(self) -> str:
        """What the floor is, in a few lines."""
        estimate = self.estimate
        per = f"{self.metric} per {self.unit}" if self.metric == "loss" else self.metric
        lines = [f"noise floor of {self.arm or 'the setup'} ({per}): τ² = {estimate.seed.variance:.4g} (SD of a "
                 f"paired comparison's D over seeds {estimate.seed.variance ** 0.5:.4g}), {estimate.seed.df:g} df, "
                 f"from {estimate.n_sources} {estimate.source}"]
        if self.seeds:
            lines.append(f"  seeds {', '.join(map(str, self.seeds))}")
        if estimate.homogeneity_p is not None:
            lines.append(f"  the studies' seed spreads are {'not ' if estimate.homogeneity_p < 0.05 else ''}"
                         f"consistent (Bartlett p = {estimate.homogeneity_p:.3g})")
        setup = ", ".join(f"{key} {_shown(value)}" for key, value in self.setup.items())
        lines.append(f"  valid for: {setup or 'a setup the files do not describe'}")
        if estimate.seed.df < MIN_FLOOR_DF:
            lines.append(f"  note: {estimate.seed.df:g} df is fewer than {MIN_FLOOR_DF}: verdicts from this floor can "
                         "be wrong more often than their level says; measure it from more runs")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The floor file's content (less its format and hash)."""
        return {**self.estimate.to_dict(), "metric": self.metric, "unit": self.unit, "setup": self.setup,
                "arm": self.arm, "seeds": list(self.seeds), "inputs": list(self.inputs), "summary": self.summary()}

    @classmethod
    def from_dict(cls, content: dict) -> NoiseFloor:
        """A floor as `io.floorfiles.read_floor_file` returns it."""
        estimate = FloorEstimate(SeedVariance(float(content["seed_variance"]), float(content["df"])),
                                 str(content["source"]), int(content.get("n_sources", 0)),
                                 tuple(content.get("values", ())), content.get("homogeneity_p"))
        return cls(estimate, str(content["metric"]), str(content["unit"]), dict(content["setup"]),
                   content.get("arm"), tuple(content.get("seeds", ())), tuple(content.get("inputs", ())),
                   content.get("path"), content.get("sha256"))


def floor_from_runs(runs: Sequence[Run], scale: Scale = PERPLEXITY, *, unit: str = "auto") -> NoiseFloor:
    """The floor from A/A runs: k ≥ 3 runs of one configuration with distinct training seeds (loss files, or the
    scores of one task on the scale's metric)."""
    if not runs:
        raise InputError("noise floor: no runs given")
    arms = sorted({run.arm for run in runs})
    if len(arms) > 1:
        raise ParameterError("studies", f"noise floor: the runs hold several configurations ({', '.join(arms)}); A/A "
                             "runs are runs of one configuration that differ only by training seed ({studies} takes "
                             "earlier paired studies instead)", leading=False)
    reruns = sorted(seed for seed, count in Counter(run.seed for run in runs).items() if count > 1)
    if reruns:
        raise InputError(f"noise floor: seed {', '.join(map(str, reruns))} appears more than once; reruns of one seed "
                         "measure only kernel nondeterminism, not seed variance: give runs of distinct seeds")
    metas = [run.meta for run in runs]
    unit = scale.unit_of(metas, unit, ())
    scale = scale.bound(metas, [run.source for run in runs])
    # each run's mean over its units (a loss per target, or per byte), as D weighs them
    means = [scale.run_mean(run.units, unit) for run in runs]
    return NoiseFloor(aa_floor(np.array(means)), scale.metric, unit, _setup(runs, scale), arms[0],
                      tuple(sorted(run.seed for run in runs)),
                      tuple({"source": run.source, "sha256": run.sha256} for run in runs))


def floor_from_studies(pairs: Sequence[Paired]) -> NoiseFloor:
    """The floor pooled over earlier paired studies of one setup (each with 2 or more seed pairs)."""
    if not pairs:
        raise InputError("noise floor: no studies given")
    kinds = {(pair.metric, pair.unit) for pair in pairs}
    if len(kinds) > 1:
        raise InputError("noise floor: the studies are of different metrics or units: "
                         + "; ".join(f"{metric} per {unit}" for metric, unit in sorted(kinds)))
    per_seed = [((pair.variant - pair.baseline) / pair.n_units) @ (pair.n_units / pair.n_units.sum())
                for pair in pairs]
    setup = {key: value for key, value in pairs[0].setup.items()
             if all(pair.setup.get(key) == value for pair in pairs)}
    inputs = tuple(record for pair in pairs for record in paired_inputs(pair))
    return NoiseFloor(pooled_floor(per_seed), pairs[0].metric, pairs[0].unit, setup, None, (), inputs)


def paired_inputs(paired: Paired) -> tuple[dict, ...]:
    """{"source", "sha256"} of every file a pair was read from (sha256 None where not recorded)."""
    return tuple({"source": source, "sha256": sha} for side in ("baseline", "variant")
                 for source, sha in zip(paired.sources[side],
                                        paired.sources.get(f"{side}_sha256") or [None] * len(paired.sources[side])))


def check_floor(floor: NoiseFloor, paired: Paired, allow_mismatch: Sequence[str] = ()) -> tuple[str, ...]:
    """Refuse a floor whose recorded setup differs from the study's in a field both record (the metric and the unit
    always), naming the field; a field in `allow_mismatch` becomes a note instead."""
    where = floor.path or "the noise floor"
    ours = {"metric": paired.metric, "unit": paired.unit, **paired.setup}
    theirs = {"metric": floor.metric, "unit": floor.unit, **floor.setup}
    notes = []
    for name in [key for key in theirs if key in ours and ours[key] != theirs[key]]:
        text = f"{where} was measured with {name} {_shown(theirs[name])}, the study has {_shown(ours[name])}"
        if name not in allow_mismatch:
            raise ParameterError("noise_floor", f"{text}: a floor is valid only for its own setup ({{allow_mismatch}} "
                                 f"{name} uses it anyway)", ("allow_mismatch",))
        notes.append(f"noise floor used although {text}")
    return tuple(notes)


def _setup(runs: Sequence[Run], scale: Scale) -> dict:
    """The runs' shared setup; a field the runs record differently means they are not one configuration."""
    for name in scale.setup:
        values = {_shown(value) for run in runs if (value := scale.setup_value(run.meta, name)) not in (None, "")}
        if len(values) > 1:
            raise InputError(f"noise floor: the runs differ in {name} ({', '.join(sorted(values))}); A/A runs are of "
                             "one configuration")
    return shared_setup(runs, scale)


def _shown(value: object) -> str:
    text = str(value)
    return text[:12] + "…" if len(text) == 64 else text  # a SHA-256 by its first 12 digits

