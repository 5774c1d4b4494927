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

This module is the loops; their parts sit beside it, one job each: ``request`` (the request and its prompts),
``decode_config`` (the config, validated), ``session_setup`` (what each side's session opens with), ``output``
(tokens into events), ``details`` (a token's numbers) and ``draft_length`` (each round's k).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial

import torch

from specsteer.cloud.in_process import InProcessCloud
from specsteer.edge.p3 import P3Edge
from specsteer.edge.session import CrossEdge, Edge
from specsteer.engine.decode_config import DecodeConfig, cross_tokenizer_problem
from specsteer.engine.details import draft_details, named_details
from specsteer.engine.draft_length import DraftLength
from specsteer.engine.output import Output
from specsteer.engine.request import Prepared, Request, chat_ids, prepare
from specsteer.engine.session_setup import (
    check_acceptance,
    chooses_every_token,
    cloud_opening,
    edge_params,
    rule_and_beta,
    shared_vocabulary,
    span_guard,
)
from specsteer.method.catalog import METHOD_INFO
from specsteer.method.decoding import ForwardLog
from specsteer.method.events import (
    EDGE_STREAM,
    GENERIC_STREAM,
    Finished,
    GenerationStats,
    RoundStep,
    SegmentPlace,
    TokenEvent,
    TokenKind,
)
from specsteer.method.timing import SYSTEM_CLOCK, StepClock, StepTimes, find_pauses
from specsteer.models.pair import LoadedPair
from specsteer.protocol.emulation import LinkConditions
from specsteer.protocol.link import CloudEndpoint, CloudError, CloudRefused, CloudUnreachable, Link
from specsteer.protocol.rules import RULE_SPECS, Rule
from specsteer.protocol.wire import Draft


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


def collect(events: Iterable[TokenEvent | Finished]) -> tuple[list[TokenEvent], Finished]:
    """The settled tokens (pending drafts left out: their verdict's events follow) and the Finished."""
    tokens: list[TokenEvent] = []
    for event in events:
        if isinstance(event, Finished):
            return tokens, event
        if not event.pending:
            tokens.append(event)
    raise RuntimeError("generation ended without a Finished event")


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
    if config.details:
        link.ask_details()
    if pair.cross is not None and METHOD_INFO[config.method].cloud_decodes:  # the Generalist's own ids come down
        output = Output(pair.cross.tokenizer, config.max_new_tokens, pair.cross.eos_token_ids, link, cancel)
    else:
        output = Output(pair.tokenizer, config.max_new_tokens, pair.eos_token_ids, link, cancel)
    stats = GenerationStats(method=config.method, cda_lambda=config.cda_lambda)
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


def _finished(pair: LoadedPair, output: Output, stats: GenerationStats, link: Link, steps: StepTimes) -> Finished:
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
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: Output, link: Link, stats: GenerationStats
) -> Iterator[TokenEvent]:
    if METHOD_INFO[config.method].device_only:
        return _device_only(pair, prompts.plain, prompts.private, config, link.forward_log, output)
    if METHOD_INFO[config.method].cloud_decodes:
        return _cloud_only(pair, prompts, config, output, link)
    if METHOD_INFO[config.method].cloud_drafts:
        return _p3(pair, prompts, config, output, link, stats)
    return _speculative(pair, prompts, config, output, link, stats)


def _device_only(
    pair: LoadedPair,
    plain_ids: list[int],
    private_ids: list[int],
    config: DecodeConfig,
    forward_log: ForwardLog,
    output: Output,
) -> Iterator[TokenEvent]:
    personal = config.method == "slm+"
    params = edge_params(config, pair, Rule.MATCH, 0.0, EDGE_STREAM if personal else GENERIC_STREAM)
    edge = Edge(pair.specialist, private_ids if personal else plain_ids, pair.vocab_size, forward_log, params)
    try:
        while output.keep_going():
            yield output.emit(edge.next_token(), "plain", 0)
    finally:
        edge.close()


