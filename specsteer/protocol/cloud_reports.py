"""What a Cloud says besides the protocol's messages, as JSON: instrumentation that is never part of a
decision (:class:`CloudReport`: its forward passes, for the generation's trace, and the verification ratios
shown in the UI) and its description (:class:`CloudInfo`). How those travel is the transport's business
(``specsteer.protocol.link``, ``specsteer.cloud.client``); they are not counted as link bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specsteer.method.token_details import CloudScores
from specsteer.protocol.rules import FIXED
from specsteer.protocol.wire import PROTOCOL_VERSION, FrameError


@dataclass(frozen=True)
class CloudPass:
    """One forward pass the Cloud ran: ``after`` counts the session's messages (both ways) before it."""

    after: int
    stream: str  # GENERALIST_STREAM | GENERIC_STREAM
    tokens: int
    seconds: float


@dataclass(frozen=True)
class CloudReport:
    """Instrumentation from the Cloud, never used for a decision: its passes since the last report
    (the generation's trace needs them), the ratios of the last verification (the UI shows them),
    and how many prompt tokens each Cloud stream found in the prefix cache."""

    passes: tuple[CloudPass, ...] = ()
    ratios: tuple[float, ...] = ()
    reused: tuple[tuple[str, int], ...] = ()
    # Each scored draft's numbers (method.token_details), only from a Cloud in this process asked for them:
    # a Cloud service never puts them in its JSON, so nothing beyond the protocol's messages crosses a network.
    details: tuple[CloudScores, ...] = ()

    def to_json(self) -> dict:
        return {
            "passes": [[p.after, p.stream, p.tokens, p.seconds] for p in self.passes],
            "ratios": list(self.ratios),
            "reused": dict(self.reused),
        }

    @classmethod
    def from_json(cls, data: dict) -> CloudReport:
        try:
            passes = tuple(CloudPass(int(a), str(s), int(t), float(sec)) for a, s, t, sec in data.get("passes", ()))
            ratios = tuple(float(r) for r in data.get("ratios", ()))
            reused = tuple((str(k), int(v)) for k, v in dict(data.get("reused", {})).items())
        except (TypeError, ValueError) as error:
            raise FrameError(f"unreadable Cloud report: {error}") from None
        return cls(passes, ratios, reused)


@dataclass(frozen=True)
class CloudInfo:
    """What a Cloud serves: the pairing (both sides must run the same Specialist), the vocabulary
    its logits cover, the protocol version, its limits, ``instance`` (changes when it restarts) and the
    acceptance rules it applies (``rules.ACCEPTANCE_RULES``; a Cloud that predates them says none, read as
    the fixed α alone)."""

    pairing: str
    vocab_size: int
    protocol: int = PROTOCOL_VERSION
    instance: str = ""
    runtime: str = ""
    limits: dict = field(default_factory=dict)
    acceptance: tuple[str, ...] = (FIXED,)

    def to_json(self) -> dict:
        return {**asdict(self), "acceptance": list(self.acceptance)}

    @classmethod
    def from_json(cls, data: dict) -> CloudInfo:
        try:
            return cls(
                str(data["pairing"]),
                int(data["vocab_size"]),
                int(data["protocol"]),
                str(data.get("instance", "")),
                str(data.get("runtime", "")),
                dict(data.get("limits", {})),
                tuple(str(rule) for rule in data.get("acceptance", (FIXED,))),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise FrameError(f"unreadable Cloud description: {error!r}") from None
