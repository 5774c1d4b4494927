"""Preference statistics of annotation campaigns (specsteer.evaluation.preference), on hand-made and synthetic judgements.

The synthetic judgements are drawn from known Bradley–Terry strengths: an annotator shown k outputs prefers
output i with probability e^(s_i) / sum over the shown of e^(s_j) (Luce's choice rule, which is Bradley–Terry
for pairs). Reading the choice as "i beats each other shown" keeps the Bradley–Terry estimating equations
unbiased at the true strengths, so the fit should recover them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from specsteer.evaluation.preference import (
    SPECIAL_PREFERENCES,
    CampaignJudgement,
    PairwiseOutcome,
    annotator_activity,
    bradley_terry,
    bradley_terry_strengths,
    from_judgements,
    krippendorff_alpha_interval,
    leaderboard,
    pairwise_outcomes,
    parse_preference,
    position_bias,
    preference_agreement,
    preference_report,
    rating_agreement,
    summarize_annotations,
    wilson_interval,
    win_matrix,
)
from specsteer.stores.generations import Judgement

TRUE_STRENGTHS = (-1.0, -0.5, 0.0, 0.5, 1.0)  # mean 0, as the fit anchors its own
METHODS = tuple(f"m{i}" for i in range(len(TRUE_STRENGTHS)))


def _synthetic(seed: int, comparisons: int, strengths=TRUE_STRENGTHS, slot_a_bonus: float = 0.0):
    """Comparisons of 2 or 3 random methods, each judged by 1 or 2 annotators in their own random order.

    With ``slot_a_bonus`` an annotator picks slot A outright that often, whatever it shows (position bias)."""
    rng = np.random.default_rng(seed)
    judgements = []
    for comparison in range(comparisons):
        shown = rng.choice(len(strengths), size=int(rng.integers(2, 4)), replace=False)
        for annotator in range(int(rng.integers(1, 3))):
            order = rng.permutation(shown)
            weights = np.exp(np.asarray(strengths)[order])
            pick = int(rng.choice(len(order), p=weights / weights.sum()))
            if rng.random() < slot_a_bonus:
                pick = 0
            judgements.append(
                CampaignJudgement(
                    comparison_id=comparison,
                    annotator=f"annotator-{annotator}",
                    slots=tuple(METHODS[i] for i in order),
                    preference=pick,
                    seconds=float(rng.uniform(3.0, 40.0)),
                )
            )
    return judgements


def _pair(comparison_id: int, annotator: str, preference, slots=("a", "b"), **kwargs) -> CampaignJudgement:
    return CampaignJudgement(comparison_id, annotator, tuple(slots), preference, **kwargs)


# --------------------------------------------------------------------------- pairwise outcomes


def test_a_preferred_slot_beats_every_other_and_ties_give_half_to_every_pair():
    three = ("x", "y", "z")
    assert pairwise_outcomes(_pair(1, "p", 1, three)) == (
        PairwiseOutcome("y", "x", 1.0),
        PairwiseOutcome("y", "z", 1.0),
    )
    for special in SPECIAL_PREFERENCES:
        assert pairwise_outcomes(_pair(1, "p", special, three)) == (
            PairwiseOutcome("x", "y", 0.5),
            PairwiseOutcome("x", "z", 0.5),
            PairwiseOutcome("y", "z", 0.5),
        )
    matrix = win_matrix([_pair(1, "p", 1, three), _pair(1, "q", "tie", ("z", "x", "y"))], methods=["w"])
    assert matrix.methods == ("w", "x", "y", "z")
    wins = dict(zip(matrix.methods, matrix.wins))
    assert wins["y"] == (0.0, 1.5, 0.0, 1.5) and wins["x"] == (0.0, 0.0, 0.5, 0.5)
    assert wins["z"] == (0.0, 0.5, 0.5, 0.0) and wins["w"] == (0.0, 0.0, 0.0, 0.0)
    assert matrix.rate("y", "x") == pytest.approx(0.75) and matrix.rate("x", "z") == 0.5
    assert matrix.rate("w", "x") is None  # never met


# --------------------------------------------------------------------------- Bradley–Terry


def test_two_methods_fit_the_log_odds_exactly_and_ties_count_as_half():
    # 7 wins of a, 3 of b: the maximum-likelihood difference is log(7/3), split about the mean 0.
    plain = bradley_terry_strengths([[0, 7], [3, 0]], prior_games=0)
    assert plain == pytest.approx((math.log(7 / 3) / 2, -math.log(7 / 3) / 2), abs=1e-9)
    # The default prior, one virtual tie, adds half a win each way (Haldane–Anscombe): log(7.5 / 3.5).
    shrunk = bradley_terry_strengths([[0, 7], [3, 0]])
    assert shrunk[0] - shrunk[1] == pytest.approx(math.log(7.5 / 3.5), abs=1e-9)

    # Through judgements: 3 wins of a, 1 of b, and 2 ties, 1 "all good", 1 "all bad" -> a 5, b 3.
    judgements = [_pair(i, "p", 0) for i in range(3)] + [_pair(3, "p", 1)]
    judgements += [_pair(4, "p", "tie"), _pair(5, "p", "tie"), _pair(6, "p", "all_good"), _pair(7, "p", "all_bad")]
    fit = bradley_terry(judgements, resamples=0, prior_games=0)
    assert fit is not None and fit.methods == ("a", "b")
    assert fit.strengths[0] - fit.strengths[1] == pytest.approx(math.log(5 / 3), abs=1e-9)
    assert fit.lower == (None, None) and fit.resamples_used == 0
    # "all good" and "all bad" weigh as ties in the fit, and are counted apart on the leaderboard.
    rows = {row.method: row for row in leaderboard(judgements, resamples=0, prior_games=0).rows}
    a = rows["a"]
    assert (a.wins, a.losses, a.ties, a.all_good, a.all_bad, a.judgements, a.comparisons) == (3, 1, 2, 1, 1, 8, 8)
    assert (rows["b"].wins, rows["b"].losses) == (1, 3)


def test_a_method_that_never_loses_gets_a_finite_strength_only_with_the_prior():
    judgements = [_pair(i, "p", 0) for i in range(5)]
    fit = bradley_terry(judgements, resamples=50)
    assert fit is not None
    assert fit.strengths[0] - fit.strengths[1] == pytest.approx(math.log(5.5 / 0.5))
    assert all(math.isfinite(x) for x in fit.lower + fit.upper if x is not None)
    with pytest.raises(ValueError, match="prior_games"):
        bradley_terry(judgements, resamples=0, prior_games=0)
    # Without the prior, resamples without a finite fit are dropped and counted.
    mixed = judgements + [_pair(5, "p", 1)]
    loose = bradley_terry(mixed, resamples=200, prior_games=0, seed=3)
    assert loose is not None and 0 < loose.resamples_used < 200


def test_synthetic_judgements_recover_the_true_order_within_intervals():
    fit = bradley_terry(_synthetic(seed=0, comparisons=600))  # the defaults: 1000 resamples, 95 %
    assert fit is not None and fit.methods == METHODS and fit.resamples_used == 1000
    strengths, lower, upper = np.array(fit.strengths), np.array(fit.lower), np.array(fit.upper)
    assert abs(strengths.mean()) < 1e-9
    assert list(np.argsort(strengths)) == list(range(len(METHODS)))  # the true order
    assert np.all(lower < strengths) and np.all(strengths < upper)
    assert np.all(upper - lower < 0.8)  # informative, not vacuous
    truth = np.array(TRUE_STRENGTHS)
    # Over 200 other seeds (data and bootstrap): order right in 99.5 %, 4 or 5 of 5 covered in 98.5 %,
    # widest interval 0.50.
    assert np.sum((lower <= truth) & (truth <= upper)) >= 4


def test_bootstrap_intervals_cover_the_true_strengths_at_about_their_level():
    # Over 40 other such groups of 10 data sets: 40 to 50 of 50 covered (mean 47), mean width at most 0.51.
    # The percentile bootstrap runs a little below its nominal 95 % at this size (about 94 % per interval).
    covered, widths = 0, []
    truth = np.array(TRUE_STRENGTHS)
    for seed in range(10):
        fit = bradley_terry(_synthetic(seed=100 + seed, comparisons=300), resamples=300, seed=seed)
        assert fit is not None
        lower, upper = np.array(fit.lower), np.array(fit.upper)
        covered += int(np.sum((lower <= truth) & (truth <= upper)))
        widths.append(upper - lower)
    assert covered >= 38  # of 50 intervals at 95 %
    assert float(np.mean(widths)) < 0.8


def test_the_bootstrap_resamples_comparisons_not_votes():
    # Three annotators who agree on every comparison add no independent evidence: resampling comparisons
    # gives the very same intervals as one annotator (without a prior the fit depends on win ratios only),
    # where resampling votes would narrow them by about the square root of 3.
    single = [j for j in _synthetic(seed=6, comparisons=200) if j.annotator == "annotator-0"]
    triple = [
        CampaignJudgement(j.comparison_id, name, j.slots, j.preference) for j in single for name in ("x", "y", "z")
    ]
    once = bradley_terry(single, resamples=300, seed=1, prior_games=0)
    thrice = bradley_terry(triple, resamples=300, seed=1, prior_games=0)
    assert once is not None and thrice is not None
    assert thrice.strengths == pytest.approx(once.strengths, abs=1e-9)
    assert thrice.lower == pytest.approx(once.lower, abs=1e-9) and thrice.upper == pytest.approx(once.upper, abs=1e-9)


def test_the_bootstrap_is_reproducible_from_its_seed():
    judgements = _synthetic(seed=1, comparisons=80)
    first = bradley_terry(judgements, resamples=200, seed=7)
    assert first == bradley_terry(judgements, resamples=200, seed=7)
    other = bradley_terry(judgements, resamples=200, seed=8)
    assert other is not None and first is not None
    assert other.strengths == first.strengths and other.lower != first.lower


def test_the_leaderboard_ranks_methods_and_lists_unjudged_ones_last():
    judgements = _synthetic(seed=2, comparisons=400)
    board = leaderboard(judgements, methods=["unjudged"], resamples=300)
    assert [row.method for row in board.rows] == ["m4", "m3", "m2", "m1", "m0", "unjudged"]
    assert [row.rank for row in board.rows] == [1, 2, 3, 4, 5, None]
    last = board.rows[-1]
    assert (last.strength, last.lower, last.upper, last.rank_by_interval, last.judgements) == (None,) * 4 + (0,)
    for row in board.rows[:-1]:
        assert row.wins + row.losses + row.ties + row.all_good + row.all_bad == row.judgements
        assert row.rank_by_interval is not None and row.rank is not None and row.rank_by_interval <= row.rank
    # m1's interval overlaps m2's: the data defend rank 3 for it at best, not 4.
    assert [row.rank_by_interval for row in board.rows] == [1, 2, 3, 3, 5, None]
    assert all(row.rank_by_interval is None for row in leaderboard(judgements, resamples=0).rows)
    assert board.judgements == len(judgements) and board.comparisons == 400 and not board.empty
    assert board.win_matrix.methods == ("m0", "m1", "m2", "m3", "m4", "unjudged")


def test_methods_judged_alike_share_a_rank():
    # a beats b, b beats c, c beats a, once each: all equally strong.
    cycle = [_pair(1, "p", 0, ("a", "b")), _pair(2, "p", 0, ("b", "c")), _pair(3, "p", 0, ("c", "a"))]
    board = leaderboard(cycle, resamples=50)
    assert [row.rank for row in board.rows] == [1, 1, 1]
    assert all(row.strength == pytest.approx(0.0, abs=1e-9) for row in board.rows)


def test_nothing_judged_gives_an_empty_leaderboard_and_report():
    assert bradley_terry([]) is None
    assert leaderboard([]).rows == () and leaderboard([]).empty
    board = leaderboard([], methods=["slm+", "llm", "specsteer"])
    assert [row.method for row in board.rows] == ["llm", "slm+", "specsteer"]
    assert board.empty and all(row.strength is None and row.lower is None and row.rank is None for row in board.rows)
    report = preference_report([], methods=["llm"])
    assert (report.judgements, report.comparisons, report.annotators, report.median_seconds) == (0, 0, (), None)
    assert report.position_bias.slots == () and report.rating_agreement == ()
    assert report.agreement.fleiss_kappa is None and report.agreement.comparisons == 0


# --------------------------------------------------------------------------- position bias


def test_position_bias_is_detected_when_injected():
    equal = (0.0,) * len(METHODS)
    # Over 200 other seeds: detected every time, and the rate within 0.06 of the injected one.
    bias = position_bias(_synthetic(seed=3, comparisons=600, strengths=equal, slot_a_bonus=0.3))
    a = bias.slots[0]
    assert a.label == "A" and a.biased and a.lower > a.expected
    # slot A is preferred 0.3 + 0.7 / k of the time instead of 1 / k
    assert a.rate == pytest.approx(0.3 + 0.7 * a.expected, abs=0.06)


def test_a_fair_design_shows_no_position_bias_even_with_a_strong_method():
    # Balanced rotations: "best" sits in each slot equally often and is always preferred.
    rotations = [("best", "x", "y"), ("y", "best", "x"), ("x", "y", "best")]
    judgements = [
        CampaignJudgement(i, "p", rotations[i % 3], rotations[i % 3].index("best"), seconds=None) for i in range(30)
    ]
    bias = position_bias(judgements)
    assert [slot.rate for slot in bias.slots] == [pytest.approx(1 / 3)] * 3
    assert not any(slot.biased for slot in bias.slots)
    # Random slot order (as a campaign's blind order gives): close to the expected rate in every slot
    # (over 200 other seeds the largest gap was 0.074).
    random = position_bias(_synthetic(seed=4, comparisons=600))
    assert all(abs(slot.rate - slot.expected) < 0.1 for slot in random.slots)
    # Ties favour no slot and are left out; pairs and triples mix: expected 1/2 for pairs, 1/3 for triples.
    mixed = position_bias([_pair(1, "p", 0), _pair(2, "p", 1), _pair(3, "p", 2, ("a", "b", "c")), _pair(4, "p", "tie")])
    assert (mixed.decisive, mixed.undecided) == (3, 1)
    a, c = mixed.slots[0], mixed.slots[2]
    assert (a.wins, a.judgements, a.expected) == (1, 3, pytest.approx((1 / 2 + 1 / 2 + 1 / 3) / 3))
    assert (c.wins, c.judgements, c.rate, c.expected) == (1, 1, 1.0, pytest.approx(1 / 3))


def test_wilson_interval_matches_its_formula():
    low, high = wilson_interval(8, 10)  # z = 1.959964: centre (0.8 + z²/20) / (1 + z²/10)
    assert (low, high) == (pytest.approx(0.4901624, abs=1e-6), pytest.approx(0.9433178, abs=1e-6))
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(1, 0)


# --------------------------------------------------------------------------- agreement

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers, 12 units,
# missing values as None. Published: alpha (interval metric) = 0.849.
KRIPPENDORFF_EXAMPLE = {
    "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
}


def _alpha_from_the_coincidence_matrix(units: list[list[int]]) -> Fraction:
    """Krippendorff's definition, exactly: coincidences o_ck, marginals n_c, interval metric (c - k)^2."""
    values = sorted({value for unit in units for value in unit})
    coincidence = {(c, k): Fraction(0) for c in values for k in values}
    for unit in units:
        if len(unit) < 2:
            continue
        for i, c in enumerate(unit):
            for j, k in enumerate(unit):
                if i != j:
                    coincidence[(c, k)] += Fraction(1, len(unit) - 1)
    marginal = {c: sum((coincidence[(c, k)] for k in values), Fraction(0)) for c in values}
    n = sum(marginal.values(), Fraction(0))
    observed = sum((coincidence[(c, k)] * (c - k) * (c - k) for c in values for k in values), Fraction(0))
    expected = sum((marginal[c] * marginal[k] * (c - k) * (c - k) for c in values for k in values), Fraction(0))
    return 1 - observed / (expected / (n - 1))


