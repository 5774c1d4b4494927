"""``specsteer sweep``: a stored run's α × β sweep and the choice rule of ``docs/research/SWEEP_PLAN.md``, read-only.

Per SpecSteer setting over the records that have every cell of the run: mean ROUGE-L with its bootstrap
interval, tokens/s, the paired difference SpecSteer − LLM with its interval, the Pareto front, and the
setting the plan's rules 2-3 choose (``specsteer.evaluation.sweep``); then, for a run an LLM judge graded
(``specsteer judge``), its grades on the same records. It works on a run still going: the first line says how
many records have every cell. Nothing is written to the database.

Exit status: 0 shown, 2 bad input (no such run, no such database file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specsteer.cli import DATABASE_HELP
from specsteer.evaluation import sweep


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsteer sweep",
        description="A stored run's α × β sweep: quality and speed per SpecSteer setting with bootstrap "
        "intervals, the difference from LLM, the Pareto front and the setting docs/research/SWEEP_PLAN.md's rule chooses.",
    )
    parser.add_argument("--run-name", required=True, help="the evaluate run's name")
    parser.add_argument("--database", default=None, help=DATABASE_HELP)
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document")
    parser.add_argument("--plot", default=None, help="write the α × β figure as a standalone HTML file")
    return parser


def main(argv: list[str] | None = None) -> int:
    import storage  # the composition root: the one place here that reads the SQL store
    from specsteer.evaluation.judge_scores import summary_json, summary_lines

    args = build_parser().parse_args(argv)
    missing = storage.missing_sqlite_file(args.database)
    if missing is not None:
        print(f"error: no database file at {missing}", file=sys.stderr)
        return 2
    url = storage.read_only_url(args.database)  # a read-only command: the file is never changed
    run = storage.get_run_by_name(args.run_name, url=url)
    if run is None:
        print(f"error: no run named {args.run_name!r} in this database", file=sys.stderr)
        return 2
    cells = storage.run_cells(run.id, url=url)
    points = sweep.config_points(run.config)
    report = sweep.sweep_report(cells, points, records_total=sweep.run_record_count(run.config))
    # An LLM judge's grades of the sweep's complete records (specsteer judge), where the run has any.
    scores = storage.run_scores(run.id, url=url)
    records = set(sweep.complete_records(cells, points))
    if args.json:
        document = {"run": run.name, "status": run.status, **sweep.report_json(report)}
        if scores:
            document["judge"] = summary_json(scores, records)
        print(json.dumps(document, ensure_ascii=False, allow_nan=False))
    else:
        print(f"run {run.name!r} ({run.status}, task {run.config.get('task', '?')}, {len(cells)} cells stored)")
        print(sweep.report_table(report))
        lines = summary_lines(scores, records, cells)
        if lines:
            print("\nLLM judge, the same records:\n" + "\n".join(lines))
    if args.plot:
        from specsteer.evaluation import plots

        figure = plots.sweep_figure(report)
        target = Path(args.plot)
        target.parent.mkdir(parents=True, exist_ok=True)
        figure.write_html(target, include_plotlyjs=True, full_html=True)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0
