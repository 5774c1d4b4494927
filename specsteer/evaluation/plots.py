"""Figures of an evaluation run, shared by the command line's HTML report and the dashboard.

Every function takes the summary rows of ``specsteer.evaluation.grid.summarize`` (ROUGE on 0–100,
acceptance 0–1, tok_per_s, speedup) and returns a ``plotly.graph_objects.Figure`` or plain data,
so the dashboard shows exactly what ``python -m specsteer evaluate --plot`` writes.

* :func:`quality_speed_figure` — quality (any ROUGE key) against speed (tok/s or speedup), one
  point per (method, alpha, beta) named in the legend and on hover, with a bootstrap error bar where the
  row carries its interval; SLM+ and LLM are reference points (star markers and a dashed line at their
  quality), the two ends a personalized fast method should beat.
* :func:`acceptance_figure` — acceptance against alpha, one line per (method, beta); methods that
  draft without alpha (standard SD) are a dotted reference line.
* :func:`table_figure` — the per-row table (``specsteer.evaluation.result_table``, which also prints it as text).
* :func:`sweep_figure` — the α × β view of a ``sweep.SweepReport``: mean ROUGE-L of each SpecSteer setting
  against its tokens/s with bootstrap 95 % error bars, SLM+ and LLM as reference points and lines, the
  Pareto front marked; with LLM cells, a second panel of the paired difference SpecSteer − LLM.
* :func:`write_html` — all of them as one standalone page with plotly.js inline (works offline).
* :func:`plot_text` — user text (run names) made safe for plotly's labels.

The deployment view's figure, over the projection's rows, is ``specsteer.evaluation.deployment_plots``'.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from specsteer.evaluation.metrics import ROUGE_LABELS
from specsteer.evaluation.result_table import TABLE_NOTE, Row, display_rows
from specsteer.evaluation.sweep import PointSummary, SweepReport
from specsteer.method.catalog import BASELINES, METHODS
from specsteer.stores.runs import GridPoint

METHOD_COLORS = dict(zip(METHODS, qualitative.Plotly))
SPEED_LABELS = {"tok_per_s": "tokens / s", "speedup": "speedup over LLM (×, same records, same run)"}


def plot_text(text: object) -> str:
    """User text (a run name) for a plotly label: plotly reads ``<b>``, ``<br>``, ``<a href=…>`` and the
    like in trace names and titles as markup and decodes HTML entities, so escaped text shows as written."""
    return html.escape(str(text), quote=False)


def point_label(row: Row) -> str:
    """E.g. "SpecSteer α=0.1 β=1", "SpecSteer α=1 β=1 CDA λ=1", "LightCoSteer β=1", "LLM"."""
    return GridPoint(row["method"], row.get("alpha"), row.get("beta"), row.get("cda_lambda")).display


def _methods(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(row["method"] for row in rows))


def _color(method: str) -> str | None:
    return METHOD_COLORS.get(method)


# Settings of one method told apart: β by the marker's shape, α by its shade (the method's colour, lighter
# for a larger α: a more permissive verification).
_BETA_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "pentagon", "hexagon", "x")
_LIGHTEST = 0.6  # the largest α's share of white mixed into the method's colour


def _shade(color: str | None, lightness: float) -> str | None:
    """``color`` (#rrggbb) mixed with ``lightness`` (0-1) of white."""
    if color is None or not color.startswith("#") or len(color) != 7:
        return color
    channels = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    mixed = [round(c + (255 - c) * lightness) for c in channels]
    return "#" + "".join(f"{c:02x}" for c in mixed)


def _setting_styles(rows: Sequence[Row]) -> dict[tuple, tuple[str, str | None]]:
    """(marker symbol, colour) of each (method, α, β): a symbol per β and a shade per α within each method."""
    styles: dict[tuple, tuple[str, str | None]] = {}
    for method in _methods(rows):
        method_rows = [row for row in rows if row["method"] == method]
        alphas = sorted({alpha for row in method_rows if (alpha := row.get("alpha")) is not None})
        betas = sorted({beta for row in method_rows if (beta := row.get("beta")) is not None})
        for row in method_rows:
            alpha, beta = row.get("alpha"), row.get("beta")
            symbol = _BETA_SYMBOLS[betas.index(beta) % len(_BETA_SYMBOLS)] if beta in betas else "circle"
            lightness = _LIGHTEST * alphas.index(alpha) / (len(alphas) - 1) if len(alphas) > 1 else 0.0
            styles[(method, alpha, beta)] = (symbol, _shade(_color(method), lightness))
    return styles


def _not_drawn(row: Row, quality: str, speed: str) -> str:
    """Why a row has no point on the quality-against-speed plane."""
    if row.get(quality) is None:
        return f"no {ROUGE_LABELS[quality]} score"
    if speed == "speedup":
        return "no speedup: its run has no LLM cells to measure it against"
    return "no speed: every cell's timing was disturbed"


def quality_speed_figure(rows: Sequence[Row], quality: str = "rougeL", speed: str = "speedup") -> go.Figure:
    """Quality against speed, one marker per row (method, α, β), named in the legend and on hover: text labels
    beside the points overlapped each other and the ticks. A row with ``<quality>_low`` and ``<quality>_high``
    (a record bootstrap interval) gets an error bar. SLM+ and LLM are reference stars with a dashed line at their
    quality; a method's settings differ by shape (β) and shade (α). A row missing either value is not drawn, and
    its legend entry says why."""
    if quality not in ROUGE_LABELS or speed not in SPEED_LABELS:
        raise ValueError(f"quality must be one of {', '.join(ROUGE_LABELS)} and speed one of {', '.join(SPEED_LABELS)}")
    plotted = [row for row in rows if row.get(quality) is not None and row.get(speed) is not None]
    styles = _setting_styles(rows)
    figure = go.Figure()
    for row in rows:
        method = row["method"]
        reference = method in BASELINES
        label = point_label(row)
        symbol, color = styles[(method, row.get("alpha"), row.get("beta"))]
        low, high = row.get(f"{quality}_low"), row.get(f"{quality}_high")
        drawn = row.get(quality) is not None and row.get(speed) is not None
        bars = (
            {"type": "data", "symmetric": False, "array": [high - row[quality]], "arrayminus": [row[quality] - low]}
            if drawn and low is not None and high is not None
            else None
        )
        interval = f"<br>95 % interval [{low:.2f}, {high:.2f}]" if bars else ""
        figure.add_trace(
            go.Scatter(
                x=[row[speed]] if drawn else [None],
                y=[row[quality]] if drawn else [None],
                error_y=bars,
                mode="markers",
                name=(f"{label} (reference)" if reference else label)
                if drawn
                else f"{label}: not drawn, {_not_drawn(row, quality, speed)}",
                legendgroup=method,
                marker={
                    "symbol": "star" if reference else symbol,
                    "size": 16 if reference else 11,
                    "color": color,
                    "line": {"width": 1, "color": "#333"},
                },
                text=[label],
                hovertemplate="%{text}<br>"
                + f"{SPEED_LABELS[speed]}: %{{x:.3g}}<br>{ROUGE_LABELS[quality]}: %{{y:.2f}}{interval}<extra></extra>",
            )
        )
        if reference and drawn:
            figure.add_hline(y=row[quality], line_dash="dash", line_color=_color(method), opacity=0.6)
    bars_note = (
        " · error bars: 95 % record bootstrap" if any(row.get(f"{quality}_low") is not None for row in rows) else ""
    )
    figure.update_layout(
        title=f"{ROUGE_LABELS[quality]} against {'speedup' if speed == 'speedup' else 'speed'}{bars_note}",
        xaxis_title=SPEED_LABELS[speed],
        yaxis_title=f"{ROUGE_LABELS[quality]} (F1 × 100)",
        template="plotly_white",
        height=560,
        # Under the plot, the legend takes the page's width, not the plot's.
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0, "title": {"text": "β: shape, α: shade  "}},
    )
    if speed == "speedup" and rows and not plotted:
        figure.add_annotation(
            text="no LLM cells in this run: speedup is unavailable",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
        )
    return figure


