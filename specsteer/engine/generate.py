"""Every decoding method behind one interface: ``generate(pair, request, config)``.

A generation is a generator of :class:`~specsteer.method.events.TokenEvent` that ends
with a :class:`~specsteer.method.events.Finished`. The speculative methods all run the
same Draft -> Verify -> Recover loop between an :class:`~specsteer.edge.session.Edge`
and a :class:`~specsteer.cloud.verifier.Cloud`; they differ only in the Cloud's test
and in what the Edge does with the verdict:

============  =========  ======================================================
method        draft len  verification / choice
============  =========  ======================================================
specsteer     k          ratio test (Eq. 7), recovery from steered logits (Eq. 8)
specsteer +exact  k      Edge-side residual sampling towards Q (Eq. 4), full rows
sd            k          greedy: draft == argmax z_L; sampling: exact towards p_L
lightcosteer  0          every token from the steered logits (a bonus-only round)
costeer       0          every token from CoSteer's iterative refinement
p3            k (Cloud)  roles reversed: the Generalist drafts, the Specialist keeps p/max p >= tau (method.p3)
slm, slm+     --         Specialist alone, prompt only / with retrieved history
llm           --         Generalist alone (the speed reference)
llm+          --         Generalist given the private prompt (sends the private context: a reference)
============  =========  ======================================================

On a cross-tokenizer pair (``pair.cross``; specsteer.method.crosstok) the same loop runs with a
CrossEdge and a CrossCloud: ``CROSS_TOKENIZER_METHODS`` only, tokens stay the Specialist's ids (the
``llm`` and ``llm+`` baselines' are the Generalist's), and every other method is refused before anything
runs. A drafted token's event names its place in the segment the cross test accepted or refused
(``TokenEvent.segment``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

import torch

from specsteer.cloud.in_process import InProcessCloud
from specsteer.edge.p3 import P3Edge
from specsteer.edge.params import CoSteerParams, EdgeParams
from specsteer.edge.session import CrossEdge, Edge
from specsteer.method.catalog import METHOD_INFO, METHODS
from specsteer.method.costs import PassCost, PassSample, fit_pass_cost, flat_cost, speculative_bound
from specsteer.method.decoding import Detokenizer, ForwardLog, PrivateSpanGuard
from specsteer.method.events import (
    EDGE_STREAM,
    GENERALIST_STREAM,
    GENERIC_STREAM,
    Finished,
    GenerationStats,
    RoundStep,
    SegmentPlace,
    TokenEvent,
    TokenKind,
)
from specsteer.method.p3 import P3Params
from specsteer.method.timing import SYSTEM_CLOCK, StepClock, StepTimes, find_pauses
from specsteer.models.chat import PLAIN_CHAT, ChatFormat, prompt_ids
from specsteer.models.loading import LoadedPair
from specsteer.protocol.emulation import LinkConditions
from specsteer.protocol.link import CloudEndpoint, CloudError, CloudRefused, CloudUnreachable, Link
from specsteer.protocol.rules import RULE_SPECS, Rule
from specsteer.protocol.wire import MAX_DRAFT_LEN, MAX_NEW_TOKENS, CrossOpen, Draft, Open

if TYPE_CHECKING:  # tasks imports the retrieval stack, which prepare() loads only when it is called
    from specsteer.data.tasks import PromptPair, PromptStyle

# What runs on a cross-tokenizer pair (specsteer.method.crosstok): SpecSteer's ratio rule and LightCoSteer
# (rounds of no drafts) over the common byte space, the device-only baselines and the Generalist alone
# (given the plain prompt, or for llm+ the private one, each rendered by its own tokenizer).
CROSS_TOKENIZER_METHODS = ("slm", "slm+", "llm", "llm+", "lightcosteer", "specsteer")
# Why the others do not.
_ONE_VOCABULARY_ONLY = {
    "sd": "its test asks whether the Generalist would choose the very token id drafted (or, sampling, resamples "
    "from p_L's residual), which needs one vocabulary",
    "costeer": "its iterative refinement runs on the three models' distributions over one shared vocabulary",
    "p3": "the Specialist tests the Generalist's very token ids, which needs one vocabulary",
}


@dataclass
class DecodeConfig:
    method: str = "specsteer"
    alpha: float = 0.1
    beta: float = 1.0
    draft_len: int = 4
    adaptive_draft: bool = False  # choose k <= draft_len each round from the DESIGN §6 bound
    draft_confidence: float = 0.0  # end a round's drafting after a draft the Specialist gave p < this; 0 = off
    downlink_top_k: int = 64  # 0 sends the whole vocabulary
    bonus: bool = True
    max_new_tokens: int = 256
    sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    exact: bool = False
    costeer_iters: int = 20
    costeer_eta: float = 10.0
    costeer_lambda: float = 2.0
    # The private-span guard (beyond the paper): no token the Edge sends completes a run of this many
    # token ids found in the private prompt and not in the plain one (decoding.PrivateSpanGuard); 0 = off.
    private_guard: int = 0
    p3: P3Params = P3Params()  # P³'s Cloud draft length and threshold (method p3 only)

    def validate(self) -> DecodeConfig:
        problems = []
        if self.method not in METHODS:
            problems.append(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if not (self.alpha >= 0):  # also rejects NaN
            problems.append("alpha must be >= 0 (0 accepts every draft, inf rejects every draft)")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            problems.append("beta must be a finite number >= 0")
        if not 1 <= self.draft_len <= MAX_DRAFT_LEN:
            problems.append(f"draft length must be between 1 and {MAX_DRAFT_LEN}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            problems.append(f"max new tokens must be between 1 and {MAX_NEW_TOKENS}")
        if not 0 <= self.draft_confidence < 1:
            problems.append("draft confidence must be in [0, 1) (0 switches the early stop off)")
        if self.downlink_top_k < 0:
            problems.append("downlink top-k must be >= 0 (0 = whole vocabulary)")
        if self.sample and not (self.temperature > 0 and 0 < self.top_p <= 1):
            problems.append("sampling needs temperature > 0 and 0 < top_p <= 1")
        if self.costeer_iters < 1:
            problems.append("CoSteer needs at least one iteration")
        if self.private_guard and not 2 <= self.private_guard <= 64:
            problems.append("the private-span guard's n must be between 2 and 64 tokens (0 switches it off)")
        if self.private_guard and self.exact:
            problems.append("the private-span guard does not cover the exact-target variant (its residual draw)")
        if self.method == "p3":
            problems += self.p3.problems(MAX_DRAFT_LEN)
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass
class Request:
    task: str
    input_text: str
    history: Sequence = ()
    retrieval_k: int = 3
    noise_items: Sequence = ()  # appended to the Specialist's context (robustness study)
    prompt_style: PromptStyle = "paper"  # tasks.PROMPT_STYLES: the paper's templates, or "clean" (no field labels)
    profile: str | None = None  # a persona's user profile text (the cogenesis task); private like the history


@dataclass
class Prepared:
    prompts: PromptPair
    retrieved: list = field(default_factory=list)  # the history items BM25 picked, best first, then any noise items
    scores: list[float] = field(default_factory=list)  # BM25 score of each picked history item (noise has none)


def prepare(request: Request) -> Prepared:
    """Retrieve from the history (on the device) and build both prompts."""
    from specsteer.data.retrieval import retrieve_scored
    from specsteer.data.tasks import build_prompts

    scored = retrieve_scored(request.task, request.input_text, list(request.history), request.retrieval_k)
    retrieved = [item for item, _ in scored] + list(request.noise_items)
    prompts = build_prompts(
        request.task, request.input_text, retrieved, style=request.prompt_style, profile=request.profile
    )
    return Prepared(prompts, retrieved, [score for _, score in scored])


def chat_ids(tokenizer, user_message: str, chat: ChatFormat = PLAIN_CHAT) -> list[int]:
    """The ids of a one-turn chat prompt that leaves the assistant to reply: the one place a prompt
    becomes ids. ``chat`` is the pair's format (``pair.chat``): its template options (Qwen3's
    ``enable_thinking=False``) apply to every stream's prompt alike."""
    return prompt_ids(tokenizer, user_message, chat)


