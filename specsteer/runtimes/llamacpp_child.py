"""The child process of the llama.cpp check (:mod:`specsteer.runtimes.llamacpp_probe`): the engine's decode
path on each GGUF file it is given, with one configuration; it prints one JSON line, or crashes, which the
parent names. ``python -m specsteer.runtimes.llamacpp_child CONFIG GGUF...``"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from specsteer.runtimes.llamacpp import LlamaCppModel
from specsteer.runtimes.llamacpp_probe import AGREEMENT, DRAFT_TOKENS, PROMPT_TOKENS, LlamaConfig, config_named


def exercise(path: Path, config: LlamaConfig) -> tuple[float, tuple[str, ...]]:
    """The decode path the engine takes, on one model: returns the largest disagreement between a
    verification pass's rows and the single steps that chose its tokens, and the buffer types used.
    Raises AssertionError when a row is not finite or disagrees beyond AGREEMENT."""
    model = LlamaCppModel(path, name=path.stem, extra_buffers=config.extra_buffers)
    try:
        sequence = model.new_sequence(PROMPT_TOKENS + 2 * DRAFT_TOKENS + 4)
        prompt = np.random.default_rng(0).integers(100, min(model.output_rows, 20_000), PROMPT_TOKENS).tolist()
        logits = sequence.extend(prompt, 1)[0]  # a multi-token chunk: [V]
        steps, drafts = [], []
        for _ in range(DRAFT_TOKENS + 1):  # single steps, greedy: [V] each
            drafts.append(int(logits.argmax()))
            logits = sequence.extend([drafts[-1]], 1)[0]
            steps.append(logits)
        sequence.crop(PROMPT_TOKENS)  # rollback
        rows = sequence.extend(drafts, len(drafts))  # the (k+1)-token verification pass: [k+1, V]
        sequence.crop(PROMPT_TOKENS + 2)
        after_rollback = sequence.extend([drafts[2]], 1)[0]
        worst = 0.0
        for got, want in [*zip(rows, steps), (after_rollback, steps[2])]:
            assert bool(np.isfinite(got.numpy()).all()), "logits that are not finite"
            worst = max(worst, float((got - want).abs().max()))
        assert worst <= AGREEMENT, f"a verification row is {worst:.2f} from its single step (limit {AGREEMENT})"
        return worst, model.buffer_types
    finally:
        model.close()


def _child(config_name: str, paths: list[str]) -> int:
    config = config_named(config_name)
    worst, buffers = 0.0, set[str]()
    for path in paths:
        disagreement, used = exercise(Path(path), config)
        worst, buffers = max(worst, disagreement), buffers | set(used)
    print(json.dumps({"worst": worst, "buffers": sorted(buffers)}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(
            "usage: python -m specsteer.runtimes.llamacpp_child CONFIG GGUF...  (use `specsteer llamacpp check`)",
            file=sys.stderr,
        )
        return 2
    return _child(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
