"""Each token's numbers (DecodeConfig.details): the p_L, p_S0 and p_S+ a token's event carries are the very
numbers the ratio test compared and the Specialist drafted from; asking for them changes no decision.
The session's tiny fp32 pair (tests/conftest.py ``pair``)."""

from __future__ import annotations

import math
from itertools import groupby

import pytest
import torch

import specsteer.edge.session as edge_session
import specsteer.method.verification as verification
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import generate_ids


def prompts(pair):
    plain = pair.tokenizer.encode("Write about the weather and the sea.")
    private = pair.tokenizer.encode("History: I love long walks and strong coffee. ") + plain
    return plain, private


def run(pair, **config):
    config.setdefault("max_new_tokens", 40)
    events = list(generate_ids(pair, *prompts(pair), DecodeConfig(**config)))
    return events[:-1], events[-1]


@pytest.fixture
def instrumented(monkeypatch):
    """Records the ratio test's inputs (each round's log p_L, log p_S0) and every draft's row on the Edge."""
    tested: list[tuple[list[float], list[float]]] = []
    drafted: list[tuple[int, torch.Tensor]] = []
    original_values = verification.log_ratio_values
    original_drafting = edge_session.drafting

    def log_ratio_values(log_p_large, log_p_generic, alpha):
        tested.append((log_p_large.tolist(), log_p_generic.tolist()))
        return original_values(log_p_large, log_p_generic, alpha)

    def drafting(*args, **kwargs):
        for token, row in original_drafting(*args, **kwargs):
            drafted.append((token, row.clone()))
            yield token, row

    monkeypatch.setattr(verification, "log_ratio_values", log_ratio_values)
    monkeypatch.setattr(edge_session, "drafting", drafting)
    return tested, drafted


@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_a_drafts_numbers_are_the_ones_the_ratio_test_used(pair, instrumented, alpha):
    tested, drafted = instrumented
    events, _ = run(pair, method="specsteer", alpha=alpha, draft_len=4, details=True)
    settled = [event for event in events if not event.pending]
    drafts = [event for event in settled if event.kind in ("accepted", "rejected")]
    assert drafts and any(event.kind == "rejected" for event in drafts)
    rounds = [list(group) for _, group in groupby(drafts, key=lambda event: event.round)]
    assert len(rounds) == len(tested)  # one ratio test per round that drafted
    checked = 0
    for round_events, (log_large, log_generic) in zip(rounds, tested):
        assert len(round_events) == len(log_large)
        for event in round_events:
            numbers = event.details
            assert numbers is not None and numbers.cloud is not None and numbers.alpha == alpha
            assert numbers.cloud.p_large == pytest.approx(math.exp(log_large[event.position]), rel=1e-6)
            assert numbers.cloud.p_generic == pytest.approx(math.exp(log_generic[event.position]), rel=1e-6)
            checked += 1
        tested_event = next(e for e in round_events if e.ratio is not None)
        # the test's own ratio, p_L / (α p_S0), from the numbers shown
        shown = tested_event.details
        assert tested_event.ratio == pytest.approx(shown.cloud.p_large / shown.threshold, rel=1e-5)
        assert (shown.margin >= 0) == (tested_event.kind == "accepted")
    assert checked == len(drafts)
    # p_S+: the Specialist's probability of each draft in the row it drafted from, in drafting order
    # (every round's drafts were sent: nothing was stopped)
    assert len(drafted) == len(drafts)
    for event, (token, row) in zip(drafts, drafted):
        assert event.id == token
        expected = float(torch.softmax(row, -1)[token])
        assert event.details.p_private == pytest.approx(expected, rel=1e-5)
        assert event.details.top_private[0].probability == pytest.approx(float(torch.softmax(row, -1).max()), rel=1e-5)
        assert [alt.text for alt in event.details.top_private] == [
            pair.tokenizer.decode([alt.id]) for alt in event.details.top_private
        ]


def test_a_chosen_token_names_the_distribution_it_was_drawn_from(pair):
    events, _ = run(pair, method="specsteer", alpha=0.1, draft_len=4, details=True)
    chosen = [event for event in events if event.kind in ("recovered", "bonus")]
    assert chosen
    for event in chosen:
        numbers = event.details
        assert numbers is not None and "steered" in numbers.drawn_from
        assert len(numbers.top_drawn) == 3
        # greedy: the token chosen is the steered distribution's most likely one
        assert numbers.top_drawn[0].id == event.id
        assert numbers.p_drawn == pytest.approx(numbers.top_drawn[0].probability)
        probabilities = [alt.probability for alt in numbers.top_drawn]
        assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1 + 1e-6


def test_details_are_off_by_default_and_change_no_decision(pair):
    plain_events, plain_finished = run(pair, method="specsteer", alpha=0.1, draft_len=4)
    detailed_events, detailed_finished = run(pair, method="specsteer", alpha=0.1, draft_len=4, details=True)
    assert all(event.details is None for event in plain_events)
    assert all(event.details is not None for event in detailed_events if not event.pending)
    assert plain_finished.token_ids == detailed_finished.token_ids
    assert [(e.kind, e.id) for e in plain_events] == [(e.kind, e.id) for e in detailed_events]
    assert plain_finished.stats.uplink_bytes == detailed_finished.stats.uplink_bytes
    assert plain_finished.stats.downlink_bytes == detailed_finished.stats.downlink_bytes


def test_under_cda_a_drafts_threshold_is_its_own_alpha_and_agrees_with_the_verdict(pair):
    """CDA adapts α per draft (α·exp(−λ·JSD) ≤ α): the popover's threshold uses the draft's own α, so the margin's
    sign is the test's verdict (greedy: kept exactly when p_L reaches the threshold)."""
    events, _ = run(pair, method="specsteer", alpha=1.0, draft_len=4, cda_lambda=4.0, details=True)
    drafts = [e for e in events if not e.pending and e.kind in ("accepted", "rejected") and e.details is not None]
    tested = [e for e in drafts if e.details.cloud is not None and e.details.cloud.alpha is not None]
    assert tested and all(0 < e.details.cloud.alpha <= 1.0 for e in tested)
    assert any(e.details.cloud.alpha < 0.999 for e in tested)  # the divergence moved the bar
    for _, group in groupby(tested, key=lambda event: event.round):
        decided = list(group)
        refused = next((i for i, event in enumerate(decided) if event.kind == "rejected"), len(decided))
        for event in decided[: refused + 1]:  # the drafts after a refused one were never tested
            assert (event.details.margin >= 0) == (event.kind == "accepted")
