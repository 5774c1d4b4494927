"""The per-row table of an evaluation run as text, shared by the command line and the dashboard.

:func:`display_rows` turns the summary rows of ``specsteer.evaluation.grid.summarize`` (ROUGE on 0–100, acceptance
0–1, tok_per_s, speedup) into strings keyed by column header; :func:`text_table` lays them out for the terminal with
:data:`TABLE_NOTE`, which says what each column means. The figures (``specsteer.evaluation.plots``) draw the same
rows; this module needs no plotting library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specsteer.evaluation.timing import left_out_sentence
from specsteer.method.catalog import method_label

Row = Mapping[str, Any]

TABLE_NOTE = (
    "ROUGE: F-measure × 100, mean over records; R-1 / R-L unstemmed (LaMP protocol), 'stem' with the "
    "Porter stemmer. tok/s: total new tokens / total seconds. acceptance: accepted / drafted tokens. "
    "speedup: tok/s over LLM's on the same records in the same run. rounds, bytes: mean per generation. "
    "history crossed: generations where a run of 3 words (or a 2-word name) of the user's history, not in the "
    "input, crossed to the cloud in any message, rejected drafts included (in brackets: phrases per generation)."
)


def number_cell(value: Any, digits: int, suffix: str = "") -> str:
    """``value`` to ``digits`` decimals with ``suffix``, or "–" where there is none."""
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def _parameter(value: Any) -> str:
    return "–" if value is None else f"{value:g}"


def display_rows(rows: Sequence[Row]) -> list[dict[str, str]]:
    """The table as strings, one dict per row, keyed by column header (what the UI and CLI show).
    Runs over records with private facts (CoGenesis) add the privacy audit's shares; rows that left cells out
    of their speed figures (disturbed timing, ``grid.summarize``'s ``speed_left_out``) add how many; rows with
    an LLM judge's grades (``judge_scores.row_columns``) add a column per judge and criterion."""
    with_privacy = any("facts_sent" in row for row in rows)
    with_left_out = any(row.get("speed_left_out") for row in rows)
    with_cda = any(row.get("cda_lambda") is not None for row in rows)
    return [
        {
            "method": method_label(row["method"]),
            "α": _parameter(row.get("alpha")),
            "β": _parameter(row.get("beta")),
            **({"CDA λ": _parameter(row.get("cda_lambda"))} if with_cda else {}),
            "n": str(row.get("records", "")),
            "R-1": number_cell(row.get("rouge1"), 2),
            "R-L": number_cell(row.get("rougeL"), 2),
            "R-1 stem": number_cell(row.get("rouge1_stemmed"), 2),
            "R-L stem": number_cell(row.get("rougeL_stemmed"), 2),
            "acceptance": number_cell(None if row.get("acceptance") is None else 100 * row["acceptance"], 1, "%"),
            "tok/s": number_cell(row.get("tok_per_s"), 2),
            "speedup": number_cell(row.get("speedup"), 2, "×"),
            **({"left out of speed": str(row.get("speed_left_out") or 0)} if with_left_out else {}),
            "rounds": number_cell(row.get("rounds"), 1),
            "up B": number_cell(row.get("uplink_bytes"), 0),
            "down B": number_cell(row.get("downlink_bytes"), 0),
            **(_privacy_columns(row) if with_privacy else {}),
            **(_crossing_columns(row) if any("history_crossed" in other for other in rows) else {}),
            # An LLM judge's grades, mean [interval] per criterion (judge_scores.row_columns), where the run has any.
            **row.get("judge", {}),
        }
        for row in rows
    ]


def _crossing_columns(row: Row) -> dict[str, str]:
    """The history that crossed (``specsteer.data.crossing``): the share of generations where any phrase of the
    history crossed to the cloud, with the phrases per generation in brackets; "–" where no cell was audited."""
    if row.get("history_crossed") is None:
        return {"history crossed": "–"}
    # One column (share, then phrases per generation): two would push a compared runs' table past its width.
    share, phrases = number_cell(100 * row["history_crossed"], 0, "%"), number_cell(row.get("history_phrases"), 1)
    return {"history crossed": f"{share} ({phrases})"}


def _privacy_columns(row: Row) -> dict[str, str]:
    """Shares of the records' private facts: sent to the cloud (all; those the task did not name), in
    the output, and sent only in rejected drafts (``specsteer.data.facts``)."""
    share = lambda key: number_cell(None if row.get(key) is None else 100 * row[key], 0, "%")  # noqa: E731
    return {
        "facts → cloud": share("facts_sent"),
        "→ cloud, not in task": share("facts_sent_beyond_task"),
        "facts in output": share("facts_in_output"),
        "only in rejected drafts": share("facts_rejected_only"),
    }


def text_table(rows: Sequence[Row]) -> str:
    """A fixed-width table for the terminal, with the note on what each column means."""
    shown = display_rows(rows)
    if not shown:
        return "no results"
    headers = list(shown[0])
    widths = {header: max(len(header), *(len(row[header]) for row in shown)) for header in headers}
    lines = ["  ".join(header.ljust(widths[header]) for header in headers)]
    lines += ["  ".join(row[header].ljust(widths[header]) for header in headers) for row in shown]
    left_out = left_out_sentence(sum(row.get("speed_left_out") or 0 for row in rows))
    return "\n".join([*lines, "", TABLE_NOTE, *([left_out] if left_out else [])])