def generate(
    pair: LoadedPair,
    request: Request | Prepared,
    config: DecodeConfig,
    cancel: threading.Event | None = None,
    *,
    cloud: CloudEndpoint | None = None,
    conditions: LinkConditions | None = None,
    clock: StepClock = SYSTEM_CLOCK,
) -> Iterator[TokenEvent | Finished]:
    """Run one method on one request; yields token events, then a Finished.

    ``cloud``: where the Cloud is (default: in this process, over the pair's own models; a
    ``specsteer.cloud.client.RemoteCloud`` for ``python -m specsteer cloud``). ``conditions``: emulate that
    network on the link. A Cloud that fails raises a ``specsteer.protocol.link.CloudError`` whose ``partial``
    holds what was emitted before. ``clock``: what the generation's times are read from (each event closes a
    step; ``specsteer.method.timing`` finds the pauses among them).
    """
    config.validate()
    prepared = request if isinstance(request, Prepared) else prepare(request)
    tokenizer = pair.tokenizer
    # plain_ids are both the Generalist's prompt and the generic Specialist copy's (the Cloud's two
    # streams), so those two read identical ids by construction.
    plain_ids = chat_ids(tokenizer, prepared.prompts.plain, pair.chat)
    private_ids = chat_ids(tokenizer, prepared.prompts.private, pair.chat)
    # A cross-tokenizer Generalist reads the same plain prompt rendered by its own tokenizer (llm+, the
    # reference that sends the private context, the private one).
    large_ids = private_large_ids = None
    if pair.cross is not None:
        large_ids = chat_ids(pair.cross.tokenizer, prepared.prompts.plain, pair.cross.chat)
        if METHOD_INFO[config.method].sends_private_context:
            private_large_ids = chat_ids(pair.cross.tokenizer, prepared.prompts.private, pair.cross.chat)
    return _run(
        pair,
        _Prompts(plain_ids, private_ids, large_ids, private_large_ids),
        config,
        cancel or threading.Event(),
        cloud,
        conditions,
        clock,
    )


