"""Fair Cloud admission and runs that survive a pause, on the tiny pair and an injected clock.

Who is asking (the credential, never the address), per-credential caps, idle sessions giving their room
oldest-idle first, a bounded session life, an in-process Cloud that never expires its own Edge's
session, and an evaluation that records a failed cell and goes on.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from specsteer.cli import evaluate as evaluate_cli
from specsteer.cloud import admission
from specsteer.cloud import service as cloud_service
from specsteer.cloud.admission import ANONYMOUS, SHARED, Holding, admit, credential, edge_key
from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.service import CloudService
from specsteer.data.sources import bundled_sample_path
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.evaluation.grid import EvalSpec, run_grid
from specsteer.evaluation.grid import runner as grid_runner
from specsteer.protocol.link import CloudUnreachable, SessionGone, cloud_error
from specsteer.protocol.wire import Draft, Open, decode, encode

pytestmark = pytest.mark.usefixtures("fresh_engines")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def session(n: int) -> bytes:
    return n.to_bytes(16, "little")


def opening(n: int, prompt=(1, 2, 3, 4), budget: int = 64) -> bytes:
    return encode(Open(session(n), "ratio", prompt, budget))


def draft(n: int) -> bytes:
    return encode(Draft(session(n), (5, 6)))


def refused(call, *args) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        call(*args)
    return caught.value


def one_session_bytes(pair) -> int:
    return CloudService(pair).session_bytes(decode(opening(1)))


# --------------------------------------------------------------------------- identity


def test_an_edge_key_proves_its_name_and_nothing_else():
    secret = "operator secret"
    key = edge_key(secret, "laptop-1")
    assert key.startswith("laptop-1.") and credential(key, secret) == "edge:laptop-1"
    assert credential(secret, secret) == SHARED
    assert credential(key, "another secret") is None  # a key is bound to its Cloud's secret
    forged = "laptop-2." + key.split(".", 1)[1]  # one Edge cannot pose as another with its own MAC
    assert credential(forged, secret) is None
    assert credential("", secret) is None and credential("laptop-1.", secret) is None
    assert credential("anything", None) == ANONYMOUS  # a Cloud without a secret (loopback only)
    assert admission.bearer_token("Bearer  abc ") == "abc" and admission.bearer_token("Basic abc") == ""
    with pytest.raises(ValueError, match="name"):
        edge_key(secret, "a.b")
    with pytest.raises(ValueError, match="secret"):
        edge_key("", "laptop")


def test_the_edge_key_command_prints_a_key_the_cloud_accepts(monkeypatch, capsys):
    from specsteer import cli

    monkeypatch.setenv("SPECSTEER_TEST_KEY_SECRET", "s3cret")
    assert cli.main(["edge-key", "app", "--secret-env", "SPECSTEER_TEST_KEY_SECRET"]) == 0
    assert credential(capsys.readouterr().out.strip(), "s3cret") == "edge:app"
    assert cli.main(["edge-key", "no way", "--secret-env", "SPECSTEER_TEST_KEY_SECRET"]) == 2


# --------------------------------------------------------------------------- admission


def test_the_per_client_caps_count_the_credential_not_the_address(pair):
    one = one_session_bytes(pair)
    limits = ServiceLimits(max_sessions_per_client=3, memory_budget_bytes=10 * one, max_client_share=0.5)
    service = CloudService(pair, limits, clock=Clock())
    for n in range(3):
        service.handle(opening(n), client="edge:flood")
    capped = refused(service.handle, opening(3), "edge:flood")
    assert capped.status == 503 and "already holds 3 session(s)" in str(capped)
    service.handle(opening(4), client="edge:real")  # another credential still gets in
    # The share of the budget: 5 sessions' worth for one credential, whatever its session count.
    wide = CloudService(pair, replace(limits, max_sessions_per_client=64), clock=Clock())
    for n in range(5):
        wide.handle(opening(n), client="edge:flood")
    share = refused(wide.handle, opening(5), "edge:flood")
    assert share.status == 503 and "share of the Cloud's memory" in str(share)
    wide.handle(opening(6), client="edge:real")


def test_idle_sessions_give_their_room_oldest_idle_first_and_only_as_many_as_needed(pair):
    clock = Clock()
    one = one_session_bytes(pair)
    limits = ServiceLimits(memory_budget_bytes=3 * one, reclaim_idle_s=30, max_sessions_per_client=64)
    service = CloudService(pair, limits, clock=clock)
    for n in (1, 2, 3):  # kept alive as the flood did: a Draft now and then
        service.handle(opening(n), client="edge:flood")
        service.handle(draft(n))
        clock.now += 5
    full = refused(service.handle, opening(4), "edge:real")  # nobody idle for 30 s yet: nobody is ended
    assert full.status == 503 and full.retry_after_s == 15 and service.open_sessions == 3  # session 1 in 15 s
    clock.now += 20  # sessions 1 (idle 35 s) and 2 (30 s) may give their room; 3 (25 s) may not
    service.handle(opening(4), client="edge:real")
    assert service.open_sessions == 3
    gone = refused(service.handle, draft(1))  # the oldest-idle one, and only it
    assert (gone.status, gone.code) == (410, "reclaimed-session")
    assert isinstance(cloud_error(gone.code, str(gone), gone.status), SessionGone)
    service.handle(draft(2))
    service.handle(draft(3))


def test_nobody_is_ended_for_an_open_that_would_not_fit_anyway(pair):
    clock = Clock()
    one = one_session_bytes(pair)
    service = CloudService(pair, ServiceLimits(memory_budget_bytes=2 * one, reclaim_idle_s=5), clock=clock)
    service.handle(opening(1))
    service.handle(draft(1))
    clock.now += 60
    huge = refused(service.handle, opening(2, prompt=tuple(range(1, 300))))
    assert "more than its whole budget" in str(huge)
    service.handle(draft(1))  # still there


def test_the_admission_decision_alone():
    limits = ServiceLimits(max_sessions=4, max_sessions_per_client=2, reclaim_idle_s=10)
    old = Holding(b"a", "edge:x", 1, last_used=0.0)
    busy = Holding(b"b", "edge:x", 1, last_used=-50.0, busy=True)
    busier = Holding(b"d", "edge:x", 1, last_used=-60.0, busy=True)
    other = Holding(b"c", "edge:y", 1, last_used=5.0)
    mine = Holding(b"n", "edge:x", 1, last_used=20.0, started=False)
    assert admit(mine, [old, busy], limits, now=20.0).victims == (b"a",)  # its own cap: its own idle one
    refusal = admit(mine, [busy, busier, other], limits, now=20.0)  # never a busy one, nor another's for its cap
    assert refusal.refusal and "already holds 2" in refusal.refusal and refusal.own_cap and refusal.victims == ()
    theirs = Holding(b"m", "edge:z", 1, last_used=20.0, started=False)
    full = replace(limits, max_sessions=3)  # the Cloud's cap: anyone's idle session, the oldest-idle first
    assert admit(theirs, [other, busy, old], full, now=20.0).victims == (b"a",)
    assert admit(theirs, [other, busy, old], full, now=9.0).victims == ()  # nobody idle 10 s yet


def test_a_session_life_is_bounded_whatever_it_does(pair):
    clock = Clock()
    service = CloudService(pair, ServiceLimits(max_session_life_s=100), clock=clock)
    service.handle(opening(1))
    for _ in range(3):
        clock.now += 30
        service.handle(draft(1))  # busy all along
    clock.now += 30
    ended = refused(service.handle, draft(1))
    assert (ended.status, ended.code) == (410, "lifetime-session") and "limit of 100 s" in str(ended)
    assert isinstance(cloud_error(ended.code, str(ended)), SessionGone)
    service.handle(opening(2))
    clock.now += 101
    assert service.expire_idle() == 1 and service.open_sessions == 0  # the sweep ends it too


# --------------------------------------------------------------------------- runs that survive a pause


def paused_services(monkeypatch, step_s: float = 420.0):
    """In-process Clouds whose clock jumps ``step_s`` (7 minutes) at every reading: each message of a
    generation comes as after a laptop slept."""
    ticks = itertools.count()

    class Paused(CloudService):
        def __init__(self, pair, limits=None, **options):
            limits = ServiceLimits() if limits is None else limits
            super().__init__(pair, limits, clock=lambda: 1000.0 + step_s * next(ticks), **options)

    monkeypatch.setattr(cloud_service, "CloudService", Paused)


def test_an_in_process_cloud_never_expires_its_own_edges_session(pair, monkeypatch):
    plain = pair.tokenizer.encode("Write about the sea.")
    private = pair.tokenizer.encode("History: I like boats. ") + plain
    config = DecodeConfig(method="specsteer", max_new_tokens=12, draft_len=2, alpha=0.5)
    awake = collect(generate_ids(pair, plain, private, config))[1]
    paused_services(monkeypatch)
    asleep = collect(generate_ids(pair, plain, private, config))[1]  # was: SessionGone after 300 s
    assert asleep.token_ids == awake.token_ids and asleep.stats.stop_reason != "cloud-error"


class MemoryStore:
    """A RunStore in plain dictionaries (as in test_evaluate)."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.status: dict[int, tuple[str, str | None]] = {}
        self.saved: dict[int, dict] = {}

    def open_run(self, name, config):
        return self.runs.setdefault(name, len(self.runs) + 1)

    def finished_keys(self, run_id):
        return set(self.saved.get(run_id, {}))

    def save_cell(self, run_id, cell):
        return self.saved.setdefault(run_id, {}).setdefault(cell.key, cell) is cell

    def set_status(self, run_id, status, error=None):
        self.status[run_id] = (status, error)

    def cells(self, run_id):
        return list(self.saved.get(run_id, {}).values())