def test_krippendorffs_alpha_on_the_textbook_example():
    units = [[value for coder in KRIPPENDORFF_EXAMPLE.values() if (value := coder[u]) is not None] for u in range(12)]
    exact = _alpha_from_the_coincidence_matrix(units)
    assert float(exact) == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha_interval(units) == pytest.approx(float(exact), abs=1e-12)

    # The same ratings in campaign judgements: each unit an output of a comparison, the coders annotators,
    # the other output of each comparison left unrated, and the slot order differing between annotators.
    judgements = []
    for name, scores in KRIPPENDORFF_EXAMPLE.items():
        for unit, score in enumerate(scores):
            rated = {"fluency": score} if score is not None else {}
            flip = name in ("B", "D")
            slots = ("other", "rated") if flip else ("rated", "other")
            ratings = ({}, rated) if flip else (rated, {})
            judgements.append(CampaignJudgement(unit, name, slots, "tie", ratings=ratings))
    (fluency,) = rating_agreement(judgements)
    assert fluency.criterion == "fluency" and fluency.alpha == pytest.approx(float(exact), abs=1e-12)
    assert (fluency.units, fluency.values) == (11, 40)  # unit 12 has one value: not pairable


def test_krippendorffs_alpha_where_it_is_undefined_or_perfect():
    assert krippendorff_alpha_interval([]) is None
    assert krippendorff_alpha_interval([[3], [4]]) is None  # nothing pairable
    assert krippendorff_alpha_interval([[3, 3], [3, 3, 3]]) is None  # no variation at all
    assert krippendorff_alpha_interval([[1, 1], [5, 5, 5], [2, 2]]) == pytest.approx(1.0)


