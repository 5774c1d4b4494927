"""Timing one loaded model: a prompt read, a decode step, a verification pass, and a model of a GGUF's shapes
with arbitrary weights to time transformers on without converting the GGUF (a matrix product costs the same
whatever its values). The measuring primitives of the calibration (specsteer.models.calibration) and of the
prompt readers (specsteer.models.prompt_reading)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

K = 4  # the draft length timed; SpecSteer's default
PROMPT_TOKENS = 256
REPEATS = 3


@dataclass(frozen=True)
class ModelTiming:
    model: str
    prompt_tok_s: float
    step_s: float
    verify_s: float  # one pass over K + 1 tokens, every row's logits

    def prompt_s(self, tokens: int) -> float:
        return tokens / self.prompt_tok_s


def median_seconds(action, repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def warmed_ids(model, count: int, seed: int) -> list[int]:
    """``count`` random token ids for timing ``model``, after one short warm-up read: first-call costs
    (thread pools, kernel selection) stay out of the numbers."""
    import numpy as np

    ids = np.random.default_rng(seed).integers(100, min(model.output_rows, 20_000), count).tolist()
    warm = model.new_sequence(16)
    warm.extend(ids[:8], 1)
    warm.close()
    return ids


def time_model(model, name: str) -> ModelTiming:
    """Prompt, step and verification costs of one loaded ModelRuntime (its sequence interface)."""
    ids = warmed_ids(model, PROMPT_TOKENS + 2 * (K + 1) + 8, seed=0)
    sequence = model.new_sequence(len(ids) + 8)
    try:
        started = time.perf_counter()
        sequence.extend(ids[:PROMPT_TOKENS], 1)
        prompt_s = time.perf_counter() - started
        position = iter(ids[PROMPT_TOKENS:])
        step_s = median_seconds(lambda: sequence.extend([next(position)], 1))
        base = len(sequence.tokens)
        draft = ids[-(K + 1) :]

        def verify() -> None:
            sequence.extend(draft, K + 1)
            sequence.crop(base)

        verify_s = median_seconds(verify)
    finally:
        sequence.close()
    return ModelTiming(name, PROMPT_TOKENS / prompt_s, step_s, verify_s)


def prompt_rate(model, tokens: int, repeats: int = 2) -> float:
    """Tokens per second of ``model`` reading a ``tokens``-token prompt into a fresh sequence (the median of
    ``repeats``)."""
    ids = warmed_ids(model, tokens, seed=1)

    def read() -> None:
        sequence = model.new_sequence(tokens + 8)
        try:
            sequence.extend(ids, 1)
        finally:
            sequence.close()

    return tokens / median_seconds(read, repeats=repeats)


def config_from_gguf_metadata(metadata: dict[str, str]):
    """A transformers config with the architecture and sizes a GGUF file declares (its weights aside)."""
    from transformers import AutoConfig

    arch = metadata["general.architecture"]

    def number(key: str, kind=int):
        return kind(float(metadata[f"{arch}.{key}"]))

    sizes = dict(
        hidden_size=number("embedding_length"),
        intermediate_size=number("feed_forward_length"),
        num_hidden_layers=number("block_count"),
        num_attention_heads=number("attention.head_count"),
        num_key_value_heads=number("attention.head_count_kv"),
        vocab_size=int(metadata["n_vocab"]),
        max_position_embeddings=number("context_length"),
        rms_norm_eps=number("attention.layer_norm_rms_epsilon", float),
    )
    if f"{arch}.attention.key_length" in metadata:
        sizes["head_dim"] = number("attention.key_length")
    return AutoConfig.for_model(arch, **sizes)


def random_twin(metadata: dict[str, str], dtype):
    """A transformers model with the GGUF's architecture and sizes and arbitrary weights (timing only)."""
    import torch
    from transformers import AutoModelForCausalLM

    from specsteer.runtimes.attention import use_packed_gqa

    config = config_from_gguf_metadata(metadata)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model = model.to_empty(device="cpu")
    # Small values tiled from one random block: as fast to compute with as trained weights (no denormals,
    # nothing infinite), and seconds faster than drawing a random number per weight.
    block = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 0.02).to(dtype)
    with torch.no_grad():
        for tensor in model.parameters():
            if tensor.numel():
                flat = tensor.view(-1)
                whole = flat.numel() // block.numel() * block.numel()
                flat[:whole].view(-1, block.numel()).copy_(block.expand(whole // block.numel(), -1))
                flat[whole:].copy_(block[: flat.numel() - whole])
    # The rotary frequencies were made on the meta device (to_empty left garbage): make them for real.
    model.model.rotary_emb = type(model.model.rotary_emb)(config)
    use_packed_gqa(model)
    return model.eval()
