"""A metric is one `Scale`: everything that differs between kinds of comparison lives in its class.

Every comparison works on D, the weighted mean over seed pairs and units of variant − baseline. A scale says how
a run's units give the values and the weights of D, which way is better, how D is read (a log ratio shown as ΔP, or
a difference in the metric's units), which recorded fields paired runs must share (and which a noise floor must
match), what groups comparisons into a family, how its figures are printed and which extra figures it has. The
pairing, the verdict, the many-arms adjustment, the plan, the floor and the ledger take a scale and are one code
for every metric; a new kind of metric is a subclass here and a file schema in `io`: `PerplexityScale` (loss
files), `MetricScale` (item-score files of downstream tasks), `ScoreScale` (score tables of any pipeline).

Field names are the files' column and metadata names, as strings: this module reads no file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import MODEL_SIZES
from gatedv_stats.core.validation import check_open_unit

if TYPE_CHECKING:
    from gatedv_stats.stats.seed_document import SeedDocumentResult

_SHOWN = 5  # how many differing units an error message lists


@dataclass(frozen=True)
class Scale:
    """The reading of a difference: the metric, which way is better and whether D is a log ratio; the class holds
    what its kind of runs declares. The base reads a score table's: documents weighted equally, D a difference in
    the metric's units; a subclass declares what its kind changes."""

    metric: str = "acc"
    higher_is_better: bool = True
    log_ratio: bool = False  # D is a difference of log-losses: ΔP = exp(D) − 1, a SESOI is a relative ΔP
    proportion: bool = False  # scores lie in [0, 1] (accuracy): differences are shown in points

    schema: ClassVar[str] = "scores"  # the runs' schema (`io.runfiles.RunSchema.name`)
    noun: ClassVar[str] = "document"  # what a unit is called: "document", "item"
    files: ClassVar[str] = "score tables"  # what the runs are read from: "loss files"
    family: ClassVar[str | None] = None  # the run field that groups comparisons with a reference ("eval_set", "task")
    family_noun: ClassVar[str] = "set of runs"  # what one value of the family is called
    provenance: ClassVar[tuple[str, ...]] = ("eval_set", "eval_set_sha256")  # run fields paired runs record alike
    unit_hashes: ClassVar[tuple[str, ...]] = ()  # per-unit columns that must agree (allow_mismatch accepts them)
    setup: ClassVar[tuple[str, ...]] = ("eval_set", "eval_set_sha256")  # what a noise floor records, a study matches
    estimate_name: ClassVar[str] = "difference"  # what D is called in the JSON: "nll_diff_mean", "difference"
    figures: ClassVar[str] = "scores"  # which figures surround the verdict: "perplexity", "scores"
    weight_name: ClassVar[str | None] = None  # the unit column D is weighted by (per target), where there is one
    value_column: ClassVar[str | None] = None  # the unit column D is of, where it is not the metric's
    duplicate_hint: ClassVar[str] = ""  # what to do about a seed given twice
    suite: ClassVar[bool] = False  # two arms are compared on every family both hold (a suite of tasks), not one
    # the options of a comparison this scale has no use for, refused rather than ignored
    unused_options: ClassVar[tuple[str, ...]] = ("eval_set", "n_resamples", "rng_seed", "method", "n_permutations",
                                                 "unit", "n_targets")

    def direction(self, difference: float) -> str:
        """"better" when a difference of this sign favours the variant, else "worse"."""
        return "better" if (difference > 0.0) == self.higher_is_better else "worse"

    @property
    def mismatch_fields(self) -> tuple[str, ...]:
        """The fields `allow_mismatch` may name for a pairing on this scale."""
        return self.unit_hashes + self.provenance

    def family_prefix(self, value: object) -> str:
        """What starts a message about one family's comparison of a suite ("task hellaswag: ")."""
        return f"{self.family} {value}: " if self.suite else ""

    def unit_of(self, metas: Sequence[dict], unit: str, allow_mismatch: Sequence[str]) -> str:
        """What the comparison is per (what the weights count), from the runs' metadata and the unit asked for."""
        return self.noun

    def provenance_of(self, unit: str) -> tuple[str, ...]:
        """The run fields compared when pairing per `unit`: per byte, different tokenizers are the point of the
        comparison."""
        return tuple(name for name in self.provenance if unit != "byte" or name != "tokenizer_sha256")

    def unit_notes(self, metas: Sequence[dict], unit: str) -> tuple[str, ...]:
        """What the pairing says about the runs compared per `unit`."""
        if unit == "byte" and len(_tokenizers(metas)) > 1:
            return ("the arms' tokenizers differ: compared per byte of the same text (bits per byte)",)
        return ()

    def refuse(self, name: str, carrying: Sequence[tuple[str, object]], text: str) -> None:
        """A more specific error than a differing field's, from the (arm, value) of the runs that record it."""

    def setup_value(self, meta: dict, name: str) -> object:
        """A setup field of a run, from its metadata (`size`: the model's sizes, from its config)."""
        if name == "size":
            config = meta.get("config")
            return {key: config[key] for key in MODEL_SIZES if key in config} if isinstance(config, dict) else None
        return meta.get(name)

    def values(self, units: pd.DataFrame) -> np.ndarray:
        """The (N,) values of D of a run's units: the metric's column, or the scale's `value_column`."""
        return units[self.value_column or self.metric].to_numpy(dtype=np.float64)

    def run_mean(self, units: pd.DataFrame, unit: str) -> float:
        """One run's mean over its units, weighted as D weighs them."""
        return float(self.values(units).mean())

    def weights(self, units: Sequence[pd.DataFrame], sources: Sequence[str], rows: Sequence[np.ndarray],
                doc_ids: np.ndarray, unit: str) -> tuple[np.ndarray, pd.DataFrame]:
        """The (N,) weights of the paired units (1 each) and their grouping columns (text columns other than the
        metric and the hashes), in `doc_ids` order."""
        first = units[0]
        columns = [column for column in first.columns if column not in ("doc_id", *self.unit_hashes)
                   and not pd.api.types.is_numeric_dtype(first[column])]
        return (np.ones(len(doc_ids), dtype=np.int64),
                first[columns].iloc[rows[0]].reset_index(drop=True))

    def bound(self, metas: Sequence[dict], sources: Sequence[str]) -> Scale:
        """The scale of these runs: the direction every run records for the metric (a loss's is known)."""
        if self.log_ratio:
            return self
        directions: dict[bool, str] = {}
        for meta, source in zip(metas, sources):
            if self.metric not in meta.get("metrics", ()):
                raise InputError(f"{source}: no metric {self.metric!r} (metrics: {', '.join(meta.get('metrics', ()))})")
            directions[bool(meta["higher_is_better"][self.metric])] = source
        if len(directions) > 1:
            raise InputError(f"{directions[True]} and {directions[False]} disagree on whether a higher {self.metric} "
                             "is better")
        return replace(self, higher_is_better=next(iter(directions)))

    def of_values(self, values: np.ndarray) -> Scale:
        """The scale of the paired values: whether every score lies in [0, 1] (differences then shown in points);
        loss sums are none."""
        return self if self.log_ratio else replace(self, proportion=bool(np.all((values >= 0.0) & (values <= 1.0))))

    # --- reading a difference ---

    def check_sesoi(self, sesoi: float) -> float:
        """A smallest effect of interest on this scale: a positive difference in the metric's units."""
        if not (isinstance(sesoi, (int, float)) and math.isfinite(sesoi) and sesoi > 0.0):
            raise ParameterError("sesoi", f"a smallest effect of interest must be a positive difference in the "
                                 f"metric's units (0.01 = one point of accuracy), got {sesoi}")
        return float(sesoi)

    def equivalence_bounds(self, sesoi: float) -> tuple[float, float]:
        """The equivalence region of the two one-sided tests, on the scale the tests are run on."""
        return (-sesoi, sesoi)

    def effect_size(self, effect: float) -> float:
        """An effect to plan for, as a size on D's scale."""
        return abs(effect)

    def tested(self, fit: SeedDocumentResult) -> tuple[float, float]:
        """The estimate and standard error the equivalence tests are run on."""
        return fit.estimate, fit.se

    interval_of: ClassVar[str] = ""  # what an interval is of, in a verdict's explanation

    def change(self, fit: SeedDocumentResult) -> str:
        """The change a verdict's explanation states beside D ("ΔP −2.03%"), if any."""
        return ""

    def format_sesoi(self, sesoi: float) -> str:
        """"±1.00 points" (a proportion's difference), "±0.05"."""
        return f"±{fmt.format_difference(sesoi, self.proportion, signed=False)}"

    @property
    def quantity(self) -> str:
        """What a SESOI bounds, after "within ±X": "of acc"."""
        return f"of {self.metric}"

    def format_interval(self, interval: tuple[float, float]) -> str:
        """An interval of D as the scale prints it."""
        return fmt.format_difference_interval(interval, self.proportion)

    def format_estimate(self, difference: float) -> str:
        """D as the scale prints an estimate: "+1.20 points"."""
        return fmt.format_difference(difference, self.proportion)

    format_d = format_estimate  # D itself, as a figure prints it

    def format_size(self, difference: float, unit: str) -> str:
        """|D| with its unit: "1.23 points"."""
        return fmt.format_difference(abs(difference), self.proportion, signed=False)


