"""The records of a group-sequential design over seed pairs: the design, fixed before its first look, and each look
(`analysis.sequential` makes them; `io.designfiles` writes and reads them, sealed)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import canonical_sha256
from gatedv_stats.stats.intervals import ConfidenceInterval, finite_or_none
from gatedv_stats.stats.scale import Scale, scale_from_dict
from gatedv_stats.stats.sequential import STOPS


@dataclass(frozen=True)
class Look:
    """One look at `n_pairs` completed seed pairs: the estimate, the look's boundaries and the decision."""

    index: int  # 1, 2, … in the order taken
    n_pairs: int
    seeds: tuple[int, ...]
    estimate: float  # D̂: the mean difference variant − baseline (per token, byte or item)
    se: float
    df: float  # the t's df the boundaries are read on: the interval's with a noise floor, n_pairs − 1 without
    information: float  # the design's planned I at these seed pairs
    observed_information: float  # 1 / se²
    fraction: float  # the fraction α is spent at: I_k / I_K with a noise floor, the t's effective one without
    efficacy: float  # e_k (z; +∞ where the look spends nothing); without a floor calibrated to the joint t law
    futility: float | None  # f_k (z, oriented to the variant's benefit); None without a futility boundary here
    critical: float  # c_k = t_{ν_k, 1 − p_k}, p_k = 1 − Φ(e_k)
    futility_critical: float | None  # the futility boundary on the look's t
    statistic: float  # T_k = D̂ / se, oriented to the variant's benefit
    alpha_spent: float  # cumulative, per direction
    beta_spent: float | None  # cumulative, by the futility boundary
    interval: ConfidenceInterval  # the repeated confidence interval D̂ ± c_k·se
    decision: str  # one of stats.sequential.DECISIONS
    direction: str | None  # where the interval excludes 0
    seed_variance_from: str  # "noise floor", "pooled" (floor and study), "study"
    line: str  # "continue: train seed pair k+1" or "stop: <decision> (…)"
    inputs: tuple[dict, ...] = ()  # {"source", "sha256"} of every file read
    notes: tuple[str, ...] = ()
    design_sha256: str = ""
    # at a stop: the stage-wise ordering p-value of H0 "not better" and the median-unbiased estimate of D
    p_value: float | None = None
    median_unbiased: float | None = None
    e_value: float | None = None  # the e-process at this look, where the design's ledger tests e-values (e-LOND)

    @property
    def stop(self) -> bool:
        """The look ends the design (any decision but "continue")."""
        return self.decision in STOPS

    def to_dict(self) -> dict:
        data = {field.name: getattr(self, field.name) for field in fields(self)}
        data.update(seeds=list(self.seeds), inputs=list(self.inputs), notes=list(self.notes),
                    interval=[finite_or_none(value) for value in self.interval], efficacy=finite_or_none(self.efficacy),
                    critical=finite_or_none(self.critical), futility=finite_or_none(self.futility),
                    futility_critical=finite_or_none(self.futility_critical), stop=self.stop)
        return data

    @classmethod
    def from_dict(cls, content: dict) -> Look:
        data = {field.name: content[field.name] for field in fields(cls) if field.name in content}
        low, high = content["interval"]
        data.update(seeds=tuple(int(seed) for seed in content["seeds"]), inputs=tuple(content.get("inputs", ())),
                    notes=tuple(content.get("notes", ())), efficacy=_number(content["efficacy"]),
                    critical=_number(content["critical"]),
                    interval=ConfidenceInterval(_number(low, -1.0), _number(high)))
        return cls(**data)


