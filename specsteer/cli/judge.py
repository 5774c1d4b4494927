"""``specsteer judge --run NAME``: a stored evaluate run's outputs graded by an LLM judge on CoGenesis's rubric
(``specsteer.evaluation.judge_rubric``), stored beside the run's cells, then summed up.

Which judge: the operator's OpenAI-compatible endpoint when ``SPECSTEER_JUDGE_URL`` is set (with
``SPECSTEER_JUDGE_MODEL``, ``SPECSTEER_JUDGE_KEY``, ``SPECSTEER_JUDGE_TIMEOUT_S``, ``SPECSTEER_JUDGE_CONSTRAIN``:
``specsteer.evaluation.judges``), otherwise (or with ``--judge local``) the offline Generalist of ``--pairing``
here, a **weak judge**, labelled so wherever its grades appear. Resumable: a cell graded (or answered
unreadably) by this judge on a criterion is skipped; a timeout is asked again. Progress goes to stderr, one line
per answer; Ctrl-C stops after the answer in flight, keeping everything stored.

The summary (also alone, ``--summary``): per criterion and grid point the mean grade with its record bootstrap
interval beside ROUGE-L on the same records, SpecSteer against SLM+ and LLM record by record, cells without a
grade by reason; with ``--pairwise``, the judge's position bias (pairs asked in both orders that flip) and the
pairs' outcomes; and the judge's agreement with the people of every campaign made from this run's outputs.

Exit status: 0 done, 2 bad input (no such run or database, a records file not here, a bad setting), 1 a judge
that cannot be used (the local model does not load), 130 stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from specsteer.cli import DATABASE_HELP, fail

JUDGE_CHOICES = ("auto", "endpoint", "local")


def build_parser() -> argparse.ArgumentParser:
    from specsteer.evaluation.judge_rubric import CRITERIA
    from specsteer.evaluation.judges import DEFAULT_LOCAL_MAX_TOKENS
    from specsteer.models.registry import DEFAULT_PAIRING

    parser = argparse.ArgumentParser(
        prog="specsteer judge",
        description="Grade a stored evaluate run's outputs with an LLM judge (CoGenesis's rubric, 1-10), "
        "store the grades beside its cells, and sum them up with bootstrap intervals.",
    )
    parser.add_argument("--run", required=True, metavar="NAME", help="the evaluate run's name")
    parser.add_argument("--database", default=None, help=DATABASE_HELP)
    parser.add_argument(
        "--criteria",
        default=",".join(CRITERIA),
        help=f"comma-separated, among {', '.join(CRITERIA)} (default: all three, as CoGenesis)",
    )
    parser.add_argument("--methods", default="", help="judge only these methods' cells (default: every method)")
    parser.add_argument("--alpha", type=float, default=None, help="only this α of the methods that read it")
    parser.add_argument("--beta", type=float, default=None, help="only this β of the methods that read it")
    parser.add_argument("--limit", type=int, default=None, help="the first N records that have every chosen cell")
    parser.add_argument(
        "--pairwise", action="store_true", help="also compare every two chosen points on each record, in both orders"
    )
    parser.add_argument(
        "--judge",
        choices=JUDGE_CHOICES,
        default="auto",
        help="endpoint: $SPECSTEER_JUDGE_URL; local: the offline Generalist (a weak judge); auto: the endpoint "
        "when one is set, else local",
    )
    parser.add_argument("--pairing", default=DEFAULT_PAIRING, help="the local judge's pairing (its Generalist judges)")
    parser.add_argument("--runtime", default="auto", help="the local judge's runtime (auto, llama.cpp, transformers)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help=f"the longest answer (default: 512 for an endpoint, {DEFAULT_LOCAL_MAX_TOKENS} for the local judge)",
    )
    parser.add_argument("--summary", action="store_true", help="judge nothing: sum up what is stored")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON document")
    return parser


def selected_points(cells: Sequence, methods: str, alpha: float | None, beta: float | None) -> list:
    """The run's grid points of ``methods`` (all when empty) at ``alpha``/``beta`` where given; ValueError for a
    method the run lacks or nothing left."""
    present = list(dict.fromkeys(cell.point for cell in cells))
    wanted = [name.strip() for name in methods.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in {point.method for point in present}]
    if unknown:
        raise ValueError(f"the run has no {', '.join(unknown)} cells")
    points = [
        point
        for point in present
        if (not wanted or point.method in wanted)
        and (alpha is None or point.alpha is None or point.alpha == alpha)
        and (beta is None or point.beta is None or point.beta == beta)
    ]
    if not points:
        raise ValueError("no grid point of the run is left to judge with these --methods, --alpha and --beta")
    return points


def _judge(args: argparse.Namespace, cancel: threading.Event):
    """The judge the arguments and the environment name (the composition root reads the environment here)."""
    from specsteer.evaluation.judges import (
        DEFAULT_LOCAL_MAX_TOKENS,
        JUDGE_URL_ENV,
        EndpointJudge,
        EndpointSettings,
        LocalJudge,
    )

    overrides = {"max_tokens": args.max_tokens} if args.max_tokens is not None else {}
    settings = EndpointSettings.from_environment(os.environ, **overrides) if args.judge != "local" else None
    if args.judge == "endpoint" and settings is None:
        raise ValueError(f"--judge endpoint needs ${JUDGE_URL_ENV} (and $SPECSTEER_JUDGE_MODEL)")
    if settings is not None:
        print(f"judge: {settings.model} at {settings.completions_url}", file=sys.stderr)
        return EndpointJudge(settings)
    from specsteer.models.registry import get_pairing
    from specsteer.models.tiny import shared_test_pair

    if args.judge == "auto":
        print(f"judge: no ${JUDGE_URL_ENV}, so the offline Generalist judges here (a weak judge)", file=sys.stderr)
    pair = shared_test_pair(args.pairing)  # the tiny test pairings (tests), else the registry's
    if pair is None:
        from specsteer.models.loading import load_pair

        pair = load_pair(args.pairing, runtime=args.runtime, method="llm", progress=lambda m: print(m, file=sys.stderr))
        model = get_pairing(args.pairing).generalist.name
    else:
        model = f"{args.pairing}-generalist"
    return LocalJudge(pair, model, args.max_tokens or DEFAULT_LOCAL_MAX_TOKENS, cancel)


def main(argv: list[str] | None = None) -> int:
    import storage  # the composition root: the one place here that picks the SQL stores
    from specsteer.evaluation.judge_rubric import check_criteria
    from specsteer.evaluation.judge_run import JudgePlan, JudgeProgress, judge_run_events, run_contexts
    from specsteer.models.weights import ModelLoadError

    args = build_parser().parse_args(argv)
    missing = storage.missing_sqlite_file(args.database)
    if missing is not None:
        return fail(f"no database file at {missing}", 2)
    # Summing up writes nothing: the database (the example runs' read-only file, say) is opened for reading.
    url = storage.read_only_url(args.database) if args.summary else args.database
    run = storage.get_run_by_name(args.run, url=url)
    if run is None:
        return fail(f"no run named {args.run!r} in this database", 2)
    cells = storage.run_cells(run.id, url=url)
    store = storage.SqlJudgeStore(url)
    cancel = threading.Event()
    try:
        plan = JudgePlan(
            criteria=check_criteria(args.criteria.split(",")),
            points=tuple(selected_points(cells, args.methods, args.alpha, args.beta)),
            records=args.limit,
            pairwise=args.pairwise,
        )
        order, contexts = run_contexts(run.config)
        if not args.summary:
            judge = _judge(args, cancel)
            try:
                with _stop_on_signals(cancel):
                    done = None
                    for event in judge_run_events(run.id, cells, contexts, order, judge, store, plan, cancel):
                        if isinstance(event, JudgeProgress):
                            print(
                                f"[{event.done}/{event.total}] {event.what}: {event.outcome} ({event.seconds:.0f} s)",
                                file=sys.stderr,
                                flush=True,
                            )
                        else:
                            done = event
            finally:
                judge.close()
            if done is not None:
                outcomes = (
                    ", ".join(f"{count} {kind}" for kind, count in sorted(done.outcomes.items())) or "nothing new"
                )
                reread = f"; {done.reread} stored answers read again gave a grade or verdict" if done.reread else ""
                print(f"judged {done.asked} ({outcomes}); {done.skipped} already settled{reread}", file=sys.stderr)
                if done.cancelled:
                    _summary(args, run, cells, store, url, plan)
                    return fail(f"stopped; run the same command to continue judging {run.name!r}", 130)
    except ModelLoadError as error:
        return fail(str(error), 1)
    except ValueError as error:  # DataError too: the records file is not here
        return fail(str(error), 2)
    _summary(args, run, cells, store, url, plan)
    return 0


def _stop_on_signals(cancel: threading.Event):
    from specsteer.util.background import stop_signals_handled

    def handle(signum, _frame) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("\nstopping after the answer in flight (Ctrl-C again to abort)", file=sys.stderr)

    return stop_signals_handled(handle)


def _summary(args: argparse.Namespace, run, cells: Sequence, store, url: str | None, plan) -> None:
    import storage
    from specsteer.evaluation.judge_scores import summary_json, summary_lines
    from specsteer.service.judge_report import human_agreement, pair_outcomes, position_consistency, run_campaigns

    points = set(plan.points)
    scores = [score for score in store.scores(run.id) if score.point in points]
    verdicts = [v for v in store.verdicts(run.id) if v.first in points and v.second in points]
    campaigns = storage.SqlCampaignStore(url)
    agreements = [
        agreement
        for campaign in run_campaigns(campaigns.campaigns(), run)
        for agreement in human_agreement(
            campaign, campaigns.items(campaign.id), campaigns.judgements(campaign.id), scores
        )
    ]
    consistency = position_consistency(verdicts)
    outcomes = pair_outcomes(verdicts)
    if args.json:
        document: dict[str, Any] = {
            "run": run.name,
            **summary_json(scores),
            "position_bias": [c.json() for c in consistency],
            "pairs": [
                {
                    "judge": o.judge.model,
                    "criterion": o.criterion,
                    "a": o.a.label,
                    "b": o.b.label,
                    "a_wins": o.a_wins,
                    "b_wins": o.b_wins,
                    "ties": o.ties,
                    "order_decided": o.order_decided,
                }
                for o in outcomes
            ],
            "human_agreement": [a.json() for a in agreements],
        }
        print(json.dumps(document, ensure_ascii=False, allow_nan=False))
        return
    lines = summary_lines(scores, cells=cells)
    if not lines:
        print(f"run {run.name!r}: no judge grades stored for these cells")
        return
    print(f"run {run.name!r}, task {run.config.get('task', '?')}")
    print("\n".join(lines))
    for line in [*(c.sentence() for c in consistency), *(o.sentence() for o in outcomes)]:
        print(line)
    for agreement in agreements:
        print(agreement.sentence())
