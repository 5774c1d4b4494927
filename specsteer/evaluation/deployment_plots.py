"""The deployment view's figure and table, drawn from the rows of ``deployment_rows.projection_rows`` (one per
(method, α, β, acceptance rule) and RTT, with ``projected_tok_per_s``, ``measured_tok_per_s`` and
``projected_speedup``), for the dashboard:

* :func:`deployment_figure` — projected tokens/s against RTT under a profile, beside the speed the
  same generations were measured at here; titled, labelled and captioned as a projection.
* :func:`speedup_rows` — each SpecSteer point's projected speed and speedup over LLM at each RTT.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specsteer.evaluation.plots import METHOD_COLORS, plot_text, point_label
from specsteer.evaluation.result_table import Row, number_cell
from specsteer.method.catalog import method_label

PROJECTION_CAPTION = (
    "A projection, not a measurement: each generation's recorded forward passes and link messages are "
    "replayed with the profile's step times and bandwidths at the round-trip time on the x axis. "
    "Measured here: the same generations on this machine, both models in one process."
)
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def _groups(rows: Sequence[Row]) -> dict[tuple, list[Row]]:
    """Rows by (method, α, β), in the order they first appear."""
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault((row["method"], row.get("alpha"), row.get("beta")), []).append(row)
    return groups


def deployment_figure(rows: Sequence[Row], profile_label: str, run_name: str = "") -> go.Figure:
    """Projected tokens/s of each (method, α, β) against RTT (left), and what the same generations were
    measured at here (right, one horizontal bar each, named on its axis). The legend under the plot names each
    line; draw a few at a time (the Dashboard draws at most six). ``profile_label`` and ``run_name`` are escaped
    for plotly."""
    figure = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.66, 0.34],
        horizontal_spacing=0.2,
        subplot_titles=("Projected under the profile", "Measured here (this machine, both models inside this app)"),
    )
    seen: dict[str, int] = {}
    for (method, _, _), group in _groups(rows).items():
        group = sorted(group, key=lambda row: row["rtt_ms"])
        label = point_label(group[0])
        variant = seen.get(method, 0)
        seen[method] = variant + 1
        style = {"color": METHOD_COLORS.get(method), "dash": _DASHES[variant % len(_DASHES)]}
        figure.add_trace(
            go.Scatter(
                x=[row["rtt_ms"] for row in group],
                y=[row["projected_tok_per_s"] for row in group],
                mode="lines+markers",
                name=label,
                legendgroup=label,
                line=style,
                marker={"size": 5, "color": METHOD_COLORS.get(method)},
                hovertemplate=f"{label}<br>RTT %{{x:g}} ms: %{{y:.2f}} tok/s projected<extra></extra>",
            ),
            row=1,
            col=1,
        )
        figure.add_trace(
            go.Bar(
                y=[label],
                x=[group[0]["measured_tok_per_s"]],
                orientation="h",
                name=f"{label} (measured here)",
                legendgroup=label,
                showlegend=False,
                marker={"color": METHOD_COLORS.get(method), "opacity": 0.75},
                hovertemplate=f"{label}: %{{x:.2f}} tok/s measured here<extra></extra>",
            ),
            row=1,
            col=2,
        )
    subtitle = " · ".join(
        [f"profile: {plot_text(profile_label)}", *([f"run {plot_text(run_name)}"] if run_name else [])]
    )
    title = f"Projected tokens/s against round-trip time — a projection, not a measurement<br><sup>{subtitle}</sup>"
    figure.update_layout(
        title=title,
        template="plotly_white",
        height=640,
        margin={"t": 110, "b": 220},
        legend={"orientation": "h", "yanchor": "top", "y": -0.16, "x": 0, "title": {"text": "projected: "}},
    )
    figure.update_xaxes(title_text="round-trip time Edge ↔ Cloud (ms)", row=1, col=1)
    figure.update_yaxes(title_text="projected tokens / s", rangemode="tozero", row=1, col=1)
    figure.update_xaxes(title_text="measured tokens / s (here)", rangemode="tozero", row=1, col=2)
    figure.update_yaxes(autorange="reversed", automargin=True, row=1, col=2)
    figure.add_annotation(
        text="<br>".join(textwrap.wrap(PROJECTION_CAPTION, 130)),
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0,
        y=0,
        yshift=-150,
        xanchor="left",
        yanchor="top",
        align="left",
        font={"size": 11},
    )
    if not rows:
        figure.add_annotation(text="nothing to project", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return figure


def speedup_rows(
    rows: Sequence[Row], rtts_ms: Sequence[float], method: str = "specsteer", reference: str = "llm"
) -> list[dict[str, str]]:
    """One row per RTT: the reference's projected tokens/s, then each ``method`` point's projected tokens/s
    and its speedup over the reference ("–" where the run has no reference)."""
    groups = _groups(rows)
    references = [group for (name, _, _), group in groups.items() if name == reference]
    points = [group for (name, _, _), group in groups.items() if name == method]
    table = []
    for rtt in rtts_ms:
        line = {"RTT (ms)": f"{rtt:g}"}
        if references:
            line[f"{method_label(reference)} (tok/s)"] = number_cell(
                _at_rtt(references[0], rtt, "projected_tok_per_s"), 2
            )
        for group in points:
            label = point_label(group[0])
            line[f"{label} (tok/s)"] = number_cell(_at_rtt(group, rtt, "projected_tok_per_s"), 2)
            line[f"{label} speedup"] = number_cell(_at_rtt(group, rtt, "projected_speedup"), 2, "×")
        table.append(line)
    return table


def _at_rtt(group: Sequence[Row], rtt: float, key: str) -> Any:
    return next((row.get(key) for row in group if row["rtt_ms"] == rtt), None)
