"""The fair share of ``specsteer.service.fair_share``, at the entrance of Gradio's queue.

Every queued call (the page's ``/queue/join``, the API's ``/call/<name>``) enters through
``Queue.push``, which has resolved the endpoint and holds the HTTP request. :func:`install` puts
:class:`FairQueue` in front of it, on the app's one queue: a model job (an endpoint in one of
``MODEL_LANES``) of a client that holds its share is refused there with 429 and the client's
sentence; any call finding the queue full (the model jobs' ``max_waiting``, or Gradio's own cap,
which leaves room beyond it for quick calls) is refused with 503 and "busy, about N s" instead of
Gradio's bare "Queue is full". Both carry ``Retry-After``. A refused call never takes a place.

The estimates read Gradio 6's queue as it keeps it (each concurrency group's waiting events, the
start times of its running ones, each endpoint's mean duration so far): :func:`lanes` is the one
place that does; the app's tests (tests/app/test_fair_share_server.py) fail if Gradio changes it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NoReturn

import gradio as gr
from fastapi import HTTPException

from specsteer.service.fair_share import (
    FairShare,
    Lane,
    QueuePolicy,
    busy_refusal,
    retry_after_s,
    share_refusal,
    soonest,
    soonest_place_s,
)
from ui.callers import behind_space_proxy, client_address
from ui.streaming import MODEL_LANES

log = logging.getLogger(__name__)

TOO_MANY_REQUESTS = 429
SERVICE_UNAVAILABLE = 503


class FairQueue:
    """Gradio's ``Queue.push`` with the fair share and the busy answer in front of it (see the module doc)."""

    def __init__(self, queue: Any, policy: QueuePolicy, on_space: bool) -> None:
        self.queue = queue
        self.policy = policy
        self.on_space = on_space
        self.ledger = FairShare(policy.share, lambda job: job in queue.event_ids_to_events)
        self._push = queue.push

    def client(self, request: Any) -> str:
        """The client a request counts against (``ui.callers.client_address``)."""
        return client_address(request, self.on_space)

    async def push(self, body: Any, request: Any, username: str | None) -> tuple[bool, Any, str]:
        # The endpoint as the app defines it: looking it up through the caller's session (as Gradio does)
        # would first build a session state for a made-up session hash, a cost a refusal need not pay.
        fn = self.queue.blocks.fns.get(body.fn_index) if isinstance(body.fn_index, int) else None
        if fn is None:  # no such endpoint: Gradio's own push says so
            return await self._push(body, request, username)
        self._refuse_if_full(fn.concurrency_id in MODEL_LANES, fn.api_name)
        if fn.concurrency_id not in MODEL_LANES:
            return await self._push(body, request, username)
        client = self.client(request)
        reservation = self.ledger.reserve(client)
        if reservation is None:
            self._refuse_share(client, fn.api_name)
        try:
            accepted, event_id, state = await self._push(body, request, username)
        except BaseException:
            self.ledger.release(reservation)
            raise
        if accepted and isinstance(event_id, str):
            self.ledger.bind(reservation, event_id)
        else:
            self.ledger.release(reservation)
        return accepted, event_id, state

    def _refuse_if_full(self, model_job: bool, endpoint: str | None) -> None:
        waiting = len(self.queue)
        limit = self.queue.max_size
        if model_job:
            model_waiting = sum(len(group.queue) for group in self._model_groups())
            if model_waiting >= self.policy.max_waiting:
                self._refuse_busy(model_waiting, endpoint, model_only=True)
        if limit is not None and waiting >= limit:
            self._refuse_busy(waiting, endpoint, model_only=False)

    def _refuse_busy(self, waiting: int, endpoint: str | None, model_only: bool) -> NoReturn:
        every = lanes(self.queue)
        chosen = [lane for name, lane in every.items() if name in MODEL_LANES] if model_only else list(every.values())
        place_in = soonest_place_s(chosen)
        log.info("queue full: refused /%s (%d waiting)", endpoint, waiting)
        raise HTTPException(
            SERVICE_UNAVAILABLE, busy_refusal(waiting, place_in), headers={"Retry-After": str(retry_after_s(place_in))}
        )

    def _refuse_share(self, client: str, endpoint: str | None) -> NoReturn:
        ends_in = soonest([self._ends_in(job) for job in self.ledger.jobs(client)])
        held = self.ledger.held(client)
        log.info("fair share: refused /%s of %s, which holds %d model jobs", endpoint, client, held)
        raise HTTPException(
            TOO_MANY_REQUESTS,
            share_refusal(held, self.policy.share, ends_in),
            headers={"Retry-After": str(retry_after_s(ends_in))},
        )

    def _ends_in(self, job: str) -> float | None:
        """When the queue's job ``job`` should end, from now (waiting: after those before it)."""
        event = self.queue.event_ids_to_events.get(job)
        group = self.queue.event_queue_per_concurrency_id.get(getattr(event, "concurrency_id", None))
        if event is None or group is None:
            return None
        lane = lanes(self.queue)[event.concurrency_id]
        if event in group.queue:
            return lane.waiting_end_s(group.queue.index(event))
        return lane.running_end_s()

    def _model_groups(self) -> list[Any]:
        groups = self.queue.event_queue_per_concurrency_id
        return [groups[name] for name in MODEL_LANES if name in groups]


def lanes(queue: Any) -> dict[str, Lane]:
    """Each concurrency group of Gradio's ``queue`` as a :class:`Lane`, by its id."""
    now = time.time()  # Gradio records start times with time.time()
    durations = queue.process_time_per_fn

    def mean_s(fn: Any) -> float | None:
        return durations[fn].avg_time if fn in durations else None  # (a defaultdict: never index an absent fn)

    result: dict[str, Lane] = {}
    for name, group in queue.event_queue_per_concurrency_id.items():
        running: list[float | None] = []
        for fn, starts in group.start_times_per_fn.items():
            mean = mean_s(fn)
            running += [None if mean is None else start + mean - now for start in starts]
        waiting = tuple(mean_s(event.fn) for event in group.queue)
        result[name] = Lane(group.concurrency_limit, tuple(running), waiting)
    return result


def install(blocks: gr.Blocks, policy: QueuePolicy, on_space: bool | None = None) -> FairQueue:
    """Put :class:`FairQueue` in front of ``blocks``' queue (call after ``blocks.queue()``); idempotent."""
    queue: Any = blocks._queue  # Gradio's Queue, whose push this replaces on the instance
    existing = getattr(queue, "fair_queue", None)
    if isinstance(existing, FairQueue):
        return existing
    fair = FairQueue(queue, policy, behind_space_proxy() if on_space is None else on_space)
    queue.push = fair.push
    queue.fair_queue = fair
    return fair
