"""A loaded pair: the Specialist's and the Generalist's runtimes and what they share (tokenizer, vocabulary,
end ids), assembled from loaded models and checked to agree; for a cross-tokenizer pairing
(``specsteer.method.crosstok``) each side keeps its own (:class:`GeneralistTokens`). Loading them is
``specsteer.models.loading``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from specsteer.models.chat import PLAIN_CHAT, ChatFormat
from specsteer.models.lora import SpecialistLora
from specsteer.models.runtime_plan import HANDOFF_LABEL, RuntimePlan
from specsteer.models.weights import ModelLoadError
from specsteer.runtimes import llamacpp
from specsteer.runtimes.attention import use_packed_gqa
from specsteer.runtimes.base import ModelRuntime, TransformersModel
from specsteer.runtimes.prompt_handoff import HANDOFF_MIN_TOKENS

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True, eq=False)
class GeneralistTokens:
    """What a cross-tokenizer pair adds (``specsteer.method.crosstok``): the Generalist's own tokenizer, chat
    format, output rows and end ids, and both vocabularies as the common byte space sees them."""

    tokenizer: PreTrainedTokenizerBase
    chat: ChatFormat
    vocab_size: int
    eos_token_ids: frozenset[int]
    vocabularies: Any  # crosstok.CrossVocabularies


@dataclass
class LoadedPair:
    """Two loaded models and the tokenizer they share (the Specialist's; the Generalist's was checked
    to have the same vocabulary and special tokens). The Specialist (and the generic copy, which is the
    same model) runs on one runtime; the Generalist on the same one or, in a split plan
    (specsteer.models.runtime_plan), on another whose token ids were checked to agree.

    ``chat`` is how every prompt of the pair is rendered (engine.chat_ids): the Specialist's
    registry format joined with the Generalist's (ChatFormat.joined); its end tokens are in
    ``eos_token_ids`` already."""

    pairing_id: str
    specialist: ModelRuntime
    generalist: ModelRuntime | None  # None: loaded for an Edge whose Cloud runs elsewhere
    tokenizer: PreTrainedTokenizerBase  # shared (compatibility checked at load)
    vocab_size: int  # ids usable by both models (min of padded sizes, >= len(tokenizer))
    eos_token_ids: frozenset[int]
    chat: ChatFormat = PLAIN_CHAT
    runtime_choice: str = ""  # why this runtime runs the request (the plan's reason), for its statistics
    runtime_plan: RuntimePlan | None = None  # each stream's runtime and why (the latest request's); None: built by hand
    # Set on a cross-tokenizer pair: then ``tokenizer``, ``vocab_size``, ``eos_token_ids`` and ``chat``
    # are the Specialist's, and this holds the Generalist's side.
    cross: GeneralistTokens | None = None
    # A LoRA Specialist (specsteer.models.lora, :func:`with_specialist_lora`): ``specialist`` is then the
    # Edge's copy with the adapter merged in, and ``generic_specialist`` the base model the Cloud's generic
    # copy runs (:meth:`cloud_side`). The adapter never leaves the Edge.
    lora: SpecialistLora | None = None
    generic_specialist: ModelRuntime | None = None

    @property
    def runtime(self) -> str:
        """The runtime's name, or "Specialist's/Generalist's" ("transformers/llama.cpp") when they differ."""
        large = self.generalist
        if large is None or large.runtime == self.specialist.runtime:
            return self.specialist.runtime
        return f"{self.specialist.runtime}/{large.runtime}"

    @property
    def runtime_label(self) -> str:
        """:attr:`runtime`, with "+handoff" where the Specialist's long prompts are read by another runtime
        (benchmarks tell the two llama.cpp pairs apart by it)."""
        return self.runtime + (HANDOFF_LABEL if getattr(self.specialist, "prompt_reader", None) else "")

    def stream_runtimes(self) -> dict[str, str]:
        """Each stream's runtime and precision, by the stream names of the forward log: the Specialist with
        the history ("specialist+"), its generic copy ("specialist0": the same model) and the Generalist."""
        small = f"{self.specialist.runtime} {self.specialist.precision}"
        reader = getattr(self.specialist, "prompt_reader", None)
        if reader is not None:  # both streams share the model, so both hand their long prompts over
            small += f", prompts of {HANDOFF_MIN_TOKENS}+ tokens read by {reader.runtime} {reader.precision}"
        streams = {"specialist+": small, "specialist0": small}
        if self.generalist is not None:
            streams["generalist"] = f"{self.generalist.runtime} {self.generalist.precision}"
        return streams

    def cloud_side(self) -> LoadedPair:
        """The pair a Cloud serves: the base Specialist as its generic copy, never the Edge's adapter."""
        if self.generic_specialist is None:
            return self
        return replace(self, specialist=self.generic_specialist, generic_specialist=None, lora=None)

    def clear_prefix_caches(self) -> None:
        """Forget every idle cached prompt of both models (benchmarks time prompt processing)."""
        for model in (self.specialist, self.generalist, self.generic_specialist):
            if model is not None:
                model.prefix_cache.clear()

    @property
    def precision(self) -> str:
        """What the weights compute in ("fp32", "bf16", "Q4_K_M"); "a / b" when the two differ."""
        small = self.specialist.precision
        large = self.generalist.precision if self.generalist is not None else small
        return small if small == large else f"{small} / {large}"


