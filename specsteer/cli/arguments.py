"""The arguments several commands take, spelled and read one way: ``--runtime`` (every command that loads
models), ``--specialist-lora``, ``--prompt-style``, P³'s settings and SpecSteer's acceptance rule (generate,
evaluate, bench), and the number type their options parse with."""

from __future__ import annotations

import argparse
import math


def float_argument(text: str) -> float:
    """A number option's type: any float (inf included) but NaN."""
    value = float(text)
    if math.isnan(value):
        raise argparse.ArgumentTypeError("NaN is not a number here")
    return value


# argparse names the type in its refusal of a word ("argument --alpha: invalid _float value: 'x'"): the name the
# commands have always printed there
float_argument.__name__ = "_float"


def runtime_argument(text: str) -> str:
    """``--runtime``'s type wherever a command takes one: "auto", a runtime's name, or a split such as
    transformers/llama.cpp (specsteer.runtimes.base.check_runtime, the one spelling)."""
    from specsteer.runtimes.base import check_runtime

    try:
        return check_runtime(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_lora_argument(parser: argparse.ArgumentParser, per_record: str = "") -> None:
    """``--specialist-lora DIR`` (generate, evaluate, bench); ``per_record``: more help (evaluate's per-record)."""
    parser.add_argument(
        "--specialist-lora",
        default=None,
        metavar="DIR",
        help="the Edge's Specialist with this LoRA adapter (specsteer lora train) merged in; transformers "
        "runtime only (auto picks it). The Cloud's generic copy stays the base model" + per_record,
    )


def prompt_style_argument(parser: argparse.ArgumentParser) -> None:
    """``--prompt-style``, as generate and evaluate read it."""
    from specsteer.data.tasks import DEFAULT_PROMPT_STYLE, PROMPT_STYLES

    parser.add_argument(
        "--prompt-style",
        choices=PROMPT_STYLES,
        default=DEFAULT_PROMPT_STYLE,
        help="paper: the paper's Table 13 templates (default, comparable); clean: the retrieved "
        "texts without their field labels, and an instruction to write only the text (the app's persona default)",
    )


def p3_arguments(parser: argparse.ArgumentParser) -> None:
    """P³'s two settings (method p3; specsteer.method.p3), for generate, evaluate and bench alike."""
    from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU

    parser.add_argument(
        "--p3-draft-len",
        type=int,
        default=DEFAULT_DRAFT_LEN,
        metavar="K",
        help="P³: tokens the Cloud drafts per round (default: %(default)s, the public code's)",
    )
    parser.add_argument(
        "--p3-tau",
        type=float_argument,
        default=DEFAULT_TAU,
        metavar="TAU",
        help="P³: the Edge keeps a Cloud draft while p(draft) / max p >= TAU, in [0, 1] (default: %(default)s)",
    )


def p3_params(args):
    """The P3Params of ``p3_arguments``' values."""
    from specsteer.method.p3 import P3Params

    return P3Params(args.p3_draft_len, args.p3_tau)


def acceptance_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """SpecSteer's acceptance rule (specsteer.method.acceptance), for generate, evaluate and bench alike: the fixed
    α (the paper's), or CDA, α·exp(−λ·JSD(p_L, p_S0)) per draft; ``several``: a grid or benchmark may run both,
    and several λ (each its own point)."""
    parser.add_argument(
        "--acceptance",
        choices=("fixed", "cda", "fixed,cda") if several else ("fixed", "cda"),
        metavar="fixed|cda|fixed,cda" if several else "fixed|cda",  # argparse's own list would repeat the comma
        default="fixed",
        help="SpecSteer's acceptance threshold: fixed (α, the paper's), or cda (α adapted per draft to the "
        "divergence of the Cloud's two models: α·exp(−λ·JSD(p_L, p_S0)), computed on the Cloud)"
        + ("; fixed,cda runs both" if several else ""),
    )
    parser.add_argument(
        "--cda-lambda",
        type=_float_list if several else float_argument,
        default=(1.0,) if several else 1.0,
        metavar="λ" + (",..." if several else ""),
        help="CDA's λ, >= 0 (default 1, AsymSpec's): α is lowered to at most α·2^−λ where the two models "
        "disagree most" + ("; comma-separated for several" if several else ""),
    )


def _float_list(text: str) -> tuple[float, ...]:
    values = tuple(float_argument(part) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    return values


def acceptance_rules(args) -> list[float | None]:
    """The rules ``acceptance_arguments``' values name, as the engine does: None for the fixed α, λ for CDA."""
    rules = args.acceptance.split(",")
    lambdas = args.cda_lambda if isinstance(args.cda_lambda, tuple) else (args.cda_lambda,)
    return [None] * ("fixed" in rules) + (list(lambdas) if "cda" in rules else [])
