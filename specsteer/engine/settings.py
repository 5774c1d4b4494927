"""The settings of one generation: one frozen value, converted and validated in one place.

A form (the app's Generate tab), a JSON body or a test hands :meth:`GenerationSettings.from_values`
loose values keyed by field name; what comes back is typed, range-checked and immutable, so every
later step (the engine's config, the request, what is saved with the output) reads attributes, never
string keys. Every problem is reported at once, as sentences that name the setting at fault.

This module is light (no torch): ``storage`` may receive these values to save them. The engine's
config is imported only when one is built or checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Literal, get_args

from specsteer.data.tasks import DEFAULT_PROMPT_STYLE, PROMPT_STYLES, PromptStyle
from specsteer.method.catalog import METHODS, method_info
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU, P3Params
from specsteer.protocol.exposure import IN_PROCESS, cloud_address

if TYPE_CHECKING:
    from specsteer.engine.decode_config import DecodeConfig
    from specsteer.protocol.emulation import LinkConditions

Decoding = Literal["greedy", "sampling"]
DECODINGS: tuple[Decoding, ...] = get_args(Decoding)
Acceptance = Literal["fixed", "cda"]  # SpecSteer's threshold: the fixed α, or CDA (specsteer.method.acceptance)
ACCEPTANCES: tuple[Acceptance, ...] = get_args(Acceptance)

# How each setting is named in a message (the labels the app shows for them).
SETTING_NAMES = {
    "pairing": "Pairing",
    "runtime": "Runtime",
    "method": "Method",
    "alpha": "α",
    "beta": "β",
    "draft_len": "Draft length",
    "adaptive_draft": "Adaptive draft length",
    "max_new_tokens": "Max new tokens",
    "decoding": "Decoding",
    "seed": "Seed",
    "temperature": "Temperature",
    "top_p": "Top-p",
    "retrieval_k": "History items retrieved",
    "downlink_top_k": "Downlink top-k",
    "exact": "Exact-target sampling",
    "prompt_style": "Prompt style",
    "private_guard": "Private-span guard",
    "p3_draft_len": "P³ draft length",
    "p3_tau": "P³ τ",
    "acceptance": "Acceptance",
    "cda_lambda": "CDA λ",
    "cloud": "Cloud",
    "rtt_ms": "Round-trip time",
    "uplink_kbps": "Uplink bandwidth",
    "downlink_kbps": "Downlink bandwidth",
    "specialist_lora": "Taught Specialist",
    "token_details": "Token details",
}
MAX_RTT_MS = 2000.0  # an emulated round trip longer than this is a mistake, not a network
# The private-span guard's n that the privacy panel offers where history crossed: 3 tokens, about the 3 words
# of the history-crossing audit's phrases (specsteer.data.crossing; a 2-token name still passes).
SUGGESTED_PRIVATE_GUARD = 3
# Methods whose Edge sends tokens that the guard does not cover: CoSteer's iterative choice.
_UNGUARDED_METHODS = ("costeer",)


class SettingsError(ValueError):
    """Settings that cannot run. The message is one sentence per problem, each naming its setting."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(" ".join(self.problems))


def sentence(text: str) -> str:
    """``text`` as a sentence: a capital first letter and a final full stop (messages shown to people)."""
    text = " ".join(str(text).split())
    if not text:
        return text
    first_word = text.split(" ", 1)[0]
    # Only a plain word is capitalized: "α …", a file name ("bad.jsonl: …") or an id stays as written.
    if first_word.isascii() and first_word.isalpha():
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?", "…")) else text + "."


