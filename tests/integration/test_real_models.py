"""The real offline models one at a time: the default pair loading from the converted cache, the real
Specialist's llama.cpp rollback, and its prompt read by transformers and handed to llama.cpp (agreement,
measured: quantized kernels and bf16 round differently from fp32)."""

from __future__ import annotations

import pytest
import torch

from specsteer.models.loading import load_pair
from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS, converted_cache_ready, package_problems
from specsteer.runtimes.base import TransformersModel
from specsteer.runtimes.prompt_handoff import HANDOFF_MIN_TOKENS
from testkit import prompt_rows, require_llamacpp


@pytest.fixture(autouse=True)
def released():
    """Each test's models leave memory with it (load_pair keeps the last pairs loaded for the next request)."""
    from specsteer.models.loading import clear_loaded_pairs

    yield
    clear_loaded_pairs()


def test_real_default_pair_loads_from_the_cache(monkeypatch):
    # Use the real cache (converting once if needed) rather than this module's temporary one.
    monkeypatch.delenv("SPECSTEER_CACHE", raising=False)
    pairing = PAIRINGS[DEFAULT_PAIRING]
    roles = (pairing.specialist, pairing.generalist)
    if any(package_problems(spec) and not converted_cache_ready(spec) for spec in roles):
        pytest.skip("offline model packages not installed (scripts/install_models.sh)")
    pair = load_pair(DEFAULT_PAIRING, dtype="bf16", runtime="transformers")
    assert pair.vocab_size == 151936
    im_end = pair.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert {im_end, pair.tokenizer.convert_tokens_to_ids("<|endoftext|>")} <= pair.eos_token_ids
    prompt = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hi."}], tokenize=False, add_generation_prompt=True
    )
    ids = pair.tokenizer.encode(prompt)
    with torch.no_grad():
        out = pair.specialist.model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert pair.tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True).strip()


def test_real_specialist_on_llamacpp_rolls_back_within_tolerance():
    """The real 0.5B Q4_K_M GGUF: rows after a rollback against a fresh evaluation of the same tokens.
    Quantized kernels batch differently from single steps, so this is agreement, measured, not equality."""
    require_llamacpp()
    from specsteer.models.weights import load_tokenizer, offline_gguf
    from specsteer.runtimes.llamacpp import LlamaCppModel

    spec = PAIRINGS[DEFAULT_PAIRING].specialist
    if package_problems(spec):
        pytest.skip("offline model packages not installed (scripts/install_models.sh)")
    model = LlamaCppModel(offline_gguf(spec), name=spec.name)
    tokenizer = load_tokenizer(spec)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write two sentences about rivers."}], add_generation_prompt=True, tokenize=True
    )
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    continuation = tokenizer.encode("Rivers shape valleys over time, and they")
    # A verification pass over the continuation, then a rollback to `kept` tokens and a pass over the
    # rest; against a sequence that read the same tokens without the rollback, batched the same way.
    rolled_back = model.new_sequence(512)
    rolled_back.extend(ids, 1)
    rolled_back.extend(continuation, len(continuation))
    worst, flipped = 0.0, []
    for kept in range(1, len(continuation) - 1):
        rolled_back.crop(len(ids) + kept)
        rows = rolled_back.extend(continuation[kept:], len(continuation) - kept)
        fresh = model.new_sequence(512)
        fresh.extend(ids, 1)
        fresh.extend(continuation[:kept], 1)
        expected = fresh.extend(continuation[kept:], len(continuation) - kept)
        fresh.close()
        difference = (rows - expected).abs().max(-1).values  # [rows]
        worst = max(worst, float(difference.max()))
        top2 = expected.topk(2, -1).values
        margin = top2[:, 0] - top2[:, 1]
        for position in range(rows.shape[0]):
            if int(rows[position].argmax()) != int(expected[position].argmax()):
                flipped.append(position)
                # A choice may only flip where the two best candidates were closer than the difference.
                assert float(margin[position]) <= 2 * float(difference[position])
    assert worst < 0.5, f"rows after rollback differ from a fresh evaluation by up to {worst}"
    assert model.output_rows == 151936 and 151645 in model.end_token_ids  # <|im_end|>


@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")])
def test_the_real_specialist_decodes_a_handed_over_prompt_like_its_own_reading(dtype, record):
    """The offline 0.5B Specialist: llama.cpp Q4_K_M reading a retrieved-history prompt itself, against its
    conversion reading it (fp32, or bf16 as on a CPU with fast bf16; bf16 computes on any x86 CPU, slowly
    without AVX512-BF16) and handing it over. The weights are the same; llama.cpp's 4-bit products round
    activations, fp32 does not, bf16 rounds its own way, so this is agreement, measured: every row within a
    logit, and a greedy choice that differs only where llama.cpp's own top two were nearly tied.

    The prompt is the shortest retrieval above the hand-off's minimum (one item of the shared data's first
    record, about 400 tokens, against 826 for three): reading it is what this test costs on a CPU without fast
    bf16."""
    require_llamacpp()
    from specsteer.engine.request import Request, prepare
    from specsteer.models.weights import load_model, load_tokenizer, offline_gguf
    from specsteer.runtimes.llamacpp import LlamaCppModel

    spec = PAIRINGS[DEFAULT_PAIRING].specialist
    if package_problems(spec):
        pytest.skip("offline model packages not installed (scripts/install_models.sh)")
    tokenizer = load_tokenizer(spec)
    plain = LlamaCppModel(offline_gguf(spec), name=spec.name)
    handed = LlamaCppModel(offline_gguf(spec), name=spec.name)
    handed.attach_prompt_reader(TransformersModel(load_model(spec, dtype, None, "cpu"), str(dtype)))
    for items in range(1, len(record.profile) + 1):
        request = Request(task=record.task, input_text=record.input, history=record.profile, retrieval_k=items)
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prepare(request).prompts.private}], add_generation_prompt=True, tokenize=True
        )
        prompt = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        if len(prompt) >= HANDOFF_MIN_TOKENS:
            break
    assert len(prompt) >= HANDOFF_MIN_TOKENS
    sequence = plain.new_sequence(len(prompt) + 32)
    greedy = [int(sequence.extend(prompt, 1)[-1].argmax())]
    while len(greedy) < 24:
        greedy.append(int(sequence.extend([greedy[-1]], 1)[-1].argmax()))
    sequence.close()
    expected_first, expected_after = prompt_rows(plain, prompt, greedy[:-1])
    first, after = prompt_rows(handed, prompt, greedy[:-1])
    expected, found = torch.cat([expected_first[-1:], expected_after]), torch.cat([first[-1:], after])
    assert (found - expected).abs().max() < 1.0
    top2 = expected.topk(2, -1).values
    flipped = found.argmax(-1) != expected.argmax(-1)
    assert bool(((top2[:, 0] - top2[:, 1])[flipped] < 0.1).all())
    print(f"{dtype}: rows within {float((found - expected).abs().max()):.3f}, {int(flipped.sum())} choices differ")
