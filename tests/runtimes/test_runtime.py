"""The runtime contract: what the decoding core needs of a model, held by both runtimes.

The same tiny fp32 weights run on transformers and, written as a GGUF, on llama.cpp. transformers is
held to exact recomputation (its cached and uncached passes agree to float rounding); llama.cpp is
held to agreement within a tolerance, because its kernels give slightly different results for a
multi-token pass than for single steps. The last tests do the same on the real offline Specialist.
"""

from __future__ import annotations

import threading

import pytest
import torch

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.decoding import ForwardLog, Stream
from specsteer.models.pair import assemble_pair
from specsteer.models.tiny import IM_END_ID, tiny_model, tiny_tokenizer, write_tiny_gguf
from specsteer.runtimes.base import PrefixCache, Sequence, TransformersModel
from testkit import require_llamacpp

# How far a row may be from a fresh evaluation of the same tokens. llama.cpp on the tiny fp32 model
# measured ~5e-4 between batched and single-token passes; its logits spread over a few units.
TOLERANCE = {"transformers": 1e-4, "llama.cpp": 5e-3}
TEXT = "Rivers carry water to the sea; naïve 東京 🚀 ends here."


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


def _model(runtime: str, seed: int, gguf_dir, eos_bias: float = 0.0):
    if runtime == "transformers":
        return TransformersModel(tiny_model(seed, eos_bias=eos_bias), f"tiny-{seed}")
    require_llamacpp()
    from specsteer.runtimes.llamacpp import LlamaCppModel

    path = gguf_dir / f"tiny-{seed}-{eos_bias}.gguf"
    if not path.exists():
        write_tiny_gguf(path, seed, eos_bias=eos_bias)
    return LlamaCppModel(path, name=f"tiny-{seed}", threads=1)


RUNTIMES = ["transformers", "llama.cpp"]


@pytest.fixture(params=RUNTIMES)
def runtime(request):
    return request.param


def _ids() -> list[int]:
    return tiny_tokenizer().encode(TEXT)


def _fresh_rows(model, ids: list[int], rows: int) -> torch.Tensor:
    sequence = model.new_sequence(len(ids) + 8)
    try:
        return sequence.extend(ids, rows)
    finally:
        sequence.close()


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, runtime: str) -> None:
    difference = float((actual - expected).abs().max())
    assert difference <= TOLERANCE[runtime], f"{runtime}: rows differ by {difference}"


def test_extend_returns_fp32_rows_for_the_last_positions_only(runtime, gguf_dir):
    model = _model(runtime, 0, gguf_dir)
    ids = _ids()
    every = _fresh_rows(model, ids, len(ids))  # [n, V]
    assert every.dtype == torch.float32 and every.shape == (len(ids), model.output_rows)
    last_three = _fresh_rows(model, ids, 3)
    _assert_close(last_three, every[-3:], runtime)
    # Read in pieces: the rows after each piece equal the one-pass rows there.
    sequence = model.new_sequence(len(ids))
    first = sequence.extend(ids[:10], 1)
    rest = sequence.extend(ids[10:], len(ids) - 10)
    _assert_close(first[0], every[9], runtime)
    _assert_close(rest, every[10:], runtime)
    assert sequence.tokens == ids
    with pytest.raises(ValueError):
        sequence.extend([1, 2], 3)


def test_crop_at_every_position_continues_like_a_fresh_evaluation(runtime, gguf_dir):
    model = _model(runtime, 1, gguf_dir)
    ids = _ids()
    expected = _fresh_rows(model, ids, len(ids))
    sequence = model.new_sequence(len(ids))
    sequence.extend(ids, 1)
    for position in range(len(ids) - 1, 0, -1):
        sequence.crop(position)
        assert sequence.tokens == ids[:position]
        row = sequence.extend(ids[position : position + 1], 1)[0]
        _assert_close(row, expected[position], runtime)
        sequence.crop(position)  # what was just read is forgotten again before the next, earlier crop


def test_rollback_then_another_continuation(runtime, gguf_dir):
    """A rejected draft: the cache is cut back and other tokens follow, as if the draft never was."""
    model = _model(runtime, 2, gguf_dir)
    ids = _ids()
    other = tiny_tokenizer().encode(" and the ocean")
    sequence = model.new_sequence(64)
    sequence.extend(ids, 1)
    sequence.crop(12)
    rows = sequence.extend(other, len(other))
    _assert_close(rows, _fresh_rows(model, ids[:12] + other, len(other)), runtime)


