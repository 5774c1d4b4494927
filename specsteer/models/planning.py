"""The one place a load's runtimes are decided: :func:`runtime_plan` turns a pairing, the runtime asked for,
the adapters and what this machine is into a :class:`~specsteer.models.runtime_plan.RuntimePlan`, which
``specsteer.models.loading`` executes without deciding anything.

The plan says which runtime runs the Specialist pair (the Specialist and its generic copy, always together)
and which the Generalist, who reads the Specialist's long prompts (the hand-off to llama.cpp, and in which
dtype), where an adapter runs (transformers only), what to load instead where auto's split turns out to be
refused, and why, in words; :meth:`RuntimePlan.models` lists the files each stream reads. What it reads of
the machine (:class:`Machine`): whether a GPU is present, whether llama.cpp passed its child-process check
here (specsteer.runtimes.llamacpp_probe), this CPU's calibration (specsteer.models.calibration), and whether
the transformers conversion is made already (only to say that a first load makes it).

``requested`` is "auto", a runtime's name, or an explicit split "A/B" (the Specialist pair on A, the
Generalist on B). A name is honoured or refused (ModelLoadError naming why); "auto" takes transformers for
models that are not GGUF files and wherever a GPU is present, llama.cpp where it works and nothing was
measured, and otherwise the plan this machine's calibration estimates cheapest (specsteer.models.runtime_plan):
one runtime, a split, or llama.cpp with its long prompts read by transformers -- never a split assumed
without a measurement.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from specsteer.models.calibration import RuntimeChoice
from specsteer.models.lora import LORA_RUNTIME_MESSAGE, LORA_RUNTIME_REASON, LoraError
from specsteer.models.registry import Pairing, converted_cache_ready, cross_tokenizer_message
from specsteer.models.runtime_plan import RuntimePlan, plan_streams
from specsteer.models.weights import ModelLoadError, Progress, gguf_path, prepared_ggufs, quiet
from specsteer.runtimes import llamacpp_build
from specsteer.runtimes.base import RUNTIME_CHOICES, RUNTIMES, check_runtime, parse_split

if TYPE_CHECKING:
    from specsteer.models.calibration import Calibration

CROSS_RUNTIME_NOTE = "a pair of two tokenizers runs both models on one runtime, chosen without calibration"


class Machine:
    """What a plan reads of the machine it is made on, each fact only where the plan needs it (llama.cpp's
    check starts child processes the first time it runs here). A test gives another machine's facts."""

    def gpu(self) -> bool:
        import torch

        return torch.cuda.is_available()

    def llamacpp(self, pairing: Pairing) -> tuple[bool, str]:
        """(works here, why): the check runs on the pairing's GGUF files when it has not run here yet."""
        return llamacpp_build.status(prepared_ggufs((pairing.specialist, pairing.generalist)))

    def calibration(self, pairing: Pairing) -> Calibration | None:
        from specsteer.models import calibration

        return calibration.saved_calibration(pairing.id)

    def converted(self, pairing: Pairing) -> bool:
        return converted_ready(pairing)


THIS_MACHINE = Machine()


def runtime_plan(
    pairing: Pairing,
    requested: str = "auto",
    progress: Progress | None = None,
    method: str = "specsteer",
    lora: bool = False,
    machine: Machine = THIS_MACHINE,
) -> RuntimePlan:
    """The plan of loading ``pairing`` for ``method`` on ``requested`` (see the module's text); ``lora``: the
    Specialist carries an adapter (:func:`lora_plan`). ``progress`` hears what a first load will do beside
    loading (a conversion) and why llama.cpp is not used where it was wanted."""
    if pairing.cross_tokenizer:
        raise ModelLoadError(cross_tokenizer_message(pairing))
    if lora:
        return lora_plan(requested)
    report = progress or quiet
    split = parse_split(requested)
    if split is not None and pairing.separate_tokenizers:
        raise ModelLoadError(
            f"pairing {pairing.id!r} uses two tokenizers: both models run on one runtime (a split passes token "
            f"ids between runtimes, and the two vocabularies share none); choose auto, llama.cpp or transformers "
            f"({requested!r} given)"
        )
    if split is not None:
        if "auto" in split:
            raise ValueError(f"a split runtime names two runtimes, e.g. transformers/llama.cpp ({requested!r} given)")
        check_runtime(requested)
        small, large = (runtime_choice(pairing, part, report, method, machine) for part in split)
        return RuntimePlan(small, large)
    choice = runtime_choice(pairing, requested, report, method, machine)
    if requested != "auto" or not choice.calibrated:
        return RuntimePlan.uniform(choice)
    calibration = machine.calibration(pairing)
    plan = plan_streams(calibration, method, RUNTIMES) if calibration is not None else None
    if plan is None:
        return RuntimePlan.uniform(choice)
    if (
        plan.specialist.runtime == "transformers"
        and choice.runtime != "transformers"
        and not machine.converted(pairing)
    ):
        report(
            "auto runs the Specialist on transformers here (measured faster at reading its private prompt); "
            "its first load converts the GGUF file once, about a minute"
        )
    # A split found refused when the GGUF's vocabulary is read loads on auto's single-runtime choice instead.
    return replace(plan, fallback=RuntimePlan.uniform(choice)) if plan.mixed else plan


