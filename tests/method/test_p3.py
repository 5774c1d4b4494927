"""P³ (specsteer.method.p3): the test itself, its limits, and the engine against the one-screen statement.

The engine runs P³ between an Edge and a Cloud with caches, rollback and frames on the link; the reference
(specsteer.method.reference.p3) recomputes every distribution from the whole sequence. On tiny fp32 models,
greedy: tau = 0 keeps every Cloud draft (the output is the Generalist's on the plain prompt), tau = 1 keeps
only the Specialist's argmax (the output is SLM+'s), and every tau and k in between emit the reference's tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.engine.request import chat_ids
from specsteer.method.p3 import P3Params, log_ratios, p3_check
from specsteer.method.reference import p3
from specsteer.models.tiny import tiny_pair

MAX_NEW = 20


@pytest.fixture(scope="module")
def pair(tiny_pair_56):
    return tiny_pair_56


@pytest.fixture(scope="module")
def prompts(pair):
    plain = chat_ids(pair.tokenizer, "Write about rivers.", pair.chat)
    private = chat_ids(pair.tokenizer, "History: I fish on the Loire every weekend.\nWrite about rivers.", pair.chat)
    return plain, private


def _run(pair, prompts, method: str, **config):
    plain, private = prompts
    return collect(generate_ids(pair, plain, private, DecodeConfig(method=method, max_new_tokens=MAX_NEW, **config)))


def _next_logits(model, vocab: int):
    @torch.no_grad()
    def logits(ids: list[int]) -> torch.Tensor:
        return model(torch.tensor([ids])).logits[0, -1, :vocab].float()

    return logits


# --------------------------------------------------------------------------- the test on rows


def test_the_ratio_is_to_the_best_token():
    rows = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))  # [m=2, V=3]
    assert log_ratios(rows, [1, 0]).exp().tolist() == pytest.approx([0.5, 0.125])
    assert p3_check(rows, [1, 0], 0.1).accepted == 2
    decision = p3_check(rows, [1, 0], 0.2)
    assert (decision.accepted, decision.correction) == (1, 2)  # the second draft refused, the row's argmax instead
    assert decision.ratios == pytest.approx((0.5, 0.125))
    refused_first = p3_check(rows, [1, 0], 0.6)
    assert (refused_first.accepted, refused_first.correction, len(refused_first.ratios)) == (0, 0, 1)


def test_tau_zero_keeps_even_an_impossible_draft_and_tau_one_only_the_best():
    rows = torch.tensor([[0.0, -math.inf, 3.0]])
    assert p3_check(rows, [1], 0.0).accepted == 1
    assert p3_check(rows, [2], 1.0).accepted == 1
    assert p3_check(rows, [0], 1.0).correction == 2


@pytest.mark.parametrize(("k", "tau"), [(0, 0.05), (17, 0.05), (10, -0.1), (10, 1.5), (10, float("nan"))])
def test_settings_out_of_range_are_refused(k, tau):
    with pytest.raises(ValueError, match="P³"):
        DecodeConfig(method="p3", p3=P3Params(k, tau)).validate()


def test_the_guard_keeps_a_correction_off_a_private_span():
    """The private-span guard masks the row the Edge corrects from: here the Specialist's best token would
    complete a private 2-gram, so the correction is its second best."""
    from specsteer.edge.p3 import P3Edge
    from specsteer.method.decoding import ForwardLog
    from specsteer.method.drafting import PrivateSpanGuard

    pair = tiny_pair(seed=5, generalist_seed=6)
    private, plain = [3, 4, 5, 6], [3, 4]
    rows = _next_logits(pair.specialist.model, pair.vocab_size)(private)
    best, second = rows.topk(2).indices.tolist()
    guard = PrivateSpanGuard([*private, best], plain, 2)  # (6, best) is private: best may not follow 6
    edge = P3Edge(pair.specialist, private, pair.vocab_size, ForwardLog(), 1.0, 8, guard)
    try:
        decision = edge.check([second])  # refused at tau = 1 (not the best)
    finally:
        edge.close()
    assert (decision.accepted, decision.correction) == (0, second)


# --------------------------------------------------------------------------- the engine


def test_tau_zero_is_the_generalist_alone(pair, prompts):
    _, finished = _run(pair, prompts, "p3", p3=P3Params(4, 0.0))
    _, llm = _run(pair, prompts, "llm")
    assert finished.token_ids == llm.token_ids
    assert finished.stats.device_chosen == 0
    assert finished.stats.accepted == len(finished.token_ids)


def test_tau_one_is_the_specialist_with_the_history(pair, prompts):
    tokens, finished = _run(pair, prompts, "p3", p3=P3Params(4, 1.0))
    _, slm_plus = _run(pair, prompts, "slm+")
    assert finished.token_ids == slm_plus.token_ids
    emitted = [t for t in tokens if t.emitted]
    assert finished.stats.device_chosen == sum(t.kind == "recovered" for t in emitted) > 0


@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("tau", [0.001, 0.01])
def test_the_engine_emits_the_reference_tokens(pair, prompts, k, tau):
    tokens, finished = _run(pair, prompts, "p3", p3=P3Params(k, tau))
    plain, private = prompts
    expected = p3(
        _next_logits(pair.generalist.model, pair.vocab_size),
        _next_logits(pair.specialist.model, pair.vocab_size),
        plain,
        private,
        k,
        tau,
        MAX_NEW,
        pair.eos_token_ids,
    )
    assert finished.token_ids == expected
    kinds = {t.kind for t in tokens}
    assert {"accepted", "recovered"} <= kinds  # in between: some drafts kept, some corrected
    assert kinds <= {"accepted", "rejected", "recovered"}  # no bonus in P³


def test_the_stream_reads_like_specsteers(pair, prompts):
    """Per round: the Cloud's drafts shown pending, then the kept ones accepted, the first refused one and
    those after it rejected, and the correction recovered in the refused draft's place."""
    plain, private = prompts
    config = DecodeConfig(method="p3", max_new_tokens=MAX_NEW, p3=P3Params(3, 0.01))
    events = list(generate_ids(pair, plain, private, config))
    settled = [e for e in events[:-1] if not e.pending]
    finished = events[-1]
    for round_ in {e.round for e in settled}:
        kinds = [e.kind for e in settled if e.round == round_]
        accepted = kinds.count("accepted")
        assert kinds[:accepted] == ["accepted"] * accepted
        if accepted < len(kinds):
            assert kinds[-1] == "recovered" and set(kinds[accepted:-1]) == {"rejected"}
            recovered = [e for e in settled if e.round == round_ and e.kind == "recovered"][0]
            assert recovered.position == accepted
    assert "".join(e.text for e in settled if e.emitted) == finished.text
    assert finished.stats.rounds == len({e.round for e in settled})


