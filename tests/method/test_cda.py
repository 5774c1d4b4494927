"""Divergence-adaptive acceptance, CDA (specsteer/method/acceptance.py), on hand-made rows and the tiny fp32 pairs.

The threshold as the formula says (α·exp(−λ·JSD), JSD in nats, exactly 0 for equal rows); the fixed α back
whenever the divergence is 0 (a generic copy with the Generalist's weights) or λ is 0; the engine's tokens equal
the one-screen reference's with the same rule; in sampling mode each draft kept with probability
min(1, p_L / (α_i p_S0)), within binomial error. CDA claims no exactness (it is the ratio test at another
threshold), so the statistical check is of that rule, not of an output distribution.
"""

from __future__ import annotations

import math

import pytest
import torch

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.engine.request import chat_ids
from specsteer.method.acceptance import DivergenceAdaptive, RoundScores, cda_log_thresholds, cda_test, jensen_shannon
from specsteer.method.decoding import Sampler
from specsteer.method.reference import specsteer
from specsteer.method.verification import ratio_test
from specsteer.models.tiny import tiny_pair

PLAIN = "Write about rivers."
PRIVATE = "History: I fish on the Loire every weekend.\nWrite about rivers."
LN2 = math.log(2.0)


def _log(probs) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log()[None]


# --------------------------------------------------------------------------- the formula, on hand-made rows


def test_the_divergence_is_jensen_shannon_in_nats():
    p, q = [0.9, 0.1], [0.2, 0.8]
    m = [(a + b) / 2 for a, b in zip(p, q)]
    expected = 0.5 * sum(a * math.log(a / c) for a, c in zip(p, m)) + 0.5 * sum(
        b * math.log(b / c) for b, c in zip(q, m)
    )
    assert float(jensen_shannon(_log(p), _log(q))[0]) == pytest.approx(expected, rel=1e-12)
    assert float(jensen_shannon(_log(q), _log(p))[0]) == pytest.approx(expected, rel=1e-12)  # symmetric
    # Disjoint supports: the largest divergence, ln 2 (a zero probability adds nothing on its side).
    assert float(jensen_shannon(_log([1.0, 0.0]), _log([0.0, 1.0]))[0]) == pytest.approx(LN2, rel=1e-12)


def test_equal_rows_diverge_by_exactly_nothing():
    rows = torch.randn(5, 300, generator=torch.Generator().manual_seed(3)).log_softmax(-1)
    assert torch.equal(jensen_shannon(rows, rows.clone()), torch.zeros(5))
    other = rows.roll(1, dims=-1)
    divergence = jensen_shannon(rows, other)
    assert bool((divergence > 0).all()) and bool((divergence <= LN2).all())


@pytest.mark.parametrize("alpha", [0.05, 0.3, 1.0, 4.0])
@pytest.mark.parametrize("strength", [0.0, 0.5, 1.0, 3.0])
def test_the_threshold_moves_with_the_divergence_as_the_formula_says(alpha, strength):
    divergence = torch.tensor([0.0, 0.1, 0.3, LN2], dtype=torch.float64)
    thresholds = cda_log_thresholds(alpha, divergence, strength).exp()
    expected = torch.tensor([alpha * math.exp(-strength * d) for d in divergence.tolist()], dtype=torch.float64)
    assert torch.allclose(thresholds, expected, rtol=1e-12)
    assert float(thresholds[0]) == pytest.approx(alpha, rel=1e-15)  # no divergence: the fixed α
    # Never stricter than α, never laxer than α·2^−λ; the more the models disagree, the laxer.
    assert bool((thresholds <= alpha * (1 + 1e-12)).all()) and float(thresholds[-1]) == pytest.approx(
        alpha * 2**-strength
    )
    assert bool((thresholds[1:] <= thresholds[:-1]).all())


def test_the_extreme_alphas_stay_exact():
    divergence = torch.tensor([0.0, 0.4])
    assert torch.equal(cda_log_thresholds(0.0, divergence, 1.0), torch.full((2,), -math.inf))  # keep every draft
    assert torch.equal(cda_log_thresholds(math.inf, divergence, 1.0), torch.full((2,), math.inf))  # keep none


def _scores(large_probs, generic_probs, drafts, alpha, sampler=None) -> RoundScores:
    large = torch.tensor(large_probs, dtype=torch.float32).log()
    generic = torch.tensor(generic_probs, dtype=torch.float32).log()
    return RoundScores(large, generic, drafts, alpha, sampler or Sampler())


def test_a_draft_the_fixed_alpha_refuses_is_kept_where_the_models_disagree():
    # Draft 0 with ratio p_L / p_S0 = 0.3 / 0.4 = 0.75 under α = 1: refused by the fixed test. The two rows
    # diverge, so CDA's threshold is 1·exp(−JSD) < 0.75 and it keeps the draft.
    large, generic = [[0.3, 0.7, 0.0], [0.5, 0.5, 0.0]], [[0.4, 0.05, 0.55], [0.5, 0.5, 0.0]]
    scores = _scores(large, generic, [0], alpha=1.0)
    divergence = float(
        jensen_shannon(scores.large_rows[:1].log_softmax(-1), scores.generic_rows[:1].log_softmax(-1))[0]
    )
    assert math.exp(-divergence) < 0.75  # the premise: the divergence is large enough
    assert ratio_test(scores.large_rows, scores.generic_rows, [0], 1.0, Sampler())[0] == 0
    accepted, ratios, divergences = cda_test(scores, 1.0)
    assert accepted == 1
    assert ratios == [pytest.approx(0.75 / math.exp(-divergence), rel=1e-5)]  # p_L / (α_i p_S0)
    assert divergences == [pytest.approx(divergence, rel=1e-6)]
    assert cda_test(scores, 0.0)[0] == 0  # λ = 0: the fixed test


