"""Exactness invariants of the decoding core (fp32, tiny random models)."""

from __future__ import annotations

import math

import pytest
import torch

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.decoding import Detokenizer, ForwardLog, Sampler, Stream
from specsteer.method.drafting import draft
from specsteer.method.steering import recover, steering_entries
from specsteer.method.verification import residual_test
from specsteer.models.tiny import tiny_pair


def prompts(pair, n: int):
    """Distinct (plain, private) prompts: the private one carries extra 'history' ids first."""
    tokenizer = pair.tokenizer
    cases = []
    for i in range(n):
        plain = tokenizer.encode(f"Write about topic {i}: the weather and the sea.")
        private = tokenizer.encode(f"History {i}: I love long walks, strong coffee and quiet mornings. ") + plain
        cases.append((plain, private))
    return cases


def run(pair, plain, private, **config):
    config.setdefault("max_new_tokens", 24)
    tokens, finished = collect(generate_ids(pair, plain, private, DecodeConfig(**config)))
    return tokens, finished


def test_alpha_zero_reproduces_slm_plus(pair):
    for plain, private in prompts(pair, 4):
        _, reference = run(pair, plain, private, method="slm+")
        tokens, finished = run(pair, plain, private, method="specsteer", alpha=0.0, bonus=False, draft_len=3)
        assert finished.token_ids == reference.token_ids
        assert finished.stats.acceptance_rate == 1.0
        assert {t.kind for t in tokens} == {"accepted"}


def test_alpha_infinite_reproduces_lightcosteer(pair):
    for top_k in (0, 16):
        for plain, private in prompts(pair, 3):
            _, reference = run(pair, plain, private, method="lightcosteer", downlink_top_k=top_k, beta=1.5)
            tokens, finished = run(
                pair, plain, private, method="specsteer", alpha=math.inf, bonus=False, downlink_top_k=top_k, beta=1.5
            )
            assert finished.token_ids == reference.token_ids
            assert finished.stats.accepted == 0
            assert [t.kind for t in tokens if t.emitted] == ["recovered"] * len(finished.token_ids)


def test_standard_sd_reproduces_llm(pair):
    for plain, private in prompts(pair, 4):
        _, reference = run(pair, plain, private, method="llm")
        _, finished = run(pair, plain, private, method="sd", draft_len=4)
        assert finished.token_ids == reference.token_ids


