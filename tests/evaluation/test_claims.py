"""The quality claim says what the run's own intervals show, against SLM+ and against LLM, and never more."""

from __future__ import annotations

from specsteer.evaluation.claims import Claim, claim_sentence, claim_sentences, claims, verdict
from specsteer.evaluation.grid import PairedDifference
from specsteer.method.events import GenerationStats
from specsteer.stores.runs import CellResult, GridPoint

STEERED = GridPoint("specsteer", 0.1, 1.0)


def scored(point: GridPoint, rouge_l: list[float]) -> list[CellResult]:
    """One cell per record r0, r1, ... with these ROUGE-L scores (0-100)."""
    stats = GenerationStats(method=point.method, new_tokens=4, seconds=1.0)
    return [
        CellResult(f"r{i}", point, "", {"rougeL": v / 100, "rouge1": v / 100}, stats) for i, v in enumerate(rouge_l)
    ]


def difference(low: float, high: float) -> PairedDifference:
    return PairedDifference(STEERED, GridPoint("llm"), "rougeL", 120, 51, (low + high) / 2, low, high)


def test_the_verdict_is_read_off_the_interval():
    assert verdict(difference(0.12, 1.36)) == "higher"
    assert verdict(difference(-1.5, -0.1)) == "lower"
    assert verdict(difference(-0.98, 0.70)) == "not established"
    assert verdict(difference(0.0, 0.5)) == "not established"  # an interval touching 0 does not exclude it


def test_a_sentence_states_the_numbers_and_what_they_show():
    text = claim_sentence(Claim(PairedDifference(STEERED, GridPoint("llm"), "rougeL", 120, 51, -0.17, -0.98, 0.70)))
    assert text == (
        "SpecSteer α=0.1 β=1 − LLM: R-L −0.17 [−0.98, +0.70] (51/120 better, 95 % bootstrap): "
        "not established on these records (the interval holds 0)."
    )


def test_a_run_gets_each_setting_against_slm_plus_and_llm_with_a_count_line_each():
    # SpecSteer beats SLM+ by 3 on every record (above 0); against LLM it wins some and loses some.
    cells = (
        scored(GridPoint("slm+"), [10, 20, 30, 40, 50])
        + scored(GridPoint("llm"), [14, 21, 31, 45, 50])
        + scored(STEERED, [13, 23, 33, 43, 53])
    )
    found = {claim.difference.theirs.method: claim for claim in claims(cells)}
    assert found["slm+"].verdict == "higher" and found["slm+"].difference.mean == 3.0
    assert found["llm"].verdict == "not established"
    lines = claim_sentences(cells)
    assert lines[0].startswith("SpecSteer − SLM+ on R-L") and "higher for 1 of 1 setting(s)" in lines[0]
    assert "nothing here speaks for other users" in lines[0]
    assert lines[1].startswith("SpecSteer α=0.1 β=1 − SLM+: R-L +3.00 [+3.00, +3.00] (5/5 better")
    assert lines[1].endswith("higher on these records (the interval lies above 0).")
    assert lines[2].startswith("SpecSteer − LLM on R-L") and "not established for 1" in lines[2]
    assert "not established on these records" in lines[3]
    # Always below LLM: said as lower, not hidden.
    worse = scored(GridPoint("llm"), [20, 30, 40]) + scored(STEERED, [10, 20, 30])
    assert "lower on these records" in claim_sentences(worse)[-1]


def test_nothing_is_claimed_without_a_setting_and_a_baseline():
    assert claim_sentences(scored(STEERED, [10, 20])) == []
    assert claim_sentences(scored(GridPoint("llm"), [10, 20])) == []
