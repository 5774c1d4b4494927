"""Figures of an evaluation run: one point per (method, alpha, beta), references, standalone HTML."""

from __future__ import annotations

import re

import plotly.graph_objects as go
import pytest

from specsteer.evaluation import deployment_plots, plots, result_table


def _row(method, alpha=None, beta=None, rouge=30.0, tok_per_s=5.0, speedup=1.0, acceptance=None):
    return {
        "method": method,
        "alpha": alpha,
        "beta": beta,
        "records": 3,
        "rouge1": rouge,
        "rougeL": rouge - 10,
        "rouge1_stemmed": rouge + 1,
        "rougeL_stemmed": rouge - 9,
        "acceptance": acceptance,
        "tok_per_s": tok_per_s,
        "speedup": speedup,
        "rounds": 10.0,
        "new_tokens": 32.0,
        "uplink_bytes": 900.0,
        "downlink_bytes": 300.0,
    }


ROWS = [
    _row("slm+", rouge=25.0, tok_per_s=18.0, speedup=2.6),
    _row("llm", rouge=28.0, tok_per_s=7.0, speedup=1.0),
    _row("sd", rouge=28.0, tok_per_s=7.5, speedup=1.07, acceptance=0.6),
    _row("lightcosteer", beta=1.0, rouge=31.0, tok_per_s=3.0, speedup=0.43),
    _row("specsteer", 1.0, 1.0, rouge=30.0, tok_per_s=6.0, speedup=0.86, acceptance=0.5),
    _row("specsteer", 0.1, 1.0, rouge=29.0, tok_per_s=8.0, speedup=1.14, acceptance=0.8),
    _row("specsteer", 0.5, 2.0, rouge=31.5, tok_per_s=6.5, speedup=0.93, acceptance=0.6),
]


def _points(figure: go.Figure) -> list[tuple[float, float, str]]:
    return [point for trace in figure.data for point in zip(trace.x, trace.y, trace.text) if point[0] is not None]


def test_quality_speed_has_one_point_per_row_named_in_the_legend_not_labelled_beside_it():
    figure = plots.quality_speed_figure(ROWS, quality="rouge1", speed="speedup")
    points = _points(figure)
    assert len(points) == len(ROWS)
    assert (1.14, 29.0, "SpecSteer α=0.1 β=1") in points
    assert (0.43, 31.0, "LightCoSteer β=1") in points
    assert figure.layout.yaxis.title.text.startswith("ROUGE-1")
    assert all(trace.mode == "markers" for trace in figure.data)  # text labels overlapped each other and the ticks
    assert "SpecSteer α=0.1 β=1" in [trace.name for trace in figure.data]


def test_settings_of_one_method_differ_by_shape_for_beta_and_shade_for_alpha():
    figure = plots.quality_speed_figure(ROWS, quality="rougeL", speed="tok_per_s")
    marker = {trace.name: (trace.marker.symbol, trace.marker.color) for trace in figure.data}
    one, tenth, half = marker["SpecSteer α=1 β=1"], marker["SpecSteer α=0.1 β=1"], marker["SpecSteer α=0.5 β=2"]
    assert one[0] == tenth[0] != half[0]  # β=1 and β=2 have their own shapes
    assert len({one[1], tenth[1], half[1]}) == 3  # each α its own shade


def test_a_row_with_an_interval_gets_its_error_bar():
    rows = [dict(row, rougeL_low=row["rougeL"] - 1.5, rougeL_high=row["rougeL"] + 0.5) for row in ROWS]
    figure = plots.quality_speed_figure(rows, quality="rougeL", speed="tok_per_s")
    bars = {trace.name: (trace.error_y.arrayminus[0], trace.error_y.array[0]) for trace in figure.data}
    assert bars["SpecSteer α=0.1 β=1"] == pytest.approx((1.5, 0.5))
    assert "error bars" in figure.layout.title.text


def test_slm_plus_and_llm_are_reference_markers_with_dashed_lines():
    figure = plots.quality_speed_figure(ROWS, quality="rougeL", speed="tok_per_s")
    references = [trace for trace in figure.data if trace.name.endswith("(reference)")]
    assert sorted(trace.name for trace in references) == ["LLM (reference)", "SLM+ (reference)"]
    assert all(trace.marker.symbol == "star" for trace in references)
    dashed = sorted(shape.y0 for shape in figure.layout.shapes if shape.line.dash == "dash")
    assert dashed == [15.0, 18.0]  # the references' ROUGE-L


def test_rows_without_speedup_are_left_out_and_the_legend_says_why():
    no_reference = [dict(row, speedup=None) for row in ROWS if row["method"] != "llm"]
    figure = plots.quality_speed_figure(no_reference, speed="speedup")
    assert _points(figure) == []
    assert "speedup is unavailable" in figure.layout.annotations[0].text
    names = [trace.name for trace in figure.data]
    assert len(names) == len(no_reference)
    assert all("not drawn, no speedup: its run has no LLM cells" in name for name in names)