@dataclass(frozen=True)
class GenerationSettings:
    """Everything that decides one generation except the history and the input."""

    pairing: str
    runtime: str = "auto"  # specsteer.runtimes.base.RUNTIME_CHOICES; "auto": models.planning.runtime_plan decides
    method: str = "specsteer"
    alpha: float = 0.1
    beta: float = 1.0
    draft_len: int = 4
    adaptive_draft: bool = False
    max_new_tokens: int = 96
    decoding: Decoding = "greedy"
    seed: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    retrieval_k: int = 3
    downlink_top_k: int = 64  # 0 sends the whole vocabulary
    exact: bool = False  # SpecSteer's exact-target variant; only with sampling
    prompt_style: PromptStyle = DEFAULT_PROMPT_STYLE
    # The private-span guard's n in tokens (engine.DecodeConfig.private_guard); 0 = off.
    private_guard: int = 0
    # P³'s Cloud draft length k and threshold tau (method.p3.P3Params; the public code's defaults)
    p3_draft_len: int = DEFAULT_DRAFT_LEN
    p3_tau: float = DEFAULT_TAU
    # SpecSteer's acceptance rule and CDA's λ (engine.DecodeConfig.cda_lambda): the fixed α unless "cda"; the methods
    # without α ignore it, as they ignore α.
    acceptance: Acceptance = "fixed"
    cda_lambda: float = 1.0
    # Where the Cloud runs: IN_PROCESS, or a Cloud service's address as cloud_address() writes it
    # (scheme, host and port only: never a credential, so it is stored with the output as it is).
    cloud: str = IN_PROCESS
    # Link emulation (link_emulation.LinkConditions): 0 ms and 0 kbps (unlimited) emulate nothing.
    rtt_ms: float = 0.0
    uplink_kbps: float = 0.0
    downlink_kbps: float = 0.0
    # The Edge's Specialist taught the history (a LoRA adapter the app's service trained, by its label:
    # service.lora_teaching); "" for the base model. Never a path: only the service's own adapters are named.
    specialist_lora: str = ""
    # Display only: each token carries its numbers for a popover (engine.DecodeConfig.details); decides nothing.
    token_details: bool = False

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> GenerationSettings:
        """Settings from loose values keyed by field name; a missing value takes its default.

        Numbers may come as text or as floats with a whole value where a whole number is needed
        (form widgets send floats); an empty number box is a problem, not a zero. Raises
        :class:`SettingsError` listing every problem, unknown names included.
        """
        problems = [sentence(f"unknown setting {name!r}") for name in values if name not in _FIELD_TYPES]
        converted: dict[str, object] = {}
        for name, value in values.items():
            kind = _FIELD_TYPES.get(name)
            if kind is None:
                continue
            try:
                converted[name] = _convert(value, kind)
            except ValueError as error:
                problems.append(sentence(f"{SETTING_NAMES[name]} {error}"))
        if "pairing" not in converted and not problems:
            problems.append("Choose a pairing.")
        if problems:
            raise SettingsError(problems)
        return cls(**converted).validate()  # type: ignore[arg-type]

    def validate(self) -> GenerationSettings:
        """Raise :class:`SettingsError` unless these settings can run; return them otherwise, with the
        Cloud's address written the one way it is stored (see :func:`cloud_address`)."""
        from specsteer.runtimes.base import RUNTIME_CHOICES

        problems = []
        settings = self
        try:
            settings = replace(self, cloud=cloud_address(self.cloud))
        except ValueError as error:
            problems.append(str(error))
        problems += _link_problems(self)
        if not self.pairing.strip():
            problems.append("Choose a pairing.")
        choices = {
            "runtime": RUNTIME_CHOICES,
            "method": METHODS,
            "decoding": DECODINGS,
            "prompt_style": PROMPT_STYLES,
            "acceptance": ACCEPTANCES,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                problems.append(
                    f"{SETTING_NAMES[name]} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}."
                )
        if self.retrieval_k < 0:
            problems.append(f"{SETTING_NAMES['retrieval_k']} must be 0 or more.")
        if len(self.specialist_lora) > 64:
            problems.append(f"{SETTING_NAMES['specialist_lora']} must be a label the app gave (at most 64 characters).")
        if not problems:  # the ranges the engine enforces, in its own words
            try:
                self.decode_config().validate()
            except ValueError as error:
                problems += [sentence(part) for part in str(error).split("; ")]
        if problems:
            raise SettingsError(problems)
        return settings

    @property
    def remote(self) -> bool:
        """Whether the Cloud is a service elsewhere (only the Specialist then runs in this process)."""
        return self.cloud != IN_PROCESS

    def link_conditions(self) -> LinkConditions | None:
        """The network to emulate on the link, or None when these settings emulate none."""
        from specsteer.protocol.emulation import LinkConditions

        return LinkConditions.requested(self.rtt_ms, self.uplink_kbps, self.downlink_kbps)

    @property
    def sample(self) -> bool:
        return self.decoding == "sampling"

    def for_method(self, method: str) -> GenerationSettings:
        """The same settings with another method (a comparison runs one settings value per method)."""
        method_info(method)  # ValueError naming the known methods
        return replace(self, method=method)

    def guarded(self, n: int = SUGGESTED_PRIVATE_GUARD) -> GenerationSettings | None:
        """These settings with the private-span guard on (``n`` tokens): the one-click change the privacy
        panel offers where history crossed. None where the guard is on already or does not cover the method:
        a method whose Edge sends no tokens, CoSteer's iterative choice, the exact-target variant (which
        refuses it)."""
        covered = method_info(self.method).edge_sends_tokens and self.method not in _UNGUARDED_METHODS
        if self.private_guard or not covered or (self.exact and self.sample):
            return None
        return replace(self, private_guard=n)

    def decode_config(self) -> DecodeConfig:
        """The engine's config; the exact-target variant applies only when sampling."""
        from specsteer.engine.decode_config import DecodeConfig

        return DecodeConfig(
            method=self.method,
            alpha=self.alpha,
            beta=self.beta,
            draft_len=self.draft_len,
            adaptive_draft=self.adaptive_draft,
            max_new_tokens=self.max_new_tokens,
            sample=self.sample,
            seed=self.seed,
            temperature=self.temperature,
            top_p=self.top_p,
            downlink_top_k=self.downlink_top_k,
            exact=self.exact and self.sample,
            private_guard=self.private_guard,
            p3=P3Params(self.p3_draft_len, self.p3_tau),
            cda_lambda=self.cda_lambda if self.adapts_alpha else None,
            details=self.token_details,
        )

    @property
    def adapts_alpha(self) -> bool:
        """Whether CDA adapts this generation's α: asked for, and the method has an α (SpecSteer)."""
        return self.acceptance == "cda" and method_info(self.method).takes_alpha


def _link_problems(settings: GenerationSettings) -> list[str]:
    problems = []
    if not 0 <= settings.rtt_ms <= MAX_RTT_MS:
        problems.append(f"{SETTING_NAMES['rtt_ms']} must be between 0 and {MAX_RTT_MS:g} ms.")
    for name in ("uplink_kbps", "downlink_kbps"):
        value = getattr(settings, name)
        if not (value == 0 or 1 <= value < math.inf):
            problems.append(f"{SETTING_NAMES[name]} must be 0 (unlimited) or at least 1 kbps.")
    return problems


_FIELD_TYPES: dict[str, type] = {
    item.name: {"str": str, "float": float, "int": int, "bool": bool}.get(str(item.type), str)
    for item in fields(GenerationSettings)
}


def _convert(value: object, kind: type) -> object:
    """One loose value as ``kind``; ValueError with the end of a sentence that starts with the setting's name."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"must be on or off, not {value!r}")
    if kind is str:
        if isinstance(value, str):
            return value.strip()
        raise ValueError(f"must be a choice, not {value!r}")
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError("needs a value")
    if isinstance(value, bool):  # a bool is an int to Python, never a number to a person
        raise ValueError(f"must be a number, not {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"must be a number, not {value!r}") from None
    if math.isnan(number):
        raise ValueError("must be a number, not NaN")
    if kind is int:
        if not number.is_integer():
            raise ValueError(f"must be a whole number, not {value!r}")
        return int(number)
    return number
