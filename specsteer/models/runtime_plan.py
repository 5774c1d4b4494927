"""Which runtime runs each stream of a pairing: the Specialist pair on one, the Generalist on one, and why.

A generation has three model streams: the Edge's Specialist reading the private prompt, the Cloud's generic
copy of the Specialist reading the task alone, and the Cloud's Generalist. On a CPU with AMX or AVX512-BF16
torch's bf16 kernels read prompts several times faster than llama.cpp's 4-bit ones, while llama.cpp's
4-bit steps are faster (specsteer.models.calibration), and the streams do not need the same thing: the
Specialist's long private prompt decides the first visible token, the Generalist's steps and verification
passes decide the throughput. So a pairing may run on two runtimes.

**The Specialist and its generic copy never run apart.** SpecSteer's ratio test divides the Specialist's
probability with the history by the generic copy's without it (p_S+(y) / p_S0(y)): that ratio is meant to
carry the history's effect alone. With one stream on bf16 transformers weights and the other on the 4-bit
GGUF, the ratio would also carry the quantization difference between two weight files -- noise of the
same order as the effect, in every token. So the plan has one choice for the *Specialist pair* (both
streams, one runtime, one weights file) and one for the *Generalist*, whose probabilities are compared
only with the steered mixture it verifies, whatever computes it.

The cost of a plan (runtime a for the Specialist pair, b for the Generalist), from the measured costs of
each model on each runtime, for the calibration's reference request (825-token private prompt, 180-token
task, 128 new tokens), is

    cost(a, b) = first_visible(a, b) + end_to_end(a, b)

* ``first_visible``: when the first token is on screen. A speculative method shows its first pending draft
  once the Specialist has read the private prompt and taken one step; a single-model method its first
  token after its model's prompt and a step; token-level steering needs all three streams' prompts and a
  step of each.
* ``end_to_end``: every prompt the method's streams read, then its decoding, per token (the DESIGN §6 bound
  with the Specialist's steps on a and the Generalist's verification passes on b for speculative methods;
  two Specialist steps and a Generalist step per token for token-level steering) --
  :func:`specsteer.models.calibration.estimate` on the mixed timings.

**A third choice for the Specialist pair: llama.cpp with a prompt reader.** Where the calibration measured the
Specialist's transformers reading (bf16 where the CPU proved it fast, fp32 elsewhere: PromptReading) at least
HANDOFF_MARGIN times faster than llama.cpp's, the pair may run on llama.cpp with its long prompts (256+
tokens) read by transformers and handed over (specsteer.runtimes.prompt_handoff): the private prompt at the
reader's pace, every step and pass at llama.cpp's. Both streams still run one weights file (the GGUF; the
reader is its conversion), and the cost model counts the reader's rate for the long private prompt only.

Counting both is what the user waits for: the first token, and the answer. A method that uses one model
leaves the other stream where its own runs (one runtime, nothing gained by mixing). The plan with the fewest
estimated seconds is taken; on a tie, one runtime. The estimate is the calibration's (a reference request,
an assumed acceptance), so a choice by a few percent is a choice by the model's numbers, and its reason
states them. Without a measurement of both runtimes nothing is chosen here (:func:`plan_streams` returns
None) and the caller keeps its single-runtime choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from itertools import product
from typing import TYPE_CHECKING

from specsteer.method.catalog import method_info
from specsteer.models.calibration import (
    PLAIN_PROMPT_TOKENS,
    PRIVATE_PROMPT_TOKENS,
    Calibration,
    RuntimeChoice,
    RuntimeTiming,
    estimate,
)
from specsteer.models.model_timing import ModelTiming
from specsteer.models.prompt_reading import PromptReading
from specsteer.runtimes.base import parse_split
from specsteer.runtimes.prompt_handoff import HANDOFF_MIN_TOKENS

if TYPE_CHECKING:
    from specsteer.models.registry import ModelSpec, Pairing

SPECIALIST_PAIR = "Specialist and its generic copy"
HANDOFF_LABEL = "+handoff"  # a plan's or pair's label where the Specialist's long prompts are read by transformers


SPECIALIST, GENERALIST, PROMPT_READER = "Specialist", "Generalist", "Specialist's prompt reader"


@dataclass(frozen=True)
class PlannedModel:
    """One model a plan loads: ``runtime`` reads it (llama.cpp: its GGUF file; transformers: its weights, an
    offline model's conversion), in ``dtype`` where the plan fixes one (the prompt reader's; "" for the load's)."""

    role: str  # SPECIALIST, GENERALIST or PROMPT_READER
    spec: ModelSpec
    runtime: str
    dtype: str = ""


@dataclass(frozen=True)
class RuntimePlan:
    """What a load runs, decided once (specsteer.models.planning) and executed by specsteer.models.loading:
    ``specialist`` runs the Specialist and its generic copy (always together: the ratio test), with who reads
    its long prompts; ``generalist`` the Generalist. Each choice carries its reason in words. ``lora``: made
    for a Specialist that carries an adapter (transformers only). ``fallback``: auto's split only, what loads
    instead where the split's two runtimes read token ids differently (found when the GGUF is read)."""

    specialist: RuntimeChoice
    generalist: RuntimeChoice
    lora: bool = False
    fallback: RuntimePlan | None = None

    @classmethod
    def uniform(cls, choice: RuntimeChoice) -> RuntimePlan:
        return cls(choice, choice)

    @property
    def mixed(self) -> bool:
        return self.specialist.runtime != self.generalist.runtime

    @property
    def runtime(self) -> str:
        """One runtime's name, or "Specialist pair's/Generalist's" ("transformers/llama.cpp") when split:
        the spelling ``--runtime`` accepts for an explicit split."""
        return self.specialist.runtime if not self.mixed else f"{self.specialist.runtime}/{self.generalist.runtime}"

    @property
    def reader(self) -> str:
        """ "transformers bf16" where the Specialist's long prompts are read by transformers and handed to
        llama.cpp; "" where its own runtime reads them."""
        choice = self.specialist
        if not choice.prompt_reader or choice.runtime != "llama.cpp":
            return ""
        return f"{choice.prompt_reader} {choice.reader_dtype or 'fp32'}"

    @property
    def label(self) -> str:
        """:attr:`runtime`, with "+handoff" where the Specialist's long prompts are read by transformers."""
        return self.runtime + (HANDOFF_LABEL if self.reader else "")

    @property
    def reason(self) -> str:
        if not self.mixed and self.specialist.reason == self.generalist.reason:
            return self.specialist.reason
        return (
            f"{SPECIALIST_PAIR} on {self.specialist.runtime}: {self.specialist.reason}; "
            f"the Generalist on {self.generalist.runtime}: {self.generalist.reason}"
        )

    def models(self, pairing: Pairing, edge_only: bool = False) -> tuple[PlannedModel, ...]:
        """Every model this plan loads for ``pairing``, each on its runtime (``edge_only``: the Specialist's
        side alone, for an Edge whose Cloud runs elsewhere): the files a load reads and set-up prepares."""
        planned = [PlannedModel(SPECIALIST, pairing.specialist, self.specialist.runtime)]
        if not edge_only:
            planned.append(PlannedModel(GENERALIST, pairing.generalist, self.generalist.runtime))
        if self.reader:
            reader, dtype = self.reader.split()
            planned.append(PlannedModel(PROMPT_READER, pairing.specialist, reader, dtype))
        return tuple(planned)

    def refused(self, why: str) -> RuntimePlan:
        """The plan that loads once this split was refused (``why``): :attr:`fallback`, saying so."""
        if self.fallback is None:
            raise ValueError("only auto's split has a plan to fall back to")
        note = f" (a split was refused: {why})"
        return replace(
            self.fallback,
            specialist=replace(self.fallback.specialist, reason=self.fallback.specialist.reason + note),
            generalist=replace(self.fallback.generalist, reason=self.fallback.generalist.reason + note),
        )

    def to_dict(self) -> dict[str, dict[str, str]]:
        specialist = {"runtime": self.specialist.runtime, "reason": self.specialist.reason}
        if self.specialist.prompt_reader:
            specialist["prompt_reader"] = self.specialist.prompt_reader
            specialist["prompt_reader_dtype"] = self.specialist.reader_dtype or "fp32"
        return {
            "specialist_pair": specialist,
            "generalist": {"runtime": self.generalist.runtime, "reason": self.generalist.reason},
        }


@dataclass(frozen=True)
class PlanCost:
    """The estimate of one plan for one method (seconds of the reference request). ``reader``: the Specialist
    pair on llama.cpp with its long prompts read by transformers in that dtype ("" for none)."""

    specialist: str
    generalist: str
    first_visible_s: float
    end_to_end_s: float
    reader: str = ""

    @property
    def total(self) -> float:
        return self.first_visible_s + self.end_to_end_s

    @property
    def mixed(self) -> bool:
        return self.specialist != self.generalist


@dataclass(frozen=True)
class HandedOver(ModelTiming):
    """The Specialist on llama.cpp whose prompts of HANDOFF_MIN_TOKENS or more another reader reads."""

    reader_tok_s: float = 0.0

    def prompt_s(self, tokens: int) -> float:
        return tokens / (self.reader_tok_s if tokens >= HANDOFF_MIN_TOKENS else self.prompt_tok_s)


def handed_over(llama: RuntimeTiming, reading: PromptReading) -> RuntimeTiming:
    """llama.cpp's timing with the Specialist's long prompts read at the prompt reader's measured rate."""
    specialist = HandedOver(**asdict(llama.specialist), reader_tok_s=reading.transformers_tok_s)
    return replace(llama, specialist=specialist)


def first_visible_s(small: ModelTiming, large: ModelTiming, method: str) -> float:
    """Seconds until the first token is on screen, for the reference request (see the module's text)."""
    info = method_info(method)
    if info.models == "specialist":
        prompt = PRIVATE_PROMPT_TOKENS if info.reads_history else PLAIN_PROMPT_TOKENS
        return small.prompt_s(prompt) + small.step_s
    if info.models == "generalist":
        prompt = PRIVATE_PROMPT_TOKENS if info.reads_history else PLAIN_PROMPT_TOKENS
        return large.prompt_s(prompt) + large.step_s
    private = small.prompt_s(PRIVATE_PROMPT_TOKENS) + small.step_s
    if info.speculative:
        return private  # the first pending draft
    return (
        private
        + small.prompt_s(PLAIN_PROMPT_TOKENS)
        + large.prompt_s(PLAIN_PROMPT_TOKENS)
        + small.step_s
        + large.step_s
    )


def plan_cost(small: RuntimeTiming, large: RuntimeTiming, method: str, reader: str = "") -> PlanCost:
    """The cost of running the Specialist pair as ``small`` measured it and the Generalist as ``large`` did."""
    mixed = RuntimeTiming(f"{small.runtime}/{large.runtime}", "", small.specialist, large.generalist)
    return PlanCost(
        small.runtime,
        large.runtime,
        first_visible_s(small.specialist, large.generalist, method),
        estimate(mixed, method),
        reader,
    )


def plan_costs(calibration: Calibration, method: str, usable: tuple[str, ...]) -> list[PlanCost]:
    """Every plan over the measured runtimes among ``usable``, and llama.cpp with a prompt reader where the
    calibration measured the hand-off worth it; cheapest first (ties: single runtime, then no reader, first)."""
    measured = [timing for timing in calibration.timings if timing.runtime in usable]
    pairs: list[tuple[RuntimeTiming, str]] = [(timing, "") for timing in measured]
    reading, llama = calibration.reading(), calibration.timing("llama.cpp")
    if reading is not None and reading.handoff and llama in measured and "transformers" in usable:
        pairs.append((handed_over(llama, reading), reading.dtype))
    info = method_info(method)
    costs = []
    for (small, reader), large in product(pairs, measured):
        cost = plan_cost(small, large, method, reader)
        # A method of one model gains nothing from the other stream's runtime: it stays beside the used one.
        if cost.mixed and info.models != "both":
            continue
        costs.append(cost)
    return sorted(costs, key=lambda cost: (cost.total, cost.mixed, bool(cost.reader)))


def plan_streams(calibration: Calibration, method: str, usable: tuple[str, ...]) -> RuntimePlan | None:
    """The plan with the fewest estimated seconds (first visible + end to end) for ``method``; None when fewer
    than two runtimes were measured (nothing to choose between: the caller's single-runtime choice stands)."""
    costs = plan_costs(calibration, method, usable)
    if len({cost.specialist for cost in costs}) < 2:
        return None
    best = costs[0]
    others = ", ".join(
        f"{_label(cost)} {cost.first_visible_s:.1f} + {cost.end_to_end_s:.1f} s" for cost in costs if cost is not best
    )
    estimate_text = (
        f"estimated for {method} from this machine's measured costs: first visible + end to end "
        f"{best.first_visible_s:.1f} + {best.end_to_end_s:.1f} s, against {others}"
    )
    reading = calibration.reading()
    handoff = f"; {reading.reason()}" if best.reader and reading is not None else ""
    reader = ("transformers", best.reader) if best.reader else ("", "")
    if not best.mixed:
        return RuntimePlan.uniform(
            RuntimeChoice(best.specialist, f"{_label(best)} is {estimate_text}{handoff}", True, *reader)
        )
    small = calibration.timing(best.specialist)
    large = calibration.timing(best.generalist)
    assert small is not None and large is not None
    slow_small = calibration.timing(best.generalist)
    slow_large = calibration.timing(best.specialist)
    assert slow_small is not None and slow_large is not None
    private_rate = PRIVATE_PROMPT_TOKENS / (
        handed_over(small, reading) if best.reader and reading is not None else small
    ).specialist.prompt_s(PRIVATE_PROMPT_TOKENS)
    return RuntimePlan(
        RuntimeChoice(
            best.specialist,
            f"reads the {PRIVATE_PROMPT_TOKENS}-token private prompt at {private_rate:.0f} tok/s "
            f"against {slow_small.specialist.prompt_tok_s:.0f} on {best.generalist}; the split plan is "
            f"{estimate_text}{handoff}",
            True,
            *reader,
        ),
        RuntimeChoice(
            best.generalist,
            f"verifies {large.generalist.verify_s * 1000:.0f} ms a pass, steps {large.generalist.step_s * 1000:.0f} "
            f"ms, against {slow_large.generalist.verify_s * 1000:.0f} / {slow_large.generalist.step_s * 1000:.0f} "
            f"ms on {best.specialist}",
            True,
        ),
    )


def _label(cost: PlanCost) -> str:
    small = cost.specialist + (f"{HANDOFF_LABEL} (transformers {cost.reader})" if cost.reader else "")
    return small if not cost.mixed else f"{small}/{cost.generalist}"


PLAN_KEY = "runtime_plan"  # beside "runtime" in a run's stored config and a benchmark's record


def plan_record(plan: RuntimePlan) -> dict[str, object]:
    """What an evaluation run's config and a benchmark's record keep of the plan they loaded: its spelling
    (what ``--runtime`` accepts back), each stream's runtime and reason, and the plan's reason."""
    return {"runtime": plan.runtime, **plan.to_dict(), "reason": plan.reason}


@dataclass(frozen=True)
class StoredPlan:
    """A stored plan read back: ``runtime`` as ``--runtime`` spells it, the Specialist pair's and the
    Generalist's runtimes, the reason ("" for records stored before plans were: a plain runtime), and who
    read the Specialist's long prompts ("transformers bf16"; "" for llama.cpp itself, no hand-off)."""

    runtime: str
    specialist: str
    generalist: str
    reason: str = ""
    reader: str = ""

    @classmethod
    def read(cls, stored: Mapping[str, object], default: str = "transformers") -> StoredPlan:
        """From a config or record holding ``runtime`` (a name, a split, or -- defensively -- a plan record)
        and maybe ``runtime_plan``; ``default`` where neither is there (runs made before the runtime choice
        ran on transformers)."""
        record = stored.get(PLAN_KEY)
        runtime = stored.get("runtime")
        if not isinstance(record, Mapping) and isinstance(runtime, Mapping):
            record = runtime
        if isinstance(record, Mapping):
            name = str(record.get("runtime") or runtime or default)
            small, large = parse_split(name) or (name, name)
            specialist_pair = record.get("specialist_pair")
            return cls(
                name,
                _stream_runtime(specialist_pair, small),
                _stream_runtime(record.get("generalist"), large),
                str(record.get("reason") or ""),
                _stored_reader(specialist_pair),
            )
        name = runtime if isinstance(runtime, str) and runtime else default
        small, large = parse_split(name) or (name, name)
        return cls(name, small, large)

    def describe(self) -> str:
        """One line: the runtime, each stream's when split, and the reason when stored."""
        streams = f" (Specialist pair {self.specialist}, Generalist {self.generalist})" if self.mixed else ""
        return f"{self.runtime}{streams}" + (f": {self.reason}" if self.reason else "")

    @property
    def mixed(self) -> bool:
        return self.specialist != self.generalist


def _stream_runtime(stream: object, fallback: str) -> str:
    runtime = stream.get("runtime") if isinstance(stream, Mapping) else None
    return str(runtime) if runtime else fallback


def _stored_reader(stream: object) -> str:
    """ "transformers bf16" from a stored Specialist pair's record; records stored before the reader's dtype
    was recorded read in fp32, the only reader there was."""
    if not isinstance(stream, Mapping) or not stream.get("prompt_reader"):
        return ""
    return f"{stream['prompt_reader']} {stream.get('prompt_reader_dtype') or 'fp32'}"
