"""The acceptance policy at the Cloud's seam (specsteer/method/acceptance.py), on the tiny fp32 pair.

The default is the ratio test as the Cloud always ran it (the reference's tokens, greedy; the same events as a
Cloud given the policy explicitly, sampling); a scripted rate keeps that share of the drafts it decides, within
binomial error; a replayed generation's rounds come back round for round (and so do its tokens), whatever α the
replay runs at. The ratio test runs and is paid for under every policy.
"""

from __future__ import annotations

import math

import pytest

from specsteer.cloud.in_process import InProcessCloud
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.engine.request import chat_ids
from specsteer.method import acceptance
from specsteer.method.acceptance import RATIO_TEST, ReplayedRounds, ScriptedRate
from specsteer.method.events import RoundStep
from specsteer.method.reference import specsteer

PLAIN = "Write about rivers."
PRIVATE = "History: I fish on the Loire every weekend.\nWrite about rivers."


@pytest.fixture(scope="module")
def pair(tiny_pair_56):
    return tiny_pair_56


@pytest.fixture(scope="module")
def prompts(pair):
    return chat_ids(pair.tokenizer, PLAIN, pair.chat), chat_ids(pair.tokenizer, PRIVATE, pair.chat)


def _run(pair, prompts, policy=None, **settings):
    plain, private = prompts
    config = DecodeConfig(method="specsteer", **{"draft_len": 4, "max_new_tokens": 48, **settings})
    cloud = None if policy is None else InProcessCloud(pair, acceptance=policy)
    return collect(generate_ids(pair, plain, private, config, cloud=cloud))


def _events(tokens):
    return [(t.id, t.kind, t.round, t.ratio) for t in tokens]


def test_the_default_policy_is_the_reference_ratio_test(pair, prompts):
    import torch

    plain, private = prompts
    _, finished = _run(pair, prompts, RATIO_TEST, alpha=0.3, beta=1.0, downlink_top_k=0, draft_len=3, max_new_tokens=24)

    def logits(model):
        return lambda ids: model(torch.tensor([ids])).logits[0, -1, : pair.vocab_size].float().detach()

    small, large = pair.specialist.model, pair.generalist.model
    expected = specsteer(
        logits(large), logits(small), logits(small), plain, private, 0.3, 1.0, k=3, max_new=24, stop=pair.eos_token_ids
    )
    assert finished.token_ids == expected and expected


@pytest.mark.parametrize("settings", [{"alpha": 0.3}, {"alpha": 0.5, "sample": True, "temperature": 0.8, "seed": 4}])
def test_the_default_policy_changes_nothing(pair, prompts, settings):
    default_tokens, default = _run(pair, prompts, None, **settings)
    given_tokens, given = _run(pair, prompts, RATIO_TEST, **settings)
    assert _events(given_tokens) == _events(default_tokens)
    assert [(s.drafted, s.accepted) for s in given.stats.round_log] == [
        (s.drafted, s.accepted) for s in default.stats.round_log
    ]


def _ratio_tests(monkeypatch) -> list[int]:
    """Count the ratio tests the policies run."""
    calls: list[int] = []
    real = acceptance.ratio_test

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(acceptance, "ratio_test", counted)
    return calls


@pytest.mark.parametrize("rate", [0.3, 0.6, 0.9])
def test_a_scripted_rate_is_the_acceptance_within_binomial_error(pair, prompts, monkeypatch, rate):
    calls = _ratio_tests(monkeypatch)
    tokens, finished = _run(pair, prompts, ScriptedRate(rate, seed=11), alpha=0.3, max_new_tokens=160)
    stats = finished.stats
    measured = stats.accepted / stats.verified
    sigma = math.sqrt(rate * (1 - rate) / stats.verified)
    assert abs(measured - rate) <= 4 * sigma, f"{measured:.3f} over {stats.verified} drafts decided, rate {rate}"
    assert len(calls) == stats.rounds  # the ratio test ran every round: its cost is in the measurement
    assert any(t.ratio is not None for t in tokens)  # its ratios are still reported
    trace = stats.trace
    assert sum(step.who == "generalist" for step in trace) == sum(step.who == "specialist0" for step in trace)


