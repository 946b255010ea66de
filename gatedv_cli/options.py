"""The options several `gatedv` commands share, and how a command prints its result.

A command parameter carries the library's name for what it sets (`n_resamples` behind `--samples`), so that a
library `ParameterError` is reported under the flag (`gatedv_cli.group.flag_of`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

import typer
from typer.core import TyperCommand

from gatedv_cli.click_api import click
from gatedv_stats import __version__
from gatedv_stats.core.errors import InputError

if TYPE_CHECKING:
    from trainer.run.recipe import Runtime


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gatedv-stats {__version__}")
        raise typer.Exit()


VERSION = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version.")
JSON = typer.Option(False, "--json", help="Print one JSON object.")
DEVICE = typer.Option("auto", "--device", help="auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps.")


class Result(Protocol):
    """What a library function returns: a JSON-ready dict and a text summary."""

    def to_dict(self) -> dict: ...

    def summary(self) -> str: ...


def emit(result: Result, as_json: bool, extra: dict | None = None) -> None:
    """A result's `summary()`, or its `to_dict()` (plus `extra` keys) as strict JSON (non-finite numbers become
    null)."""
    from gatedv_stats.io.jsonout import strict_json

    typer.echo(strict_json({**result.to_dict(), **(extra or {})}) if as_json else result.summary())


def warn(warnings: Iterable[str]) -> None:
    """One `warning: …` line on stderr per warning."""
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


# --- the statistics commands: loss files in, comparisons out ---

EVAL_SET = typer.Option(None, "--eval-set", help="Use only runs on this evaluation set (dev, heldout, ...).",
                        show_default=False)
ALLOW_UNPAIRED = typer.Option(False, "--allow-unpaired", help="Drop seeds present in one arm only.")
SKIP_UNREADABLE = typer.Option(False, "--skip-unreadable", help="A file found in a directory that looks like a "
                               "loss file but cannot be read: warn and leave it out instead of failing.")


class ManyFilesCommand(TyperCommand):
    """Lets `--baseline A B --variant C D` stand for `--baseline A --baseline B --variant C --variant D`."""

    many_value_options = ("--baseline", "--variant")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
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
PAIR_TABLES = typer.Argument(None, metavar="LONG_TABLE", help="Long tables or directories holding both arms (name "
                             "them with --baseline-arm / --variant-arm).", show_default=False)
BASELINE_FILES = typer.Option(None, "--baseline", metavar="FILE...", help="Baseline loss files (or directories).",
                              show_default=False)
VARIANT_FILES = typer.Option(None, "--variant", metavar="FILE...", help="Variant loss files (or directories).",
                             show_default=False)
BASELINE_ARM = typer.Option(None, "--baseline-arm", help="Baseline arm name (selects runs).", show_default=False)
VARIANT_ARM = typer.Option(None, "--variant-arm", help="Variant arm name (selects runs).", show_default=False)

ALLOW_MISMATCH = typer.Option(None, "--allow-mismatch", metavar="FIELD", show_default=False,
                              help="Compare runs whose files record a different FIELD (eval_set, eval_set_sha256, "
                              "tokenizer_sha256, scoring) anyway, with a warning. Repeatable.")
UNIT = typer.Option("auto", "--unit", help="auto (per byte of the same text when the arms' tokenizers or target "
                    "units differ, else per token), token or byte.")
SESOI = typer.Option(None, "--sesoi", show_default=False, help="Smallest effect size of interest, a relative ΔP "
                     "(0.01 = 1%): the verdict can then say 'equivalent' (two one-sided tests).")
CLUSTER = typer.Option(None, "--cluster", metavar="COLUMN", show_default=False, help="Treat documents that share "
                       "this document column (e.g. domain) as one sampled unit: clusters are resampled and carry "
                       "the document variance.")
N_RESAMPLES = typer.Option(2000, "--samples", "--n-resamples", help="Bootstrap resamples (n_resamples).")
CONFIDENCE_LEVEL = typer.Option(0.95, "--level", "--confidence-level",
                                help="Confidence level of every interval (confidence_level).")
SEED = typer.Option(0, "--seed", help="Seed of every resampling RNG (an integer from 0 to 2**63 - 1).")


# --- a sequential design over seed pairs (decide, sweep --until-decided): fixed at the first look ---

MAX_SEEDS = typer.Option(None, "--max-seeds", metavar="K", show_default=False, help="The budget of seed pairs, the "
                         "last look (a new design needs it; sweep --until-decided: the grid's seeds by default).")
DESIGN_SESOI = typer.Option(None, "--sesoi", show_default=False, help="Smallest effect of interest (a relative ΔP, "
                            "0.01 = 1%; with --metric a difference in the metric's units): the futility boundary and "
                            "'equivalent'.")
DESIGN_ALPHA = typer.Option(None, "--alpha", show_default=False, help="Two-sided level of the design (default 0.05), "
                            "α/2 spent in each direction; with --ledger, the ledger's level (its α).")
DESIGN_POWER = typer.Option(None, "--power", show_default=False, help="Target power at --sesoi (default 0.8).")
SPENDING = typer.Option(None, "--spending", show_default=False, help="α-spending function: obf (O'Brien–Fleming "
                        "type, the default) or pocock.")
NOISE_FLOOR = typer.Option(None, "--noise-floor", metavar="FLOOR.json", show_default=False, help="The setup's noise "
                           "floor (gatedv noise-floor): its seed variance gives one seed pair a verdict and is pooled "
                           "with the study's own from two on; a floor of another setup is refused (--allow-mismatch "
                           "FIELD uses it anyway).")
LEDGER = typer.Option(None, "--ledger", metavar="LEDGER", show_default=False, help="A research ledger (gatedv "
                      "ledger): a new design runs at the level the ledger gives its candidate, one-sided, and enters "
                      "it at its stop with its stage-wise p-value, so that 'stop: better' is a keep.")
PROCEDURE = typer.Option(None, "--procedure", show_default=False, help="The ledger's online procedure: lond (the "
                         "default; false discovery rate under the positive dependence of candidates sharing a "
                         "reference's runs), e-lond (FDR under any dependence, e-values; needs --sesoi), addis, "
                         "lord++, saffron (FDR, for independent tests) or alpha-spending (family-wise error rate, "
                         "under any dependence); fixed when the ledger is created.")
NOTE = typer.Option(None, "--note", metavar="TEXT", show_default=False, help="What the candidate changes.")
METRIC = typer.Option(None, "--metric", metavar="NAME", show_default=False, help="Compare downstream-task "
                      "item-score files on this metric (acc, acc_norm, exact_match, ...), or score tables (arm, seed, "
                      "doc_id and a NAME column from any pipeline), instead of loss files; --sesoi is then a "
                      "difference in the metric's units (0.01 = one point of accuracy), --cluster a grouping column "
                      "(subtask), --allow-mismatch doc_hash, prompt_hash, target_hash, task_config_sha256 or n_shot "
                      "(item scores), eval_set or eval_set_sha256 (score tables).")
HIGHER_IS_BETTER = typer.Option(None, "--higher-is-better/--lower-is-better", show_default=False,
                                help="Which way the --metric score is better, where its files do not record it (a "
                                "score table's metadata higher_is_better).")


# --- the model family, training and evaluation ---

KNOBS = typer.Option(None, "--knob", metavar="KNOB=VALUE", show_default=False, help="Set a model knob (repeatable; "
                     "`gatedv params --knobs` lists them). A new --variant name is the size's baseline plus its "
                     "knobs; a preset takes only knobs that leave it as it is. d_ff=matched sizes the ffn kind to "
                     "the parameter count of the size's SwiGLU (the 2/3 rule); without it d_ff stays the size's.")


@contextlib.contextmanager
def knob_flag() -> Iterator[None]:
    """A knob value that the chosen size's model cannot take, reported under --knob."""
    from trainer.model.knobs import KnobError

    try:
        yield
    except KnobError as error:
        raise InputError(f"--knob {error}") from None


