"""Cross-tokenizer SpecSteer (paper Appendix A.4): a Specialist and a Generalist with different vocabularies.

The same-tokenizer method compares ``p_L(y)`` with ``p_S0(y)`` for one token id ``y``. Across
tokenizers there is no common id, but there is common *text*. This module holds the pure pieces
of the method over text; ``specsteer.edge.session`` and ``specsteer.cloud.verifier`` run them on the Edge and the Cloud.

What crosses the link
---------------------
The uplink carries the drafted **Specialist ids**, in the unchanged ``Draft`` frame (4 bytes an
id). The Cloud turns them into text with the Specialist's tokenizer, which it has anyway: it runs
the generic copy ``S0`` of the Specialist. Ids rather than the text's UTF-8 bytes because

* ``p_S0`` must score exactly the token sequence the Edge's ``p_S+`` drafted: that is what makes
  the private term cancel in ``Q / q`` (DESIGN §1). Bytes would have to be re-tokenized on the
  Cloud, and a draft is not always the canonical tokenization of its own text;
* the wire format, the privacy audit and the byte counts stay those of the same-tokenizer method:
  a draft costs 4 bytes an id, where its text would cost one byte a byte (a byte-level BPE token of
  English text spells about 4 bytes, so the two are about even; the ids are never larger than
  4 bytes a token, the text is unbounded for long tokens).

The only new frame is ``CrossOpen`` (the Generalist also needs the plain prompt in its own
tokenization). The downlink ``Verdict`` keeps its layout; on a cross pair its ``ids`` name
*symbols* of the common space below rather than token ids.

The common space
----------------
257 symbols: the 256 byte values and ``END`` (any id that ends a text). A tokenizer is seen
through a :class:`ByteVocabulary`: the bytes each id spells, the one-byte token of each byte (every
byte-level BPE vocabulary has them; SentencePiece ones as ``<0xNN>`` byte-fallback tokens), and its
end id. Ids that spell nothing and do not end the text (``<|im_start|>``, padding rows) cannot be
said in the other vocabulary, so on a cross pair the Specialist never drafts them (:func:`allowed_ids`).

Verification (the rule, and why it reduces to Eq. 7)
----------------------------------------------------
The Specialist drafts ids ``d_1..d_k`` spelling bytes ``D`` (an end id spells ``END``, after all
bytes). The Cloud re-encodes ``D`` with the Generalist's tokenizer, ``g_1..g_m``
(:meth:`ByteVocabulary.encode`). Both sequences spell ``D``; an offset of ``D`` where *both* have a
token boundary is an **aligned boundary**. Consecutive aligned boundaries cut the draft into
segments; segment ``j`` holds Specialist drafts ``d_u..d_v`` (``n_j = v - u + 1`` of them) and
Generalist tokens ``g_x..g_y``. Each model scores the segment as the product of its own token
probabilities, conditioned on everything before (its own tokenization of the committed text,
then its tokens of the earlier segments):

    P_L(seg_j)  = prod_{i=x..y} p_L(g_i | ...)        P_S0(seg_j) = prod_{i=u..v} p_S0(d_i | ...)

and segments are tested in order, stopping at the first refusal:

    accept seg_j  with probability  min(1, P_L(seg_j) / (alpha^{n_j} * P_S0(seg_j)))      (sampling)
    accept seg_j  iff                P_L(seg_j) >= alpha^{n_j} * P_S0(seg_j)                (greedy)

``alpha`` is charged once per drafted Specialist token, so its meaning (the per-draft strictness
that stands in for the partition function) does not depend on how the Generalist happens to cut
the text. ``alpha = 0`` accepts every segment, ``alpha = inf`` refuses every one.

*Reduction.* If the two tokenizers are equal and the Generalist's encoding of ``D`` is the drafted
ids themselves (always so for a byte-level vocabulary, whose encoding is unique), every token
boundary is aligned: each segment is one draft ``d_i = g_i``, ``n_j = 1``, and the rule reads
``accept d_i w.p. min(1, p_L(d_i) / (alpha p_S0(d_i)))``, tested in order and stopping at the
first refusal: paper Eq. 7 exactly, with the same accepted count and the same rows at the
refusal. (``test_crosstok.py`` checks it on random rows against ``verification.ratio_test``.) With
unequal tokenizations a segment is the shortest stretch of text both models can be asked about;
the rule is then Eq. 7 applied to the text of that stretch.

Recovery (Eq. 8 in the common byte space)
-----------------------------------------
At the first refused segment (or after a fully accepted round: the bonus) all three models stand
at the same aligned boundary. Each next-token distribution is marginalised onto the symbol its
token starts with (:func:`symbol_log_probs`): ``M(c) = log sum_{t: first byte of t = c} p(t)``,
``M(END) = log sum_{t ends the text} p(t)``, renormalised over the common space. The steered
symbol logits are

    z(c) = M_L(c) + beta * (M_S+(c) - M_S0(c))

The Cloud sends its share ``M_L - beta M_S0`` on the ``top_k`` symbols the Generalist finds likeliest
(:func:`public_symbol_values`; 257 at most, so ``top_k = 0`` costs 257 values); the Edge adds
``beta M_S+`` and chooses one symbol ``c`` (:func:`choose_symbol`). It then completes ``c`` into the
Specialist's own token (:func:`complete_symbol`): the token the Specialist's private row prefers among
those whose text starts with ``c`` (an end id for END). That token is the recovered one: the Edge appends
it, the generic copy reads the same id, the Generalist its re-encoding of its text. In effect

    Q(t) ~ Q_bytes(first byte of t) * p_S+(t | its first byte)

the steering decides where the text goes next, in the one space both models share, and the Specialist
spells it out.

This is a simplification of Hayase et al. (2025), "Sampling from your language model one byte at a
time": their next-byte distribution also counts tokenizations that *cover* the committed text's
tail (the model's canonical token may straddle the boundary). Here each model conditions on the
tokenization the protocol actually fed it (drafts, the Generalist's re-encoding of each chunk) and
the first byte of its next token is taken as the next byte. Completing the byte into a whole
Specialist token keeps the text fed to both models close to their canonical tokenizations:
appending the lone byte instead (a one-byte token ``" "`` where the models expect ``" new"``) threw
real models off their training distribution at every recovery (measured with
``benchmarks/crosstok_cost.py``). The rest of the recovered token follows the Specialist alone; as with
Eq. 8, a recovered token is never tested, only conditioned on by the next round.

With a byte-level vocabulary on both sides (every token one byte) ``M`` is the model's own
log-softmax over the byte ids and the end ids (renormalised), the completion of a byte is that
byte's own token, and the choice equals Eq. 8's argmax over the same candidates (log-softmax and raw
logits differ by a constant per row) as long as Eq. 8 would pick a byte or the one end id that
carries the end mass: END pools every end id, and ids that spell nothing are not candidates here.
Under those conditions (``tiny_models.CHAT_QUIET_IDS``) the whole cross-tokenizer path reproduces
same-tokenizer SpecSteer token for token
(``test_identical_tokenizers_reproduce_same_tokenizer_specsteer``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

BYTE_SYMBOLS = 256
END = 256  # the symbol of every id that ends a text
SYMBOLS = BYTE_SYMBOLS + 1
_NO_SYMBOL = -1  # an id that spells nothing and does not end the text


# --------------------------------------------------------------------------- one tokenizer in the byte space


@dataclass(frozen=True, eq=False)
class ByteVocabulary:
    """One tokenizer as the common byte space sees it.

    ``spelled[i]``: the bytes id ``i`` stands for (empty for ids that spell nothing); ``first_symbol``:
    ``[V]`` long, the first byte of each id, ``END`` for end ids, -1 for the rest; ``byte_ids[b]``:
    the one-byte token of byte ``b`` (-1 where a Specialist's vocabulary has none, see :meth:`of`);
    ``end_id``: the id appended for ``END``; ``stop_ids``: every id that ends a text. ``encode_text``
    tokenizes a ``str`` without special tokens.
    """

    spelled: tuple[bytes, ...]
    first_symbol: torch.Tensor
    byte_ids: tuple[int, ...]
    end_id: int
    stop_ids: frozenset[int]
    encode_text: Callable[[str], list[int]]

    @property
    def size(self) -> int:
        return len(self.spelled)

    @cached_property
    def started_symbols(self) -> torch.Tensor:
        """``[257]`` bool: the symbols some id of this vocabulary starts with (END: an end id). Recovery
        completes a chosen symbol into such an id, so on the Specialist's side it chooses among these."""
        started = torch.zeros(SYMBOLS, dtype=torch.bool)
        started[self.first_symbol[self.first_symbol >= 0]] = True
        return started

    @classmethod
    def of(cls, tokenizer, vocab_size: int, stop_ids: frozenset[int], every_byte: bool = True) -> ByteVocabulary:
        """Read ``tokenizer``'s spelling of every id below ``vocab_size``; raises ValueError when it has
        no end id or, with ``every_byte``, cannot spell every single byte.

        The Generalist's vocabulary must spell every byte: it re-encodes whatever text the Specialist
        drafted. The Specialist's need not (``every_byte=False``): its drafts are its own tokens, and
        recovery chooses only among the symbols its tokens start with (:attr:`started_symbols`).
        SmolLM2's byte-level vocabulary has no token for 21 byte values: 0xC0, 0xC1 and 0xF5-0xFF, which
        UTF-8 never uses, 0xF1 and 0xF2 (lead bytes of rarely assigned planes) and six ASCII control
        characters."""
        if not stop_ids:
            raise ValueError("a cross-tokenizer vocabulary needs at least one end id")
        spelled = _spellings(tokenizer, vocab_size)
        byte_ids = _byte_token_ids(spelled, every_byte)
        first = torch.full((vocab_size,), _NO_SYMBOL, dtype=torch.long)
        for index, text in enumerate(spelled):
            if text:
                first[index] = text[0]
        for index in stop_ids:
            first[index] = END
        preferred = tokenizer.eos_token_id
        end_id = int(preferred) if preferred is not None and preferred in stop_ids else min(stop_ids)

        def encode_text(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False))

        return cls(tuple(spelled), first, byte_ids, end_id, frozenset(stop_ids), encode_text)

    def symbol_id(self, symbol: int) -> int:
        """The id this vocabulary appends for a chosen symbol."""
        if symbol == END:
            return self.end_id
        if not 0 <= symbol < BYTE_SYMBOLS:
            raise ValueError(f"no symbol {symbol}")
        if self.byte_ids[symbol] < 0:
            raise ValueError(f"this vocabulary has no token for the byte {symbol:#04x}")
        return self.byte_ids[symbol]

    def spell(self, ids: Sequence[int]) -> tuple[bytes, bool]:
        """The bytes ``ids`` spell, and whether they end with an end id (nothing may follow one)."""
        ended = bool(ids) and ids[-1] in self.stop_ids
        body = ids[:-1] if ended else ids
        return b"".join(self.spelled[i] for i in body), ended

    def encode(self, data: bytes) -> list[int]:
        """Ids spelling exactly ``data``: the tokenizer's encoding of each valid UTF-8 run, one-byte
        tokens for bytes that are not valid UTF-8 (a draft may stop inside a character) and for any
        run the tokenizer would not spell back as it is (a normalizer, an added prefix space)."""
        ids: list[int] = []
        for run, is_text in _utf8_runs(data):
            encoded = self.encode_text(run.decode("utf-8")) if is_text else []
            if not is_text or b"".join(self.spelled[i] if i < self.size else b"\0\0" for i in encoded) != run:
                encoded = [self.symbol_id(b) for b in run]
            ids.extend(encoded)
        return ids


