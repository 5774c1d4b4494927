"""What a run's judge results say beyond the grades (specsteer.service.judge_report): position bias from pairs
asked in both orders, the pairs' outcomes, agreement with a campaign's people, the Dashboard's rows and notes,
an export row's judge columns, and the example runs' grades read by the same ids as their runs."""

from __future__ import annotations

import pytest

from specsteer.evaluation.preference import wilson_interval
from specsteer.service.example_runs import EXAMPLE_IDS_FROM, JudgesWithExamples
from specsteer.service.judge_report import (
    export_fields,
    human_agreement,
    pair_outcomes,
    position_consistency,
    run_campaigns,
    run_table,
)
from specsteer.stores.campaigns import CampaignItemRef, RunSource, StoredCampaign, StoredCampaignJudgement
from specsteer.stores.judges import JudgeIdentity, JudgeScore, PairVerdict
from specsteer.stores.runs import GridPoint, StoredRun

JUDGE = JudgeIdentity("small", "local", weak=True)
SLM, LLM, STEER = GridPoint("slm+"), GridPoint("llm"), GridPoint("specsteer", 1.0, 1.0)


def verdict(record, first, second, winner, criterion="personalization", judge=JUDGE):
    return PairVerdict(record, first, second, criterion, judge, winner)


def test_position_bias_counts_the_pairs_that_flip_with_the_order():
    verdicts = [
        # r1: LLM in both orders (consistent); r2: whichever is shown first (flips); r3: tie both ways.
        verdict("r1", LLM, STEER, "first"),
        verdict("r1", STEER, LLM, "second"),
        verdict("r2", LLM, STEER, "first"),
        verdict("r2", STEER, LLM, "first"),
        verdict("r3", LLM, STEER, "tie"),
        verdict("r3", STEER, LLM, "tie"),
        # r4: one order only, and r5 one order unanswered: not a pair asked in both orders.
        verdict("r4", LLM, STEER, "second"),
        verdict("r5", LLM, STEER, "first"),
        verdict("r5", STEER, LLM, None),
    ]
    (found,) = position_consistency(verdicts)
    assert (found.flips.count, found.flips.of) == (1, 3)
    assert (found.flips.low, found.flips.high) == pytest.approx(wilson_interval(1, 3))
    # Decisive verdicts (ties and unanswered left out): 6, of which the first shown won 4.
    assert (found.first_shown.count, found.first_shown.of) == (4, 6)
    assert "33 % (1 of 3" in found.sentence() and "small (local, weak judge)" in found.sentence()
    (outcome,) = pair_outcomes(verdicts)
    assert {outcome.a, outcome.b} == {LLM, STEER}
    llm_wins = outcome.a_wins if outcome.a == LLM else outcome.b_wins
    assert (llm_wins, outcome.ties, outcome.order_decided) == (1, 1, 1)
    assert position_consistency([]) == []


def grades(values: dict[tuple[str, GridPoint], float | None], criterion="personalization") -> list[JudgeScore]:
    return [JudgeScore(record, point, criterion, JUDGE, score) for (record, point), score in values.items()]


def campaign_from(run: str, run_id: int, alpha=1.0, beta=1.0) -> StoredCampaign:
    data = RunSource(run, run_id, alpha, beta).data("records.json", 3)
    return StoredCampaign(
        7, "study", "cogenesis", ("slm+", "llm", "specsteer"), "p", {}, data, 3, 3, False, "ready", None
    )


def judgement(comparison: int, slots: tuple[str, ...], preference: str) -> StoredCampaignJudgement:
    preferred = slots[ord(preference) - ord("A")] if len(preference) == 1 else preference
    return StoredCampaignJudgement(1, 7, comparison, "ann", slots, preference, preferred, {}, "", None, 1)


