"""The in-process Cloud's read-ahead policies (specsteer.cloud.read_ahead): ``off``, ``concurrent`` and
``after-first-draft`` give the same tokens, verdicts and wire bytes; ``after-first-draft`` starts reading the
Cloud's prompts only once the Edge has read its own and drafted; no method, cancel or failure leaves the
read-ahead waiting. Tiny fp32 random pairs; the order of passes is observed, never their durations."""

from __future__ import annotations

import threading

import pytest
from cloud.test_read_ahead import prompts

from specsteer.cloud.in_process import InProcessCloud
from specsteer.cloud.read_ahead import READ_AHEAD_MODES, parse_read_ahead, read_ahead_mode
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.events import Finished
from specsteer.models.tiny import tiny_pair
from specsteer.protocol.link import Link

READER = "specsteer-cloud-read-ahead"  # the read-ahead thread's name (CloudService._open)


class WatchedCloud(InProcessCloud):
    """An in-process Cloud whose service is kept, and whose ``edge_ready`` hints are written to ``journal``."""

    def __init__(self, pair, read_ahead, journal=None):
        super().__init__(pair, read_ahead)
        self.journal = journal if journal is not None else Journal()
        self.service = None

    def transport(self):
        transport = super().transport()
        self.service = service = transport.service
        hint = service.edge_ready

        def edge_ready(session):
            self.journal.write("edge-ready")
            hint(session)

        service.edge_ready = edge_ready
        return transport


class Journal:
    """Events from every thread, in the order they happened."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.cloud_started = threading.Event()
        self._lock = threading.Lock()

    def write(self, entry: str) -> None:
        with self._lock:
            self.entries.append(entry)
        if entry.startswith("start cloud"):
            self.cloud_started.set()

    def first(self, prefix: str) -> int:
        return next(i for i, entry in enumerate(self.entries) if entry.startswith(prefix))


class RecordingModel:
    """A model whose passes are journaled: ``start``/``end`` and who read (the Edge: a sequence on the private
    prompt; else ``cloud <name>``). The Edge's first pass (its prompt) may wait up to ``hold`` s for a Cloud pass
    to begin, so that a Cloud free to read meanwhile is seen doing so; ``fail`` makes that pass raise."""

    def __init__(self, model, name, journal, private, hold=0.0, fail=False) -> None:
        self._model, self._name, self._journal, self._private = model, name, journal, private
        self._hold, self._fail = hold, fail

    def acquire(self, prompt, capacity):
        sequence = self._model.acquire(prompt, capacity)
        extend, journal = sequence.extend, self._journal
        who = "edge" if list(prompt) == self._private else f"cloud {self._name}"
        first = [True]

        def recorded_extend(ids, rows):
            journal.write(f"start {who} {len(ids)}")
            if who == "edge" and first[0]:
                first[0] = False
                if self._fail:
                    raise RuntimeError("the Edge failed reading its prompt")
                journal.cloud_started.wait(self._hold)
            result = extend(ids, rows)
            journal.write(f"end {who} {len(ids)}")
            return result

        sequence.extend = recorded_extend
        return sequence

    def __getattr__(self, name):
        return getattr(self._model, name)


def recorded(pair, journal, hold=0.0, fail=False):
    from dataclasses import replace

    _, private = prompts(pair)
    return replace(
        pair,
        generalist=RecordingModel(pair.generalist, "generalist", journal, private),
        specialist=RecordingModel(pair.specialist, "generic", journal, private, hold, fail),
    )


def finishing(function, seconds: float = 120.0):
    """``function()``'s result; fails (instead of hanging the suite) if it does not return in ``seconds``."""
    outcome: dict = {}

    def call():
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed to the test
            outcome["error"] = error

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "the generation did not finish: a read-ahead waits for a hint that never comes"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def readers_alive() -> int:
    return sum(thread.name == READER and thread.is_alive() for thread in threading.enumerate())


def run(pair, mode, cancel=None, cloud=None, **config):
    pair.clear_prefix_caches()  # no run may find another's prompt cached
    config.setdefault("max_new_tokens", 24)
    cloud = cloud or InProcessCloud(pair, read_ahead=mode)
    events = generate_ids(pair, *prompts(pair), DecodeConfig(**config), cancel, cloud=cloud)
    return finishing(lambda: collect(events))


