"""What a grid's cells say: one summary row per (method, alpha, beta), and paired differences over records.

Summary (:func:`summarize`), one row per (method, alpha, beta):


* ROUGE — the mean over records of each F-measure, on the 0–100 scale; ``rouge1`` / ``rougeL``
  unstemmed (the LaMP protocol), ``rouge1_stemmed`` / ``rougeL_stemmed`` with the Porter stemmer.
* ``tok_per_s`` — total new tokens / total generation seconds over the row's records (time
  includes prompt prefill and, for speculative methods, every round). Cells whose timing was disturbed
  (the process stood still mid-generation: ``specsteer.method.timing``) are left out of this and of every
  other speed figure below; ``speed_left_out`` says how many of the row's cells that is (its ROUGE, acceptance
  and hygiene keep them).
* ``acceptance`` — total accepted drafts / total drafted tokens (0–1); None for methods that
  do not draft.
* ``speedup`` — the row's tok_per_s divided by the ``llm`` row's, both recomputed over the
  records the two rows share with sound timing, measured in the same run. None when the run has no ``llm`` cells:
  a stored constant would compare timings from another machine state.
* ``decode_tok_per_s`` / ``decode_speedup`` — the same with every stream's first pass (prompt
  processing) left out. On a runtime with prefix reuse (llama.cpp) the first method run on a record
  pays for reading its prompts and the later ones mostly do not, so the decoding phase is the fair
  comparison between methods there.
* ``layout_copy``, ``preamble``, ``refusal`` — output hygiene (``specsteer.data.hygiene``): the share of
  outputs that copy the prompt's item layout, open with a preamble, or refuse; given when the
  summary has the run's prompts (the grid's own result, ``run_prompts`` for a stored run).
* ``history_crossed``, ``history_phrases`` — the history-crossing audit (``specsteer.data.crossing``), on any
  task: the share of generations where a phrase of the record's history (items and profile, not in the plain
  prompt) crossed the link, in any uplink message, rejected drafts included, and the mean phrases per
  generation. Each cell stores its audit; a cell stored before the audit existed has none and is left out.
* ``rounds``, ``new_tokens``, ``uplink_bytes``, ``downlink_bytes`` — means per generation.

Paired differences (:func:`paired_difference`): two grid points compared record by record on one ROUGE metric,
with a bootstrap interval over records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specsteer.data.facts import fact_shares, method_exposure
from specsteer.data.hygiene import classify_output
from specsteer.data.tasks import PromptPair
from specsteer.evaluation.metrics import ROUGE_KEYS, bootstrap_interval, corpus_rouge
from specsteer.evaluation.timing import timed_cells
from specsteer.method.catalog import METHODS, SPEED_REFERENCE
from specsteer.stores.runs import CellResult, GridPoint
from specsteer.util.jsonable import to_jsonable

JSON_ROW_KEYS = (
    "method",
    "alpha",
    "beta",
    "cda_lambda",
    *ROUGE_KEYS,
    "acceptance",
    "tok_per_s",
    "speedup",
    "decode_tok_per_s",
    "decode_speedup",
    "speed_left_out",
    "layout_copy",
    "preamble",
    "refusal",
)
# The privacy audit's shares (``specsteer.data.facts``), in the rows of a run over records with private
# facts (CoGenesis): sent to the cloud, sent though the task did not name them, in the output, sent only in
# rejected drafts. ``--json`` rows carry them after JSON_ROW_KEYS when the run's rows have them.
PRIVACY_ROW_KEYS = ("facts_sent", "facts_sent_beyond_task", "facts_in_output", "facts_rejected_only")
# The history that crossed (``specsteer.data.crossing``), on any task: the share of the row's generations where
# any phrase of the history crossed, and the mean phrases per generation, over the cells audited (cells stored
# before the audit have none). ``--json`` rows carry them after the others when any row has them.
CROSSING_ROW_KEYS = ("history_crossed", "history_phrases")


def _row_order(point: GridPoint) -> tuple:
    rank = METHODS.index(point.method) if point.method in METHODS else len(METHODS)
    # Strict to permissive (alpha descending), as the paper's tables read; the fixed α before CDA.
    alpha = point.alpha if point.alpha is not None else float("inf")
    beta = point.beta if point.beta is not None else 0.0
    return rank, point.method, -alpha, beta, point.cda_lambda is not None, point.cda_lambda or 0.0


def row_point(row: Mapping[str, Any]) -> GridPoint:
    """The grid point of a summary row (:func:`summarize`)."""
    return GridPoint(row["method"], row["alpha"], row["beta"], row.get("cda_lambda"))


def _throughput(cells: Sequence[CellResult], decode_only: bool = False) -> float | None:
    """Tokens per second over the cells; ``decode_only`` leaves every stream's first pass out.

    The decoding phase is what compares fairly between the methods of one record: on a runtime
    with prefix reuse the first method to read a prompt pays its processing, the later ones not.
    """
    seconds = sum(cell.stats.seconds - (cell.stats.prefill_seconds if decode_only else 0.0) for cell in cells)
    tokens = sum(cell.stats.new_tokens for cell in cells)
    return tokens / seconds if seconds > 0 else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _speedup(cells: Sequence[CellResult], reference: Sequence[CellResult], decode_only: bool = False) -> float | None:
    shared = {cell.record_id for cell in cells} & {cell.record_id for cell in reference}
    own = _throughput([cell for cell in cells if cell.record_id in shared], decode_only)
    base = _throughput([cell for cell in reference if cell.record_id in shared], decode_only)
    return own / base if own is not None and base else None


def _hygiene(cells: Sequence[CellResult], task: str, prompts: Mapping[str, PromptPair]) -> dict[str, float | None]:
    """Shares of the cells' outputs that copy the prompt's item layout, open with a preamble, or refuse."""
    verdicts = [classify_output(cell.output, task, prompts[cell.record_id]) for cell in cells]
    share = lambda flag: sum(getattr(v, flag) for v in verdicts) / len(verdicts) if verdicts else None  # noqa: E731
    return {"layout_copy": share("layout_copy"), "preamble": share("preamble"), "refusal": share("refusal")}


def _privacy(
    cells: Sequence[CellResult], prompts: Mapping[str, PromptPair], facts: Mapping[str, Sequence[str]]
) -> dict[str, float | None]:
    """Shares of the cells' private facts sent to the cloud (all; those the task did not name), found
    in the output, and sent only in rejected drafts (``specsteer.data.facts``)."""
    shares = fact_shares(
        [
            method_exposure(
                cell.point.method, facts[cell.record_id], prompts[cell.record_id], cell.stats.sent_text, cell.output
            )
            for cell in cells
            if facts.get(cell.record_id)
        ]
    )
    if shares is None:
        return {}
    values = (shares.sent, shares.sent_beyond_task, shares.in_output, shares.rejected_only)
    return dict(zip(PRIVACY_ROW_KEYS, values, strict=True))


def _crossing(cells: Sequence[CellResult]) -> dict[str, float]:
    """The share of the audited cells where history crossed, and their mean phrases (empty: none audited)."""
    audited = [cell.history_crossed for cell in cells if cell.history_crossed is not None]
    if not audited:
        return {}
    values = (sum(c.crossed for c in audited) / len(audited), sum(c.count for c in audited) / len(audited))
    return dict(zip(CROSSING_ROW_KEYS, values, strict=True))


def _summary_row(
    point: GridPoint,
    cells: Sequence[CellResult],
    reference: Sequence[CellResult],
    task: str | None,
    prompts: Mapping[str, PromptPair] | None,
    facts: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    stats = [cell.stats for cell in cells]
    drafted = sum(s.drafted for s in stats)
    hygiene = _hygiene(cells, task, prompts) if task and prompts is not None else {}
    privacy = _privacy(cells, prompts, facts) if facts and prompts is not None else {}
    timed = timed_cells(cells)  # speed figures only: quality keeps every cell
    return {
        "method": point.method,
        "alpha": point.alpha,
        "beta": point.beta,
        "cda_lambda": point.cda_lambda,
        "records": len(cells),
        **corpus_rouge(cell.rouge for cell in cells),
        "acceptance": sum(s.accepted for s in stats) / drafted if drafted else None,
        "tok_per_s": _throughput(timed),
        "speedup": _speedup(timed, reference) if reference else None,
        "decode_tok_per_s": _throughput(timed, decode_only=True),
        "decode_speedup": _speedup(timed, reference, decode_only=True) if reference else None,
        "speed_left_out": len(cells) - len(timed),
        **hygiene,
        **privacy,
        **_crossing(cells),
        "rounds": _mean([s.rounds for s in stats]),
        "new_tokens": _mean([s.new_tokens for s in stats]),
        "uplink_bytes": _mean([s.uplink_bytes for s in stats]),
        "downlink_bytes": _mean([s.downlink_bytes for s in stats]),
    }


def summarize(
    cells: Sequence[CellResult],
    task: str | None = None,
    prompts: Mapping[str, PromptPair] | None = None,
    facts: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """One row per grid point (method, alpha, beta, acceptance rule) of a run's cells; see the module doc. With
    the run's task and its prompts by record id (:func:`run_prompts`), rows also give the output hygiene shares;
    with the records' private facts as well (:func:`run_facts`, CoGenesis), the privacy shares."""
    groups: dict[GridPoint, list[CellResult]] = {}
    for cell in cells:
        groups.setdefault(cell.point, []).append(cell)
    reference = timed_cells(groups.get(GridPoint(SPEED_REFERENCE), []))
    return [
        _summary_row(point, groups[point], reference, task, prompts, facts) for point in sorted(groups, key=_row_order)
    ]