UNITS = ("auto", "token", "byte")


@dataclass(frozen=True)
class PerplexityScale(Scale):
    """Perplexity: the documents of loss files, each weighted by its targets (or UTF-8 bytes, per byte); D a
    difference of mean log-losses read as ΔP (log(1 + ΔP) ≈ D, a SESOI a relative ΔP), lower is better."""

    metric: str = "loss"
    higher_is_better: bool = False
    log_ratio: bool = True

    schema: ClassVar[str] = "loss"
    files: ClassVar[str] = "loss files"
    family: ClassVar[str | None] = "eval_set"
    family_noun: ClassVar[str] = "evaluation set"
    # `scoring`: what each document's loss is conditioned on: "context" (an evaluation set's window targets given the
    # window's context), "document" (a whole document of a corpus), "bos" (a harness rolling log-likelihood, the text
    # given the BOS token alone); losses scored differently are not of one quantity.
    provenance: ClassVar[tuple[str, ...]] = ("eval_set", "eval_set_sha256", "tokenizer_sha256", "scoring")
    # `size`: the model's sizes from its config; `step`: the updates it was trained for
    setup: ClassVar[tuple[str, ...]] = ("eval_set", "eval_set_sha256", "tokenizer_sha256", "scoring", "size", "step")
    estimate_name: ClassVar[str] = "nll_diff_mean"
    figures: ClassVar[str] = "perplexity"
    weight_name: ClassVar[str | None] = "n_targets"
    value_column: ClassVar[str | None] = "loss_sum"
    unused_options: ClassVar[tuple[str, ...]] = ()
    duplicate_hint: ClassVar[str] = " (select one evaluation set)"

    def unit_of(self, metas: Sequence[dict], unit: str, allow_mismatch: Sequence[str]) -> str:
        """"byte", or per target ("token" asked or chosen) what the files count as targets (`target_unit`: "token",
        "word", or "byte" for a per-byte import). `auto` compares per byte when the runs' tokenizers
        (`tokenizer_sha256`) or target units differ, else per target; "token" across tokenizers is refused unless
        `allow_mismatch` holds tokenizer_sha256."""
        if unit not in UNITS:
            raise ParameterError("unit", f"must be one of {', '.join(UNITS)} (got {unit!r})")
        target_units = {str(meta.get("target_unit") or "token") for meta in metas}
        differ = len(_tokenizers(metas)) > 1 or len(target_units) > 1
        if unit == "auto":
            unit = "byte" if differ else "token"
        elif unit == "token" and differ and "tokenizer_sha256" not in allow_mismatch:
            raise ParameterError("unit", "the runs were scored with different tokenizers or target units, so "
                                 "per-token losses are not comparable; compare per byte ({unit} byte) or force it "
                                 "with {allow_mismatch} tokenizer_sha256", ("allow_mismatch",), leading=False)
        if unit == "token" and len(target_units) == 1:
            return target_units.pop()
        return unit

    def refuse(self, name: str, carrying: Sequence[tuple[str, object]], text: str) -> None:
        """An arm evaluated on several sets: the inputs mix them, and the user chooses one."""
        if name == "eval_set" and len({(arm, str(value)) for arm, value in carrying}) > len(
                {arm for arm, _ in carrying}):
            sets = ", ".join(sorted({str(value) for _, value in carrying}))
            raise ParameterError("eval_set", f"{text}; the inputs hold several evaluation sets: choose one with "
                                 f"{{eval_set}} ({sets})", leading=False)

    def run_mean(self, units: pd.DataFrame, unit: str) -> float:
        """The run's loss per target (or per byte)."""
        return float(units["loss_sum"].sum() / units["n_bytes" if unit == "byte" else "n_targets"].sum())

    def weights(self, units: Sequence[pd.DataFrame], sources: Sequence[str], rows: Sequence[np.ndarray],
                doc_ids: np.ndarray, unit: str) -> tuple[np.ndarray, pd.DataFrame]:
        """Each document's targets (per byte: its UTF-8 bytes), and its domain and bytes; each must be the same in
        every run that records it."""
        per_byte = unit == "byte"
        lacking = [source for frame, source in zip(units, sources) if per_byte and "n_bytes" not in frame.columns]
        if lacking:
            raise InputError(f"{lacking[0]}: no n_bytes column; a per-byte comparison needs the UTF-8 bytes of "
                             "every document's target text")
        columns = ("domain", "n_bytes") if per_byte else ("n_targets", "domain", "n_bytes")
        per_document = {column: _agreed_column(column, units, sources, rows, doc_ids) for column in columns}
        denominator = per_document["n_bytes"] if per_byte else per_document.pop("n_targets")
        assert denominator is not None  # every loss file has n_targets; every run has n_bytes, checked above
        if per_byte and not np.all(denominator > 0):
            raise InputError(f"document {doc_ids[int(np.argmin(denominator))]}: n_bytes is 0; a per-byte comparison "
                             "needs the bytes of every document's target text")
        return (denominator.astype(np.int64),
                pd.DataFrame({column: values for column, values in per_document.items() if values is not None}))

    def check_sesoi(self, sesoi: float) -> float:
        """A relative ΔP in (0, 1)."""
        return check_open_unit("sesoi", sesoi)

    def equivalence_bounds(self, sesoi: float) -> tuple[float, float]:
        return (math.log1p(-sesoi), math.log1p(sesoi))

    def effect_size(self, effect: float) -> float:
        """|log(1 + ΔP)| of a relative ΔP."""
        return abs(math.log1p(effect))

    def tested(self, fit: SeedDocumentResult) -> tuple[float, float]:
        """log(1 + ΔP) and its standard error."""
        assert fit.log_ratio is not None and fit.log_ratio_se is not None  # a fit on the log scale
        return fit.log_ratio, fit.log_ratio_se

    interval_of: ClassVar[str] = " for D"

    def change(self, fit: SeedDocumentResult) -> str:
        assert fit.delta_p is not None  # a fit on the log scale
        return f"ΔP {fmt.format_delta_p(fit.delta_p)}"

    def format_sesoi(self, sesoi: float) -> str:
        """"±1.00%"."""
        return f"±{fmt.format_percent(sesoi, 2)}"

    @property
    def quantity(self) -> str:
        return "in PPL"

    def format_interval(self, interval: tuple[float, float]) -> str:
        return fmt.format_interval(*interval)

    def format_estimate(self, difference: float) -> str:
        """"ΔP −2.03%" (exp(D) − 1)."""
        return f"ΔP {fmt.format_delta_p(math.expm1(difference))}"

    def format_d(self, difference: float) -> str:
        return fmt.format_nll_diff(difference)

    def format_size(self, difference: float, unit: str) -> str:
        """"0.020591 nats per token", "0.029705 bits per byte"."""
        size = abs(difference)
        if unit == "byte":
            return f"{size / math.log(2.0):.6f} bits per byte"
        return f"{fmt.format_nll_diff(size)} nats per {unit}"


