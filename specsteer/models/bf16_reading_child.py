"""The child process that proves bf16 reads prompts here (specsteer.models.prompt_reading): a model of the
Specialist's shapes in bf16 reads a short prompt, then -- unless that was already under the floor rate -- a
long one, timed; the short prompt's last logits row is then computed again in fp32 on the same weights. It
prints one JSON line, or crashes, which the parent names. ``python -m specsteer.models.bf16_reading_child``
reads its request (shapes, tokens, probe tokens, floor rate) as JSON on stdin."""

from __future__ import annotations

import json
import sys
import time


def read_in_bf16(metadata: dict[str, str], tokens: int, probe_tokens: int, floor_tok_s: float) -> dict[str, float]:
    import torch

    from specsteer.models.model_timing import prompt_rate, random_twin, warmed_ids
    from specsteer.runtimes.base import TransformersModel

    twin = TransformersModel(random_twin(metadata, torch.bfloat16), "bf16")
    probe = warmed_ids(twin, probe_tokens, seed=2)
    sequence = twin.new_sequence(probe_tokens)
    started = time.perf_counter()
    row = sequence.extend(probe, 1)[-1]
    rate, read = probe_tokens / (time.perf_counter() - started), probe_tokens
    sequence.close()
    if not bool(torch.isfinite(row).all()):
        raise AssertionError("bf16 computed logits that are not finite")
    if rate >= floor_tok_s:
        rate, read = prompt_rate(twin, tokens), tokens
    twin.model.float()  # bf16 values are exact in fp32: the same weights, computed exactly
    reference = twin.new_sequence(probe_tokens).extend(probe, 1)[-1]
    cosine = float(torch.nn.functional.cosine_similarity(row, reference, dim=0))
    return {"tok_s": rate, "tokens": read, "cosine": cosine}


def main() -> int:
    request = json.loads(sys.stdin.read())
    result = read_in_bf16(request["metadata"], request["tokens"], request["probe_tokens"], request["floor_tok_s"])
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