def test_stream_rounds_match_recomputation(runtime, gguf_dir):
    """The decoding core's Stream on either runtime: drafts appended, verified, partly kept."""
    model = _model(runtime, 3, gguf_dir)
    torch.manual_seed(0)
    stream = Stream(model, list(range(10, 30)), model.output_rows, ForwardLog(), "generalist", capacity=64)
    stream.predict(1)
    for step in range(6):
        stream.append(torch.randint(0, 250, (4,)).tolist())
        rows = stream.predict(5)
        keep = step % 4
        stream.truncate(len(stream) - (4 - keep), rows[keep])
        _assert_close(stream.last_logits, _fresh_rows(model, stream.tokens, 1)[0], runtime)
    stream.close()


def test_end_token_and_multibyte_pieces(runtime, gguf_dir):
    """A generation ends at the end-of-turn token, and pieces concatenate to the decoded text even
    where a character spans several byte tokens."""
    model = _model(runtime, 4, gguf_dir, eos_bias=6.0)
    pair = assemble_pair("contract", model, _model(runtime, 5, gguf_dir, eos_bias=6.0), tiny_tokenizer())
    assert IM_END_ID in pair.eos_token_ids
    prompt = tiny_tokenizer().encode("東京 🚀 stop soon")
    events, finished = collect(generate_ids(pair, prompt, prompt, DecodeConfig(method="llm", max_new_tokens=60)))
    assert finished.stats.stop_reason == "eos" and finished.token_ids[-1] == IM_END_ID
    tokenizer = tiny_tokenizer()
    # A tiny model without an end bias writes bytes that form multi-byte characters now and then.
    plain = assemble_pair("contract", _model(runtime, 6, gguf_dir), _model(runtime, 7, gguf_dir), tokenizer)
    events, finished = collect(
        generate_ids(plain, prompt, prompt, DecodeConfig(method="specsteer", alpha=0.5, max_new_tokens=80))
    )
    decoded = tokenizer.decode(finished.token_ids, skip_special_tokens=True)
    assert "".join(e.text for e in events if e.emitted) == finished.text == decoded
    assert finished.stats.runtime == runtime


def test_both_runtimes_agree_on_the_same_weights(gguf_dir):
    """The same tiny fp32 model on both runtimes: logits within a few thousandths, and greedy outputs
    that agree token for token over a whole generation (measured: 0.007 at most)."""
    require_llamacpp()
    ids = _ids()
    rows = {name: _fresh_rows(_model(name, 8, gguf_dir), ids, len(ids)) for name in RUNTIMES}
    assert float((rows["transformers"] - rows["llama.cpp"]).abs().max()) < 0.05
    outputs = {}
    for name in RUNTIMES:
        pair = assemble_pair("agree", _model(name, 8, gguf_dir), _model(name, 9, gguf_dir), tiny_tokenizer())
        _, finished = collect(
            generate_ids(pair, ids, ids, DecodeConfig(method="specsteer", alpha=0.3, max_new_tokens=40))
        )
        outputs[name] = finished.token_ids
    assert outputs["transformers"] == outputs["llama.cpp"]