def _tokenizers(metas: Sequence[dict]) -> set[str]:
    return {str(meta["tokenizer_sha256"]) for meta in metas if meta.get("tokenizer_sha256")}


def agreed_values(column: str, units: Sequence[pd.DataFrame], rows: Sequence[np.ndarray], *, as_text: bool = False
                  ) -> tuple[np.ndarray | None, tuple[int, int, np.ndarray, np.ndarray] | None]:
    """A per-unit column in the paired order, of the first run that records it, and where another run records it
    differently: (the first run, the other, the differing positions, the other's values), or None."""
    carrying = [k for k, frame in enumerate(units) if column in frame.columns]
    if not carrying:
        return None, None

    def of(k: int) -> np.ndarray:
        series = units[k][column]
        return (series.astype(str) if as_text else series).to_numpy()[rows[k]]

    first = carrying[0]
    ours = of(first)
    for k in carrying[1:]:
        if rows[k] is rows[first] and units[k][column].equals(units[first][column]):
            continue  # rows in the same order, values equal
        theirs = of(k)
        differ = np.flatnonzero(ours != theirs)
        if differ.size:
            return ours, (first, k, differ, theirs)
    return ours, None


def _agreed_column(column: str, units: Sequence[pd.DataFrame], sources: Sequence[str], rows: Sequence[np.ndarray],
                   doc_ids: np.ndarray) -> np.ndarray | None:
    """A per-document column (in `doc_ids` order) that must be the same in every run carrying it; None when no run
    does."""
    ours, different = agreed_values(column, units, rows)
    if different is not None:
        first, other, differ, theirs = different
        assert ours is not None  # a column some run records
        shown = ", ".join(f"{doc_ids[i]}: {ours[i]} vs {theirs[i]}" for i in differ[:_SHOWN])
        raise InputError(f"{column} disagrees for {differ.size} documents between {sources[first]} and "
                         f"{sources[other]} (first: {shown})")
    return ours