def generate_ids(
    pair: LoadedPair,
    plain_ids: list[int],
    private_ids: list[int],
    config: DecodeConfig,
    cancel: threading.Event | None = None,
    *,
    cloud: CloudEndpoint | None = None,
    conditions: LinkConditions | None = None,
    plain_large_ids: list[int] | None = None,
    private_large_ids: list[int] | None = None,
    clock: StepClock = SYSTEM_CLOCK,
) -> Iterator[TokenEvent | Finished]:
    """``generate`` on already tokenized prompts (tests and benchmarks); a cross-tokenizer pair also
    needs ``plain_large_ids``, the plain prompt in the Generalist's ids (and llm+ ``private_large_ids``,
    the private one)."""
    config.validate()
    return _run(
        pair,
        _Prompts(plain_ids, private_ids, plain_large_ids, private_large_ids),
        config,
        cancel or threading.Event(),
        cloud,
        conditions,
        clock,
    )


def cross_tokenizer_problem(pair: LoadedPair, config: DecodeConfig) -> str | None:
    """Why ``config`` cannot run on ``pair`` because its two models use different tokenizers, or None."""
    if pair.cross is None:
        return None
    if config.method not in CROSS_TOKENIZER_METHODS:
        reason = _ONE_VOCABULARY_ONLY.get(config.method, "it compares the two models token id by token id")
        return (
            f"{METHOD_INFO[config.method].label} is not available on a cross-tokenizer pairing "
            f"({pair.pairing_id}): {reason}. "
            f"Available here: {', '.join(METHOD_INFO[m].label for m in CROSS_TOKENIZER_METHODS)}."
        )
    if config.method == "specsteer" and config.exact:
        return (
            "SpecSteer's exact-target variant is not available on a cross-tokenizer pairing: its residual "
            "resampling needs the three distributions over one vocabulary."
        )
    return None


def collect(events: Iterable[TokenEvent | Finished]) -> tuple[list[TokenEvent], Finished]:
    """The settled tokens (pending drafts left out: their verdict's events follow) and the Finished."""
    tokens: list[TokenEvent] = []
    for event in events:
        if isinstance(event, Finished):
            return tokens, event
        if not event.pending:
            tokens.append(event)
    raise RuntimeError("generation ended without a Finished event")


# --------------------------------------------------------------------------- the loops