def test_a_two_tokenizer_pair_agrees_on_both_runtimes(gguf_dir):
    """Cross-tokenizer SpecSteer (a one-id-per-byte Specialist drafting for a merged-pairs Generalist) with
    the same tiny fp32 weights on both runtimes: the same tokens, of the same kinds, over whole
    generations in which drafts are refused and recovered."""
    require_llamacpp()
    from specsteer.engine.request import chat_ids
    from specsteer.models.chat import CHATML_CHAT
    from specsteer.models.pair import assemble_cross_pair
    from specsteer.models.tiny import CHAT_QUIET_IDS, tiny_merged_tokenizer
    from specsteer.runtimes.llamacpp import LlamaCppModel

    tokenizers = {"small": tiny_tokenizer(), "large": tiny_merged_tokenizer()}
    shapes = {"small": (4, 320), "large": (5, 352)}  # seed, output rows

    def model(runtime: str, role: str):
        seed, rows = shapes[role]
        options = {"tokenizer_size": len(tokenizers[role]), "quiet_ids": CHAT_QUIET_IDS}
        if runtime == "transformers":
            return TransformersModel(tiny_model(seed, rows, **options), role)
        path = gguf_dir / f"cross-{role}.gguf"
        if not path.exists():
            write_tiny_gguf(path, seed, rows, **options)
        return LlamaCppModel(path, name=role, threads=1)

    task = "Write about the weather and the sea."
    plain = chat_ids(tokenizers["small"], task, CHATML_CHAT)
    private = chat_ids(tokenizers["small"], f"History: I love long walks and quiet mornings. {task}", CHATML_CHAT)
    large = chat_ids(tokenizers["large"], task, CHATML_CHAT)
    runs = {}
    for runtime in RUNTIMES:
        pair = assemble_cross_pair(
            "cross-agree",
            model(runtime, "small"),
            model(runtime, "large"),
            tokenizers["small"],
            tokenizers["large"],
            CHATML_CHAT,
            CHATML_CHAT,
        )
        configs = [
            DecodeConfig(method="specsteer", alpha=alpha, draft_len=3, max_new_tokens=32) for alpha in (0.3, 1.0)
        ]
        runs[runtime] = [
            collect(generate_ids(pair, plain, private, config, plain_large_ids=large)) for config in configs
        ]
    for (expected, reference), (tokens, finished) in zip(runs["transformers"], runs["llama.cpp"]):
        assert finished.token_ids == reference.token_ids
        assert [(t.id, t.kind) for t in tokens] == [(t.id, t.kind) for t in expected]
    assert {"accepted", "rejected", "recovered"} <= {t.kind for tokens, _ in runs["llama.cpp"] for t in tokens}


# --------------------------------------------------------------------------- prefix reuse


class _Recorded(Sequence):
    """A sequence that only keeps its tokens: for the prefix cache's bookkeeping."""

    def __init__(self, capacity: int, size: int = 10) -> None:
        super().__init__()
        self.capacity, self.size, self.closed = capacity, size, False

    def extend(self, ids, rows):
        self.tokens.extend(ids)
        return torch.zeros(rows, 4)

    def crop(self, length):
        del self.tokens[length:]

    @property
    def nbytes(self):
        return self.size

    def fits(self, length):
        return length <= self.capacity

    def close(self):
        self.closed = True


def _holding(cache: PrefixCache, tokens: list[int], capacity: int = 100) -> Sequence:
    sequence = cache.acquire([999], capacity)
    sequence.crop(0)
    sequence.extend(tokens, 1)
    return sequence


def test_prefix_cache_hands_out_the_longest_shared_prefix_and_keeps_the_last_token_to_read():
    cache = PrefixCache(_Recorded, max_idle=4)
    short, long_ = _holding(cache, [1, 2, 3]), _holding(cache, [1, 2, 3, 4, 5, 6])
    cache.release(short)
    cache.release(long_)
    taken = cache.acquire([1, 2, 3, 4, 9], 100)
    assert taken is long_ and taken.tokens == [1, 2, 3, 4]
    # The whole prompt cached: all but its last token are kept, whose logits the stream needs.
    cache.release(taken)
    again = cache.acquire([1, 2, 3, 4], 100)
    assert again.tokens == [1, 2, 3]
    # Nothing shared: a new sequence; one that cannot hold the request is never handed out.
    assert cache.acquire([7, 8], 100).tokens == []
    cache.release(again)
    assert cache.acquire([1, 2, 3, 4], capacity=500) is not again


def test_prefix_cache_evicts_least_recently_used_past_count_and_bytes():
    cache = PrefixCache(_Recorded, max_idle=2, max_idle_bytes=25)
    first, second, third = (_holding(cache, [n]) for n in (1, 2, 3))
    for sequence in (first, second, third):
        cache.release(sequence)
    assert first.closed and not second.closed and cache.idle == 2
    big = _Recorded(100, size=20)
    # Three idle: the oldest goes; 10 + 20 > 25 bytes: the next oldest too, leaving the newest alone.
    cache.release(big)
    assert second.closed and third.closed and not big.closed
    assert cache.idle == 1 and cache.idle_bytes == 20


def test_a_sequence_is_never_handed_to_two_streams_at_once():
    cache = PrefixCache(_Recorded, max_idle=8)
    cache.release(_holding(cache, [1, 2, 3, 4]))
    taken: list[Sequence] = []
    lock = threading.Lock()

    def take():
        sequence = cache.acquire([1, 2, 3, 4, 5], 100)
        with lock:
            taken.append(sequence)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(sequence) for sequence in taken}) == 8
    assert sum(sequence.tokens == [1, 2, 3, 4] for sequence in taken) == 1


