"""Who reads the Specialist's long private prompt fastest on this CPU: llama.cpp, or transformers in fp32 or bf16.

SpecSteer's first visible token waits for the Specialist to read the private prompt; its decoding is fastest on
llama.cpp's 4-bit kernels. Where transformers reads prompts faster, it reads the private prompt and hands the
keys and values to llama.cpp (specsteer.runtimes.prompt_handoff), which decodes from there. The calibration
(specsteer.models.calibration) times the readers once, here, on the Specialist's shapes:

* llama.cpp on the Specialist's GGUF file;
* transformers fp32 (arbitrary weights of the same shapes): its products are exact on every x86 CPU;
* transformers bf16, in a **child process**. bf16 is fast only where the CPU's matrix units compute it
  (AVX512-BF16, AMX: measured 449 against llama.cpp's 259 tok/s on an AVX512-BF16 EPYC); elsewhere torch
  emulates it (2.7x and 6x slower than fp32, measured on a busy AVX2 EPYC). A flag says what a CPU claims,
  not what this build of torch does with it, and a native kernel may crash on a CPU it was not built for
  (llama.cpp's AMX kernels do on some Xeons: specsteer.runtimes.llamacpp_probe), so bf16 is proven by running
  it where a crash cannot take the caller down. The child reads a short prompt first and stops there when bf16 is
  clearly slower than fp32 (seconds on an AVX2 CPU, not minutes), and checks that bf16's logits are those
  the same weights compute in fp32 (a kernel that runs but computes garbage is no reader).

The faster transformers reader is the candidate; :attr:`PromptReading.handoff` holds where it reads at least
HANDOFF_MARGIN times faster than llama.cpp.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

HANDOFF_MARGIN = 1.15  # transformers must read prompts this much faster for the hand-off (more memory, a copy)
HANDOFF_PROMPT_TOKENS = 512  # a long private prompt's share read in one timing (the reference is 825)
BF16_PROBE_TOKENS = 64  # the child's first read: where bf16 is below half fp32's rate there, it stops
BF16_AGREEMENT = 0.99  # cosine similarity of bf16's logits row to fp32's on the same weights
BF16_TIMEOUT_S = 600


@dataclass(frozen=True)
class PromptReading:
    """The Specialist reading one long prompt on llama.cpp and on its faster transformers reader."""

    tokens: int
    llamacpp_tok_s: float
    transformers_tok_s: float  # the faster transformers reader's rate
    dtype: str = "fp32"  # what that reader computes in (calibrations saved before bf16 was tried: fp32)
    alternative: str = ""  # how the other dtype fared, in words ("" where it was not tried)

    @property
    def handoff(self) -> bool:
        return self.transformers_tok_s >= HANDOFF_MARGIN * self.llamacpp_tok_s

    def reason(self) -> str:
        verdict = f"read by transformers {self.dtype} and handed to llama.cpp" if self.handoff else "read by llama.cpp"
        other = f"; {self.alternative}" if self.alternative else ""
        return (
            f"the Specialist's long prompts are {verdict} (measured here: {self.transformers_tok_s:.0f} against "
            f"{self.llamacpp_tok_s:.0f} tok/s over {self.tokens} tokens{other})"
        )


@dataclass(frozen=True)
class Bf16Outcome:
    """What the child process found: bf16's rate where it ran and agreed with fp32, else None and why."""

    tok_s: float | None
    detail: str


def measure_prompt_reading(pairing, say=print) -> PromptReading:
    """The Specialist's prompt reading on llama.cpp, transformers fp32 and (in a child process) bf16."""
    import torch

    from specsteer.models.model_timing import prompt_rate, random_twin
    from specsteer.models.weights import gguf_path
    from specsteer.runtimes import llamacpp
    from specsteer.runtimes.base import TransformersModel

    spec = pairing.specialist
    model = llamacpp.LlamaCppModel(gguf_path(spec), name=spec.name)
    try:
        llamacpp_rate = prompt_rate(model, HANDOFF_PROMPT_TOKENS)
        shape = {**model.metadata(), "n_vocab": str(model.output_rows)}
    finally:
        model.close()
    twin = TransformersModel(random_twin(shape, torch.float32), spec.name)
    fp32_rate = prompt_rate(twin, HANDOFF_PROMPT_TOKENS)
    del twin
    say(f"  llama.cpp {llamacpp_rate:.0f} tok/s, transformers fp32 {fp32_rate:.0f}; trying bf16 in a child process…")
    bf16 = bf16_reading(shape, HANDOFF_PROMPT_TOKENS, fp32_rate)
    say(f"  bf16: {bf16.detail}")
    return pick_reader(HANDOFF_PROMPT_TOKENS, llamacpp_rate, fp32_rate, bf16)


def pick_reader(tokens: int, llamacpp_tok_s: float, fp32_tok_s: float, bf16: Bf16Outcome) -> PromptReading:
    """bf16 where it ran, agreed with fp32 and read faster; fp32 elsewhere."""
    if bf16.tok_s is not None and bf16.tok_s > fp32_tok_s:
        return PromptReading(tokens, llamacpp_tok_s, bf16.tok_s, "bf16", f"fp32 {fp32_tok_s:.0f} tok/s")
    return PromptReading(tokens, llamacpp_tok_s, fp32_tok_s, "fp32", f"bf16 {bf16.detail}")


def bf16_reading(shape: dict[str, str], tokens: int, fp32_tok_s: float, timeout: float = BF16_TIMEOUT_S) -> Bf16Outcome:
    """bf16 reading the Specialist's shapes, timed in a child process (specsteer.models.bf16_reading_child)."""
    from specsteer.runtimes.llamacpp_probe import signal_name

    probe = min(BF16_PROBE_TOKENS, tokens)
    request = {"metadata": shape, "tokens": tokens, "probe_tokens": probe, "floor_tok_s": fp32_tok_s / 2}
    try:
        done = subprocess.run(
            child_command(), input=json.dumps(request), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return Bf16Outcome(None, f"gave no answer within {timeout:.0f} s in a child process")
    if done.returncode < 0:
        return Bf16Outcome(None, f"crashed with {signal_name(done.returncode)} in a child process")
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.strip().splitlines()) if line.strip()), "no message")
        return Bf16Outcome(None, f"failed in a child process: {last.strip()[:300]}")
    return bf16_outcome(json.loads(done.stdout.strip().splitlines()[-1]), tokens, fp32_tok_s)


def child_command() -> list[str]:
    return [sys.executable, "-m", "specsteer.models.bf16_reading_child"]


def bf16_outcome(result: dict, tokens: int, fp32_tok_s: float) -> Bf16Outcome:
    """The child's report judged: agreement with fp32 first, then the rate over the whole prompt."""
    rate, read, cosine = float(result["tok_s"]), int(result["tokens"]), float(result["cosine"])
    if not cosine >= BF16_AGREEMENT:  # NaN included
        return Bf16Outcome(None, f"computed logits unlike fp32's on the same weights (cosine {cosine:.3f})")
    if read < tokens:
        return Bf16Outcome(None, f"{rate:.0f} tok/s over {read} tokens, under half fp32's {fp32_tok_s:.0f}: stopped")
    verdict = "faster" if rate > fp32_tok_s else "not faster"
    return Bf16Outcome(rate, f"{rate:.0f} tok/s, {verdict} than fp32's {fp32_tok_s:.0f}, proven in a child process")