def _stored(annotation_id, comparison_id, annotator, preferred, shown, ratings=None):
    return Judgement(
        id=annotation_id,
        comparison_id=comparison_id,
        annotator=annotator,
        preferred=preferred,
        preferred_method=preferred,
        ratings=ratings or {},
        display_order=tuple(shown),
    )


# --------------------------------------------------------------------------- the Compare tab's summary


def test_win_rates_and_agreement_on_a_hand_computed_example():
    three, two_a, two_b = ["specsteer", "llm", "slm+"], ["specsteer", "llm"], ["specsteer", "slm+"]
    annotations = [
        _stored(1, 1, "ann1", "specsteer", three, {"specsteer": {"fluency": 4}}),
        _stored(2, 1, "ann2", "specsteer", three, {"specsteer": {"fluency": 5}}),
        _stored(3, 1, "ann3", "llm", three),
        _stored(4, 2, "ann1", "tie", two_a),
        _stored(5, 2, "ann2", "llm", two_a),
        _stored(6, 3, "ann1", "specsteer", two_b),
        _stored(7, 3, "ann1", "slm+", two_b),  # re-judged: replaces annotation 6
    ]
    summary = summarize_annotations(annotations)
    assert summary.judgements == 6 and summary.judges == 3 and summary.names == 3
    methods = summary.methods
    assert list(methods) == ["llm", "slm+", "specsteer"]
    # specsteer shown 3+2+1 = 6 times, preferred twice, one tie where it was shown.
    specsteer = methods["specsteer"]
    assert (specsteer.shown, specsteer.wins, specsteer.ties, specsteer.all_bad) == (6, 2, 1, 0)
    assert specsteer.win_rate == pytest.approx(2 / 6) and specsteer.mean_ratings == {"fluency": 4.5}
    assert (methods["llm"].shown, methods["llm"].wins, methods["llm"].win_rate) == (5, 2, pytest.approx(0.4))
    assert (methods["slm+"].shown, methods["slm+"].wins, methods["slm+"].win_rate) == (4, 1, 0.25)
    # Items with >= 2 annotators: comparison 1 {specsteer: 2, llm: 1}, comparison 2 {tie: 1, llm: 1}.
    # P1 = (2*1 + 0) / (3*2) = 1/3, P2 = 0 -> P-bar = 1/6.
    # Pooled shares: specsteer 2/5, llm 2/5, tie 1/5 -> Pe = 9/25; kappa = (1/6 - 9/25) / (16/25) = -29/96.
    agreement = summary.agreement
    assert agreement.comparisons == 2 and agreement.judgements == 5
    assert agreement.percent_agreement == pytest.approx(1 / 6)
    assert agreement.unanimous == 0
    assert agreement.fleiss_kappa == pytest.approx(-29 / 96)


