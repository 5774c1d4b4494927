"""What decoding costs on this machine, per runtime, measured once: the numbers ``--runtime auto`` picks by.

Which runtime is faster depends on the CPU, and not the same way for every part of a generation.
Decoding reads every weight once per step, so it is bound by memory bandwidth, and llama.cpp's 4-bit
weights win; reading a long prompt is bound by compute, and on a CPU with AMX or AVX512-BF16, torch's
bf16 matrix kernels can read it faster than llama.cpp's 4-bit ones. SpecSteer's first token waits for
the Specialist to read the whole private prompt, so the faster runtime for ``llm`` need not be the
faster one for ``specsteer``. Rather than guess from CPU flags, each runtime that works here is timed
on the default pairing's shapes:

* ``prompt_tok_s``: a 256-token prompt chunk, tokens per second;
* ``step_s``: one decode step (one token in, one logits row out);
* ``verify_s``: one (k+1)-token pass with a logits row for every token (a verification).

For the transformers runtime the timing uses a model of the same architecture and sizes (read from the
GGUF's metadata by llama.cpp) with arbitrary weights (a matrix product costs the same whatever its values), so
calibration never waits for the one-time GGUF conversion (specsteer.models.model_timing).

First, wherever llama.cpp works, the Specialist's prompt reading is timed (:class:`PromptReading`,
specsteer.models.prompt_reading): llama.cpp against transformers fp32 and bf16, bf16 in a child process,
never assumed from the CPU's flags. Where the faster transformers reader reads at least HANDOFF_MARGIN times
faster than llama.cpp, the Specialist's long prompts are read by it and handed to llama.cpp
(specsteer.runtimes.prompt_handoff): the first token at the faster reader's pace, the decoding at llama.cpp's.
The runtimes are then compared whole only where bf16 proved faster than fp32 (AVX512-BF16, AMX): elsewhere
transformers would run fp32, which measured 3.9x slower than llama.cpp end to end
(docs/research/MEASUREMENTS.md), so nothing can be gained and minutes of set-up would be lost.

The numbers are kept per CPU, build and pairing. :func:`estimate` turns them into the seconds of a
reference request for one method -- the DESIGN §6 bound for the speculative ones -- and
:func:`choose` picks the runtime with the fewer seconds, with the reason in words.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from specsteer.method.catalog import method_info
from specsteer.models.model_timing import PROMPT_TOKENS, K, ModelTiming, time_model
from specsteer.models.prompt_reading import PromptReading

# The reference request the estimate is for: the default sample's prompts and a demo-length answer.
PRIVATE_PROMPT_TOKENS = 825  # the Specialist's prompt with retrieved history
PLAIN_PROMPT_TOKENS = 180  # the task alone (Generalist, generic copy)
NEW_TOKENS = 128
ASSUMED_ACCEPTANCE = 0.8  # per-token acceptance of the offline pair at α = 0.1 (measured 0.78-0.86)


@dataclass(frozen=True)
class RuntimeTiming:
    runtime: str
    precision: str
    specialist: ModelTiming
    generalist: ModelTiming
    detail: str = ""  # e.g. llama.cpp's configuration and buffer types


@dataclass(frozen=True)
class Calibration:
    key: str
    cpu: str
    pairing: str
    timings: tuple[RuntimeTiming, ...]
    skipped: tuple[str, ...]  # one sentence per runtime not measured, saying why
    seconds: float  # what the calibration itself took
    prompt_reading: PromptReading | None = None  # timed wherever llama.cpp works (before: only without fast bf16)

    def timing(self, runtime: str) -> RuntimeTiming | None:
        return next((t for t in self.timings if t.runtime == runtime), None)

    def reading(self) -> PromptReading | None:
        """The Specialist's prompt reading, transformers against llama.cpp: timed on its own, or, in a calibration
        saved before that was timed beside the whole comparison, the comparison's own prompt reads."""
        if self.prompt_reading is not None:
            return self.prompt_reading
        llama, torch = self.timing("llama.cpp"), self.timing("transformers")
        if llama is None or torch is None:
            return None
        return PromptReading(
            PROMPT_TOKENS, llama.specialist.prompt_tok_s, torch.specialist.prompt_tok_s, torch.precision
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        raw = json.loads(text)
        timings = tuple(
            RuntimeTiming(
                t["runtime"],
                t["precision"],
                ModelTiming(**t["specialist"]),
                ModelTiming(**t["generalist"]),
                t.get("detail", ""),
            )
            for t in raw["timings"]
        )
        reading = raw.get("prompt_reading")  # absent from calibrations saved before it was timed
        return cls(
            raw["key"],
            raw["cpu"],
            raw["pairing"],
            timings,
            tuple(raw["skipped"]),
            raw["seconds"],
            PromptReading(**reading) if reading else None,
        )


@dataclass(frozen=True)
class RuntimeChoice:
    runtime: str
    reason: str  # one sentence for the runtime note, `pairings` and a generation's statistics
    calibrated: bool = False  # chosen from this machine's measured costs (then a per-stream plan may refine it)
    # "transformers": the Specialist's long prompts are read by its conversion and handed to llama.cpp
    # (a llama.cpp choice only, where PromptReading measured it faster); "" for none
    prompt_reader: str = ""
    reader_dtype: str = ""  # what the prompt reader computes in: "fp32" or "bf16" ("" without a reader)


# --------------------------------------------------------------------------- estimating


def _speculative_bound(small: ModelTiming, large: ModelTiming) -> float:
    from specsteer.method.costs import speculative_bound

    return speculative_bound(ASSUMED_ACCEPTANCE, K, small.step_s, large.verify_s, small.verify_s)


def estimate(timing: RuntimeTiming, method: str, new_tokens: int = NEW_TOKENS) -> float:
    """Seconds of the reference request (825-token private prompt, 180-token task, ``new_tokens`` new tokens,
    128 unless told) for ``method`` on this runtime: every prompt its streams read, then the decoding."""
    small, large = timing.specialist, timing.generalist
    info = method_info(method)
    if info.models != "both":
        model = small if info.models == "specialist" else large
        return (
            model.prompt_s(PRIVATE_PROMPT_TOKENS if info.reads_history else PLAIN_PROMPT_TOKENS)
            + new_tokens * model.step_s
        )
    # Both models: the Specialist reads the private prompt, the Generalist and the generic copy the task.
    prompts = (
        small.prompt_s(PRIVATE_PROMPT_TOKENS)
        + large.prompt_s(PLAIN_PROMPT_TOKENS)
        + small.prompt_s(PLAIN_PROMPT_TOKENS)
    )
    if info.speculative:
        return prompts + new_tokens / _speculative_bound(small, large)
    # Token-level steering: every token costs a step of each of the three streams.
    return prompts + new_tokens * (2 * small.step_s + large.step_s)


def request_estimate(pairing_id: str, runtime: str, method: str, new_tokens: int) -> float | None:
    """Seconds :func:`estimate` gives ``method`` with ``new_tokens`` on ``runtime`` from this machine's saved
    calibration of the pairing; None when it was not calibrated here, or not on that runtime."""
    calibration = saved_calibration(pairing_id)
    if calibration is None:
        return None
    timing = next((t for t in calibration.timings if t.runtime == runtime), None)
    return estimate(timing, method, new_tokens) if timing is not None else None


def choose(calibration: Calibration, method: str, usable: tuple[str, ...]) -> RuntimeChoice | None:
    """The measured runtime among ``usable`` with the fewest estimated seconds for ``method``."""
    measured = [t for t in calibration.timings if t.runtime in usable]
    if not measured:
        return None
    costs = {t.runtime: estimate(t, method) for t in measured}
    best = min(costs, key=lambda runtime: costs[runtime])
    if len(costs) == 1:
        reason = (
            f"{best} is the only runtime measured on this machine "
            f"({calibration.skipped[0] if calibration.skipped else 'the other is unavailable'})"
        )
    else:
        others = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in costs.items() if name != best)
        reason = (
            f"{best} is estimated fastest for {method} on this machine from its measured costs: "
            f"{costs[best]:.1f} s for a reference request against {others}"
        )
    return RuntimeChoice(best, reason, calibrated=True)


