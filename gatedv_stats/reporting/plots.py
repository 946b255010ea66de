"""Altair figures for the reports, each built from a plain long-format DataFrame.

The functions return Altair charts; `chart_spec` turns one into the Vega-Lite dict that the HTML report
embeds and that `vl_convert` renders to SVG / PDF for the Markdown and LaTeX reports.
"""

from __future__ import annotations

import functools

import altair as alt
import jsonschema
import numpy as np
import pandas as pd
from altair.vegalite.v6.schema import load_schema

WIDTH = 420
HEIGHT = 240
FACET_WIDTH = 260
FACET_HEIGHT = 180


def delta_p_curve_chart(pairs: pd.DataFrame, mean: pd.DataFrame, *, title: str) -> alt.LayerChart:
    """Training-curve ΔP(t) (paper Figure 2): thin per-pair curves beside the thick mean curve.

    `pairs`: columns variant, seed, step, delta_p (fraction); `mean`: columns variant, step, delta_p.
    """
    x = alt.X("step:Q", title="update")
    y = alt.Y("delta_p:Q", title="ΔP", axis=alt.Axis(format="+.1%"))
    color = alt.Color("variant:N", title="variant")
    per_pair = alt.Chart(pairs).mark_line(strokeWidth=1, opacity=0.45).encode(x=x, y=y, color=color, detail="seed:N")
    mean_curve = alt.Chart(mean).mark_line(strokeWidth=2.5).encode(x=x, y=y, color=color)
    zero = alt.Chart(pd.DataFrame({"zero": [0.0]})).mark_rule(color="#555", strokeDash=[4, 3]).encode(y="zero:Q")
    return alt.layer(
        zero, per_pair, mean_curve,
        _hover_points(pairs, x, y, ["variant:N", "seed:N", "step:Q", alt.Tooltip("delta_p:Q", format="+.2%")]),
        _hover_points(mean, x, y, ["variant:N", "step:Q", alt.Tooltip("delta_p:Q", format="+.2%", title="mean")]),
    ).properties(width=WIDTH, height=HEIGHT, title=title)


def _hover_points(data: pd.DataFrame, x: alt.X, y: alt.Y, tooltip: list) -> alt.Chart:
    """Invisible points at a line's data points, each with its tooltip (a line's path shows one tooltip for all
    of its points); without a colour, they leave the legend as the lines draw it."""
    return alt.Chart(data).mark_point(opacity=0, size=80).encode(x=x, y=y, tooltip=tooltip)


def final_quarter_chart(final: pd.DataFrame, *, title: str) -> alt.LayerChart:
    """Absolute development PPL over the final quarter of training (paper Figure 3): mean over seeds ± SD band.

    `final`: columns arm, step, ppl_mean, ppl_sd (NaN with one seed), as `curves.final_quarter_ppl` returns.
    """
    frame = final.assign(low=final["ppl_mean"] - final["ppl_sd"].fillna(0.0),
                         high=final["ppl_mean"] + final["ppl_sd"].fillna(0.0))
    x = alt.X("step:Q", title="update")
    color = alt.Color("arm:N", title="arm")
    band = alt.Chart(frame).mark_area(opacity=0.18).encode(
        x=x, y=alt.Y("low:Q", title="development PPL", scale=alt.Scale(zero=False)), y2="high:Q", color=color)
    y = alt.Y("ppl_mean:Q", scale=alt.Scale(zero=False))
    mean_curve = alt.Chart(frame).mark_line(strokeWidth=2.5).encode(x=x, y=y, color=color)
    tooltip = ["arm:N", "step:Q", alt.Tooltip("ppl_mean:Q", format=".3f", title="mean PPL"),
               alt.Tooltip("ppl_sd:Q", format=".3f", title="SD"), alt.Tooltip("low:Q", format=".3f", title="mean − SD"),
               alt.Tooltip("high:Q", format=".3f", title="mean + SD")]
    return alt.layer(band, mean_curve, _hover_points(frame, x, y, tooltip)).properties(width=WIDTH, height=HEIGHT,
                                                                                       title=title)