def lora_plan(requested: str) -> RuntimePlan:
    """The plan of a pair whose Specialist carries a LoRA adapter: both streams on transformers (the adapter is
    merged into a transformers copy, and the generic copy shares its runtime), or a refusal (LoraError)."""
    if requested in ("auto", "transformers"):
        return replace(RuntimePlan.uniform(RuntimeChoice("transformers", LORA_RUNTIME_REASON)), lora=True)
    if requested == "llama.cpp" or parse_split(requested) is not None:
        raise LoraError(LORA_RUNTIME_MESSAGE)
    raise ValueError(f"unknown runtime {requested!r}; choose one of {', '.join(RUNTIME_CHOICES)}")


def runtime_choice(
    pairing: Pairing,
    requested: str = "auto",
    progress: Progress | None = None,
    method: str = "specsteer",
    machine: Machine = THIS_MACHINE,
) -> RuntimeChoice:
    """The one runtime a pairing loads on for ``method``, and why (what :func:`runtime_plan` refines per stream).

    "auto": transformers for models that are not GGUF files or where a GPU is present; otherwise the runtime
    this machine's calibration estimates fastest for ``method``; llama.cpp when there is no calibration yet
    (its long prompts read by transformers where the calibration measured that faster), and transformers when
    llama.cpp is missing or failed its check here (the progress callback says why). An explicit "llama.cpp"
    that cannot be honoured raises ModelLoadError naming the fallback.
    """
    if requested not in RUNTIME_CHOICES:
        raise ValueError(f"unknown runtime {requested!r}; choose one of {', '.join(RUNTIME_CHOICES)}")
    if requested == "transformers":
        return RuntimeChoice(requested, "transformers was asked for")
    not_gguf = [spec for spec in (pairing.specialist, pairing.generalist) if spec.kind not in ("offline", "gguf")]
    if requested == "llama.cpp":
        if not_gguf:
            gguf_path(not_gguf[0])  # raises the message that names the transformers runtime
        available, reason = machine.llamacpp(pairing)
        if not available:
            raise ModelLoadError(reason)
        return RuntimeChoice(requested, "llama.cpp was asked for")
    if not_gguf:
        return RuntimeChoice("transformers", "these models are not GGUF files, and llama.cpp reads only those")
    if machine.gpu():
        return RuntimeChoice("transformers", "a GPU is present, and transformers runs the models on it")
    available, reason = machine.llamacpp(pairing)
    if not available:
        (progress or quiet)(f"{reason} Using the transformers runtime.")
        return RuntimeChoice("transformers", reason)
    if pairing.separate_tokenizers:
        # Calibration times one pair's runtimes for a shared vocabulary, and a split or a prompt hand-off
        # passes token ids between runtimes: neither applies across tokenizers, so both models go on llama.cpp.
        return RuntimeChoice(
            "llama.cpp", f"both models are GGUF files and llama.cpp passed its check here ({CROSS_RUNTIME_NOTE})"
        )
    from specsteer.models.calibration import choose

    calibration = machine.calibration(pairing)
    choice = choose(calibration, method, RUNTIMES) if calibration is not None else None
    if choice is None:
        return _uncompared(calibration)
    if choice.runtime == "transformers" and not machine.converted(pairing):
        # The first transformers load converts both GGUF files (about a minute each); say so, once.
        (progress or quiet)(
            "auto picks transformers here (measured faster for this method); its first load "
            "converts the GGUF files once, about a minute per model"
        )
    return choice


def _uncompared(calibration: Calibration | None) -> RuntimeChoice:
    """llama.cpp where the runtimes were not compared whole, its long prompts handed over where that was measured
    faster."""
    missing = (
        "; ".join(calibration.skipped)
        if calibration is not None and calibration.skipped
        else "no calibration; run `specsteer calibrate`"
    )
    reason = f"both models are GGUF files and llama.cpp passed its check here ({missing})"
    reading = calibration.reading() if calibration is not None else None
    if reading is not None and reading.handoff:
        return RuntimeChoice("llama.cpp", f"{reason}; {reading.reason()}", False, "transformers", reading.dtype)
    return RuntimeChoice("llama.cpp", reason)


def converted_ready(pairing: Pairing) -> bool:
    return all(
        converted_cache_ready(spec) for spec in (pairing.specialist, pairing.generalist) if spec.kind == "offline"
    )
