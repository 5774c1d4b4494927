"""Cross-tokenizer SpecSteer (specsteer.method.crosstok): the rule's pieces, and its invariants on tiny fp32
models with different tokenizers (a one-id-per-byte Specialist, a merged-pairs Generalist)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.service import CloudService
from specsteer.data.privacy import audit_uplink
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.engine.request import chat_ids
from specsteer.method.crosstok import (
    END,
    SYMBOLS,
    ByteVocabulary,
    Segment,
    aligned_segments,
    choose_symbol,
    public_symbol_values,
    segment_test,
    symbol_log_probs,
)
from specsteer.method.decoding import Sampler
from specsteer.method.verification import ratio_test
from specsteer.models.chat import CHATML_CHAT
from specsteer.models.tiny import (
    CHAT_QUIET_IDS,
    IM_END_ID,
    narrow_cross_pair,
    tiny_cross_pair,
    tiny_merged_tokenizer,
    tiny_model,
    tiny_pair,
    tiny_tokenizer,
)
from specsteer.protocol.wire import CrossOpen, Draft, Open, decode, encode

# --------------------------------------------------------------------------- the rule on plain tensors


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.3, 1.0, 4.0, math.inf])
@pytest.mark.parametrize("greedy", [True, False])
def test_segment_test_with_one_tokenization_is_eq7(alpha, greedy):
    """Equal tokenizations align at every token: the segment rule is ratio_test, count and ratios."""
    torch.manual_seed(0)
    for trial in range(20):
        k, vocab = 6, 40
        large_rows, generic_rows = torch.randn(k + 1, vocab) * 2, torch.randn(k + 1, vocab) * 2
        drafts = torch.randint(0, vocab, (k,)).tolist()
        spans = [random.Random(trial).randint(1, 4) for _ in drafts]  # multi-byte tokens, cut alike on both sides
        sampler = Sampler() if greedy else Sampler.make(True, 1.0, 1.0, seed=trial)
        expected, expected_ratios = ratio_test(large_rows, generic_rows, drafts, alpha, sampler)
        index = torch.tensor(drafts)[:, None]
        large = torch.log_softmax(large_rows[:k], -1).gather(-1, index)[:, 0]
        generic = torch.log_softmax(generic_rows[:k], -1).gather(-1, index)[:, 0]
        # sampling: the same uniform draws ratio_test made, one per segment = one per draft
        uniform = None if greedy else Sampler.make(True, 1.0, 1.0, seed=trial).uniform
        verdict = segment_test(large, generic, aligned_segments(spans, spans), alpha, uniform)
        assert verdict.small_accepted == verdict.large_accepted == expected
        if alpha > 0:  # ratio_test's NaN guard at alpha 0 differs only in what it shows
            assert verdict.ratios == pytest.approx(expected_ratios, rel=1e-4)


def test_aligned_segments_cut_where_both_tokenizations_have_a_boundary():
    # text of 6 bytes: Specialist cuts 2|1|3, Generalist 3|3 -> aligned at 3 and 6
    assert aligned_segments([2, 1, 3], [3, 3]) == [Segment(0, 2, 0, 1), Segment(2, 3, 1, 2)]
    assert aligned_segments([1, 1, 1], [1, 1, 1]) == [Segment(i, i + 1, i, i + 1) for i in range(3)]
    assert aligned_segments([4], [1, 1, 2]) == [Segment(0, 1, 0, 3)]
    with pytest.raises(ValueError, match="same text"):
        aligned_segments([2], [3])


def test_segment_ratio_is_the_product_of_token_probabilities_and_alpha_per_draft():
    segments = aligned_segments([1, 1], [2])  # two drafts, one Generalist token
    large, generic = torch.tensor([math.log(0.3)]), torch.tensor([math.log(0.5), math.log(0.4)])
    verdict = segment_test(large, generic, segments, alpha=0.5)
    assert verdict.ratios == pytest.approx((0.3 / (0.5 * 0.4 * 0.5**2),))
    assert (verdict.small_accepted, verdict.large_accepted) == (2, 1)  # 1.5 >= 1
    refused = segment_test(large, generic, segments, alpha=2.0)
    assert (refused.small_accepted, refused.large_accepted) == (0, 0)


@pytest.fixture(scope="module")
def vocabularies():
    cross = tiny_cross_pair()
    return cross.cross.vocabularies


def test_symbol_distribution_gathers_each_tokens_mass_on_its_first_byte(vocabularies):
    large = vocabularies.large
    torch.manual_seed(1)
    row = torch.randn(large.size) * 3
    marginal = symbol_log_probs(row, large.first_symbol)
    assert marginal.shape == (SYMBOLS,)
    assert float(torch.logsumexp(marginal, -1)) == pytest.approx(0.0, abs=1e-5)
    probs = torch.softmax(row, -1)
    keep = large.first_symbol >= 0
    expected = torch.zeros(SYMBOLS).index_add_(0, large.first_symbol[keep], probs[keep])
    assert torch.allclose(marginal.exp(), expected / expected.sum(), atol=1e-6)
    merged = next(i for i, text in enumerate(large.spelled) if len(text) > 1)
    assert int(large.first_symbol[merged]) == large.spelled[merged][0]
    assert int(large.first_symbol[IM_END_ID]) == END


def test_symbol_distribution_of_a_byte_vocabulary_is_its_log_softmax(vocabularies):
    small = vocabularies.small
    row = torch.randn(small.size) * 4 - 50  # far below fp32's normal range once exponentiated
    marginal = symbol_log_probs(row, small.first_symbol)
    log_p = torch.log_softmax(row, -1)
    stops = sorted(small.stop_ids)  # every end id's mass goes to END
    expected = torch.cat([log_p[:256], torch.logsumexp(log_p[stops], -1, keepdim=True)])
    assert torch.allclose(marginal, torch.log_softmax(expected, -1), atol=1e-4)


def test_encode_spells_any_bytes_back_exactly(vocabularies):
    large = vocabularies.large
    rng = random.Random(0)
    samples = [
        b"Write about the weather and the sea.",
        "caf\u00e9 \u00e9t\u00e9".encode(),
        b"\xff\xfe the \xc3",
        bytes(rng.randrange(256) for _ in range(200)),
    ]
    for data in samples:
        ids = large.encode(data)
        assert large.spell(ids) == (data, False)
    text = "Write about the weather and the sea."
    assert large.encode(text.encode()) == tiny_merged_tokenizer().encode(text)  # valid text: the tokenizer's own ids
    assert len(large.encode(text.encode())) < len(text)  # and the merges do fire


def test_a_tokenizer_that_cannot_spell_every_byte_is_refused():
    class NoBytes:
        eos_token_id = 0
        added_tokens_decoder = {}

        def __len__(self):
            return 2

        def convert_ids_to_tokens(self, ids):
            return ["a", "b"][: len(ids)]

        def get_vocab(self):
            return {"a": 0, "b": 1}

    with pytest.raises(ValueError, match="one-byte token"):
        ByteVocabulary.of(NoBytes(), 2, frozenset({0}))


def test_recovery_adds_the_private_term_on_the_edge(vocabularies):
    small, large = vocabularies.small, vocabularies.large
    torch.manual_seed(2)
    large_row, generic_row, private_row = torch.randn(large.size), torch.randn(small.size), torch.randn(small.size)
    symbols, values = public_symbol_values(large_row, large, generic_row, small, 1.5, top_k=0)
    chosen = choose_symbol(symbols, values, private_row, small, 1.5, Sampler().choose)
    steered = symbol_log_probs(large_row, large.first_symbol) + 1.5 * (
        symbol_log_probs(private_row, small.first_symbol) - symbol_log_probs(generic_row, small.first_symbol)
    )
    assert chosen == int(steered.argmax())
    top_symbols, _ = public_symbol_values(large_row, large, generic_row, small, 1.5, top_k=8)
    assert set(top_symbols.tolist()) == set(symbol_log_probs(large_row, large.first_symbol).topk(8).indices.tolist())


# --------------------------------------------------------------------------- invariants through the engine


def _prompts(tokenizer, large_tokenizer, n: int):
    cases = []
    for i in range(n):
        task = f"Write about topic {i}: the weather and the sea."
        private = f"History {i}: I love long walks, strong coffee and quiet mornings. {task}"
        cases.append(
            (
                chat_ids(tokenizer, task, CHATML_CHAT),
                chat_ids(tokenizer, private, CHATML_CHAT),
                chat_ids(large_tokenizer, task, CHATML_CHAT),
            )
        )
    return cases


def _run(pair, plain, private, large, **config):
    config.setdefault("max_new_tokens", 24)
    return collect(generate_ids(pair, plain, private, DecodeConfig(**config), plain_large_ids=large))


@pytest.fixture(scope="module", params=["bytes-to-merged", "merged-to-bytes"])
def cross(request):
    """Both ways round: a one-id-per-byte Specialist drafting for a merged-pairs Generalist, and the
    reverse, where a recovered byte is completed into a multi-byte Specialist token."""
    if request.param == "bytes-to-merged":
        return tiny_cross_pair(seed=0, generalist_seed=1)
    return tiny_cross_pair(
        seed=0, generalist_seed=1, specialist_tokenizer=tiny_merged_tokenizer(), generalist_tokenizer=tiny_tokenizer()
    )


@pytest.mark.parametrize("top_k", [0, 64])
def test_identical_tokenizers_reproduce_same_tokenizer_specsteer(top_k):
    # The same weights both ways; quiet ids keep the same-tokenizer run to ids the byte space can say.
    same = tiny_pair(seed=0, generalist_seed=1, quiet_ids=CHAT_QUIET_IDS)
    crossed = tiny_cross_pair(
        seed=0, generalist_seed=1, specialist_tokenizer=tiny_tokenizer(), generalist_tokenizer=tiny_tokenizer()
    )
    kinds = set()
    for alpha in (0.05, 0.3, 1.0, 3.0):
        for plain, private, large in _prompts(same.tokenizer, crossed.cross.tokenizer, 2):
            assert large == plain
            expected, reference = _run(
                same, plain, private, None, method="specsteer", alpha=alpha, draft_len=3, downlink_top_k=top_k
            )
            tokens, finished = _run(
                crossed, plain, private, large, method="specsteer", alpha=alpha, draft_len=3, downlink_top_k=top_k
            )
            assert finished.token_ids == reference.token_ids
            assert [(t.id, t.kind) for t in tokens] == [(t.id, t.kind) for t in expected]
            assert finished.stats.accepted == reference.stats.accepted
            kinds |= {t.kind for t in tokens}
    assert {"accepted", "rejected", "recovered"} <= kinds  # refusals and recoveries were compared too


def test_alpha_zero_reproduces_the_specialists_greedy_text(cross):
    for plain, private, large in _prompts(cross.tokenizer, cross.cross.tokenizer, 3):
        _, reference = _run(cross, plain, private, large, method="slm+")
        tokens, finished = _run(cross, plain, private, large, method="specsteer", alpha=0.0, bonus=False, draft_len=4)
        assert finished.token_ids == reference.token_ids
        assert finished.text == reference.text
        assert {t.kind for t in tokens} == {"accepted"}


def test_alpha_infinite_reproduces_byte_level_lightcosteer(cross):
    for beta in (0.0, 1.5):
        for plain, private, large in _prompts(cross.tokenizer, cross.cross.tokenizer, 2):
            _, reference = _run(cross, plain, private, large, method="lightcosteer", beta=beta, downlink_top_k=0)
            tokens, finished = _run(
                cross,
                plain,
                private,
                large,
                method="specsteer",
                alpha=math.inf,
                bonus=False,
                beta=beta,
                downlink_top_k=0,
            )
            assert finished.token_ids == reference.token_ids
            assert finished.stats.accepted == 0
            assert [t.kind for t in tokens if t.emitted] == ["recovered"] * len(finished.token_ids)


def _no_cache_byte_lightcosteer(pair, plain, private, large, beta: float, steps: int) -> list[int]:
    """Byte-level LightCoSteer with every row from a full forward pass over each model's own prompt and
    its tokens of the text so far (the Generalist's: each chosen token's text, encoded one by one): no
    streams, caches, protocol or link. Each step: the steered first byte, completed into the
    Specialist's likeliest token that starts with it."""
    vocabularies = pair.cross.vocabularies
    small_vocab, large_vocab = vocabularies.small, vocabularies.large

    def row(runtime, ids, size):
        with torch.no_grad():
            return runtime.model(torch.tensor([ids])).logits[0, -1, :size].float()

    small_ids: list[int] = []
    large_ids: list[int] = []
    while len(small_ids) < steps and (not small_ids or small_ids[-1] not in small_vocab.stop_ids):
        private_row = row(pair.specialist, private + small_ids, small_vocab.size)
        steered = symbol_log_probs(
            row(pair.generalist, large + large_ids, large_vocab.size), large_vocab.first_symbol
        ) + beta * (
            symbol_log_probs(private_row, small_vocab.first_symbol)
            - symbol_log_probs(row(pair.specialist, plain + small_ids, small_vocab.size), small_vocab.first_symbol)
        )
        symbol = int(steered.argmax())
        candidates = [i for i in range(small_vocab.size) if int(small_vocab.first_symbol[i]) == symbol]
        token = max(candidates, key=lambda i: float(private_row[i]))
        small_ids.append(token)
        large_ids += vocabularies.transfer([token])[0]
    return small_ids