def allowed_ids(vocabulary: ByteVocabulary) -> torch.Tensor:
    """``[V]`` bool: the ids the other side can be told about (they spell bytes, or end the text)."""
    return vocabulary.first_symbol != _NO_SYMBOL


def _spellings(tokenizer, vocab_size: int) -> list[bytes]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    special = {index for index, token in tokenizer.added_tokens_decoder.items() if token.special}
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(vocab_size, len(tokenizer)))))
    vocabulary = tokenizer.get_vocab()
    unicode_to_byte = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    # Byte-level BPE writes every token in bytes_to_unicode's alphabet; a vocabulary may still lack a few
    # of its 256 symbols (SmolLM2's), so its decoder, where it has one, says which kind it is.
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    byte_level = "ByteLevel" in repr(decoder) or all(symbol in vocabulary for symbol in unicode_to_byte)
    spelled = []
    for index, piece in enumerate(pieces):
        if index in special or piece is None:
            spelled.append(b"")
        elif byte_level:
            spelled.append(
                bytes(unicode_to_byte[c] for c in piece) if all(c in unicode_to_byte for c in piece) else b""
            )
        else:
            spelled.append(_sentencepiece_bytes(piece))
    spelled.extend(b"" for _ in range(len(spelled), vocab_size))  # padded output rows spell nothing
    return spelled