def check_tokenizers_match(
    specialist: PreTrainedTokenizerBase, generalist: PreTrainedTokenizerBase, pairing_id: str
) -> None:
    """Refuse a pair whose tokenizers differ: verification compares probabilities id by id."""
    small_vocab, large_vocab = specialist.get_vocab(), generalist.get_vocab()
    if small_vocab != large_vocab:
        differing = sorted(set(small_vocab.items()) ^ set(large_vocab.items()), key=lambda item: item[1])[:3]
        raise ModelLoadError(
            f"pairing {pairing_id!r}: the Specialist's and the Generalist's tokenizers differ "
            f"({len(small_vocab)} vs {len(large_vocab)} tokens; e.g. {differing}). Cross-tokenizer pairings "
            "are not supported yet: SpecSteer's verification compares p_L(y) with p_S0(y) for the same "
            "token id y, so both models must share one vocabulary."
        )
    small_special, large_special = _special_tokens(specialist), _special_tokens(generalist)
    if small_special != large_special:
        marked = sorted(set(small_special.items()) ^ set(large_special.items()))[:3]
        raise ModelLoadError(
            f"pairing {pairing_id!r}: the two tokenizers mark different special tokens (e.g. {marked}); "
            "cross-tokenizer pairings are not supported yet."
        )


def _special_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[int, str]:
    # Which roles (eos, pad) the special tokens play may differ between base and chat models of one
    # family; that is harmless because the end ids of both are merged. The table itself must agree.
    return {index: token.content for index, token in tokenizer.added_tokens_decoder.items() if token.special}


def shared_vocab_size(
    specialist: ModelRuntime, generalist: ModelRuntime | None, tokenizer: PreTrainedTokenizerBase
) -> int:
    """Ids both output layers have; padded rows beyond len(tokenizer) are allowed, too few rows are not.
    Without the Generalist (an Edge alone) the Specialist's; the Cloud's vocabulary then caps it."""
    size = min(model.output_rows for model in (specialist, generalist) if model is not None)
    if size < len(tokenizer):
        raise ModelLoadError(f"a model's output layer has {size} rows but the tokenizer has {len(tokenizer)} tokens")
    return size