def test_byte_level_lightcosteer_matches_a_no_cache_reference(cross):
    emitted = []
    for plain, private, large in _prompts(cross.tokenizer, cross.cross.tokenizer, 2):
        _, finished = _run(
            cross, plain, private, large, method="lightcosteer", beta=1.0, downlink_top_k=0, max_new_tokens=48
        )
        assert finished.token_ids == _no_cache_byte_lightcosteer(cross, plain, private, large, 1.0, 48)
        emitted += finished.token_ids
    spelled = cross.cross.vocabularies.small.spelled
    if any(len(text) > 1 for text in spelled):  # a merged Specialist: some chosen bytes were completed
        assert any(len(spelled[token]) > 1 for token in emitted)


def test_different_tokenizers_accept_some_drafts_and_the_pieces_make_the_text(cross):
    plain, private, large = _prompts(cross.tokenizer, cross.cross.tokenizer, 1)[0]
    assert large != plain  # the two read the prompt as different ids
    tokens, finished = _run(cross, plain, private, large, method="specsteer", alpha=0.1, draft_len=4, max_new_tokens=40)
    kinds = {t.kind for t in tokens}
    assert {"accepted", "rejected", "recovered"} <= kinds
    assert "".join(t.text for t in tokens if t.emitted) == finished.text
    assert finished.text == cross.tokenizer.decode(finished.token_ids, skip_special_tokens=True)
    # uplink per round: a Draft of 4-byte Specialist ids; the audit accepts both prompts
    audit = audit_uplink(finished.transcript, plain, tokens, large)
    assert audit.ok, audit.problems
    assert not audit_uplink(finished.transcript, plain, tokens, plain).ok  # the Generalist's prompt is checked
    opening = finished.transcript[0]
    assert opening.kind == "cross-open" and opening.payload["large_prompt"] == large


