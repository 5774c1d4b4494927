"""The ``specsteer`` command (also ``python -m specsteer``): one entry point, a subcommand per thing a user runs.

Each subcommand lives in its own module here and is imported only when it runs, so ``specsteer --help`` and
``specsteer pairings`` do not load torch. These modules are the command line's composition roots: the only
place in the library that may choose a concrete store from ``storage``.
"""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple

# Every command that reads or writes the store takes --database with this meaning (storage.db reads it).
DATABASE_HELP = "database URL, or a SQLite file's path (default: DATABASE_URL or data/specsteer.db)"


def fail(message: str, code: int) -> int:
    """How every command refuses: ``error: message`` on stderr, and ``code``, its exit status, returned."""
    print(f"error: {message}", file=sys.stderr)
    return code


class Command(NamedTuple):
    module: str  # specsteer.cli.<module>, whose main(argv) runs the command
    summary: str
    # The module parses the command's name itself (generate and pairings share one parser, cloud and edge-key
    # another, whose subcommands they are); otherwise its main gets the arguments after the name.
    parses_name: bool = False


COMMANDS: dict[str, Command] = {
    "generate": Command(
        "generate", "personalized text from a history file (both sides here, or the Edge with --cloud)", True
    ),
    "cloud": Command(
        "cloud", "serve the Cloud (Generalist and generic Specialist) over HTTP for Edges elsewhere", True
    ),
    "edge-key": Command(
        "cloud", "the key of one Edge on a Cloud with a secret (its own credential for admission)", True
    ),
    "pairings": Command(
        "generate", "the model pairings, whether each can load here and which runtime auto picks", True
    ),
    "evaluate": Command("evaluate", "a grid of methods and settings over records: ROUGE, speed, privacy; resumable"),
    "sweep": Command(
        "sweep", "a stored run's α × β sweep: intervals, Pareto front, docs/research/SWEEP_PLAN.md's choice"
    ),
    "judge": Command(
        "judge", "an LLM judge's grades of a stored run (CoGenesis's rubric, 1-10), pairwise bias; resumable"
    ),
    "report": Command("report", "stored runs over the same records as one table: intervals, device share, facts"),
    "bench": Command("bench", "speed | link | project: tokens/s, the link's self-check, deployment projections"),
    "gpu-profile": Command(
        "gpu_profile",
        "a GPU's measured Cloud costs (benchmarks/gpu_costs.py) as a deployment profile, traces re-projected",
    ),
    "models": Command("models", "prepare: make an offline pairing ready to load (verify, assemble, convert)"),
    "llamacpp": Command("llamacpp", "cpu-key | stamp | built | check: set-up's helpers for the llama.cpp runtime"),
    "campaign": Command("campaign", "create | generate | status | leaderboard | export: annotation campaigns"),
    "lora": Command("lora", "train | show: a LoRA Specialist taught a history, on the device (--specialist-lora)"),
    "calibrate": Command("calibrate", "time each runtime here once per CPU and build (what --runtime auto reads)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: specsteer COMMAND [ARGS...]   (or python -m specsteer COMMAND ...)", "", "commands:"]
    lines += [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", "specsteer COMMAND --help shows a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(f"specsteer: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"specsteer.cli.{command.module}")
    return int(module.main(args if command.parses_name else rest) or 0)
