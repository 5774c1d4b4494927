"""Tiny random models and a byte-level tokenizer for fast tests: no network, built in milliseconds.

The tokenizer maps every byte to its own id (0–255), so a multi-byte UTF-8 character spans several
tokens, the way it does with real byte-level BPE vocabularies. Its special tokens and chat template
follow Qwen's, so prompt building and end-of-turn handling are exercised as with the real models.
Two variants stand in for the hub families whose chat formats the registry sets
(specsteer.models.chat): ``tiny_qwen3_tokenizer`` (a template that leaves the reply to think unless
``enable_thinking`` is false) and ``tiny_llama3_tokenizer`` (turns end with ``<|eot_id|>``, eos is
``<|end_of_text|>``).

The models are random Qwen2ForCausalLM with a few deliberate properties:

* weights depend only on (seed, parameter name), so equal seeds give identical models even when
  their padded vocabulary sizes differ;
* output rows past the tokenizer's size (padding, as real checkpoints have) score far below every
  real token, like the untrained padding rows of a trained model;
* hidden dimension 0 carries a constant that no layer writes to, which gives the output layer a
  per-token bias: ``eos_bias`` uses it to make ``<|im_end|>`` likelier;
* output weights are scaled so that logits spread over a few units: greedy choices differ from
  position to position, and sampling at temperature 1 is neither uniform nor one-hot.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence

import torch

from specsteer.models.chat import CHATML_CHAT
from specsteer.models.pair import LoadedPair, assemble_pair

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ENDOFTEXT_ID, IM_START_ID, IM_END_ID = 256, 257, 258
TOKENIZER_SIZE = 259

_CHATML_TURNS = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
)
CHAT_TEMPLATE = _CHATML_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
# As Qwen3's template does: by default the reply is left to open a thinking block; with
# enable_thinking=False the prompt closes an empty one, so the reply is the answer itself.
QWEN3_CHAT_TEMPLATE = _CHATML_TURNS + (
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

# Llama 3's turn layout. <|eot_id|> takes the id of Qwen's <|im_end|>, so tiny_model's eos_bias
# favours it; the tokenizer's eos is <|end_of_text|>, as in Llama 3's base tokenizer.
LLAMA3_SPECIAL_TOKENS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
)
BEGIN_OF_TEXT_ID, END_OF_TEXT_ID, EOT_ID = 256, 257, 258
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

_EMBED_STD = 1.0  # residual stream of unit scale, comparable to the constant channel
_LAYER_STD = 0.15  # large enough that attention is not uniform, so outputs depend on the context
_LM_HEAD_STD = 0.25  # logits of std ~2 over hidden states of unit RMS
_PADDING_LOGIT = -30.0  # via the constant channel: padded ids never win, even when sampling


def tiny_tokenizer():
    """A byte-level tokenizer (ids 0–255 are bytes) with Qwen's special tokens and a chat template."""
    return _byte_level_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def tiny_qwen3_tokenizer():
    """tiny_tokenizer() with a Qwen3-style template that honours ``enable_thinking``."""
    return _byte_level_tokenizer(SPECIAL_TOKENS, QWEN3_CHAT_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def tiny_llama3_tokenizer():
    """A byte-level tokenizer with Llama 3's special tokens and turn layout (ids 256–260)."""
    return _byte_level_tokenizer(
        LLAMA3_SPECIAL_TOKENS, LLAMA3_CHAT_TEMPLATE, eos_token="<|end_of_text|>", bos_token="<|begin_of_text|>"
    )


# The text a merged-pairs tokenizer learns its merges from: English with the spaces and punctuation
# the tests' prompts use, so its merges fire on them.
MERGE_TEXT = (
    "Write about the weather and the sea. I love long walks, strong coffee and quiet mornings. "
    "History: the user writes short reviews of the things they read, and the topic of the day. "
) * 3
MERGED_TOKENIZER_MERGES = 48


def tiny_merged_tokenizer(merges: int = MERGED_TOKENIZER_MERGES, text: str = MERGE_TEXT):
    """A byte-level BPE tokenizer with ``merges`` pair merges learned from ``text``: the same 256 byte
    ids and special tokens (256–258) as tiny_tokenizer(), then one id per merged pair (259 on), so the
    same text tokenizes into fewer, different ids — a second tokenizer for cross-tokenizer tests."""
    return _byte_level_tokenizer(
        SPECIAL_TOKENS,
        CHAT_TEMPLATE,
        merges=learn_merges(text, merges),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def learn_merges(text: str, count: int) -> list[tuple[str, str]]:
    """Byte-pair merges as BPE learns them: repeatedly join the most frequent adjacent pair (the first
    seen wins a tie), in the byte-level stand-in spelling."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    spelling = bytes_to_unicode()
    symbols = [spelling[b] for b in text.encode("utf-8")]
    merges: list[tuple[str, str]] = []
    for _ in range(count):
        counts: dict[tuple[str, str], int] = {}
        for pair in zip(symbols, symbols[1:]):
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(
            counts, key=lambda pair: counts[pair]
        )  # dicts keep first-seen order, and max keeps the first maximum
        merges.append(best)
        joined, index = [], 0
        while index < len(symbols):
            if index + 1 < len(symbols) and (symbols[index], symbols[index + 1]) == best:
                joined.append(best[0] + best[1])
                index += 2
            else:
                joined.append(symbols[index])
                index += 1
        symbols = joined
    return merges


def _byte_level_tokenizer(special_tokens, chat_template: str, merges: Sequence[tuple[str, str]] = (), **roles: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    # bytes_to_unicode is the byte -> printable stand-in table that the ByteLevel steps use.
    vocab = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    # The special tokens keep ids 256.. whatever the merges; each merge's token comes after them.
    for index, token in enumerate(special_tokens):
        vocab[token] = 256 + index
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    # BPE with no merges: every byte stays its own token.
    core = Tokenizer(models.BPE(vocab=vocab, merges=list(merges)))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(special_tokens))
    return PreTrainedTokenizerFast(tokenizer_object=core, chat_template=chat_template, **roles)


def tiny_model(
    seed: int,
    vocab_size: int = 320,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    eos_bias: float = 0.0,
    tokenizer_size: int = TOKENIZER_SIZE,
    quiet_ids: tuple[int, ...] = (),
):
    """A random fp32 Qwen2ForCausalLM in eval mode whose output layer has ``vocab_size`` rows, of which
    the first ``tokenizer_size`` are real tokens (the rest padding). ``quiet_ids`` score as low as
    padding, as a trained chat model scores ``<|im_start|>`` inside its reply."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if vocab_size < tokenizer_size:
        raise ValueError(f"vocab_size must be at least the tokenizer's {tokenizer_size}")
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=IM_END_ID,
        pad_token_id=ENDOFTEXT_ID,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(_initial_value(seed, name, parameter.shape, tokenizer_size))
        _install_constant_channel(model, eos_bias, tokenizer_size)
        model.lm_head.weight[list(quiet_ids), 0] = _PADDING_LOGIT
    return model.float().eval()


def _initial_value(seed: int, name: str, shape: torch.Size, tokenizer_size: int = TOKENIZER_SIZE) -> torch.Tensor:
    """Deterministic per (seed, name); embedding rows are drawn per token so padding does not shift them."""
    if "norm" in name:
        return torch.ones(shape)
    if name.endswith("bias"):
        return torch.zeros(shape)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    if "embed_tokens" in name or "lm_head" in name:
        std = _EMBED_STD if "embed_tokens" in name else _LM_HEAD_STD
        rows = torch.zeros(shape)
        rows[:tokenizer_size] = torch.randn((tokenizer_size, shape[1]), generator=generator) * std
        return rows
    return torch.randn(shape, generator=generator) * _LAYER_STD


def _install_constant_channel(model, eos_bias: float, tokenizer_size: int = TOKENIZER_SIZE) -> None:
    """Hidden dimension 0 holds 1.0 in every embedding and no layer writes to it, so after the final
    norm it is a positive constant-like input: the output layer's column 0 acts as a per-token bias."""
    model.model.embed_tokens.weight[:, 0] = 1.0
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[0, :] = 0.0
        layer.mlp.down_proj.weight[0, :] = 0.0
    _calibrate_constant_channel(model)
    head = model.lm_head.weight
    head[:, 0] = 0.0
    head[IM_END_ID, 0] = eos_bias
    head[tokenizer_size:, 0] = _PADDING_LOGIT


def _calibrate_constant_channel(model) -> None:
    """Scale the final norm on dimension 0 so the channel reaches the output layer at about 1.0.

    The final RMS norm divides it by the residual stream's size, which the layers grow; without this
    the bias it carries would be several times weaker than asked for.
    """
    every_byte = torch.arange(256).unsqueeze(0)
    normalized = model.model(every_byte).last_hidden_state
    model.model.norm.weight[0] /= normalized[0, :, 0].mean()


TEST_PAIRING_ID = "tiny-test"  # the tiny pair's id, which the test hooks accept (the evaluate CLI, the app)


def tiny_pair(
    seed: int = 0,
    generalist_seed: int = 1,
    specialist_vocab: int = 320,
    generalist_vocab: int = 352,
    dtype: torch.dtype = torch.float32,
    eos_bias: float = 0.0,
    quiet_ids: tuple[int, ...] = (),
    device: str | torch.device = "cpu",
) -> LoadedPair:
    """Two tiny models sharing tiny_tokenizer(); different seeds give different models (``quiet_ids``:
    see tiny_model). Built on the CPU, then moved to ``device`` in ``dtype`` (the same weights everywhere).

    By default both output layers are padded past the tokenizer's 259 ids, to different sizes (320
    and 352), as with real pairs such as Qwen2.5 1.5B/32B: ``vocab_size`` is the smaller one, and
    code that slices logits by a model's own size instead of ``pair.vocab_size`` fails loudly.
    """
    specialist = tiny_model(seed, specialist_vocab, eos_bias=eos_bias, quiet_ids=quiet_ids).to(device, dtype)
    generalist = tiny_model(generalist_seed, generalist_vocab, eos_bias=eos_bias, quiet_ids=quiet_ids)
    generalist = generalist.to(device, dtype)
    # Its own id is the one the hooks name it by, so a Cloud serving it (``cloud --pairing tiny-test``)
    # and an Edge that chose it agree on what they run.
    return assemble_pair(TEST_PAIRING_ID, specialist, generalist, tiny_tokenizer(), CHATML_CHAT)


CROSS_PAIRING_ID = "tiny-cross-test"
# A chat model's reply neither opens a turn nor ends with the base model's end of text: with these quiet,
# <|im_end|> is the one end id that matters, and every likely id spells text (what the common byte
# space can carry), so cross-tokenizer runs can be compared token for token with same-tokenizer ones.
CHAT_QUIET_IDS = (ENDOFTEXT_ID, IM_START_ID)


def tiny_cross_pair(
    seed: int = 0,
    generalist_seed: int = 1,
    specialist_tokenizer=None,
    generalist_tokenizer=None,
    specialist_vocab: int = 320,
    generalist_vocab: int = 352,
    eos_bias: float = 0.0,
    quiet_ids: tuple[int, ...] = CHAT_QUIET_IDS,
) -> LoadedPair:
    """Two tiny models with different tokenizers: by default the Specialist reads tiny_tokenizer()
    (one id per byte) and the Generalist tiny_merged_tokenizer() (merged pairs over the same bytes)."""
    from specsteer.models.pair import assemble_cross_pair

    small_tokenizer = specialist_tokenizer or tiny_tokenizer()
    large_tokenizer = generalist_tokenizer or tiny_merged_tokenizer()
    specialist = tiny_model(
        seed, specialist_vocab, eos_bias=eos_bias, tokenizer_size=len(small_tokenizer), quiet_ids=quiet_ids
    )
    generalist = tiny_model(
        generalist_seed, generalist_vocab, eos_bias=eos_bias, tokenizer_size=len(large_tokenizer), quiet_ids=quiet_ids
    )
    return assemble_cross_pair(
        CROSS_PAIRING_ID, specialist, generalist, small_tokenizer, large_tokenizer, CHATML_CHAT, CHATML_CHAT
    )


def narrow_cross_pair() -> LoadedPair:
    """tiny_cross_pair() whose models say little but "the a" (every other byte quiet): the Specialist's
    byte drafts then often spell what the merged-pairs Generalist reads as one token, so the segments
    the cross test decides on span several drafts (tests of how they are shown)."""
    keep = {ord(c) for c in "the a"} | {IM_END_ID}
    return tiny_cross_pair(quiet_ids=tuple(i for i in range(TOKENIZER_SIZE) if i not in keep))


def write_tiny_gguf(path, seed: int, vocab_size: int = 320, eos_bias: float = 0.0, **model_options):
    """Write ``tiny_model(seed, vocab_size, eos_bias=eos_bias, **model_options)`` as an unquantized (fp32) qwen2
    GGUF, in the layout llama.cpp reads and with tiny_tokenizer()'s vocabulary (ids past it are padding
    names: llama.cpp reads ids, and the tests tokenize with their own tokenizer); return the transformers
    model. The same weights then run on both runtimes, which is what the runtime contract tests compare."""
    import gguf
    import numpy as np
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    model = tiny_model(seed, vocab_size, eos_bias=eos_bias, **model_options)
    config = model.config
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    spelling = bytes_to_unicode()
    padding = [f"[PAD{i}]" for i in range(TOKENIZER_SIZE, vocab_size)]  # as real Qwen GGUFs pad
    # llama.cpp refuses a byte-level BPE vocabulary without merges, so there is one, of the bytes 0x00
    # 0x01 (never adjacent in text), into the first padding id: no text tokenizes differently.
    merge = None
    if padding:
        merge = f"{spelling[0]} {spelling[1]}"
        padding[0] = spelling[0] + spelling[1]
    tokens = [spelling[b] for b in range(256)] + list(SPECIAL_TOKENS) + padding
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 256 + [3] * len(SPECIAL_TOKENS) + [1] * len(padding))  # 3 marks control tokens
    writer.add_token_scores([0.0] * len(tokens))
    if merge:
        writer.add_token_merges([merge])
    writer.add_eos_token_id(IM_END_ID)
    writer.add_pad_token_id(ENDOFTEXT_ID)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in model.state_dict().items():
        writer.add_tensor(_gguf_tensor_name(name), tensor.numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def _gguf_tensor_name(name: str) -> str:
    top = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if name in top:
        return top[name]
    block = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    _, _, index, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{index}.{block[module]}.{kind}"


# The pairing ids the test hooks (the evaluate and cloud CLIs, the bench, the app) accept, and what builds each.
VLLM_PAIRING_ID = "tiny-vllm-test"


def tiny_vllm_pair() -> LoadedPair:
    """A tiny pair a serving engine can load (``specsteer.cloud.vllm``): as :func:`tiny_pair`, but two heads
    of 32 dimensions per layer, since vLLM's CPU attention takes no head of fewer than 32 (tiny_pair's are 16)."""
    specialist = tiny_model(0, 320, heads=2, kv_heads=1)
    generalist = tiny_model(1, 352, heads=2, kv_heads=1)
    return assemble_pair(VLLM_PAIRING_ID, specialist, generalist, tiny_tokenizer(), CHATML_CHAT)


TEST_PAIRS: dict[str, Callable[[], LoadedPair]] = {
    TEST_PAIRING_ID: tiny_pair,
    CROSS_PAIRING_ID: tiny_cross_pair,
    VLLM_PAIRING_ID: tiny_vllm_pair,
}
_shared_lock = threading.Lock()
_shared: dict[str, LoadedPair] = {}


def shared_test_pair(pairing_id: str) -> LoadedPair | None:
    """One process-wide pair per test pairing id, built on first use; None for any other id."""
    build = TEST_PAIRS.get(pairing_id)
    if build is None:
        return None
    with _shared_lock:
        if pairing_id not in _shared:
            _shared[pairing_id] = build()
        return _shared[pairing_id]


def shared_tiny_pair(pairing_id: str = TEST_PAIRING_ID) -> LoadedPair:
    """One process-wide ``tiny_pair()`` (or the other test pair ``pairing_id`` names) for the test hooks,
    built on first use."""
    pair = shared_test_pair(pairing_id)
    if pair is None:
        raise ValueError(f"{pairing_id!r} is not a test pairing ({', '.join(TEST_PAIRS)})")
    return pair
