"""The engine on the paper's model shapes: ``llm`` against SpecSteer end to end on one GPU, through the real engine.

For a GPU machine with PyTorch and transformers (and nothing else: no model files, no network, no gradio or
sqlalchemy). Each of the paper's pairs (Qwen3-0.6B -> Qwen3-32B first, then Qwen2.5-1.5B -> 32B and Llama-3.2-1B
-> 3.1-8B as the time budget allows) is built from its published shape (``specsteer/evaluation/gpu_shapes.py``'s ``SHAPES``,
read from there) with random bf16 weights created on the device; prompts are random token ids of the lengths a
recorded CoGenesis generation read (its private and plain prompts), spelled by a tokenizer made in code. Then:

* ``llm``: the Generalist alone, as the engine runs it (the Cloud decodes and streams its tokens);
* SpecSteer at k = 4 with the acceptance scripted at the Cloud's seam (``specsteer.method.acceptance``): each
  draft kept at 0.3, 0.6 and 0.9, and the rounds of the recorded generation replayed. The ratio test still runs
  and is paid for; random weights would make its own verdicts meaningless.

Every run is the real engine: ``generate_ids`` with its Edge, Link and in-process Cloud (which reads its prompt
while the Edge reads its own, as ``specsteer cloud`` does), 128 new tokens, no end token (none is in the
vocabulary's end ids), each request reading its whole prompts (the prefix caches are emptied before each run).
The Edge's Specialist and the Cloud's two models run on separate CUDA streams of the one GPU; the paper runs
them on separate hardware, so here they share its memory bandwidth and there is no link (in process, 0 s).

The JSON (``--out``) is written after every run: the device, driver and versions, the host CPU, each run's
tokens/s, first-token times and its time split (per round: the Edge's passes, the Cloud's, host work -- the loop,
framing, the ratio test, steering, sampling, crops -- and the link; before the first round: the prompt reads),
and each run's trace for ``specsteer gpu-profile --engine-bench``. ``--budget-s`` bounds the whole run: runs are
ordered by importance (the first pair's ``llm``, SpecSteer at 0.6 and the replay first) and a run that would not
finish inside the budget is skipped and listed.

``--dry-run`` runs the same code on tiny shapes of each family on the CPU, with short prompts and few tokens: a
test of the benchmark (tests/benchmarks), not a figure.

    python benchmarks/engine_bench.py --out "$OUT/engine_bench.json" --budget-s 420
    python benchmarks/engine_bench.py --dry-run --out /tmp/engine_bench_dry.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "specsteer.engine_bench/1"
DEFAULT_TRACE = ROOT / "benchmarks" / "engine_bench_trace.json"
ENGINE = (
    "the real engine (generate_ids: Edge, Link, in-process Cloud reading ahead), eager PyTorch through "
    "transformers, batch 1, no CUDA graphs or compilation"
)
SHARED_GPU = (
    "the Edge's Specialist and the Cloud's two models on separate CUDA streams of one GPU (the paper runs them on "
    "separate hardware: here they share the GPU and there is no link)"
)
SHARED_CPU = "the Edge and the Cloud in one process on the CPU (no streams, no link)"


def _gpu_harness():
    """``specsteer.evaluation.gpu_shapes`` (the paper's shapes, their tiny stand-ins and the on-device builder) and
    ``specsteer.evaluation.gpu_timing`` (the run's budget, log, device and result file), one copy each, imported from
    this checkout."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from specsteer.evaluation import gpu_shapes, gpu_timing

    return gpu_shapes, gpu_timing


@dataclass(frozen=True)
class Settings:
    device: str
    pairs: tuple[str, ...]
    tokens: int
    draft_len: int
    rates: tuple[float, ...]
    private_tokens: int
    plain_tokens: int
    warmup_tokens: int
    budget_s: float
    dry_run: bool
    alpha: float = 0.1  # sent in every Open; the scripted verdicts replace the test's
    beta: float = 1.0
    downlink_top_k: int = 64


@dataclass(frozen=True)
class Case:
    """One run of a pair: a method and, for SpecSteer, who decides its rounds."""

    name: str
    method: str
    rate: float | None = None  # scripted acceptance
    replay: bool = False


def cases(settings: Settings) -> list[Case]:
    """The runs of one pair, most important first: the baseline, SpecSteer at the middle rate, the replay."""
    ordered = sorted(settings.rates, key=lambda rate: abs(rate - 0.6))
    runs = [Case("llm", "llm"), Case(f"specsteer@{ordered[0]:g}", "specsteer", ordered[0])]
    runs.append(Case("specsteer@replay", "specsteer", replay=True))
    runs += [Case(f"specsteer@{rate:g}", "specsteer", rate) for rate in ordered[1:]]
    return runs


# --------------------------------------------------------------------------- building a pair


def bench_tokenizer(vocab_size: int):
    """A tokenizer made in code with one word per id (``t0`` .. ``t{V-1}``) and no end token: the engine's
    detokenizer spells any id the random models choose."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core)


def build_pair(name: str, settings: Settings, shapes, torch, transformers):
    """The pair ``name`` (gpu_shapes.PAIRS) with random bf16 weights on the device, the Edge's Specialist on one
    CUDA stream and the Cloud's Generalist and generic copy (the same weights) on another."""
    from specsteer.models.loading import on_streams
    from specsteer.models.pair import assemble_pair
    from specsteer.runtimes.base import TransformersModel

    small_name, large_name = shapes.PAIRS[name]
    shape = shapes.tiny_shape if settings.dry_run else shapes.SHAPES.__getitem__
    small_shape, large_shape = shape(small_name), shape(large_name)
    on_cuda = settings.device.startswith("cuda")
    edge_stream = torch.cuda.Stream(settings.device) if on_cuda else None
    cloud_stream = torch.cuda.Stream(settings.device) if on_cuda else None
    small = shapes.build_model(small_shape, settings.device, torch.bfloat16, torch, transformers)
    large = shapes.build_model(large_shape, settings.device, torch.bfloat16, torch, transformers)
    if on_cuda:
        torch.cuda.synchronize()  # the weights are written before two streams read them
    vocab = min(small_shape.vocab_size, large_shape.vocab_size)
    runtimes = TransformersModel(small, small_name), TransformersModel(large, large_name)
    pair = on_streams(assemble_pair(f"bench-{name}", *runtimes, bench_tokenizer(vocab)), edge_stream, cloud_stream)
    # No end ids: every run writes its whole token budget.
    return replace(pair, eos_token_ids=frozenset()), (small_shape, large_shape)


def random_prompts(settings: Settings, vocab: int, torch) -> tuple[list[int], list[int]]:
    generator = torch.Generator().manual_seed(0)
    private = torch.randint(0, vocab, (settings.private_tokens,), generator=generator).tolist()
    plain = torch.randint(0, vocab, (settings.plain_tokens,), generator=generator).tolist()
    return plain, private


# --------------------------------------------------------------------------- one run


def run_case(pair, prompts, case: Case, settings: Settings, replayed, tokens: int, torch) -> dict:
    """One generation through the engine; its figures and split (see the module)."""
    from specsteer.cloud.in_process import InProcessCloud
    from specsteer.engine.decode_config import DecodeConfig
    from specsteer.engine.generate import collect, generate_ids
    from specsteer.method.acceptance import RATIO_TEST, ScriptedRate

    policy = RATIO_TEST
    if case.rate is not None:
        policy = ScriptedRate(case.rate, seed=0)
    elif case.replay:
        policy = replayed
    config = DecodeConfig(
        method=case.method,
        alpha=settings.alpha,
        beta=settings.beta,
        draft_len=settings.draft_len,
        downlink_top_k=settings.downlink_top_k,
        max_new_tokens=tokens,
    )
    pair.clear_prefix_caches()  # a fresh request reads its whole prompts
    if settings.device.startswith("cuda"):
        torch.cuda.synchronize()
    plain, private = prompts
    cloud = InProcessCloud(pair, read_ahead="concurrent", acceptance=policy)
    _, finished = collect(generate_ids(pair, plain, private, config, cloud=cloud))
    return describe_run(case, finished.stats, policy.label)


def describe_run(case: Case, stats, acceptance: str) -> dict:
    rounds = stats.round_log
    in_rounds = sum(step.seconds for step in rounds)
    passes = {"edge_s": 0.0, "cloud_s": 0.0, "link_s": 0.0}
    for step in stats.trace:
        key = "link_s" if step.kind == "message" else ("edge_s" if step.who == "specialist+" else "cloud_s")
        passes[key] += step.seconds
    row = {
        "run": case.name,
        "method": case.method,
        "acceptance": acceptance if case.method == "specsteer" else None,
        "rate": case.rate,
        "tokens": stats.new_tokens,
        "seconds": stats.seconds,
        "tok_per_s": stats.tok_per_s,
        "ttft_s": stats.ttft_s,
        "first_visible_s": stats.first_visible_s,
        "rounds": stats.rounds,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "verified": stats.verified,
        "kept_per_decided": stats.accepted / stats.verified if stats.verified else None,
        "forward_calls": stats.forward_calls,
        "reused_tokens": stats.reused_tokens,
        # The whole run: its passes by side, the link, and the rest (host work, less any overlap of the two
        # sides' prompt reads, which run at once)
        "passes": passes,
        "host_s": stats.seconds - sum(passes.values()),
        # Before the first round (the session opened, the Cloud's prompt read ahead), the first round (which reads
        # the private prompt, beside the Cloud's read), and the rounds after it, split
        "before_rounds_s": stats.seconds - in_rounds if rounds else None,
        "first_round_s": rounds[0].seconds if rounds else None,
        "round_split": _round_split(rounds[1:]),
        "round_log": [list(step) + [step.host_s] for step in rounds],
        "trace": [list(step) for step in stats.trace],
    }
    return row


def _round_split(rounds) -> dict | None:
    """The rounds' time split (those after the first: no prompt read in them), summed and as medians (ms)."""
    if not rounds:
        return None
    parts = ("seconds", "edge_s", "cloud_s", "host_s", "link_s")
    values = {part: [getattr(step, part) for step in rounds] for part in parts}
    return {
        "sum_s": {part: sum(v) for part, v in values.items()},
        "median_ms": {part: statistics.median(v) * 1e3 for part, v in values.items()},
    }


# --------------------------------------------------------------------------- the run


def driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown (nvidia-smi did not answer)"


def load_replay(path: Path):
    """The recorded rounds (``record_round_trace.py``) as a replayed-acceptance policy, and the file's facts."""
    from specsteer.method.acceptance import ReplayedRounds

    document = json.loads(path.read_text(encoding="utf-8"))
    rounds = ReplayedRounds(tuple((int(k), int(a)) for k, a in document["rounds"]), document.get("source", str(path)))
    return rounds, document


def run(settings: Settings, trace_path: Path, out: Path) -> dict:
    shapes, timing = _gpu_harness()
    budget = timing.Budget(settings.budget_s)
    import torch
    import transformers

    from specsteer.runtimes.machine import machine_info

    if settings.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit("error: --device cuda but torch sees no CUDA device")
        torch.cuda.set_device(torch.device(settings.device if ":" in settings.device else "cuda:0"))
    replayed, recorded = load_replay(trace_path)
    result = {
        "schema": SCHEMA,
        "dry_run": settings.dry_run,
        "note": (
            "tiny shapes on the CPU: a dry run of the benchmark, not a figure"
            if settings.dry_run
            else "the paper's shapes, random bf16 weights, the real engine"
        ),
        "device": timing.device_info(settings.device, torch),
        "driver": driver_version() if settings.device.startswith("cuda") else None,
        "host": machine_info().to_dict(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "dtype": "bfloat16",
        "execution": f"{ENGINE}; {SHARED_GPU if settings.device.startswith('cuda') else SHARED_CPU}",
        "settings": {**settings.__dict__, "pairs": list(settings.pairs), "rates": list(settings.rates)},
        "replayed": {
            "file": str(trace_path.relative_to(ROOT) if trace_path.is_relative_to(ROOT) else trace_path),
            "source": recorded.get("source"),
            "rounds": len(replayed.rounds),
            "kept_per_decided": replayed.acceptance,
        },
        "prompt_source": recorded.get("source"),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "pairs": [],
        "runs": [],
        "skipped": [],
    }
    timing.log(
        budget, f"{result['device']['name']}, torch {torch.__version__}, transformers {transformers.__version__}"
    )
    for name in settings.pairs:
        _run_pair(name, settings, replayed, result, budget, out, shapes, timing, torch, transformers)
    result["complete"] = not result["skipped"]
    timing.write_result(result, budget, str(out), final=True)
    timing.log(budget, f"done ({'complete' if result['complete'] else 'incomplete'}): {out}")
    print(markdown_table(result))
    return result


def _run_pair(name, settings, replayed, result, budget, out, shapes, timing, torch, transformers) -> None:
    small_name, large_name = shapes.PAIRS[name]
    done = [row["seconds"] for row in result["runs"]]
    if done and budget.left() < 2 * max(done):
        result["skipped"].append(f"{name}: the time budget left ({budget.left():.0f} s) would not hold its runs")
        return
    large_shape = shapes.tiny_shape(large_name) if settings.dry_run else shapes.SHAPES[large_name]
    reason = shapes.fits(large_shape, settings.device, torch)
    if reason:
        result["skipped"].append(f"{name}: {reason}")
        return
    began = budget.elapsed()
    pair, built = build_pair(name, settings, shapes, torch, transformers)
    entry = {
        "pair": name,
        "small": small_name,
        "large": large_name,
        "shapes": [{k: v for k, v in shape.__dict__.items()} for shape in built],
        "build_s": budget.elapsed() - began,
    }
    result["pairs"].append(entry)
    try:
        prompts = random_prompts(settings, pair.vocab_size, torch)
        began = budget.elapsed()
        for case in (Case("llm", "llm"), Case("specsteer", "specsteer", 0.6)):  # kernels and allocator warmed
            run_case(pair, prompts, case, settings, replayed, settings.warmup_tokens, torch)
        entry["warmup_s"] = budget.elapsed() - began
        timing.log(budget, f"{name}: built in {entry['build_s']:.1f}s, warmed up in {entry['warmup_s']:.1f}s")
        longest = 0.0
        for case in cases(settings):
            if budget.left() < 1.5 * longest:
                result["skipped"].append(f"{name} {case.name}: {budget.left():.0f} s left, a run took {longest:.0f} s")
                continue
            row = {"pair": name, **run_case(pair, prompts, case, settings, replayed, settings.tokens, torch)}
            longest = max(longest, row["seconds"])
            result["runs"].append(row)
            timing.write_result(result, budget, str(out), final=False)
            timing.log(budget, f"{name} {case.name}: {row['tok_per_s']:.2f} tok/s over {row['tokens']} tokens")
    finally:
        del pair
        gc.collect()
        if settings.device.startswith("cuda"):
            torch.cuda.empty_cache()


def markdown_table(result: dict) -> str:
    """Each run's end-to-end speed against ``llm`` and its median round, as a Markdown table."""
    lines = [
        f"{result['device']['name']} (driver {result['driver']}), torch {result['torch']}, transformers "
        f"{result['transformers']}, {result['dtype']}; {result['execution']}"
        + (" (DRY RUN on tiny shapes: not a figure)" if result["dry_run"] else ""),
        "",
        "| pair | run | tok/s | x llm | kept/decided | rounds | round ms | Edge ms | Cloud ms | host ms | link ms "
        "| first round s | before rounds s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    baseline = {row["pair"]: row["tok_per_s"] for row in result["runs"] if row["method"] == "llm"}
    for row in result["runs"]:
        split = (row["round_split"] or {}).get("median_ms", {})
        speedup = row["tok_per_s"] / baseline[row["pair"]] if baseline.get(row["pair"]) else None
        cells = [
            row["pair"],
            row["run"],
            f"{row['tok_per_s']:.2f}",
            "" if speedup is None else f"{speedup:.2f}",
            "" if row["kept_per_decided"] is None else f"{row['kept_per_decided']:.2f}",
            str(row["rounds"]),
            *(
                f"{split[part]:.1f}" if part in split else ""
                for part in ("seconds", "edge_s", "cloud_s", "host_s", "link_s")
            ),
            "" if row["first_round_s"] is None else f"{row['first_round_s']:.2f}",
            "" if row["before_rounds_s"] is None else f"{row['before_rounds_s']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _numbers(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, not {text!r}") from None
    if not values or not all(0 <= value <= 1 for value in values):
        raise argparse.ArgumentTypeError("acceptance rates are in [0, 1]")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU, short prompts: not a figure")
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda; the dry run: cpu)")
    parser.add_argument("--pairs", default=None, help="some of qwen3,qwen2.5,llama3 (default all, qwen3 first)")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per run (default 128; dry run 12)")
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--rates", type=_numbers, default=(0.3, 0.6, 0.9), help="scripted acceptance rates")
    parser.add_argument(
        "--trace", default=str(DEFAULT_TRACE), help="the recorded rounds to replay (and prompt lengths)"
    )
    parser.add_argument("--private-tokens", type=int, default=None, help="default: the recorded private prompt's")
    parser.add_argument("--plain-tokens", type=int, default=None, help="default: the recorded plain prompt's")
    parser.add_argument("--budget-s", type=float, default=420.0, help="the whole run's time (default 420)")
    parser.add_argument("--out", default=None, help="the JSON (default results/engine_bench_<device>.json)")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # the engine itself, from this checkout
    trace_path = Path(args.trace).resolve()
    recorded = json.loads(trace_path.read_text(encoding="utf-8"))["prompt_tokens"]
    dry = args.dry_run
    shapes, _ = _gpu_harness()
    pairs = tuple(p.strip() for p in (args.pairs or ",".join(shapes.PAIRS)).split(",") if p.strip())
    unknown = [p for p in pairs if p not in shapes.PAIRS]
    if unknown or not pairs:
        parser.error(f"--pairs: some of {', '.join(shapes.PAIRS)}")
    settings = Settings(
        device=args.device or ("cpu" if dry else "cuda"),
        pairs=pairs,
        tokens=args.tokens or (12 if dry else 128),
        draft_len=args.draft_len,
        rates=args.rates,
        private_tokens=args.private_tokens or (min(64, recorded["private"]) if dry else recorded["private"]),
        plain_tokens=args.plain_tokens or (min(24, recorded["plain"]) if dry else recorded["plain"]),
        warmup_tokens=4 if dry else 8,
        budget_s=args.budget_s,
        dry_run=dry,
    )
    if not (settings.device == "cpu" or settings.device.startswith("cuda")):
        parser.error("--device must be cuda, cuda:N or cpu")
    if settings.budget_s <= 0 or settings.tokens < 1 or not 1 <= settings.draft_len <= 16:
        parser.error("--budget-s and --tokens must be positive, --draft-len 1..16")
    out = Path(args.out or ROOT / "results" / f"engine_bench_{'cpu_dryrun' if dry else 'gpu'}.json")
    run(settings, trace_path, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