def _segments_of_round(tokens):
    """A round's drafts (accepted, then rejected) cut into their segments, each as [(event), ...]."""
    groups: list[list] = []
    for event in tokens:
        if event.kind not in ("accepted", "rejected"):
            continue
        assert event.segment is not None and 0 <= event.segment.position < event.segment.size
        if event.segment.first:
            groups.append([event])
        else:
            previous = groups[-1][-1]
            assert previous.round == event.round and previous.segment.position == event.segment.position - 1
            groups[-1].append(event)
    return groups


def test_each_draft_event_names_its_segment_and_a_segment_is_accepted_or_refused_whole():
    """The unit the cross test decides on: a segment is all accepted or all rejected, its events come
    together and complete, an accepted one carries its one ratio, and the Edge's cut is the Cloud's."""
    cross = narrow_cross_pair()
    plain, private, large = _prompts(cross.tokenizer, cross.cross.tokenizer, 1)[0]
    tokens, _ = _run(cross, plain, private, large, method="specsteer", alpha=0.1, draft_len=4, max_new_tokens=40)
    groups = _segments_of_round(tokens)
    assert any(len(group) > 1 for group in groups)  # the two tokenizers cut the text differently
    assert {group[0].kind for group in groups if len(group) > 1} == {"accepted", "rejected"}
    for group in groups:
        assert len(group) == group[0].segment.size and len({event.kind for event in group}) == 1
        if group[0].kind == "accepted":
            assert len({event.ratio for event in group}) == 1 and group[0].ratio >= 1
    assert all(t.segment is None for t in tokens if t.kind not in ("accepted", "rejected"))
    stored = next(t for t in tokens if t.kind == "accepted").to_dict()
    assert set(stored["segment"]) == {"position", "size"}
    for group in groups:  # what the Cloud tests: the segment's text is a whole number of Generalist tokens
        _, segments = cross.cross.vocabularies.draft_segments([event.id for event in group])
        assert len(segments) == 1


