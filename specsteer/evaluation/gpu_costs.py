"""Forward-pass costs of the paper's model pairs on one accelerator, measured with random weights.

For a GPU machine with PyTorch and transformers and nothing else: no model files, no vLLM, nothing
downloaded. Each model of the paper's pairs (Qwen3-0.6B / Qwen3-32B, Qwen2.5-1.5B / Qwen2.5-32B,
Llama-3.2-1B / Llama-3.1-8B) is built from its published config.json shape (``gpu_shapes.SHAPES``) with
random bf16 weights created on the device itself, one model at a time (a 32B model is ~65 GB in bf16:
it fits an 80 GB H100 alone), and timed with CUDA events after warm-up:

* ``decode``: a one-token forward pass on a cached prefix of each context length;
* ``verify``: a (k+1)-token pass (the token being verified plus k drafts, all positions' logits kept)
  on the same cached prefix, for every k in ``--ks``; the cache is cropped back after each pass;
* ``prefill``: a prompt of each length read into an empty cache (only the last position's logits,
  as a server computes them), reported as seconds and tokens/s.

Every timing keeps its repetition count, median, p90, min and mean. The JSON (``--out``) names the
device, torch/transformers versions, dtype and attention implementation. ``--max-seconds`` bounds the
whole run: between measurements the script checks the budget, stops cleanly when it is spent and
writes what it measured (``complete: false`` and what was skipped).

Random weights time the same kernels as real ones (same shapes, same dtype); what they cannot give is
a token distribution, which these costs do not depend on. The passes run eagerly (no CUDA graphs, no
torch.compile, batch 1): an upper bound on what a serving engine's pass costs on the same card.

``--tiny`` runs the same code on tiny shapes of each family (the CPU dry run: its numbers are not a GPU
figure). ``specsteer.evaluation.gpu_profile`` turns the JSON into a deployment profile.

This module is the measurement: its settings, the passes of one model and the run's JSON. The shapes are
``specsteer.evaluation.gpu_shapes``'s, the clock, repetitions and result file ``specsteer.evaluation.gpu_timing``'s.
All three import only the standard library at import time (torch and transformers when it runs), so a bare GPU
machine with the repository runs it through its benchmark entry:

    python benchmarks/gpu_costs.py --device cuda --out results/gpu_costs_h100.json
    python benchmarks/gpu_costs.py --device cpu --tiny --max-seconds 60 --out results/gpu_costs_cpu_dryrun.json
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from specsteer.evaluation.gpu_shapes import PAIRS, SHAPES, Shape, build_model, fits, tiny_shape
from specsteer.evaluation.gpu_timing import Budget, Timer, device_info, device_slug, log, repeat, summary, write_result

SCHEMA = "specsteer.gpu_costs/1"

# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    contexts: tuple[int, ...]  # cached prefix lengths for decode and verify passes
    prompt_lengths: tuple[int, ...]  # prefill lengths
    ks: tuple[int, ...]  # draft lengths: a verify pass reads k + 1 tokens
    pass_warmup: int = 3
    pass_reps: int = 30  # at most, per (context, tokens)
    prefill_warmup: int = 1
    prefill_reps: int = 8
    min_reps: int = 3
    unit_seconds: float = 2.0  # stop repeating one measurement after this long once min_reps are done

    def to_json(self) -> dict:
        return {
            "contexts": list(self.contexts),
            "prompt_lengths": list(self.prompt_lengths),
            "ks": list(self.ks),
            "pass_warmup": self.pass_warmup,
            "pass_reps_max": self.pass_reps,
            "prefill_warmup": self.prefill_warmup,
            "prefill_reps_max": self.prefill_reps,
            "min_reps": self.min_reps,
            "unit_seconds": self.unit_seconds,
            "verify_logits": "every position of the pass",
            "prefill_logits": "the last position only",
            "batch_size": 1,
        }


# Passes at 1024 tokens of context stand for the stored LongLaMP traces (657-880 prompt tokens plus
# up to 256 written); 512 and 2048 show how the cost moves with context. 6144 is the prompt length of
# the Qwen speed benchmark the published profiles derive their prompt rates from.
FULL = Settings(contexts=(512, 1024, 2048), prompt_lengths=(128, 512, 2048, 6144), ks=tuple(range(1, 9)))
TINY = Settings(
    contexts=(64, 128),
    prompt_lengths=(32, 128),
    ks=tuple(range(1, 9)),
    pass_warmup=1,
    pass_reps=10,
    prefill_warmup=1,
    prefill_reps=5,
    min_reps=2,
    unit_seconds=0.3,
)


def _forward_kwargs(model) -> dict:
    import inspect

    names = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in names else {}


# --------------------------------------------------------------------------- measuring one model


@dataclass
class ModelCosts:
    name: str
    shape: Shape
    tiny: bool
    parameters: int = 0
    weights_gib: float = 0.0
    build_s: float = 0.0
    attn_implementation: str = ""
    decode: list[dict] = field(default_factory=list)
    verify: list[dict] = field(default_factory=list)
    prefill: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict:
        return {
            "shape_of": self.name,
            "tiny": self.tiny,
            "shape": {k: v for k, v in self.shape.__dict__.items() if k != "source"},
            "shape_source": self.shape.source,
            "parameters": self.parameters,
            "parameters_from_shape": self.shape.parameters(),
            "weights_gib": self.weights_gib,
            "build_s": self.build_s,
            "attn_implementation": self.attn_implementation,
            "decode": self.decode,
            "verify": self.verify,
            "prefill": self.prefill,
            "skipped": self.skipped,
            "error": self.error,
        }


def measure_model(costs: ModelCosts, settings: Settings, device: str, budget: Budget, torch, transformers) -> None:
    """Build one model, measure it, free it. A failure (memory, an API change) is recorded in
    ``costs.error`` and does not stop the run: the next model still gets the device."""
    try:
        _build_and_measure(costs, settings, device, budget, torch, transformers)
    except Exception as error:
        costs.error = f"{type(error).__name__}: {error}"
        log(budget, f"{costs.name}: failed, {costs.error}")
    # Out of the except block the failed frames, and the weights they held, are released.
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _build_and_measure(costs: ModelCosts, settings: Settings, device: str, budget: Budget, torch, transformers) -> None:
    timer = Timer(torch, device)
    began = time.monotonic()
    model = build_model(costs.shape, device, torch.bfloat16, torch, transformers)
    timer.sync()
    costs.build_s = time.monotonic() - began
    costs.parameters = sum(p.numel() for p in model.parameters())
    costs.weights_gib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
    costs.attn_implementation = str(getattr(model.config, "_attn_implementation", ""))
    log(budget, f"{costs.name}: built {costs.parameters / 1e9:.3f}B parameters in {costs.build_s:.1f}s")
    generator = torch.Generator(device=device).manual_seed(0)

    def tokens(n: int):
        return torch.randint(0, costs.shape.vocab_size, (1, n), device=device, generator=generator)

    with torch.inference_mode():
        for context in settings.contexts:
            if budget.spent():
                costs.skipped.append(f"passes at context {context}: the time budget was spent")
                continue
            _passes(model, costs, settings, context, tokens, timer, budget)
        last_logits = _forward_kwargs(model)
        for length in settings.prompt_lengths:
            if budget.spent():
                costs.skipped.append(f"prefill of {length}: the time budget was spent")
                continue
            _prefill(model, costs, settings, length, tokens, timer, budget, last_logits)


def _new_cache(transformers, model):
    try:
        return transformers.DynamicCache(config=model.config)
    except TypeError:  # releases before the config argument
        return transformers.DynamicCache()


def _passes(model, costs, settings, context, tokens, timer, budget) -> None:
    import transformers

    cache = _new_cache(transformers, model)
    model(input_ids=tokens(context), past_key_values=cache, use_cache=True, **_forward_kwargs(model))
    if cache.get_seq_length() != context:
        raise RuntimeError(f"the prefix cache holds {cache.get_seq_length()} tokens, not {context}")

    def crop() -> None:
        # Back to the prefix. A negative argument removes that many tokens in transformers 4 and 5
        # alike (5 refuses a positive length); 0 would mean "keep none" in 4, so it is never passed.
        excess = cache.get_seq_length() - context
        if excess > 0:
            cache.crop(-excess)

    for k in (0, *settings.ks):
        if budget.spent():
            costs.skipped.append(f"context {context}: passes from k={k} on (the time budget was spent)")
            return
        batch = tokens(k + 1)
        times = repeat(
            timer,
            partial(model, input_ids=batch, past_key_values=cache, use_cache=True),
            crop,
            settings.pass_warmup,
            settings.pass_reps,
            settings.min_reps,
            settings.unit_seconds,
            budget,
        )
        if cache.get_seq_length() != context:
            raise RuntimeError("the cache was not cropped back to its prefix")
        if not times:
            costs.skipped.append(f"context {context}, k={k}: the budget was spent during warm-up")
            return
        row = {"context": context, "tokens": k + 1, **summary(times)}
        (costs.decode if k == 0 else costs.verify).append(row if k == 0 else {"k": k, **row})
        log(
            budget,
            f"{costs.name}: context {context}, {k + 1} tokens: {row['median_s'] * 1e3:.2f} ms ({len(times)} reps)",
        )


def _prefill(model, costs, settings, length, tokens, timer, budget, last_logits) -> None:
    import transformers

    prompt = tokens(length)
    holder = {}

    def fresh() -> None:
        holder["cache"] = _new_cache(transformers, model)

    fresh()
    times = repeat(
        timer,
        lambda: model(input_ids=prompt, past_key_values=holder["cache"], use_cache=True, **last_logits),
        fresh,
        settings.prefill_warmup,
        settings.prefill_reps,
        settings.min_reps,
        settings.unit_seconds,
        budget,
    )
    if not times:
        costs.skipped.append(f"prefill of {length}: the budget was spent during warm-up")
        return
    row = {"tokens": length, **summary(times)}
    row["tok_per_s"] = length / row["median_s"]
    costs.prefill.append(row)
    log(budget, f"{costs.name}: prefill {length}: {row['median_s'] * 1e3:.1f} ms, {row['tok_per_s']:.0f} tok/s")


# --------------------------------------------------------------------------- the run


def models_to_measure(pairs: Sequence[str]) -> list[str]:
    """Each pair's models, the large one first (its verification cost is the number that matters most)."""
    names: list[str] = []
    for pair in pairs:
        small, large = PAIRS[pair]
        names += [n for n in (large, small) if n not in names]
    return names


