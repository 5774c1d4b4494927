"""The Dashboard's figures and tables from a run's numbers (``evaluation_runs.RunNumbers``: summary rows with
their intervals, the paired differences), as plotly and pandas values for Gradio. The quality plot's speed is
tokens/s measured in the run: every row has one, so every method is drawn (a speedup needs LLM cells in the same
run, which a run of P³ alone has not)."""

from __future__ import annotations

from collections.abc import Sequence

import gradio as gr
import pandas as pd

from specsteer.evaluation import plots, result_table

TABLE_HEADERS = list(result_table.display_rows([{"method": "x"}])[0])


SPEED = "tok_per_s"


# Sizing the results table's columns. Left to itself, Gradio gives the columns widths that broke
# "acceptance" into "accep / tance", and a long run name took the width that speedup, rounds and the
# byte columns needed. Every column but the run's is as wide as its longest word or value (the
# table's monospace font: 8.4 px a character in Chromium, plus the cell's 16 px of padding); the run
# column has a fixed width and wraps its names between words.
_CHAR_PX = 8.5


_CELL_PADDING_PX = 24


_RUN_COLUMN = "run"


_RUN_COLUMN_WIDTH = "200px"


def table_update(table: pd.DataFrame) -> dict:
    """A table, shown, with column widths that keep every header word whole and every column in view."""
    widths = []
    for column in table.columns:
        if column == _RUN_COLUMN:
            widths.append(_RUN_COLUMN_WIDTH)
            continue
        words = [*str(column).split(), *(str(value) for value in table[column])]
        widths.append(f"{round(max(map(len, words)) * _CHAR_PX + _CELL_PADDING_PX)}px")
    return gr.update(value=table, column_widths=widths, visible=True)


def table_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """The rows as the results table: the standard columns, and the privacy columns where rows have them."""
    shown = result_table.display_rows(rows)
    return pd.DataFrame(shown, columns=list(shown[0]) if shown else TABLE_HEADERS)


def figures(rows: Sequence[dict]):
    """(quality-vs-speed figure, acceptance-vs-alpha figure, table) of one run's summary rows."""
    table = table_frame(rows)
    quality = plots.quality_speed_figure(rows, "rougeL", SPEED)
    return quality, plots.acceptance_figure(rows), table


def differences_frame(runs: Sequence[tuple[str, Sequence[dict]]]) -> pd.DataFrame | None:
    """The paired differences of each run (``claims.claim_row``) as one table, a run column first when several;
    None when no run has any (no SpecSteer setting, or no baseline to compare it with)."""
    lines = [{**({"run": name} if len(runs) > 1 else {}), **row} for name, rows in runs for row in rows]
    return pd.DataFrame(lines) if lines else None


def compared_figures(runs: Sequence[tuple[str, list[dict]]]):
    """Several runs in one view: traces and table rows named after their run.

    Run names are the user's text: plotly would read ``<b>`` or ``<a href>`` in a trace name as
    markup, so they are escaped for it. The legend goes under the plot, where long names take
    the page's width instead of squeezing the plot.
    """
    if len(runs) == 1:
        return figures(runs[0][1])
    speed = SPEED
    quality = plots.quality_speed_figure([], "rougeL", speed)
    acceptance = plots.acceptance_figure([])
    tables = []
    for name, rows in runs:
        for source, target in (
            (plots.quality_speed_figure(rows, "rougeL", speed), quality),
            (plots.acceptance_figure(rows), acceptance),
        ):
            for trace in source.data:
                trace.name = f"{plots.plot_text(name)}: {trace.name}"
                target.add_trace(trace)
        shown = table_frame(rows)
        shown.insert(0, "run", name)
        tables.append(shown)
    quality.update_layout(title="ROUGE-L against speed — runs compared · error bars: 95 % record bootstrap")
    for figure in (quality, acceptance):
        figure.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0})
    return quality, acceptance, pd.concat(tables, ignore_index=True)