def test_one_vocabulary_names_no_segments_and_identical_tokenizers_make_one_token_segments():
    same = tiny_pair(seed=0, generalist_seed=1, quiet_ids=CHAT_QUIET_IDS)
    crossed = tiny_cross_pair(
        seed=0, generalist_seed=1, specialist_tokenizer=tiny_tokenizer(), generalist_tokenizer=tiny_tokenizer()
    )
    plain, private, large = _prompts(same.tokenizer, crossed.cross.tokenizer, 1)[0]
    tokens, _ = _run(same, plain, private, None, method="specsteer", alpha=1.0, draft_len=3)
    assert all(t.segment is None for t in tokens) and "segment" not in tokens[0].to_dict()
    tokens, _ = _run(crossed, plain, private, large, method="specsteer", alpha=1.0, draft_len=3)
    assert {t.segment.size for t in tokens if t.kind in ("accepted", "rejected")} == {1}


def test_sampling_across_tokenizers_follows_its_seed(cross):
    plain, private, large = _prompts(cross.tokenizer, cross.cross.tokenizer, 1)[0]
    config = dict(method="specsteer", alpha=0.3, sample=True, temperature=1.0, max_new_tokens=24)
    _, first = _run(cross, plain, private, large, seed=5, **config)
    _, again = _run(cross, plain, private, large, seed=5, **config)
    _, other = _run(cross, plain, private, large, seed=6, **config)
    assert first.token_ids == again.token_ids and first.token_ids != other.token_ids
    assert 0 < first.stats.accepted < first.stats.drafted  # the sampled test both passes and refuses


