"""The Cloud as a service: many Edges' sessions over one loaded pair, with limits, idle expiry and clear errors.

Transport-free: :meth:`CloudService.handle` takes one uplink frame and returns the frames that answer
it; :meth:`CloudService.close` ends a session; :meth:`CloudService.info` describes the Cloud. The
in-process link (``specsteer.cloud.in_process.LocalTransport``) calls these directly and the HTTP service
(``specsteer.cloud.server``) calls the same methods for every request, so both run one code path.

Session lifecycle
-----------------
* An :class:`~specsteer.protocol.wire.Open` creates the session named by the id the Edge chose. Its
  limits (``specsteer.cloud.limits``) are checked first; the id must be new (a Cloud never reuses one);
  there must be room (``max_sessions``). A lockstep rule answers nothing; the ``generate`` rule answers with
  a stream of :class:`~specsteer.protocol.wire.Tokens` frames, one per token, ending at the token budget or
  an end id.
* Each :class:`~specsteer.protocol.wire.Draft` is answered by one :class:`~specsteer.protocol.wire.Verdict`.
  Requests of one session are served one at a time; different sessions interleave pass by pass.
* ``close`` ends a session and returns the last of its report. A session with no request for
  ``idle_timeout_s`` expires. Either way the Cloud remembers the id for a while, so a late request
  is told the session expired or was closed rather than that it never existed.

Admission by memory
-------------------
A session's caches are the big cost: one context per Cloud stream, each sized for its prompt, its
token budget and the draft headroom (``ModelRuntime.sequence_bytes`` says what such a context may
come to hold). An Open is admitted only when the sessions' reserved bytes plus its own fit
``memory_budget_bytes`` (``python -m specsteer cloud`` sets it from the memory where the Generalist's caches
live: the host's, or the GPU's), when the
client (``handle``'s ``client``: the credential the request carried, ``specsteer.cloud.admission``, never
its source address) holds fewer than ``max_sessions_per_client`` sessions and at most
``max_client_share`` of the budget, and when ``max_sessions`` is not reached. An Open that does not
fit takes the room of idle sessions, oldest-idle first and only as many as it needs: those without
a message for ``reclaim_idle_s``, and those that opened ``unstarted_timeout_s`` ago and never drafted
(nor read a token). If even that would not make room, nothing is ended and it gets 503 with
``retry_after_s``, the time until a session could give its room. An admitted Open gives back the
prefix caches' idle sequences when they and the sessions together would pass the budget, so what
the caches hold stays under it. A session ends at ``max_session_life_s`` after its Open whatever
it does, and a server whose client went away mid-stream ends it at once (:meth:`CloudService.abandon`).

Every refusal is a ``ServiceError`` with an HTTP status, a short code and a message meant for the person
running the Edge (``specsteer.cloud.refusals``); the service itself keeps serving. A failure inside a model
pass drops that session only.

One model pass runs at a time (``_compute``): on a CPU two passes side by side only share the same
cores, and the runtimes' caches are then never touched by two threads at once. Batching the passes
of several sessions (what a GPU server would do) is left for later.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from specsteer.cloud import admission
from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.read_ahead import ReadAhead, read_ahead_mode
from specsteer.cloud.refusals import (
    ServiceError,
    acceptance_refusal,
    draft_problem,
    gone_error,
    open_problem,
    read_uplink,
)
from specsteer.cloud.session_record import SessionRecord
from specsteer.cloud.verifier import Cloud, CrossCloud
from specsteer.method.acceptance import RATIO_TEST, AcceptancePolicy
from specsteer.method.decoding import ForwardLog
from specsteer.models.pair import LoadedPair
from specsteer.protocol.cloud_reports import CloudInfo, CloudReport
from specsteer.protocol.rules import ACCEPTANCE_RULES, FIXED, RULE_SPECS
from specsteer.protocol.wire import DRAFT_HEADROOM, Draft, Open, encode
from specsteer.runtimes.base import ModelRuntime

_REMEMBERED_ENDED = 4096  # ended session ids kept to tell "expired" and "closed" apart from "unknown"


@dataclass(frozen=True)
class Answer:
    """The frames answering one uplink frame (a stream is read lazily), and the report that goes with
    them; a streamed answer's report waits for the session's close."""

    frames: Iterable[bytes]
    report: CloudReport | None
    session: bytes | None = None  # a stream's session: what the server ends when its reader goes away


class CloudService:
    """Sessions of many Edges over one pair's Generalist and Specialist (the generic copy).

    ``clock`` is injectable so that expiry can be tested without waiting; ``reuse_prefixes=False``
    forgets every cached prompt when a session closes (benchmarks time each method's prompt reading).
    ``read_ahead`` (specsteer.cloud.read_ahead; True is ``concurrent``, False ``off``): ``concurrent``, an Open
    starts reading the session's prompts at once, in a thread of their own, so the Cloud reads them while
    the Edge reads its private prompt (as two machines do); the first Draft waits for it.
    ``after-first-draft``, that thread waits for :meth:`edge_ready` (or the first request that needs the
    prompts, or the close). ``off``, a session reads its prompts with its first Draft (one pass fewer per
    stream). ``acceptance`` (specsteer.method.acceptance): who decides the rounds of SpecSteer's rule, the ratio
    test unless a measurement scripts it (same-tokenizer pairs).
    """

    def __init__(
        self,
        pair: LoadedPair,
        limits: ServiceLimits = ServiceLimits(),
        clock: Callable[[], float] = time.monotonic,
        reuse_prefixes: bool = True,
        notice: Callable[[str], None] | None = None,
        read_ahead: ReadAhead | bool = False,
        acceptance: AcceptancePolicy = RATIO_TEST,
    ):
        if pair.cross is not None and acceptance != RATIO_TEST:
            raise ValueError("a cross-tokenizer pair's Cloud decides its segments by the ratio test only")
        self.acceptance = acceptance
        # Each draft's numbers in the reports (method.token_details): set only by a transport in this process
        # (LocalTransport.ask_details), so a Cloud service behind a network never computes nor sends them.
        self.details = False
        self.pair = pair.cloud_side()  # the base Specialist as the generic copy: an Edge's LoRA adapter stays there
        self.notice = notice  # one line for the operator when a session is reclaimed or abandoned
        self.limits = limits
        self.reuse_prefixes = reuse_prefixes
        self.read_ahead: ReadAhead = read_ahead_mode(read_ahead)
        self.instance = secrets.token_hex(8)  # a restarted Cloud has another
        self._clock = clock
        self._sessions: dict[bytes, SessionRecord] = {}
        self._ended: OrderedDict[bytes, str] = OrderedDict()
        self._table = threading.Lock()
        self._compute = threading.Lock()
        self._admission = threading.Lock()  # one Open at a time decides what room is left

    # ----------------------------------------------------------------------- the three requests

    def info(self) -> CloudInfo:
        return CloudInfo(
            self.pair.pairing_id,
            self.pair.vocab_size,
            instance=self.instance,
            runtime=self.pair.runtime,
            limits=self.limits.to_json(),
            acceptance=self.acceptance_rules,
        )

    @property
    def acceptance_rules(self) -> tuple[str, ...]:
        """The acceptance rules this Cloud applies: CDA too where it holds both rows over one vocabulary and its
        rounds are not scripted by a measurement."""
        if self.pair.cross is None and self.acceptance == RATIO_TEST:
            return ACCEPTANCE_RULES
        return (FIXED,)

    def handle(self, frame: bytes, client: str = "") -> Answer:
        """Answer one uplink frame from ``client`` (who is asking: the credential the server saw,
        ``specsteer.cloud.admission``; the per-client caps count by it); raises ServiceError for anything the
        Cloud refuses."""
        message = read_uplink(frame, self.frame_limit)
        self.expire_idle()
        if isinstance(message, Open):
            return self._open(message, client)
        return self._verify(message)

    def close(self, session_id: bytes) -> CloudReport:
        """End a session; returns what its report has not said yet."""
        session = self._find(session_id)
        session.skip_reading = True  # a read-ahead that has not begun is needed by no request now
        self._await_reading(session)
        with session.lock:
            if session.closed:
                raise self._gone(session_id)
            report = session.report()
            self._end(session, "closed-session")
        return report

    def edge_ready(self, session_id: bytes) -> None:
        """The Edge has read its prompt and drafted (a hint from an Edge in this process; no frame): a
        session reading ahead ``after-first-draft`` starts reading now. An unknown session is ignored."""
        with self._table:
            session = self._sessions.get(session_id)
        if session is not None:
            session.read_gate.set()

    @property
    def frame_limit(self) -> int:
        """The largest uplink frame this Cloud reads (its pair decides which kind of Open is legal)."""
        return self.limits.max_frame_bytes if self.pair.cross is None else self.limits.max_cross_frame_bytes

    # ----------------------------------------------------------------------- housekeeping

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    @property
    def reserved_bytes(self) -> int:
        """The budget the open sessions hold."""
        with self._table:
            return sum(session.reserved for session in self._sessions.values())

    def _generalist(self) -> ModelRuntime:
        """The pair's Generalist: a Cloud serves only a pair loaded with it."""
        if self.pair.generalist is None:
            raise ValueError("a Cloud needs the Generalist: this pair was loaded for the Edge only")
        return self.pair.generalist

    def session_bytes(self, message: Open) -> int:
        """What the caches of a session opened by ``message`` may come to hold (its reservation)."""
        capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        total = self._generalist().sequence_bytes(capacity)
        if RULE_SPECS[message.rule].needs_generic(message.beta):
            total += self.pair.specialist.sequence_bytes(capacity)
        return total

    def expire_idle(self) -> int:
        """End the sessions idle for longer than the limit, and those past their life (a busy one is left
        alone); returns how many."""
        idle, life = self.limits.idle_timeout_s, self.limits.max_session_life_s
        expired = 0
        if idle is not None:
            expired += self._expire(lambda session, now: session.last_used < now - idle, "expired-session")
        if life is not None:
            expired += self._expire(lambda session, now: session.opened_at < now - life, "lifetime-session")
        return expired

    def abandon(self, session_id: bytes) -> bool:
        """End a session whose Edge went away in the middle of its stream (waits for a pass in flight);
        False when it had ended already."""
        with self._table:
            session = self._sessions.get(session_id)
        if session is None:
            return False
        with session.lock:
            if session.closed:
                return False
            self._end(session, "closed-session")
        return True

    def _expire(self, due: Callable[[SessionRecord, float], bool], reason: str) -> int:
        now = self._clock()
        with self._table:
            idle = [s for s in self._sessions.values() if due(s, now)]
        expired = 0
        for session in idle:
            if not session.lock.acquire(blocking=False):
                continue
            try:
                if not session.closed and due(session, now):
                    self._end(session, reason)
                    expired += 1
            finally:
                session.lock.release()
        return expired

    def close_all(self) -> None:
        """End every session (the service is stopping)."""
        with self._table:
            sessions = list(self._sessions.values())
        for session in sessions:
            with session.lock:
                if not session.closed:
                    self._end(session, "closed-session")

    # ----------------------------------------------------------------------- messages

    def _open(self, message: Open, client: str) -> Answer:
        self._generalist()  # a Cloud serves only a pair loaded with its Generalist
        problem = self._open_problem(message)
        if problem:
            raise ServiceError(400, "invalid", problem)
        log = ForwardLog()
        cloud = self._new_cloud(log)
        session = SessionRecord(
            message.session, message, cloud, log, self._clock(), client, self.session_bytes(message)
        )
        session.opened_at = session.last_used
        with session.lock:
            with self._admission:
                self._make_room(session)
                self._free_idle_caches(session.reserved)
                with self._table:
                    self._sessions[message.session] = session
            session.messages = 1
            self._run(session, session.cloud.open, message)
            session.last_used = self._clock()
            # The Open's own report is taken before the read-ahead starts: its passes always come with
            # the first Draft's answer, placed before that Draft (in process and over HTTP alike).
            report = None if message.streams else session.report()
            # Only a rule where the Edge drafts first has a first draft to wait for.
            if self.read_ahead != "after-first-draft" or message.streams or RULE_SPECS[message.rule].cloud_drafts:
                session.read_gate.set()
            if self.read_ahead != "off":
                session.reading = threading.Thread(
                    target=self._read_ahead, args=(session,), name="specsteer-cloud-read-ahead", daemon=True
                )
                session.reading.start()
        if message.streams:
            return Answer(self._stream(session), None, message.session)
        return Answer((), report)

    def _new_cloud(self, log: ForwardLog):
        """A new session's Cloud (a serving engine's Cloud service gives its own kind)."""
        cross = self.pair.cross
        if cross is not None:
            return CrossCloud(
                self.pair.generalist,
                self.pair.specialist,
                self.pair.vocab_size,
                cross.vocab_size,
                cross.vocabularies,
                log,
            )
        cloud = Cloud(self.pair.generalist, self.pair.specialist, self.pair.vocab_size, log, self.acceptance)
        cloud.details = self.details
        return cloud

    def _verify(self, message: Draft) -> Answer:
        session = self._find(message.session)
        self._await_reading(session)
        with session.lock:
            if session.closed:
                raise self._gone(message.session)
            if self._past_life(session):
                self._end(session, "lifetime-session")
                raise self._gone(message.session)
            problem = draft_problem(message, self.limits, self.pair.vocab_size) or session.cloud.problem(message)
            if problem:
                raise ServiceError(400, "invalid", problem)
            session.started = True
            session.messages += 1
            verdict = self._run(session, session.cloud.verify, message)
            report = session.report(session.cloud.last_ratios, session.cloud.last_scores if self.details else ())
            session.messages += 1
            session.last_used = self._clock()
        return Answer((encode(verdict),), report)

    def _stream(self, session: SessionRecord) -> Iterator[bytes]:
        """The ``generate`` rule: one Tokens frame per token, each computed when the previous was taken."""
        # A cross-tokenizer Generalist decodes in its own ids (the Open's end ids are the Specialist's).
        cross = self.pair.cross
        stop_ids = cross.eos_token_ids if cross is not None else frozenset(session.opened.stop_ids)
        self._await_reading(session)
        while True:
            with session.lock:
                if session.closed or session.finished:
                    return
                if self._past_life(session):  # the Edge is told by the stream's early end
                    self._end(session, "lifetime-session")
                    return
                session.started = True
                tokens = self._run(session, session.cloud.next_tokens, 1)
                session.collect_passes()
                session.messages += 1
                session.emitted += len(tokens.ids)
                session.finished = session.emitted >= session.opened.max_new_tokens or tokens.ids[-1] in stop_ids
                session.last_used = self._clock()
            yield encode(tokens)

    # ----------------------------------------------------------------------- admission

    def _make_room(self, session: SessionRecord) -> None:
        """Admit ``session`` (specsteer.cloud.admission), ending the idle sessions whose room it takes; raises
        409 for a known id and 503 (with Retry-After) when there is no room. The caller holds ``_admission``."""
        with self._table:
            if session.id in self._sessions or session.id in self._ended:
                raise ServiceError(409, "session-exists", "A session with this id already exists on the Cloud.")
        candidate = admission.Holding(session.id, session.client, session.reserved, session.last_used, False)
        for _ in range(3):  # a victim that became busy meanwhile is left alone, and the room decided again
            now = self._clock()
            with self._table:
                holdings = [other.holding() for other in self._sessions.values()]
            decision = admission.admit(candidate, holdings, self.limits, now)
            if decision.refusal is not None:
                retry = decision.retry_after_s
                raise ServiceError(503, "busy", f"{decision.refusal} Try again in {retry} s.", retry_after_s=retry)
            if all(self._reclaim(victim, session.client, now) for victim in decision.victims):
                return
        raise ServiceError(503, "busy", "The Cloud's sessions are all in use. Try again in 1 s.", retry_after_s=1)

    def _reclaim(self, session_id: bytes, claimant: str, now: float) -> bool:
        """End a session whose room an Open takes; False when it is being served now (then it stays)."""
        with self._table:
            session = self._sessions.get(session_id)
        if session is None:
            return True
        if not session.lock.acquire(blocking=False):
            return False
        try:
            if not session.closed:
                # A session that never drafted ends as it did before reclaiming existed: expired.
                self._end(session, "reclaimed-session" if session.started else "expired-session")
                if self.notice is not None:
                    self.notice(
                        f"gave the room of session {session_id.hex()[:8]} ({session.client}, idle "
                        f"{now - session.last_used:.0f} s, {admission.megabytes(session.reserved)}) to an Open of {claimant}"
                    )
        finally:
            session.lock.release()
        return True

    def _past_life(self, session: SessionRecord) -> bool:
        life = self.limits.max_session_life_s
        return life is not None and self._clock() - session.opened_at > life

    def _free_idle_caches(self, wanted: int) -> None:
        """Give back the prefix caches' idle sequences when the sessions and they would pass the budget."""
        budget = self.limits.memory_budget_bytes
        if budget is None:
            return
        models = {id(m): m for m in (self.pair.generalist, self.pair.specialist) if m is not None}.values()
        with self._compute:
            idle = sum(model.prefix_cache.idle_bytes for model in models)
            if self.reserved_bytes + wanted + idle > budget:
                for model in models:
                    model.prefix_cache.clear()

    # ----------------------------------------------------------------------- checks

    def _open_problem(self, message: Open) -> str | None:
        problem = open_problem(message, self.limits, self.pair.vocab_size, self.pair.cross)
        return problem or acceptance_refusal(message, self.acceptance_rules, self._fixed_only_reason())

    def _fixed_only_reason(self) -> str:
        if self.pair.cross is not None:
            return "across two tokenizers there is no one vocabulary to compare p_L and p_S0 over"
        return f"its rounds are decided by {self.acceptance.label} (a measurement)"

    # ----------------------------------------------------------------------- sessions

    def _read_ahead(self, session: SessionRecord) -> None:
        """A session's prompts read in their own thread (``read_ahead``) once its gate opens; its passes join
        the session's report placed before its first Draft, where they ran. A failure ends the session."""
        session.read_gate.wait()
        try:
            with self._computing():
                if not (session.closed or session.skip_reading):
                    session.cloud.read_ahead()
        except BaseException as error:
            session.read_error = error
            with session.lock:
                if not session.closed:
                    self._end(session, "closed-session")
            return
        with session.lock:
            session.collect_passes()

    def _await_reading(self, session: SessionRecord) -> None:
        """Wait for the read-ahead; a request that needs the prompts opens its gate first."""
        session.read_gate.set()
        reading = session.reading
        if reading is not None and reading is not threading.current_thread():
            reading.join()
            if session.read_error is not None:
                raise ServiceError(500, "error", f"The Cloud failed to read the prompt: {session.read_error}")

    def _run(self, session: SessionRecord, step, *args):
        """One model step of a session, alone on the models; a failure ends the session (its caches
        may be half written) and propagates."""
        try:
            with self._computing():
                return step(*args)
        except BaseException:
            self._end(session, "closed-session")
            raise

    @contextmanager
    def _computing(self):
        with self._compute, torch.inference_mode():
            yield

    def _find(self, session_id: bytes) -> SessionRecord:
        with self._table:
            session = self._sessions.get(session_id)
        if session is None:
            raise self._gone(session_id)
        return session

    def _gone(self, session_id: bytes) -> ServiceError:
        with self._table:
            reason = self._ended.get(session_id)
        return gone_error(reason, self.limits, self.instance)

    def _end(self, session: SessionRecord, reason: str) -> None:
        """Forget a session and give its caches back (the caller holds the session's lock)."""
        session.closed = True
        session.read_gate.set()  # a read-ahead still waiting ends without reading
        with self._table:
            self._sessions.pop(session.id, None)
            self._ended[session.id] = reason
            while len(self._ended) > _REMEMBERED_ENDED:
                self._ended.popitem(last=False)
        with self._compute:
            session.cloud.close()
            if not self.reuse_prefixes:
                self.pair.clear_prefix_caches()
