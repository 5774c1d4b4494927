"""``specsteer llamacpp cpu-key | stamp | built | check``: set-up's helpers for the llama.cpp runtime."""

from __future__ import annotations

import argparse

from specsteer.runtimes.hardware import cpu_key
from specsteer.runtimes.llamacpp_build import LlamaCppUnavailable, bindings, check, write_build_stamp


def main(argv: list[str] | None = None) -> int:
    """Set-up helpers: ``cpu-key`` (names the wheel cache), ``stamp`` (after an install), ``check``."""
    parser = argparse.ArgumentParser(prog="specsteer llamacpp", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("cpu-key")
    stamp = commands.add_parser("stamp")
    stamp.add_argument("--native", action="store_true")
    commands.add_parser("built", help="exit 0 when the installed build imports and may run on this CPU")
    proof = commands.add_parser(
        "check",
        help="prove the build on this machine: the real decode path on each "
        "offline model, one configuration after another, each in a child process",
    )
    proof.add_argument("--saved", action="store_true", help="print the saved proof instead of running it again")
    args = parser.parse_args(argv)
    if args.command == "cpu-key":
        print(cpu_key())
    elif args.command == "stamp":
        print(write_build_stamp(args.native))
    elif args.command == "built":
        try:
            bindings()
        except LlamaCppUnavailable as error:
            print(error)
            return 1
    else:
        # Imported here: cpu-key runs during set-up, before the packages the model modules need are installed.
        from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS
        from specsteer.models.weights import prepared_ggufs

        pairing = PAIRINGS[DEFAULT_PAIRING]
        return check(prepared_ggufs((pairing.specialist, pairing.generalist)), args.saved)
    return 0
