"""What the Cloud refuses, and how it says so: a :class:`ServiceError` with an HTTP status, a short code and a
message meant for the person running the Edge.

Pure checks of one request against the Cloud's limits and its pair (no session state): a frame too large or
unreadable (:func:`read_uplink`), an Open or a Draft outside the limits or the vocabulary (:func:`open_problem`,
:func:`draft_problem`), an acceptance rule the Cloud does not apply (:func:`acceptance_refusal`), and the answer
to a request for a session that has ended (:func:`gone_error`). ``specsteer.cloud.service.CloudService`` calls
them before it touches a session.
"""

from __future__ import annotations

from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.verifier import acceptance_problem, finite_settings_problem
from specsteer.models.pair import GeneralistTokens
from specsteer.protocol.rules import CROSS_RULES, RULE_SPECS
from specsteer.protocol.wire import (
    PROTOCOL_VERSION,
    UPLINK,
    CrossOpen,
    Draft,
    FrameError,
    Open,
    UnsupportedVersion,
    decode,
)


class ServiceError(Exception):
    """A request the Cloud refuses: ``status`` (HTTP), ``code`` (for the Edge's exception type), message, and
    for a Cloud without room the seconds after which trying again may succeed (HTTP's Retry-After)."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after_s = retry_after_s


def read_uplink(frame: bytes, limit: int):
    """The message of an uplink ``frame`` of at most ``limit`` bytes; ServiceError when it is larger or unreadable."""
    if len(frame) > limit:
        raise ServiceError(
            413, "too-large", f"A frame of {len(frame)} bytes is larger than this Cloud accepts ({limit} bytes)."
        )
    try:
        return decode(frame, UPLINK)
    except UnsupportedVersion as error:
        raise ServiceError(
            400,
            "version",
            f"The frame is in protocol version {error.version}; this Cloud speaks version {PROTOCOL_VERSION}.",
        ) from None
    except FrameError as error:
        raise ServiceError(400, error.code, f"The Cloud could not read the frame: {error}.") from None


def open_problem(message: Open, limits: ServiceLimits, vocab_size: int, cross: GeneralistTokens | None) -> str | None:
    """Why a Cloud with ``limits`` over a pair of ``vocab_size`` (``cross``: its Generalist's own tokens, for a
    cross-tokenizer pair) refuses ``message``, or None; the acceptance rule is the service's to check."""
    if not message.prompt:
        return "The prompt is empty."
    if len(message.prompt) > limits.max_prompt_tokens:
        return f"The prompt has {len(message.prompt)} tokens; this Cloud takes at most {limits.max_prompt_tokens}."
    if not 1 <= message.max_new_tokens <= limits.max_new_tokens:
        return f"The token budget must be between 1 and {limits.max_new_tokens} on this Cloud."
    if len(message.stop_ids) > limits.max_stop_ids:
        return f"At most {limits.max_stop_ids} end ids are accepted."
    if _out_of_vocabulary(message.prompt + message.stop_ids, vocab_size):
        return f"A token id is outside the Cloud's vocabulary of {vocab_size}: do both sides run the same pairing?"
    cross_problem = _cross_problem(message, limits, cross)
    if cross_problem:
        return cross_problem
    if RULE_SPECS[message.rule].cloud_drafts and message.top_k > limits.max_draft_len:
        return f"The Cloud drafts at most {limits.max_draft_len} tokens a round here; ask for fewer."
    settings = finite_settings_problem(message)
    if settings:
        return f"Invalid decoding settings: {settings}."
    return None


def acceptance_refusal(message: Open, rules: tuple[str, ...], fixed_only_reason: str) -> str | None:
    """Whether a Cloud that applies the acceptance ``rules`` (``CloudService.acceptance_rules``) takes the one
    ``message`` names; ``fixed_only_reason`` says why a Cloud applies the fixed α only."""
    problem = acceptance_problem(message)
    if problem:
        return f"{problem}."
    if message.acceptance not in rules:
        return f"This Cloud applies the fixed α only, not {message.acceptance.upper()}: {fixed_only_reason}."
    return None


def _cross_problem(message: Open, limits: ServiceLimits, cross: GeneralistTokens | None) -> str | None:
    """Whether the kind of Open fits the pair: a cross-tokenizer pair needs the Generalist's prompt too."""
    if cross is None:
        if isinstance(message, CrossOpen):
            return (
                "This Cloud serves a pairing whose models share one tokenizer; it takes a plain Open, "
                "not a cross-tokenizer one."
            )
        return None
    if not isinstance(message, CrossOpen):
        return (
            "This Cloud serves a cross-tokenizer pairing: open the session with the Generalist's prompt "
            "too (a cross-open message)."
        )
    if not RULE_SPECS[message.rule].cross_tokenizer:
        return (
            f"The {message.rule.value!r} rule is not available across tokenizers; this Cloud offers "
            f"{', '.join(CROSS_RULES)}."
        )
    if not message.large_prompt:
        return "The Generalist's prompt is empty."
    if len(message.large_prompt) > limits.max_prompt_tokens:
        return (
            f"The Generalist's prompt has {len(message.large_prompt)} tokens; this Cloud takes at most "
            f"{limits.max_prompt_tokens}."
        )
    if _out_of_vocabulary(message.large_prompt, cross.vocab_size):
        return f"A Generalist token id is outside its vocabulary of {cross.vocab_size}."
    return None


def draft_problem(message: Draft, limits: ServiceLimits, vocab_size: int) -> str | None:
    """Why a Cloud with ``limits`` over a pair of ``vocab_size`` refuses a Draft's round, or None."""
    if len(message.draft) > limits.max_draft_len:
        return f"{len(message.draft)} drafts in one round; this Cloud takes at most {limits.max_draft_len}."
    if len(message.append) > limits.max_draft_len + 1:
        return "Too many chosen tokens in one round."
    if _out_of_vocabulary(message.append + message.draft, vocab_size):
        return f"A token id is outside the Cloud's vocabulary of {vocab_size}."
    return None


def gone_error(reason: str | None, limits: ServiceLimits, instance: str) -> ServiceError:
    """The answer to a request for a session that ended for ``reason`` (None: one the Cloud ``instance``
    never knew, or forgot)."""
    if reason == "expired-session":
        idle = limits.idle_timeout_s
        idle = limits.unstarted_timeout_s if idle is None else idle
        return ServiceError(
            410, reason, f"The Cloud ended this generation's session after {idle:g} s without a message."
        )
    if reason == "reclaimed-session":
        return ServiceError(
            410,
            reason,
            "The Cloud gave this generation's session's room to a new one: it had been "
            f"{limits.reclaim_idle_s:g} s or more without a message while the Cloud was full.",
        )
    if reason == "lifetime-session":
        return ServiceError(
            410,
            reason,
            f"The Cloud ended this generation's session at its limit of {limits.max_session_life_s:g} s "
            "for one session.",
        )
    if reason == "closed-session":
        return ServiceError(410, reason, "This generation's session on the Cloud has already ended.")
    return ServiceError(
        404,
        "unknown-session",
        f"The Cloud (instance {instance}) does not know this "
        "generation's session; it may have restarted since the "
        "generation began.",
    )


def _out_of_vocabulary(ids: tuple[int, ...], vocab_size: int) -> bool:
    return bool(ids) and max(ids) >= vocab_size