def acceptance_figure(rows: Sequence[Row]) -> go.Figure:
    """Acceptance (%) against alpha (log axis), one line per (method, beta, acceptance rule)."""
    figure = go.Figure()
    with_alpha = [row for row in rows if row.get("alpha") is not None and row.get("acceptance") is not None]
    for method in _methods(with_alpha):
        method_rows = [row for row in with_alpha if row["method"] == method]
        lines = {(row.get("beta"), row.get("cda_lambda")) for row in method_rows}
        for beta, rule in sorted(lines, key=lambda line: tuple((value is not None, value or 0) for value in line)):
            line = sorted(
                (row for row in method_rows if (row.get("beta"), row.get("cda_lambda")) == (beta, rule)),
                key=lambda row: row["alpha"],
            )
            figure.add_trace(
                go.Scatter(
                    x=[row["alpha"] for row in line],
                    y=[100 * row["acceptance"] for row in line],
                    mode="lines+markers",
                    name=point_label({"method": method, "beta": beta, "cda_lambda": rule}),
                )
            )
    for row in rows:
        if row.get("alpha") is None and row.get("acceptance") is not None:
            figure.add_hline(
                y=100 * row["acceptance"],
                line_dash="dot",
                line_color=_color(row["method"]),
                annotation_text=f"{point_label(row)} (no α)",
            )
    figure.update_layout(
        title="Draft acceptance against α",
        xaxis={"title": "α (verification threshold, log scale)", "type": "log"},
        yaxis={"title": "acceptance (%)", "range": [0, 105]},
        template="plotly_white",
    )
    return figure


