"""Apply docs/research/P3_PLAN.md's choice rule to P³'s dev runs: one stored run per (k, τ), method ``p3`` only.

The rule, as written before any output: the setting with the largest mean ROUGE-L over the dev records; the
settings within 0.10 R-L of it are near-ties, and the fastest of them (tokens/s) is chosen. Only the records
every run has a cell for are used, so that each mean is over the same records.

    python benchmarks/choose_p3.py --database sqlite:///results/p3dev.db --runs p3dev-k5-t0.02,... [--json]

Read-only. Prints a table (or one JSON document with ``chosen``: {"k", "tau", "run"}).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import storage  # noqa: E402  (the repository root on the path first)
from specsteer.evaluation.grid import summarize  # noqa: E402
from specsteer.evaluation.metrics import bootstrap_interval  # noqa: E402
from specsteer.evaluation.sweep import DRAWS, SEED, TIE  # noqa: E402
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True)
    parser.add_argument("--runs", required=True, help="comma-separated run names, one per (k, τ)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    missing = storage.missing_sqlite_file(args.database)
    if missing:
        print(f"error: no database file at {missing}", file=sys.stderr)
        return 2
    url = storage.read_only_url(args.database)  # only read: never changes the file

    runs = {}
    for name in args.runs.split(","):
        run = storage.get_run_by_name(name, url=url)
        if run is None:
            print(f"error: no run named {name!r}", file=sys.stderr)
            return 2
        cells = [cell for cell in storage.run_cells(run.id, url=url) if cell.point.method == "p3"]
        runs[name] = (run, cells)
    common = set.intersection(*({cell.record_id for cell in cells} for _, cells in runs.values()))
    rows = []
    for name, (run, cells) in runs.items():
        kept = [cell for cell in cells if cell.record_id in common]
        scores = [100 * v for cell in kept if (v := cell.rouge.get("rougeL")) is not None]
        if not scores:
            continue
        low, high = bootstrap_interval(scores, DRAWS, SEED)
        speed = summarize(kept)[0]["tok_per_s"]
        rows.append(
            {
                "run": name,
                "k": run.config.get("p3_draft_len", DEFAULT_DRAFT_LEN),  # a default is not stored
                "tau": run.config.get("p3_tau", DEFAULT_TAU),
                "records": len(scores),
                "rougeL": sum(scores) / len(scores),
                "rougeL_low": low,
                "rougeL_high": high,
                "tok_per_s": speed,
            }
        )
    if not rows:
        print("error: no scored cells in these runs", file=sys.stderr)
        return 2
    best = max(rows, key=lambda row: row["rougeL"])
    tied = [row for row in rows if best["rougeL"] - row["rougeL"] <= TIE + 1e-9]
    chosen = max(tied, key=lambda row: row["tok_per_s"] or 0.0)
    document = {
        "records_common": len(common),
        "rows": rows,
        "best": best["run"],
        "near_ties": [row["run"] for row in tied],
        "chosen": {"run": chosen["run"], "k": chosen["k"], "tau": chosen["tau"]},
    }
    if args.json:
        print(json.dumps(document, ensure_ascii=False))
        return 0
    print(f"{len(common)} records common to all {len(runs)} runs")
    for row in rows:
        mark = " chosen" if row is chosen else (" near-tie" if row in tied else "")
        print(
            f"{row['run']:<24} k={row['k']} tau={row['tau']} n={row['records']} "
            f"R-L {row['rougeL']:.2f} [{row['rougeL_low']:.2f}, {row['rougeL_high']:.2f}] "
            f"{row['tok_per_s']:.2f} tok/s{mark}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