def test_unavailable_methods_are_refused_before_anything_runs(cross):
    plain, private, large = _prompts(cross.tokenizer, cross.cross.tokenizer, 1)[0]
    for config in (dict(method="sd"), dict(method="costeer"), dict(method="specsteer", exact=True)):
        with pytest.raises(ValueError, match="cross-tokenizer"):
            _run(cross, plain, private, large, **config)
    with pytest.raises(ValueError, match="Generalist's ids"):
        _run(cross, plain, private, None, method="specsteer")


def test_llm_baseline_streams_the_generalists_own_ids(cross):
    plain, private, large = _prompts(cross.tokenizer, cross.cross.tokenizer, 1)[0]
    _, finished = _run(cross, plain, private, large, method="llm", max_new_tokens=12)
    assert finished.text == cross.cross.tokenizer.decode(finished.token_ids, skip_special_tokens=True)


def test_llm_plus_gives_the_generalist_the_private_prompt_in_its_own_tokenization(cross):
    """llm+ (the reference that sends the private context) on a cross pair: the Generalist alone on the
    private prompt rendered by its tokenizer, i.e. exactly ``llm`` handed that prompt."""
    task = "Write about the weather and the sea."
    private_text = f"History: I love long walks, strong coffee and quiet mornings. {task}"
    plain, large = chat_ids(cross.tokenizer, task, CHATML_CHAT), chat_ids(cross.cross.tokenizer, task, CHATML_CHAT)
    private = chat_ids(cross.tokenizer, private_text, CHATML_CHAT)
    private_large = chat_ids(cross.cross.tokenizer, private_text, CHATML_CHAT)
    assert private_large != private  # two tokenizations of one text
    config = DecodeConfig(method="llm+", max_new_tokens=12)
    _, finished = collect(
        generate_ids(cross, plain, private, config, plain_large_ids=large, private_large_ids=private_large)
    )
    _, as_llm = _run(cross, plain, private, private_large, method="llm", max_new_tokens=12)
    _, plain_llm = _run(cross, plain, private, large, method="llm", max_new_tokens=12)
    assert finished.token_ids == as_llm.token_ids != plain_llm.token_ids
    opening = finished.transcript[0]
    assert opening.kind == "cross-open" and opening.payload["large_prompt"] == private_large
    assert opening.payload["prompt"] == private
    with pytest.raises(ValueError, match="private prompt in the Generalist's ids"):
        collect(generate_ids(cross, plain, private, config, plain_large_ids=large))