SIZE_KNOBS = typer.Option(None, "--size-knob", metavar="KEY=VALUE", show_default=False, help="Set a size knob "
                          "(repeatable; `gatedv params --size-knobs` lists them): depth, width, heads, d_ff, context, "
                          "vocabulary, RoPE base, and the recipe's batch, updates, warmup, lr. A new --config name is "
                          "its base (default small) plus its knobs.")
GRAD_ACCUM = typer.Option(1, "--grad-accum", help="Split each update's batch into K micro-batches (less memory; the "
                          "same update to float tolerance).")
CHECKPOINT_ACTIVATIONS = typer.Option(False, "--checkpoint-activations", help="Keep only each block's input and "
                                      "recompute the block in the backward pass (less memory, the same numbers).")
TF32 = typer.Option(False, "--tf32", help="Allow TF32 matmuls (CUDA).")
BF16 = typer.Option(False, "--bf16", help="bf16 autocast for the forward passes.")


def runtime(device: str, tf32: bool, bf16: bool, compile_model: bool = False, grad_accum: int = 1,
            checkpoint_activations: bool = False) -> Runtime:
    """How runs execute, from the --device, --tf32, --bf16, --compile, --grad-accum and --checkpoint-activations
    flags."""
    from trainer.run.device import Precision
    from trainer.run.recipe import Runtime

    if grad_accum < 1:
        raise InputError(f"--grad-accum: must be at least 1, got {grad_accum}")
    return Runtime(device=device, precision=Precision(tf32=tf32, bf16=bf16), compile=compile_model,
                   grad_accum=grad_accum, checkpoint_activations=checkpoint_activations)
