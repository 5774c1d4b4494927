"""P³ in the app: the Generate tab runs it with its two sliders (stored with the output), and Compare judges it
beside SpecSteer (it keeps the private context on the device)."""

from __future__ import annotations

import pytest

import app
import storage
from specsteer.service import judging, page
from testkit import widget_settings
from ui import compare_handlers, generate_handlers, generate_tab, pairs

pytestmark = pytest.mark.usefixtures("tiny_app")

TASK = "review"
INPUT = "Write a review of a power bank with great battery life"


def test_the_generate_tab_runs_p3_with_its_sliders_and_stores_them():
    assert "p3" in dict((value, label) for label, value in generate_tab.METHOD_CHOICES)
    tab = generate_handlers.GenerateTab(app.build_service())
    values = widget_settings(pairs.TINY_PAIRING_ID, 12, method="p3", p3_draft_len=3, p3_tau=0.01)
    frames = list(tab.generate(page.read_sample("review"), TASK, INPUT, **values))
    final = frames[-1]
    assert "saved as generation" in final.status, final.status
    assert "Privacy check passed" in final.privacy and "drafts the device kept" in final.privacy
    assert "ss-tok-recovered" in final.output  # the Edge's corrections, in SpecSteer's colour for a recovery
    generation = storage.list_generations()[0]
    stored = storage.get_generation(generation["id"])
    assert generation["method"] == "p3" and stored["settings"]["p3_draft_len"] == 3
    assert stored["settings"]["p3_tau"] == 0.01 and stored["stats"]["device_chosen"] > 0


def test_compare_offers_and_runs_p3():
    assert "p3" in judging.COMPARED_METHODS
    tab = compare_handlers.CompareTab(app.build_service())
    values = widget_settings(pairs.TINY_PAIRING_ID, 8)
    frames = list(
        tab.compare(
            page.read_sample("review"),
            task=TASK,
            input_text=INPUT,
            methods=["p3", "specsteer"],
            blind=True,
            request=None,
            **values,
        )
    )
    view = frames[-1].view
    assert "Saved as comparison" in frames[-1].status and sorted(view.order) == ["p3", "specsteer"]