@torch.inference_mode()
def test_draft_stops_after_the_first_unsure_token(pair):
    prompt = prompts(pair, 1)[0][1]
    stream = Stream(pair.specialist, prompt, pair.vocab_size, ForwardLog(), "specialist+")
    _, free_rows = draft(stream, 8, Sampler(), frozenset())
    confidences = [torch.softmax(row, -1).max().item() for row in free_rows]
    threshold = sorted(confidences)[len(confidences) // 2]  # some drafts fall below it, some do not
    first_unsure = next(i for i, c in enumerate(confidences) if c < threshold)
    stream = Stream(pair.specialist, prompt, pair.vocab_size, ForwardLog(), "specialist+")
    ids, rows = draft(stream, 8, Sampler(), frozenset(), min_confidence=threshold)
    assert len(ids) == first_unsure + 1  # the unsure draft is proposed, nothing after it
    assert len(stream) == len(prompt) + len(ids)


def test_confidence_stop_keeps_sd_equal_to_llm_and_shortens_rounds(pair):
    for plain, private in prompts(pair, 3):
        _, reference = run(pair, plain, private, method="llm")
        _, fixed = run(pair, plain, private, method="sd", draft_len=6)
        _, stopped = run(pair, plain, private, method="sd", draft_len=6, draft_confidence=0.5)
        assert stopped.token_ids == reference.token_ids
        assert stopped.stats.drafted / stopped.stats.rounds < fixed.stats.drafted / fixed.stats.rounds


def test_specialist_as_its_own_generalist_accepts_every_greedy_draft():
    # With identical models and no history the ratio is exactly 1, so alpha=1 accepts all.
    same = tiny_pair(seed=3, generalist_seed=3)
    plain = same.tokenizer.encode("identical models")
    _, finished = run(same, plain, plain, method="specsteer", alpha=1.0)
    assert finished.stats.acceptance_rate == 1.0


def reference_specsteer(pair, plain, private, alpha, beta, k, max_new, top_k):
    """SpecSteer greedy with no KV cache at all: every logit from a full forward pass."""

    def logits(runtime, ids):
        with torch.no_grad():
            return runtime.model(torch.tensor([ids])).logits[0, -1, : pair.vocab_size].float()

    out: list[int] = []
    while len(out) < max_new:
        drafts = []
        for _ in range(min(k, max_new - len(out))):
            drafts.append(int(logits(pair.specialist, private + out + drafts).argmax()))
        accepted = 0
        for i, token in enumerate(drafts):
            log_large = torch.log_softmax(logits(pair.generalist, plain + out + drafts[:i]), -1)[token]
            log_generic = torch.log_softmax(logits(pair.specialist, plain + out + drafts[:i]), -1)[token]
            if not float(log_large - log_generic) >= math.log(alpha):
                break
            accepted += 1
        out += drafts[:accepted]
        if len(out) >= max_new:
            break
        context = out.copy()
        ids, values = steering_entries(
            logits(pair.generalist, plain + context), logits(pair.specialist, plain + context), beta, top_k
        )
        out.append(recover(ids, values, logits(pair.specialist, private + context), beta, Sampler()))
    return out[:max_new]


@pytest.mark.parametrize("alpha", [0.3, 1.0, 3.0])
def test_cached_rounds_match_a_no_cache_reference(pair, alpha):
    plain, private = prompts(pair, 1)[0]
    expected = reference_specsteer(pair, plain, private, alpha, beta=1.0, k=3, max_new=16, top_k=8)
    tokens, finished = run(
        pair,
        plain,
        private,
        method="specsteer",
        alpha=alpha,
        draft_len=3,
        max_new_tokens=16,
        downlink_top_k=8,
        bonus=True,
    )
    assert finished.token_ids == expected
    kinds = {t.kind for t in tokens}
    assert "rejected" in kinds or alpha < 1  # the comparison exercised cache cropping


def test_stream_crop_matches_recomputation(pair):
    torch.manual_seed(0)
    stream = Stream(pair.generalist, list(range(10, 30)), pair.vocab_size, ForwardLog(), "generalist")
    stream.predict(1)
    for step in range(6):
        extra = torch.randint(0, 200, (4,)).tolist()
        stream.append(extra)
        rows = stream.predict(5)
        keep = step % 4
        stream.truncate(len(stream) - (4 - keep), rows[keep])
        with torch.no_grad():
            full = pair.generalist.model(torch.tensor([stream.tokens])).logits[0, -1, : pair.vocab_size].float()
        assert torch.allclose(stream.last_logits, full, atol=1e-4)
        assert stream.sequence.tokens == stream.tokens


def test_forward_passes_are_per_round_not_per_token(pair):
    plain, private = prompts(pair, 1)[0]
    _, finished = run(pair, plain, private, method="specsteer", alpha=0.0, bonus=False, draft_len=4, max_new_tokens=20)
    calls = finished.stats.forward_calls
    assert finished.stats.rounds == 5
    assert calls["generalist"] == calls["specialist0"] == 5
    assert calls["specialist+"] == 20


def test_max_new_tokens_and_eos_stop(pair):
    plain, private = prompts(pair, 1)[0]
    for method in ("specsteer", "llm", "slm+", "lightcosteer", "costeer", "sd", "slm"):
        _, finished = run(pair, plain, private, method=method, max_new_tokens=7)
        assert len(finished.token_ids) <= 7
        assert finished.stats.new_tokens == len(finished.token_ids)
        eos = [i for i, t in enumerate(finished.token_ids) if t in pair.eos_token_ids]
        assert eos in ([], [len(finished.token_ids) - 1])


def test_stops_at_first_emitted_eos():
    eager = tiny_pair(seed=0, generalist_seed=1, eos_bias=6.0)
    plain = eager.tokenizer.encode("stop soon")
    for method in ("slm+", "llm", "specsteer", "lightcosteer"):
        _, finished = run(eager, plain, plain, method=method, max_new_tokens=40)
        assert finished.stats.stop_reason == "eos", method
        assert finished.token_ids[-1] in eager.eos_token_ids
        assert all(t not in eager.eos_token_ids for t in finished.token_ids[:-1])


def test_pieces_concatenate_to_decoded_text(pair):
    plain, private = prompts(pair, 1)[0]
    for method, sample in (("specsteer", False), ("specsteer", True), ("llm", True), ("costeer", False)):
        tokens, finished = run(pair, plain, private, method=method, sample=sample, seed=5, max_new_tokens=30)
        emitted = [t for t in tokens if t.emitted]
        assert [t.id for t in emitted] == finished.token_ids
        assert "".join(t.text for t in emitted) == finished.text
        assert finished.text == pair.tokenizer.decode(finished.token_ids, skip_special_tokens=True)


def test_detokenizer_holds_back_split_multibyte_characters(pair):
    tokenizer = pair.tokenizer
    text = "naïve café — 東京 🚀 done"
    ids = tokenizer.encode(text)
    assert len(ids) > len(text)  # multi-byte characters really are split across tokens
    detokenizer = Detokenizer(tokenizer)
    pieces = [detokenizer.push(t, final=(i == len(ids) - 1)) for i, t in enumerate(ids)]
    assert "".join(pieces) == text
    assert "" in pieces and all("\ufffd" not in p for p in pieces)


def test_config_validation_messages():
    with pytest.raises(ValueError, match="unknown method"):
        DecodeConfig(method="beam").validate()
    with pytest.raises(ValueError, match="alpha"):
        DecodeConfig(alpha=float("nan")).validate()
    with pytest.raises(ValueError, match="draft length"):
        DecodeConfig(draft_len=0).validate()


# --------------------------------------------------------------------------- distributions


def target_probs(target_logits, sampler):
    return sampler.probs(target_logits)


def empirical(samples, size):
    counts = torch.bincount(torch.tensor(samples), minlength=size).float()
    return counts / counts.sum()


def sample_first_token(draft_logits, target_logits, k, n, seed, exact=True):
    """Draw drafts from q, run the verification, return the first emitted token of each trial."""
    sampler = Sampler(temperature=1.0, generator=torch.Generator().manual_seed(seed))
    rows = [draft_logits] * k
    first = []
    for _ in range(n):
        drafts = [sampler.draw(sampler.probs(draft_logits)) for _ in range(k)]
        if exact:
            accepted, replacement, _ = residual_test(torch.stack([target_logits] * k), rows, drafts, sampler)
        else:  # a plausible-looking wrong rule: resample from Q itself instead of the residual
            accepted, replacement = 0, None
            if sampler.uniform() < min(
                1.0, float(sampler.probs(target_logits)[drafts[0]] / sampler.probs(draft_logits)[drafts[0]])
            ):
                accepted = 1
            else:
                replacement = sampler.choose(target_logits)
        first.append(drafts[0] if accepted > 0 else replacement)
    return first


def test_residual_sampling_matches_target_distribution():
    """Statistical test (as in vLLM's rejection-sampler tests): output ~ Q, not ~ q."""
    torch.manual_seed(0)
    vocab = 8
    draft_logits = torch.randn(vocab) * 1.5
    target_logits = torch.randn(vocab) * 1.5
    n = 20000
    sampler = Sampler(temperature=1.0)
    q = sampler.probs(draft_logits)
    Q = sampler.probs(target_logits)
    exact = empirical(sample_first_token(draft_logits, target_logits, k=3, n=n, seed=1), vocab)
    wrong = empirical(sample_first_token(draft_logits, target_logits, k=3, n=n, seed=1, exact=False), vocab)
    tv = lambda a, b: 0.5 * float((a - b).abs().sum())  # noqa: E731
    assert tv(q, Q) > 0.2  # the two distributions are far apart, so the test has power
    assert tv(exact, Q) < 0.02  # sampling noise at n=20000 over 8 bins is ~0.01
    assert tv(wrong, Q) > 0.05  # the naive rule is detectably biased


def test_exact_variant_end_to_end_matches_steered_target():
    """The whole Edge/Cloud exact path: the first token is distributed as Q of Eq. 4 (beta=1)."""
    small = tiny_pair(seed=0, generalist_seed=1)
    plain = small.tokenizer.encode("abc")
    private = small.tokenizer.encode("xyz history ") + plain
    temperature = 0.35  # concentrates Q on a handful of tokens so a few hundred samples suffice
    with torch.no_grad():
        z_large = small.generalist.model(torch.tensor([plain])).logits[0, -1, : small.vocab_size].float()
        z_generic = small.specialist.model(torch.tensor([plain])).logits[0, -1, : small.vocab_size].float()
        z_private = small.specialist.model(torch.tensor([private])).logits[0, -1, : small.vocab_size].float()
    Q = torch.softmax((z_large + z_private - z_generic) / temperature, -1)
    q = torch.softmax(z_private / temperature, -1)
    n = 600
    firsts = []
    for seed in range(n):
        _, finished = run(
            small,
            plain,
            private,
            method="specsteer",
            exact=True,
            sample=True,
            temperature=temperature,
            seed=seed,
            draft_len=2,
            max_new_tokens=1,
        )
        firsts.append(finished.token_ids[0])
    observed = empirical(firsts, small.vocab_size)
    tv = 0.5 * float((observed - Q).abs().sum())
    assert 0.5 * float((q - Q).abs().sum()) > 0.15
    assert tv < 0.08, tv


def test_standard_sd_bonus_costs_no_extra_device_step():
    """With beta = 0 the bonus needs no Specialist logits: the last draft and the bonus are fed in one pass."""
    same = tiny_pair(seed=3, generalist_seed=3)
    plain = same.tokenizer.encode("identical models, standard SD")
    tokens, finished = run(same, plain, plain, method="sd", draft_len=4, max_new_tokens=20)
    assert finished.stats.acceptance_rate == 1.0
    assert [t.kind for t in tokens[:5]] == ["accepted"] * 4 + ["bonus"]
    assert finished.stats.rounds == 4
    assert finished.stats.forward_calls["specialist+"] == 16  # k per round, none for the bonus
    _, reference = run(same, plain, plain, method="llm", max_new_tokens=20)
    assert finished.token_ids == reference.token_ids


def test_stop_ends_the_generation_within_one_draft_step(pair, monkeypatch):
    """A stop asked for while the Specialist drafts ends the generation after the step in progress:
    no further pass of any model and no further message. The drafts that never crossed the link are
    not shown, and the audit of what did cross still passes."""
    import threading

    from specsteer.data.privacy import audit_uplink
    from specsteer.method import decoding

    plain, private = prompts(pair, 1)[0]
    cancel = threading.Event()
    specialist_steps = 0
    steps_when_stopped: list[int] = []
    original_feed = decoding.Stream._feed

    def feed(stream, keep):
        nonlocal specialist_steps
        rows = original_feed(stream, keep)
        if stream._name == "specialist+":
            specialist_steps += 1
            if specialist_steps == 6:  # round 1: the prefill and 3 steps; round 2: its 2nd step
                cancel.set()
                steps_when_stopped.append(len(stream._log.trace))
        return rows

    monkeypatch.setattr(decoding.Stream, "_feed", feed)
    events = list(
        generate_ids(
            pair, plain, private, DecodeConfig(alpha=0.0, bonus=False, draft_len=4, max_new_tokens=200), cancel=cancel
        )
    )
    tokens, finished = collect(events)
    assert finished.stats.stop_reason == "cancelled"
    assert len(finished.stats.trace) == steps_when_stopped[0], "work went on after the stop"
    assert finished.stats.rounds == 1 and len(finished.token_ids) == 4
    assert audit_uplink(finished.transcript, plain, tokens).ok