def doc_difference_chart(diffs: pd.DataFrame, *, title: str, bins: int = 40) -> alt.FacetChart:
    """Distribution of per-document NLL differences (variant − reference, averaged over seeds, per target).

    `diffs`: columns comparison, diff; one panel per comparison. Binned here (shared edges), so the chart
    carries `bins` rows per panel however many documents there are.
    """
    edges = np.histogram_bin_edges(diffs["diff"].to_numpy(dtype=np.float64), bins=bins)
    counts = [
        pd.DataFrame({"comparison": name, "low": edges[:-1], "high": edges[1:],
                      "documents": np.histogram(values.to_numpy(dtype=np.float64), bins=edges)[0]})
        for name, values in diffs.groupby("comparison", sort=False)["diff"]
    ]
    histogram = alt.Chart().mark_bar(color="#4c78a8").encode(
        x=alt.X("low:Q", title="per-document NLL difference (nats / target)"), x2="high:Q",
        y=alt.Y("documents:Q", title="documents"), y2=alt.datum(0),
        tooltip=["comparison:N", alt.Tooltip("low:Q", format=".4f"), alt.Tooltip("high:Q", format=".4f"),
                 "documents:Q"],
    )
    zero = alt.Chart().mark_rule(color="#d62728", strokeDash=[4, 3]).encode(x=alt.datum(0))
    return (
        alt.layer(histogram, zero, data=pd.concat(counts, ignore_index=True))
        .properties(width=FACET_WIDTH, height=FACET_HEIGHT)
        .facet(facet=alt.Facet("comparison:N", title=None, sort=None), columns=2)
        .properties(title=title)
    )