def _sentencepiece_bytes(piece: str) -> bytes:
    """A SentencePiece piece: ``<0xNN>`` is a byte-fallback token, ``▁`` stands for a space."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            pass
    return piece.replace("\u2581", " ").encode("utf-8")


def _byte_token_ids(spelled: list[bytes], every_byte: bool = True) -> tuple[int, ...]:
    single: dict[int, int] = {}
    for index, text in enumerate(spelled):
        if len(text) == 1:
            single.setdefault(text[0], index)
    missing = [b for b in range(BYTE_SYMBOLS) if b not in single]
    if missing and not every_byte:
        return tuple(single.get(b, -1) for b in range(BYTE_SYMBOLS))
    if missing:
        raise ValueError(
            f"the tokenizer has no one-byte token for {len(missing)} byte values (e.g. {missing[:3]}); "
            "cross-tokenizer SpecSteer needs a byte-level or byte-fallback vocabulary"
        )
    return tuple(single[b] for b in range(BYTE_SYMBOLS))


def _utf8_runs(data: bytes) -> list[tuple[bytes, bool]]:
    """``data`` cut into maximal valid UTF-8 runs (True) and single invalid bytes (False)."""
    runs: list[tuple[bytes, bool]] = []
    start = 0
    while start < len(data):
        try:
            data[start:].decode("utf-8")
            runs.append((data[start:], True))
            break
        except UnicodeDecodeError as error:
            if error.start:
                runs.append((data[start : start + error.start], True))
            runs.append((data[start + error.start : start + error.start + 1], False))
            start += error.start + 1
    return runs


# --------------------------------------------------------------------------- verification


@dataclass(frozen=True)
class Segment:
    """A stretch of the draft between two aligned boundaries: drafts ``[small_start, small_end)``
    and Generalist tokens ``[large_start, large_end)``."""

    small_start: int
    small_end: int
    large_start: int
    large_end: int

    @property
    def drafts(self) -> int:
        return self.small_end - self.small_start


def span_lengths(vocabulary: ByteVocabulary, ids: Sequence[int]) -> list[int]:
    """How much of the draft each id covers, in bytes; an end id covers the one ``END`` after them."""
    return [1 if i in vocabulary.stop_ids else len(vocabulary.spelled[i]) for i in ids]


def aligned_segments(small_lengths: Sequence[int], large_lengths: Sequence[int]) -> list[Segment]:
    """The segments between the offsets where both tokenizations have a boundary.

    Both must cover the same text (equal totals); every token must cover at least one byte."""
    if sum(small_lengths) != sum(large_lengths):
        raise ValueError("the two tokenizations do not spell the same text")
    if any(n <= 0 for n in list(small_lengths) + list(large_lengths)):
        raise ValueError("a token that spells nothing cannot be aligned")
    small_ends = _ends(small_lengths)
    large_ends = _ends(large_lengths)
    segments = []
    small_start = large_start = 0
    for offset in sorted(set(small_ends) & set(large_ends)):
        small_end = small_ends[offset]
        large_end = large_ends[offset]
        segments.append(Segment(small_start, small_end, large_start, large_end))
        small_start, large_start = small_end, large_end
    return segments


def _ends(lengths: Sequence[int]) -> dict[int, int]:
    """Byte offset after each token -> how many tokens end at or before it."""
    ends, offset = {}, 0
    for count, length in enumerate(lengths, 1):
        offset += length
        ends[offset] = count
    return ends


@dataclass(frozen=True)
class SegmentVerdict:
    """How much of the draft passed: in drafts, in Generalist tokens, and each tested segment's ratio
    ``P_L / (alpha^n P_S0)`` (the refused one last, when there is one)."""

    small_accepted: int
    large_accepted: int
    ratios: tuple[float, ...]


def segment_test(
    large_log_probs: torch.Tensor,
    generic_log_probs: torch.Tensor,
    segments: Sequence[Segment],
    alpha: float,
    uniform: Callable[[], float] | None = None,
) -> SegmentVerdict:
    """The cross-tokenizer ratio rule (module docstring). ``large_log_probs`` ``[m]``: log p_L of each
    Generalist token of the draft; ``generic_log_probs`` ``[k]``: log p_S0 of each draft. ``uniform``
    draws U(0, 1) for sampling mode; None is greedy. Log space, so alpha 0 and inf are exact."""
    log_alpha = math.log(alpha) if alpha > 0 else -math.inf
    large = large_log_probs.tolist()
    generic = generic_log_probs.tolist()
    ratios: list[float] = []
    for segment in segments:
        log_ratio = math.fsum(large[segment.large_start : segment.large_end]) - math.fsum(
            generic[segment.small_start : segment.small_end]
        )
        if alpha == 0:
            log_ratio = math.inf  # accept all, even where p_L is 0
        else:
            log_ratio -= segment.drafts * log_alpha
        ratios.append(math.inf if log_ratio > 700 else math.exp(log_ratio))
        threshold = 0.0 if uniform is None else math.log(max(uniform(), 1e-300))
        if not log_ratio >= threshold:
            return SegmentVerdict(segment.small_start, segment.large_start, tuple(ratios))
    last = segments[-1] if segments else Segment(0, 0, 0, 0)
    return SegmentVerdict(last.small_end, last.large_end, tuple(ratios))


def ratios_per_draft(segments: Sequence[Segment], ratios: Sequence[float]) -> list[float]:
    """Each tested draft gets its segment's ratio (the UI shows one per token)."""
    return [ratio for segment, ratio in zip(segments, ratios) for _ in range(segment.drafts)]


