"""``specsteer report --run A --run B ...``: stored evaluate runs over the same records read as one table.

For a method added to records another run already holds (P³ beside a re-test's SLM+, LLM and SpecSteer run,
``docs/research/P3_PLAN.md``): each row's ROUGE with its record bootstrap interval, tokens/s, the share of the output
chosen on the device, the facts audit, and the paired differences of P³ and SpecSteer against every other
row (``specsteer.evaluation.joined``); then, for a run an LLM judge graded (``specsteer judge``), its grades on
the same records with their intervals (``specsteer.evaluation.judge_scores``). Read-only.

Exit status: 0 shown, 2 bad input (no such run or database file, runs over other records, a method in two runs).
"""

from __future__ import annotations

import argparse
import json
import sys

from specsteer.cli import DATABASE_HELP


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsteer report",
        description="Stored evaluate runs over the same records as one table: ROUGE with bootstrap intervals, "
        "tokens/s, the share chosen on the device, the facts audit, paired differences.",
    )
    parser.add_argument(
        "--run", action="append", required=True, metavar="NAME", help="an evaluate run's name; repeat for each run"
    )
    parser.add_argument("--database", default=None, help=DATABASE_HELP)
    parser.add_argument("--json", action="store_true", help="print the table as one JSON document")
    return parser


def main(argv: list[str] | None = None) -> int:
    import storage  # the composition root: the one place here that reads the SQL store
    from specsteer.evaluation.joined import join_stored, table_json, table_text
    from specsteer.evaluation.judge_scores import summary_json, summary_lines

    args = build_parser().parse_args(argv)
    missing = storage.missing_sqlite_file(args.database)
    if missing is not None:
        return _fail(f"no database file at {missing}")
    url = storage.read_only_url(args.database)  # a read-only command: the file is never changed
    if len(set(args.run)) != len(args.run):
        return _fail("a run is named twice")
    found = []
    for name in args.run:
        run = storage.get_run_by_name(name, url=url)
        if run is None:
            return _fail(f"no run named {name!r} in this database")
        found.append(run)
    joined = [(run.name, run.config, storage.run_cells(run.id, url=url)) for run in found]
    try:
        table = join_stored(joined)
    except ValueError as error:  # DataError too: the records file is not here
        return _fail(str(error))
    # An LLM judge's grades of the same records, where a run has any (specsteer judge); none in a database made
    # before judges (an example runs' file built before them), which reads as none.
    records = set(table.records)
    judged = [
        (run, cells, storage.run_scores(run.id, url=url)) for run, (_, _, cells) in zip(found, joined, strict=True)
    ]
    if args.json:
        document = {
            "runs": [{"name": run.name, "status": run.status} for run in found],
            **table_json(table),
            "judge": {run.name: summary_json(scores, records) for run, _, scores in judged if scores},
        }
        print(json.dumps(document, ensure_ascii=False, allow_nan=False))
    else:
        names = ", ".join(f"{run.name!r} ({run.status})" for run in found)
        print(table_text(table, f"runs {names}, task {found[0].config.get('task', '?')}"))
        for run, cells, scores in judged:
            lines = summary_lines(scores, records, cells)
            if lines:
                print(f"\nLLM judge, run {run.name!r}, the same records:\n" + "\n".join(lines))
    return 0


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
