"""The fair share of the queue on the served public app (tiny pair), with clients bound to their own
loopback addresses (127.0.0.2, 127.0.0.3, …): one client's flood holds its share and no more, made-up
session hashes do not widen it, another client's quick calls and generation still answer, a job that
leaves the queue (finished, or dropped with its client's connection) gives its place back, and a full
queue answers "busy" with an estimate.

The tests hold the models' turn (``AppService.turns``) while they flood, so that no model job can end
meanwhile: what they count does not depend on how fast this machine is. A quick call that answers while
that turn is held has not waited behind any model job.
"""

from __future__ import annotations

import json
import time
import uuid
from contextlib import contextmanager

import httpx
import pytest

from specsteer.service.limits import PUBLIC_LIMITS

pytestmark = pytest.mark.slow  # the public app served on loopback, flooded from several addresses

API = "/gradio_api"
SHARE = PUBLIC_LIMITS.queue_share
MAX_WAITING = 6  # the model jobs' whole-queue cap, made small so that two clients fill it
ONE_CELL = {
    "source": "sample",
    "task": "review",
    "records": 1,
    "methods": ["slm"],
    "alphas": "1",
    "betas": "1",
    "pairing": "tiny-test",
    "max_new_tokens": 4,
}
GENERATE = {
    "task": "review",
    "input_text": "Write a review of a power bank with great battery life",
    "pairing": "tiny-test",
    "method": "specsteer",
    "max_new_tokens": 8,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(url, service, demo) of the app in public mode, its model jobs' queue capped at MAX_WAITING."""
    from testkit import serve_app

    with serve_app(tmp_path_factory.mktemp("data"), {"SPECSTEER_PUBLIC": "1"}, QUEUE_MAX_SIZE=MAX_WAITING) as app:
        yield app.url.rstrip("/"), app.service, app.demo


@pytest.fixture(scope="module")
def info(served):
    url, _, _ = served
    return httpx.get(f"{url}{API}/info", timeout=30).json()


def client(address: str) -> httpx.Client:
    """A client whose connections leave from its own loopback ``address``."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60)


def arguments(info: dict, endpoint: str, values: dict) -> list:
    parameters = info["named_endpoints"][f"/{endpoint}"]["parameters"]
    return [values.get(p["parameter_name"], p.get("parameter_default")) for p in parameters]


def post(http: httpx.Client, url: str, endpoint: str, data: list, session: str | None = None) -> httpx.Response:
    return http.post(
        f"{url}{API}/call/{endpoint}", json={"data": data, "session_hash": session or f"made-up-{uuid.uuid4().hex}"}
    )


def outcome(http: httpx.Client, url: str, endpoint: str, event_id: str) -> tuple[str, str]:
    """("complete" or "error", the event's data) from its result stream."""
    event = ""
    with http.stream("GET", f"{url}{API}/call/{endpoint}/{event_id}") as stream:
        for line in stream.iter_lines():
            if line.startswith("event: ") and line[7:] in ("complete", "error"):
                event = line[7:]
            elif event and line.startswith("data: "):
                return event, line[6:]
    raise AssertionError(f"/{endpoint} ended without a result")


@contextmanager
def models_held(service):
    """The models' turn, held: model jobs queue and start, none ends."""
    with service.turns.interactive():
        yield


def drained(served, timeout_s: float = 120.0) -> None:
    """Wait until the app's queue holds no job at all (those of an earlier test)."""
    _, _, demo = served
    queue = demo._queue
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not queue.event_ids_to_events and len(queue) == 0:
            return
        time.sleep(0.1)
    raise AssertionError("the queue did not drain")


def started(served, lane: str, timeout_s: float = 30.0) -> None:
    """Wait until a job of ``lane`` runs (it has left the waiting queue)."""
    _, _, demo = served
    groups = demo._queue.event_queue_per_concurrency_id
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if lane in groups and groups[lane].current_concurrency > 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"no job of {lane!r} started")


def held(served, address: str) -> int:
    _, _, demo = served
    return demo._queue.fair_queue.ledger.held(address)


def test_one_clients_flood_holds_its_share_and_another_client_is_served(served, info):
    url, service, _ = served
    drained(served)
    grid = arguments(info, "evaluate", ONE_CELL)
    with client("127.0.0.2") as flood, client("127.0.0.3") as visitor:
        with models_held(service):
            answers = [post(flood, url, "evaluate", grid) for _ in range(20)]  # each with a made-up session
            statuses = [answer.status_code for answer in answers]
            print(f"one client's 20 grids: {statuses.count(200)} queued, {statuses.count(429)} refused")
            assert statuses == [200] * SHARE + [429] * (20 - SHARE)
            refused = answers[-1]
            assert f"You already hold {SHARE} model jobs" in refused.json()["detail"]
            assert int(refused.headers["retry-after"]) >= 1
            # The share counts every model endpoint together.
            assert post(flood, url, "generate", arguments(info, "generate", GENERATE)).status_code == 429
            # Another client: its sample loads while every model job of the flood is stuck behind the held turn.
            session = f"visitor-{uuid.uuid4().hex}"
            sample = post(visitor, url, "load_sample", arguments(info, "load_sample", {"sample": "review"}), session)
            assert sample.status_code == 200
            event, data = outcome(visitor, url, "load_sample", sample.json()["event_id"])
            assert event == "complete", data
            generate = post(visitor, url, "generate", arguments(info, "generate", GENERATE), session)
            assert generate.status_code == 200
        # The turn is free: the visitor's generation runs (before the flood's next grid cell).
        event, data = outcome(visitor, url, "generate", generate.json()["event_id"])
        assert event == "complete" and "saved as generation" in json.loads(data)[0], data
    # Once the flood's jobs have ended, its places are free again.
    drained(served)
    assert held(served, "127.0.0.2") == 0


def test_a_client_that_goes_away_gives_back_the_places_of_its_waiting_jobs(served, info):
    url, service, _ = served
    drained(served)
    grid = arguments(info, "evaluate", ONE_CELL)
    session = f"leaving-{uuid.uuid4().hex}"
    with client("127.0.0.4") as leaving, models_held(service):
        ids = [post(leaving, url, "evaluate", grid, session).json()["event_id"] for _ in range(SHARE)]
        started(served, "grid")
        assert post(leaving, url, "evaluate", grid).status_code == 429
        # It listens to its results, then drops the connection: Gradio drops its waiting jobs.
        with leaving.stream("GET", f"{url}{API}/call/evaluate/{ids[-1]}") as stream:
            next(stream.iter_lines())
        deadline = time.monotonic() + 60
        while held(served, "127.0.0.4") > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        # At most the running one is left (Gradio ends a running job whose page is gone at its next frame).
        remaining = held(served, "127.0.0.4")
        assert remaining <= 1
        assert [post(leaving, url, "evaluate", grid).status_code for _ in range(SHARE - remaining)] == [200] * (
            SHARE - remaining
        )
    drained(served)


def test_a_full_queue_answers_busy_with_an_estimate_and_quick_calls_still_enter(served, info):
    url, service, _ = served
    drained(served)
    grid = arguments(info, "evaluate", ONE_CELL)
    with client("127.0.0.5") as first:  # one grid to the end, so that the estimate knows how long grids take
        event, _ = outcome(first, url, "evaluate", post(first, url, "evaluate", grid).json()["event_id"])
        assert event == "complete"
    with client("127.0.0.6") as one, client("127.0.0.7") as two, client("127.0.0.8") as quick, models_held(service):
        assert [post(one, url, "evaluate", grid).status_code for _ in range(SHARE)] == [200] * SHARE
        started(served, "grid")
        # One grid runs (stuck at the held turn), SHARE - 1 wait; the other client fills the rest.
        room = MAX_WAITING - (SHARE - 1)
        assert [post(two, url, "evaluate", grid).status_code for _ in range(room)] == [200] * room
        busy = post(two, url, "evaluate", grid)
        print(f"the full queue's answer: {busy.status_code} {busy.json()['detail']}")
        assert busy.status_code == 503
        assert busy.json()["detail"].startswith("The app is busy") and " about " in busy.json()["detail"]
        assert "no estimate" not in busy.json()["detail"]
        assert int(busy.headers["retry-after"]) >= 1
        assert "Queue is full" not in busy.text
        # A quick call has room of its own and answers while the model jobs are stuck.
        sample = post(quick, url, "load_sample", arguments(info, "load_sample", {"sample": "review"}))
        assert sample.status_code == 200
        assert outcome(quick, url, "load_sample", sample.json()["event_id"])[0] == "complete"
    drained(served)


def test_queued_endpoints_cannot_be_called_around_the_queue(served, info):
    """Gradio serves every endpoint directly at /run/<name> unless told not to (it does so wherever the
    app is not a Space): a model job there would skip the queue and its fair share."""
    url, _, _ = served
    with client("127.0.0.9") as http:
        answer = http.post(f"{url}{API}/run/generate", json={"data": arguments(info, "generate", GENERATE)})
    assert answer.status_code == 404


class Request:
    """What the fair queue reads of an HTTP request: the peer and the headers."""

    def __init__(self, peer: str, forwarded_for: list[str]) -> None:
        from starlette.datastructures import Headers

        self.client = type("Peer", (), {"host": peer})()
        self.headers = Headers(raw=[(b"x-forwarded-for", value.encode()) for value in forwarded_for])


def test_the_forwarded_address_counts_only_on_a_space():
    from specsteer.service.fair_share import QueuePolicy
    from ui.fair_queue import FairQueue, behind_space_proxy

    queue = type("Queue", (), {"event_ids_to_events": {}, "push": None})()
    proxy = Request("10.16.3.80", ["6.6.6.6, 93.184.216.34", "10.0.0.7"])  # two header lines: both are read
    assert FairQueue(queue, QueuePolicy(), on_space=True).client(proxy) == "93.184.216.34"
    assert FairQueue(queue, QueuePolicy(), on_space=False).client(proxy) == "10.16.3.80"
    assert behind_space_proxy({"SPACE_ID": "someone/app"}) and not behind_space_proxy({})