def test_a_repeated_request_reuses_every_prompt_and_gives_the_same_output(runtime, gguf_dir):
    small, large = _model(runtime, 10, gguf_dir), _model(runtime, 11, gguf_dir)
    pair = assemble_pair("reuse", small, large, tiny_tokenizer())
    plain, private = _ids(), tiny_tokenizer().encode("History: I like boats. " + TEXT)
    config = DecodeConfig(method="specsteer", alpha=0.3, max_new_tokens=24)
    _, first = collect(generate_ids(pair, plain, private, config))
    _, repeat = collect(generate_ids(pair, plain, private, config))
    assert first.stats.reused_tokens == {"generalist": 0, "specialist0": 0, "specialist+": 0}
    assert repeat.stats.reused_tokens == {
        "generalist": len(plain) - 1,
        "specialist0": len(plain) - 1,
        "specialist+": len(private) - 1,
    }
    assert repeat.token_ids == first.token_ids
    # Another method on the same request shares the prompts too (SLM+ after SpecSteer).
    _, slm = collect(generate_ids(pair, plain, private, DecodeConfig(method="slm+", max_new_tokens=4)))
    assert slm.stats.reused_tokens == {"specialist+": len(private) - 1}


def test_a_failed_pass_does_not_return_a_broken_cache(gguf_dir):
    model = TransformersModel(tiny_model(12), "tiny-12")
    stream = Stream(model, [1, 2, 3], model.output_rows, ForwardLog(), "generalist")
    stream.append([10_000])  # an id past the embedding table: the pass fails midway
    with pytest.raises(IndexError):
        stream.predict(1)
    stream.close()
    assert model.prefix_cache.idle == 0


# --------------------------------------------------------------------------- the real Specialist


def test_llamacpp_reads_long_passes_in_chunks_of_bounded_tokens_and_rows():
    from specsteer.runtimes.llamacpp import BATCH_TOKENS, OUTPUT_ROWS, _chunks

    for count, rows in ((5, 1), (1300, 1), (70, 70), (600, 40), (BATCH_TOKENS, OUTPUT_ROWS + 1)):
        spans = _chunks(count, count - rows)
        assert spans[0][0] == 0 and spans[-1][1] == count
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        for start, end in spans:
            assert 0 < end - start <= BATCH_TOKENS
            assert end - max(start, count - rows) <= OUTPUT_ROWS


def test_every_row_of_a_long_pass_comes_back(gguf_dir):
    """More rows than one llama_decode call returns: read over several calls, equal to the rows one
    transformers pass gives for the same weights."""
    model = _model("llama.cpp", 13, gguf_dir)
    ids = (_ids() * 3)[:70]
    rows = _fresh_rows(model, ids, len(ids))
    expected = _fresh_rows(TransformersModel(tiny_model(13), "tiny-13"), ids, len(ids))
    assert rows.shape == expected.shape and float((rows - expected).abs().max()) < 0.05


def test_a_llamacpp_context_grows_on_demand_and_keeps_what_it_holds(gguf_dir):
    """A context starts small and is replaced by a larger one, its cache copied, only when a pass needs
    the room (once, every session allocated its whole budget's keys and values at its Open)."""
    from specsteer.runtimes.llamacpp import FIRST_CONTEXT

    model = _model("llama.cpp", 17, gguf_dir)
    ids = (_ids() * 40)[:1100]
    sequence = model.new_sequence(len(ids) + 8)
    try:
        assert sequence.nbytes == FIRST_CONTEXT * model.kv_bytes_per_token < model.sequence_bytes(len(ids) + 8)
        sequence.extend(ids[:300], 1)
        assert sequence.nbytes == FIRST_CONTEXT * model.kv_bytes_per_token  # still the first context
        grown = sequence.extend(ids[300:700], 2)  # past FIRST_CONTEXT: grows, keeps the first 300
        assert sequence.nbytes == 2 * FIRST_CONTEXT * model.kv_bytes_per_token
        _assert_close(grown, _fresh_rows(model, ids[:700], 2), "llama.cpp")
        sequence.crop(250)
        again = sequence.extend(ids[250:1100], 1)  # grows once more after a crop
        assert sequence.nbytes >= 1100 * model.kv_bytes_per_token
        _assert_close(again, _fresh_rows(model, ids, 1), "llama.cpp")
    finally:
        sequence.close()
