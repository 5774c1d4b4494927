"""The start-up warm-up: the default pairing loads in the background, the default request's
prompts are read once so that its first generation finds them cached, and a click meanwhile waits for it
with a message. Tiny fp32 pairs, built fresh per test so that no other test's prefix caches count."""

from __future__ import annotations

import threading

import pytest

import storage
from specsteer.data.history_upload import parse_history
from specsteer.data.sources import sample_history_path
from specsteer.method.events import EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM
from specsteer.models.tiny import TEST_PAIRING_ID, tiny_pair
from specsteer.service.app_service import AppService
from specsteer.service.events import Done, Loading
from specsteer.service.pair_catalog import PairCatalog
from specsteer.stores.generations import NamedHistory

INPUT = "Write a review of a power bank with great battery life"


class Store:
    def __init__(self) -> None:
        self.generations: list = []

    def save_history(self, history):
        return 1

    def save_generation(self, generation):
        self.generations.append(generation)
        return len(self.generations)

    def save_comparison(self, comparison):
        return 1


class GatedCatalog(PairCatalog):
    """Loads a fresh tiny pair once ``gate`` is set (a load that takes as long as a test wants); counts loads."""

    def __init__(self, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.pair = tiny_pair()
        super().__init__({TEST_PAIRING_ID: lambda: self.pair})
        self.gate = gate
        self.fail = fail
        self.loads = 0

    def load(self, pairing_id, runtime, progress, edge_only=False, method="specsteer"):
        self.loads += 1
        progress("reading the weights")
        if self.gate is not None:
            assert self.gate.wait(30)
        if self.fail:
            raise OSError("the weights are not there")
        return super().load(pairing_id, runtime, progress, edge_only, method)


@pytest.fixture(scope="module")
def history():
    path = sample_history_path("review")
    return NamedHistory(parse_history(path.read_bytes(), filename=path.name), "review sample")


def settings(**overrides):
    return {
        "pairing": TEST_PAIRING_ID,
        "method": "specsteer",
        "alpha": 0.1,
        "draft_len": 4,
        "max_new_tokens": 12,
        "runtime": "transformers",
        **overrides,
    }


def service_with(catalog: PairCatalog, url: str) -> AppService:
    return AppService(store=Store(), runs=storage.SqlRunStore(url), pairs=catalog, loading_quiet_s=0.05)


def first_generation(service: AppService, history) -> tuple[list, Done]:
    events = list(service.generate(history, "review", INPUT, settings()))
    assert isinstance(events[-1], Done), events[-1]
    return events, events[-1]


def test_a_warmed_request_reads_no_prompt_again(history, url):
    cold = service_with(GatedCatalog(), url)
    _, cold_done = first_generation(cold, history)
    assert cold.warm_up_state() is None
    assert all(count == 0 for count in cold_done.result.finished.stats.reused_tokens.values())

    catalog = GatedCatalog()
    warm = service_with(catalog, url)
    warming = warm.warm_up(history, "review", INPUT, settings())
    assert warming.wait(60) and warm.warm_up_state().phase == "ready"
    # The line says what was read, and that another history or input is not (the claim the test below checks).
    message = warm.warm_up_state().message
    assert "default sample's prompts are read" in message and "another history or input reads its own" in message
    events, done = first_generation(warm, history)
    assert not any(isinstance(event, Loading) for event in events)  # nothing left to load or wait for
    reused = done.result.finished.stats.reused_tokens
    # every stream finds all of its prompt but the last token (whose logits it needs) in the prefix cache
    assert {EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM} <= set(reused)
    assert all(count > 0 for count in reused.values())
    assert done.result.finished.token_ids == cold_done.result.finished.token_ids  # the same output
    assert len(warm.store.generations) == 1  # the warm-up saved nothing


def test_a_click_during_the_warm_up_waits_for_it_with_a_message(history, url):
    gate = threading.Event()
    catalog = GatedCatalog(gate)
    service = service_with(catalog, url)
    warming = service.warm_up(history, "review", INPUT, settings())
    events: list = []
    click = threading.Thread(target=lambda: events.extend(service.generate(history, "review", INPUT, settings())))
    click.start()
    waited = threading.Event()
    for _ in range(100):  # the click says it waits, and does not start a second load meanwhile
        if any(isinstance(event, Loading) and "warm-up" in event.message for event in list(events)):
            waited.set()
            break
        click.join(0.05)
    assert waited.is_set() and catalog.loads == 1 and not warming.done
    assert service.warm_up_state().phase == "loading" and "reading the weights" in service.warm_up_state().message
    gate.set()
    click.join(60)
    assert isinstance(events[-1], Done) and warming.done


def test_a_failed_warm_up_is_reported_and_a_click_still_runs(history, url):
    catalog = GatedCatalog(fail=True)
    service = service_with(catalog, url)
    warming = service.warm_up(history, "review", INPUT, settings())
    assert warming.wait(30)
    state = service.warm_up_state()
    assert state.phase == "failed" and "the weights are not there" in state.message
    catalog.fail = False
    _, done = first_generation(service, history)
    assert done.result.finished.stats.new_tokens > 0


def test_bad_warm_up_settings_raise_at_once(history, url):
    service = service_with(GatedCatalog(), url)
    with pytest.raises(ValueError):
        service.warm_up(history, "review", INPUT, settings(draft_len=0))
    with pytest.raises(ValueError):
        service.warm_up(history, "review", "  ", settings())
    assert service.warm_up_state() is None
