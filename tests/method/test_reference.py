"""The engine against the one-screen statement of SpecSteer (specsteer/method/reference.py).

The engine caches, rolls back, splits the work between an Edge and a Cloud and sends typed frames
between them; the reference recomputes every distribution from the whole sequence. On tiny fp32 models,
greedy, they must emit the same tokens for every α and β tried, with the whole vocabulary or the
Generalist's top-k as recovery candidates.
"""

from __future__ import annotations

import pytest
import torch

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.engine.request import chat_ids
from specsteer.method.reference import specsteer


@pytest.fixture(scope="module")
def pair(tiny_pair_56):
    return tiny_pair_56


def _next_logits(model, vocab: int):
    @torch.no_grad()
    def logits(ids: list[int]) -> torch.Tensor:
        return model(torch.tensor([ids])).logits[0, -1, :vocab].float()

    return logits


@pytest.mark.parametrize(
    ("alpha", "beta", "top_k"),
    [(0.1, 1.0, 0), (0.5, 2.0, 0), (1.0, 0.5, 0), (0.0, 1.0, 0), (float("inf"), 1.0, 0), (0.3, 1.0, 16), (2.0, 3.0, 8)],
)
def test_the_engine_emits_the_reference_tokens(pair, alpha, beta, top_k):
    plain = chat_ids(pair.tokenizer, "Write about rivers.", pair.chat)
    private = chat_ids(pair.tokenizer, "History: I fish on the Loire every weekend.\nWrite about rivers.", pair.chat)
    config = DecodeConfig(
        method="specsteer", alpha=alpha, beta=beta, draft_len=3, downlink_top_k=top_k, max_new_tokens=24
    )
    _, finished = collect(generate_ids(pair, plain, private, config))
    small, large = pair.specialist.model, pair.generalist.model
    expected = specsteer(
        _next_logits(large, pair.vocab_size),
        _next_logits(small, pair.vocab_size),
        _next_logits(small, pair.vocab_size),
        plain,
        private,
        alpha,
        beta,
        k=3,
        max_new=24,
        stop=pair.eos_token_ids,
        top_k=top_k,
    )
    assert finished.token_ids == expected
    assert len(expected) > 0
