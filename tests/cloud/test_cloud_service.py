"""The Cloud service without a network: sessions, limits, expiry on an injected clock, and the Edge's typed errors."""

from __future__ import annotations

import pytest

from specsteer.cloud.in_process import LocalTransport
from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.service import CloudService
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.protocol.link import CloudRefused, CloudUnreachable, SessionGone, VersionMismatch, cloud_error
from specsteer.protocol.wire import PROTOCOL_VERSION, Draft, Open, Tokens, Verdict, decode, encode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def session(n: int) -> bytes:
    return n.to_bytes(16, "little")


def opening(n: int, rule: str = "ratio", prompt=(1, 2, 3, 4), budget: int = 8, **settings) -> bytes:
    return encode(Open(session(n), rule, prompt, budget, **settings))


def draft(n: int, ids=(5, 6), append=(), keep: int = -1) -> bytes:
    return encode(Draft(session(n), ids, append=append, keep=keep))


def refused(call, *args) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        call(*args)
    return caught.value


def test_a_session_opens_verifies_and_closes(pair):
    service = CloudService(pair)
    answer = service.handle(opening(1))
    assert list(answer.frames) == [] and answer.report is not None
    answer = service.handle(draft(1))
    (frame,) = answer.frames
    verdict = decode(frame)
    assert isinstance(verdict, Verdict) and 0 <= verdict.accepted <= 2
    # The verification's passes ran after message 2 (open, draft) and before the verdict (message 3).
    assert {p.stream for p in answer.report.passes} == {"generalist", "specialist0"}
    assert all(p.after == 2 for p in answer.report.passes)
    assert service.open_sessions == 1
    service.close(session(1))
    assert service.open_sessions == 0
    gone = refused(service.handle, draft(1))
    assert (gone.status, gone.code) == (410, "closed-session")


def test_unknown_sessions_and_reused_ids_are_refused(pair):
    service = CloudService(pair)
    unknown = refused(service.handle, draft(9))
    assert (unknown.status, unknown.code) == (404, "unknown-session") and service.instance in str(unknown)
    service.handle(opening(1))
    again = refused(service.handle, opening(1))
    assert (again.status, again.code) == (409, "session-exists")
    service.close(session(1))
    assert refused(service.handle, opening(1)).code == "session-exists"  # never reused, even after it ended
    assert refused(service.close, session(1)).code == "closed-session"


def test_idle_sessions_expire_on_the_injected_clock(pair):
    clock = Clock()
    service = CloudService(pair, ServiceLimits(idle_timeout_s=60), clock=clock)
    service.handle(opening(1))
    service.handle(opening(2))
    clock.now += 45
    service.handle(draft(2))  # session 2 is in use; session 1 is not
    clock.now += 30
    assert service.expire_idle() == 1
    expired = refused(service.handle, draft(1))
    assert (expired.status, expired.code) == (410, "expired-session") and "60 s" in str(expired)
    service.handle(draft(2))
    # Expiry also happens on any request, without the sweeper.
    clock.now += 61
    assert refused(service.handle, draft(2)).code == "expired-session"
    assert service.open_sessions == 0


def test_no_room_past_max_sessions(pair):
    service = CloudService(pair, ServiceLimits(max_sessions=2))
    service.handle(opening(1))
    service.handle(opening(2))
    busy = refused(service.handle, opening(3))
    assert (busy.status, busy.code) == (503, "busy")
    service.close(session(1))
    service.handle(opening(3))


@pytest.mark.parametrize(
    "frame, status, code",
    [
        (b"", 400, "truncated"),
        (b"garbage that is not a frame", 400, "version"),
        (bytes([PROTOCOL_VERSION, 77]) + bytes(40), 400, "malformed"),
        (opening(1)[:-3], 400, "truncated"),
        (opening(1) + b"x", 400, "malformed"),
        (encode(Tokens([1])), 400, "malformed"),  # a downlink message sent up
        (bytes([PROTOCOL_VERSION + 1]) + opening(1)[1:], 400, "version"),
        (bytes(40_000), 413, "too-large"),
    ],
)
def test_unreadable_frames_are_refused_with_a_status(pair, frame, status, code):
    service = CloudService(pair)
    error = refused(service.handle, frame)
    assert (error.status, error.code) == (status, code)
    service.handle(opening(1))  # and the service goes on


