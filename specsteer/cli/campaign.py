"""``specsteer campaign create|generate|status|leaderboard|export``: annotation campaigns from the command line.

The command's composition root: it picks the SQL stores (``storage``) for one database (``--database`` or
``DATABASE_URL``) and hands them to ``specsteer.service.campaigns.CampaignService``. ``create`` stores the
campaign and generates its comparisons (``--no-generate`` to leave that to ``generate --shard I/N``
workers); ``generate`` resumes a stopped one without duplicates. ``create --from-run RUN`` instead takes
the comparisons from a stored ``evaluate`` run's outputs (``specsteer.service.campaign_import``): nothing
is generated, the campaign is ready at once. ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args

from specsteer.cli import DATABASE_HELP
from specsteer.data.datasets import EVALUATION_TASKS
from specsteer.engine.settings import Decoding
from specsteer.method.catalog import PRIVATE_METHODS
from specsteer.models.registry import DEFAULT_PAIRING
from specsteer.runtimes.base import RUNTIME_CHOICES
from specsteer.util.jsonable import to_jsonable

if TYPE_CHECKING:
    from specsteer.service.campaign_values import CampaignReport, CampaignStatusView
    from specsteer.service.campaigns import CampaignService

COMMANDS = ("create", "generate", "status", "leaderboard", "export")
# ``create``'s generation settings when it generates (left None by the parser, so that --from-run can tell
# which were given: the run's own settings are the ones its outputs were made with).
GENERATION_DEFAULTS: dict[str, Any] = {
    "pairing": DEFAULT_PAIRING,
    "runtime": "auto",
    "alpha": 0.1,
    "beta": 1.0,
    "draft_len": 4,
    "max_new_tokens": 96,
    "decoding": "greedy",
    "seed": 0,
    "retrieval_k": 3,
}
# What only a generating ``create`` reads (with --from-run, --alpha and --beta pick the run's grid point).
GENERATION_ONLY: tuple[str, ...] = ("task", "data", "pairing", "runtime", "draft_len", "max_new_tokens", "decoding")
GENERATION_ONLY += ("seed", "retrieval_k", "shard", "no_generate")


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _shard(text: str) -> tuple[int, int]:
    from specsteer.cli.evaluate import _shard as parse

    return parse(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specsteer campaign", description="Annotation campaigns.")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--database", default=None, help=DATABASE_HELP)
        sub.add_argument("--json", action="store_true", help="print one JSON object")

    create = commands.add_parser("create", help="store a campaign and generate its comparisons")
    create.add_argument("--name", required=True)
    create.add_argument(
        "--from-run",
        default=None,
        metavar="RUN",
        help="compare the outputs stored evaluation run RUN computed (no generation; its records and settings)",
    )
    create.add_argument("--task", default=None, choices=EVALUATION_TASKS, help="required unless --from-run")
    create.add_argument(
        "--data", help="'sample', 'shared', 'shared:dev' (CoGenesis) or a records file; required unless --from-run"
    )
    create.add_argument(
        "--limit", type=int, default=None, help="first N records (--from-run: the first N complete ones)"
    )
    create.add_argument(
        "--methods",
        type=_names,
        default=None,
        help="comma-separated, 2 or more (default: every private one; --from-run: the run's)",
    )
    create.add_argument("--pairing", default=None, help=f"default {DEFAULT_PAIRING}")
    create.add_argument("--runtime", choices=RUNTIME_CHOICES, default=None, help="default auto")
    create.add_argument(
        "--alpha", type=float, default=None, help="SpecSteer's alpha (default 0.1; --from-run: picks the run's)"
    )
    create.add_argument(
        "--beta", type=float, default=None, help="SpecSteer's / LightCoSteer's beta (default 1; likewise)"
    )
    create.add_argument("--draft-len", type=int, default=None, help="default 4")
    create.add_argument("--max-new-tokens", type=int, default=None, help="default 96")
    create.add_argument("--decoding", choices=get_args(Decoding), default=None, help="default greedy")
    create.add_argument("--seed", type=int, default=None, help="default 0")
    create.add_argument("--retrieval-k", type=int, default=None, help="default 3")
    create.add_argument("--annotators", type=_names, default=(), help="names; each gets a join code (printed once)")
    create.add_argument("--open", action="store_true", help="anyone may join by name (the default without names)")
    create.add_argument("--no-generate", action="store_true", help="store it only; run `generate` workers after")
    create.add_argument("--shard", type=_shard, default=None, metavar="I/N", help="default 0/1")
    common(create)

    generate = commands.add_parser("generate", help="generate (or resume) a campaign's comparisons")
    generate.add_argument("name")
    generate.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N", help="records I, I+N, ... only")
    common(generate)

    status = commands.add_parser("status", help="comparisons ready, annotators, judgements")
    status.add_argument("name")
    common(status)

    board = commands.add_parser("leaderboard", help="Bradley-Terry strengths, intervals, bias, agreement")
    board.add_argument("name", nargs="?", default=None, help="a campaign (default: every campaign)")
    board.add_argument("--resamples", type=int, default=1000)
    board.add_argument("--seed", type=int, default=0)
    common(board)

    export = commands.add_parser("export", help="every judgement with every field, as CSV or JSON lines")
    export.add_argument("name", nargs="?", default=None, help="a campaign (default: every campaign)")
    export.add_argument("--format", choices=("csv", "jsonl"), default="jsonl")
    export.add_argument("--output", required=True, help="file to write")
    common(export)
    return parser


def _service(url: str | None) -> CampaignService:
    # The composition root: storage is imported here, not at module level (the library never needs it).
    import storage
    from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
    from specsteer.service.app_service import AppService
    from specsteer.service.pair_catalog import PairCatalog

    pairs = PairCatalog({TEST_PAIRING_ID: shared_tiny_pair})  # the tiny pair for tests, beside the registry's
    app = AppService(store=storage.SqlGenerationStore(url), runs=storage.SqlRunStore(url), pairs=pairs)
    return app.campaigns(storage.SqlCampaignStore(url), storage.SqlJudgeStore(url))


def status_json(view: CampaignStatusView) -> dict[str, Any]:
    campaign = view.campaign
    return {
        "name": campaign.name,
        "status": campaign.status,
        "ready": campaign.ready,
        "planned": campaign.planned,
        "task": campaign.task,
        "methods": list(campaign.methods),
        "pairing": campaign.pairing,
        "open_to_anyone": campaign.open_to_anyone,
        "source": view.source,
        "annotators": view.annotators,
        "judgements": view.judgements,
        "error": campaign.error,
    }


def _generate(service: CampaignService, name: str, shard: tuple[int, int]) -> int:
    from specsteer.service.campaign_values import CampaignGenerated, CampaignProgress
    from specsteer.service.events import Failed
    from specsteer.util.background import stop_signals_handled

    cancel = threading.Event()
    with stop_signals_handled(lambda _signum, _frame: cancel.set()):
        for event in service.generate(name, cancel, shard):
            if isinstance(event, CampaignProgress):
                print(f"{event.campaign}: {event.ready} of {event.planned} ready ({event.record_key})", file=sys.stderr)
            elif isinstance(event, Failed):
                print(f"error: {event.message}", file=sys.stderr)
                return 1
            elif isinstance(event, CampaignGenerated) and event.status == "stopped":
                print(f"stopped: `specsteer campaign generate {name}` resumes it", file=sys.stderr)
                return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    from specsteer.service.campaign_values import CampaignError, CampaignRequest
    from specsteer.service.events import ExportRefused

    args = build_parser().parse_args(argv)
    service = _service(args.database)
    try:
        if args.command == "create" and args.from_run is not None:
            return _create_from_run(service, args)
        if args.command == "create":
            missing = [f"--{name}" for name in ("task", "data") if getattr(args, name) is None]
            if missing:
                print(f"error: campaign create needs {' and '.join(missing)} (or --from-run RUN)", file=sys.stderr)
                return 2
            settings = {
                key: default if getattr(args, key) is None else getattr(args, key)
                for key, default in GENERATION_DEFAULTS.items()
            }
            request = CampaignRequest(
                args.name,
                args.task,
                args.data,
                args.methods or PRIVATE_METHODS,
                settings,
                args.limit,
                args.annotators,
                args.open,
            )
            created = service.create(request)
            _print_codes(created.codes)
            code = 0 if args.no_generate else _generate(service, created.campaign.name, args.shard or (0, 1))
            result = {**status_json(service.status(created.campaign.name)), "codes": dict(created.codes)}
            _print(result, args.json)
            return code
        if args.command == "generate":
            code = _generate(service, args.name, args.shard)
            _print(status_json(service.status(args.name)), args.json)
            return code
        if args.command == "status":
            _print(status_json(service.status(args.name)), args.json)
            return 0
        if args.command == "leaderboard":
            report = service.report(args.name, resamples=args.resamples, seed=args.seed)
            result = report_json(report)
            if args.json:
                print(json.dumps(result, ensure_ascii=False, allow_nan=False))
            else:
                print(leaderboard_text(result))
            return 0
        exported = service.export(args.format, args.name)
        if exported.path is None:
            _print({"written": 0, "output": None}, args.json)
            return 0
        import shutil

        shutil.move(str(exported.path), args.output)
        _print({"written": exported.count, "output": args.output}, args.json)
        return 0
    except (CampaignError, ExportRefused, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _print_codes(codes: Mapping[str, str]) -> None:
    for annotator, join_code in codes.items():
        print(f"join code for {annotator}: {join_code}", file=sys.stderr)


def _create_from_run(service: CampaignService, args: argparse.Namespace) -> int:
    """``create --from-run``: the run's stored outputs, no generation (its records and settings are the run's)."""
    from specsteer.service.campaign_import import RunCampaignRequest, create_from_run

    given = [f"--{name.replace('_', '-')}" for name in GENERATION_ONLY if getattr(args, name) not in (None, False)]
    if given:
        print(
            f"error: --from-run takes the run's records and settings and generates nothing; leave out {', '.join(given)}",
            file=sys.stderr,
        )
        return 2
    request = RunCampaignRequest(
        args.name, args.from_run, args.methods or (), args.alpha, args.beta, args.limit, args.annotators, args.open
    )
    created = create_from_run(service, request)
    _print_codes(created.codes)
    _print({**status_json(service.status(created.campaign.name)), "codes": dict(created.codes)}, args.json)
    return 0


def report_json(report: CampaignReport) -> dict[str, Any]:
    data = to_jsonable(report.report)
    board = report.report.leaderboard
    return {
        "campaigns": list(report.campaigns),
        "open_to_anyone": report.open_to_anyone,
        "sources": list(report.sources),
        "to_judge": report.to_judge,
        "near_identical": report.near_identical,
        "too_few_to_rank": board.too_few_text() if board.too_few else None,
        **data,
    }


def leaderboard_text(result: dict[str, Any]) -> str:
    too_few = result["too_few_to_rank"]
    lines = [f"{'rank':>4}  {'method':<12} {'strength':>9}  {'95% interval':<18} judgements"]
    for row in result["leaderboard"]["rows"]:
        strength = "-" if row["strength"] is None or too_few else f"{row['strength']:+.3f}"
        interval = "-" if row["lower"] is None or too_few else f"[{row['lower']:+.2f}, {row['upper']:+.2f}]"
        rank = "-" if row["rank"] is None or too_few else str(row["rank"])
        lines.append(f"{rank:>4}  {row['method']:<12} {strength:>9}  {interval:<18} {row['judgements']}")
    if too_few:
        lines.append(too_few)
    lines.append(
        f"{result['comparisons']} of {result['to_judge']} comparisons judged ({result['judgements']} judgement(s)); "
        f"{result['near_identical']} left out for near-identical outputs"
    )
    lines.extend(result.get("sources", ()))
    return "\n".join(lines)


def _print(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(to_jsonable(result), ensure_ascii=False, allow_nan=False))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
