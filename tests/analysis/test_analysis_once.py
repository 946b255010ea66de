"""A report analyzes each comparison exactly once: one pairing and one document bootstrap per variant and group."""

from __future__ import annotations

import pytest

from gatedv_stats.analysis import experiment
from gatedv_stats.analysis.figures import perplexity
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.reporting import write_report
from gatedv_stats.testing import synthetic_runs


def counting(monkeypatch, module, name: str) -> list:
    calls = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.slow
def test_a_report_with_one_variant_pairs_and_bootstraps_it_once(tmp_path, monkeypatch):
    for run in synthetic_runs({"baseline": [30.0, 30.5, 29.8], "gatedv": [29.4, 29.9, 29.6]}, n_docs=40, rng_seed=3):
        write_loss_file(tmp_path / "runs" / f"{run.arm}_{run.seed}.parquet", run.docs,
                        {**run.meta, "eval_set": "heldout"})
    pairings = counting(monkeypatch, experiment, "pair_runs")
    bootstraps = counting(monkeypatch, perplexity, "document_bootstrap")
    for fmt in ("md", "html"):
        pairings.clear()
        bootstraps.clear()
        write_report([tmp_path / "runs"], tmp_path / f"report.{fmt}", fmt)
        assert (len(pairings), len(bootstraps)) == (1, 1)