# --------------------------------------------------------------------------- recovery


def symbol_log_probs(rows: torch.Tensor, first_symbol: torch.Tensor) -> torch.Tensor:
    """``[..., V]`` logits -> ``[..., 257]`` log-probabilities of the next symbol (module docstring):
    each id's mass goes to its first byte (end ids to END), ids with no symbol are dropped, and the
    result is renormalised over the symbols. Computed as a scattered log-sum-exp, so that mass far
    below fp32's smallest normal still ranks."""
    log_p = torch.log_softmax(rows.float(), -1)
    keep = first_symbol >= 0
    index = first_symbol[keep].expand(*log_p.shape[:-1], -1)
    kept = log_p[..., keep]
    peak = torch.full((*log_p.shape[:-1], SYMBOLS), -math.inf).scatter_reduce(-1, index, kept, "amax")
    safe_peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    mass = torch.zeros_like(peak).scatter_add(-1, index, torch.exp(kept - safe_peak.gather(-1, index)))
    return torch.log_softmax(torch.log(mass) + safe_peak, -1)


def public_symbol_values(
    large_row: torch.Tensor,
    large_vocab: ByteVocabulary,
    generic_row: torch.Tensor | None,
    small_vocab: ByteVocabulary,
    beta: float,
    top_k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Cloud's share of the steered symbol logits, ``M_L - beta M_S0``, on the ``top_k`` symbols
    the Generalist finds likeliest (``top_k <= 0``: all 257). Returns (symbols [m], values [m])."""
    large = symbol_log_probs(large_row, large_vocab.first_symbol)
    # Only symbols the Specialist can complete into a token of its own (all 257 where it spells every byte).
    started = small_vocab.started_symbols
    if top_k <= 0 or top_k >= int(started.sum()):
        symbols = started.nonzero()[:, 0]
    else:
        symbols = large.masked_fill(~started, -math.inf).topk(top_k).indices
    values = large[symbols]
    if beta and generic_row is not None:
        values = values - beta * symbol_log_probs(generic_row, small_vocab.first_symbol)[symbols]
    return symbols, values


def choose_symbol(
    symbols: torch.Tensor,
    public_values: torch.Tensor,
    private_row: torch.Tensor | None,
    small_vocab: ByteVocabulary,
    beta: float,
    choose: Callable[[torch.Tensor], int],
) -> int:
    """The Edge's half of recovery: add ``beta M_S+`` to the Cloud's values and choose a symbol
    (``choose`` is the sampler's: argmax, or a draw at its temperature)."""
    steered = public_values
    if beta and private_row is not None:
        steered = public_values + beta * symbol_log_probs(private_row, small_vocab.first_symbol)[symbols]
    # A Cloud may name symbols no Specialist token starts with; they cannot be completed.
    steered = steered.masked_fill(~small_vocab.started_symbols[symbols], -math.inf)
    return int(symbols[choose(steered)])


def complete_symbol(
    symbol: int, private_row: torch.Tensor, vocabulary: ByteVocabulary, choose: Callable[[torch.Tensor], int]
) -> int:
    """The Specialist's token for a chosen symbol: among the ids whose text starts with ``symbol``
    (the end ids for END), the one ``choose`` picks from the private row (argmax, or a draw)."""
    first = vocabulary.first_symbol[: private_row.numel()]
    candidates = (first == symbol).nonzero()[:, 0]
    if candidates.numel() == 0:
        return vocabulary.symbol_id(symbol)
    return int(candidates[choose(private_row[candidates])])


# --------------------------------------------------------------------------- a pair's two vocabularies


@dataclass(frozen=True, eq=False)
class CrossVocabularies:
    """The Specialist's and the Generalist's vocabularies of one cross-tokenizer pair."""

    small: ByteVocabulary
    large: ByteVocabulary

    def transfer(self, small_ids: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """The Generalist's ids for the text ``small_ids`` spell, with the span (bytes, END counting
        one) of each id on both sides: (large ids, small spans, large spans)."""
        data, ended = self.small.spell(list(small_ids))
        large_ids = self.large.encode(data) + ([self.large.end_id] if ended else [])
        return large_ids, span_lengths(self.small, small_ids), span_lengths(self.large, large_ids)

    def draft_segments(self, drafts: Sequence[int]) -> tuple[list[int], list[Segment]]:
        """A round's drafts as the Cloud tests them: the Generalist's ids for their text, and the
        segments (:func:`aligned_segments`). The Edge calls it too, to show each draft's segment."""
        large_ids, small_spans, large_spans = self.transfer(drafts)
        return large_ids, (aligned_segments(small_spans, large_spans) if drafts else [])
