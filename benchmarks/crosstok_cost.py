"""What the cross-tokenizer path costs: one same-tokenizer pair run both ways on the same records.

The offline cross-tokenizer pairings' weights are not installed here, so this measures the byte-space
machinery (re-encoding each draft, aligned segments, one-byte recovery) against the same-tokenizer
method on the default pair, whose two models share one tokenizer: each side of the cross view holds
its own copy of it. Speedups are over the Generalist alone in the same run (same records, same pair).

    .venv/bin/python benchmarks/crosstok_cost.py --limit 4 --max-new-tokens 96 --database sqlite:////tmp/ct.db
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsteer.data.sources import resolve_data_source
from specsteer.evaluation.grid import EvalSpec, run_grid
from specsteer.models.loading import load_pair
from specsteer.models.pair import cross_tokenizer_view
from specsteer.models.registry import DEFAULT_PAIRING
from storage import SqlRunStore

SHOWN = (
    "method",
    "alpha",
    "records",
    "rouge1",
    "rougeL",
    "acceptance",
    "tok_per_s",
    "speedup",
    "rounds",
    "new_tokens",
    "uplink_bytes",
    "downlink_bytes",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairing", default=DEFAULT_PAIRING)
    parser.add_argument("--runtime", default="auto")
    parser.add_argument("--task", default="review")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--database", required=True)
    parser.add_argument("--tag", default="", help="appended to the run names (a stored run of the same name resumes)")
    args = parser.parse_args()
    pair = load_pair(args.pairing, runtime=args.runtime)
    store = SqlRunStore(args.database)
    for label, view in (("same-tokenizer path", pair), ("cross-tokenizer path", cross_tokenizer_view(pair))):
        spec = EvalSpec(
            data=resolve_data_source("shared", args.task),
            task=args.task,
            limit=args.limit,
            methods=("llm", "specsteer"),
            alphas=(args.alpha,),
            pairing=view.pairing_id,
            max_new_tokens=args.max_new_tokens,
            run_name=f"crosstok-cost-{label.split()[0]}-{args.pairing}-{args.limit}-{args.max_new_tokens}{args.tag}",
        )
        result = run_grid(spec, store, pair=view)
        print(f"== {label} ({view.pairing_id}, {view.runtime}, {view.precision})", flush=True)
        for row in result.rows:
            shown = {key: row[key] for key in SHOWN}
            tokens = row["new_tokens"] or 1
            shown["uplink_bytes_per_token"] = row["uplink_bytes"] / tokens
            shown["downlink_bytes_per_token"] = row["downlink_bytes"] / tokens
            print(json.dumps(shown), flush=True)


if __name__ == "__main__":
    main()
