"""The `gatedv` command line: a thin typer layer over `gatedv_stats` and `trainer`.

Every command turns bad input into one line on stderr and a non-zero exit (see `_Group`); a library
`ParameterError` is reported under the flag of the command parameter of the same name. The work itself lives
in importable functions; each command prints a result's `summary()` or, with `--json`, its `to_dict()`.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

import typer
from typer.core import TyperCommand, TyperGroup

try:  # recent typer carries its own copy of click, whose exceptions these are
    from typer._click import exceptions as _click_errors
except ImportError:
    from click import exceptions as _click_errors

from gatedv_stats import __version__
from gatedv_stats.errors import InputError, ParameterError, RunFailure


INTERRUPTED = ("every file already written is kept: run the same command again to go on (a run resumes from its "
               "last checkpoint; gatedv train: with --resume)")


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`, a job's time limit) taken as Ctrl-C is: the command stops, its workers with it."""


def _terminate(signum: int, frame) -> None:
    raise Terminated


class _Group(TyperGroup):
    """Turns an `InputError` raised anywhere below a command into one `error: <message>` line and exit 2 (a
    `RunFailure`: exit 4, Ctrl-C: exit 130); NumPy floating-point faults (overflow, division by zero, invalid
    values) raise instead of warning and end as bad input does."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        """Click's entry point, with a usage error (an unknown option, a bad value, a missing argument) as one
        `error:` line too, naming the command's --help."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            status = super().main(*args, standalone_mode=False, **kwargs)
        except _click_errors.NoArgsIsHelpError as error:
            error.ctx.get_help()  # printed by typer's formatter
            sys.exit(error.exit_code)
        except _click_errors.ClickException as error:
            where = f" (see '{error.ctx.command_path} --help')" if getattr(error, "ctx", None) else ""
            typer.echo(f"error: {error.format_message().rstrip('.')}{where}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta["gatedv.command"] = command  # for naming a flag after the command has failed
        return name, command, rest

    def invoke(self, ctx: typer.Context):
        import numpy as np

        in_main_thread = threading.current_thread() is threading.main_thread()  # where handlers can be set
        previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
        try:
            with np.errstate(divide="raise", over="raise", invalid="raise"), _warning_skipped_on_failure():
                return super().invoke(ctx)
        except FloatingPointError as error:
            typer.echo(f"error: numerical failure ({error}): the inputs hold values too extreme to compute with",
                       err=True)
            raise typer.Exit(2) from None
        except ParameterError as error:
            typer.echo(f"error: {_flag(ctx.meta.get('gatedv.command'), error.parameter)}: {error.detail}", err=True)
            raise typer.Exit(2) from None
        except InputError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None
        except RunFailure as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(4) from None
        except KeyboardInterrupt as interruption:
            stopped_by = signal.SIGTERM if isinstance(interruption, Terminated) else signal.SIGINT
            typer.echo(f"error: interrupted ({stopped_by.name}); {INTERRUPTED}", err=True)
            raise typer.Exit(128 + stopped_by) from None
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _flag(command: TyperCommand | TyperGroup | None, parameter: str) -> str:
    """The option that sets a library parameter: command parameters carry the library's names."""
    commands = [command] if command is not None else []
    commands += list(getattr(command, "commands", {}).values())  # a group's subcommands
    for candidate in commands:
        for param in candidate.params:
            if param.name == parameter and param.param_type_name == "option":
                return param.opts[0]
    return parameter


app = typer.Typer(
    cls=_Group,
    name="gatedv",
    help="Paired comparisons of Transformer variants: train, evaluate, bootstrap, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gatedv-stats {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """gatedv: honest statistics for paired Transformer ablations."""


def _emit(result, as_json: bool, extra: dict | None = None) -> None:
    """A result's `summary()`, or its `to_dict()` (plus `extra` keys) as strict JSON (non-finite numbers become
    null)."""
    from gatedv_stats.io.jsonout import strict_json

    typer.echo(strict_json({**result.to_dict(), **(extra or {})}) if as_json else result.summary())


_SKIPPED: list = []  # unreadable files the running command passed over (--skip-unreadable)


def _skipped_files(skip_unreadable: bool) -> list | None:
    """The list that reading fills with the unreadable files it passes over (None: fail on them instead)."""
    return _SKIPPED if skip_unreadable else None


def _warn_skipped(skipped: list | None) -> dict:
    """One stderr warning per unreadable file passed over; returns the JSON key listing them ({} without
    --skip-unreadable)."""
    if skipped is None:
        return {}
    unique = list(dict.fromkeys(skipped))
    skipped.clear()  # warned once
    for file in unique:
        typer.echo(f"warning: {file.warning()}", err=True)
    return {"skipped_unreadable": [file.to_dict() for file in unique]}


@contextlib.contextmanager
def _warning_skipped_on_failure() -> Iterator[None]:
    """A command that fails after passing over unreadable files says which, before its error line."""
    try:
        yield
    except BaseException:
        _warn_skipped(_SKIPPED)
        raise
    finally:
        _SKIPPED.clear()


# Options shared by several commands.
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_DEVICE = typer.Option("auto", "--device", help="auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps.")
_EVAL_SET = typer.Option(None, "--eval-set", help="Use only runs on this evaluation set (dev, heldout, ...).",
                         show_default=False)
_ALLOW_UNPAIRED = typer.Option(False, "--allow-unpaired", help="Drop seeds present in one arm only.")
_SKIP_UNREADABLE = typer.Option(False, "--skip-unreadable", help="A file found in a directory that looks like a "
                                "loss file but cannot be read: warn and leave it out instead of failing.")


# --- statistics: loss files in, comparisons out ---


class _ManyFilesCommand(TyperCommand):
    """Lets `--baseline A B --variant C D` stand for `--baseline A --baseline B --variant C --variant D`."""

    many_value_options = ("--baseline", "--variant")

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        expanded: list[str] = []
        option, has_value = None, False
        for arg in args:
            if arg in self.many_value_options:
                option, has_value = arg, False
            elif arg.startswith("-"):
                option = None
            elif option is not None:
                if has_value:
                    expanded.append(option)
                has_value = True
            expanded.append(arg)
        return super().parse_args(ctx, expanded)


# The two ways to name a baseline/variant pair, shared by `bootstrap` and `analyze`.
_PAIR_TABLES = typer.Argument(None, metavar="LONG_TABLE", help="Long tables or directories holding both arms (name "
                              "them with --baseline-arm / --variant-arm).", show_default=False)
_BASELINE_FILES = typer.Option(None, "--baseline", metavar="FILE...", help="Baseline loss files (or directories).",
                               show_default=False)
_VARIANT_FILES = typer.Option(None, "--variant", metavar="FILE...", help="Variant loss files (or directories).",
                              show_default=False)
_BASELINE_ARM = typer.Option(None, "--baseline-arm", help="Baseline arm name (selects runs).", show_default=False)
_VARIANT_ARM = typer.Option(None, "--variant-arm", help="Variant arm name (selects runs).", show_default=False)


_ALLOW_MISMATCH = typer.Option(None, "--allow-mismatch", metavar="FIELD", show_default=False,
                               help="Compare runs whose files record a different FIELD (eval_set, eval_set_sha256, "
                               "tokenizer_sha256) anyway, with a warning. Repeatable.")
_UNIT = typer.Option("auto", "--unit", help="auto (per byte of the same text when the arms' tokenizers or target "
                     "units differ, else per token), token or byte.")
_SESOI = typer.Option(None, "--sesoi", show_default=False, help="Smallest effect size of interest, a relative ΔP "
                      "(0.01 = 1%): the verdict can then say 'equivalent' (two one-sided tests).")
_CLUSTER = typer.Option(None, "--cluster", metavar="COLUMN", show_default=False, help="Treat documents that share "
                        "this document column (e.g. domain) as one sampled unit: clusters are resampled and carry "
                        "the document variance.")


def _pairing(allow_unpaired: bool, allow_mismatch: list[str] | None, unit: str) -> dict:
    """The pairing options every statistics command passes on."""
    return {"allow_unpaired": allow_unpaired, "allow_mismatch": tuple(allow_mismatch or ()), "unit": unit}


_N_RESAMPLES = typer.Option(2000, "--samples", "--n-resamples", help="Bootstrap resamples (n_resamples).")
_CONFIDENCE_LEVEL = typer.Option(0.95, "--level", "--confidence-level",
                                 help="Confidence level of every interval (confidence_level).")
_SEED = typer.Option(0, "--seed", help="Seed of every resampling RNG (an integer from 0 to 2**63 - 1).")


@app.command("bootstrap", cls=_ManyFilesCommand)
def bootstrap_command(
    tables: list[str] = _PAIR_TABLES,
    baseline: list[str] = _BASELINE_FILES,
    variant: list[str] = _VARIANT_FILES,
    baseline_arm: str = _BASELINE_ARM,
    variant_arm: str = _VARIANT_ARM,
    eval_set: str = _EVAL_SET,
    n_resamples: int = _N_RESAMPLES,
    confidence_level: float = _CONFIDENCE_LEVEL,
    seed: int = _SEED,
    method: str = typer.Option("percentile", "--method", help="Models-fixed interval: percentile or bca."),
    sesoi: float = _SESOI,
    cluster: str = _CLUSTER,
    allow_unpaired: bool = _ALLOW_UNPAIRED,
    allow_mismatch: list[str] = _ALLOW_MISMATCH,
    unit: str = _UNIT,
    skip_unreadable: bool = _SKIP_UNREADABLE,
    as_json: bool = _JSON,
) -> None:
    """The verdict on two arms (seeds and documents sampled), then the paper's ΔP, D with its document bootstrap
    (models fixed) and win rate."""
    from gatedv_stats.pairing import load_paired
    from gatedv_stats.stats.comparison import compare

    skipped = _skipped_files(skip_unreadable)
    paired = load_paired(tables=tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                         variant_arm=variant_arm, eval_set=eval_set, skipped=skipped,
                         **_pairing(allow_unpaired, allow_mismatch, unit))
    result = compare(paired, n_resamples=n_resamples, confidence_level=confidence_level, seed=seed, method=method,
                     cluster=cluster, sesoi=sesoi, progress=None)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    _emit(result, as_json, _warn_skipped(skipped))


@app.command("analyze", cls=_ManyFilesCommand)
def analyze_command(
    tables: list[str] = _PAIR_TABLES,
    baseline: list[str] = _BASELINE_FILES,
    variant: list[str] = _VARIANT_FILES,
    baseline_arm: str = _BASELINE_ARM,
    variant_arm: str = _VARIANT_ARM,
    eval_set: str = _EVAL_SET,
    n_resamples: int = _N_RESAMPLES,
    confidence_level: float = _CONFIDENCE_LEVEL,
    seed: int = _SEED,
    n_permutations: int = typer.Option(10_000, "--permutations", help="Monte Carlo sign vectors of the permutation "
                                       "test (exact up to 20 documents)."),
    by: list[str] = typer.Option(None, "--by", help="Break D down by this document column (domain, n_targets, "
                                 "n_bytes; numeric columns in quantile bins). Repeatable.", show_default=False),
    bins: int = typer.Option(4, "--bins", help="Quantile bins of a numeric --by column."),
    min_docs: int = typer.Option(5, "--min-docs", help="Groups with fewer documents are pooled into '(other)'."),
    sesoi: float = _SESOI,
    cluster: str = _CLUSTER,
    allow_unpaired: bool = _ALLOW_UNPAIRED,
    allow_mismatch: list[str] = _ALLOW_MISMATCH,
    unit: str = _UNIT,
    skip_unreadable: bool = _SKIP_UNREADABLE,
    as_json: bool = _JSON,
) -> None:
    """Everything about one pair of arms: the verdict, seed-level tests, permutation test, BCa, bits per byte and
    breakdowns with multiplicity-adjusted intervals."""
    from gatedv_stats.analysis.pair import analyze
    from gatedv_stats.pairing import load_paired

    skipped = _skipped_files(skip_unreadable)
    paired = load_paired(tables=tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                         variant_arm=variant_arm, eval_set=eval_set, skipped=skipped,
                         **_pairing(allow_unpaired, allow_mismatch, unit))
    result = analyze(paired, n_resamples=n_resamples, confidence_level=confidence_level, seed=seed,
                     n_permutations=n_permutations, by=tuple(by or ()), bins=bins, min_docs=min_docs,
                     cluster=cluster, sesoi=sesoi, progress=None)
    for warning in result.comparison.warnings:
        typer.echo(f"warning: {warning}", err=True)
    _emit(result, as_json, _warn_skipped(skipped))


@app.command("arms")
def arms_command(
    files: list[str] = typer.Argument(..., help="Loss files, long tables or directories holding every arm."),
    reference: str = typer.Option(..., "--reference", help="The arm every other arm is compared with."),
    eval_set: str = _EVAL_SET,
    alpha: float = typer.Option(0.05, "--alpha", help="Level at which adjusted p-values are marked."),
    n_resamples: int = typer.Option(10_000, "--permutations", help="Monte Carlo sign vectors per permutation test."),
    seed: int = _SEED,
    sesoi: float = _SESOI,
    cluster: str = _CLUSTER,
    allow_unpaired: bool = _ALLOW_UNPAIRED,
    allow_mismatch: list[str] = _ALLOW_MISMATCH,
    unit: str = _UNIT,
    skip_unreadable: bool = _SKIP_UNREADABLE,
    as_json: bool = _JSON,
) -> None:
    """Every arm against a reference on each evaluation set: verdicts and p-values with Holm and BH adjustment."""
    from gatedv_stats.io.jsonout import strict_json
    from gatedv_stats.io.lossfiles import read_loss_inputs
    from gatedv_stats.pairing import pair_with_reference
    from gatedv_stats.runs import select_runs
    from gatedv_stats.stats.multiple import compare_arms

    skipped = _skipped_files(skip_unreadable)
    runs = select_runs(read_loss_inputs(files, skipped=skipped), eval_set=eval_set)
    pairs = pair_with_reference(runs, reference, **_pairing(allow_unpaired, allow_mismatch, unit))
    result = compare_arms(pairs, alpha=alpha, n_resamples=n_resamples, seed=seed, sesoi=sesoi, cluster=cluster)
    payload = {**result.to_dict(),
               "inputs": [{"arm": pair.variant_arm, "eval_set": pair.eval_set, **pair.sources} for pair in pairs],
               **_warn_skipped(skipped)}
    typer.echo(strict_json(payload) if as_json else result.summary())


@app.command("plan")
def plan_command(
    pilot_files: list[str] = typer.Argument(..., help="Pilot loss files (or long tables / directories) of two arms."),
    effect: float = typer.Option(..., "--effect", help="Relative ΔP to detect, as a fraction (0.02 = 2%)."),
    alpha: float = typer.Option(0.05, "--alpha", help="Two-sided significance level."),
    power: float = typer.Option(0.8, "--power", help="Required power."),
    baseline_arm: str = typer.Option(None, "--baseline-arm", help="Pilot baseline arm (default: 'baseline').",
                                     show_default=False),
    variant_arm: str = typer.Option(None, "--variant-arm", help="Pilot variant arm (default: the other arm).",
                                    show_default=False),
    eval_set: str = _EVAL_SET,
    allow_unpaired: bool = _ALLOW_UNPAIRED,
    allow_mismatch: list[str] = _ALLOW_MISMATCH,
    unit: str = _UNIT,
    skip_unreadable: bool = _SKIP_UNREADABLE,
    as_json: bool = _JSON,
) -> None:
    """Seeds and evaluation documents needed to detect a relative ΔP, from the variance in pilot runs."""
    from gatedv_stats.io.jsonout import strict_json
    from gatedv_stats.io.lossfiles import read_loss_inputs
    from gatedv_stats.pairing import pilot_pair
    from gatedv_stats.stats.planning import plan_from_pilot

    skipped = _skipped_files(skip_unreadable)
    paired = pilot_pair(read_loss_inputs(pilot_files, skipped=skipped), baseline_arm=baseline_arm,
                        variant_arm=variant_arm, eval_set=eval_set, **_pairing(allow_unpaired, allow_mismatch, unit))
    plan = plan_from_pilot(paired, effect, alpha=alpha, power=power)
    for note in paired.notes:
        typer.echo(f"warning: {note}", err=True)
    payload = {**plan.to_dict(), "baseline_arm": paired.baseline_arm, "variant_arm": paired.variant_arm,
               "inputs": paired.sources, **_warn_skipped(skipped)}
    typer.echo(strict_json(payload) if as_json else f"{paired.variant_arm} vs {paired.baseline_arm}\n{plan.summary()}")


# --- the model family ---


_KNOB = typer.Option(None, "--knob", metavar="KNOB=VALUE", show_default=False, help="Set a model knob (repeatable; "
                     "`gatedv params --knobs` lists them). A new --variant name is the size's baseline plus its "
                     "knobs; a preset takes only knobs that leave it as it is. d_ff=matched sizes the ffn kind to "
                     "the parameter count of the size's SwiGLU (the 2/3 rule); without it d_ff stays the size's.")


@app.command("params")
def params_command(
    config: str = typer.Option("all", "--config", help="tiny, small, medium, or all (small and medium)."),
    variant: str = typer.Option("all", "--variant", help="A variant name, or all; a new name with --knob."),
    knob: list[str] = _KNOB,
    list_knobs: bool = typer.Option(False, "--knobs", help="List the knobs, their values and what they do."),
    as_json: bool = _JSON,
) -> None:
    """Table 1: the model setup and the trainable-parameter count of each variant (or of one with --knob)."""
    from gatedv_stats.io.jsonout import strict_json
    from trainer.knobs import knobs_listing, knobs_summary, parse_knob_options
    from trainer.model import CONFIGS, VARIANTS
    from trainer.params import parameter_table

    if list_knobs:
        typer.echo(strict_json(knobs_listing()) if as_json else knobs_summary())
        return
    if config != "all" and config not in CONFIGS:
        raise InputError(f"--config: unknown size {config!r} (choose from {', '.join(CONFIGS)}, all)")
    knobs = parse_knob_options(knob or [])
    if variant == "all" and knobs:
        raise InputError("--knob: needs one --variant name (a new one, or the preset they leave as it is), not all")
    if variant != "all" and variant not in VARIANTS and not knobs:
        raise InputError(f"--variant: unknown variant {variant!r} (choose from {', '.join(VARIANTS)}, all; a new "
                         "name needs at least one --knob)")
    with _knob_flag():
        table = parameter_table(["small", "medium"] if config == "all" else [config],
                                list(VARIANTS) if variant == "all" else [variant], {variant: knobs} if knobs else None)
    _emit(table, as_json)


@contextlib.contextmanager
def _knob_flag() -> Iterator[None]:
    """A knob value that the chosen size's model cannot take, reported under --knob."""
    from trainer.knobs import KnobError

    try:
        yield
    except KnobError as error:
        raise InputError(f"--knob {error}") from None


@app.command("export-hf")
def export_hf_command(
    checkpoint: str = typer.Argument(..., help="A baseline-family checkpoint (gatedv train)."),
    out_dir: str = typer.Argument(..., help="New directory for the transformers LlamaForCausalLM files."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="The tokenizer.json (or data directory) to ship with "
                                  "the model (default: the data directory the run trained on).", show_default=False),
) -> None:
    """Export a checkpoint as a transformers Llama directory (config.json + model.safetensors + its tokenizer)."""
    from gatedv_stats.io.outputs import check_output_dir
    from trainer.hf_export import export_hf

    check_output_dir(out_dir, "OUT_DIR")
    path = export_hf(checkpoint, out_dir, tokenizer=tokenizer)
    note = "" if (path / "tokenizer.json").is_file() else " (no tokenizer: the checkpoint names no data directory; " \
        "add one with --tokenizer)"
    typer.echo(f"wrote {path}{note}")


# --- data ---


@app.command("prepare")
def prepare_command(
    corpus: str = typer.Argument(..., help="builtin:python-stdlib, JSONL / JSONL.gz / Parquet files or a glob, "
                                 "a directory of .txt files, or hf:NAME[:CONFIG]."),
    out: str = typer.Option(..., "--out", help="The data directory to write."),
    eval_docs: int = typer.Option(2048, "--eval-docs", help="Documents per evaluation set (capped when too few "
                                  "domain groups exist)."),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the evaluation-set selection."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="An existing tokenizer.json, or a corpus whose text "
                                  "trains the BPE (default: the training split).", show_default=False),
    vocab_size: int = typer.Option(8192, "--vocab-size", help="Exact BPE vocabulary size."),
    keep_eval_groups: bool = typer.Option(False, "--keep-eval-groups", help="Keep the other documents of the "
                                          "evaluation documents' domain groups in the training store."),
    on_decode_error: str = typer.Option("skip", "--on-decode-error", help="Undecodable documents: skip (and count "
                                        "them in the manifest) or fail."),
    max_docs: int = typer.Option(None, "--max-docs", help="Read only the first N documents of the corpus.",
                                 show_default=False),
    force: bool = typer.Option(False, "--force", help="Prepare again even when the inputs are unchanged."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Tokenizer, domain-disjoint dev / held-out sets and the training token store of a corpus (docs/method.md §3)."""
    import warnings

    from trainer.prepare import PrepareWarning, prepare

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrepareWarning)  # reported below from the manifest
        result = prepare(corpus, out, eval_docs=eval_docs, split_seed=split_seed, tokenizer=tokenizer,
                         vocab_size=vocab_size, remove_eval_groups=not keep_eval_groups,
                         on_decode_error=on_decode_error, max_docs=max_docs, force=force)
    for note in result.manifest["warnings"]:
        typer.echo(f"warning: {note}", err=True)
    _emit(result, as_json)


# --- training and evaluation ---

_TF32 = typer.Option(False, "--tf32", help="Allow TF32 matmuls (CUDA).")
_BF16 = typer.Option(False, "--bf16", help="bf16 autocast for the forward passes.")


def _runtime(device: str, tf32: bool, bf16: bool, compile_model: bool = False):
    from trainer.device import Precision
    from trainer.train import Runtime

    return Runtime(device=device, precision=Precision(tf32=tf32, bf16=bf16), compile=compile_model)


@app.command("train")
def train_command(
    data: str = typer.Option(..., "--data", help="A prepared data directory (gatedv prepare)."),
    config: str = typer.Option("small", "--config", help="Model size: tiny, small or medium."),
    variant: str = typer.Option("baseline", "--variant", help="Variant name (gatedv params lists them); a new "
                                "name with --knob."),
    knob: list[str] = _KNOB,
    seed: int = typer.Option(..., "--seed", help="Training seed: initial weights and training windows."),
    out: str = typer.Option(..., "--out", help="The run directory."),
    lr: float = typer.Option(None, "--lr", help="Peak learning rate (default: the size's confirmation rate).",
                             show_default=False),
    updates: int = typer.Option(None, "--updates", help="Updates (default: the size's, Table 1).", show_default=False),
    warmup: int = typer.Option(None, "--warmup", help="Warmup updates (default: the size's, at most a tenth of the run).",
                               show_default=False),
    eval_every: int = typer.Option(None, "--eval-every", help="Development NLL and checkpoint every k updates.",
                                   show_default=False),
    batch_size: int = typer.Option(8, "--batch-size", help="Global batch (sequences of 256 targets)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its checkpoint."),
    stop_after: int = typer.Option(None, "--stop-after", help="End this call after update N with a checkpoint "
                                   "(continue later with --resume).", show_default=False),
    device: str = _DEVICE,
    tf32: bool = _TF32,
    bf16: bool = _BF16,
    compile_model: bool = typer.Option(False, "--compile", help="torch.compile the model for training."),
    as_json: bool = _JSON,
) -> None:
    """Train one run (docs/method.md §4): checkpoints, development curve, --resume; data parallel under torchrun."""
    import os

    from gatedv_stats.io.outputs import check_output_dir
    from trainer.knobs import parse_knob_options
    from trainer.train import DivergenceError, RunSpec, train

    check_output_dir(out, "--out")
    with _knob_flag():
        spec = RunSpec.make(data, config, variant, seed, lr=lr, updates=updates, warmup=warmup, eval_every=eval_every,
                            batch_size=batch_size, knobs=parse_knob_options(knob or []))
    try:
        result = train(spec, out, runtime=_runtime(device, tf32, bf16, compile_model), resume=resume,
                       stop_after=stop_after)
    except DivergenceError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(3) from None
    if int(os.environ.get("RANK", 0)) == 0:
        _emit(result, as_json)


@app.command("evaluate")
def evaluate_command(
    checkpoint: str = typer.Argument(None, help="A checkpoint written by gatedv train (omitted with --hf).",
                                     show_default=False),
    hf: str = typer.Option(None, "--hf", metavar="MODEL_DIR", help="Instead: a local transformers causal LM "
                           "directory (config, weights, tokenizer; read offline, never downloaded).",
                           show_default=False),
    eval_set: str = typer.Option(None, "--set", help="dev, heldout, or an evaluation-set Parquet file (default: "
                                 "dev).", show_default=False),
    out: str = typer.Option(..., "--out", help="The loss file to write (.parquet)."),
    data: str = typer.Option(None, "--data", help="Data directory (default: the one the run trained on). With --hf: "
                             "a data directory, or any corpus gatedv prepare reads (whole documents).",
                             show_default=False),
    value_act: str = typer.Option(None, "--value-act", help="Override the value activation: linear or silu "
                                  "(the inference-time swap, Table 9).", show_default=False),
    batch_size: int = typer.Option(None, "--batch-size", help="Windows per forward pass (default: 16; 8 with --hf).",
                                   show_default=False),
    dtype: str = typer.Option(None, "--dtype", help="With --hf: float32 (default), bfloat16 or float16.",
                              show_default=False),
    context: int = typer.Option(None, "--context", help="With --hf: the most tokens one forward pass takes "
                                "(default: the model's maximum, at most 4,096).", show_default=False),
    stride: int = typer.Option(None, "--stride", help="With --hf: tokens scored per further window of a long "
                               "sequence (default: half the context); each is scored once, after at least "
                               "context - stride + 1 tokens.", show_default=False),
    arm: str = typer.Option(None, "--arm", help="With --hf: the arm name (default: the model directory's name).",
                            show_default=False),
    seed: int = typer.Option(None, "--seed", help="With --hf: the seed recorded in the loss file (default: 0).",
                             show_default=False),
    device: str = _DEVICE,
    bf16: bool = _BF16,
    as_json: bool = _JSON,
) -> None:
    """Per-document loss sums of a checkpoint or any transformers model (--hf) as a loss file (docs/method.md §5)."""
    from gatedv_stats.io.outputs import check_not_an_input, check_output_file

    check_output_file(out, "--out", suffix=".parquet")
    check_not_an_input(out, [given for given in (checkpoint, eval_set) if given], "--out")
    if (checkpoint is None) == (hf is None):
        raise InputError("give a checkpoint, or --hf MODEL_DIR instead of one")
    if hf is not None:
        not_hf = [flag for flag, given in (("--value-act", value_act), ("--bf16", bf16)) if given]
        if not_hf:
            raise InputError(f"{', '.join(not_hf)}: only with a checkpoint (with --hf use --dtype)")
        _emit(_evaluate_hf(hf, data, out, eval_set=eval_set, arm=arm, seed=seed, dtype=dtype, device=device,
                           context=context, stride=stride, batch_size=batch_size), as_json)
        return
    from trainer.device import Precision
    from trainer.evaluate import EVAL_BATCH_SIZE, evaluate_checkpoint

    only_hf = [flag for flag, given in (("--dtype", dtype), ("--context", context), ("--stride", stride),
                                        ("--arm", arm), ("--seed", seed)) if given is not None]
    if only_hf:
        raise InputError(f"{', '.join(only_hf)}: only with --hf (a checkpoint records its own)")
    if value_act not in (None, "linear", "silu"):
        raise InputError(f"--value-act: {value_act!r} is not linear or silu")
    result = evaluate_checkpoint(checkpoint, eval_set or "dev", out, data_dir=data, value_act=value_act, device=device,
                                 precision=Precision(bf16=bf16),
                                 batch_size=EVAL_BATCH_SIZE if batch_size is None else batch_size)
    _emit(result, as_json)


def _evaluate_hf(hf: str, data: str | None, out: str, *, seed: int | None, dtype: str | None,
                 batch_size: int | None, **options):
    """`gatedv evaluate --hf`: the defaults of the flags that only --hf takes."""
    from trainer.hf_evaluate import DEFAULT_BATCH_SIZE, evaluate_hf

    if data is None:
        raise InputError("--data: --hf needs a data directory or a corpus to score")
    return evaluate_hf(hf, data, out, seed=0 if seed is None else seed, dtype=dtype or "float32",
                       batch_size=DEFAULT_BATCH_SIZE if batch_size is None else batch_size, **options)


# --- results of other tools ---

import_app = typer.Typer(name="import", help="Bring other tools' per-document results in as loss files.",
                         no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.add_typer(import_app, name="import")


@import_app.command("lm-eval")
def import_lm_eval_command(
    samples: list[str] = typer.Argument(..., metavar="SAMPLES.jsonl...", help="Per-sample logs of "
                                        "rolling-loglikelihood (perplexity) tasks (lm_eval --log_samples)."),
    arm: str = typer.Option(..., "--arm", help="The arm name of the evaluated model."),
    seed: int = typer.Option(0, "--seed", help="The model's training seed."),
    out: str = typer.Option(..., "--out", help="The loss file to write (.parquet)."),
    id_field: str = typer.Option("id", "--id-field", help="The logged document's field that holds its id ('' for "
                                 "the harness's doc_id, the position in the task's dataset)."),
    as_json: bool = _JSON,
) -> None:
    """An lm-evaluation-harness sample log as a loss file: per document −log-likelihood (nats), bytes, words."""
    from gatedv_stats.io.lmeval import import_lm_eval
    from gatedv_stats.io.outputs import check_not_an_input, check_output_file

    check_output_file(out, "--out", suffix=".parquet")
    check_not_an_input(out, samples, "--out")
    result = import_lm_eval(samples, out, arm=arm, seed=seed, id_field=id_field)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    _emit(result, as_json)


@app.command("moments")
def moments_command(
    data: str = typer.Option(..., "--data", help="A prepared data directory (gatedv prepare)."),
    config: str = typer.Option("small", "--config", help="Model size: tiny, small or medium."),
    seed: int = typer.Option(..., "--seed", help="Training seed: initial weights and windows."),
    windows: int = typer.Option(128, "--windows", help="Training windows to average over."),
    out: str = typer.Option(None, "--out", help="Also write the coefficients as JSON here.", show_default=False),
    device: str = _DEVICE,
    as_json: bool = _JSON,
) -> None:
    """Moment-matching coefficients (docs/method.md §6): per layer mu_v, sigma_v, mu_phi, sigma_phi at initialisation."""
    from gatedv_stats.io.outputs import check_output_file
    from trainer.data import PreparedData
    from trainer.device import select_device
    from trainer.moments import check_moment_options, compute_moments

    if out is not None:
        check_output_file(out, "--out")
    check_moment_options(windows, seed)
    moments = compute_moments(PreparedData.open(data), config, seed, device=select_device(device), n_windows=windows)
    if out is not None:
        moments.write(out)
    _emit(moments, as_json)


@app.command("sweep")
def sweep_command(
    experiment: str = typer.Argument(..., help="An experiment TOML file (see examples/)."),
    jobs: int = typer.Option(None, "--jobs", help="Runs at a time on this machine, each in its own process on its "
                             "own GPU(s) (default: one per visible GPU, else 1).", show_default=False),
    gpus_per_run: int = typer.Option(1, "--gpus-per-run", help="GPUs per run; K > 1 trains each run data parallel "
                                     "in K processes (torchrun here, K tasks of one job on a cluster; gloo on a CPU)."),
    executor: str = typer.Option("pool", "--executor", help="pool (processes on this machine), slurm (one job per "
                                 "unfinished run, as a job array) or local (the same jobs as local subprocesses)."),
    partition: str = typer.Option(None, "--partition", help="Slurm partition.", show_default=False),
    time_limit: str = typer.Option("24:00:00", "--time", help="Time limit of each job, as Slurm writes it "
                                   "(90, 12:00:00, 2-00:00:00); a longer run is requeued from its last checkpoint."),
    array_parallelism: int = typer.Option(None, "--array-parallelism", help="Slurm jobs of the array running at "
                                          "once (default: all).", show_default=False),
    slurm_options: list[str] = typer.Option(None, "--slurm-option", metavar="KEY=VALUE", help="Extra sbatch "
                                            "option, repeatable (e.g. account=ml, cpus-per-task=8, exclusive).",
                                            show_default=False),
    status: bool = typer.Option(False, "--status", help="Only show each run's state: not started, pending, "
                                "running, interrupted, failed (with its log), unknown, finished or diverged."),
    device: str = _DEVICE,
    tf32: bool = _TF32,
    bf16: bool = _BF16,
    compile_model: bool = typer.Option(False, "--compile", help="torch.compile the models for training."),
    as_json: bool = _JSON,
) -> None:
    """Train and evaluate a grid of variants x learning rates x seeds, here or as cluster jobs; finished runs are
    skipped, interrupted ones resumed from their checkpoint."""
    from gatedv_stats.io.outputs import check_output_dir
    from trainer.sweep import load_experiment, run_experiment

    grid = load_experiment(experiment)
    if not status:
        check_output_dir(grid.out, f"{experiment}: out")
    runtime = _runtime(device, tf32, bf16, compile_model)
    if status or executor != "pool":
        from trainer.cluster import ClusterOptions, experiment_status, submit_experiment

        if status:
            _emit(experiment_status(grid), as_json)
            return
        if jobs is not None:
            raise InputError("--jobs: only with --executor pool (use --array-parallelism on a cluster)")
        options = ClusterOptions(executor, partition, time_limit, gpus_per_run, array_parallelism,
                                 tuple(slurm_options or ()))
        _emit(submit_experiment(grid, options, runtime), as_json)
        return
    if partition or array_parallelism or slurm_options:
        raise InputError("--partition, --array-parallelism, --slurm-option: only with --executor slurm")
    result = run_experiment(grid, jobs=jobs, gpus_per_run=gpus_per_run, runtime=runtime)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    _emit(result, as_json)


@app.command("select-lr")
def select_lr_command(
    experiment: str = typer.Argument(..., help="The experiment TOML file of a finished learning-rate grid."),
    seed: int = typer.Option(None, "--seed", help="Selection seed (default: [select] seed, else the smallest).",
                             show_default=False),
    seeds: str = typer.Option(None, "--seeds", help="Confirmation seeds, comma-separated (default: [select] "
                              "confirm_seeds).", show_default=False),
    out: str = typer.Option(None, "--out", help="The confirmation grid TOML (default: EXPERIMENT-confirm.toml).",
                            show_default=False),
    as_json: bool = _JSON,
) -> None:
    """Per variant, the grid rate with the lowest final development NLL (ties: lower rate); writes the confirmation grid."""
    from pathlib import Path

    from gatedv_stats.io.jsonout import strict_json
    from gatedv_stats.io.outputs import check_not_an_input, check_output_file
    from trainer.sweep import confirmation_experiment, load_experiment, select_learning_rates, write_experiment

    path = Path(experiment).with_name(Path(experiment).stem + "-confirm.toml") if out is None else out
    check_output_file(path, "--out")  # an empty --out is refused, not read as the default
    check_not_an_input(path, [experiment], "--out")
    path = Path(path)
    grid = load_experiment(experiment)
    try:
        confirm_seeds = tuple(int(part) for part in seeds.split(",")) if seeds else ()
    except ValueError:
        raise InputError(f"--seeds: expected comma-separated integers, got {seeds!r}") from None
    selection = select_learning_rates(grid, seed)
    write_experiment(path, confirmation_experiment(grid, selection, seeds=confirm_seeds))
    typer.echo(strict_json({**selection.to_dict(), "confirmation_grid": str(path)}) if as_json
               else f"{selection.summary()}\nwrote {path}")


@app.command("demo")
def demo_command(
    out: str = typer.Option("gatedv-demo", "--out", help="Directory for data, runs and report."),
    corpus: str = typer.Option("builtin:python-stdlib", "--corpus", help="Corpus to prepare into OUT/data when it "
                               "holds no prepared data (any gatedv prepare corpus)."),
    updates: int = typer.Option(None, "--updates", help="Updates per run (default: the tiny recipe's).",
                                 show_default=False),
    seeds: int = typer.Option(3, "--seeds", help="Paired seeds (1..N)."),
    jobs: int = typer.Option(None, "--jobs", help="Runs at a time (default: 2 on a CPU, else 1).", show_default=False),
    device: str = _DEVICE,
    as_json: bool = _JSON,
) -> None:
    """The main job on the embedded default: prepare, train tiny baseline and GatedV, evaluate, bootstrap, report."""
    from gatedv_stats.io.outputs import check_output_dir
    from trainer.demo import run_demo

    check_output_dir(out, "--out")
    _emit(run_demo(out, updates=updates, seeds=seeds, device=device, jobs=jobs, corpus=corpus), as_json)


# --- reports ---


@app.command("report")
def report_command(
    inputs: list[str] = typer.Argument(..., help="Experiment directories, loss files, curve.csv, run.json or "
                                        "bench*.json files.", show_default=False),
    fmt: str = typer.Option(None, "--format", "-f", help="html (one offline file), md or latex (default: as the "
                            "--out file is named, else html).", show_default=False),
    reference: str = typer.Option(None, "--reference", help="Reference arm (default: baseline when present).",
                                  show_default=False),
    out: str = typer.Option(None, "--out", "-o", help="Output file (default: report.<ext> in the single input "
                             "directory, else in the current directory).", show_default=False),
    n_resamples: int = _N_RESAMPLES,
    seed: int = _SEED,
    skip_unreadable: bool = typer.Option(False, "--skip-unreadable", help="A file found in a directory that looks "
                                         "like a loss file but cannot be read: warn, leave it out and list it in the "
                                         "report's provenance instead of failing."),
) -> None:
    """Paper-ready report (tables, figures, provenance) from whatever runs the inputs hold."""
    from pathlib import Path

    from gatedv_stats.analysis.experiment import AnalysisSettings
    from gatedv_stats.report import write_report

    skipped, left_out = _skipped_files(skip_unreadable), []
    path = write_report([Path(given) for given in inputs], out, fmt,
                        AnalysisSettings(reference=reference, n_resamples=n_resamples, seed=seed), skipped=skipped,
                        left_out=left_out)
    _warn_skipped(skipped)
    for note in left_out:
        typer.echo(f"warning: {note}", err=True)
    typer.echo(f"wrote {path}")


# --- cost benchmark ---


@app.command("bench", cls=_ManyFilesCommand)
def bench_command(
    baseline: list[str] = typer.Argument(..., help="Baseline checkpoints, one per seed."),
    variant: list[str] = typer.Option(..., "--variant", metavar="CKPT...", help="Variant checkpoints, one per seed, in the baseline's order."),
    rounds: int = typer.Option(7, "--rounds", help="Alternation rounds R."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed warm-up calls W per round and mode."),
    calls: int = typer.Option(10, "--calls", help="Timed calls K per round and mode."),
    batch: int = typer.Option(8, "--batch", help="Sequences per call (each of the model's seq_len tokens)."),
    device: str = _DEVICE,
    out: str = typer.Option(None, "--out", help="Also write the JSON result here (e.g. EXP/bench.json)."),
    as_json: bool = _JSON,
) -> None:
    """Cost benchmark (paper Table 6, docs/method.md §7): forward and training-step time ratios and peak memory."""
    from gatedv_stats.io.atomic import write_text_atomic
    from gatedv_stats.io.jsonout import strict_json
    from gatedv_stats.io.outputs import check_not_an_input, check_output_file
    from trainer.bench import run_bench
    from trainer.device import select_device

    if out is not None:
        check_output_file(out, "--out")
        check_not_an_input(out, [*baseline, *variant], "--out")
    if batch < 1:
        raise InputError(f"--batch: must be at least 1, got {batch}")
    result = run_bench(baseline, variant, rounds=rounds, warmup=warmup, calls=calls, batch_size=batch,
                       device=select_device(device))
    text = strict_json(result.to_dict())
    if out is not None:
        write_text_atomic(out, text + "\n")
    typer.echo(text if as_json else result.summary())


if __name__ == "__main__":
    app()