def test_cda_is_refused_a_negative_or_unbounded_strength():
    for strength in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="λ"):
            DivergenceAdaptive(strength)
    assert DivergenceAdaptive(2.0).label == "CDA λ=2"


def test_in_sampling_mode_each_draft_is_kept_at_the_adapted_rate():
    """The invariant CDA keeps (it claims no exactness): a draft is kept with probability min(1, p_L/(α_i p_S0))."""
    large, generic = [[0.3, 0.7, 0.0], [0.5, 0.5, 0.0]], [[0.6, 0.1, 0.3], [0.5, 0.5, 0.0]]
    alpha, strength, trials = 1.0, 1.0, 4000
    sampler = Sampler.make(True, 1.0, 1.0, seed=17)
    scores = _scores(large, generic, [0], alpha, sampler)
    divergence = float(
        jensen_shannon(scores.large_rows[:1].log_softmax(-1), scores.generic_rows[:1].log_softmax(-1))[0]
    )
    rate = min(1.0, 0.3 / (alpha * math.exp(-strength * divergence) * 0.6))
    assert 0.55 < rate < 0.9  # the premise: neither the fixed test's 0.5 nor certainty
    kept = sum(cda_test(scores, strength)[0] for _ in range(trials))
    sigma = math.sqrt(rate * (1 - rate) / trials)
    assert abs(kept / trials - rate) <= 4 * sigma, f"{kept / trials:.3f} against {rate:.3f}"
    assert abs(kept / trials - 0.5) > 8 * sigma  # and not the fixed α's rate


# --------------------------------------------------------------------------- on the tiny fp32 pairs


def _prompts(pair):
    return chat_ids(pair.tokenizer, PLAIN, pair.chat), chat_ids(pair.tokenizer, PRIVATE, pair.chat)


def _generate(pair, **settings):
    plain, private = _prompts(pair)
    config = DecodeConfig(method="specsteer", **{"draft_len": 4, "max_new_tokens": 40, **settings})
    return collect(generate_ids(pair, plain, private, config))


def _decisions(run):
    tokens, finished = run
    return (
        finished.token_ids,
        [(t.id, t.kind, t.round) for t in tokens],
        [(s.drafted, s.accepted) for s in finished.stats.round_log],
    )


@pytest.fixture(scope="module")
def same_weights():
    """A pair whose Generalist is the Specialist's weights: p_L = p_S0 at every position."""
    return tiny_pair(seed=5, generalist_seed=5, generalist_vocab=320)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, generalist_seed=1)


@pytest.mark.parametrize(
    "settings",
    [
        {"alpha": 0.3},
        {"alpha": 1.0},  # every ratio is exactly 1 here: the threshold's own boundary
        {"alpha": 1.5},
        {"alpha": 0.5, "beta": 2.0},
        {"alpha": 1.0, "sample": True, "temperature": 0.8, "seed": 4},
    ],
)
def test_no_divergence_gives_the_fixed_alpha_exactly(same_weights, settings):
    fixed = _generate(same_weights, **settings)
    for strength in (1.0, 5.0):
        assert _decisions(_generate(same_weights, cda_lambda=strength, **settings)) == _decisions(fixed)
    assert fixed[1].stats.cda_lambda is None


@pytest.mark.parametrize("settings", [{"alpha": 0.01}, {"alpha": 0.1, "sample": True, "seed": 2}])
def test_a_zero_strength_gives_the_fixed_alpha_exactly(pair, settings):
    assert _decisions(_generate(pair, cda_lambda=0.0, **settings)) == _decisions(_generate(pair, **settings))


@pytest.mark.parametrize("alpha, strength", [(0.001, 1.0), (0.03, 4.0), (0.1, 4.0)])
def test_the_engine_emits_the_references_tokens_under_cda(pair, alpha, strength):
    plain, private = _prompts(pair)
    _, finished = _generate(pair, alpha=alpha, cda_lambda=strength, downlink_top_k=0, max_new_tokens=32)

    def logits(model):
        return lambda ids: model(torch.tensor([ids])).logits[0, -1, : pair.vocab_size].float().detach()

    small, large = pair.specialist.model, pair.generalist.model
    expected = specsteer(
        logits(large),
        logits(small),
        logits(small),
        plain,
        private,
        alpha,
        1.0,
        k=4,
        max_new=32,
        stop=pair.eos_token_ids,
        cda_lambda=strength,
    )
    assert finished.token_ids == expected and expected
    assert finished.stats.cda_lambda == strength
    fixed = specsteer(
        logits(large), logits(small), logits(small), plain, private, alpha, 1.0, 4, 32, pair.eos_token_ids
    )
    assert fixed != expected  # the rule changed decisions on this pair: the comparison is not vacuous


@pytest.mark.parametrize(
    "settings, problem",
    [
        ({"method": "llm"}, "LLM has none"),
        ({"method": "lightcosteer"}, "LightCoSteer has none"),
        ({"sample": True, "exact": True}, "exclude each other"),
        ({"cda_lambda": -1.0}, "finite number >= 0"),
        ({"cda_lambda": math.inf}, "finite number >= 0"),
    ],
)
def test_cda_goes_with_specsteers_alpha_only(settings, problem):
    with pytest.raises(ValueError, match=problem):
        DecodeConfig(**{"method": "specsteer", "cda_lambda": 1.0, **settings}).validate()