class _Output:
    """Counts emitted tokens, turns them into events and knows when to stop."""

    def __init__(self, tokenizer, max_new_tokens: int, stop_ids: frozenset[int], link: Link, cancel: threading.Event):
        self.detokenizer = Detokenizer(tokenizer)
        self.max_new_tokens = max_new_tokens
        self.stop_ids = stop_ids
        self.link = link
        self.cancel = cancel
        self.pieces: list[str] = []
        self.stop_reason: str | None = None
        self.sent: list[str] = []  # the text of every id the Edge sent, in order (GenerationStats.sent_text)

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    def keep_going(self) -> bool:
        """False once the text ended, the budget is spent or a stop was asked for.

        A stop is honoured here, between rounds and (by the speculative loop) right
        after drafting, before the drafts are sent: every draft that crossed the
        link is therefore also shown (and can be audited).
        """
        if self.stop_reason is None and self.cancel.is_set():
            self.stop_reason = "cancelled"
        return self.stop_reason is None

    def _event(
        self,
        token: int,
        text: str,
        kind: TokenKind,
        round_: int,
        ratio: float | None,
        segment: SegmentPlace | None = None,
        position: int | None = None,
    ) -> TokenEvent:
        return TokenEvent(
            token,
            text,
            kind,
            round_,
            ratio,
            self.link.totals["uplink"],
            self.link.totals["downlink"],
            segment,
            position,
        )

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.detokenizer.ids)

    def emit(
        self,
        token: int,
        kind: TokenKind,
        round_: int,
        ratio: float | None = None,
        segment: SegmentPlace | None = None,
        position: int | None = None,
    ) -> TokenEvent:
        is_end = token in self.stop_ids
        last = is_end or self.remaining == 1
        piece = self.detokenizer.push(token, final=last)
        self.pieces.append(piece)
        if last:
            self.stop_reason = "eos" if is_end else "length"
        return self._event(token, piece, kind, round_, ratio, segment, position)

    def pending(self, drafts: list[int], round_: int) -> TokenEvent:
        """The round's latest draft, shown before its verdict, with the text it would add after the
        drafts before it."""
        shown = self.detokenizer.peek(drafts[:-1]) if len(drafts) > 1 else ""
        text = self.detokenizer.peek(drafts)
        piece = text[len(shown) :] if text.startswith(shown) else text
        return self._event(drafts[-1], piece, "pending", round_, None, None, len(drafts) - 1)

    def rejected(
        self,
        drafts: list[int],
        round_: int,
        ratio: float | None,
        segments: Sequence[SegmentPlace | None],
        first_position: int = 0,
    ) -> list[TokenEvent]:
        """The refused draft and the unverified drafts after it, each with the text it would have added;
        ``first_position``: the refused draft's index in its round."""
        events = []
        shown = ""
        for i, (token, segment) in enumerate(zip(drafts, segments)):
            text = self.detokenizer.peek(drafts[: i + 1])
            piece = text[len(shown) :] if text.startswith(shown) else text
            events.append(
                self._event(token, piece, "rejected", round_, ratio if i == 0 else None, segment, first_position + i)
            )
            shown = text
        return events

    def ends_text(self, tokens: list[int]) -> bool:
        return bool(tokens) and tokens[-1] in self.stop_ids


def _run(
    pair: LoadedPair,
    pair_prompts: _Prompts,
    config: DecodeConfig,
    cancel: threading.Event,
    cloud: CloudEndpoint | None,
    conditions: LinkConditions | None,
    clock: StepClock = SYSTEM_CLOCK,
):
    problem = cross_tokenizer_problem(pair, config)
    if problem:
        raise ValueError(problem)
    if pair.cross is not None and not METHOD_INFO[config.method].device_only:
        if not pair_prompts.plain_large:
            raise ValueError("a cross-tokenizer pair needs the plain prompt in the Generalist's ids too")
        if METHOD_INFO[config.method].sends_private_context and not pair_prompts.private_large:
            raise ValueError(
                f"{METHOD_INFO[config.method].label} on a cross-tokenizer pair needs the private "
                "prompt in the Generalist's ids too"
            )
    steps = StepTimes(clock)  # every event ends a step
    forward_log = ForwardLog()
    # The one place where in-process and remote differ: which transport the link gets.
    link = Link((cloud or InProcessCloud(pair)).transport(), forward_log, conditions)
    if pair.cross is not None and METHOD_INFO[config.method].cloud_decodes:  # the Generalist's own ids come down
        output = _Output(pair.cross.tokenizer, config.max_new_tokens, pair.cross.eos_token_ids, link, cancel)
    else:
        output = _Output(pair.tokenizer, config.max_new_tokens, pair.eos_token_ids, link, cancel)
    stats = GenerationStats(method=config.method)
    # What the Edge sent, rejected drafts included (privacy audits); P³'s loop records its own (the Edge sends
    # the Cloud drafts it kept and its corrections, each round's at the next round's start).
    edge_sends = METHOD_INFO[config.method].edge_sends_tokens and not METHOD_INFO[config.method].cloud_drafts
    sent = output.sent
    try:
        with torch.inference_mode():
            for event in _loop(pair, pair_prompts, config, output, link, stats):
                elapsed = steps.mark()
                if stats.first_visible_s is None:
                    stats.first_visible_s = elapsed
                    link.edge_ready()  # the Edge's prompt is read: an in-process Cloud may read its own now
                if stats.ttft_s is None and event.emitted:
                    stats.ttft_s = elapsed
                if event.pending:  # shown, not yet sent: its settled event follows the verdict
                    yield event
                    continue
                if edge_sends:
                    sent.append(event.text)
                yield event
    except CloudError as error:
        link.close()
        stats.sent_text = "".join(sent)
        output.stop_reason = "cloud-error"
        error.partial = _finished(pair, output, stats, link, steps)
        raise
    finally:
        link.close()  # the Cloud's last report completes the trace; a second close does nothing
    stats.sent_text = "".join(sent)
    yield _finished(pair, output, stats, link, steps)


