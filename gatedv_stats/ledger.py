"""`gv.Ledger`: a research ledger in the Python API (`gatedv ledger LEDGER add | show` on the command line).

Above `gatedv_stats.api` (its own layer): each entry's comparison is `gv.compare`'s, so loss files and item scores
alike; the ledger itself is `analysis.ledger` over the file of `io.ledgerfile`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from gatedv_stats.analysis.ledger import (
    LedgerEntry,
    LedgerHistory,
    LedgerSettings,
    dependence_note,
    ledger_procedure,
    read_history,
)
from gatedv_stats.analysis.ledger_entries import add_entry, enter_design
from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.analysis.sequential import check_same_study, load_design
from gatedv_stats.api import Floor, compare
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.files import canonical_sha256, file_sha256
from gatedv_stats.pairing.inputs import Side
from gatedv_stats.results import ComparisonResult, NoiseFloorResult
from gatedv_stats.results.ledger import LedgerEntryResult, LedgerResult

# A failure of the comparison named by the ledger's own parameters.
_RENAMED = {"baseline": "against", "variant": "candidate"}


class Ledger:
    """A research ledger: every candidate compared, in order, each kept or discarded by an online procedure that
    bounds the false keeps over the whole stream (`gatedv ledger`; docs/research-ledger.md).

    Each entry (`add`), with the files' SHA-256, the estimate and its interval, the level, keep or discard and the
    wealth left, is appended to an SQLite file whose entries are chained by hash (an altered history is refused,
    naming the first bad entry). Writers serialise, so several processes may add to one ledger at once.

    Parameters
    ----------
    path
        The ledger file, created by the first `add`.
    procedure
        "lond" (default: the false discovery rate under the positive dependence of candidates that share a
        reference's runs), "e-lond" (the FDR under any dependence, from e-values), "addis", "lord++", "saffron" (the
        FDR, for independent tests) or "alpha-spending" (the family-wise error rate, under any dependence); fixed when
        the ledger is created, another is refused.
    alpha
        The level (default 0.05), fixed like the procedure.
    sesoi
        e-LOND only, required: the smallest effect of interest whose likelihood ratios are its e-values, fixed too.

    Examples
    --------
    >>> study = example_study(tmp_dir)
    >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
    >>> entry = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")))
    >>> entry.step, entry.decision, round(entry.level, 5)
    (1, 'keep', 0.00268)
    >>> gv.Ledger(tmp_dir / "study.ledger", procedure="lord++")
    Traceback (most recent call last):
    ...
    gatedv_stats.core.errors.ParameterError: procedure: ... was created with lond at α = 0.05; ...
    """

    def __init__(self, path: str | os.PathLike[str], procedure: str | None = None, alpha: float | None = None,
                 sesoi: float | None = None) -> None:
        ledger_procedure(path, procedure, alpha)
        self.path = Path(path)
        self.settings = LedgerSettings(procedure, alpha, sesoi)

    @property
    def procedure(self) -> str | None:
        """The procedure asked for (None: the ledger's own, or LOND for a new one)."""
        return self.settings.procedure

    @property
    def alpha(self) -> float | None:
        """The level asked for (None: the ledger's own, or 0.05 for a new one)."""
        return self.settings.alpha

    def add(self, candidate: Side, against: Side, *, noise_floor: Floor | None = None, note: str | None = None,
            metric: str | None = None, higher_is_better: bool | None = None,
            design: str | os.PathLike[str] | None = None) -> LedgerEntryResult:
        """Compare `candidate` with `against` as `compare` does and enter the result: the one-sided p-value of "the
        candidate is not better" (for a candidate a sequential `design` decided, the design's stage-wise p-value) is
        tested at the level the procedure gives the next test (keep or discard).

        Parameters
        ----------
        candidate
            The candidate's paths, runs or arrays, as `compare`'s `variant`.
        against
            The reference's paths, runs or arrays, as `compare`'s `baseline`.
        noise_floor
            The setup's noise floor, as in `compare`: one seed pair then suffices.
        note
            A note stored with the entry.
        metric
            Compare item scores or a score table's scores on this metric, as in `compare`.
        higher_is_better
            Which way the score is better, where its files do not say.
        design
            A sequential design (the file `sequential` wrote) that decided the candidate: the files must be those of its
            stopping look, and the entry takes the design's stage-wise p-value, median-unbiased estimate and repeated
            interval; a design started in this ledger finishes its start at the level fixed then.

        Returns
        -------
        LedgerEntryResult
            The entry: step, estimate and interval, one-sided p, level, keep or discard, and the wealth left.

        Examples
        --------
        >>> study = example_study(tmp_dir)
        >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
        >>> entry = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")),
        ...                    note="gated values")
        >>> entry.step, entry.candidate, entry.decision, entry.p_value < entry.level, entry.note
        (1, 'gatedv', 'keep', True, 'gated values')
        """
        try:
            result = compare(baseline=against, variant=candidate, metric=metric, higher_is_better=higher_is_better,
                             noise_floor=noise_floor)
        except ParameterError as error:
            raise ParameterError(_RENAMED.get(error.parameter, error.parameter), error.template,
                                 tuple(_RENAMED.get(name, name) for name in error.mentions), error.leading) from None
        if not isinstance(result, ComparisonResult):
            tasks = ", ".join(str(paired.task) for paired in getattr(result, "pairs", ()))
            raise ParameterError("candidate", f"the item scores hold several tasks ({tasks}); a ledger entry is one "
                                 "comparison: give the files of one task")
        if design is not None:
            made = load_design(design)
            check_same_study(made, result.paired)
            entry = enter_design(self.path, made, result.paired, self.settings, note=note)
        else:
            floor_path, floor_sha256 = _floor_record(noise_floor)
            entry = add_entry(self.path, result.comparison, result.paired, self.settings, noise_floor=floor_path,
                              noise_floor_sha256=floor_sha256, note=note)
        history = read_history(self.path)
        shared = (dependence_note(entry),) if entry.row.get("shared_reference") and \
            history.procedure.assumes_independence else ()
        return LedgerEntryResult(entry, history, tuple(result.warnings) + shared)

    def history(self) -> LedgerResult:
        """The whole history, its chain checked (`gatedv ledger LEDGER show`).

        Returns
        -------
        LedgerResult
            Every entry in order, the running best after each step, the procedure and its wealth.

        Examples
        --------
        >>> study = example_study(tmp_dir)
        >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
        >>> entry = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")))
        >>> history = ledger.history()
        >>> len(history.entries), history.kept, history.to_frame()["best"].tolist()
        (1, 1, ['gatedv'])
        """
        return LedgerResult(self._history())

    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every row, in order (the starts of sequential candidates included).

        Returns
        -------
        tuple of LedgerEntry
            The rows as stored, each with its columns as attributes.

        Examples
        --------
        >>> study = example_study(tmp_dir)
        >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
        >>> entry = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")))
        >>> [(row.step, row.candidate, row.decision) for row in ledger.entries()]
        [(1, 'gatedv', 'keep')]
        """
        return self._history().entries

    def summary(self) -> str:
        """The history as text: a headline, then a table of step, candidate, estimate and interval, p, level, keep /
        discard, wealth and the running best.

        Returns
        -------
        str
            The text `gatedv ledger LEDGER show` prints.

        Examples
        --------
        >>> study = example_study(tmp_dir)
        >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
        >>> entry = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")))
        >>> print(ledger.summary().splitlines()[2])
        step  candidate  against   estimate [interval]                p    level  decision   wealth  best
        """
        return self._history().summary()

    def to_frame(self) -> pd.DataFrame:
        """The history as a table.

        Returns
        -------
        pandas.DataFrame
            One row per decided entry, with the running best (`best`, `best_step`).

        Examples
        --------
        >>> study = example_study(tmp_dir)
        >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
        >>> entry = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")))
        >>> ledger.to_frame()[["step", "candidate", "decision", "best"]].values.tolist()
        [[1, 'gatedv', 'keep', 'gatedv']]
        """
        return self._history().to_frame()

    def to_dict(self) -> dict:
        """The history as a JSON-ready object (`gatedv ledger LEDGER show --json`).

        Returns
        -------
        dict
            The procedure, the head hash, the counts, the running best and every entry as stored.

        Examples
        --------
        >>> study = example_study(tmp_dir)
        >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
        >>> entry = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")))
        >>> payload = ledger.to_dict()
        >>> payload["procedure"]["procedure"], payload["n_entries"], payload["entries"][0]["decision"]
        ('lond', 1, 'keep')
        """
        return self._history().to_dict()

    def _history(self) -> LedgerHistory:
        return read_history(self.path, procedure=self.procedure, alpha=self.alpha)

    def _repr_html_(self) -> str:
        return self.history()._repr_html_()

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        if not self.path.is_file():
            return f"Ledger({self.path}: no entries yet)"
        return f"Ledger({self._history().headline()})"


def _floor_record(noise_floor: Floor | None) -> tuple[str | None, str | None]:
    """Where the noise floor came from and its SHA-256 (of the file's bytes, or of its content in memory)."""
    if noise_floor is None:
        return None, None
    if isinstance(noise_floor, NoiseFloorResult):
        noise_floor = noise_floor.written or noise_floor.floor
    if isinstance(noise_floor, NoiseFloor):
        if noise_floor.path is not None and Path(noise_floor.path).is_file():
            return noise_floor.path, file_sha256(noise_floor.path)
        return None, canonical_sha256(noise_floor.to_dict())
    return os.fspath(noise_floor), file_sha256(noise_floor)


__all__ = ["Ledger"]