def test_a_scripted_rate_is_seeded(pair, prompts):
    logs = [_run(pair, prompts, ScriptedRate(0.5, seed=seed))[1].stats.round_log for seed in (1, 1, 2)]
    decisions = [[(s.drafted, s.accepted) for s in log] for log in logs]
    assert decisions[0] == decisions[1] != decisions[2]


def test_the_extreme_rates_keep_all_or_nothing(pair, prompts):
    for rate, kept in ((0.0, lambda k: 0), (1.0, lambda k: k)):
        _, finished = _run(pair, prompts, ScriptedRate(rate))
        assert all(step.accepted == kept(step.drafted) for step in finished.stats.round_log)


@pytest.mark.parametrize("recorded_with", [ScriptedRate(0.5, seed=3), RATIO_TEST])
def test_a_replayed_generation_comes_back_round_for_round(pair, prompts, recorded_with):
    tokens, recorded = _run(pair, prompts, recorded_with, alpha=0.3)
    rounds = ReplayedRounds.of_stats(recorded.stats, "the recorded run")
    # Replayed at an α that would refuse far more: the verdicts are the record's, not the test's.
    replayed_tokens, replayed = _run(pair, prompts, rounds, alpha=50.0)
    assert [(s.drafted, s.accepted) for s in replayed.stats.round_log] == list(rounds.rounds)
    assert replayed.token_ids == recorded.token_ids
    assert [t.kind for t in replayed_tokens] == [t.kind for t in tokens]


def test_a_replay_longer_than_its_record_starts_it_again():
    rounds = ReplayedRounds(((4, 1), (4, 3)))
    decider = rounds.start(0)
    scores = _scores(4)
    assert [decider.decide(scores)[0] for _ in range(5)] == [1, 3, 1, 3, 1]
    assert decider.decide(_scores(2))[0] == 2  # never more than the drafts it has
    assert rounds.acceptance == pytest.approx(4 / 6)


def test_bad_policies_are_refused():
    with pytest.raises(ValueError):
        ScriptedRate(1.5)
    with pytest.raises(ValueError):
        ReplayedRounds(())
    with pytest.raises(ValueError):
        ReplayedRounds(((2, 3),))
    with pytest.raises(ValueError, match="round log"):
        ReplayedRounds.of_stats(_stats_without_rounds())
    assert ReplayedRounds.of_round_log([RoundStep(0, 0, 0.1, 0, 0, 0), RoundStep(3, 2, 0.1, 0, 0, 0)]).rounds == (
        (3, 2),
    )


def test_a_cross_tokenizer_cloud_takes_the_ratio_test_only():
    from specsteer.cloud.service import CloudService
    from specsteer.models.tiny import tiny_cross_pair

    cross = tiny_cross_pair()
    CloudService(cross)  # the default is fine
    with pytest.raises(ValueError, match="cross-tokenizer"):
        CloudService(cross, acceptance=ScriptedRate(0.5))


def _scores(k: int) -> acceptance.RoundScores:
    import torch

    from specsteer.method.decoding import Sampler

    rows = torch.zeros(k + 1, 8)
    return acceptance.RoundScores(rows, rows.clone(), list(range(k)), 1.0, Sampler())


def _stats_without_rounds():
    from specsteer.method.events import GenerationStats

    return GenerationStats(method="specsteer")


def test_every_round_is_logged_with_its_time_split(pair, prompts):
    _, finished = _run(pair, prompts, None, max_new_tokens=24)
    stats = finished.stats
    assert len(stats.round_log) == stats.rounds > 0
    for step in stats.round_log:
        assert step.edge_s > 0 and step.cloud_s > 0 and step.link_s == 0  # in process: no link time
        assert step.seconds >= step.edge_s + step.cloud_s and step.host_s >= 0
    assert sum(step.seconds for step in stats.round_log) <= stats.seconds
    stored = type(stats).from_dict(stats.to_dict())
    assert stored.round_log == stats.round_log and isinstance(stored.round_log[0], RoundStep)