PERPLEXITY = PerplexityScale()


class MetricScale(Scale):
    """A downstream task's metric: item scores of one task, weighted equally; differences in the metric's units (0.01 =
    one point of accuracy)."""

    # a frozen dataclass by inheritance: its fields and their defaults (acc, higher is better) are the base's
    schema: ClassVar[str] = "items"
    noun: ClassVar[str] = "item"
    files: ClassVar[str] = "item scores"
    family: ClassVar[str | None] = "task"
    family_noun: ClassVar[str] = "task"
    # the harness's record of each item (document, prompt, target) and of the task's configuration
    unit_hashes: ClassVar[tuple[str, ...]] = ("doc_hash", "prompt_hash", "target_hash")
    provenance: ClassVar[tuple[str, ...]] = ("task_config_sha256", "n_shot")
    setup: ClassVar[tuple[str, ...]] = ("task", "n_shot", "task_config_sha256")
    suite: ClassVar[bool] = True


class ScoreScale(Scale):
    """Any per-document score from any pipeline (a judge model's, pass@k, BLEU, a reward model's): the base's
    reading, as a task's metric with no task; its direction said once by the caller or the file."""


def scale_from_dict(content: dict) -> Scale:
    """The scale a ledger row or a design file records (its `asdict`): the perplexity scale, or a metric's."""
    return (PerplexityScale if content["log_ratio"] else MetricScale)(**content)


# The scale of each kind of run, by the schema its files are read with (`io.runfiles.RunSchema.name`).
SCALES: dict[str, type[PerplexityScale] | type[MetricScale] | type[ScoreScale]] = {
    scale.schema: scale for scale in (PerplexityScale, MetricScale, ScoreScale)}
