"""What a run's LLM-judge results say beyond its grades, GUI-free: the judge's position bias, its agreement with
the people who judged the same outputs in a campaign, and the judge's part of the Dashboard's run table and of a
campaign's export.

* **Position bias** (:func:`position_consistency`): every pair of outputs compared in both orders
  (``specsteer.evaluation.judge_run``, pairwise) gives two verdicts; the pair *flips* when the output preferred
  (or the tie) changes with the order. The share of pairs that flip has a Wilson 95 % interval
  (``preference.wilson_interval``), as has the share of decisive verdicts that chose the output shown first
  (0.5 without a position preference). A judge that flips often is reading the order, not the texts.
* **Pairwise outcomes** (:func:`pair_outcomes`): per two grid points, the records where both orders chose the
  same one, both said tie, or the verdict followed the order.
* **Agreement with people** (:func:`human_agreement`): a campaign made from the run's own outputs
  (``specsteer.service.campaign_import``; its data names the run) holds judgements that prefer one output of a
  record's comparison; each then beats every other output shown (``preference.pairwise_outcomes``' reading).
  For every such (winner, loser) the judge's grades of the two cells agree (winner graded higher), disagree, or
  tie; the share agreeing among the decided has a Wilson interval. Ties and "all good/bad" order nothing.
* :func:`run_table` — the Dashboard's rows with a column per judge and criterion (mean [interval]) and the
  sentences under them; :func:`export_fields` — a campaign export row's judge grades of its comparison's outputs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specsteer.evaluation.judge_rubric import CRITERION_LABELS
from specsteer.evaluation.judge_scores import row_columns, scale_note
from specsteer.evaluation.preference import wilson_interval
from specsteer.stores.campaigns import CampaignItemRef, RunSource, StoredCampaign, StoredCampaignJudgement
from specsteer.stores.generations import SPECIAL_PREFERENCES
from specsteer.stores.judges import JudgeIdentity, JudgeScore, PairVerdict
from specsteer.stores.protocols import JudgeReader
from specsteer.stores.runs import GridPoint, StoredRun, grid_point

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Share:
    """``count`` of ``of``, with a Wilson interval (None when ``of`` is 0)."""

    count: int
    of: int
    low: float | None
    high: float | None

    @classmethod
    def of_counts(cls, count: int, of: int) -> Share:
        low, high = wilson_interval(count, of, CONFIDENCE) if of else (None, None)
        return cls(count, of, low, high)

    @property
    def share(self) -> float | None:
        return self.count / self.of if self.of else None

    def text(self) -> str:
        if not self.of:
            return "none to count"
        return f"{100 * self.count / self.of:.0f} % ({self.count} of {self.of}; {100 * CONFIDENCE:g} % Wilson [{100 * self.low:.0f}, {100 * self.high:.0f}] %)"  # type: ignore[operator]

    def json(self) -> dict[str, Any]:
        return {"count": self.count, "of": self.of, "share": self.share, "low": self.low, "high": self.high}


# --------------------------------------------------------------------------- position bias


def _outcome(verdict: PairVerdict) -> GridPoint | str:
    return verdict.preferred or "tie"


def _both_orders(verdicts: Sequence[PairVerdict]) -> dict[tuple, tuple[PairVerdict, PairVerdict]]:
    """(judge, criterion, record, the pair's two points in a fixed order) -> the verdicts in both orders, for
    the pairs with a verdict in each."""
    decided: dict[tuple, PairVerdict] = {}
    for verdict in verdicts:
        if verdict.winner is not None:
            decided[(verdict.judge, verdict.criterion, verdict.record_id, verdict.first, verdict.second)] = verdict
    pairs = {}
    for (judge, criterion, record, first, second), verdict in decided.items():
        swapped = decided.get((judge, criterion, record, second, first))
        if swapped is not None and first.label < second.label:
            pairs[(judge, criterion, record, first, second)] = (verdict, swapped)
    return pairs


@dataclass(frozen=True)
class Consistency:
    """One judge's verdicts on one criterion, read for position bias."""

    judge: JudgeIdentity
    criterion: str
    flips: Share  # pairs asked in both orders whose outcome changed with the order
    first_shown: Share  # decisive verdicts that chose the output shown first (0.5 without a bias)

    def sentence(self) -> str:
        who = self.judge.label
        criterion = CRITERION_LABELS.get(self.criterion, self.criterion)
        return (
            f"Position bias of {who} on {criterion}: {self.flips.text()} of the pairs asked in both orders flip "
            f"with the order; {self.first_shown.text()} of its decisive verdicts chose the text shown first."
        )

    def json(self) -> dict[str, Any]:
        return {
            "judge": self.judge.model,
            "weak_judge": self.judge.weak,
            "criterion": self.criterion,
            "flips": self.flips.json(),
            "first_shown_chosen": self.first_shown.json(),
        }


def position_consistency(verdicts: Sequence[PairVerdict]) -> list[Consistency]:
    """Per judge and criterion: the share of pairs that flip with the order, and of decisive verdicts that chose
    the first output shown."""
    groups: dict[tuple[JudgeIdentity, str], list[PairVerdict]] = defaultdict(list)
    for verdict in verdicts:
        groups[(verdict.judge, verdict.criterion)].append(verdict)
    found = []
    for (judge, criterion), group in groups.items():
        pairs = _both_orders(group).values()
        flips = sum(_outcome(a) != _outcome(b) for a, b in pairs)
        decisive = [verdict for verdict in group if verdict.winner in ("first", "second")]
        first = sum(verdict.winner == "first" for verdict in decisive)
        found.append(
            Consistency(judge, criterion, Share.of_counts(flips, len(pairs)), Share.of_counts(first, len(decisive)))
        )
    return sorted(found, key=lambda c: (c.judge.weak, c.judge.key, c.criterion))


@dataclass(frozen=True)
class PairOutcome:
    """Two grid points on the records asked in both orders: how often each won in both, tied in both, or the
    verdict followed the order."""

    judge: JudgeIdentity
    criterion: str
    a: GridPoint
    b: GridPoint
    a_wins: int
    b_wins: int
    ties: int
    order_decided: int

    def sentence(self) -> str:
        a, b = self.a.display, self.b.display
        return (
            f"{a} vs {b} ({CRITERION_LABELS.get(self.criterion, self.criterion)}, {self.judge.label}): {a} in both "
            f"orders on {self.a_wins} records, {b} on {self.b_wins}, a tie in both on {self.ties}, the verdict "
            f"followed the order on {self.order_decided}."
        )


def pair_outcomes(verdicts: Sequence[PairVerdict]) -> list[PairOutcome]:
    """Per judge, criterion and two grid points, the records' outcomes over both orders."""
    counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for (judge, criterion, _record, a, b), (ab, ba) in _both_orders(verdicts).items():
        tally = counts[(judge, criterion, a, b)]
        first, second = _outcome(ab), _outcome(ba)
        if first != second:
            tally[3] += 1
        elif first == "tie":
            tally[2] += 1
        else:
            tally[0 if first == a else 1] += 1
    return [
        PairOutcome(judge, criterion, a, b, *tally)
        for (judge, criterion, a, b), tally in sorted(
            counts.items(),
            key=lambda item: (item[0][0].weak, item[0][0].key, item[0][1], item[0][2].label, item[0][3].label),
        )
    ]


# --------------------------------------------------------------------------- agreement with people


def run_campaigns(campaigns: Sequence[StoredCampaign], run: StoredRun) -> list[StoredCampaign]:
    """The campaigns made from ``run``'s own outputs (their data names it, by name and id)."""
    found = []
    for campaign in campaigns:
        source = RunSource.of(campaign.data)
        if source is not None and (source.run, source.run_id) == (run.name, run.id):
            found.append(campaign)
    return found


@dataclass(frozen=True)
class HumanAgreement:
    """A judge's grades against one campaign's preferences, on one criterion."""

    campaign: str
    judge: JudgeIdentity
    criterion: str
    agree: Share  # of the (winner, loser) pairs the judge graded apart: winner graded higher
    judge_ties: int  # pairs the judge graded equal
    ungraded: int  # pairs where a cell has no grade

    def sentence(self) -> str:
        return (
            f"Agreement of {self.judge.label} ({CRITERION_LABELS.get(self.criterion, self.criterion)}) with the "
            f"people of campaign {self.campaign!r}: {self.agree.text()} of the pairs they ordered and it graded "
            f"apart; it graded {self.judge_ties} equal and {self.ungraded} had no grade."
        )

    def json(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "judge": self.judge.model,
            "weak_judge": self.judge.weak,
            "criterion": self.criterion,
            "agree": self.agree.json(),
            "judge_ties": self.judge_ties,
            "ungraded": self.ungraded,
        }


def human_pairs(judgement: StoredCampaignJudgement) -> list[tuple[str, str]]:
    """The (winner, loser) methods a judgement orders: the preferred output beats every other one shown."""
    if judgement.preference in SPECIAL_PREFERENCES:
        return []
    winner = judgement.preferred_method
    return [(winner, other) for other in judgement.slots if other != winner]


def human_agreement(
    campaign: StoredCampaign,
    items: Sequence[CampaignItemRef],
    judgements: Sequence[StoredCampaignJudgement],
    scores: Sequence[JudgeScore],
) -> list[HumanAgreement]:
    """Per judge and criterion, how often the judge's grades order the campaign's decided pairs as people did
    (a campaign not made from a run: none)."""
    source = RunSource.of(campaign.data)
    if source is None:
        return []
    records = {item.comparison_id: item.record_key for item in items}
    grades: dict[tuple[JudgeIdentity, str], dict[tuple[str, GridPoint], float | None]] = defaultdict(dict)
    for score in scores:
        grades[(score.judge, score.criterion)][(score.record_id, score.point)] = score.score
    found = []
    for (judge, criterion), graded in grades.items():
        agree = disagree = ties = ungraded = 0
        for judgement in judgements:
            record = records.get(judgement.comparison_id)
            for winner, loser in human_pairs(judgement):
                if record is None:
                    ungraded += 1
                    continue
                high = graded.get((record, grid_point(winner, source.alpha, source.beta)))
                low = graded.get((record, grid_point(loser, source.alpha, source.beta)))
                if high is None or low is None:
                    ungraded += 1
                elif high == low:
                    ties += 1
                elif high > low:
                    agree += 1
                else:
                    disagree += 1
        found.append(
            HumanAgreement(campaign.name, judge, criterion, Share.of_counts(agree, agree + disagree), ties, ungraded)
        )
    return sorted(found, key=lambda a: (a.judge.weak, a.judge.key, a.criterion))


# --------------------------------------------------------------------------- the Dashboard and the exports


def run_table(reader: JudgeReader, run_id: int, rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[str]]:
    """A stored run's summary rows with their judge columns, and the sentences that go with them (who judged,
    the scale and intervals, what has no grade, the position bias); the rows unchanged and no sentence when
    the run has no judge grades (an example run's read-only file has none)."""
    scores = reader.scores(run_id)
    if not scores:
        return [dict(row) for row in rows], []
    notes = [scale_note(scores)]
    notes += [c.sentence() for c in position_consistency(reader.verdicts(run_id)) if c.flips.of]
    return row_columns(rows, scores), notes


def export_fields(
    scores: Sequence[JudgeScore], record_id: str, methods: Sequence[str], source: RunSource
) -> dict[str, Any]:
    """A campaign export row's judge columns for one comparison: ``judge:<method>:<criterion>`` the grade (None
    without one) of each method's cell, per judge (``judge`` names it, a weak one as such)."""
    fields: dict[str, Any] = {}
    judges = sorted({score.judge for score in scores}, key=lambda judge: (judge.weak, judge.key))
    several = len(judges) > 1
    by_cell = {
        (score.judge, score.criterion, score.point): score.score for score in scores if score.record_id == record_id
    }
    for judge in judges:
        prefix = f"judge[{judge.model}]" if several else "judge"
        fields[prefix] = judge.label
        for criterion in sorted({score.criterion for score in scores if score.judge == judge}):
            for method in methods:
                point = grid_point(method, source.alpha, source.beta)
                fields[f"{prefix}:{method}:{criterion}"] = by_cell.get((judge, criterion, point))
    return fields
