"""The app's "Teach the Specialist my history": trained in the background with progress, bounded per page and
by the public step cap, then used by the page's generations by label (never by path); tiny models."""

from __future__ import annotations

from dataclasses import replace

import pytest
from service.test_service import MemoryStore, values

import storage
from specsteer.data.history_upload import parse_history
from specsteer.data.sources import sample_history_path
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
from specsteer.service.app_service import AppService
from specsteer.service.events import Done, Failed
from specsteer.service.limits import PUBLIC_LIMITS
from specsteer.service.lora_teaching import TeachDone, TeachFailed, TeachProgress
from specsteer.service.pair_catalog import PairCatalog
from specsteer.stores.generations import NamedHistory


@pytest.fixture(scope="module")
def history():
    path = sample_history_path("review")
    return NamedHistory(parse_history(path.read_bytes(), filename=path.name), "review sample")


@pytest.fixture
def service(url):
    return AppService(
        store=MemoryStore(),
        runs=storage.SqlRunStore(url),
        pairs=PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
        limits=replace(PUBLIC_LIMITS, max_lora_steps=2),
    )


def _teach(service, history, runtime="auto", session="page-1"):
    return list(service.teach_specialist(session, history, "review", TEST_PAIRING_ID, runtime))


def test_a_taught_specialist_serves_the_pages_generations(service, history):
    events = _teach(service, history)
    assert any(isinstance(event, TeachProgress) and "step 2 of 2" in event.message for event in events)
    done = events[-1]
    assert isinstance(done, TeachDone) and "2 steps" in done.message
    assert service.teacher.adapter(done.label).details()["steps"] == 2  # the public cap held
    generated = list(
        service.generate(history, "review", "Write a review of earbuds", values(specialist_lora=done.label))
    )
    assert isinstance(generated[-1], Done), generated[-1]
    stats = generated[-1].result.finished.stats
    assert stats.specialist_lora == done.label and "LoRA" in stats.runtime_choice
    plain = list(service.generate(history, "review", "Write a review of earbuds", values()))
    assert plain[-1].result.finished.stats.specialist_lora == ""


def test_only_adapters_the_service_trained_can_be_named(service, history):
    events = list(service.generate(history, "review", "Write", values(specialist_lora="../../etc@0123456789ab")))
    assert isinstance(events[-1], Failed) and "not known here" in events[-1].message


def test_llama_cpp_is_refused_for_teaching_and_for_a_taught_specialist(service, history):
    failed = _teach(service, history, runtime="llama.cpp")
    assert len(failed) == 1 and isinstance(failed[0], TeachFailed) and "transformers" in failed[0].message
    label = _teach(service, history)[-1].label
    events = list(service.generate(history, "review", "Write", values(specialist_lora=label, runtime="llama.cpp")))
    assert isinstance(events[-1], Failed) and "transformers runtime" in events[-1].message


def test_one_training_per_page_at_a_time_and_a_history_is_needed(service, history):
    service.teacher._busy.add("page-1")
    busy = _teach(service, history)
    assert isinstance(busy[-1], TeachFailed) and "already teaching" in busy[-1].message
    assert isinstance(_teach(service, None, session="page-2")[-1], TeachFailed)


def test_the_oldest_adapter_goes_when_too_many_are_kept(service, history, monkeypatch):
    from specsteer.models.lora import LoraError
    from specsteer.service import lora_teaching

    monkeypatch.setattr(lora_teaching, "MAX_ADAPTERS", 1)
    first = _teach(service, history, session="page-1")[-1].label
    second = _teach(service, history, session="page-2")[-1].label
    assert service.teacher.adapter(second).path.is_dir()
    with pytest.raises(LoraError, match="not known here"):
        service.teacher.adapter(first)


@pytest.mark.parametrize(
    "task, pairing, runtime", [([], TEST_PAIRING_ID, "auto"), ("review", ["x"], "auto"), ("review", TEST_PAIRING_ID, 3)]
)
def test_values_a_public_caller_sends_of_the_wrong_type_get_a_message(service, history, task, pairing, runtime):
    events = list(service.teach_specialist("page-1", history, task, pairing, runtime))
    assert len(events) == 1 and isinstance(events[0], TeachFailed) and "names the page offers" in events[0].message
