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
GGUF's metadata by llama.cpp) with arbitrary weights in the dtype this machine would run (a matrix product costs the same whatever its values), so
calibration never waits for the one-time GGUF conversion. It is skipped where this CPU has no fast bf16
(no AVX512-BF16, no AMX): transformers would run fp32 there, which measured 3.9x slower than llama.cpp
end to end (docs/research/MEASUREMENTS.md), so nothing can be gained and a minute of set-up would be lost.

Where it is skipped for lack of fast bf16, one thing is still timed (:class:`PromptReading`): the
Specialist reading a long prompt on llama.cpp and on transformers fp32. Where transformers reads it at
least HANDOFF_MARGIN times faster, ``auto`` keeps llama.cpp for every stream and has the Specialist's long
prompts read by its fp32 conversion, handing the keys and values over (specsteer.runtimes.prompt_handoff):
the first token at the faster reader's pace, the decoding at llama.cpp's.

The numbers are kept per CPU, build and pairing. :func:`estimate` turns them into the seconds of a
reference request for one method -- the DESIGN §6 bound for the speculative ones -- and
:func:`choose` picks the runtime with the fewer seconds, with the reason in words.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from specsteer.method.catalog import method_info

K = 4  # the draft length timed; SpecSteer's default
PROMPT_TOKENS = 256
REPEATS = 3
# The reference request the estimate is for: the default sample's prompts and a demo-length answer.
PRIVATE_PROMPT_TOKENS = 825  # the Specialist's prompt with retrieved history
PLAIN_PROMPT_TOKENS = 180  # the task alone (Generalist, generic copy)
NEW_TOKENS = 128
ASSUMED_ACCEPTANCE = 0.8  # per-token acceptance of the offline pair at α = 0.1 (measured 0.78-0.86)


@dataclass(frozen=True)
class ModelTiming:
    model: str
    prompt_tok_s: float
    step_s: float
    verify_s: float  # one pass over K + 1 tokens, every row's logits

    def prompt_s(self, tokens: int) -> float:
        return tokens / self.prompt_tok_s


@dataclass(frozen=True)
class RuntimeTiming:
    runtime: str
    precision: str
    specialist: ModelTiming
    generalist: ModelTiming
    detail: str = ""  # e.g. llama.cpp's configuration and buffer types


HANDOFF_MARGIN = 1.15  # transformers must read prompts this much faster for the hand-off (2 GB more, a copy)
HANDOFF_PROMPT_TOKENS = 512  # a long private prompt's share read in one timing (the reference is 825)


@dataclass(frozen=True)
class PromptReading:
    """The Specialist reading one long prompt on each runtime, where the runtimes are not compared whole."""

    tokens: int
    llamacpp_tok_s: float
    transformers_tok_s: float  # fp32: what the Specialist's conversion computes in on this CPU

    @property
    def handoff(self) -> bool:
        return self.transformers_tok_s >= HANDOFF_MARGIN * self.llamacpp_tok_s

    def reason(self) -> str:
        verdict = "read by transformers fp32 and handed to llama.cpp" if self.handoff else "read by llama.cpp"
        return (
            f"the Specialist's long prompts are {verdict} (measured here: {self.transformers_tok_s:.0f} against "
            f"{self.llamacpp_tok_s:.0f} tok/s over {self.tokens} tokens)"
        )


@dataclass(frozen=True)
class Calibration:
    key: str
    cpu: str
    pairing: str
    timings: tuple[RuntimeTiming, ...]
    skipped: tuple[str, ...]  # one sentence per runtime not measured, saying why
    seconds: float  # what the calibration itself took
    prompt_reading: PromptReading | None = None  # timed where the runtimes are not compared whole

    def timing(self, runtime: str) -> RuntimeTiming | None:
        return next((t for t in self.timings if t.runtime == runtime), None)

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
    # "transformers": the Specialist's long prompts are read by its fp32 conversion and handed to llama.cpp
    # (a llama.cpp choice only, where PromptReading measured it faster); "" for none
    prompt_reader: str = ""


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


