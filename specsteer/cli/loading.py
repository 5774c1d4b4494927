"""The model pair a command's arguments name (``--pairing``, ``--specialist``, ``--generalist``, ``--runtime``,
``--dtype``, ``--specialist-lora``), loaded for generate, cloud and lora: a test pairing's tiny models as they
are, any other through specsteer.models.loading; a bad argument exits 2, models that cannot load exit 1."""

from __future__ import annotations

import sys

from specsteer.cli import fail


def pair_from_arguments(args, edge_only: bool = False):
    """The pair ``args.pairing`` names: a test pairing's random tiny models (``tiny-test``,
    ``tiny-cross-test``: the test hook of the evaluate CLI and the app), else :func:`_load`; or the exit
    status of a refusal, already printed."""
    from specsteer.models.tiny import shared_test_pair

    test_pair = shared_test_pair(args.pairing)
    if test_pair is None:
        return _load(args, edge_only=edge_only)
    from specsteer.models.loading import with_specialist_lora
    from specsteer.models.planning import lora_plan
    from specsteer.models.weights import ModelLoadError

    try:
        lora = specialist_lora_arg(args)
        if lora is None:
            return test_pair
        plan = lora_plan(getattr(args, "runtime", "auto"))
        adapted = with_specialist_lora(test_pair, lora)
        adapted.runtime_plan, adapted.runtime_choice = plan, plan.reason
        return adapted
    except ModelLoadError as error:
        return fail(str(error), 2)


def _load(args, edge_only: bool = False):
    from specsteer.models.loading import load_pair
    from specsteer.models.lora import LoraError
    from specsteer.models.registry import resolve_pairing
    from specsteer.models.weights import ModelLoadError

    try:
        pairing = resolve_pairing(args.pairing, specialist=args.specialist, generalist=args.generalist)
        progress = None if args.json else (lambda line: print(f"[models] {line}", file=sys.stderr))
        return load_pair(
            pairing,
            dtype=args.dtype,
            progress=progress,
            runtime=args.runtime,
            edge_only=edge_only,
            method=getattr(args, "method", "specsteer"),
            specialist_lora=specialist_lora_arg(args),
        )
    except (KeyError, ValueError) as error:
        return fail(str(error.args[0]) if error.args else str(error), 2)
    except LoraError as error:  # the adapter given is bad input, not a model that failed to load
        return fail(str(error), 2)
    except ModelLoadError as error:
        return fail(str(error), 1)


def specialist_lora_arg(args):
    """The adapter ``--specialist-lora`` names, read and checked (a LoraError, a ModelLoadError, if not)."""
    from specsteer.models.lora import read_lora

    directory = getattr(args, "specialist_lora", None)
    return read_lora(directory) if directory else None
