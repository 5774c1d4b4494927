"""An evaluation cell keeps the history that crossed (``eval_cells.history_crossed``), without its spans."""

from __future__ import annotations

from dataclasses import replace

import pytest

import storage
from specsteer.data.crossing import CrossedPhrase, Crossing, HistoryCrossing, SentSpan
from specsteer.method.events import GenerationStats
from specsteer.stores.runs import CellResult, GridPoint

pytestmark = pytest.mark.usefixtures("fresh_engines")


def _cell(record_id: str, method: str = "llm", alpha: float | None = None, beta: float | None = None) -> CellResult:
    return CellResult(record_id, GridPoint(method, alpha, beta), "", {}, GenerationStats(method=method))


def test_a_cell_keeps_the_history_that_crossed_without_its_spans(url):
    run_id = storage.create_run("crossed", {"task": "cogenesis"}, url=url)
    span = SentSpan(1, "draft", 0, 3)
    phrase = CrossedPhrase("InnovTech Solutions", (Crossing(1, "rejected", (span,)),), ((4, 23),))
    crossing = HistoryCrossing((phrase,), guard=3)
    storage.save_cell(run_id, replace(_cell("r1", "specsteer", 0.1, 1.0), history_crossed=crossing), url=url)
    storage.save_cell(run_id, replace(_cell("r2", "slm"), history_crossed=HistoryCrossing(linked=False)), url=url)
    storage.save_cell(run_id, _cell("r3"), url=url)  # as a cell stored before the audit existed: NULL
    crossed, device, unaudited = storage.run_cells(run_id, url=url)
    assert crossed.history_crossed == HistoryCrossing(
        (CrossedPhrase("InnovTech Solutions", (Crossing(1, "rejected"),)),), guard=3
    )
    assert crossed.history_crossed.refused_only == 1 and not device.history_crossed.linked
    assert unaudited.history_crossed is None  # not audited, which is not "nothing crossed"