CASES = [
    dict(method="specsteer", alpha=0.1, draft_len=4),
    dict(method="specsteer", alpha=0.1, draft_len=3, sample=True, temperature=0.8, seed=3),
    dict(method="sd", draft_len=4),
    dict(method="lightcosteer"),
    dict(method="costeer", costeer_iters=3),
    dict(method="llm"),
    dict(method="p3"),
    dict(method="slm+"),
]


@pytest.mark.parametrize("config", CASES, ids=lambda config: "-".join(str(value) for value in config.values()))
def test_every_mode_gives_the_same_tokens_verdicts_and_bytes(pair, config):
    runs = {mode: run(pair, mode, **config) for mode in READ_AHEAD_MODES}
    tokens, finished = runs["off"]
    for mode in ("concurrent", "after-first-draft"):
        mode_tokens, mode_finished = runs[mode]
        assert mode_finished.token_ids == finished.token_ids and mode_finished.text == finished.text, mode
        assert [(t.id, t.kind, t.round, t.text) for t in mode_tokens] == [
            (t.id, t.kind, t.round, t.text) for t in tokens
        ], mode
        for a, b in zip(mode_tokens, tokens):  # up to fp32 rounding: a prompt read ahead is read in another shape
            assert (a.ratio is None) == (b.ratio is None) and (
                a.ratio is None or a.ratio == pytest.approx(b.ratio, rel=1e-4)
            )
        # the hint crosses no wire: the same frames, byte for byte
        assert [(m.direction, m.kind, m.bytes) for m in mode_finished.transcript] == [
            (m.direction, m.kind, m.bytes) for m in finished.transcript
        ], mode
        assert (mode_finished.stats.uplink_bytes, mode_finished.stats.downlink_bytes) == (
            finished.stats.uplink_bytes,
            finished.stats.downlink_bytes,
        )
    # after the first draft the Cloud still reads its prompts ahead: one pass per stream, as concurrently
    assert runs["after-first-draft"][1].stats.forward_calls == runs["concurrent"][1].stats.forward_calls
    assert readers_alive() == 0


def test_after_first_draft_the_cloud_reads_once_the_edge_has_read_its_prompt(pair):
    journal = Journal()
    # The Edge's prompt pass waits up to 1 s for a Cloud pass to begin: none may, until the Edge has drafted.
    watched = WatchedCloud(recorded(pair, journal, hold=1.0), "after-first-draft", journal)
    config = dict(method="specsteer", alpha=0.1, draft_len=4)
    tokens, finished = run(watched.pair, "after-first-draft", cloud=watched, **config)
    entries = journal.entries
    assert entries.count("edge-ready") == 1
    edge_read = journal.first("end edge")
    assert journal.first("start edge") < edge_read < journal.first("edge-ready") < journal.first("start cloud")
    plain, _ = prompts(pair)
    # the Cloud's first passes are the read-ahead: each stream's prompt but its last token, in one pass
    cloud_reads = [entry for entry in entries if entry.startswith("start cloud")][:2]
    assert sorted(cloud_reads) == [f"start cloud generalist {len(plain) - 1}", f"start cloud generic {len(plain) - 1}"]
    assert finished.stats.first_visible_s is not None and tokens


def test_concurrently_the_cloud_reads_while_the_edge_reads(pair):
    """The contrast that shows the test above can fail: concurrently, a Cloud pass begins before the Edge's
    prompt pass ends (that pass waits up to 30 s for one), before any hint."""
    journal = Journal()
    watched = WatchedCloud(recorded(pair, journal, hold=30.0), "concurrent", journal)
    run(watched.pair, "concurrent", cloud=watched, method="specsteer", alpha=0.1, draft_len=4)
    assert journal.first("start cloud") < journal.first("end edge")
    assert journal.first("start cloud") < journal.first("edge-ready")


