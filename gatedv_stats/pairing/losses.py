"""Pair the loss files of two arms: runs by seed, documents by `doc_id`, per target or per byte (docs/method.md §5)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import MODEL_SIZES
from gatedv_stats.io.lossfiles import OPTIONAL_COLUMNS, LossRun, SkippedFile, read_loss_inputs
from gatedv_stats.pairing.paired import (
    Paired,
    check_distinct_arms,
    check_mismatch_fields,
    paired_seeds,
    pilot_arm,
    provenance_notes,
    runs_by_seed,
    shared_setup,
    unit_rows,
)
from gatedv_stats.pairing.selection import arm_sides, eval_set_sort_key, natural_key, select_runs

_SHOWN = 5


def pair_runs(baseline_runs: list[LossRun], variant_runs: list[LossRun], *, allow_unpaired: bool = False,
              allow_mismatch: tuple[str, ...] = (), unit: str = "auto") -> Paired:
    """Match runs by seed and documents by `doc_id`, checking that every run saw the same documents.

    Seeds present in one arm only are an error unless `allow_unpaired`, which drops them (see `dropped_seeds`).
    Runs whose files record a different evaluation set or tokenizer are an error unless the field is in
    `allow_mismatch` (see `check_provenance`). `unit` (see `comparison_unit`): "token" compares per target token,
    "byte" per UTF-8 byte of the target text (`n_bytes`), the only comparison that is fair across tokenizers.
    """
    unit = comparison_unit([*baseline_runs, *variant_runs], unit, allow_mismatch)
    mismatches = check_provenance([*baseline_runs, *variant_runs], allow_mismatch, unit)
    baseline_arm = _single_arm(baseline_runs, "baseline")
    variant_arm = _single_arm(variant_runs, "variant")
    hint = " (select one evaluation set)"
    baseline_by_seed = runs_by_seed(baseline_runs, baseline_arm, hint=hint)
    variant_by_seed = runs_by_seed(variant_runs, variant_arm, hint=hint)
    seeds, unpaired, runs = paired_seeds(baseline_by_seed, variant_by_seed, baseline_arm, variant_arm,
                                         allow_unpaired=allow_unpaired)
    doc_ids, rows = unit_rows([run.docs["doc_id"] for run in runs], [run.source for run in runs], "document")
    if unit == "byte":
        lacking = next((run for run in runs if "n_bytes" not in run.docs.columns), None)
        if lacking is not None:
            raise InputError(f"{lacking.source}: no n_bytes column; a per-byte comparison needs the UTF-8 bytes of "
                             "every document's target text")
    columns = OPTIONAL_COLUMNS if unit == "byte" else ("n_targets", *OPTIONAL_COLUMNS)
    per_document = {column: _agreed_column(column, runs, rows, doc_ids) for column in columns}
    losses = np.stack([run.docs["loss_sum"].to_numpy(dtype=np.float64)[index] for run, index in zip(runs, rows)])
    denominator = per_document["n_bytes"] if unit == "byte" else per_document.pop("n_targets")
    assert denominator is not None  # every loss file has n_targets; every run has n_bytes, checked above
    if unit == "byte" and not np.all(denominator > 0):
        raise InputError(f"document {doc_ids[int(np.argmin(denominator))]}: n_bytes is 0; a per-byte comparison needs "
                         "the bytes of every document's target text")
    half = len(seeds)
    return Paired(
        baseline_arm=baseline_arm,
        variant_arm=variant_arm,
        seeds=np.array(seeds, dtype=np.int64),
        doc_ids=doc_ids,
        n_units=denominator.astype(np.int64),
        baseline=losses[:half],
        variant=losses[half:],
        doc_columns=pd.DataFrame({column: values for column, values in per_document.items() if values is not None}),
        sources={
            "baseline": [run.source for run in runs[:half]],
            "variant": [run.source for run in runs[half:]],
            "baseline_sha256": [run.sha256 for run in runs[:half]],
            "variant_sha256": [run.sha256 for run in runs[half:]],
        },
        dropped_seeds=unpaired,
        mismatches=mismatches,
        unit=unit,
        eval_set=runs[0].eval_set,
        setup=shared_setup(runs, LOSS_SETUP, setup_value),
    )


UNITS = ("auto", "token", "byte")


def comparison_unit(runs: Sequence[LossRun], unit: str = "auto", allow_mismatch: tuple[str, ...] = ()) -> str:
    """What a comparison is per: "byte", or per target ("token" asked or chosen) what the files count as targets
    (`target_unit`: "token", "word", or "byte" for a per-byte import). `auto` compares per byte when the runs'
    tokenizers (`tokenizer_sha256`) or target units differ, else per target; "token" across tokenizers is refused
    unless `allow_mismatch` holds tokenizer_sha256."""
    if unit not in UNITS:
        raise ParameterError("unit", f"must be one of {', '.join(UNITS)} (got {unit!r})")
    tokenizers = {str(run.meta["tokenizer_sha256"]) for run in runs if run.meta.get("tokenizer_sha256")}
    target_units = {str(run.meta.get("target_unit") or "token") for run in runs}
    differ = len(tokenizers) > 1 or len(target_units) > 1
    if unit == "auto":
        unit = "byte" if differ else "token"
    elif unit == "token" and differ and "tokenizer_sha256" not in allow_mismatch:
        raise ParameterError("unit", "the runs were scored with different tokenizers or target units, so per-token "
                             "losses are not comparable; compare per byte ({unit} byte) or force it with "
                             "{allow_mismatch} tokenizer_sha256", ("allow_mismatch",), leading=False)
    if unit == "token" and len(target_units) == 1:
        return target_units.pop()
    return unit


# What a loss file's run records about its setup, for a noise floor to match (`size`: the model's sizes from its
# config; `step`: the updates it was trained for).
LOSS_SETUP = ("eval_set", "eval_set_sha256", "tokenizer_sha256", "scoring", "size", "step")


def setup_value(run: LossRun, name: str) -> object:
    """A setup field of a loss run, as `LOSS_SETUP` names it."""
    if name == "size":
        config = run.meta.get("config")
        return {key: config[key] for key in MODEL_SIZES if key in config} if isinstance(config, dict) else None
    return run.meta.get(name)


# `scoring`: what each document's loss is conditioned on: "context" (an evaluation set's window targets given the
# window's context), "document" (a whole document of a corpus), "bos" (a harness rolling log-likelihood, the text
# given the BOS token alone); losses scored differently are not of one quantity.
PROVENANCE_FIELDS = ("eval_set", "eval_set_sha256", "tokenizer_sha256", "scoring")


def check_provenance(runs: Sequence[LossRun], allow_mismatch: tuple[str, ...] = (),
                     unit: str = "token") -> tuple[str, ...]:
    """Refuse to pair runs whose files record a different evaluation set (name or hash), scoring or, per token,
    tokenizer.

    A field is compared only between files that carry it. A field in `allow_mismatch` is reported in the
    returned notes instead, so that the output can say what was compared anyway. Per byte, different tokenizers
    are the point of the comparison and are said in a note.
    """
    check_mismatch_fields(allow_mismatch, PROVENANCE_FIELDS)
    notes: tuple[str, ...] = ()
    fields: tuple[str, ...] = PROVENANCE_FIELDS
    if unit == "byte":
        fields = tuple(name for name in fields if name != "tokenizer_sha256")
        if len({str(run.meta["tokenizer_sha256"]) for run in runs if run.meta.get("tokenizer_sha256")}) > 1:
            notes = ("the arms' tokenizers differ: compared per byte of the same text (bits per byte)",)
    return provenance_notes(runs, fields, allow_mismatch, lambda run, name: run.meta.get(name),
                            _refuse_mixed_sets) + notes


def _refuse_mixed_sets(name: str, carrying: Sequence[LossRun], text: str) -> None:
    """An arm evaluated on several sets: the inputs mix them, and the user chooses one."""
    if name == "eval_set" and len({(run.arm, str(run.meta[name])) for run in carrying}) > len(
            {run.arm for run in carrying}):
        sets = ", ".join(sorted({str(run.meta[name]) for run in carrying}))
        raise ParameterError("eval_set", f"{text}; the inputs hold several evaluation sets: choose one with "
                             f"{{eval_set}} ({sets})", leading=False)


def _single_arm(runs: list[LossRun], side: str) -> str:
    if not runs:
        raise InputError(f"no {side} runs given")
    arms = sorted({run.arm for run in runs})
    if len(arms) > 1:
        raise InputError(f"the {side} runs hold several arms ({', '.join(arms)}); select one arm")
    return arms[0]


def _agreed_column(column: str, runs: list[LossRun], rows: list[np.ndarray], doc_ids: np.ndarray) -> np.ndarray | None:
    """A per-document column (in `doc_ids` order) that must be the same in every run carrying it; None when no run
    does."""
    carrying = [(run, index) for run, index in zip(runs, rows) if column in run.docs]
    if not carrying:
        return None
    (reference, reference_rows), others = carrying[0], carrying[1:]
    ours = reference.docs[column].to_numpy()[reference_rows]
    for run, index in others:
        if index is reference_rows and run.docs[column].equals(reference.docs[column]):
            continue  # rows in the same order, values equal
        theirs = run.docs[column].to_numpy()[index]
        differ = np.flatnonzero(ours != theirs)
        if differ.size:
            shown = ", ".join(f"{doc_ids[i]}: {ours[i]} vs {theirs[i]}" for i in differ[:_SHOWN])
            raise InputError(f"{column} disagrees for {differ.size} documents between {reference.source} and "
                             f"{run.source} (first: {shown})")
    return ours


def load_paired(*, tables: list | None = None, baseline: list | None = None, variant: list | None = None,
                baseline_arm: str | None = None, variant_arm: str | None = None, eval_set: str | None = None,
                allow_unpaired: bool = False, allow_mismatch: tuple[str, ...] = (), unit: str = "auto",
                skipped: list[SkippedFile] | None = None) -> Paired:
    """Read loss inputs and pair them: either `baseline` and `variant` paths (files, long tables, directories),
    or `tables` holding both arms, told apart by `baseline_arm` and `variant_arm`; each may be a list of runs
    already read instead. `skipped`: see `read_loss_inputs`."""
    check_distinct_arms(baseline_arm, variant_arm)
    baseline_runs, variant_runs = arm_sides(lambda inputs: runs_of(inputs, skipped), "loss", tables=tables,
                                            baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                                            variant_arm=variant_arm)
    baseline_runs = select_runs(baseline_runs, arm=baseline_arm, eval_set=eval_set, what="baseline")
    variant_runs = select_runs(variant_runs, arm=variant_arm, eval_set=eval_set, what="variant")
    return pair_runs(baseline_runs, variant_runs, allow_unpaired=allow_unpaired, allow_mismatch=allow_mismatch,
                     unit=unit)


def runs_of(inputs: Sequence, skipped: list[SkippedFile] | None = None) -> list[LossRun]:
    """Runs already read (`LossRun`s) as they are, else the runs read from paths (see `read_loss_inputs`)."""
    runs = [item for item in inputs if isinstance(item, LossRun)]
    if runs and len(runs) != len(inputs):
        raise InputError("give loss runs or paths, not both in one list")
    return runs or read_loss_inputs(inputs, skipped=skipped)


def pair_with_reference(runs: Sequence[LossRun], reference: str, *, allow_unpaired: bool = False,
                        allow_mismatch: tuple[str, ...] = (), unit: str = "auto") -> list[Paired]:
    """Pair every other arm with the `reference` arm on each evaluation set that holds both (held-out first, then
    development, then others), arms in natural name order (v2 before v10)."""
    arms = sorted({run.arm for run in runs})
    if reference not in arms:
        raise ParameterError("reference", f"no runs of arm {reference!r} (arms found: {', '.join(arms)})")
    if len(arms) < 2:
        raise InputError(f"only the reference arm {reference!r} was found; give loss files of at least one other arm")
    pairs = []
    for eval_set in sorted({run.eval_set for run in runs}, key=eval_set_sort_key):
        in_set = [run for run in runs if run.eval_set == eval_set]
        reference_runs = [run for run in in_set if run.arm == reference]
        if not reference_runs:
            continue
        pairs += [pair_runs(reference_runs, [run for run in in_set if run.arm == arm], allow_unpaired=allow_unpaired,
                            allow_mismatch=allow_mismatch, unit=unit)
                  for arm in sorted({run.arm for run in in_set} - {reference}, key=natural_key)]
    if not pairs:
        raise InputError(f"no evaluation set holds {reference!r} together with another arm")
    return pairs


def pilot_pair(runs: list[LossRun], *, baseline_arm: str | None = None, variant_arm: str | None = None,
               eval_set: str | None = None, allow_unpaired: bool = False,
               allow_mismatch: tuple[str, ...] = (), unit: str = "auto", what: str = "pilot") -> Paired:
    """Pair the two arms of pilot runs (`what` they are, in messages); the baseline defaults to the arm named
    "baseline", the variant to the other."""
    runs = select_runs(runs, eval_set=eval_set, what=f"{what} files")
    arms = sorted({run.arm for run in runs})
    baseline_arm = pilot_arm(baseline_arm, set(arms), what)
    if baseline_arm not in arms:
        raise ParameterError("baseline_arm", f"no {what} runs of arm {baseline_arm!r} (arms found: {', '.join(arms)})")
    check_distinct_arms(baseline_arm, variant_arm)
    if variant_arm is None:
        others = [arm for arm in arms if arm != baseline_arm]
        if not others:
            raise InputError(f"the {what} holds runs of arm {baseline_arm!r} only; give the variant's loss files too")
        if len(others) != 1:
            raise ParameterError("variant_arm", f"the {what} needs runs of a baseline and one variant arm; name the "
                                 f"variant with {{variant_arm}} (arms found: {', '.join(arms)})", leading=False)
        variant_arm = others[0]
    return pair_runs(select_runs(runs, arm=baseline_arm, what=f"{what} baseline"),
                     select_runs(runs, arm=variant_arm, what=f"{what} variant"), allow_unpaired=allow_unpaired,
                     allow_mismatch=allow_mismatch, unit=unit)