def end_token_ids(
    tokenizer: PreTrainedTokenizerBase, models: Iterable[ModelRuntime], vocab_size: int, end_tokens: Iterable[str] = ()
) -> frozenset[int]:
    """Every id that ends a generation: the tokenizer's eos, the models' own end ids (generation
    config, or the GGUF's eos / eot), and the registry's ``end_tokens`` (ChatFormat.end_tokens, e.g.
    Llama 3's <|eot_id|>) that the vocabulary has."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    for model in models:
        ids.update(model.end_token_ids)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[token] for token in end_tokens if token in vocab)
    return frozenset(i for i in ids if 0 <= i < vocab_size)


def assemble_pair(
    pairing_id: str,
    specialist: ModelRuntime | PreTrainedModel,
    generalist: ModelRuntime | PreTrainedModel | None,
    tokenizer: PreTrainedTokenizerBase,
    chat: ChatFormat = PLAIN_CHAT,
) -> LoadedPair:
    """A LoadedPair from two loaded models that share ``tokenizer`` and render prompts with ``chat``
    (also used by specsteer.models.tiny).

    A transformers model may be given as is; it is wrapped in a TransformersModel. ``generalist``
    None: the Specialist alone, for an Edge whose Cloud runs elsewhere.
    """
    small = as_runtime(specialist)
    large = as_runtime(generalist) if generalist is not None else None
    if large is not None and small.runtime != large.runtime:
        check_split_vocabulary(pairing_id, (small, large), tokenizer)
    models = tuple(model for model in (small, large) if model is not None)
    for runtime in models:
        if isinstance(runtime, TransformersModel):
            use_packed_gqa(runtime.model)
    vocab_size = shared_vocab_size(small, large, tokenizer)
    return LoadedPair(
        pairing_id=pairing_id,
        specialist=small,
        generalist=large,
        tokenizer=tokenizer,
        vocab_size=vocab_size,
        eos_token_ids=end_token_ids(tokenizer, models, vocab_size, chat.end_tokens),
        chat=chat,
    )


def assemble_cross_pair(
    pairing_id: str,
    specialist: ModelRuntime | PreTrainedModel,
    generalist: ModelRuntime | PreTrainedModel | None,
    specialist_tokenizer: PreTrainedTokenizerBase,
    generalist_tokenizer: PreTrainedTokenizerBase,
    specialist_chat: ChatFormat = PLAIN_CHAT,
    generalist_chat: ChatFormat = PLAIN_CHAT,
) -> LoadedPair:
    """A LoadedPair of two models with different tokenizers (cross-tokenizer SpecSteer).

    Each side keeps its own tokenizer, chat format and end ids; ``generalist`` None loads the Edge
    alone (its Generalist tokenizer still renders the plain prompt it sends). Raises ModelLoadError
    when the Generalist's tokenizer cannot spell every byte (it re-encodes whatever the Specialist drafts)."""
    from specsteer.method.crosstok import ByteVocabulary, CrossVocabularies

    small = as_runtime(specialist)
    large = as_runtime(generalist) if generalist is not None else None
    if large is not None and small.runtime != large.runtime:
        raise ModelLoadError(
            f"pairing {pairing_id!r}: both models must run on one runtime ({small.runtime} and {large.runtime} given)"
        )
    for runtime in (small, large):
        if isinstance(runtime, TransformersModel):
            use_packed_gqa(runtime.model)
    small_vocab = shared_vocab_size(small, None, specialist_tokenizer)
    small_stops = end_token_ids(specialist_tokenizer, (small,), small_vocab, specialist_chat.end_tokens)
    # An Edge alone does not have the Generalist's rows; it needs only the Generalist's tokenizer.
    large_vocab = (
        shared_vocab_size(large, None, generalist_tokenizer) if large is not None else len(generalist_tokenizer)
    )
    large_stops = end_token_ids(
        generalist_tokenizer, (large,) if large is not None else (), large_vocab, generalist_chat.end_tokens
    )
    try:
        # The Generalist re-encodes any text the Specialist drafts, so it alone must spell every byte.
        vocabularies = CrossVocabularies(
            ByteVocabulary.of(specialist_tokenizer, small_vocab, small_stops, every_byte=False),
            ByteVocabulary.of(generalist_tokenizer, large_vocab, large_stops),
        )
    except ValueError as error:
        raise ModelLoadError(f"pairing {pairing_id!r}: {error}") from error
    return LoadedPair(
        pairing_id=pairing_id,
        specialist=small,
        generalist=large,
        tokenizer=specialist_tokenizer,
        vocab_size=small_vocab,
        eos_token_ids=small_stops,
        chat=specialist_chat,
        cross=GeneralistTokens(generalist_tokenizer, generalist_chat, large_vocab, large_stops, vocabularies),
    )


def cross_tokenizer_view(pair: LoadedPair) -> LoadedPair:
    """The same two models driven through the cross-tokenizer path, each side with its own copy of
    the one tokenizer: what the byte-space machinery costs, measured against the same-tokenizer method
    on one pair (benchmarks). Any runtime: the path needs only each model's logits."""
    if pair.cross is not None:
        return pair
    return assemble_cross_pair(
        f"{pair.pairing_id}+cross-path",
        pair.specialist,
        pair.generalist,
        pair.tokenizer,
        pair.tokenizer,
        pair.chat,
        pair.chat,
    )


class SplitVocabularyError(ModelLoadError):
    """A split plan's runtimes would not read the same token ids the same way."""


def check_split_vocabulary(pairing_id: str, models: Iterable[ModelRuntime], tokenizer: PreTrainedTokenizerBase) -> None:
    """Refuse two runtimes whose token ids disagree: every id the shared (transformers) tokenizer spells must
    be the same token in each GGUF's own vocabulary, or the Generalist would verify other tokens than
    drafted. Transformers models read the tokenizer's ids as they are; a GGUF carries its vocabulary."""
    expected = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    for model in models:
        if not isinstance(model, llamacpp.LlamaCppModel):
            continue
        own = model.token_texts()
        differing = [
            (index, want, own[index] if index < len(own) else None)
            for index, want in enumerate(expected)
            if index >= len(own) or own[index] != want
        ]
        if differing:
            raise SplitVocabularyError(
                f"pairing {pairing_id!r}: {model.name}'s GGUF vocabulary and the tokenizer disagree on "
                f"{len(differing)} of {len(expected)} ids (e.g. id, tokenizer, GGUF: {differing[:3]}), so its "
                "stream cannot run on llama.cpp beside a transformers stream"
            )


def as_runtime(model: ModelRuntime | PreTrainedModel) -> ModelRuntime:
    return model if isinstance(model, ModelRuntime) else TransformersModel(model)
