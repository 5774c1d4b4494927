"""The offline cross-tokenizer pairings beside the same-tokenizer pair, on CoGenesis test records.

Every pairing runs on the transformers runtime (the one both kinds of pairing share), all loaded at once, and
the records are interleaved: each record is run on every pairing before the next, so a noisy machine
weighs on all of them alike. Per pairing and record: the Generalist alone (``llm``, the speed reference
of that pairing) and SpecSteer, both greedy. The Specialist's history is the record's four writing texts
(BM25 top ``--retrieval-k``, the ``free`` task's paper-style prompt); the Cloud gets the task alone. The
record's ``additional_profile`` is not used. One JSON line per run, then one summary line per pairing and
method (n, ROUGE-1/L F x100 unstemmed, acceptance = accepted/drafted, tok/s over the summed tokens and
seconds, speedup over that pairing's llm, uplink/downlink bytes per generated token).

    .venv/bin/python benchmarks/crosstok_pairs.py --limit 4 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsteer.data.history import HistoryItem
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, prepare
from specsteer.evaluation.metrics import rouge_scores
from specsteer.models.loading import load_pair
from specsteer.runtimes.hardware import read_cpu

PAIRINGS = ("offline-qwen2.5-coder", "offline-smollm2__qwen2.5-coder", "offline-smollm2__gemma3")
COGENESIS_TEST = Path("/work/shared/data/cogenesis/cogenesis_test.json")


@dataclass(frozen=True)
class CogenesisRecord:
    tid: str
    task: str
    reference: str
    history: tuple[str, ...]


def read_records(path: Path, limit: int, skip: int = 0) -> list[CogenesisRecord]:
    records = []
    for raw in json.loads(path.read_text())[skip : skip + limit]:
        turns = {turn["from"]: turn["value"] for turn in raw["conversations"]}
        records.append(
            CogenesisRecord(
                raw["tid"], turns["user"], turns["assistant"], tuple(item["text"] for item in raw["profile"])
            )
        )
    return records


def run_one(pair, prepared, config: DecodeConfig, reference: str) -> dict:
    pair.clear_prefix_caches()  # each run reads its prompts afresh: no run is faster for following another
    _, finished = collect(generate(pair, prepared, config))
    stats = finished.stats
    scores = rouge_scores(finished.text, reference)
    return {
        "new_tokens": stats.new_tokens,
        "seconds": stats.seconds,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "uplink_bytes": stats.uplink_bytes,
        "downlink_bytes": stats.downlink_bytes,
        "rouge1": scores["rouge1"],
        "rougeL": scores["rougeL"],
        "stop": stats.stop_reason,
        "text": finished.text,
    }


def summarize(rows: list[dict]) -> list[dict]:
    summaries = []
    llm_speed: dict[str, float] = {}
    for pairing in dict.fromkeys(row["pairing"] for row in rows):
        for method in ("llm", "specsteer"):
            mine = [row for row in rows if row["pairing"] == pairing and row["method"] == method]
            if not mine:
                continue
            tokens = sum(row["new_tokens"] for row in mine) or 1
            speed = tokens / sum(row["seconds"] for row in mine)
            drafted = sum(row["drafted"] for row in mine)
            if method == "llm":
                llm_speed[pairing] = speed
            summaries.append(
                {
                    "pairing": pairing,
                    "method": method,
                    "n": len(mine),
                    "rouge1": round(100 * sum(row["rouge1"] for row in mine) / len(mine), 2),
                    "rougeL": round(100 * sum(row["rougeL"] for row in mine) / len(mine), 2),
                    "acceptance": round(sum(row["accepted"] for row in mine) / drafted, 3) if drafted else None,
                    "tok_per_s": round(speed, 2),
                    "speedup_over_llm": round(speed / llm_speed[pairing], 2) if pairing in llm_speed else None,
                    "new_tokens": tokens,
                    "uplink_B_per_token": round(sum(row["uplink_bytes"] for row in mine) / tokens, 1),
                    "downlink_B_per_token": round(sum(row["downlink_bytes"] for row in mine) / tokens, 1),
                }
            )
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=COGENESIS_TEST)
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--skip", type=int, default=0, help="records passed over first (to continue a stopped run)")
    parser.add_argument("--pairings", default=",".join(PAIRINGS))
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--retrieval-k", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--deadline",
        type=float,
        default=0.0,
        help="unix time after which no new record starts (0: none); the summary covers what ran",
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    model, flags = read_cpu()
    print(
        json.dumps(
            {
                "cpu": model,
                "threads": args.threads,
                "avx512_bf16": "avx512_bf16" in flags,
                "amx_bf16": "amx_bf16" in flags,
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )
    pairs = {pairing_id: load_pair(pairing_id, runtime="transformers") for pairing_id in args.pairings.split(",")}
    for pairing_id, pair in pairs.items():
        print(json.dumps({"loaded": pairing_id, "precision": pair.precision}), flush=True)
    configs = {
        "llm": DecodeConfig(method="llm", max_new_tokens=args.max_new_tokens),
        "specsteer": DecodeConfig(
            method="specsteer", alpha=args.alpha, draft_len=args.draft_len, max_new_tokens=args.max_new_tokens
        ),
    }
    warm = prepare(Request(task="free", input_text="Say hello.", history=[HistoryItem({"text": "Hello there."})]))
    for pair in pairs.values():  # first calls pay one-time costs that no record should carry
        for method in configs:
            collect(generate(pair, warm, DecodeConfig(method=method, max_new_tokens=4)))
    rows = []
    for record in read_records(args.data, args.limit, args.skip):
        if args.deadline and time.time() > args.deadline:
            print(json.dumps({"stopped": "deadline", "records_done": len(rows) // (len(pairs) * len(configs))}))
            break
        prepared = prepare(
            Request(
                task="free",
                input_text=record.task,
                history=[HistoryItem({"text": text}) for text in record.history],
                retrieval_k=args.retrieval_k,
            )
        )
        for pairing_id, pair in pairs.items():
            for method, config in configs.items():
                row = {
                    "tid": record.tid,
                    "pairing": pairing_id,
                    "method": method,
                    **run_one(pair, prepared, config, record.reference),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    for summary in summarize(rows):
        print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
