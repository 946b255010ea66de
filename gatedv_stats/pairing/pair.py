"""Pair the runs of two arms on a scale: runs by training seed, units by `doc_id` (docs/method-statistics.md §5).

One pairing for every metric; the scale (`stats.scale`) says what differs: the units' values and weights, the run
fields and per-unit hashes that must agree, the family of comparisons. A differing field is refused in one line
naming the first differing file and the field, unless `allow_mismatch` names it (compared anyway, with a note).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.paired import (
    Paired,
    check_distinct_arms,
    check_mismatch_fields,
    paired_seeds,
    provenance_notes,
    runs_by_seed,
    shared_setup,
    unit_rows,
)
from gatedv_stats.pairing.selection import eval_set_sort_key, natural_key, select_runs
from gatedv_stats.stats.scale import PERPLEXITY, Scale, agreed_values


def pair_runs(baseline_runs: Sequence[Run], variant_runs: Sequence[Run], scale: Scale = PERPLEXITY, *,
              allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (), unit: str = "auto") -> Paired:
    """Match runs by seed and units by `doc_id`, checking that every run saw the same units, recorded alike.

    Seeds present in one arm only are an error unless `allow_unpaired`, which drops them (see `dropped_seeds`).
    Runs whose files record a different provenance field (an evaluation set, a tokenizer; a task's configuration)
    are an error unless the field is in `allow_mismatch`. `unit` (perplexity): "token" compares per target token,
    "byte" per UTF-8 byte of the target text (`n_bytes`), the only comparison that is fair across tokenizers, and
    "auto" per byte when the tokenizers differ.
    """
    runs = [*baseline_runs, *variant_runs]
    unit = scale.unit_of([run.meta for run in runs], unit, allow_mismatch)
    check_mismatch_fields(allow_mismatch, scale.mismatch_fields)
    mismatches = provenance_notes(runs, scale, unit, allow_mismatch)
    baseline_arm, variant_arm = _single_arm(baseline_runs, "baseline"), _single_arm(variant_runs, "variant")
    prefix = scale.family_prefix(_family(runs[0], scale))
    seeds, unpaired, runs = paired_seeds(
        runs_by_seed(baseline_runs, baseline_arm, prefix=prefix, hint=scale.duplicate_hint),
        runs_by_seed(variant_runs, variant_arm, prefix=prefix, hint=scale.duplicate_hint), baseline_arm, variant_arm,
        allow_unpaired=allow_unpaired, prefix=prefix)
    sources = [run.source for run in runs]
    scale = scale.bound([run.meta for run in runs], sources)
    doc_ids, rows = unit_rows([run.units["doc_id"] for run in runs], sources, scale.noun)
    n_units, doc_columns = scale.weights([run.units for run in runs], sources, rows, doc_ids, unit)
    mismatches += _check_hashes(scale, runs, rows, doc_ids, allow_mismatch)
    # Finite: reading a run checked its values.
    values = np.stack([scale.values(run.units)[index] for run, index in zip(runs, rows)])
    half = len(seeds)
    return Paired(
        baseline_arm=baseline_arm, variant_arm=variant_arm, seeds=np.array(seeds, dtype=np.int64), doc_ids=doc_ids,
        n_units=n_units, baseline=values[:half], variant=values[half:], doc_columns=doc_columns,
        sources={"baseline": sources[:half], "variant": sources[half:],
                 "baseline_sha256": [run.sha256 for run in runs[:half]],
                 "variant_sha256": [run.sha256 for run in runs[half:]]},
        dropped_seeds=unpaired, mismatches=mismatches, unit=unit, scale=scale.of_values(values),
        setup=shared_setup(runs, scale), **({} if scale.family is None else {scale.family: _family(runs[0], scale)}))


def _family(run: Run, scale: Scale) -> str | None:
    """The run's value of the scale's family (its evaluation set, its task), None without one."""
    value = None if scale.family is None else run.meta.get(scale.family)
    return None if value is None else str(value)


def _single_arm(runs: Sequence[Run], side: str) -> str:
    if not runs:
        raise InputError(f"no {side} runs given")
    arms = sorted({run.arm for run in runs})
    if len(arms) > 1:
        raise InputError(f"the {side} runs hold several arms ({', '.join(arms)}); select one arm")
    return arms[0]


def _check_hashes(scale: Scale, runs: Sequence[Run], rows: list[np.ndarray], doc_ids: np.ndarray,
                  allow_mismatch: Sequence[str]) -> tuple[str, ...]:
    """Every unit's hashes (`scale.unit_hashes`) agree across the runs that record them; the first differing unit
    names the field."""
    notes = []
    for column in scale.unit_hashes:
        _, different = agreed_values(column, [run.units for run in runs], rows, as_text=True)
        if different is None:
            continue
        first, other, differ, _ = different
        text = (f"{column} differs for {differ.size} {scale.noun}s between {runs[first].source} and "
                f"{runs[other].source} (first: {scale.noun} {doc_ids[differ[0]]})")
        if column not in allow_mismatch:
            raise ParameterError("allow_mismatch", f"{text}: they were not scored on the same {scale.noun} "
                                 f"({{allow_mismatch}} {column} pairs them anyway)", leading=False)
        notes.append(f"compared although {text}")
    return tuple(notes)


def pair_families(baseline_runs: Sequence[Run], variant_runs: Sequence[Run], scale: Scale = PERPLEXITY,
                  **options) -> list[Paired]:
    """The two arms paired: on every family both hold where the scale compares a suite (a downstream task's
    tasks, in name order), else as one pair (`options` as `pair_runs`)."""
    if not scale.suite:
        return [pair_runs(baseline_runs, variant_runs, scale, **options)]
    held = {_family(run, scale) for run in baseline_runs} & {_family(run, scale) for run in variant_runs}
    if not held:
        raise InputError(f"no {scale.family_noun} holds both the baseline's and the variant's {scale.files}")
    return [pair_runs([run for run in baseline_runs if _family(run, scale) == value],
                      [run for run in variant_runs if _family(run, scale) == value], scale, **options)
            for value in sorted(held, key=eval_set_sort_key)]


def pair_sides(baseline_runs: Sequence[Run], variant_runs: Sequence[Run], scale: Scale = PERPLEXITY, *,
               baseline_arm: str | None = None, variant_arm: str | None = None, eval_set: str | None = None,
               **options) -> list[Paired]:
    """The runs of each side (of its arm, where named, and of `eval_set`) paired (`pair_families`)."""
    return pair_families(select_runs(list(baseline_runs), arm=baseline_arm, eval_set=eval_set, what="baseline"),
                         select_runs(list(variant_runs), arm=variant_arm, eval_set=eval_set, what="variant"), scale,
                         **options)


def pair_with_reference(runs: Sequence[Run], reference: str, scale: Scale = PERPLEXITY, **options) -> list[Paired]:
    """Pair every other arm with the `reference` arm on each family that holds both (evaluation sets held-out first,
    then development, then others; tasks in name order), arms in natural name order (v2 before v10)."""
    arms = sorted({run.arm for run in runs})
    if reference not in arms:
        raise ParameterError("reference", f"no runs of arm {reference!r} (arms found: {', '.join(arms)})")
    if len(arms) < 2:
        raise InputError(f"only the reference arm {reference!r} was found; give {scale.files} of at least one other "
                         "arm")

    pairs = []
    for value in sorted({_family(run, scale) for run in runs}, key=eval_set_sort_key):
        in_family = [run for run in runs if _family(run, scale) == value]
        reference_runs = [run for run in in_family if run.arm == reference]
        if not reference_runs:
            continue
        pairs += [pair_runs(reference_runs, [run for run in in_family if run.arm == arm], scale, **options)
                  for arm in sorted({run.arm for run in in_family} - {reference}, key=natural_key)]
    if not pairs:
        raise InputError(f"no {scale.family_noun} holds {reference!r} together with another arm")
    return pairs


def pilot_pair(runs: Sequence[Run], scale: Scale = PERPLEXITY, *, baseline_arm: str | None = None,
               variant_arm: str | None = None, eval_set: str | None = None, what: str = "pilot",
               **options) -> Paired:
    """Pair the two arms of pilot runs (`what` they are, in messages); the baseline defaults to the arm named
    "baseline", the variant to the other; a suite's pilot is of one family (one task)."""
    runs = select_runs(list(runs), eval_set=eval_set, what=f"{what} files")
    arms = sorted({run.arm for run in runs})
    baseline_arm = baseline_arm or ("baseline" if "baseline" in arms else None)
    if baseline_arm is None:
        raise ParameterError("baseline_arm", f"name the {what}'s baseline arm with {{baseline_arm}} (arms found: "
                             f"{', '.join(arms)})", leading=False)
    if baseline_arm not in arms:
        raise ParameterError("baseline_arm", f"no {what} runs of arm {baseline_arm!r} (arms found: {', '.join(arms)})")
    check_distinct_arms(baseline_arm, variant_arm)
    if variant_arm is None:
        others = [arm for arm in arms if arm != baseline_arm]
        if not others:
            raise InputError(f"the {what} holds runs of arm {baseline_arm!r} only; give the variant's {scale.files} "
                             "too")
        if len(others) != 1:
            raise ParameterError("variant_arm", f"the {what} needs runs of a baseline and one variant arm; name the "
                                 f"variant with {{variant_arm}} (arms found: {', '.join(arms)})", leading=False)
        variant_arm = others[0]
    pairs = pair_families(select_runs(runs, arm=baseline_arm, what=f"{what} baseline"),
                          select_runs(runs, arm=variant_arm, what=f"{what} variant"), scale, **options)
    if len(pairs) > 1:
        found = ", ".join(str(getattr(paired, str(scale.family))) for paired in pairs)
        raise InputError(f"the {what} holds several {scale.family_noun}s ({found}); give the {what} files of one "
                         f"{scale.family_noun} and two arms")
    return pairs[0]