def _finished(pair: LoadedPair, output: _Output, stats: GenerationStats, link: Link, steps: StepTimes) -> Finished:
    forward_log = link.forward_log
    seconds = steps.mark()
    stats.pauses, stats.paused_s = find_pauses(steps.steps)
    new_tokens = len(output.detokenizer.ids)
    stats.new_tokens = new_tokens
    stats.seconds = seconds
    stats.tok_per_s = new_tokens / seconds if seconds > 0 else 0.0
    stats.acceptance_rate = stats.accepted / stats.drafted if stats.drafted else None
    stats.forward_calls = dict(forward_log.calls)
    stats.forward_seconds = dict(forward_log.seconds)
    stats.step_seconds = forward_log.step_seconds()
    stats.prefill_seconds = sum(forward_log.prefill_seconds.values())
    stats.uplink_bytes = link.totals["uplink"]
    stats.downlink_bytes = link.totals["downlink"]
    stats.stop_reason = output.stop_reason or "length"
    stats.trace = list(forward_log.trace)
    stats.runtime = pair.runtime
    stats.precision = pair.precision
    stats.runtime_choice = getattr(pair, "runtime_choice", "")
    stats.stream_runtimes = pair.stream_runtimes()
    stats.cloud_runtime = link.known_info.runtime if link.known_info is not None else ""
    stats.specialist_lora = pair.lora.label if pair.lora is not None else ""
    stats.reused_tokens = dict(forward_log.reused)
    return Finished("".join(output.pieces), list(output.detokenizer.ids), stats, list(link.transcript))


@dataclass(frozen=True)
class _Prompts:
    """A generation's prompts: the plain one and the private one in the Specialist's ids, and on a
    cross-tokenizer pair the plain one in the Generalist's ids (and, for llm+, the private one)."""

    plain: list[int]
    private: list[int]
    plain_large: list[int] | None = None
    private_large: list[int] | None = None


def _loop(
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: _Output, link: Link, stats: GenerationStats
) -> Iterator[TokenEvent]:
    if METHOD_INFO[config.method].device_only:
        return _device_only(pair, prompts.plain, prompts.private, config, link.forward_log, output)
    if METHOD_INFO[config.method].cloud_decodes:
        return _cloud_only(pair, prompts, config, output, link)
    if METHOD_INFO[config.method].cloud_drafts:
        return _p3(pair, prompts, config, output, link, stats)
    return _speculative(pair, prompts, config, output, link, stats)


def _temperature(config: DecodeConfig) -> float:
    """The sampling temperature both sides use: 0 (greedy) unless the config samples."""
    return config.temperature if config.sample else 0.0


def _edge_params(
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
    )


def _device_only(
    pair: LoadedPair,
    plain_ids: list[int],
    private_ids: list[int],
    config: DecodeConfig,
    forward_log: ForwardLog,
    output: _Output,
) -> Iterator[TokenEvent]:
    personal = config.method == "slm+"
    params = _edge_params(config, pair, Rule.MATCH, 0.0, EDGE_STREAM if personal else GENERIC_STREAM)
    edge = Edge(pair.specialist, private_ids if personal else plain_ids, pair.vocab_size, forward_log, params)
    try:
        while output.keep_going():
            yield output.emit(edge.next_token(), "plain", 0)
    finally:
        edge.close()