# --------------------------------------------------------------------------- wire and Cloud


def test_cross_open_round_trips_and_leaves_the_open_frame_alone():
    session = bytes(range(16))
    plain = Open(session, "ratio", (1, 2, 3), 8, stop_ids=(258,))
    cross = CrossOpen(session, "ratio", (1, 2, 3), 8, stop_ids=(258,), large_prompt=(7, 300))
    assert decode(encode(cross)) == cross
    assert decode(encode(plain)) == plain and type(decode(encode(plain))) is Open
    assert encode(cross)[:2] == bytes([2, 5]) and encode(plain)[:2] == bytes([2, 1])
    assert encode(cross)[2 : len(encode(plain))] == encode(plain)[2:]  # an Open's fields, then the extension


def test_a_cloud_refuses_the_wrong_kind_of_open(cross):
    same_service, cross_service = CloudService(tiny_pair()), CloudService(cross)
    opening = dict(rule="ratio", prompt=(1, 2), max_new_tokens=4, stop_ids=(258,))
    with pytest.raises(ServiceError, match="share one tokenizer"):
        same_service.handle(encode(CrossOpen(bytes(16), large_prompt=(1,), **opening)))
    with pytest.raises(ServiceError, match="cross-tokenizer pairing"):
        cross_service.handle(encode(Open(bytes(16), **opening)))
    with pytest.raises(ServiceError, match="not available across tokenizers"):
        cross_service.handle(encode(CrossOpen(bytes(16), large_prompt=(1,), **{**opening, "rule": "match"})))


def test_a_cloud_refuses_drafts_it_cannot_spell(cross):
    service = CloudService(cross)
    session = bytes([9] * 16)
    service.handle(encode(CrossOpen(session, "ratio", (1, 2), 8, stop_ids=(258,), large_prompt=(1, 2))))
    with pytest.raises(ServiceError, match="spells no text"):
        service.handle(encode(Draft(session, draft=(65, 257))))  # <|im_start|> spells nothing
    with pytest.raises(ServiceError, match="end id is followed"):
        service.handle(encode(Draft(session, draft=(258, 65))))
    answer = service.handle(encode(Draft(session, draft=(65, 66))))  # the session is still usable
    assert len(list(answer.frames)) == 1


