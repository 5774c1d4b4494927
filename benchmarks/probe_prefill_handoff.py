"""Does reading the Specialist's prompt on transformers and decoding on llama.cpp beat either runtime alone here?

The AVX2 miss: transformers fp32 reads a long private prompt faster than llama.cpp Q4_K_M on this kind of
CPU, and llama.cpp decodes several times faster. This probe measures a hand-off between them on the offline
Specialist (Qwen2.5-Coder-0.5B, the Q4_K_M GGUF and its dequantized fp32 conversion):

* ``llama.cpp``: llama.cpp reads the prompt and decodes ``--tokens`` greedy tokens;
* ``transformers``: transformers reads the prompt and decodes them;
* ``hand-off``: transformers reads the prompt (its last logits give the first token), its keys and values are
  written into a llama.cpp context as a sequence state (``specsteer.runtimes.prompt_handoff``, the layout
  learnt from a state llama.cpp wrote itself), and llama.cpp decodes the rest.

Per path: seconds to the first token, seconds to the last, and the greedy tokens; the hand-off's agreement with
each runtime alone. The probe that led to the runtime (`auto` now chooses the hand-off where measured faster).

    python benchmarks/probe_prefill_handoff.py --prompts 2 --tokens 48 --out results/probe_prefill_handoff.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from specsteer.evaluation.bench import load_prompts  # noqa: E402
from specsteer.runtimes.llamacpp import LlamaCppModel  # noqa: E402
from specsteer.runtimes.machine import machine_info  # noqa: E402
from specsteer.runtimes.prompt_handoff import StateLayout, as_c_buffer, read_layout, sequence_state  # noqa: E402

GGUF = Path.home() / ".cache/specsteer/gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
CONVERTED = Path.home() / ".cache/specsteer/models/qwen2.5-coder-0.5b-instruct-q4_k_m"


def llama_decode(sequence, first: int, count: int) -> list[int]:
    tokens = [first]
    while len(tokens) < count:
        logits = sequence.extend([tokens[-1]], 1)
        tokens.append(int(logits[-1].argmax()))
    return tokens


def run_llama(model: LlamaCppModel, ids: list[int], count: int) -> dict:
    sequence = model.new_sequence(4096)
    start = time.perf_counter()
    logits = sequence.extend(ids, 1)
    first = time.perf_counter() - start
    tokens = llama_decode(sequence, int(logits[-1].argmax()), count)
    total = time.perf_counter() - start
    sequence.close()
    return {"first_s": first, "total_s": total, "tokens": tokens}


def hf_prefill(hf, ids: list[int]):
    with torch.inference_mode():
        out = hf(torch.tensor([ids]), use_cache=True)
    return out.logits[0, -1], out.past_key_values


def run_transformers(hf, ids: list[int], count: int) -> dict:
    start = time.perf_counter()
    logits, cache = hf_prefill(hf, ids)
    first = time.perf_counter() - start
    tokens = [int(logits.argmax())]
    with torch.inference_mode():
        while len(tokens) < count:
            out = hf(torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tokens.append(int(out.logits[0, -1].argmax()))
    return {"first_s": first, "total_s": time.perf_counter() - start, "tokens": tokens}


def run_handoff(hf, model: LlamaCppModel, layout: StateLayout, ids: list[int], count: int) -> dict:
    start = time.perf_counter()
    logits, cache = hf_prefill(hf, ids)
    first_token = int(logits.argmax())
    first = time.perf_counter() - start
    keys = [layer.keys[0].transpose(0, 1).reshape(len(ids), -1).numpy() for layer in cache.layers]
    values = [layer.values[0].transpose(0, 1).reshape(len(ids), -1).numpy() for layer in cache.layers]
    blob = sequence_state(keys, values, layout)
    sequence = model.new_sequence(4096)
    sequence._grow(len(ids) + count + 1)
    if not model._ll.llama_state_seq_set_data(sequence._context, as_c_buffer(blob), len(blob), 0):
        raise RuntimeError("llama.cpp refused the state")
    sequence.tokens = list(ids)
    handed = time.perf_counter() - start
    tokens = llama_decode(sequence, first_token, count)
    total = time.perf_counter() - start
    sequence.close()
    return {"first_s": first, "handed_over_s": handed, "total_s": total, "tokens": tokens, "state_bytes": len(blob)}


def agreement(a: list[int], b: list[int]) -> int:
    """Tokens equal from the start."""
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(CONVERTED)
    hf = AutoModelForCausalLM.from_pretrained(CONVERTED, dtype=torch.float32).eval()
    model = LlamaCppModel(GGUF, threads=args.threads)
    probe = model.new_sequence(64)
    probe.extend([tokenizer.eos_token_id], 1)
    layout = read_layout(probe.state())
    probe.close()
    rows = []
    for prepared in load_prompts(args.prompts + 1, None, "cogenesis"):
        messages = [{"role": "user", "content": prepared.prompts.private}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        row = {"prompt_tokens": len(ids)}
        for name, run in (
            ("llama.cpp", lambda ids=ids: run_llama(model, ids, args.tokens)),
            ("transformers", lambda ids=ids: run_transformers(hf, ids, args.tokens)),
            ("hand-off", lambda ids=ids: run_handoff(hf, model, layout, ids, args.tokens)),
        ):
            row[name] = run()
            print(f"{len(ids)} tokens, {name}: first {row[name]['first_s']:.2f} s, total {row[name]['total_s']:.2f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
        row["hand-off agrees with llama.cpp"] = agreement(row["hand-off"]["tokens"], row["llama.cpp"]["tokens"])
        row["hand-off agrees with transformers"] = agreement(row["hand-off"]["tokens"], row["transformers"]["tokens"])
        row["llama.cpp agrees with transformers"] = agreement(row["llama.cpp"]["tokens"], row["transformers"]["tokens"])
        rows.append(row)
    warm, measured = rows[0], rows[1:]  # the first prompt warms both runtimes up
    result = {
        "machine": machine_info().describe(),
        "threads": args.threads,
        "tokens": args.tokens,
        "layout": asdict(layout),
        "warm_up_prompt_tokens": warm["prompt_tokens"],
        "rows": measured,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