def test_perfect_agreement_and_undefined_kappa():
    shown = ["specsteer", "llm"]
    perfect = [
        _stored(1, 1, "a", "llm", shown),
        _stored(2, 1, "b", "llm", shown),
        _stored(3, 2, "a", "specsteer", shown),
        _stored(4, 2, "b", "specsteer", shown),
    ]
    agreement = summarize_annotations(perfect).agreement
    assert agreement.percent_agreement == 1 and agreement.unanimous == 1 and agreement.fleiss_kappa == 1
    # Everyone always picks the same category: chance agreement is 1, kappa is undefined.
    assert summarize_annotations(perfect[:2]).agreement.fleiss_kappa is None
    assert summarize_annotations([]).agreement.percent_agreement is None


def test_the_compare_summary_counts_every_special_preference_as_the_leaderboard_does():
    shown = ["specsteer", "llm"]
    stored = [
        _stored(1, 1, "ann", "all_good", shown),
        _stored(2, 2, "ann", "all_bad", shown),
        _stored(3, 3, "ann", "tie", shown),
        _stored(4, 4, "ann", "llm", shown),
    ]
    methods = summarize_annotations(stored).methods
    llm = methods["llm"]
    assert (llm.shown, llm.wins, llm.ties, llm.all_good, llm.all_bad) == (4, 1, 1, 1, 1)
    rows = {row.method: row for row in leaderboard(from_judgements(stored), resamples=10).rows}
    for method, judged in methods.items():
        row = rows[method]
        assert (row.judgements, row.wins, row.ties, row.all_good, row.all_bad) == (
            judged.shown,
            judged.wins,
            judged.ties,
            judged.all_good,
            judged.all_bad,
        )