@dataclass(frozen=True)
class SequentialDesign:
    """A group-sequential design over seed pairs (docs/sequential-seeds.md), fixed before the first
    look from the budget, α, the power, the smallest effect of interest, the spending function, the seed variance
    τ² (a noise floor's, else the first look's) and the document term c of the first look's fit."""

    max_seeds: int  # K: the budget of seed pairs, the last look
    alpha: float  # two-sided: α/2 spent in each direction
    power: float  # the target power at the smallest effect of interest
    sesoi: float | None  # on the pair's scale (a relative ΔP, or a difference in the metric's units)
    spending: str  # "obf" or "pocock"
    first_look: int  # the seed pairs of the first possible look: 1 with a noise floor, else 2
    seed_variance: float  # τ²
    seed_variance_df: float
    seed_variance_source: str  # "noise floor" or "first look"
    document_term: float  # c, the design's (with one seed pair, the lower end of its range)
    document_term_high: float | None  # with one seed pair, the upper end of c's range (holds the interaction)
    information: tuple[float, ...]  # planned I at first_look … max_seeds seed pairs
    fractions: tuple[float, ...]  # the fractions α is spent at (without a floor, k / K weighed by the looks' t)
    drift: float | None  # θ = SESOI·√I_K on the z scale (None without a SESOI)
    futility_beta: float | None  # the β the futility boundary spends (None: no futility boundary)
    power_at_sesoi: float | None  # of this design at the SESOI, the futility boundary obeyed (normal approximation)
    fixed_power_at_sesoi: float | None  # of a fixed design of max_seeds seed pairs
    target_information: float | None  # the information the target power needs
    metric: str
    unit: str
    higher_is_better: bool
    log_ratio: bool
    proportion: bool
    baseline_arm: str
    variant_arm: str
    task: str | None
    setup: dict
    n_units: int
    units_sha256: str  # of the units' ids: the documents (items) stay fixed
    floor: dict | None  # the noise floor's content, path and sha256
    notes: tuple[str, ...] = ()
    # how a look's z boundary becomes its t critical value: "marginal" (the same tail on the interval's df) or "joint"
    # (the looks' joint t law on n − 1 df: designs without a floor since it was calibrated; earlier files lack the
    # field and keep the reading they started with)
    t_boundaries: str = "marginal"
    # the research ledger that gave the design its level (path, genesis hash, the start's step, the level, the
    # ledger's α and procedure): α is then twice that one-sided level; None for a design of its own α
    ledger: dict | None = None
    looks: tuple[Look, ...] = ()
    path: str | None = None  # the file it was read from or written to

    @property
    def scale(self) -> Scale:
        return scale_from_dict({"metric": self.metric, "higher_is_better": self.higher_is_better,
                                "log_ratio": self.log_ratio, "proportion": self.proportion})

    @property
    def sha256(self) -> str:
        """The design's hash: of the design part alone, fixed before the first look."""
        return canonical_sha256(self.design_dict())

    def design_dict(self) -> dict:
        """The design part of the file (everything but the looks and the path)."""
        data = {name: value for name, value in asdict(self).items() if name not in ("looks", "path")}
        if self.t_boundaries == "marginal":  # as files written before the field existed: their hash unchanged
            data.pop("t_boundaries")
        if self.ledger is None:
            data.pop("ledger")
        data.update(information=list(self.information), fractions=list(self.fractions), notes=list(self.notes))
        return data

    def to_dict(self) -> dict:
        return {"design": self.design_dict(), "design_sha256": self.sha256,
                "looks": [look.to_dict() for look in self.looks], "design_file": self.path}

    @classmethod
    def from_file(cls, content: dict) -> SequentialDesign:
        """A design as `io.designfiles.read_design_file` returns it; a field missing or of the wrong kind is an
        `InputError` naming the file."""
        where = content.get("path", "the design file")
        try:
            design = dict(content["design"])
            design.update(information=tuple(float(value) for value in design["information"]),
                          fractions=tuple(float(value) for value in design["fractions"]),
                          notes=tuple(design.get("notes", ())), t_boundaries=design.get("t_boundaries", "marginal"),
                          ledger=design.get("ledger"))
            known = {field.name for field in fields(cls)} - {"looks", "path"}
            looks = tuple(Look.from_dict(look) for look in content["looks"])
            made = cls(**{name: design[name] for name in known}, looks=looks, path=content.get("path"))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{where}: not a complete sequential design ({type(error).__name__}: {error})") from None
        if not (isinstance(made.max_seeds, int) and 1 <= made.first_look <= made.max_seeds
                and len(made.information) == len(made.fractions) == made.max_seeds - made.first_look + 1):
            raise InputError(f"{where}: the design's seed pairs and information do not agree")
        return made

    def with_look(self, look: Look) -> SequentialDesign:
        """The design with `look` recorded after the others."""
        return replace(self, looks=(*self.looks, look))

    def summary(self) -> str:
        """The design in a few lines."""
        sesoi = "none (no futility boundary, no equivalence)" if self.sesoi is None else (
            self.scale.format_sesoi(self.sesoi))
        name = {"obf": "O'Brien–Fleming type", "pocock": "Pocock type"}[self.spending]
        high = ("" if self.document_term_high is None else
                f" (one seed pair: at most {self.document_term_high:.4g}, with the interaction)")
        lines = [f"sequential design {self.sha256[:12]}: up to {self.max_seeds} seed pairs (first look at "
                 f"{self.first_look}), α = {self.alpha:g} two-sided ({self.alpha / 2:g} per direction), {name} "
                 f"spending, smallest effect of interest {sesoi}",
                 *([] if self.ledger is None else
                   [f"  the level {self.alpha / 2:.3g} is the one ledger {self.ledger['path']} gave it at step "
                    f"{self.ledger['step']} ({self.ledger['procedure']}, α = {self.ledger['alpha']:g}): \"stop: "
                    "better\" is a keep there, every other stop a discard"]),
                 f"  seed variance τ² {self.seed_variance:.4g} ({self.seed_variance_df:g} df, "
                 f"{self.seed_variance_source}), document term c {self.document_term:.4g}{high}: information "
                 f"{self.information[0]:.4g} at {self.first_look} → {self.information[-1]:.4g} at {self.max_seeds} "
                 f"seed pairs (cap 1/c {'∞' if self.document_term <= 0.0 else f'{1.0 / self.document_term:.4g}'})"]
        if self.power_at_sesoi is not None:
            lines.append(f"  power at the smallest effect of interest {fmt.format_percent(self.power_at_sesoi)} "
                         f"(target {fmt.format_percent(self.power)}; a fixed design of {self.max_seeds} seed pairs: "
                         f"{fmt.format_percent(self.fixed_power_at_sesoi or 0.0)}; normal approximation), "
                         + ("no futility boundary" if self.futility_beta is None else
                            f"futility β {self.futility_beta:.3g}"))
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def _number(value: float | None, sign: float = 1.0) -> float:
    """A recorded bound: None stands for an infinity of that sign."""
    return sign * math.inf if value is None else float(value)
