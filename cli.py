"""The `gatedv` command line: every command's name and the function behind it (`gatedv_cli`), over the library
`gatedv_stats` and `trainer`.

Every command turns bad input into one line on stderr and a non-zero exit (`gatedv_cli.group.CommandGroup`); a
library `ParameterError` is reported under the flag of the command parameter of the same name. Each command prints
a result's `summary()` or, with `--json`, its `to_dict()`. Runnable as `python cli.py ...` (torchrun runs
`cli.py train`) and as the `gatedv` script.
"""

from __future__ import annotations

import typer

from gatedv_cli import grid, imports, model_data, report_demo, sequential, statistics, training
from gatedv_cli.group import INTERRUPTED, CommandGroup
from gatedv_cli.ledger import ledger_app
from gatedv_cli.options import VERSION, ManyFilesCommand

__all__ = ["INTERRUPTED", "app"]  # INTERRUPTED: how the error line of an interrupted command ends

app = typer.Typer(
    cls=CommandGroup,
    name="gatedv",
    help="Paired comparisons of Transformer variants: train, evaluate, bootstrap, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _main(version: bool = VERSION) -> None:
    """gatedv: honest statistics for paired Transformer ablations."""


# The commands, in the order `gatedv --help` lists them (the module of each says what it groups).
app.command("bootstrap", cls=ManyFilesCommand)(statistics.bootstrap_command)
app.command("analyze", cls=ManyFilesCommand)(statistics.analyze_command)
app.command("arms")(statistics.arms_command)
app.command("plan")(statistics.plan_command)
app.command("noise-floor")(statistics.noise_floor_command)
app.command("decide", cls=ManyFilesCommand)(sequential.decide_command)
app.command("params")(model_data.params_command)
app.command("export-hf")(model_data.export_hf_command)
app.command("export-tasks")(model_data.export_tasks_command)
app.command("prepare")(model_data.prepare_command)
app.command("train")(training.train_command)
app.command("evaluate")(training.evaluate_command)
app.command("moments")(model_data.moments_command)
app.command("sweep")(grid.sweep_command)
app.command("select-lr")(grid.select_lr_command)
app.command("demo")(report_demo.demo_command)
app.command("report")(report_demo.report_command)
app.command("bench", cls=ManyFilesCommand)(training.bench_command)

# Other tools' results, `gatedv import TOOL`.
import_app = typer.Typer(name="import", help="Bring other tools' results in as loss files and item-score files.",
                         no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
import_app.command("lm-eval")(imports.import_lm_eval_command)
app.add_typer(import_app, name="import")

# A research ledger, `gatedv ledger LEDGER add | show`.
app.add_typer(ledger_app, name="ledger")


if __name__ == "__main__":
    app()