def run(args) -> dict:
    budget = Budget(args.max_seconds)
    import torch
    import transformers

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit("error: --device cuda but torch sees no CUDA device")
        # the timing events live on the current device; a bare 'cuda' means the first card
        torch.cuda.set_device(torch.device(args.device if ":" in args.device else "cuda:0"))
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = TINY if args.tiny else FULL
    result = {
        "schema": SCHEMA,
        "dry_run": bool(args.tiny),
        "note": (
            "tiny shapes on the CPU: a dry run of the script, not a GPU figure"
            if args.tiny
            else "real shapes, random weights"
        ),
        "device": device_info(args.device, torch),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "dtype": "bfloat16",
        "attn_implementation": "sdpa",
        "execution": "eager PyTorch through transformers, batch 1, no CUDA graphs or compilation",
        "settings": settings.to_json(),
        "max_seconds": args.max_seconds,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "pairs": [{"pair": pair, "small": PAIRS[pair][0], "large": PAIRS[pair][1]} for pair in args.pairs],
        "models": {},
        "skipped": [],
    }
    if args.out is None:
        args.out = f"results/gpu_costs_{device_slug(result['device'], bool(args.tiny))}.json"
    log(
        budget, f"device {result['device']['name']}, torch {torch.__version__}, transformers {transformers.__version__}"
    )
    for name in models_to_measure(args.pairs):
        shape = tiny_shape(name) if args.tiny else SHAPES[name]
        if budget.spent():
            result["skipped"].append(f"{name}: the time budget was spent")
            continue
        reason = fits(shape, args.device, torch)
        if reason:
            result["skipped"].append(f"{name}: {reason}")
            log(budget, f"{name}: skipped, {reason}")
            continue
        costs = ModelCosts(name, shape, bool(args.tiny))
        measure_model(costs, settings, args.device, budget, torch, transformers)
        result["models"][name] = costs.to_json()
        write_result(result, budget, args.out, final=False)  # what is measured survives a crash of the next model
    result["complete"] = not result["skipped"] and all(
        not m["skipped"] and m["error"] is None for m in result["models"].values()
    )
    write_result(result, budget, args.out, final=True)
    log(budget, f"done ({'complete' if result['complete'] else 'incomplete'}): {args.out}")
    print(markdown_table(result))
    return result