# --------------------------------------------------------------------------- what crossed


def test_the_uplink_carries_exactly_the_kept_drafts_and_corrections(pair, prompts):
    from specsteer.data.privacy import audit_uplink
    from specsteer.protocol.wire import SESSION_BYTES

    plain, _ = prompts
    tokens, finished = _run(pair, prompts, "p3", p3=P3Params(3, 0.01))
    uplink = [m for m in finished.transcript if m.direction == "uplink"]
    assert uplink[0].kind == "open" and uplink[0].payload["prompt"] == plain and uplink[0].payload["top_k"] == 3
    rounds = uplink[1:]
    assert len(rounds) == finished.stats.rounds
    assert all(m.kind == "draft" and m.payload["draft"] == [] for m in rounds)
    sent = [token for m in rounds for token in m.payload["append"]]
    emitted = [t for t in tokens if t.emitted]
    last_round = emitted[-1].round
    # Every round but the last sends the previous one's kept drafts and correction; the last one's never cross.
    assert sent == [t.id for t in emitted if t.round != last_round]
    assert rounds[0].payload["append"] == []
    # A round's frame: header, session, keep, and the appended ids (count + 4 bytes each), no drafts (count).
    assert [m.bytes for m in rounds] == [2 + SESSION_BYTES + 4 + 4 + 4 * len(m.payload["append"]) + 4 for m in rounds]
    assert finished.stats.sent_text == "".join(t.text for t in emitted if t.round != last_round)
    downlink = [m for m in finished.transcript if m.direction == "downlink"]
    assert [m.kind for m in downlink] == ["tokens"] * finished.stats.rounds
    audit = audit_uplink(finished.transcript, plain, tokens)
    assert audit.ok, audit.problems
    assert audit.cloud_drafted and audit.chosen_tokens == len(sent) and audit.draft_tokens == 0
    assert "drafts the device kept" in audit.summary()


def test_the_audit_flags_a_token_the_output_does_not_hold(pair, prompts):
    from dataclasses import replace

    from specsteer.data.privacy import audit_uplink

    plain, _ = prompts
    tokens, finished = _run(pair, prompts, "p3", p3=P3Params(3, 0.01))
    transcript = list(finished.transcript)
    index = next(i for i, m in enumerate(transcript) if m.kind == "draft" and m.payload["append"])
    forged = dict(transcript[index].payload, append=[t + 1 for t in transcript[index].payload["append"]])
    transcript[index] = replace(transcript[index], payload=forged)
    assert not audit_uplink(transcript, plain, tokens).ok


def test_a_cross_tokenizer_pairing_is_refused():
    from specsteer.engine.decode_config import cross_tokenizer_problem
    from specsteer.models.tiny import shared_test_pair

    cross = shared_test_pair("tiny-cross-test")
    assert cross is not None
    problem = cross_tokenizer_problem(cross, DecodeConfig(method="p3"))
    assert problem is not None and "P³ is not available on a cross-tokenizer pairing" in problem


def test_drafts_a_cloud_should_not_send_end_the_generation_with_a_clear_error(pair, prompts, monkeypatch):
    from specsteer.protocol.link import CloudRefused, Link
    from specsteer.protocol.wire import Tokens

    plain, private = prompts
    monkeypatch.setattr(Link, "cloud_drafts", lambda self, draft: Tokens((pair.vocab_size + 5,)))
    with pytest.raises(CloudRefused, match="unknown token id"):
        collect(generate_ids(pair, plain, private, DecodeConfig(method="p3", max_new_tokens=4)))
