"""The single-query attention shortcut computes what transformers' sdpa path computes (fp32)."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specsteer.models.tiny import tiny_model
from specsteer.runtimes.attention import IMPLEMENTATION, register, use_packed_gqa


def _step_logits(model, implementation: str, prompt: torch.Tensor, steps: list[int]) -> torch.Tensor:
    register()
    model.set_attn_implementation(implementation)
    cache = DynamicCache()
    rows = []
    with torch.inference_mode():
        model(input_ids=prompt, past_key_values=cache, use_cache=True)
        for token in steps:  # one query per pass: the case the shortcut takes
            rows.append(model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True).logits[0, -1])
        rows.append(model(input_ids=torch.tensor([steps[:3]]), past_key_values=cache, use_cache=True).logits[0, -1])
    return torch.stack(rows)


def test_packed_single_query_attention_matches_sdpa():
    model = tiny_model(seed=3)  # 4 query heads on 2 key/value heads
    assert model.config.num_attention_heads // model.config.num_key_value_heads == 2
    prompt = torch.randint(3, 250, (1, 40), generator=torch.Generator().manual_seed(0))
    steps = [17, 42, 99, 7, 150]
    reference = _step_logits(model, "sdpa", prompt, steps)
    packed = _step_logits(model, IMPLEMENTATION, prompt, steps)
    assert torch.allclose(packed, reference, atol=1e-5)


def test_only_sdpa_models_are_switched():
    model = tiny_model(seed=0)
    model.set_attn_implementation("eager")
    use_packed_gqa(model)
    assert model.config._attn_implementation == "eager"
    model.set_attn_implementation("sdpa")
    use_packed_gqa(model)
    assert model.config._attn_implementation == IMPLEMENTATION
