"""Record one real SpecSteer generation's rounds for the engine benchmark to replay (``engine_bench.py --trace``).

Runs the offline pairing on one CoGenesis test record on this machine (the CPU, the runtime ``auto`` or
``--runtime`` picks), SpecSteer at k = 4 and 128 new tokens by default, and writes what a replay needs: each
round's ``(k, accepted)`` (``GenerationStats.round_log``), the prompts' lengths in tokens (the benchmark's random
prompts take them), where it all came from, and the generation's statistics with its trace (what ``gpu-profile``
projects). The records are public test data; nothing private of anyone's is written.

    python benchmarks/record_round_trace.py --out benchmarks/engine_bench_trace.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "specsteer.round_trace/1"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=None, help="CoGenesis records (default: the shared test split)")
    parser.add_argument("--index", type=int, default=0, help="which record (default: the first)")
    parser.add_argument("--pairing", default=None, help="default: the offline default pairing")
    parser.add_argument("--runtime", default="auto")
    parser.add_argument("--alpha", type=float, default=0.1, help="default 0.1: the CoGenesis test run's setting")
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "engine_bench_trace.json"))
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from specsteer.data.datasets import load_cogenesis
    from specsteer.data.sources import shared_cogenesis_path
    from specsteer.engine.decode_config import DecodeConfig
    from specsteer.engine.generate import collect, generate
    from specsteer.engine.request import chat_ids, prepare
    from specsteer.evaluation.grid import record_request
    from specsteer.models.loading import load_pair
    from specsteer.models.registry import DEFAULT_PAIRING
    from specsteer.runtimes.machine import machine_info

    path = Path(args.records) if args.records else shared_cogenesis_path("test")
    if path is None:
        parser.error("no shared CoGenesis test split here: give --records")
    record = load_cogenesis(path, limit=args.index + 1)[args.index]
    pairing = args.pairing or DEFAULT_PAIRING
    pair = load_pair(pairing, runtime=args.runtime, method="specsteer")
    prepared = prepare(record_request(record, retrieval_k=3))
    config = DecodeConfig(
        method="specsteer",
        alpha=args.alpha,
        beta=args.beta,
        draft_len=args.draft_len,
        max_new_tokens=args.max_new_tokens,
    )
    _, finished = collect(generate(pair, prepared, config))
    stats = finished.stats
    document = {
        "schema": SCHEMA,
        "source": (
            f"SpecSteer on CoGenesis test record {record.id!r} ({path.name}), pairing {pairing} "
            f"({stats.runtime} {stats.precision}), alpha={args.alpha:g} beta={args.beta:g} "
            f"k={args.draft_len}, {args.max_new_tokens} new tokens, greedy, recorded on {machine_info().cpu}"
        ),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "pairing": pairing,
        "record": record.id,
        "settings": {
            "alpha": args.alpha,
            "beta": args.beta,
            "draft_len": args.draft_len,
            "max_new_tokens": args.max_new_tokens,
        },
        "prompt_tokens": {
            "private": len(chat_ids(pair.tokenizer, prepared.prompts.private, pair.chat)),
            "plain": len(chat_ids(pair.tokenizer, prepared.prompts.plain, pair.chat)),
        },
        "rounds": [[step.drafted, step.accepted] for step in stats.round_log if step.drafted > 0],
        "stats": stats.to_dict(),
    }
    Path(args.out).write_text(json.dumps(document, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    kept = sum(a for _, a in document["rounds"])
    print(
        f"{args.out}: {len(document['rounds'])} rounds, {kept}/{stats.verified} drafts kept of those decided, "
        f"{stats.new_tokens} tokens ({stats.stop_reason}), prompts {document['prompt_tokens']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