@pytest.mark.parametrize(
    "config",
    [dict(method="llm"), dict(method="lightcosteer"), dict(method="p3"), dict(method="costeer", costeer_iters=2)],
    ids=lambda config: config["method"],
)
def test_methods_without_an_edge_draft_first_never_wait(pair, config):
    """llm (the Cloud decodes), rounds of draft length 0 and P³ (the Cloud drafts first): the read-ahead
    is released by the request that needs it; the session ends and its reader with it."""
    watched = WatchedCloud(pair, "after-first-draft")
    _, finished = run(pair, "after-first-draft", cloud=watched, max_new_tokens=8, **config)
    assert finished.stats.new_tokens == 8
    assert watched.service.open_sessions == 0 and readers_alive() == 0


def test_a_cancelled_generation_ends_its_session(pair):
    """Cancelled at the first pending draft, and cancelled before anything was drafted: the generation
    ends, the session is closed, no reader waits."""
    watched = WatchedCloud(pair, "after-first-draft")
    cancel = threading.Event()
    pair.clear_prefix_caches()
    events = generate_ids(
        pair, *prompts(pair), DecodeConfig(method="specsteer", draft_len=4, max_new_tokens=24), cancel, cloud=watched
    )

    def consume():
        seen = []
        for event in events:
            seen.append(event)
            if not isinstance(event, Finished) and event.pending:
                cancel.set()
        return seen

    seen = finishing(consume)
    assert isinstance(seen[-1], Finished) and seen[-1].stats.new_tokens < 24
    assert watched.service.open_sessions == 0 and readers_alive() == 0

    journal = Journal()
    early = WatchedCloud(recorded(pair, journal), "after-first-draft", journal)
    cancelled = threading.Event()
    cancelled.set()
    _, finished = run(early.pair, "after-first-draft", cancel=cancelled, cloud=early, method="specsteer", draft_len=4)
    assert finished.stats.new_tokens == 0
    assert early.service.open_sessions == 0 and readers_alive() == 0
    # closed before the Edge drafted: the Cloud read nothing for it
    assert not [entry for entry in journal.entries if entry.startswith("start cloud")]


def test_a_failure_in_the_edges_prompt_pass_closes_the_session_unread(pair):
    journal = Journal()
    watched = WatchedCloud(recorded(pair, journal, fail=True), "after-first-draft", journal)
    with pytest.raises(RuntimeError, match="the Edge failed reading its prompt"):
        run(watched.pair, "after-first-draft", cloud=watched, method="specsteer", draft_len=4)
    assert watched.service.open_sessions == 0 and readers_alive() == 0
    assert "edge-ready" not in journal.entries
    assert not [entry for entry in journal.entries if entry.startswith("start cloud")]


def test_a_transport_without_the_hint_is_left_alone():
    """A remote Cloud's transport (no ``edge_ready``): the hint does nothing, and nothing is sent."""

    class Remote:
        def info(self): ...

        def exchange(self, frame):
            raise AssertionError("the hint sent a frame")

        def close_session(self, session): ...

    link = Link(Remote())
    link._open = True  # as after an Open
    link.edge_ready()
    assert link.transcript == [] and link.totals == {"uplink": 0, "downlink": 0}


def test_the_policy_is_named_or_the_old_flag():
    assert read_ahead_mode(True) == "concurrent" and read_ahead_mode(False) == "off"
    assert parse_read_ahead("off, after-first-draft,off") == ["off", "after-first-draft"]
    for bad in ("", "sometimes"):
        with pytest.raises(ValueError, match="read-ahead|at least one"):
            parse_read_ahead(bad)
    with pytest.raises(ValueError, match="read-ahead must be one of"):
        InProcessCloud(tiny_pair(), read_ahead="later")  # type: ignore[arg-type]


def test_the_hint_carries_nothing_but_the_session():
    """What the Edge tells an in-process Cloud beside the frames: which session, nothing else."""
    import inspect

    from specsteer.cloud.in_process import LocalTransport
    from specsteer.cloud.service import CloudService

    assert set(inspect.signature(CloudService.edge_ready).parameters) == {"self", "session_id"}
    assert set(inspect.signature(LocalTransport.edge_ready).parameters) == {"self", "session"}
    assert set(inspect.signature(Link.edge_ready).parameters) == {"self"}