@dataclass(frozen=True)
class PairedDifference:
    """Two grid points compared record by record on one ROUGE metric (0-100): the records both have,
    how many ``ours`` won, the mean difference and its bootstrap interval over records."""

    ours: GridPoint
    theirs: GridPoint
    metric: str
    records: int
    wins: int
    mean: float
    low: float
    high: float
    level: float = 0.95

    def describe(self) -> str:
        return f"{self.wins}/{self.records} better, {self.mean:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"


def paired_difference(
    cells: Sequence[CellResult],
    ours: GridPoint,
    theirs: GridPoint,
    metric: str = "rougeL",
    draws: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedDifference | None:
    """``ours`` minus ``theirs`` on ``metric`` over the records both have, with a percentile bootstrap
    interval (records resampled with replacement, ``draws`` times, a fixed seed); None without a shared
    record or a score."""
    scores: dict[GridPoint, dict[str, float]] = {ours: {}, theirs: {}}
    for cell in cells:
        if cell.point in scores and (score := cell.rouge.get(metric)) is not None:
            scores[cell.point][cell.record_id] = 100 * score
    return paired_values(ours, theirs, metric, scores[ours], scores[theirs], draws, seed, level)


def paired_values(
    ours: GridPoint,
    theirs: GridPoint,
    metric: str,
    our_values: Mapping[str, float],
    their_values: Mapping[str, float],
    draws: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedDifference | None:
    """:func:`paired_difference` of any per-record values (record id -> value), e.g. a judge's grades."""
    records = sorted(set(our_values) & set(their_values))
    if not records:
        return None
    differences = [our_values[record] - their_values[record] for record in records]
    low, high = bootstrap_interval(differences, draws, seed, level)
    return PairedDifference(
        ours,
        theirs,
        metric,
        len(records),
        sum(d > 0 for d in differences),
        sum(differences) / len(differences),
        low,
        high,
        level,
    )


def json_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The command line's ``--json`` rows: exactly JSON_ROW_KEYS, then PRIVACY_ROW_KEYS when any row has the
    privacy audit's shares (a CoGenesis run: the same shares the summary table and the Dashboard show, null
    for a row without them), then CROSSING_ROW_KEYS when any row has the history-crossing audit's, non-finite
    numbers as null."""
    keys = JSON_ROW_KEYS + (PRIVACY_ROW_KEYS if any(PRIVACY_ROW_KEYS[0] in row for row in rows) else ())
    keys += CROSSING_ROW_KEYS if any(CROSSING_ROW_KEYS[0] in row for row in rows) else ()
    return [to_jsonable({key: row.get(key) for key in keys}) for row in rows]