def test_fleiss_kappa_matches_todays_summary():
    rng = np.random.default_rng(5)
    methods = ["specsteer", "llm", "slm+"]
    stored = []
    for annotation_id in range(300):
        comparison = int(rng.integers(0, 60))
        shown = list(rng.permutation(methods)[: int(rng.integers(2, 4))])
        choice = str(rng.choice(shown + ["tie", "all_bad"]))
        stored.append(_stored(annotation_id, comparison, f"a{rng.integers(0, 5)}", choice, shown))
    # a comparison shows the same methods to everyone: keep each comparison's first method set
    first_shown: dict[int, frozenset[str]] = {}
    consistent = [
        j
        for j in stored
        if first_shown.setdefault(j.comparison_id, frozenset(j.display_order)) == frozenset(j.display_order)
    ]
    today = summarize_annotations(consistent).agreement
    ours = preference_agreement(from_judgements(consistent))  # latest per annotator and comparison, as today
    assert today.comparisons >= 20 and today.fleiss_kappa is not None
    assert ours.comparisons == today.comparisons
    assert ours.judgements == today.judgements
    assert ours.percent_agreement == pytest.approx(today.percent_agreement)
    assert ours.unanimous == pytest.approx(today.unanimous)
    assert ours.fleiss_kappa == pytest.approx(today.fleiss_kappa)

    # The hand-computed example of tests/test_storage.py: kappa -29/96, here with slots shuffled per annotator.
    three, two = ["specsteer", "llm", "slm+"], ["specsteer", "llm"]
    hand = [
        _pair(1, "ann1", 0, three),
        _pair(1, "ann2", 1, ["llm", "specsteer", "slm+"]),
        _pair(1, "ann3", 0, ["llm", "slm+", "specsteer"]),
        _pair(2, "ann1", "tie", two),
        _pair(2, "ann2", 0, ["llm", "specsteer"]),
    ]
    agreement = preference_agreement(hand)
    assert agreement.fleiss_kappa == pytest.approx(-29 / 96) and agreement.percent_agreement == pytest.approx(1 / 6)