def test_agreement_with_people_reads_each_preference_as_pairs():
    campaign = campaign_from("steered", 3)
    items = [CampaignItemRef(0, "r1", 101), CampaignItemRef(1, "r2", 102)]
    scores = grades(
        {("r1", SLM): 3, ("r1", LLM): 6, ("r1", STEER): 7, ("r2", SLM): 5, ("r2", LLM): 5, ("r2", STEER): None}
    )
    judgements = [
        judgement(101, ("llm", "specsteer", "slm+"), "B"),  # SpecSteer over LLM (agrees: 7 > 6) and SLM+ (7 > 3)
        judgement(101, ("slm+", "llm", "specsteer"), "A"),  # SLM+ over LLM (3 < 6) and SpecSteer (3 < 7): disagree
        judgement(102, ("slm+", "llm", "specsteer"), "A"),  # SLM+ = LLM (a judge tie); SpecSteer ungraded
        judgement(102, ("slm+", "llm", "specsteer"), "tie"),  # orders nothing
    ]
    (found,) = human_agreement(campaign, items, judgements, scores)
    assert (found.agree.count, found.agree.of, found.judge_ties, found.ungraded) == (2, 4, 1, 1)
    assert "campaign 'study'" in found.sentence() and found.json()["agree"]["share"] == 0.5
    # A campaign that generated its own outputs has nothing to compare with a run's grades.
    own = StoredCampaign(
        8, "gen", "cogenesis", ("slm+", "llm"), "p", {}, {"source": "shared"}, 1, 1, False, "ready", None
    )
    assert human_agreement(own, items, judgements, scores) == []


def test_the_campaigns_of_a_run_are_those_made_from_it():
    run = StoredRun(3, "steered", {}, "finished", None, None, None, 9)  # type: ignore[arg-type]
    mine, renamed = campaign_from("steered", 3), campaign_from("steered", 4)
    assert run_campaigns([mine, renamed], run) == [mine]


def test_an_export_row_carries_its_outputs_grades():
    scores = grades({("r1", SLM): 3, ("r1", STEER): 7, ("r2", SLM): 9})
    fields = export_fields(scores, "r1", ("slm+", "llm", "specsteer"), RunSource("steered", 3, 1.0, 1.0))
    assert fields == {
        "judge": "small (local, weak judge)",
        "judge:slm+:personalization": 3,
        "judge:llm:personalization": None,
        "judge:specsteer:personalization": 7,
    }
    assert export_fields([], "r1", ("slm+",), RunSource("steered", 3, None, None)) == {}


class Reader:
    def __init__(self, scores=(), verdicts=()):
        self._scores, self._verdicts = list(scores), list(verdicts)
        self.asked: list[int] = []

    def scores(self, run_id):
        self.asked.append(run_id)
        return self._scores

    def verdicts(self, run_id):
        return self._verdicts


def test_the_dashboard_rows_gain_a_judge_column_and_its_notes():
    scores = grades({("r1", LLM): 6, ("r2", LLM): 8, ("r1", STEER): None})
    verdicts = [verdict("r1", LLM, STEER, "first"), verdict("r1", STEER, LLM, "first")]
    rows, notes = run_table(
        Reader(scores, verdicts), 3, [{"method": "llm"}, {"method": "specsteer", "alpha": 1.0, "beta": 1.0}]
    )
    assert rows[0]["judge"]["weak judge: personalization"].startswith("7.00 [6.00, 8.00]")
    assert rows[1]["judge"]["weak judge: personalization"] == "no grade (1 asked)"
    assert "weak judge" in notes[0] and "1 malformed" not in notes[0]
    assert notes[1].startswith("Position bias of small (local, weak judge)") and "100 % (1 of 1" in notes[1]
    # No grade: the rows as they were and no note.
    assert run_table(Reader(), 3, [{"method": "llm"}]) == ([{"method": "llm"}], [])


def test_the_example_runs_grades_are_read_by_their_shown_ids():
    own, examples = Reader(grades({("r1", LLM): 6})), Reader()
    judges = JudgesWithExamples(own, examples)
    assert [s.score for s in judges.scores(5)] == [6] and own.asked == [5]
    assert judges.scores(EXAMPLE_IDS_FROM + 6) == [] and examples.asked == [6]
    assert judges.verdicts(EXAMPLE_IDS_FROM + 6) == []