@pytest.mark.parametrize(
    "frame, words",
    [
        (opening(1, prompt=()), "empty"),
        (opening(1, prompt=range(20)), "at most 16"),
        (opening(1, budget=0), "budget"),
        (opening(1, budget=65), "budget"),
        (opening(1, prompt=(1, 999)), "vocabulary"),
        (opening(1, alpha=float("nan")), "alpha"),
        (opening(1, top_p=0.0), "top_p"),
    ],
)
def test_opens_beyond_the_limits_are_refused(pair, frame, words):
    service = CloudService(pair, ServiceLimits(max_prompt_tokens=16, max_new_tokens=64))
    error = refused(service.handle, frame)
    assert error.status == 400 and words in str(error)
    assert service.open_sessions == 0


def test_a_bad_draft_is_refused_and_the_session_stays_usable(pair):
    service = CloudService(pair, ServiceLimits(max_draft_len=4))
    service.handle(opening(1, budget=4, alpha=0.0))  # alpha 0: every draft is accepted and stays
    for frame, words in [
        (draft(1, ids=range(5)), "at most 4"),
        (draft(1, ids=(400,)), "vocabulary"),
        (draft(1, keep=0), "exact"),
        (draft(1, ids=(1, 2, 3, 4), append=range(6)), "chosen"),
    ]:
        assert words in str(refused(service.handle, frame))
    # Budget: prompt 4 + budget 4 + headroom 18 = 26 tokens at most in the Cloud's streams.
    for _ in range(5):
        assert decode(next(iter(service.handle(draft(1, ids=(5, 6, 7, 8))).frames))).accepted == 4
    assert "budget" in str(refused(service.handle, draft(1, ids=(5, 6, 7, 8))))  # 24 + 4 > 26
    service.handle(draft(1, ids=()))  # still serving this session


def test_a_stream_ends_at_its_budget_and_at_an_end_id(pair):
    service = CloudService(pair)
    answer = service.handle(opening(1, rule="generate", budget=5))
    assert answer.report is None  # a stream's report comes with the close
    tokens = [decode(frame) for frame in answer.frames]
    assert len(tokens) == 5 and all(len(t.ids) == 1 for t in tokens)
    report = service.close(session(1))
    assert [p.after for p in report.passes] == [1, 2, 3, 4, 5]  # each pass right before its token
    first = tokens[0].ids[0]
    answer = service.handle(opening(2, rule="generate", budget=5, stop_ids=(first,)))
    assert [decode(frame).ids for frame in answer.frames] == [(first,)]


def test_closing_mid_stream_stops_it(pair):
    service = CloudService(pair)
    frames = iter(service.handle(opening(1, rule="generate", budget=50)).frames)
    next(frames)
    next(frames)
    report = service.close(session(1))
    assert len(report.passes) == 2
    assert list(frames) == []


def test_a_failing_pass_ends_only_its_session(pair, monkeypatch):
    service = CloudService(pair)
    service.handle(opening(1))
    service.handle(opening(2))
    from specsteer.cloud.verifier import Cloud

    def broken(self, message):
        raise RuntimeError("the model fell over")

    with monkeypatch.context() as patch:
        patch.setattr(Cloud, "verify", broken)
        with pytest.raises(RuntimeError):
            service.handle(draft(1))
    assert refused(service.handle, draft(1)).code == "closed-session"
    service.handle(draft(2))


def test_the_edge_gets_typed_errors_with_what_was_emitted(pair):
    plain, private = [1, 2, 3, 4], [9, 1, 2, 3, 4]

    class SmallCloud:
        def __init__(self, limits):
            self.limits = limits

        def transport(self):
            return LocalTransport(CloudService(pair, self.limits))

    with pytest.raises(CloudRefused, match="budget") as caught:
        collect(
            generate_ids(
                pair, plain, private, DecodeConfig(max_new_tokens=8), cloud=SmallCloud(ServiceLimits(max_new_tokens=4))
            )
        )
    assert caught.value.partial.stats.new_tokens == 0 and caught.value.partial.stats.stop_reason == "cloud-error"

    class ForgetfulCloud:
        """Lets the session expire after its second round: the Edge keeps what it had."""

        def transport(self):
            clock = Clock()
            service = CloudService(pair, ServiceLimits(idle_timeout_s=1), clock=clock)
            original = service.handle
            handled = []

            def handle(frame):
                answer = original(frame)
                handled.append(frame)
                if len(handled) == 3:  # the open and two rounds
                    clock.now += 2
                return answer

            service.handle = handle
            return LocalTransport(service)

    events = generate_ids(
        pair,
        plain,
        private,
        DecodeConfig(max_new_tokens=40, draft_len=2, alpha=0.0, bonus=False),
        cloud=ForgetfulCloud(),
    )
    emitted = []
    with pytest.raises(SessionGone, match="Run the generation again") as caught:
        for event in events:
            emitted.append(event)
    partial = caught.value.partial
    assert partial.token_ids == [e.id for e in emitted if e.emitted] and len(partial.token_ids) == 4
    assert partial.text == "".join(e.text for e in emitted if e.emitted)