def _opening(
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
        bonus=config.bonus or _every_token(config),
        seed=config.seed,
        stop_ids=tuple(sorted(pair.eos_token_ids)),
    )
    if pair.cross is not None:
        if plain_large_ids is None:
            raise ValueError("a cross-tokenizer pair's Open needs the plain prompt in the Generalist's ids")
        return CrossOpen.extending(opening, plain_large_ids)
    return opening


def _shared_vocabulary(pair: LoadedPair, link: Link) -> int:
    """The ids both sides score. The Cloud must serve the Specialist the Edge runs (its generic copy)."""
    info = link.info()
    if info.pairing != pair.pairing_id:
        raise CloudRefused(
            f"The Cloud serves the pairing {info.pairing!r} but this Edge runs {pair.pairing_id!r}; "
            "start the Cloud with the Edge's pairing.",
            "pairing",
        )
    return min(pair.vocab_size, info.vocab_size)


def _cloud_only(
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: _Output, link: Link
) -> Iterator[TokenEvent]:
    """The ``llm`` and ``llm+`` baselines: the Cloud decodes alone and streams its tokens down (no round
    trip per token). llm+ is the privacy-violating reference: the Cloud is opened on the private prompt."""
    _shared_vocabulary(pair, link)
    if METHOD_INFO[config.method].sends_private_context:
        opening = _opening(pair, link, prompts.private, config, Rule.GENERATE, 0.0, prompts.private_large)
    else:
        opening = _opening(pair, link, prompts.plain, config, Rule.GENERATE, 0.0, prompts.plain_large)
    stream = link.open(opening)
    try:
        for message in stream:
            for token in message.ids:
                yield output.emit(token, "plain", 0)
            if not output.keep_going():
                return
    finally:
        stream.close()
    if not output.done:
        raise CloudUnreachable("The Cloud's token stream ended before the generation did.", "stream-ended")


def _rule_and_beta(config: DecodeConfig) -> tuple[Rule, float]:
    """The verification rule of a speculative method's session, and the steering strength it sends."""
    if config.method == "sd":
        return (Rule.EXACT if config.sample else Rule.MATCH), 0.0
    if config.method == "costeer":
        return Rule.COSTEER, config.beta
    if config.method == "specsteer" and config.exact:
        return Rule.EXACT, config.beta
    return Rule.RATIO, config.beta


def _every_token(config: DecodeConfig) -> bool:
    """Rounds of draft length 0, a chosen token each (LightCoSteer, CoSteer): a Cloud method that does not draft."""
    info = METHOD_INFO[config.method]
    return not (info.speculative or info.device_only or info.cloud_decodes or info.cloud_drafts)


def _speculative(
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: _Output, link: Link, stats: GenerationStats
) -> Iterator[TokenEvent]:
    """The Edge of a speculative method and its session on the Cloud; the Edge's cache is given back at the end."""
    rule, beta = _rule_and_beta(config)
    every_token = _every_token(config)  # rounds of draft length 0
    vocab_size = _shared_vocabulary(pair, link)
    link.open(_opening(pair, link, prompts.plain, config, rule, beta, prompts.plain_large))
    guard = PrivateSpanGuard(prompts.private, prompts.plain, config.private_guard) if config.private_guard else None
    params = _edge_params(config, pair, rule, beta, guard=guard)
    places: Callable[[list[int]], list[SegmentPlace | None]] = _no_segments
    edge: Edge
    if pair.cross is not None:
        small = pair.cross.vocabularies.small
        edge = CrossEdge(pair.specialist, prompts.private, vocab_size, link.forward_log, params, small)
        places = partial(_segment_places, pair.cross.vocabularies)
    else:
        edge = Edge(pair.specialist, prompts.private, vocab_size, link.forward_log, params)
    try:
        yield from _rounds(edge, config, every_token, output, link, stats, places)
    finally:
        edge.close()


