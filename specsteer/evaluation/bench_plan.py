"""What ``specsteer bench speed`` runs: its cases, one per method and setting (α and acceptance rule, draft
length), each a decoding configuration and whether the drafter sees the history, and how a case is named in its
rows and progress lines. ``specsteer.evaluation.bench`` runs them; ``specsteer.evaluation.bench_report`` sums them up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specsteer.data.tasks import PromptPair
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.request import Prepared
from specsteer.method.catalog import METHOD_INFO, method_info
from specsteer.method.p3 import P3Params
from specsteer.protocol.wire import MAX_DRAFT_LEN

DEFAULT_METHODS = "slm,slm+,llm,sd,sd-plain,lightcosteer,costeer,specsteer"
# The adaptive chooser picks k from the bound, so it gets the whole range: at the ~99 % per-token
# acceptance of SpecSteer α=0.1 the bound keeps rising past k=8 (measured: benchmarks/results/bench_cap.json).
MAX_AUTO_DRAFT = MAX_DRAFT_LEN


@dataclass(frozen=True)
class BenchCase:
    """One row of the benchmark: a decoding configuration, and whether the drafter sees the history.

    ``sd-plain`` (standard SD whose drafter reads the plain prompt) is the setting of transformers'
    assisted generation, which has no way to give the assistant another prompt: the engine-to-engine
    comparison. Plain ``sd`` is the paper's baseline, drafting with SLM+.
    """

    config: DecodeConfig
    drafter_history: bool = True

    @property
    def name(self) -> str:
        return self.config.method if self.drafter_history else f"{self.config.method}-plain"

    def prompts_for(self, prepared: Prepared) -> Prepared:
        if self.drafter_history:
            return prepared
        return Prepared(PromptPair(prepared.prompts.plain, prepared.prompts.plain), [])


def bench_cases(
    methods: list[str],
    alphas: list[float],
    draft_lens: list[str],
    max_new_tokens: int,
    p3: P3Params | None = None,
    acceptance: Sequence[float | None] = (None,),
) -> list[BenchCase]:
    """One case per method, per alpha and acceptance rule (specsteer: None the fixed α, a number CDA's λ) and per
    draft length (speculative methods).

    A method is an engine method or ``sd-plain``; a draft length is a number or ``auto``
    (adaptive, at most MAX_AUTO_DRAFT; ``auto:N`` at most N), optionally followed by ``@c``: stop
    drafting after a draft the Specialist gave less than probability c (``12@0.4``, ``auto:12@0.4``).
    ``p3``: P³'s settings (its own draft length and tau).
    """
    cases = []
    for name in methods:
        method = name.removesuffix("-plain")
        info = method_info(method)
        for alpha, rule in [(a, r) for r in acceptance for a in alphas] if info.takes_alpha else [(0.1, None)]:
            for draft_len in draft_lens if info.speculative else draft_lens[:1]:
                length, _, confidence = draft_len.partition("@")
                adaptive = length.startswith("auto")
                cap = length.removeprefix("auto").removeprefix(":") if adaptive else length
                config = DecodeConfig(
                    method=method,
                    alpha=alpha,
                    max_new_tokens=max_new_tokens,
                    draft_len=int(cap) if cap else MAX_AUTO_DRAFT,
                    adaptive_draft=adaptive,
                    draft_confidence=float(confidence or 0),
                    p3=p3 or P3Params(),
                    cda_lambda=rule,
                ).validate()
                cases.append(BenchCase(config, drafter_history=name == method))
    return cases


def draft_label(config: DecodeConfig) -> str:
    """A case's draft length as ``bench_cases`` reads it: ``4``, ``auto``, ``auto:12``, ``12@0.4``."""
    if config.adaptive_draft:
        length = "auto" if config.draft_len == MAX_AUTO_DRAFT else f"auto:{config.draft_len}"
    else:
        length = str(config.draft_len)
    return f"{length}@{config.draft_confidence:g}" if config.draft_confidence else length


def case_label(case: BenchCase) -> str:
    """A case in a progress line: its name, α, acceptance rule and draft length (P³: its own k and tau)."""
    config = case.config
    info = METHOD_INFO[config.method]
    name = f"{case.name} a={config.alpha:g}" if info.takes_alpha else case.name
    name += f" cda={config.cda_lambda:g}" if config.cda_lambda is not None else ""
    if info.cloud_drafts:
        return f"{name} k={config.p3.draft_len} tau={config.p3.tau:g}"
    return f"{name} k={draft_label(config)}" if info.speculative else name
