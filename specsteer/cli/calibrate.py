"""``specsteer calibrate``: time each runtime here once per CPU and build (what ``--runtime auto`` picks from)."""

from __future__ import annotations

import argparse

from specsteer.models.calibration import calibrate, describe, saved_calibration


def main(argv: list[str] | None = None) -> int:
    from specsteer.models.registry import DEFAULT_PAIRING

    parser = argparse.ArgumentParser(prog="specsteer calibrate", description=__doc__.split("\n")[0])
    parser.add_argument("--pairing", default=DEFAULT_PAIRING)
    parser.add_argument(
        "--saved", action="store_true", help="print the saved calibration, measuring only if there is none"
    )
    args = parser.parse_args(argv)
    result = saved_calibration(args.pairing) if args.saved else None
    if result is None:
        result = calibrate(args.pairing, say=lambda line: print(line, flush=True))
    print(describe(result))
    return 0
