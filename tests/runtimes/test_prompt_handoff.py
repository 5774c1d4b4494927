"""A long prompt read by transformers (fp32, or bf16 where the calibration proved it fast) and handed to llama.cpp
as a sequence state (runtimes.prompt_handoff)."""

from __future__ import annotations

import struct

import pytest
import torch
from models.test_runtime_plan import AVX512_BF16

from specsteer.models.loading import clear_loaded_pairs, load_planned
from specsteer.models.planning import Machine, runtime_plan
from specsteer.models.registry import ModelSpec, Pairing
from specsteer.models.tiny import tiny_model, write_tiny_gguf
from specsteer.runtimes.base import TransformersModel
from specsteer.runtimes.prompt_handoff import (
    HANDOFF_MIN_TOKENS,
    HandoffUnsupported,
    RowsOutOfRange,
    StateLayout,
    read_layout,
    sequence_state,
    state_size,
)
from testkit import prompt_rows, require_llamacpp

# llama.cpp's f16 cache against transformers' fp32 one on the tiny fp32 model: within the runtime tests' bound.
TOLERANCE = 5e-3
# A bf16 reader's keys and values carry bf16's rounding (8 significant bits): measured on the tiny model, up to
# 0.11 from llama.cpp's own reading on logits of a few units, and on the -33 of the padding ids (which the first
# row, the reader's own logits, holds rounded to bf16's step there of 0.25) up to 0.21; transformers bf16 reading
# everything itself is 0.23 away. So: 0.15, plus bf16's epsilon relative to the logit.
BF16_TOLERANCE = 0.15
BF16_EPSILON = 2.0**-7


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
    bf16 = LlamaCppModel(path, name="tiny-0", threads=1)
    bf16.attach_prompt_reader(TransformersModel(tiny_model(0).to(torch.bfloat16), "tiny-0 bf16"))
    return plain, handed, bf16


def test_a_handed_over_prompt_decodes_as_if_llama_cpp_had_read_it(models):
    plain, handed, _ = models
    prompt = [(7 * i + 3) % 300 + 10 for i in range(HANDOFF_MIN_TOKENS + 45)]
    continuation = [11, 42, 99, 7, 250]
    before = CountingReader.reads
    expected_first, expected_after = prompt_rows(plain, prompt, continuation)
    first, after = prompt_rows(handed, prompt, continuation)
    assert CountingReader.reads == before + 1  # the reader read the prompt, llama.cpp the rest
    assert (first - expected_first).abs().max() < TOLERANCE
    # The rows llama.cpp computed over the handed-over cache: attention over every prompt position.
    assert (after - expected_after).abs().max() < TOLERANCE
    assert torch.equal(after.argmax(-1), expected_after.argmax(-1))


def _agree(found: torch.Tensor, expected: torch.Tensor, tolerance: float, relative: float = 0.0) -> None:
    """Every logit within ``tolerance`` (plus ``relative`` of its size) of llama.cpp's own reading, and a greedy
    choice that differs only where llama.cpp's own top two were within ``tolerance``."""
    assert bool(((found - expected).abs() <= tolerance + relative * expected.abs()).all())
    top2 = expected.topk(2, -1).values
    flipped = found.argmax(-1) != expected.argmax(-1)
    assert bool(((top2[:, 0] - top2[:, 1])[flipped] < tolerance).all())


def test_a_prompt_read_in_bf16_is_handed_over_as_f16_rows_that_agree(models):
    plain, _, bf16 = models
    prompt = [(7 * i + 3) % 300 + 10 for i in range(HANDOFF_MIN_TOKENS + 45)]
    continuation = [11, 42, 99, 7, 250]
    expected = torch.cat(prompt_rows(plain, prompt, continuation))
    found = torch.cat(prompt_rows(bf16, prompt, continuation))
    _agree(found, expected, BF16_TOLERANCE, BF16_EPSILON)
    assert (found - expected).abs().max() > TOLERANCE  # bf16 read it: not the fp32 reader's agreement


class GivenMachine(Machine):
    """A CPU without a GPU where llama.cpp passed its check, with the calibration given."""

    def __init__(self, calibration):
        self.given = calibration

    def gpu(self):
        return False

    def llamacpp(self, pairing):
        return True, "llama.cpp (test)"

    def calibration(self, pairing):
        return self.given

    def converted(self, pairing):
        return True


def test_given_an_avx512_bf16_calibration_auto_hands_over_from_bf16_and_llama_cpp_agrees(tmp_path):
    """What auto does on a CPU with fast bf16, end to end on a pairing of two tiny GGUF files: the plan made from
    an AVX512-BF16 calibration (bf16 reads 449 tok/s, llama.cpp 259) has the Specialist's private prompt read in
    bf16 and handed to llama.cpp, loading executes it, and the rows llama.cpp computes from the handed-over cache
    agree with its own reading as the fp32 hand-off's do (within bf16's rounding)."""
    require_llamacpp()
    from specsteer.runtimes.llamacpp import LlamaCppModel

    small, large = tmp_path / "small.gguf", tmp_path / "large.gguf"
    write_tiny_gguf(small, 0)
    write_tiny_gguf(large, 1)
    pairing = Pairing(
        "tiny-gguf", "tiny GGUF pair", ModelSpec("tiny-0", "gguf", str(small)), ModelSpec("tiny-1", "gguf", str(large))
    )
    plan = runtime_plan(pairing, "auto", method="specsteer", machine=GivenMachine(AVX512_BF16))
    assert (plan.runtime, plan.reader) == ("llama.cpp", "transformers bf16")
    pair = load_planned(pairing, plan)
    try:
        assert pair.runtime_label == "llama.cpp+handoff" and pair.runtime_plan == plan
        assert (
            pair.stream_runtimes()["specialist+"] == "llama.cpp F32, prompts of 256+ tokens read by transformers bf16"
        )
        plain = LlamaCppModel(small, name="tiny-0", threads=1)
        prompt = [(5 * i + 1) % 250 + 3 for i in range(HANDOFF_MIN_TOKENS + 20)]
        continuation = [40, 41, 42, 43]
        expected = torch.cat(prompt_rows(plain, prompt, continuation))
        _agree(torch.cat(prompt_rows(pair.specialist, prompt, continuation)), expected, BF16_TOLERANCE, BF16_EPSILON)
    finally:
        clear_loaded_pairs()


def test_short_prompts_and_started_sequences_stay_with_llama_cpp(models):
    _, handed, _ = models
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
    # A value f16 cannot hold (bf16 reaches 3e38, f16 65504) is never written: llama.cpp reads that prompt itself.
    huge = [k.copy() for k in keys]
    huge[1][2, 3] = 1e5
    with pytest.raises(RowsOutOfRange, match="f16"):
        sequence_state(keys, huge, layout)