def test_error_codes_map_to_the_edges_exceptions():
    assert isinstance(cloud_error("unknown-session", "x"), SessionGone)
    assert isinstance(cloud_error("expired-session", "x"), SessionGone)
    assert isinstance(cloud_error("version", "x"), VersionMismatch)
    assert isinstance(cloud_error("unreachable", "x"), CloudUnreachable)
    for code in ("malformed", "truncated", "too-large", "invalid", "unauthorized", "busy", "internal"):
        error = cloud_error(code, "The Cloud said no.", 400)
        assert type(error) is CloudRefused and error.code == code and str(error).startswith("The Cloud said no.")
    assert "SPECSTEER_CLOUD_SECRET" in str(cloud_error("unauthorized", "Refused."))


# --- admission by memory and per client (one client once took the Cloud's memory) -----------------


def test_an_open_that_does_not_fit_the_memory_budget_gets_503_with_retry_after(pair):
    probe = CloudService(pair)
    one = probe.session_bytes(decode(opening(1, budget=64)))
    assert one > 0
    clock = Clock()
    service = CloudService(
        pair, ServiceLimits(memory_budget_bytes=int(2.5 * one), max_sessions_per_client=64), clock=clock
    )
    service.handle(opening(1, budget=64))
    service.handle(draft(1))
    service.handle(opening(2, budget=64))
    service.handle(draft(2))
    full = refused(service.handle, opening(3, budget=64))
    assert (full.status, full.code) == (503, "busy") and "more than is left" in str(full)
    assert full.retry_after_s is not None and 1 <= full.retry_after_s <= 300
    assert service.reserved_bytes == 2 * one <= 2.5 * one  # what the sessions hold never passes the budget
    too_big = refused(service.handle, opening(4, budget=64, prompt=tuple(range(1, 200))))
    assert too_big.status == 503 and "more than its whole budget" in str(too_big)
    service.close(session(1))
    service.handle(opening(3, budget=64))  # room again once a session ends


def test_the_reservation_follows_what_the_session_needs(pair):
    service = CloudService(pair)
    short, long = (service.session_bytes(decode(opening(1, budget=b))) for b in (8, 512))
    alone = service.session_bytes(decode(opening(1, rule="generate", budget=512)))  # the Generalist only
    assert short < long and alone < long


def test_sessions_that_never_drafted_make_room_after_their_short_expiry(pair):
    clock = Clock()
    one = CloudService(pair).session_bytes(decode(opening(1)))
    limits = ServiceLimits(
        memory_budget_bytes=2 * one, unstarted_timeout_s=10, idle_timeout_s=300, max_sessions_per_client=64
    )
    service = CloudService(pair, limits, clock=clock)
    service.handle(opening(1))  # opened, never drafts
    service.handle(opening(2))
    service.handle(draft(2))  # in use
    assert refused(service.handle, opening(3)).status == 503  # session 1 is only 0 s old
    clock.now += 11
    service.handle(draft(2))
    service.handle(opening(3))  # session 1 gave its room
    assert refused(service.handle, draft(1)).code == "expired-session"
    service.handle(draft(2))  # a session that drafted keeps the ordinary idle timeout


def test_one_client_holds_at_most_its_share_of_sessions(pair):
    service = CloudService(pair, ServiceLimits(max_sessions_per_client=2))
    service.handle(opening(1), client="10.0.0.1")
    service.handle(opening(2), client="10.0.0.1")
    capped = refused(service.handle, opening(3), "10.0.0.1")
    assert (capped.status, capped.code) == (503, "busy") and "This client already holds 2 session(s)" in str(capped)
    service.handle(opening(3), client="10.0.0.2")  # another client still gets in


def test_idle_prefix_caches_are_given_back_when_an_open_needs_their_room(pair):
    one = CloudService(pair).session_bytes(decode(opening(1, budget=64)))
    service = CloudService(pair, ServiceLimits(memory_budget_bytes=one))
    service.handle(opening(1, budget=64))
    service.handle(draft(1))
    service.close(session(1))  # its sequences go to the prefix caches, idle
    assert pair.generalist.prefix_cache.idle > 0 and pair.specialist.prefix_cache.idle > 0
    service.handle(opening(2, budget=64, prompt=(9, 8, 7, 6)))  # needs the whole budget: the idle ones go
    assert pair.generalist.prefix_cache.idle == 0 and pair.specialist.prefix_cache.idle == 0
    assert service.reserved_bytes == one