def table_figure(rows: Sequence[Row]) -> go.Figure:
    shown = display_rows(rows)
    headers = list(shown[0]) if shown else ["no results"]
    figure = go.Figure(
        go.Table(
            header={"values": headers, "align": "left"},
            cells={"values": [[row[header] for row in shown] for header in headers], "align": "left"},
        )
    )
    figure.update_layout(title="Per-method results", height=120 + 28 * len(shown))
    return figure


def write_html(
    path: str | Path, rows: Sequence[Row], title: str = "SpecSteer evaluation", sweep: SweepReport | None = None
) -> Path:
    """Every figure of the run in one self-contained HTML file (plotly.js inline, no network); with the run's
    ``sweep`` report, its α × β view too."""
    speed = "speedup" if any(row.get("speedup") is not None for row in rows) else "tok_per_s"
    figures = [
        quality_speed_figure(rows, "rouge1", speed),
        quality_speed_figure(rows, "rougeL", speed),
        *([sweep_figure(sweep)] if sweep is not None and sweep.settings else []),
        acceptance_figure(rows),
        table_figure(rows),
    ]
    # plotly.js goes in once, with the first figure; the others reuse it.
    bodies = [figure.to_html(full_html=False, include_plotlyjs=index == 0) for index, figure in enumerate(figures)]
    document = (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n'
        f"<body><h1>{html.escape(title)}</h1>\n<p>{html.escape(TABLE_NOTE)}</p>\n"
        + "\n".join(bodies)
        + "\n</body></html>\n"
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(document, encoding="utf-8")
    return target


# --------------------------------------------------------------------------- the α × β view

SWEEP_CAPTION = (
    "Each point: one setting over the records that have every cell of the run. Error bars: percentile "
    "bootstrap 95 % intervals over records (10,000 resamples, seed 0). Ringed points: the Pareto front (no "
    "other point is both at least as good and at least as fast). Lower panel: SpecSteer − LLM record by record."
)


def _error_bars(summaries: Sequence[PointSummary], paired: bool = False) -> dict[str, Any]:
    if paired:
        spans = [(s.vs_reference.mean, s.vs_reference.low, s.vs_reference.high) for s in summaries if s.vs_reference]
    else:
        spans = [(s.mean, s.low, s.high) for s in summaries]
    return {
        "type": "data",
        "symmetric": False,
        "array": [high - mean for mean, _, high in spans],
        "arrayminus": [mean - low for mean, low, _ in spans],
        "thickness": 1.2,
    }


def sweep_figure(report: SweepReport) -> go.Figure:
    """The α × β view (see the module doc); the title says how many records every point covers."""
    paired = [s for s in report.settings if s.vs_reference is not None and s.tok_per_s is not None]
    two = bool(paired)
    figure = make_subplots(
        rows=2 if two else 1,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        row_heights=[0.6, 0.4] if two else [1.0],
        subplot_titles=(
            (f"mean {ROUGE_LABELS[report.metric]}", f"SpecSteer − LLM, {ROUGE_LABELS[report.metric]}, record by record")
            if two
            else None
        ),
    )
    timed = [s for s in report.settings if s.tok_per_s is not None]
    labels = [s.point.setting for s in timed]
    chosen = report.choice.chosen if report.choice is not None else None
    figure.add_trace(
        go.Scatter(
            x=[s.tok_per_s for s in timed],
            y=[s.mean for s in timed],
            error_y=_error_bars(timed),
            mode="markers+text",
            text=labels,
            textposition=["top center" if i % 2 == 0 else "bottom center" for i in range(len(timed))],
            name="SpecSteer (α, β)",
            marker={"size": 10, "color": _color("specsteer")},
            hovertemplate="%{text}<br>%{x:.2f} tok/s<br>mean %{y:.2f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    for summary in report.references:
        if summary.tok_per_s is None:
            continue
        figure.add_trace(
            go.Scatter(
                x=[summary.tok_per_s],
                y=[summary.mean],
                error_y=_error_bars([summary]),
                mode="markers+text",
                text=[summary.label],
                textposition="middle right",
                name=f"{summary.label} (reference)",
                marker={"symbol": "star", "size": 15, "color": _color(summary.point.method)},
                hovertemplate="%{text}<br>%{x:.2f} tok/s<br>mean %{y:.2f}<extra></extra>",
            ),
            row=1,
            col=1,
        )
        figure.add_hline(
            y=summary.mean, line_dash="dash", line_color=_color(summary.point.method), opacity=0.5, row=1, col=1
        )
    front = sorted(
        (s for s in [*report.settings, *report.references] if s.point in report.pareto and s.tok_per_s is not None),
        key=lambda s: s.tok_per_s or 0.0,
    )
    if front:
        figure.add_trace(
            go.Scatter(
                x=[s.tok_per_s for s in front],
                y=[s.mean for s in front],
                mode="lines+markers",
                name="Pareto front",
                line={"color": "#444", "dash": "dot", "width": 1},
                marker={"symbol": "circle-open", "size": 20, "color": "#444", "line": {"width": 2}},
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )
    if two:
        figure.add_trace(
            go.Scatter(
                x=[s.tok_per_s for s in paired],
                y=[s.vs_reference.mean for s in paired if s.vs_reference],
                error_y=_error_bars(paired, paired=True),
                mode="markers",
                text=[s.point.setting for s in paired],
                name="SpecSteer − LLM",
                marker={
                    "size": [16 if s.point == chosen else 9 for s in paired],
                    "symbol": ["diamond" if s.point == chosen else "circle" for s in paired],
                    "color": _color("specsteer"),
                },
                hovertemplate="%{text}<br>%{x:.2f} tok/s<br>%{y:+.2f}<extra></extra>",
            ),
            row=2,
            col=1,
        )
        figure.add_hline(y=0, line_color=_color("llm"), line_dash="dash", opacity=0.7, row=2, col=1)
        figure.update_yaxes(title_text="difference (F1 × 100)", row=2, col=1)
    subtitle = report.coverage()
    if report.choice is not None:
        subtitle += (
            " "
            + report.choice.statement().replace("chosen:", "The plan's rule chooses")
            + (" (diamond)" if two else "")
        )
    figure.update_layout(
        title=f"α × β: quality against speed<br><sup>{'<br>'.join(textwrap.wrap(plot_text(subtitle), 120))}</sup>",
        template="plotly_white",
        height=720 if two else 480,
        margin={"t": 120},
    )
    figure.update_yaxes(title_text=f"{ROUGE_LABELS[report.metric]} (F1 × 100)", row=1, col=1)
    figure.update_xaxes(title_text="tokens / s (same run, same records)", row=2 if two else 1, col=1)
    if not timed:
        figure.add_annotation(
            text="no SpecSteer setting with a complete record yet",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
        )
    return figure.update_traces(cliponaxis=False)
