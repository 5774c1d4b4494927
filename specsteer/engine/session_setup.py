"""What each side's session opens with, read off a :class:`DecodeConfig`: a method's verification rule and
steering strength, the Edge's params, the Cloud's Open, and the Cloud's description checked before it opens."""

from __future__ import annotations

from specsteer.edge.params import CoSteerParams, EdgeParams
from specsteer.engine.decode_config import DecodeConfig
from specsteer.method.catalog import METHOD_INFO
from specsteer.method.drafting import PrivateSpanGuard
from specsteer.method.events import EDGE_STREAM
from specsteer.models.pair import LoadedPair
from specsteer.protocol.link import CloudRefused, Link
from specsteer.protocol.rules import CDA, Rule
from specsteer.protocol.wire import CrossOpen, Open


def rule_and_beta(config: DecodeConfig) -> tuple[Rule, float]:
    """The verification rule of a speculative method's session, and the steering strength it sends."""
    if config.method == "sd":
        return (Rule.EXACT if config.sample else Rule.MATCH), 0.0
    if config.method == "costeer":
        return Rule.COSTEER, config.beta
    if config.method == "specsteer" and config.exact:
        return Rule.EXACT, config.beta
    return Rule.RATIO, config.beta


def chooses_every_token(config: DecodeConfig) -> bool:
    """Rounds of draft length 0, a chosen token each (LightCoSteer, CoSteer): a Cloud method that does not draft."""
    info = METHOD_INFO[config.method]
    return not (info.speculative or info.device_only or info.cloud_decodes or info.cloud_drafts)


def _temperature(config: DecodeConfig) -> float:
    """The sampling temperature both sides use: 0 (greedy) unless the config samples."""
    return config.temperature if config.sample else 0.0


def edge_params(
    config: DecodeConfig,
    pair: LoadedPair,
    rule: Rule,
    beta: float,
    stream_name: str = EDGE_STREAM,
    guard: PrivateSpanGuard | None = None,
) -> EdgeParams:
    """The Edge's settings for a session of ``rule`` under ``config``."""
    return EdgeParams(
        rule=rule,
        beta=beta,
        stop_ids=pair.eos_token_ids,
        max_new_tokens=config.max_new_tokens,
        temperature=_temperature(config),
        top_p=config.top_p,
        seed=config.seed,
        draft_confidence=config.draft_confidence,
        costeer=CoSteerParams(config.costeer_iters, config.costeer_eta, config.costeer_lambda),
        stream_name=stream_name,
        guard=guard,
        details=config.details,
    )


def cloud_opening(
    pair: LoadedPair,
    link: Link,
    plain_ids: list[int],
    config: DecodeConfig,
    rule: Rule,
    beta: float,
    plain_large_ids: list[int] | None = None,
) -> Open:
    """The session's Open; a cross-tokenizer pair's carries the Generalist's prompt too (CrossOpen)."""
    opening = Open(
        session=link.session,
        rule=rule,
        prompt=tuple(plain_ids),
        max_new_tokens=config.max_new_tokens,
        alpha=min(config.alpha, 1e300),
        beta=beta,
        temperature=_temperature(config),
        top_p=config.top_p,
        top_k=config.downlink_top_k,
        bonus=config.bonus or chooses_every_token(config),
        seed=config.seed,
        stop_ids=tuple(sorted(pair.eos_token_ids)),
        cda_lambda=config.cda_lambda if rule is Rule.RATIO else None,
    )
    if pair.cross is not None:
        if plain_large_ids is None:
            raise ValueError("a cross-tokenizer pair's Open needs the plain prompt in the Generalist's ids")
        return CrossOpen.extending(opening, plain_large_ids)
    return opening


def shared_vocabulary(pair: LoadedPair, link: Link) -> int:
    """The ids both sides score. The Cloud must serve the Specialist the Edge runs (its generic copy)."""
    info = link.info()
    if info.pairing != pair.pairing_id:
        raise CloudRefused(
            f"The Cloud serves the pairing {info.pairing!r} but this Edge runs {pair.pairing_id!r}; "
            "start the Cloud with the Edge's pairing.",
            "pairing",
        )
    return min(pair.vocab_size, info.vocab_size)


def check_acceptance(config: DecodeConfig, link: Link) -> None:
    """CDA needs a Cloud that applies it (its description says so); one that predates it, or cannot (a vLLM
    Cloud, a cross-tokenizer pair), is named before the session opens."""
    if config.cda_lambda is not None and CDA not in link.info().acceptance:
        raise CloudRefused(
            f"This Cloud applies {', '.join(link.info().acceptance)} acceptance only, not CDA (an older Cloud, a "
            "vLLM Cloud or a cross-tokenizer pair): generate with the fixed α, or serve the pairing with a Cloud "
            "that offers CDA.",
            "acceptance",
        )


def span_guard(config: DecodeConfig, private_ids: list[int], plain_ids: list[int]) -> PrivateSpanGuard | None:
    """The private-span guard the Edge applies to what it sends (``config.private_guard``), or None when off."""
    return PrivateSpanGuard(private_ids, plain_ids, config.private_guard) if config.private_guard else None