def _p3(
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: _Output, link: Link, stats: GenerationStats
) -> Iterator[TokenEvent]:
    """P³ (specsteer.method.p3): each round the Cloud drafts k tokens from the plain prompt and what the Edge
    sent; the Edge keeps them while p/max p >= tau and corrects the first one below. Events name them as
    SpecSteer's do (a kept Cloud draft accepted, a refused one rejected, the correction recovered); the
    kept drafts and the correction cross the uplink at the next round's start."""
    vocab_size = _shared_vocabulary(pair, link)
    opening = _opening(pair, link, prompts.plain, config, Rule.CLOUD_DRAFT, 0.0)
    link.open(replace(opening, top_k=config.p3.draft_len, bonus=False))
    guard = PrivateSpanGuard(prompts.private, prompts.plain, config.private_guard) if config.private_guard else None
    edge = P3Edge(
        pair.specialist, prompts.private, vocab_size, link.forward_log, config.p3.tau, config.max_new_tokens, guard
    )
    stats.device_chosen = 0
    block: list[int] = []  # the tokens the Edge kept or chose since the last round: the next round sends them
    block_text: list[str] = []  # their pieces of the output
    round_ = 0
    try:
        while output.keep_going():
            round_ += 1
            started, first_step = time.perf_counter(), len(link.forward_log.trace)
            output.sent.extend(block_text)  # sent now (an answer that never comes does not unsend it)
            drafts = list(link.cloud_drafts(Draft(session=link.session, append=tuple(block), draft=())).ids)
            drafts = drafts[: output.remaining]
            if not drafts or max(drafts) >= vocab_size:
                raise CloudRefused("The Cloud answered a P³ round with no drafts or an unknown token id.", "malformed")
            for position in range(len(drafts)):
                yield output.pending(drafts[: position + 1], round_)
            decision = edge.check(drafts)
            _log_round(stats, link.forward_log, len(drafts), decision.accepted, started, first_step)
            stats.rounds += 1
            stats.drafted += len(drafts)
            stats.accepted += decision.accepted
            stats.verified += min(decision.accepted + 1, len(drafts))
            block, block_text = [], []
            for position, token in enumerate(drafts[: decision.accepted]):
                event = output.emit(token, "accepted", round_, decision.ratios[position], position=position)
                block.append(token)
                block_text.append(event.text)
                yield event
                if output.done:
                    return
            if decision.correction is None:
                continue
            refused = drafts[decision.accepted :]
            yield from output.rejected(
                refused, round_, decision.ratios[decision.accepted], _no_segments(refused), decision.accepted
            )
            event = output.emit(decision.correction, "recovered", round_, position=decision.accepted)
            block.append(decision.correction)
            block_text.append(event.text)
            stats.device_chosen += 1
            yield event
    finally:
        edge.close()


def _no_segments(drafts: list[int]) -> list[SegmentPlace | None]:
    """One vocabulary: every draft is tested on its own, and its event names no segment."""
    return [None] * len(drafts)


def _segment_places(vocabularies, drafts: list[int]) -> list[SegmentPlace | None]:
    """Each draft's place in the segments the Cloud tests them in (the Cloud's own cut, recomputed here
    from the same text: the Edge holds both vocabularies)."""
    _, segments = vocabularies.draft_segments(drafts)
    return [SegmentPlace(position, segment.drafts) for segment in segments for position in range(segment.drafts)]


