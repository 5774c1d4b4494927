"""specsteer.util.background: work in a thread, followed as an iterator (the service's pair loading, which
runs on it, is tested in test_service)."""

from __future__ import annotations

import threading
import time

import pytest

from specsteer.util.background import Background


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
