"""Group-sequential verdicts over seed pairs: one look per completed seed pair, up to the budget K.

`create_design(paired, max_seeds=…)` fixes the design at the first look (`SequentialDesign`) and says before it
starts when the documents cap the information below what the target power needs ("add documents, not seeds").
`look(design, paired)` decides at one look and returns the `Look`; `design.with_look(look)` records it,
`save_design` writes it (sealed) and `load_design` reads it back, refusing a file edited by hand. A driver (a shell
loop over `gatedv decide`, or a sweep) trains seed pair k + 1 while the last look says "continue":

    design = create_design(paired, max_seeds=8, sesoi=0.01, floor=floor)   # or load_design(path)
    result = look(design, paired)          # result.decision, result.stop, result.line
    save_design(path, design.with_look(result))

Loss files and item scores alike, through `Paired` and its `Scale` (docs/sequential-seeds.md).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special

from gatedv_stats.analysis.compare import seed_document_fit, with_floor
from gatedv_stats.analysis.ledger import LedgerEntry, LedgerSettings, read_history
from gatedv_stats.analysis.ledger_entries import e_value_at, enter_design, start_sequential
from gatedv_stats.analysis.noise_floor import NoiseFloor, paired_inputs
from gatedv_stats.analysis.sequential_design import Look, SequentialDesign
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import canonical_sha256
from gatedv_stats.core.locks import output_lock
from gatedv_stats.core.validation import check_at_least
from gatedv_stats.io.designfiles import check_design_path, read_design_file, write_design_file
from gatedv_stats.io.ledgerfile import ledger_settings
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats import sequential as gs
from gatedv_stats.stats import sequential_t as gst
from gatedv_stats.stats.seed_document import SeedDocumentResult


def create_design(paired: Paired, *, max_seeds: int, alpha: float = DEFAULTS.alpha, power: float = DEFAULTS.power,
                  sesoi: float | None = None, spending: str = "obf", floor: NoiseFloor | None = None,
                  allow_mismatch: Sequence[str] = (), ledger: dict | None = None) -> SequentialDesign:
    """The design of a sequential comparison of `paired.variant` against `paired.baseline`, from its first look.

    `max_seeds`: K, the budget of seed pairs (the last look). `alpha`: two-sided, α/2 spent in each direction by
    `spending` ("obf" or "pocock"). `sesoi`: the smallest effect of interest on the pair's scale; it gives the
    futility boundary (β-spending at the drift SESOI·√I_K, β = 1 − `power` or less) and "equivalent". `floor`: the
    setup's noise floor, whose τ² lets the first look be at one seed pair (refused for another setup unless the
    differing field is in `allow_mismatch`); without one τ² is the first look's own spread (2 seed pairs or more).
    `ledger`: the research ledger whose level the design runs at (`record_look`): `alpha` is then twice it.
    """
    gs.check_design(alpha, power, spending)
    if sesoi is not None:
        sesoi = paired.scale.check_sesoi(sesoi)
    floored = floor is not None
    first = 1 if floored else 2
    max_seeds = check_at_least("max_seeds", max_seeds, first)
    fit = _fit(with_floor(paired, floor, allow_mismatch), floor, first, max_seeds)
    # τ̂² and its df as the fit uses them: the floor's (pooled with the study's, or the study's where the F test
    # refuses the floor), else the study's own spread on S − 1 df
    seed_variance, seed_df = ((fit.v_seed, fit.n_seeds - 1.0) if fit.floor_use is None else
                              (fit.floor_use.seed.variance, fit.floor_use.seed.df))
    # c for the design's information, and where one seed pair cannot pin it down, the upper end of its range. From
    # two seed pairs on, the fit's document part (0 where the pre-test pools it). With one seed pair the units'
    # spread holds the seed × unit interaction as well, which τ² holds too, so Σw²σ²_doc lies between that spread's
    # part less τ² and the part itself: the design takes the lower end, since a c too large makes the looks seem
    # more correlated than they are and the boundaries too low (docs/sequential-seeds.md).
    part = max(fit.se ** 2 - seed_variance / fit.n_seeds, 0.0)
    document_term, document_high = (part, None) if fit.n_seeds > 1 else (max(part - seed_variance, 0.0), part)
    looks = range(first, max_seeds + 1)
    information = tuple(gs.information(n, seed_variance, document_term) for n in looks)
    if not seed_variance > 0.0 or (len(information) > 1 and not information[-1] * (1.0 - 1e-9) > information[0]):
        raise InputError("sequential design: the first look's seed pairs agree, so there is no seed variance to plan "
                         "the looks with; train another seed pair, or give a noise floor (gatedv noise-floor)")
    # the fractions the looks spend α at: I_k / I_K with a floor; without one, where τ² and c rest on one df, k / K
    # (c = 0) weighed by what a t on k − 1 df makes of it (`stats.sequential_t.effective_fractions`)
    fractions = (tuple(value / information[-1] for value in information) if floored else
                 tuple(float(value) for value in gst.effective_fractions(looks, alpha / 2.0, spending)))
    sizing = _sizing(information, fractions, alpha, power, sesoi, spending, paired, seed_variance,
                     (document_term, document_high), max_seeds, floored, None if ledger is None else alpha / 2.0)
    return SequentialDesign(
        max_seeds=max_seeds, alpha=alpha, power=power, sesoi=sesoi, spending=spending, first_look=first,
        seed_variance=seed_variance, seed_variance_df=seed_df, document_term=document_term,
        document_term_high=document_high, seed_variance_source="noise floor" if floored else "first look",
        information=information, fractions=fractions, **sizing, metric=paired.metric, unit=paired.unit,
        higher_is_better=paired.higher_is_better, log_ratio=paired.scale.log_ratio, proportion=paired.proportion,
        baseline_arm=paired.baseline_arm, variant_arm=paired.variant_arm, task=paired.task, setup=dict(paired.setup),
        n_units=paired.n_docs, units_sha256=_units_sha256(paired),
        floor=None if floor is None else {**floor.to_dict(), "path": floor.path, "sha256": floor.sha256},
        t_boundaries="marginal" if floored else "joint", ledger=ledger)


def look(design: SequentialDesign, paired: Paired, *, allow_mismatch: Sequence[str] = ()) -> Look:
    """The decision at the look `paired` holds (all its seed pairs, a superset of the last look's): the estimate,
    this look's boundaries from the α (and β) spent at the fractions of the looks taken, the repeated
    confidence interval and one of better / worse / equivalent / no useful gain / continue / no detectable
    difference (the last only at K). A look at the seed pairs of the last look returns that look as recorded.
    Record it with `design.with_look`."""
    check_same_study(design, paired)
    floor = None if design.floor is None else NoiseFloor.from_dict(design.floor)
    paired = with_floor(paired, floor, allow_mismatch)
    seeds = tuple(int(seed) for seed in paired.seeds)
    if (repeated := _repeated(design, seeds)) is not None:
        return repeated
    fit = _fit(paired, floor, design.first_look, design.max_seeds)
    n_pairs = fit.n_seeds
    counts = [previous.n_pairs for previous in design.looks] + [n_pairs]
    fractions = [design.fractions[n - design.first_look] for n in counts]
    # the looks' z boundaries and the cumulative α spent: with a noise floor by the recursion (read marginally on t),
    # without one calibrated to the joint law of t's that share their seeds (`stats.sequential_t`; a design file
    # written before that reading keeps the marginal one it started with)
    if design.t_boundaries == "marginal":
        efficacy, alpha_spent = gs.efficacy_bounds(fractions, design.alpha / 2.0, design.spending)
    else:
        alpha_spent = np.array([gs.spending(value, design.alpha / 2.0, design.spending) for value in fractions])
        efficacy = gst.joint_t_bounds(counts, alpha_spent)
    futility, beta_spent = None, None
    if design.drift is not None and design.futility_beta:
        futility, beta_spent = gs.futility_bounds(fractions, efficacy, design.drift, design.futility_beta,
                                                  design.spending)
    final = n_pairs == design.max_seeds
    # Joint boundaries hold for the t on n − 1 df (c = 0); read on the fit's df, which is largest where the few seeds
    # happen to agree, they would overspend α.
    df = fit.df if design.t_boundaries == "marginal" else n_pairs - 1.0
    bounds = None if design.sesoi is None else design.scale.equivalence_bounds(design.sesoi)
    information = design.information[n_pairs - design.first_look]
    # where the design's ledger tests e-values (e-LOND), the e-process over its looks at this one: the likelihood
    # ratio at the ledger's smallest effect of interest with the design's planned information (`stats.e_values`),
    # which "better" must reach 1/level, so that a "stop: better" is a keep there
    e_value = None if design.ledger is None else e_value_at(design.ledger.get("sesoi"), fit.estimate,
                                                            1.0 / information, design.scale)
    level = design.ledger["level"] if design.ledger is not None else None
    decided = gs.decide_look(fit.estimate, fit.se, df, efficacy=float(efficacy[-1]),
                             futility=None if futility is None else float(futility[-1]), final=final,
                             higher_is_better=design.higher_is_better, equivalence=bounds,
                             futility_mean=(design.drift or 0.0) * math.sqrt(fractions[-1]),
                             better=None if e_value is None or level is None else e_value * level >= 1.0)
    p_value, unbiased = (_stagewise(design, counts, fractions, decided, df, fit.se) if decided.stop
                         and e_value is None else (None, None))
    made = Look(index=len(design.looks) + 1, n_pairs=n_pairs, seeds=seeds, estimate=fit.estimate, se=fit.se,
                df=df, information=information, observed_information=fit.se ** -2,
                fraction=fractions[-1], efficacy=float(efficacy[-1]), decision=decided.decision,
                futility=None if futility is None or final else float(futility[-1]), critical=decided.critical,
                futility_critical=decided.futility, statistic=decided.statistic, alpha_spent=float(alpha_spent[-1]),
                beta_spent=None if beta_spent is None else float(beta_spent[-1]), interval=decided.interval,
                direction=decided.direction, seed_variance_from="study" if fit.floor_use is None else
                {"floor": "noise floor", "pooled": "pooled"}.get(fit.floor_use.how, "study"),
                line="", inputs=paired_inputs(paired), notes=paired.notes + _look_notes(design, fit),
                design_sha256=design.sha256, p_value=p_value, median_unbiased=unbiased, e_value=e_value)
    return _with_line(made, design)


def check_unchanged(design: SequentialDesign, *, max_seeds: int | None = None, alpha: float | None = None,
                    power: float | None = None, sesoi: float | None = None, spending: str | None = None,
                    floor: NoiseFloor | None = None) -> None:
    """Refuse, in one line naming the parameter, a setting given that differs from the design's: a design is fixed
    before its first look, and its K, α, spending function, power, SESOI and noise floor cannot change."""
    where = design.path or "the design"
    taken = f"{len(design.looks)} look{'s' if len(design.looks) != 1 else ''} taken"
    given = {"max_seeds": max_seeds, "alpha": alpha, "power": power, "sesoi": sesoi, "spending": spending}
    for name, value in given.items():
        recorded = getattr(design, name)
        if value is not None and not (value == recorded or (isinstance(value, float) and isinstance(recorded, float)
                                                            and math.isclose(value, recorded, rel_tol=1e-12))):
            raise ParameterError(name, f"{where} fixes {name} {recorded} ({taken}); a design cannot "
                                 f"change once it has started: start a new design file for {name} {value}")
    recorded = design.floor
    if floor is not None and not (recorded is not None and recorded["seed_variance"] == floor.seed.variance
                                  and recorded["df"] == floor.seed.df and recorded.get("sha256") == floor.sha256):
        raise ParameterError("noise_floor", f"{where} was designed "
                             f"{'without a noise floor' if design.floor is None else 'with another noise floor'} "
                             f"({taken}); a design cannot change once it has started")


def load_design(path: str | os.PathLike[str]) -> SequentialDesign:
    """A design file as written by `save_design`, its seal checked."""
    return SequentialDesign.from_file(read_design_file(path))


def save_design(path: str | os.PathLike[str], design: SequentialDesign) -> SequentialDesign:
    """Write the design and its looks (atomically, sealed); returns it with its path."""
    write_design_file(path, design.design_dict(), [look.to_dict() for look in design.looks])
    return replace(design, path=os.fspath(path))


@dataclass(frozen=True)
class RecordedLook:
    """One look recorded in its design file, and what it entered in the design's research ledger."""

    design: SequentialDesign  # with every look so far
    look: Look
    new: bool  # the look created the design
    repeated: bool  # the files hold the last look's seed pairs: nothing new was written
    ledger_entry: LedgerEntry | None = None  # the design's start (at its first look) or its entry (at its stop)


def record_look(path: str | os.PathLike[str], paired: Paired, *, max_seeds: int | None = None,
                alpha: float | None = None, power: float | None = None, sesoi: float | None = None,
                spending: str | None = None, floor: NoiseFloor | None = None, allow_mismatch: Sequence[str] = (),
                ledger: str | os.PathLike[str] | None = None, new_ledger: LedgerSettings | None = None,
                note: str | None = None) -> RecordedLook:
    """One look of the design in the file at `path`, recorded there: the design is created from this look when the
    file does not exist (`max_seeds` required), else read and every setting given checked against it.

    With a research `ledger` (created with the settings of `new_ledger` when new; `alpha` is then the ledger's α), a
    new design runs at the level the ledger gives it (one-sided, so α is twice it), started in the ledger in the
    same transaction; a design started in a ledger enters its candidate there when a look stops (with `note`), so
    that "stop: better" is a keep."""
    check_design_path(path)
    with output_lock(path):  # two looks at once (two shells, or two sweeps) take turns: the second finds the first's
        design, new, entry = _design_to_look_at(path, paired, max_seeds=max_seeds, alpha=alpha, power=power,
                                                sesoi=sesoi, spending=spending, floor=floor,
                                                allow_mismatch=allow_mismatch, ledger=ledger,
                                                new_ledger=new_ledger or LedgerSettings(alpha=alpha), note=note)
        taken = look(design, paired, allow_mismatch=allow_mismatch)
        repeated = bool(design.looks) and taken is design.looks[-1]
        if not repeated:
            entered = ledger_entry_of(design) if design.looks and design.looks[-1].stop else None
            if entered is not None:
                raise InputError(f"{design.path}: its candidate was entered in ledger {entered.row['design']} when "
                                 f"look {design.looks[-1].index} stopped ({design.looks[-1].decision}); start a new "
                                 "design file to go on")
            design = save_design(path, design.with_look(taken))
        if taken.stop and design.ledger is not None:
            entry = ledger_entry_of(design) or enter_design(design.ledger["path"], design, paired, note=note)
        return RecordedLook(design, taken, new, repeated, entry)


def _design_to_look_at(path: str | os.PathLike[str], paired: Paired, *, max_seeds: int | None, alpha: float | None,
                       power: float | None, sesoi: float | None, spending: str | None, floor: NoiseFloor | None,
                       allow_mismatch: Sequence[str], ledger: str | os.PathLike[str] | None,
                       new_ledger: LedgerSettings,
                       note: str | None) -> tuple[SequentialDesign, bool, LedgerEntry | None]:
    """The design in the file at `path`, or a new one (started in `ledger`, when given), and the ledger's start."""
    if os.path.exists(path):
        design = load_design(path)
        check_unchanged(design, max_seeds=max_seeds, alpha=None if design.ledger else alpha, power=power,
                        sesoi=sesoi, spending=spending, floor=floor)
        check_ledger_of(design, ledger, alpha, new_ledger.procedure)
        return design, False, None
    if max_seeds is None:
        raise ParameterError("max_seeds", f"{os.fspath(path)} does not exist yet: a new design needs the "
                             "budget of seed pairs, {max_seeds}", leading=False)

    def made(level: float | None, link: dict | None) -> SequentialDesign:
        two_sided = DEFAULTS.alpha if alpha is None else alpha
        return create_design(paired, max_seeds=max_seeds, alpha=two_sided if level is None else 2.0 * level,
                             power=DEFAULTS.power if power is None else power, sesoi=sesoi,
                             spending=spending or "obf", floor=floor, allow_mismatch=allow_mismatch, ledger=link)

    if ledger is None:
        return made(None, None), True, None
    try:
        design, start = start_sequential(ledger, paired, new_ledger,
                                         lambda level, link: save_design(path, made(level, link)), note=note)
    except BaseException:  # the ledger's transaction rolled back: no design may name its start
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        raise
    return design, True, start


def check_ledger_of(design: SequentialDesign, ledger: str | os.PathLike[str] | None, alpha: float | None,
                    procedure: str | None = None) -> None:
    """A `ledger` given for a design already made must be the one it was started in, and the `alpha` and
    `procedure` given, if any, that ledger's."""
    where = design.path or "the design"
    link = design.ledger
    if ledger is not None:
        if link is None:
            raise ParameterError("ledger", f"{where} was made without a ledger, at its own α = {design.alpha:g}; a "
                                 "design's level is fixed before its first look: enter its candidate at its stop "
                                 "(gatedv ledger LEDGER add --design), or start a new design file with {ledger}",
                                 leading=False)
        settings = ledger_settings(ledger)
        if (None if settings is None else canonical_sha256(settings)) != link["genesis"]:
            raise ParameterError("ledger", f"{where} runs at the level ledger {link['path']} gave it (step "
                                 f"{link['step']}), not {os.fspath(ledger)}'s")
    if link is not None and alpha is not None and not math.isclose(alpha, link["alpha"], rel_tol=1e-12):
        raise ParameterError("alpha", f"{where} runs at the level ledger {link['path']} gave it, at α = "
                             f"{link['alpha']:g}, not {alpha:g}")
    if link is not None and procedure is not None and procedure != link["procedure"]:
        raise ParameterError("procedure", f"{where} runs at the level ledger {link['path']} gave it, by "
                             f"{link['procedure']}, not {procedure}")


def ledger_entry_of(design: SequentialDesign) -> LedgerEntry | None:
    """The entry that finished the design's start in its ledger, if it was entered (None for a design made without
    a ledger)."""
    link = design.ledger
    if link is None or not os.path.exists(link["path"]):
        return None
    finished = [entry for entry in read_history(link["path"]).entries if entry.row.get("start_step") == link["step"]]
    return finished[0] if finished else None


# --- the parts ---


def _fit(paired: Paired, floor: NoiseFloor | None, first: int, max_seeds: int) -> SeedDocumentResult:
    if paired.n_pairs < first:
        raise InputError(f"sequential design: a look needs {first} seed pairs without a noise floor (the first look "
                         f"at one seed pair takes its seed variance from a floor: gatedv noise-floor), got "
                         f"{paired.n_pairs}")
    if paired.n_pairs > max_seeds:
        raise InputError(f"sequential design: the budget is {max_seeds} seed pairs (max_seeds), the files hold "
                         f"{paired.n_pairs}")
    fit = seed_document_fit(paired, None, 1.0 - DEFAULTS.alpha, floor=floor)
    if fit is None:
        raise InputError("sequential design: the paired differences do not vary over seeds or units, so there is no "
                         "spread to decide from")
    return fit


def _stagewise(design: SequentialDesign, counts: Sequence[int], fractions: Sequence[float],
               decided: gs.LookDecision, df: float, se: float) -> tuple[float, float]:
    """At a stop, the stage-wise ordering p-value of H0 "not better" and the median-unbiased estimate of D: on the z
    recursion with the statistic read back from the look's t (the same tail) where the boundaries were read
    marginally, else on the looks' joint t law (docs/sequential-seeds.md). The looks not taken yet
    enter at the design's fractions, one per seed pair. An equivalence stop that did not cross is ranked as if at
    the foot of the look's continuation region, below which no path went on."""
    k = len(counts) - 1
    planned = range(counts[-1] + 1, design.max_seeds + 1)
    every = [*fractions, *(design.fractions[n - design.first_look] for n in planned)]
    crossed = decided.direction == "better"
    sign = 1.0 if design.higher_is_better else -1.0
    if design.t_boundaries == "marginal":
        efficacy, _ = gs.efficacy_bounds(every, design.alpha / 2.0, design.spending)
        statistic = _as_z(decided.statistic, df)
        if decided.decision == "equivalent" and not crossed and planned:
            foot = -efficacy[k] if decided.futility is None else max(-efficacy[k], _as_z(decided.futility, df))
            statistic = min(statistic, foot)
        drift = gs.median_unbiased_drift(every, efficacy, k, statistic, crossed)
        return (float(gs.stagewise_p(every, efficacy, k, statistic, crossed)),
                sign * drift * math.sqrt(every[k]) * se)
    sizes = [*counts, *planned]
    spent = [gs.spending(value, design.alpha / 2.0, design.spending) for value in every]
    statistic = decided.statistic
    if decided.decision == "equivalent" and not crossed and planned:
        statistic = min(statistic, -decided.critical)
    drift = gst.joint_t_median_unbiased(sizes, spent, k, statistic, crossed)
    return (float(gst.joint_t_stagewise_p(sizes, spent, k, statistic, crossed)),
            sign * drift * se * math.sqrt(counts[-1]))


def _as_z(statistic: float, df: float) -> float:
    """The z with the tail of `statistic` on t with `df` (as the boundaries are read, the other way)."""
    return float(-special.ndtri(special.stdtr(df, -statistic)))


def _sizing(information: tuple[float, ...], fractions: tuple[float, ...], alpha: float, power: float,
            sesoi: float | None, spending: str, paired: Paired, seed_variance: float,
            document_terms: tuple[float, float | None], max_seeds: int, floored: bool, level: float | None) -> dict:
    """The drift at the SESOI, the futility boundary's β (with a noise floor only), the power and the notes on what
    the budget and the documents allow (at a ledger's one-sided `level`, always)."""
    if sesoi is None:
        return {"drift": None, "futility_beta": None, "power_at_sesoi": None, "fixed_power_at_sesoi": None,
                "target_information": None,
                "notes": ("no smallest effect of interest: no futility boundary, no equivalence and no power; the "
                          "looks decide better or worse only",)}
    # the SESOI as a size on D's scale: the nearer equivalence bound (log(1 + X) for a relative ΔP X, else X)
    size = min(abs(bound) for bound in paired.scale.equivalence_bounds(sesoi))
    efficacy, _ = gs.efficacy_bounds(fractions, alpha / 2.0, spending)
    drift = size * math.sqrt(information[-1])
    beta = gs.futility_beta(fractions, efficacy, drift, 1.0 - power, spending) if floored else 0.0
    futility = (gs.futility_bounds(fractions, efficacy, drift, beta, spending)[0] if beta
                else [-math.inf] * len(fractions))
    achieved = gs.power(fractions, efficacy, drift, [*futility[:-1], -math.inf])
    target = (gs.drift_for_power(fractions, efficacy, power) / size) ** 2
    fixed = float(special.ndtr(drift - special.ndtri(1.0 - alpha / 2.0)))
    # "add documents, not seeds" when the target information exceeds the cap 1/c (or may, where one seed pair leaves
    # c within a range); else, when the budget falls short of it (or always, at a ledger's `level`), what the budget
    # buys and the seed pairs that would reach the target
    document_term, high = document_terms
    notes = []
    if target >= gs.information_cap(document_term):
        room = 1.0 / target - seed_variance / max_seeds
        more = (f"; about {math.ceil(document_term / room)}× the documents would, with {max_seeds} seed pairs"
                if room > 0.0 else "")
        notes.append(f"add documents, not seeds: the target power {power:g} needs information {target:.4g}, more than "
                     "these documents allow with any number of seed pairs "
                     f"(1/c = {1.0 / document_term:.4g}){more}")
    else:
        if high is not None and target >= gs.information_cap(high):
            notes.append(f"the documents may cap the information below the {target:.4g} the target power {power:g} "
                         f"needs (1/c lies between {gs.information_cap(high):.4g} and "
                         f"{gs.information_cap(document_term):.4g}: one seed pair cannot tell the document term from "
                         "the seed × document interaction): if so, add documents, not seeds")
        room = 1.0 / target - document_term
        needed = f"about {math.ceil(seed_variance / room)}" if room > 0.0 else "no number of"
        if level is not None:
            notes.append(f"at level {level:.3g} a budget of {max_seeds} seed pairs gives power {achieved:.2f} at the "
                         f"smallest effect of interest; {needed} would give {power:g}")
        elif target > information[-1]:
            notes.append(f"the budget of {max_seeds} seed pairs gives power {achieved:.2f} at the smallest effect of "
                         f"interest, below the target {power:g}: {needed} seed pairs would reach it")
    if not floored:
        notes.append("without a noise floor the first looks rest on one or two df: no futility boundary (there it "
                     "would cost 4–7 points of power at the smallest effect of interest and save few seed pairs); a "
                     "floor (gatedv noise-floor) lets the looks stop early for no useful gain")
    return {"drift": drift, "futility_beta": beta or None, "power_at_sesoi": achieved, "fixed_power_at_sesoi": fixed,
            "target_information": target, "notes": tuple(notes)}


def check_same_study(design: SequentialDesign, paired: Paired) -> None:
    """The files are of the design's comparison: its metric, unit, arms, task, units and setup (else refused)."""
    where = design.path or "the design"
    for name in ("metric", "unit", "baseline arm", "variant arm", "task"):
        ours, theirs = getattr(paired, name.replace(" ", "_")), getattr(design, name.replace(" ", "_"))
        if ours != theirs:
            raise InputError(f"{where} is a design of {name} {theirs}, the files give {ours}")
    if _units_sha256(paired) != design.units_sha256:
        raise InputError(f"{where}: the {paired.noun}s differ from the design's first look ({design.n_units:,} then, "
                         f"{paired.n_docs:,} now): the {paired.noun}s stay fixed over the looks")
    for name, value in design.setup.items():
        if name in paired.setup and paired.setup[name] != value:
            raise InputError(f"{where}: the design's runs record {name} {value}, these record {paired.setup[name]}")


def _repeated(design: SequentialDesign, seeds: tuple[int, ...]) -> Look | None:
    """The last look again (the same seed pairs), or None for a new look; refuse one that cannot follow."""
    if not design.looks:
        return None
    last, where = design.looks[-1], design.path or "the design"
    if seeds == last.seeds:
        return last
    if not set(last.seeds) <= set(seeds) or len(seeds) <= len(last.seeds):
        raise InputError(f"{where}: look {last.index} was at seed pairs {', '.join(map(str, last.seeds))}; the next "
                         f"look needs those and more, the files hold {', '.join(map(str, seeds))}")
    if last.stop and last.decision != "no useful gain":
        raise InputError(f"{where}: the design stopped at look {last.index} ({last.decision}); start a new design "
                         "file for another comparison")
    return None


def _with_line(made: Look, design: SequentialDesign) -> Look:
    if made.decision == "continue":
        return replace(made, line=f"continue: train seed pair {made.n_pairs + 1}")
    interval = f"the repeated {100 * (1 - design.alpha):g}% interval {design.scale.format_interval(made.interval)}"
    where = f"look {made.index}, {made.n_pairs} seed pair{'s' if made.n_pairs > 1 else ''}"
    slight = f"; the variant is slightly {made.direction}" if made.direction else ""
    reasons = {
        "equivalent": f"{interval} lies within {design.scale.format_sesoi(design.sesoi or 0.0)}{slight}",
        "no useful gain": (f"futility, non-binding: T {made.statistic:.3g} ≤ {made.futility_critical or 0.0:.3g}; "
                           "going on keeps the error rates"),
        "no detectable difference": f"the last look: {interval} includes 0",
    }
    crossed = f"{interval} excludes 0; |T| {abs(made.statistic):.3g} ≥ {made.critical:.3g}"  # better or worse
    return replace(made, line=f"stop: {made.decision} ({where}: {reasons.get(made.decision, crossed)})")


def _look_notes(design: SequentialDesign, fit: SeedDocumentResult) -> tuple[str, ...]:
    notes = []
    if fit.floor_use is not None and fit.floor_use.how == "study":
        notes.append("this study's seed spread is larger than the noise floor allows: the look uses the study's own")
    if design.looks and design.looks[-1].decision == "no useful gain":
        notes.append("the last look stopped for futility; the boundary is non-binding, so going on keeps the error "
                     "rates")
    return tuple(notes)


def _units_sha256(paired: Paired) -> str:
    return canonical_sha256([str(unit) for unit in paired.doc_ids] + [int(n) for n in paired.n_units])