def paired_seed_chart(per_seed: pd.DataFrame, *, title: str) -> alt.FacetChart:
    """Per-seed PPL of each pair, reference beside variant, one line per seed.

    `per_seed`: columns comparison, role ("reference" / "variant"), arm, seed, ppl.
    """
    base = alt.Chart().encode(
        x=alt.X("role:N", title=None, sort=["reference", "variant"], axis=alt.Axis(labelAngle=0)),
        y=alt.Y("ppl:Q", title="PPL", scale=alt.Scale(zero=False)),
        detail="seed:N",
    )
    lines = base.mark_line(color="#888", strokeWidth=1)
    points = base.mark_point(filled=True, size=50).encode(
        color=alt.Color("role:N", title=None, sort=["reference", "variant"]),
        tooltip=["comparison:N", "role:N", "arm:N", "seed:N", alt.Tooltip("ppl:Q", format=".3f")],
    )
    return (
        alt.layer(lines, points, data=per_seed)
        .properties(width=FACET_WIDTH // 2 + 40, height=FACET_HEIGHT)
        .facet(facet=alt.Facet("comparison:N", title=None), columns=4)
        .resolve_scale(y="independent")
        .properties(title=title)
    )


def chart_spec(chart: alt.TopLevelMixin) -> dict:
    """The chart's Vega-Lite specification (data inlined), ready for JSON embedding or `vl_convert`.

    Altair's 5,000-row guard is lifted for this call: long training curves are meant to be inlined. The schema
    check is skipped (a report draws dozens of charts, and validation was most of their cost): every chart this
    module builds is checked against the schema by the tests (`validate_spec`).
    """
    with alt.data_transformers.disable_max_rows():
        return chart.to_dict(validate=False)


def page_spec(spec: dict) -> dict:
    """`spec` as the HTML report embeds it: a single or layered chart as wide as its container (the page's text
    column). Vega-Lite sizes only those to their container; a faceted chart keeps its panel width, which the page
    widens until the chart fills the column."""
    if "facet" in spec:
        return spec
    return {**spec, "width": "container", "autosize": {"type": "fit-x", "contains": "padding"}}


def validate_spec(spec: dict) -> None:
    """Raise `jsonschema.ValidationError` when `spec` is not a valid Vega-Lite specification (altair's schema)."""
    _vega_lite_validator().validate(spec)


@functools.cache
def _vega_lite_validator() -> jsonschema.protocols.Validator:
    schema = load_schema()
    return jsonschema.validators.validator_for(schema)(schema)


FOREST_MAX_GROUPS = 40  # groups per panel; beyond, the largest are shown (thousands of domains cannot be read)


def largest_groups(groups: pd.DataFrame, limit: int = FOREST_MAX_GROUPS) -> pd.DataFrame:
    """The rows of each comparison's `limit` groups with the most documents (all of them when there are no
    more), in their order. `groups`: columns comparison, n_docs, …"""
    rank = groups.groupby("comparison", sort=False)["n_docs"].rank(method="first", ascending=False)
    return groups[rank <= limit]


def forest_chart(groups: pd.DataFrame, *, title: str) -> alt.FacetChart:
    """Forest plot of D per document group: point and interval per group, one panel per comparison.

    `groups`: columns comparison, group, n_docs, nll_diff_mean, low, high (as `Breakdown.to_frame` gives, plus
    the comparison label); groups keep their row order.
    """
    plotted = groups[["comparison", "group", "n_docs", "nll_diff_mean", "low", "high"]]  # no undefined p-values
    return _forest(plotted, "comparison", "group", "nll_diff_mean", "D (nats / target)",
                   ["group:N", "n_docs:Q", alt.Tooltip("nll_diff_mean:Q", format=".6f", title="D"),
                    alt.Tooltip("low:Q", format=".6f"), alt.Tooltip("high:Q", format=".6f")], title)


def task_forest_chart(tasks: pd.DataFrame, *, title: str, x_title: str) -> alt.FacetChart:
    """Forest plot of variant − reference per task (and the macro-average): point and interval per task, one panel
    per arm. `tasks`: columns arm, task, difference, low, high, verdict; rows keep their order."""
    return _forest(tasks[["arm", "task", "difference", "low", "high", "verdict"]], "arm", "task", "difference", x_title,
                   ["task:N", alt.Tooltip("difference:Q", format=".4f"), alt.Tooltip("low:Q", format=".4f"),
                    alt.Tooltip("high:Q", format=".4f"), "verdict:N"], title)


def _forest(data: pd.DataFrame, panel: str, label: str, estimate: str, x_title: str, tooltip: list,
            title: str) -> alt.FacetChart:
    """A forest plot: a point at `estimate` and the interval low–high per `label` row, one panel per `panel`; the
    point and the interval each carry the row's tooltip."""
    y = alt.Y(f"{label}:N", sort=None, title=None)
    tooltip = [f"{panel}:N", *tooltip]
    interval = alt.Chart().mark_rule(strokeWidth=2, color="#4c78a8").encode(x=alt.X("low:Q", title=x_title),
                                                                           x2="high:Q", y=y, tooltip=tooltip)
    point = alt.Chart().mark_point(filled=True, size=60, color="#4c78a8").encode(x=f"{estimate}:Q", y=y,
                                                                                 tooltip=tooltip)
    zero = alt.Chart().mark_rule(color="#d62728", strokeDash=[4, 3]).encode(x=alt.datum(0))
    return (alt.layer(interval, point, zero, data=data)
            .properties(width=FACET_WIDTH, height=alt.Step(18))
            .facet(row=alt.Row(f"{panel}:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")))
            .properties(title=title)
            .resolve_scale(y="independent"))


def ledger_wealth_chart(steps: pd.DataFrame, *, title: str) -> alt.LayerChart:
    """The wealth a ledger's online procedure has left after each step, each step's point marked keep or discard.

    `steps`: columns step, wealth, level, decision, candidate.
    """
    x = alt.X("step:Q", title="step", axis=alt.Axis(tickMinStep=1))
    line = alt.Chart(steps).mark_line(color="#888", strokeWidth=1.5).encode(
        x=x, y=alt.Y("wealth:Q", title="wealth left", scale=alt.Scale(zero=True)))
    points = alt.Chart(steps).mark_point(filled=True, size=60).encode(
        x=x, y="wealth:Q",
        color=alt.Color("decision:N", title=None, sort=["keep", "discard"],
                        scale=alt.Scale(domain=["keep", "discard"], range=["#2ca02c", "#d62728"])),
        tooltip=["step:Q", "candidate:N", "decision:N", alt.Tooltip("level:Q", format=".3g"),
                 alt.Tooltip("wealth:Q", format=".4g")])
    return alt.layer(line, points).properties(width=WIDTH, height=HEIGHT, title=title)