FAST = EvalSpec(
    data=str(bundled_sample_path("review")),
    task="review",
    methods=("slm+", "specsteer"),
    alphas=(0.5,),
    max_new_tokens=3,
    retrieval_k=1,
    limit=2,
)


def test_an_evaluation_survives_a_seven_minute_pause(pair, monkeypatch):
    paused_services(monkeypatch)
    store = MemoryStore()
    result = run_grid(replace(FAST, run_name="asleep"), store, pair=pair)
    assert result.status == "finished" and result.computed == 4 and not result.failures


def test_a_failed_cell_is_recorded_with_its_message_and_the_run_goes_on(pair, monkeypatch):
    real = grid_runner.generate
    failed_once = []

    def flaky(pair_, prepared, config, *args, **options):
        if config.method == "specsteer" and config.max_new_tokens == FAST.max_new_tokens and not failed_once:
            failed_once.append(prepared)  # the first specsteer cell (the warm-up asks for other lengths)
            raise CloudUnreachable("Lost the connection to the Cloud at http://cloud (reset).", "unreachable")
        return real(pair_, prepared, config, *args, **options)

    monkeypatch.setattr(grid_runner, "generate", flaky)
    store = MemoryStore()
    spec = replace(FAST, run_name="flaky")
    events = list(grid_runner.run_grid_events(spec, store, pair=pair))
    result = events[-1]
    assert result.status == "failed" and result.computed == 3 and len(result.failures) == 1
    failure = result.failures[0]
    assert failure.point.method == "specsteer" and "CloudUnreachable: Lost the connection" in failure.message
    status, error = store.status[result.run_id]
    assert status == "failed" and "1 cell(s) failed" in error and "Lost the connection" in error
    failed = [event for event in events[:-1] if event.stage == "cell-failed"]
    assert len(failed) == 1 and "Lost the connection" in failed[0].describe()
    monkeypatch.setattr(grid_runner, "generate", real)  # the Cloud is back: a resume runs only that cell
    again = run_grid(spec, store, pair=pair)
    assert again.status == "finished" and again.computed == 1 and len(again.cells) == 4
    assert store.status[again.run_id] == ("finished", None)


def test_the_evaluate_cli_prints_failed_cells_not_a_traceback(pair, tmp_path, monkeypatch, capsys):
    def gone(*_args, **_options):
        raise SessionGone("The Cloud ended this generation's session after 300 s without a message.")
        yield  # a generator, as generate is

    monkeypatch.setattr(evaluate_cli, "shared_tiny_pair", lambda: pair)
    real = grid_runner.generate
    monkeypatch.setattr(
        grid_runner,
        "generate",
        lambda p, prepared, config, *a, **k: (gone if config.method == "llm" else real)(p, prepared, config, *a, **k),
    )
    arguments = ["--data", "sample", "--task", "review", "--limit", "1", "--methods", "slm,llm"]
    arguments += ["--pairing", "tiny-test", "--max-new-tokens", "2", "--database", f"sqlite:///{tmp_path / 'c.db'}"]
    code = evaluate_cli.main(arguments)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "error: 1 cell(s) failed" in err and "without a message" in err
    # A failure outside any cell (here, in the warm-up) is one line too.
    monkeypatch.setattr(grid_runner, "generate", gone)
    assert evaluate_cli.main([*arguments[:-1], f"sqlite:///{tmp_path / 'd.db'}"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error: SessionGone") and "Traceback" not in err