def _rounds(
    edge: Edge,
    config: DecodeConfig,
    every_token: bool,
    output: _Output,
    link: Link,
    stats: GenerationStats,
    places: Callable[[list[int]], list[SegmentPlace | None]] = _no_segments,
) -> Iterator[TokenEvent]:
    """Draft -> Verify -> Recover, one round per iteration. ``places``: each draft's segment place."""
    forward_log = link.forward_log
    chosen_kind: TokenKind | None = "plain" if every_token else None
    append: list[int] = []
    keep = -1
    round_ = 0
    draft_length = DraftLength(config.draft_len, config.adaptive_draft and not every_token)
    while output.keep_going():
        round_ += 1
        started, first_step = time.perf_counter(), len(forward_log.trace)
        k = 0 if every_token else draft_length.choose(stats, forward_log)
        drafts: list[int] = []
        for token in edge.drafts(min(k, output.remaining), output.cancel):
            drafts.append(token)
            yield output.pending(drafts, round_)  # on screen now; the verdict settles it below
        if not output.keep_going():  # stopped while drafting: these drafts never cross the link
            return
        verdict = link.verify(Draft(session=link.session, keep=keep, append=tuple(append), draft=tuple(drafts)))
        may_extend = output.remaining > len(drafts) and not output.ends_text(drafts)
        settled = edge.settle(verdict, drafts, may_extend)
        _log_round(stats, forward_log, len(drafts), settled.accepted, started, first_step)
        # The ratios are instrumentation for the UI: read off whichever side
        # computed them, never sent as a message.
        ratios = settled.ratios or link.last_ratios
        stats.rounds += 1
        stats.drafted += len(drafts)
        stats.accepted += settled.accepted
        stats.verified += min(settled.accepted + 1, len(drafts))
        segments = places(drafts) if drafts else []
        for position, token in enumerate(drafts[: settled.accepted]):
            yield output.emit(token, "accepted", round_, _at(ratios, position), segments[position], position)
            if output.done:
                return
        if settled.accepted < len(drafts):
            yield from output.rejected(
                drafts[settled.accepted :],
                round_,
                _at(ratios, settled.accepted),
                segments[settled.accepted :],
                settled.accepted,
            )
        if settled.chosen is not None:
            kind = chosen_kind or ("recovered" if settled.accepted < len(drafts) else "bonus")
            # A recovered token takes the refused draft's place; a bonus the one after the last draft.
            yield output.emit(settled.chosen, kind, round_, position=settled.accepted)
        append = [settled.chosen] if settled.chosen is not None else []
        keep = settled.accepted if RULE_SPECS[edge.params.rule].reports_kept else -1


def _log_round(
    stats: GenerationStats, forward_log: ForwardLog, drafted: int, accepted: int, started: float, first_step: int
) -> None:
    """Add the round begun at ``started`` (``perf_counter``), its steps from ``first_step`` of the trace, to the
    stats' round log (a few steps summed: cheap beside a round)."""
    seconds = time.perf_counter() - started
    stats.round_log.append(RoundStep.of(drafted, accepted, seconds, forward_log.trace[first_step:]))


class DraftLength:
    """The draft length of each round: fixed, or the k that maximises the bound right now.

    Adaptive mode uses this generation's own measurements: the per-token
    acceptance so far, a Specialist step's mean time, and each Cloud model's
    pass time as a function of the tokens in the pass (fitted on this
    generation's passes). A transformers pass over a few tokens costs about
    one step; a llama.cpp pass on a CPU grows with its tokens, which makes
    long drafts expensive there. It starts at the maximum until there is data.
    """

    MIN_VERIFIED = 8

    def __init__(self, maximum: int, adaptive: bool):
        self.maximum = maximum
        self.adaptive = adaptive

    def choose(self, stats: GenerationStats, log: ForwardLog) -> int:
        if not self.adaptive or stats.verified < self.MIN_VERIFIED:
            return self.maximum
        draft_cost, large_cost = pass_cost(log.trace, EDGE_STREAM), pass_cost(log.trace, GENERALIST_STREAM)
        if draft_cost is None or large_cost is None:
            return self.maximum
        if len({sample.tokens for sample in _passes(log.trace, GENERALIST_STREAM)}) < 2:
            # Every verification so far read as many tokens, so how a pass's time grows with its
            # tokens is unknown: probe a shorter round once to learn it.
            return max(1, self.maximum // 2)
        generic_cost = pass_cost(log.trace, GENERIC_STREAM) or PassCost(0.0, 0.0)
        acceptance = min(max(stats.accepted / stats.verified, 0.01), 0.99)
        return max(
            range(1, self.maximum + 1),
            key=lambda k: speculative_bound(
                acceptance, k, draft_cost.seconds(1), large_cost.seconds(k + 1), generic_cost.seconds(k + 1)
            ),
        )


def _passes(trace: Sequence, stream: str) -> list[PassSample]:
    """A stream's passes after its first (the prefill)."""
    return [PassSample(step.size, step.seconds) for step in trace if step.kind == "forward" and step.who == stream][1:]


def pass_cost(trace: Sequence, stream: str) -> PassCost | None:
    """The deployment projection's least-squares line through a stream's passes after its prefill (flat
    when they all read as many tokens); None before the stream has had two passes."""
    points = _passes(trace, stream)
    return fit_pass_cost(points, flat_cost) if points else None


def _at(values: list[float], index: int) -> float | None:
    return values[index] if index < len(values) else None