def test_a_specialist_missing_some_bytes_recovers_only_into_bytes_it_can_spell(vocabularies):
    """As SmolLM2's vocabulary lacks 21 one-byte tokens: the Generalist's vocabulary must still spell every
    byte, the Specialist's may not, and recovery then never picks a byte it has no token to start with."""

    class PrintableOnly:
        eos_token_id = 95
        added_tokens_decoder = {}
        pieces = [chr(c) for c in range(32, 127)] + ["<end>"]  # ids 0-94: printable ASCII; 95: the end

        def __len__(self):
            return len(self.pieces)

        def convert_ids_to_tokens(self, ids):
            return [self.pieces[i] for i in ids]

        def get_vocab(self):
            return {piece: i for i, piece in enumerate(self.pieces)}

    with pytest.raises(ValueError, match="one-byte token"):
        ByteVocabulary.of(PrintableOnly(), 96, frozenset({95}))  # as a Generalist: refused
    small = ByteVocabulary.of(PrintableOnly(), 96, frozenset({95}), every_byte=False)
    started = small.started_symbols
    assert int(started.sum()) == 95 + 1 and bool(started[END]) and not bool(started[0x0A])
    with pytest.raises(ValueError, match="no token for the byte 0x0a"):
        small.symbol_id(0x0A)
    torch.manual_seed(3)
    large = vocabularies.large  # spells every byte
    for top_k in (0, 8, 300):
        for _ in range(20):
            large_row = torch.randn(large.size) * 3
            large_row[large.byte_ids[0x0A]] = 50.0  # the Generalist insists on a newline the Specialist cannot say
            symbols, values = public_symbol_values(large_row, large, torch.randn(96), small, 1.0, top_k)
            assert bool(started[symbols].all()) and bool(torch.isfinite(values).all())
            chosen = choose_symbol(symbols, values, torch.randn(96), small, 1.0, Sampler().choose)
            assert bool(started[chosen])
    # a Cloud that names an unsayable symbol anyway cannot make the Edge choose it
    symbols = torch.tensor([0x0A, ord("a")])
    assert choose_symbol(symbols, torch.tensor([9.0, 0.0]), None, small, 1.0, Sampler().choose) == ord("a")


# --------------------------------------------------------------------------- loading


def test_a_cross_tokenizer_pairing_loads_each_tokenizer_and_generates_from_a_request(tmp_path):
    from specsteer.data.history import HistoryItem
    from specsteer.engine.generate import generate
    from specsteer.engine.request import Request
    from specsteer.models.loading import clear_loaded_pairs, load_pair
    from specsteer.models.registry import ModelSpec, Pairing
    from specsteer.models.weights import ModelLoadError

    def saved(name: str, seed: int, vocab: int, tokenizer) -> ModelSpec:
        directory = tmp_path / name
        tiny_model(seed, vocab, tokenizer_size=len(tokenizer), quiet_ids=CHAT_QUIET_IDS).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        return ModelSpec(name=name, kind="local", ref=str(directory), chat=CHATML_CHAT)

    pairing = Pairing(
        id="local-cross",
        label="local cross",
        specialist=saved("small", 0, 320, tiny_tokenizer()),
        generalist=saved("large", 1, 352, tiny_merged_tokenizer()),
        separate_tokenizers=True,
    )
    try:
        pair = load_pair(pairing, dtype="fp32")
        text = "the weather and the sea"
        assert pair.tokenizer.encode(text) == tiny_tokenizer().encode(text)
        # (reloaded beside a Qwen2 config, the merged tokenizer gains Qwen's pre-tokenizer, so its ids differ
        # from tiny_merged_tokenizer()'s; what matters is that the Generalist's own tokenizer was loaded)
        assert len(pair.cross.tokenizer.encode(text)) < len(pair.tokenizer.encode(text))
        request = Request(
            task="review",
            input_text="A kettle that boils fast.",
            history=[
                HistoryItem(
                    {
                        "reviewText": "I love quiet mornings.",
                        "summary": "calm",
                        "overall": "5",
                        "description": "a teapot",
                    }
                )
            ],
        )
        tokens, finished = collect(generate(pair, request, DecodeConfig(method="specsteer", max_new_tokens=12)))
        assert finished.stats.new_tokens == 12 or finished.stats.stop_reason == "eos"
        assert finished.transcript[0].kind == "cross-open"
        edge = load_pair(pairing, dtype="fp32", edge_only=True)
        assert edge.generalist is None and edge.cross.tokenizer.encode(text) == pair.cross.tokenizer.encode(text)
        with pytest.raises(ModelLoadError, match="llama.cpp runtime reads GGUF files"):
            load_pair(pairing, runtime="llama.cpp")
    finally:
        clear_loaded_pairs()


def test_the_papers_cross_pairing_fails_fast_without_a_hub(monkeypatch):
    import time

    from specsteer.models.loading import load_pair
    from specsteer.models.registry import PAIRINGS
    from specsteer.models.weights import ModelLoadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pairing = PAIRINGS["qwen3-0.6b__llama3.1-8b"]
    assert pairing.separate_tokenizers and not pairing.cross_tokenizer
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE") as caught:
        load_pair(pairing.id, dtype="fp32")
    assert time.perf_counter() - started < 5.0
    assert "offline-qwen2.5-coder" in str(caught.value)