# --------------------------------------------------------------------------- annotators and the report


def test_annotator_counts_and_median_seconds():
    judgements = [
        _pair(1, "kim", 0, seconds=4.0),
        _pair(2, "kim", "all_good", seconds=10.0),
        _pair(3, "kim", 1, seconds=30.0),
        _pair(1, "lee", 1, seconds=None),
        _pair(2, "lee", 0, seconds=7.5),
    ]
    kim, lee = annotator_activity(judgements)
    assert (kim.annotator, kim.judgements, kim.decisive, kim.timed, kim.median_seconds) == ("kim", 3, 2, 3, 10.0)
    assert (lee.annotator, lee.judgements, lee.decisive, lee.timed, lee.median_seconds) == ("lee", 2, 2, 1, 7.5)
    report = preference_report(judgements, resamples=100)
    assert report.annotators == (kim, lee) and report.median_seconds == 8.75
    assert (report.judgements, report.comparisons) == (5, 3)
    assert report.agreement.comparisons == 2 and report.leaderboard.rows[0].strength is not None


def test_todays_judgements_convert_keeping_the_latest_per_annotator():
    stored = [
        _stored(1, 1, "ann", "llm", ["specsteer", "llm"], {"llm": {"fluency": 4}}),
        _stored(2, 1, "ann", "all_bad", ["specsteer", "llm"]),
        _stored(3, 1, "bob", "specsteer", ["llm", "specsteer"], {"specsteer": {"fluency": 2}}),
    ]
    ann, bob = sorted(from_judgements(stored), key=lambda j: j.annotator)
    assert (ann.slots, ann.preference, ann.ratings) == (("specsteer", "llm"), "all_bad", ())
    assert (bob.slots, bob.preference, bob.ratings) == (("llm", "specsteer"), 1, ({}, {"fluency": 2}))
    with pytest.raises(ValueError, match="did not show"):
        from_judgements([_stored(4, 2, "ann", "slm+", ["specsteer", "llm"])])