def markdown_table(result: dict) -> str:
    """The measured medians as a Markdown table: one row per model and context."""
    settings = result["settings"]
    shown_ks = [k for k in (1, 2, 4, 8) if k in settings["ks"]]
    header = (
        ["model", "context", "decode ms"]
        + [f"verify k={k} ms" for k in shown_ks]
        + [f"prefill {n} tok/s" for n in settings["prompt_lengths"]]
    )
    lines = [
        f"{result['device']['name']}, torch {result['torch']}, transformers {result['transformers']}, "
        f"{result['dtype']}, {result['execution']}"
        + (" (DRY RUN on tiny shapes: not a GPU figure)" if result["dry_run"] else ""),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for name, model in result["models"].items():
        prefill = {row["tokens"]: row["tok_per_s"] for row in model["prefill"]}
        for context in settings["contexts"]:
            decode = next((r["median_s"] for r in model["decode"] if r["context"] == context), None)
            verify = {r["k"]: r["median_s"] for r in model["verify"] if r["context"] == context}
            cells = [name if context == settings["contexts"][0] else "", str(context), _ms(decode)]
            cells += [_ms(verify.get(k)) for k in shown_ks]
            cells += [
                f"{prefill[n]:.0f}" if n in prefill and context == settings["contexts"][0] else ""
                for n in settings["prompt_lengths"]
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.2f}"


def _pairs(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PAIRS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"pairs must be some of {', '.join(PAIRS)}, comma-separated")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes of each family (the CPU dry run)")
    parser.add_argument("--pairs", type=_pairs, default=list(PAIRS), help=f"some of {', '.join(PAIRS)}")
    parser.add_argument(
        "--out",
        default=None,
        help="the JSON to write (default results/gpu_costs_<device>.json, e.g. _h100, _cpu_dryrun)",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=420.0,
        help="budget for the whole run, from the start (default 420: the full run on an H100 fits well inside it)",
    )
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: its default)")
    args = parser.parse_args(argv)
    if not (args.device == "cpu" or args.device.startswith("cuda")):
        parser.error("--device must be cuda, cuda:N or cpu")
    if args.max_seconds <= 0:
        parser.error("--max-seconds must be positive")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
