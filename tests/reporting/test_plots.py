"""The report figures: rendered by vl_convert to a scenegraph and checked against the plotted data."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import vl_convert

from gatedv_stats.reporting import plots


def marks(spec: dict, marktype: str) -> list[dict]:
    """Every mark group of this type in the rendered scenegraph (one per facet panel / layer)."""
    found: list[dict] = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("marktype") == marktype and node.get("role") == "mark":
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(vl_convert.vegalite_to_scenegraph(spec))
    return found


def test_doc_difference_histogram_counts_every_document_in_its_bin():
    rng = np.random.default_rng(0)
    diffs = pd.DataFrame({"comparison": ["gatedv vs baseline"] * 5000 + ["q-silu vs baseline"] * 3000,
                          "diff": rng.normal(0.0, 0.1, size=8000)})
    spec = plots.chart_spec(plots.doc_difference_chart(diffs, title="differences", bins=30))
    (bars,) = [rows for rows in spec["datasets"].values() if rows and "documents" in rows[0]]
    assert len(bars) == 2 * 30  # binned in Python: the page carries bins, not documents
    for name, values in diffs.groupby("comparison")["diff"]:
        panel = [bar for bar in bars if bar["comparison"] == name]
        last = max(bar["high"] for bar in panel)
        for bar in panel:  # [low, high), the last bin closed, counted here with a mask
            inside = (values >= bar["low"]) & ((values < bar["high"]) | (bar["high"] == last) & (values == last))
            assert bar["documents"] == int(inside.sum())
        assert sum(bar["documents"] for bar in panel) == len(values)
    panels = marks(spec, "rect")
    assert [len(panel["items"]) for panel in panels] == [30, 30]
    for panel in panels:  # drawn as bars from zero: height proportional to the count, width one bin
        heights = np.array([abs(item["height"]) for item in panel["items"]])
        counts = np.array([int(re.search(r"documents: (\d+)", item["description"]).group(1))
                           for item in panel["items"]])
        scale = heights[counts > 0] / counts[counts > 0]
        assert np.allclose(scale, scale[0]) and heights.max() > 0.5 * plots.FACET_HEIGHT
        assert np.allclose([item["width"] for item in panel["items"]], panel["items"][0]["width"])


def test_delta_p_curve_draws_one_thin_line_per_pair_and_one_mean_per_variant():
    steps = np.arange(0, 1000, 100)
    pairs = pd.DataFrame([{"variant": variant, "seed": seed, "step": step, "delta_p": -0.01 * seed}
                          for variant in ("gatedv", "q-silu") for seed in range(3) for step in steps])
    mean = pairs.groupby(["variant", "step"], as_index=False)["delta_p"].mean()
    spec = plots.chart_spec(plots.delta_p_curve_chart(pairs, mean, title="ΔP"))
    lines = marks(spec, "line")  # one mark group per drawn line, one item per point
    assert sorted(line["items"][0]["strokeWidth"] for line in lines) == [1] * 6 + [2.5] * 2
    assert all(len(line["items"]) == len(steps) for line in lines)
    assert "ΔP" in vl_convert.vegalite_to_svg(spec)


def test_final_quarter_band_is_mean_plus_minus_sd():
    final = pd.DataFrame({"arm": ["baseline"] * 3 + ["gatedv"] * 3, "step": [750, 875, 1000] * 2,
                          "ppl_mean": [60.0, 59.5, 59.0, 58.0, 57.5, 57.0], "ppl_sd": [0.5, 0.4, 0.3] + [np.nan] * 3})
    spec = plots.chart_spec(plots.final_quarter_chart(final, title="final quarter"))
    (values,) = [rows for rows in spec["datasets"].values() if rows and "low" in rows[0]]
    for record, expected in zip(values, final.itertuples()):
        sd = 0.0 if np.isnan(expected.ppl_sd) else expected.ppl_sd
        assert record["low"] == expected.ppl_mean - sd and record["high"] == expected.ppl_mean + sd
    assert len(marks(spec, "area")) == 2  # one band per arm


def test_paired_seed_chart_shows_both_runs_of_every_pair():
    per_seed = pd.DataFrame([{"comparison": comparison, "role": role, "arm": arm, "seed": seed, "ppl": 50 + seed}
                             for comparison, arm in (("gatedv vs baseline", "gatedv"), ("q-silu vs baseline", "q-silu"))
                             for role in ("reference", "variant") for seed in range(4)])
    spec = plots.chart_spec(plots.paired_seed_chart(per_seed, title="per seed"))
    assert [len(group["items"]) for group in marks(spec, "symbol")] == [8, 8]
    lines = marks(spec, "line")
    assert len(lines) == 2 * 4 and all(len(line["items"]) == 2 for line in lines)  # per panel and seed: ref → variant


def test_forest_plot_of_groups_with_and_without_a_seed_and_document_fit_is_strict_json():
    """A group without spread has no seed-and-document interval or p-value; its forest row still plots."""
    fitted, unfitted = (pd.DataFrame({"comparison": comparison, "group": ["a", "b"], "n_docs": [6, 5],
                                      "nll_diff_mean": [-0.01, 0.0], "low": [-0.02, 0.0], "high": [0.0, 0.0],
                                      "p_value": p_values})
                        for comparison, p_values in (("gatedv vs baseline", [0.2, 0.5]),
                                                     ("q-silu vs baseline", [None, None])))
    groups = pd.concat([fitted, unfitted], ignore_index=True)  # as the report section joins its breakdowns
    spec = plots.chart_spec(plots.forest_chart(groups, title="D per group"))
    json.dumps(spec, allow_nan=False)
    assert [len(panel["items"]) for panel in marks(spec, "symbol")] == [2, 2]


def tooltips(spec: dict, marktype: str) -> list[dict]:
    """What each drawn item of this mark type tells a reader (Vega-Lite writes a mark's encoded and tooltip fields,
    each title once, into its description "title: value; …"); numbers as floats, items without one left out."""
    def value(text: str) -> float | str:
        try:
            return float(text.replace("−", "-").rstrip("%")) / (100 if text.endswith("%") else 1)
        except ValueError:
            return text

    return [{title: value(text) for title, text in (part.split(": ", 1) for part in item["description"].split("; "))}
            for group in marks(spec, marktype) for item in group["items"] if item.get("description")]


def shown(tips: list[dict], *fields: str) -> list[tuple]:
    return sorted(tuple(tip[field] for field in fields) for tip in tips)


def test_every_point_and_bar_shows_its_arm_seed_value_and_interval():
    pairs = pd.DataFrame([{"variant": "gatedv", "seed": seed, "step": step, "delta_p": -0.01 * seed}
                          for seed in (1, 2) for step in (0, 100, 200)])
    mean = pairs.groupby(["variant", "step"], as_index=False)["delta_p"].mean()
    curve = tooltips(plots.chart_spec(plots.delta_p_curve_chart(pairs, mean, title="ΔP")), "symbol")
    assert shown([tip for tip in curve if "seed" in tip], "variant", "seed", "step", "delta_p") == shown(
        pairs.to_dict("records"), "variant", "seed", "step", "delta_p")  # a point per pair and step
    assert shown([tip for tip in curve if "seed" not in tip], "step", "mean") == [(0, -0.015), (100, -0.015),
                                                                                  (200, -0.015)]
    final = pd.DataFrame({"arm": "baseline", "step": [750, 1000], "ppl_mean": [60.0, 59.0], "ppl_sd": [0.5, 0.25]})
    band = tooltips(plots.chart_spec(plots.final_quarter_chart(final, title="final")), "symbol")
    assert shown(band, "arm", "step", "mean PPL", "mean − SD", "mean + SD") == [
        ("baseline", 750, 60.0, 59.5, 60.5), ("baseline", 1000, 59.0, 58.75, 59.25)]

    per_seed = pd.DataFrame([{"comparison": "gatedv vs baseline", "role": role, "arm": arm, "seed": seed,
                              "ppl": 50.5 + seed + (role == "variant")}
                             for role, arm in (("reference", "baseline"), ("variant", "gatedv")) for seed in (3, 4)])
    seeds = tooltips(plots.chart_spec(plots.paired_seed_chart(per_seed, title="seeds")), "symbol")
    assert shown(seeds, "comparison", "arm", "seed", "PPL") == shown(
        per_seed.rename(columns={"ppl": "PPL"}).to_dict("records"), "comparison", "arm", "seed", "PPL")

    diffs = pd.DataFrame({"comparison": "gatedv vs baseline", "diff": [-0.2, -0.1, 0.0, 0.1]})
    bars = tooltips(plots.chart_spec(plots.doc_difference_chart(diffs, title="differences", bins=2)), "rect")
    assert shown(bars, "comparison", "low", "high", "documents") == [("gatedv vs baseline", -0.2, -0.05, 2),
                                                                     ("gatedv vs baseline", -0.05, 0.1, 2)]

    groups = pd.DataFrame({"comparison": "gatedv vs baseline", "group": ["a", "b"], "n_docs": [6, 5],
                           "nll_diff_mean": [-0.01, 0.0], "low": [-0.02, -0.001], "high": [0.0, 0.002]})
    tasks = pd.DataFrame({"arm": "gatedv", "task": ["arc", "mean"], "difference": [0.01, 0.02], "low": [0.0, 0.01],
                          "high": [0.02, 0.03], "verdict": "better"})
    forests = ((plots.forest_chart(groups, title="D"), groups.rename(columns={"nll_diff_mean": "D"}),
                ("comparison", "group", "D", "low", "high")),
               (plots.task_forest_chart(tasks, title="tasks", x_title="accuracy"), tasks,
                ("arm", "task", "difference", "low", "high", "verdict")))
    for chart, frame, fields in forests:
        spec = plots.chart_spec(chart)
        for marktype in ("symbol", "rule"):  # the point and its interval each; the zero line has none
            assert shown(tooltips(spec, marktype), *fields) == shown(frame.to_dict("records"), *fields), marktype


def test_the_page_sizes_single_and_layered_charts_to_their_container_and_leaves_facets_to_the_page():
    final = pd.DataFrame({"arm": ["baseline"], "step": [750], "ppl_mean": [60.0], "ppl_sd": [0.5]})
    layered = plots.chart_spec(plots.final_quarter_chart(final, title="final"))
    page = plots.page_spec(layered)
    assert page["width"] == "container" and page["autosize"] == {"type": "fit-x", "contains": "padding"}
    plots.validate_spec(page)
    assert layered["width"] == plots.WIDTH  # the Markdown and LaTeX figures keep their size
    diffs = pd.DataFrame({"comparison": "gatedv vs baseline", "diff": [-0.2, 0.1]})
    faceted = plots.chart_spec(plots.doc_difference_chart(diffs, title="differences", bins=2))
    assert plots.page_spec(faceted) == faceted  # Vega-Lite sizes no facet to its container; the page widens it