# --------------------------------------------------------------------------- measuring


def _llamacpp_timing(pairing) -> tuple[RuntimeTiming, list[dict[str, str]]]:
    """llama.cpp's costs, and each model's GGUF metadata (the shapes the transformers timing copies)."""
    from specsteer.models.weights import gguf_path
    from specsteer.runtimes import llamacpp

    models = [
        llamacpp.LlamaCppModel(gguf_path(spec), name=spec.name) for spec in (pairing.specialist, pairing.generalist)
    ]
    try:
        small, large = (time_model(model, model.name) for model in models)
        buffers = sorted({b for model in models for b in model.buffer_types})
        shapes = [{**model.metadata(), "n_vocab": str(model.output_rows)} for model in models]
        return RuntimeTiming(
            "llama.cpp",
            models[1].precision,
            small,
            large,
            f"configuration {models[0].configuration}, buffers {'+'.join(buffers) or '?'}",
        ), shapes
    finally:
        for model in models:
            model.close()


def _transformers_timing(pairing, dtype_name: str, shapes: list[dict[str, str]]) -> RuntimeTiming:
    from specsteer.models.model_timing import random_twin
    from specsteer.runtimes.base import TransformersModel
    from specsteer.runtimes.hardware import resolve_dtype

    dtype = resolve_dtype(dtype_name)
    timings = []
    for spec, metadata in zip((pairing.specialist, pairing.generalist), shapes):
        model = TransformersModel(random_twin(metadata, dtype), spec.name)
        timings.append(time_model(model, spec.name))
        del model
    return RuntimeTiming("transformers", dtype_name, timings[0], timings[1], "arbitrary weights of the same shapes")


