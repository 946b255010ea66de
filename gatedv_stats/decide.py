"""The Python API of sequential seeds (`gv.sequential`, `gatedv decide`): one look of a group-sequential comparison
over seed pairs, recorded in its design file. Above `api`, whose pairing it uses."""

from __future__ import annotations

import os
from collections.abc import Sequence

from gatedv_stats.analysis.ledger_entries import LedgerSettings
from gatedv_stats.analysis.sequential import check_ledger_of, check_unchanged, load_design, record_look
from gatedv_stats.analysis.sequential_design import SequentialDesign
from gatedv_stats.api import Floor, floor_of, pair, skipped_once
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.pairing.inputs import Inputs, PathLike, Side
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.results import SequentialResult


def sequential(data: Inputs | Paired | None = None, *, design: PathLike, baseline: Side | None = None,
               variant: Side | None = None, baseline_arm: str | None = None, variant_arm: str | None = None,
               metric: str | None = None, higher_is_better: bool | None = None, task: str | None = None,
               max_seeds: int | None = None, sesoi: float | None = None, alpha: float | None = None,
               power: float | None = None, spending: str | None = None, noise_floor: Floor | None = None,
               eval_set: str | None = None,
               unit: str | None = None, allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (),
               ledger: PathLike | None = None, procedure: str | None = None, note: str | None = None,
               skipped: list[SkippedFile] | None = None) -> SequentialResult:
    """One look of a group-sequential comparison over seed pairs, recorded in the `design` file (`gatedv decide`).

    The first call fixes the design from its look and writes it, sealed: `max_seeds` (K, the budget of seed pairs),
    `alpha` (two-sided, 0.05), `power` (0.8), `sesoi` (the smallest effect of interest, for futility and
    "equivalent"), `spending` ("obf" or "pocock") and `noise_floor` (its seed variance lets the first look be at one
    seed pair). Each later call, with every seed pair so far, records the next look; a setting that differs from the
    design's, or a file edited by hand, is refused. `line` says "continue: train seed pair k+1" or "stop: <decision>
    (…)"; `stop` and `decision` say it as values. The data as in `pair`.

    With a research `ledger` (created by this call with `procedure`, default LOND, at `alpha`, when it does not
    exist; an existing one's α and procedure must be the ones given, if any), the design runs at the level the
    ledger gives it, one-sided: its α is twice that level, and its power and futility are computed there. The
    candidate is started in the ledger at the first look and entered (with `note`) at the stop with its stage-wise
    p-value, so that "stop: better" is a keep and any other stop a discard. At every stop the result holds the
    stage-wise p (`p_value`) and the median-unbiased estimate beside the naive one.

    Examples
    --------
    >>> runs = gv.load(example_study(tmp_dir))
    >>> floor = gv.noise_floor([run for run in runs if run.arm == "baseline"], out=tmp_dir / "floor.json")
    >>> first = [run for run in runs if run.seed == 0]
    >>> result = gv.sequential(first, design=tmp_dir / "design.json", baseline_arm="baseline",
    ...                        variant_arm="gatedv", max_seeds=3, sesoi=0.01, noise_floor=tmp_dir / "floor.json")
    >>> result.line
    'continue: train seed pair 2'
    >>> result = gv.sequential(runs, design=tmp_dir / "design.json", baseline_arm="baseline", variant_arm="gatedv")
    >>> result.look.index, result.stop, result.decision
    (2, True, 'better')
    """
    paired = pair(data, baseline=baseline, variant=variant, baseline_arm=baseline_arm, variant_arm=variant_arm,
                  metric=metric, higher_is_better=higher_is_better, task=task, eval_set=eval_set,
                  allow_unpaired=allow_unpaired, allow_mismatch=allow_mismatch, unit=unit, skipped=skipped)
    recorded = record_look(design, paired, max_seeds=max_seeds, alpha=alpha, power=power, sesoi=sesoi,
                           spending=spending, floor=floor_of(noise_floor), allow_mismatch=allow_mismatch,
                           ledger=ledger, new_ledger=LedgerSettings(procedure, alpha), note=note)
    return SequentialResult(recorded.design, recorded.look, None if recorded.repeated else os.fspath(design),
                            recorded.new, recorded.repeated, skipped_once(skipped), recorded.ledger_entry)


def read_design(design: PathLike, *, max_seeds: int | None = None, sesoi: float | None = None,
                alpha: float | None = None, power: float | None = None, spending: str | None = None,
                noise_floor: Floor | None = None, ledger: PathLike | None = None,
                procedure: str | None = None) -> SequentialDesign:
    """The design file written by `sequential`, its seal checked, with every look so far; a setting given that
    differs from the design's is refused in one line naming it, as `sequential` would refuse it."""
    made = load_design(design)
    check_unchanged(made, max_seeds=max_seeds, alpha=None if made.ledger else alpha, power=power, sesoi=sesoi,
                    spending=spending, floor=floor_of(noise_floor))
    check_ledger_of(made, ledger, alpha, procedure)
    return made