def _median_seconds(action, repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _warmed_ids(model, count: int, seed: int) -> list[int]:
    """``count`` random token ids for timing ``model``, after one short warm-up read: first-call costs
    (thread pools, kernel selection) stay out of the numbers."""
    import numpy as np

    ids = np.random.default_rng(seed).integers(100, min(model.output_rows, 20_000), count).tolist()
    warm = model.new_sequence(16)
    warm.extend(ids[:8], 1)
    warm.close()
    return ids


def time_model(model, name: str) -> ModelTiming:
    """Prompt, step and verification costs of one loaded ModelRuntime (its sequence interface)."""

    ids = _warmed_ids(model, PROMPT_TOKENS + 2 * (K + 1) + 8, seed=0)
    sequence = model.new_sequence(len(ids) + 8)
    try:
        started = time.perf_counter()
        sequence.extend(ids[:PROMPT_TOKENS], 1)
        prompt_s = time.perf_counter() - started
        position = iter(ids[PROMPT_TOKENS:])
        step_s = _median_seconds(lambda: sequence.extend([next(position)], 1))
        base = len(sequence.tokens)
        draft = ids[-(K + 1) :]

        def verify() -> None:
            sequence.extend(draft, K + 1)
            sequence.crop(base)

        verify_s = _median_seconds(verify)
    finally:
        sequence.close()
    return ModelTiming(name, PROMPT_TOKENS / prompt_s, step_s, verify_s)


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


def config_from_gguf_metadata(metadata: dict[str, str]):
    """A transformers config with the architecture and sizes a GGUF file declares (its weights aside)."""
    from transformers import AutoConfig

    arch = metadata["general.architecture"]

    def number(key: str, kind=int):
        return kind(float(metadata[f"{arch}.{key}"]))

    sizes = dict(
        hidden_size=number("embedding_length"),
        intermediate_size=number("feed_forward_length"),
        num_hidden_layers=number("block_count"),
        num_attention_heads=number("attention.head_count"),
        num_key_value_heads=number("attention.head_count_kv"),
        vocab_size=int(metadata["n_vocab"]),
        max_position_embeddings=number("context_length"),
        rms_norm_eps=number("attention.layer_norm_rms_epsilon", float),
    )
    if f"{arch}.attention.key_length" in metadata:
        sizes["head_dim"] = number("attention.key_length")
    return AutoConfig.for_model(arch, **sizes)


def random_twin(metadata: dict[str, str], dtype):
    """A transformers model with the GGUF's architecture and sizes and arbitrary weights (timing only)."""
    import torch
    from transformers import AutoModelForCausalLM

    from specsteer.runtimes.attention import use_packed_gqa

    config = config_from_gguf_metadata(metadata)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model = model.to_empty(device="cpu")
    # Small values tiled from one random block: as fast to compute with as trained weights (no denormals,
    # nothing infinite), and seconds faster than drawing a random number per weight.
    block = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 0.02).to(dtype)
    with torch.no_grad():
        for tensor in model.parameters():
            if tensor.numel():
                flat = tensor.view(-1)
                whole = flat.numel() // block.numel() * block.numel()
                flat[:whole].view(-1, block.numel()).copy_(block.expand(whole // block.numel(), -1))
                flat[whole:].copy_(block[: flat.numel() - whole])
    # The rotary frequencies were made on the meta device (to_empty left garbage): make them for real.
    model.model.rotary_emb = type(model.model.rotary_emb)(config)
    use_packed_gqa(model)
    return model.eval()


def _transformers_timing(pairing, dtype_name: str, shapes: list[dict[str, str]]) -> RuntimeTiming:
    from specsteer.runtimes.base import TransformersModel
    from specsteer.runtimes.hardware import resolve_dtype

    dtype = resolve_dtype(dtype_name)
    timings = []
    for spec, metadata in zip((pairing.specialist, pairing.generalist), shapes):
        model = TransformersModel(random_twin(metadata, dtype), spec.name)
        timings.append(time_model(model, spec.name))
        del model
    return RuntimeTiming("transformers", dtype_name, timings[0], timings[1], "arbitrary weights of the same shapes")


def _prompt_rate(model, tokens: int) -> float:
    """Tokens per second of ``model`` reading a ``tokens``-token prompt into a fresh sequence (median of 2)."""
    ids = _warmed_ids(model, tokens, seed=1)

    def read() -> None:
        sequence = model.new_sequence(tokens + 8)
        try:
            sequence.extend(ids, 1)
        finally:
            sequence.close()

    return tokens / _median_seconds(read, repeats=2)


def _prompt_reading(pairing) -> PromptReading:
    """The Specialist's prompt reading on llama.cpp (its GGUF) and transformers fp32 (same shapes)."""
    import torch

    from specsteer.models.weights import gguf_path
    from specsteer.runtimes import llamacpp
    from specsteer.runtimes.base import TransformersModel

    spec = pairing.specialist
    model = llamacpp.LlamaCppModel(gguf_path(spec), name=spec.name)
    try:
        llamacpp_rate = _prompt_rate(model, HANDOFF_PROMPT_TOKENS)
        shape = {**model.metadata(), "n_vocab": str(model.output_rows)}
    finally:
        model.close()
    twin = TransformersModel(random_twin(shape, torch.float32), spec.name)
    return PromptReading(HANDOFF_PROMPT_TOKENS, llamacpp_rate, _prompt_rate(twin, HANDOFF_PROMPT_TOKENS))


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
    from specsteer.models.registry import PAIRINGS
    from specsteer.models.weights import prepared_ggufs
    from specsteer.runtimes import llamacpp
    from specsteer.runtimes.hardware import default_dtype, read_cpu

    pairing = PAIRINGS[pairing_id]
    started = time.monotonic()
    timings, skipped, reading = [], [], None
    usable, reason = llamacpp.status(prepared_ggufs((pairing.specialist, pairing.generalist)))
    dtype = default_dtype()
    if not usable:
        # Nothing to choose between: auto runs transformers wherever llama.cpp does not work.
        skipped.append(f"llama.cpp is unavailable: {reason}")
    elif dtype != "bf16":
        skipped.append(
            "runtimes not compared whole: this CPU has no fast bf16 (no AVX512-BF16, no AMX), so transformers "
            "would run fp32, measured several times slower than llama.cpp at decoding on such CPUs; auto runs "
            "llama.cpp"
        )
        say("timing the Specialist's prompt reading on llama.cpp and transformers fp32…")
        reading = _prompt_reading(pairing)
    else:
        say("timing llama.cpp…")
        timing, shapes = _llamacpp_timing(pairing)
        timings.append(timing)
        say(f"timing transformers ({dtype}, arbitrary weights of the same shapes)…")
        timings.append(_transformers_timing(pairing, dtype, shapes))
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
    if calibration.prompt_reading is not None:
        lines.append(f"  prompt reading: {calibration.prompt_reading.reason()}")
    usable = tuple(t.runtime for t in calibration.timings)
    for method in METHODS:
        choice = choose(calibration, method, usable)
        if choice is not None:
            estimates = ", ".join(f"{t.runtime} {estimate(t, method):.1f} s" for t in calibration.timings)
            lines.append(f"  auto for {method:13s} -> {choice.runtime:12s} ({estimates})")
    return "\n".join(lines)
