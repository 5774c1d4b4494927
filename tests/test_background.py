"""specsteer.background: work in a thread, followed as an iterator; and the two UI helpers built on it."""

from __future__ import annotations

import threading
import time

import pytest

from specsteer.background import Background
from specsteer.models import ModelLoadError
from ui import pairs


def test_every_item_arrives_in_order_then_the_result():
    def work(emit, cancel):
        for number in range(100):
            emit(number)
        return "done"

    background = Background(work, name="test")
    assert list(background.items()) == list(range(100))
    assert background.result() == "done" and background.done and background.finished_at is not None


def test_a_slow_consumer_gets_merged_items_and_the_latest_state():
    release = threading.Event()

    def work(emit, cancel):
        emit([0])
        release.wait(5)
        for number in range(1, 50):
            emit([number])

    background = Background(work, name="test", merge=lambda older, newer: older + newer)
    items = background.items()
    assert next(items) == [0]
    release.set()
    background.wait(5)  # everything else is emitted before the consumer looks again
    assert list(items) == [list(range(1, 50))]


def test_the_works_error_is_raised_in_the_consumer_after_its_items():
    def failing(emit, cancel):
        emit("one")
        raise RuntimeError("boom")

    background = Background(failing, name="test")
    assert list(background.items()) == ["one"]
    with pytest.raises(RuntimeError, match="boom"):
        background.result()


def test_a_consumer_that_goes_away_stops_the_work():
    def endless(emit, cancel):
        while not cancel.is_set():
            emit("tick")
            time.sleep(0.001)
        return "stopped"

    background = Background(endless, name="test")
    items = background.items()
    next(items)
    items.close()
    assert background.result(timeout=5) == "stopped"


def test_stop_sets_the_flag_waits_and_drops_what_was_not_taken():
    def ticks(cancel):
        while not cancel.is_set():
            yield "tick"
            time.sleep(0.001)

    background = Background.iterate(ticks, name="test")
    time.sleep(0.05)  # a few ticks wait, untaken
    background.stop(timeout=5)
    assert background.cancel.is_set() and background.done
    assert list(background.items()) == []
    assert background.result() is None


def test_a_result_asked_for_too_early_times_out():
    gate = threading.Event()
    background = Background(lambda emit, cancel: gate.wait(5), name="test")
    with pytest.raises(TimeoutError):
        background.result(timeout=0.01)
    gate.set()
    assert background.result(timeout=5) is True


def _slow_load(pairing_id, progress):
    for step in ("tokenizer", "specialist", "generalist"):
        time.sleep(0.05)
        progress(step)
    return f"pair {pairing_id}"


def test_loading_a_pair_reports_progress_then_yields_the_pair(monkeypatch):
    monkeypatch.setattr(pairs, "check_pairing", lambda pairing_id: None)
    monkeypatch.setattr(pairs, "_load", _slow_load)
    steps = list(pairs.load_with_progress("some-pair", quiet_for=0.01))
    assert steps[0].startswith("Loading the models (first use")
    assert [step.rsplit(": ", 1)[1] for step in steps[1:-1]] == ["tokenizer", "specialist", "generalist"]
    assert steps[-1] == "pair some-pair"
    # Already fast (e.g. cached): no progress lines at all.
    assert list(pairs.load_with_progress("some-pair", quiet_for=5)) == ["pair some-pair"]


def test_a_failed_load_becomes_one_model_load_error(monkeypatch):
    def broken(pairing_id, progress):
        raise OSError("weights missing")

    monkeypatch.setattr(pairs, "check_pairing", lambda pairing_id: None)
    monkeypatch.setattr(pairs, "_load", broken)
    with pytest.raises(ModelLoadError, match="weights missing"):
        list(pairs.load_with_progress("some-pair"))