# --------------------------------------------------------------------------- bad input


def test_parse_preference():
    slots = ("specsteer", "llm", "slm+")
    assert [parse_preference(text, slots) for text in ("A", "C", "llm", "tie", "all_good", "all_bad")] == [
        0,
        2,
        1,
        "tie",
        "all_good",
        "all_bad",
    ]
    for bad in ("D", "a", "", "both", "x" * 10_000):
        with pytest.raises(ValueError, match="unknown preference"):
            parse_preference(bad, slots)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"preference": 2}, "preference"),
        ({"preference": True}, "preference"),
        ({"preference": "both_good"}, "preference"),
        ({"slots": ("a",)}, "2 to 26"),
        ({"slots": ["a", "b"]}, "tuple"),
        ({"slots": ("a", "a")}, "twice"),
        ({"slots": ("a", "")}, "name a method"),
        ({"annotator": " "}, "annotator"),
        ({"comparison_id": "1"}, "comparison id"),
        ({"ratings": ({"fluency": 3},)}, "one mapping per slot"),
        ({"ratings": ({"fluency": float("nan")}, {})}, "finite"),
        ({"ratings": ({"fluency": "5"}, {})}, "finite"),
        ({"seconds": -1.0}, "seconds"),
        ({"seconds": float("inf")}, "seconds"),
    ],
)
def test_a_malformed_judgement_is_refused(kwargs, message):
    fields = {"comparison_id": 1, "annotator": "p", "slots": ("a", "b"), "preference": 0} | kwargs
    with pytest.raises(ValueError, match=message):
        CampaignJudgement(**fields)


def test_inconsistent_collections_and_options_are_refused():
    with pytest.raises(ValueError, match="twice"):
        leaderboard([_pair(1, "p", 0), _pair(1, "p", 1)])
    with pytest.raises(ValueError, match="different methods"):
        preference_report([_pair(1, "p", 0), _pair(1, "q", 0, ("a", "c"))])
    for options in ({"resamples": -1}, {"resamples": 10**6}, {"confidence": 1.0}, {"seed": -1}, {"prior_games": -1}):
        with pytest.raises(ValueError):
            leaderboard([_pair(1, "p", 0)], **options)
    with pytest.raises(ValueError, match="non-empty strings"):
        leaderboard([], methods=["llm", ""])
    with pytest.raises(ValueError, match="win matrix"):
        bradley_terry_strengths([[0, 1, 2]])