def test_unknown_axis_is_refused():
    with pytest.raises(ValueError):
        plots.quality_speed_figure(ROWS, quality="bleu")


def test_acceptance_against_alpha_one_line_per_beta():
    figure = plots.acceptance_figure(ROWS)
    lines = {trace.name: (list(trace.x), list(trace.y)) for trace in figure.data}
    assert lines == {"SpecSteer β=1": ([0.1, 1.0], [80.0, 50.0]), "SpecSteer β=2": ([0.5], [60.0])}
    assert figure.layout.xaxis.type == "log"
    # SD drafts but has no alpha: a dotted reference line at its acceptance.
    assert [shape.y0 for shape in figure.layout.shapes if shape.line.dash == "dot"] == [60.0]


def test_table_rows_and_figure():
    shown = result_table.display_rows(ROWS)
    assert shown[0]["method"] == "SLM+" and shown[0]["α"] == "–" and shown[0]["acceptance"] == "–"
    assert shown[5]["α"] == "0.1" and shown[5]["acceptance"] == "80.0%" and shown[5]["speedup"] == "1.14×"
    table = plots.table_figure(ROWS).data[0]
    assert isinstance(table, go.Table)
    assert list(table.header.values)[:3] == ["method", "α", "β"]
    assert len(table.cells.values[0]) == len(ROWS)
    text = result_table.text_table(ROWS)
    assert text.splitlines()[0].split()[:4] == ["method", "α", "β", "n"]
    assert "LaMP protocol" in text


def test_html_is_standalone(tmp_path):
    target = plots.write_html(tmp_path / "out" / "report.html", ROWS, title="run <b>x</b>")
    page = target.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc=", page)  # plotly.js is inline: works offline
    assert "Plotly.newPlot" in page and page.count("Plotly.newPlot") == 4
    assert "run &lt;b&gt;x&lt;/b&gt;" in page


def _projected(method, alpha, rtt, projected, measured, speedup):
    return {
        "method": method,
        "alpha": alpha,
        "beta": 1.0 if alpha is not None else None,
        "rtt_ms": rtt,
        "projected_tok_per_s": projected,
        "measured_tok_per_s": measured,
        "projected_speedup": speedup,
    }


def test_the_deployment_figure_is_labelled_a_projection_and_escapes_what_it_is_given():
    rows = [_projected("llm", None, rtt, 20.0 - rtt / 50, 3.0, 1.0) for rtt in (0.0, 100.0, 200.0)]
    rows += [
        _projected("specsteer", 0.1, rtt, 30.0 - rtt / 10, 1.1, (30.0 - rtt / 10) / (20.0 - rtt / 50))
        for rtt in (200.0, 0.0, 100.0)
    ]  # any order: each line is drawn by RTT
    figure = deployment_plots.deployment_figure(rows, "<b>Phone</b>", run_name="<a href='x'>run</a>")
    texts = [figure.layout.title.text, *(note.text for note in figure.layout.annotations)]
    assert not any("<b>Phone" in text or "<a " in text for text in texts)
    assert "profile: &lt;b&gt;Phone&lt;/b&gt; · run &lt;a href='x'&gt;run&lt;/a&gt;" in texts[0]
    lines = [trace for trace in figure.data if trace.type == "scatter"]
    assert [list(line.x) for line in lines] == [[0.0, 100.0, 200.0]] * 2
    assert list(lines[1].y) == [30.0, 20.0, 10.0]
    bars = [bar for bar in figure.data if bar.type == "bar"]
    assert [list(bar.x) for bar in bars] == [[3.0], [1.1]] and {bar.orientation for bar in bars} == {"h"}
    assert "a projection, not a measurement" in figure.layout.title.text
    table = deployment_plots.speedup_rows(rows, [0.0, 200.0])
    assert table == [
        {
            "RTT (ms)": "0",
            "LLM (tok/s)": "20.00",
            "SpecSteer α=0.1 β=1 (tok/s)": "30.00",
            "SpecSteer α=0.1 β=1 speedup": "1.50×",
        },
        {
            "RTT (ms)": "200",
            "LLM (tok/s)": "16.00",
            "SpecSteer α=0.1 β=1 (tok/s)": "10.00",
            "SpecSteer α=0.1 β=1 speedup": "0.62×",
        },
    ]
    without_llm = deployment_plots.speedup_rows([{**row, "projected_speedup": None} for row in rows[3:]], [0.0])
    assert without_llm == [
        {"RTT (ms)": "0", "SpecSteer α=0.1 β=1 (tok/s)": "30.00", "SpecSteer α=0.1 β=1 speedup": "–"}
    ]