# --------------------------------------------------------------------------- evaluate


def test_evaluate_runs_a_cross_tokenizer_pair_and_refuses_its_missing_methods(tmp_path, capsys):
    import json

    from specsteer.cli import evaluate as evaluate_cli

    base = [
        "--data",
        "sample",
        "--task",
        "review",
        "--limit",
        "1",
        "--pairing",
        "tiny-cross-test",
        "--max-new-tokens",
        "6",
        "--database",
        f"sqlite:///{tmp_path / 'cross.db'}",
    ]
    assert evaluate_cli.main(base + ["--methods", "slm+,llm,specsteer", "--alpha", "0.1", "--json"]) == 0
    rows = {row["method"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert set(rows) == {"slm+", "llm", "specsteer"}
    assert rows["specsteer"]["acceptance"] is not None and rows["slm+"]["acceptance"] is None
    assert evaluate_cli.main(base + ["--methods", "specsteer,sd", "--run-name", "refused"]) == 2  # a bad argument
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Standard SD is not available on a cross-tokenizer pairing" in last


# --------------------------------------------------------------------------- over HTTP


@pytest.mark.slow
def test_an_http_cloud_of_a_cross_pair_gives_the_in_process_output_and_sees_no_history(tmp_path):
    """``python -m specsteer cloud --pairing tiny-cross-test``: the same tokens as in process, and what it
    received is the plain prompt in both tokenizations and Specialist ids (audited on the captured bytes)."""
    import os
    import struct

    from specsteer.cloud.client import RemoteCloud
    from specsteer.cloud.process import start_cloud_process
    from specsteer.cloud.server import read_capture
    from specsteer.data.history import HistoryItem
    from specsteer.data.privacy import audit_wire
    from specsteer.engine.generate import generate
    from specsteer.engine.request import Request, prepare

    cross = tiny_cross_pair()  # what the Cloud process builds for tiny-cross-test
    canary = "QUOKKA-canary-4417 purple kazoo"
    history = [HistoryItem({"text": f"My secret phrase is {canary}; headphones matter to me."})]
    prepared = prepare(Request(task="free", input_text="Write about headphones and battery life.", history=history))
    plain_ids = chat_ids(cross.tokenizer, prepared.prompts.plain, CHATML_CHAT)
    large_ids = chat_ids(cross.cross.tokenizer, prepared.prompts.plain, CHATML_CHAT)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    capture = tmp_path / "capture.bin"
    with (tmp_path / "cloud.log").open("wb") as log:
        server = start_cloud_process(
            "--pairing",
            "tiny-cross-test",
            "--capture",
            str(capture),
            "--no-prefix-reuse",
            env=environment,
            stderr=log,
            ready_timeout_s=180,
        )
    try:
        with RemoteCloud(server.url) as remote:
            for config in (
                DecodeConfig(method="specsteer", alpha=0.3, max_new_tokens=20),
                DecodeConfig(method="lightcosteer", max_new_tokens=8),
                DecodeConfig(method="llm", max_new_tokens=8),
            ):
                cross.clear_prefix_caches()
                tokens, here = collect(generate(cross, prepared, config))
                before = len(read_capture(capture))
                remote_tokens, there = collect(generate(cross, prepared, config, cloud=remote))
                assert [(t.id, t.kind, t.segment) for t in remote_tokens] == [(t.id, t.kind, t.segment) for t in tokens]
                exchanges = read_capture(capture)[before:]
                uplink, downlink = [e.uplink for e in exchanges], [e.downlink for e in exchanges]
                assert sum(map(len, uplink)) == there.stats.uplink_bytes
                audit = audit_wire(uplink, downlink, plain_ids, remote_tokens, large_ids)
                assert audit.ok, audit.problems
                received = b"".join(uplink)
                for tokenizer in (cross.tokenizer, cross.cross.tokenizer):
                    canary_ids = tokenizer.encode(canary)
                    assert struct.pack(f"<{len(canary_ids)}I", *canary_ids) not in received
                assert canary.encode() not in received
    finally:
        server.stop()
