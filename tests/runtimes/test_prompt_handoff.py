"""A long prompt read by transformers and handed to llama.cpp as a sequence state (runtimes.prompt_handoff)."""

from __future__ import annotations

import struct

import pytest
import torch

from conftest import require_llamacpp
from specsteer.models.tiny import tiny_model, write_tiny_gguf
from specsteer.runtimes.base import TransformersModel
from specsteer.runtimes.prompt_handoff import (
    HANDOFF_MIN_TOKENS,
    HandoffUnsupported,
    StateLayout,
    read_layout,
    sequence_state,
    state_size,
)

# llama.cpp's f16 cache against transformers' fp32 one on the tiny fp32 model: within the runtime tests' bound.
TOLERANCE = 5e-3


class CountingReader(TransformersModel):
    """The tiny transformers model, counting the prompts it reads."""

    reads = 0

    def new_sequence(self, capacity: int):
        type(self).reads += 1
        return super().new_sequence(capacity)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    require_llamacpp()
    from specsteer.runtimes.llamacpp import LlamaCppModel

    path = tmp_path_factory.mktemp("handoff") / "tiny-0.gguf"
    write_tiny_gguf(path, 0)
    plain = LlamaCppModel(path, name="tiny-0", threads=1)
    handed = LlamaCppModel(path, name="tiny-0", threads=1)
    handed.attach_prompt_reader(CountingReader(tiny_model(0), "tiny-0 fp32"))
    return plain, handed


def _rows(model, prompt: list[int], continuation: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    sequence = model.new_sequence(len(prompt) + len(continuation) + 8)
    try:
        first = sequence.extend(prompt, 2)
        after = sequence.extend(continuation, len(continuation))
        assert sequence.tokens == prompt + continuation
    finally:
        sequence.close()
    return first, after


def test_a_handed_over_prompt_decodes_as_if_llama_cpp_had_read_it(models):
    plain, handed = models
    prompt = [(7 * i + 3) % 300 + 10 for i in range(HANDOFF_MIN_TOKENS + 45)]
    continuation = [11, 42, 99, 7, 250]
    before = CountingReader.reads
    expected_first, expected_after = _rows(plain, prompt, continuation)
    first, after = _rows(handed, prompt, continuation)
    assert CountingReader.reads == before + 1  # the reader read the prompt, llama.cpp the rest
    assert (first - expected_first).abs().max() < TOLERANCE
    # The rows llama.cpp computed over the handed-over cache: attention over every prompt position.
    assert (after - expected_after).abs().max() < TOLERANCE
    assert torch.equal(after.argmax(-1), expected_after.argmax(-1))


def test_short_prompts_and_started_sequences_stay_with_llama_cpp(models):
    _, handed = models
    before = CountingReader.reads
    sequence = handed.new_sequence(2 * HANDOFF_MIN_TOKENS + 64)
    sequence.extend(list(range(10, 10 + HANDOFF_MIN_TOKENS - 1)), 1)  # one short of the hand-off
    sequence.extend(list(range(20, 20 + HANDOFF_MIN_TOKENS)), 1)  # long, but the sequence has begun
    sequence.close()
    assert CountingReader.reads == before


def test_a_state_in_another_layout_is_refused_before_anything_is_written():
    layout = StateLayout(v_trans=True, n_layer=2, k_row_bytes=8)
    keys = [torch.randn(3, 4).numpy() for _ in range(2)]
    state = sequence_state(keys, keys, layout)
    assert len(state) == state_size(layout, 3)
    one = sequence_state([k[:1] for k in keys], [k[:1] for k in keys], layout)
    assert read_layout(one) == layout
    with pytest.raises(HandoffUnsupported, match="magic"):
        read_layout(struct.pack("<I", 0x1234) + one[4:])
    with pytest.raises(HandoffUnsupported, match="not f16"):
        read_layout(one[:36] + struct.pack("<i", 8) + one[40:])  # q8_0 keys
    with pytest.raises(HandoffUnsupported, match="bytes"):
        read_layout(one + b"\0")
    with pytest.raises(HandoffUnsupported, match="layers"):
        sequence_state(keys[:1], keys[:1], layout)


@pytest.mark.integration
def test_the_real_specialist_decodes_a_handed_over_prompt_like_its_own_reading():
    """The offline 0.5B Specialist: llama.cpp Q4_K_M reading a retrieved-history prompt itself, against its fp32
    conversion reading it and handing it over. The weights are the same; llama.cpp's 4-bit products round
    activations, fp32 does not, so this is agreement, measured: every row within a logit, and a greedy
    choice that differs only where llama.cpp's own top two were nearly tied."""
    require_llamacpp()
    from specsteer.evaluation.bench import load_prompts
    from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS, package_problems
    from specsteer.models.weights import load_model, load_tokenizer, offline_gguf
    from specsteer.runtimes.llamacpp import LlamaCppModel

    spec = PAIRINGS[DEFAULT_PAIRING].specialist
    if package_problems(spec):
        pytest.skip("offline model packages not installed (scripts/install_models.sh)")
    tokenizer = load_tokenizer(spec)
    plain = LlamaCppModel(offline_gguf(spec), name=spec.name)
    handed = LlamaCppModel(offline_gguf(spec), name=spec.name)
    handed.attach_prompt_reader(TransformersModel(load_model(spec, torch.float32, None, "cpu"), "fp32"))
    (prepared,) = load_prompts(1, None, "review")
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prepared.prompts.private}], add_generation_prompt=True, tokenize=True
    )
    prompt = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert len(prompt) >= HANDOFF_MIN_TOKENS
    sequence = plain.new_sequence(len(prompt) + 32)
    greedy = [int(sequence.extend(prompt, 1)[-1].argmax())]
    while len(greedy) < 24:
        greedy.append(int(sequence.extend([greedy[-1]], 1)[-1].argmax()))
    sequence.close()
    expected_first, expected_after = _rows(plain, prompt, greedy[:-1])
    first, after = _rows(handed, prompt, greedy[:-1])
    expected, found = torch.cat([expected_first[-1:], expected_after]), torch.cat([first[-1:], after])
    assert (found - expected).abs().max() < 1.0
    top2 = expected.topk(2, -1).values
    flipped = found.argmax(-1) != expected.argmax(-1)
    assert bool(((top2[:, 0] - top2[:, 1])[flipped] < 0.1).all())