def calibration_key(pairing_id: str) -> str:
    from importlib import metadata

    from specsteer.runtimes.hardware import cpu_key
    from specsteer.runtimes.llamacpp_probe import build_key

    versions = []
    for name in ("torch", "transformers"):
        try:
            versions.append(metadata.version(name))
        except metadata.PackageNotFoundError:
            versions.append("-")
    text = "|".join([cpu_key(), build_key(), pairing_id, *versions, str(K), str(PROMPT_TOKENS)])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def calibration_path(pairing_id: str) -> Path:
    from specsteer.util.paths import cache_root

    return cache_root() / "calibration" / f"{calibration_key(pairing_id)}.json"


def saved_calibration(pairing_id: str) -> Calibration | None:
    try:
        return Calibration.from_json(calibration_path(pairing_id).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def calibrate(pairing_id: str, say=print) -> Calibration:
    """Time every runtime that works here on ``pairing_id``'s models, and save the result."""
    from specsteer.models.prompt_reading import measure_prompt_reading
    from specsteer.models.registry import PAIRINGS
    from specsteer.models.weights import prepared_ggufs
    from specsteer.runtimes import llamacpp_build
    from specsteer.runtimes.hardware import read_cpu

    pairing = PAIRINGS[pairing_id]
    started = time.monotonic()
    timings, skipped, reading = [], [], None
    usable, reason = llamacpp_build.status(prepared_ggufs((pairing.specialist, pairing.generalist)))
    if not usable:
        # Nothing to choose between: auto runs transformers wherever llama.cpp does not work.
        skipped.append(f"llama.cpp is unavailable: {reason}")
    else:
        say("timing the Specialist's prompt reading: llama.cpp, transformers fp32, and bf16 in a child process…")
        reading = measure_prompt_reading(pairing, say)
    if reading is not None and reading.dtype != "bf16":
        skipped.append(
            f"runtimes not compared whole: bf16 is not fast here ({reading.alternative}), so transformers would "
            "run fp32, measured several times slower than llama.cpp at decoding on such CPUs; auto runs llama.cpp"
        )
    elif reading is not None:
        say("timing llama.cpp…")
        timing, shapes = _llamacpp_timing(pairing)
        timings.append(timing)
        say("timing transformers (bf16, proven fast here; arbitrary weights of the same shapes)…")
        timings.append(_transformers_timing(pairing, "bf16", shapes))
    result = Calibration(
        calibration_key(pairing_id),
        read_cpu()[0],
        pairing_id,
        tuple(timings),
        tuple(skipped),
        time.monotonic() - started,
        reading,
    )
    target = calibration_path(pairing_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_text(result.to_json())
    partial.replace(target)
    return result


def describe(calibration: Calibration) -> str:
    from specsteer.method.catalog import METHODS

    lines = [f"calibration of {calibration.pairing} on {calibration.cpu} ({calibration.seconds:.0f} s):"]
    for timing in calibration.timings:
        for role, model in (("Specialist", timing.specialist), ("Generalist", timing.generalist)):
            lines.append(
                f"  {timing.runtime:12s} {timing.precision:7s} {role:10s} prompt {model.prompt_tok_s:7.1f} tok/s, "
                f"step {model.step_s * 1000:6.1f} ms, {K + 1}-token pass {model.verify_s * 1000:6.1f} ms"
            )
        if timing.detail:
            lines.append(f"  {timing.runtime:12s} {timing.detail}")
    lines.extend(f"  skipped: {line}" for line in calibration.skipped)
    reading = calibration.reading()
    if reading is not None:
        lines.append(f"  prompt reading: {reading.reason()}")
    usable = tuple(t.runtime for t in calibration.timings)
    for method in METHODS:
        choice = choose(calibration, method, usable)
        if choice is not None:
            estimates = ", ".join(f"{t.runtime} {estimate(t, method):.1f} s" for t in calibration.timings)
            lines.append(f"  auto for {method:13s} -> {choice.runtime:12s} ({estimates})")
    return "\n".join(lines)