def _cloud_only(
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: Output, link: Link
) -> Iterator[TokenEvent]:
    """The ``llm`` and ``llm+`` baselines: the Cloud decodes alone and streams its tokens down (no round
    trip per token). llm+ is the privacy-violating reference: the Cloud is opened on the private prompt."""
    shared_vocabulary(pair, link)
    if METHOD_INFO[config.method].sends_private_context:
        opening = cloud_opening(pair, link, prompts.private, config, Rule.GENERATE, 0.0, prompts.private_large)
    else:
        opening = cloud_opening(pair, link, prompts.plain, config, Rule.GENERATE, 0.0, prompts.plain_large)
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


def _speculative(
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: Output, link: Link, stats: GenerationStats
) -> Iterator[TokenEvent]:
    """The Edge of a speculative method and its session on the Cloud; the Edge's cache is given back at the end."""
    rule, beta = rule_and_beta(config)
    every_token = chooses_every_token(config)  # rounds of draft length 0
    vocab_size = shared_vocabulary(pair, link)
    check_acceptance(config, link)
    link.open(cloud_opening(pair, link, prompts.plain, config, rule, beta, prompts.plain_large))
    guard = span_guard(config, prompts.private, prompts.plain)
    params = edge_params(config, pair, rule, beta, guard=guard)
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
    pair: LoadedPair, prompts: _Prompts, config: DecodeConfig, output: Output, link: Link, stats: GenerationStats
) -> Iterator[TokenEvent]:
    """P³ (specsteer.method.p3): each round the Cloud drafts k tokens from the plain prompt and what the Edge
    sent; the Edge keeps them while p/max p >= tau and corrects the first one below. Events name them as
    SpecSteer's do (a kept Cloud draft accepted, a refused one rejected, the correction recovered); the
    kept drafts and the correction cross the uplink at the next round's start."""
    vocab_size = shared_vocabulary(pair, link)
    opening = cloud_opening(pair, link, prompts.plain, config, Rule.CLOUD_DRAFT, 0.0)
    link.open(replace(opening, top_k=config.p3.draft_len, bonus=False))
    guard = span_guard(config, prompts.private, prompts.plain)
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
    output: Output,
    link: Link,
    stats: GenerationStats,
    places: Callable[[list[int]], list[SegmentPlace | None]] = _no_segments,
) -> Iterator[TokenEvent]:
    """Draft -> Verify -> Recover, one round per iteration. ``places``: each draft's segment place."""
    forward_log = link.forward_log
    tokenizer = output.detokenizer.tokenizer  # names the alternatives in a token's details
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
        numbers = draft_details(edge, drafts, link, config.alpha, tokenizer) if config.details else [None] * len(drafts)
        for position, token in enumerate(drafts[: settled.accepted]):
            yield output.emit(
                token, "accepted", round_, _at(ratios, position), segments[position], position, numbers[position]
            )
            if output.done:
                return
        if settled.accepted < len(drafts):
            yield from output.rejected(
                drafts[settled.accepted :],
                round_,
                _at(ratios, settled.accepted),
                segments[settled.accepted :],
                settled.accepted,
                numbers[settled.accepted :],
            )
        if settled.chosen is not None:
            kind = chosen_kind or ("recovered" if settled.accepted < len(drafts) else "bonus")
            # A recovered token takes the refused draft's place; a bonus the one after the last draft.
            choice = named_details(edge.last_choice, tokenizer) if config.details else None
            yield output.emit(settled.chosen, kind, round_, position=settled.accepted, details=choice)
        append = [settled.chosen] if settled.chosen is not None else []
        keep = settled.accepted if RULE_SPECS[edge.params.rule].reports_kept else -1


def _log_round(
    stats: GenerationStats, forward_log: ForwardLog, drafted: int, accepted: int, started: float, first_step: int
) -> None:
    """Add the round begun at ``started`` (``perf_counter``), its steps from ``first_step`` of the trace, to the
    stats' round log (a few steps summed: cheap beside a round)."""
    seconds = time.perf_counter() - started
    stats.round_log.append(RoundStep.of(drafted, accepted, seconds, forward_log.trace[first_step:]))


def _at(values: list[float], index: int) -> float | None:
    return values[index] if index < len(values) else None
