"""The Judge and Campaigns tabs over HTTP (gradio_client, the app served on loopback with the tiny pair): the
queue's wiring (every output in place), a save and its progress, refusals shown as messages, results and
export on the panel; each browser session keeps its own seat."""

from __future__ import annotations

import re

import pytest

import storage
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
from specsteer.service.app_service import AppService
from specsteer.service.campaign_values import CampaignRequest
from specsteer.service.pair_catalog import PairCatalog
from ui.judge_tab import MAX_SLOTS, SHORTCUTS_JS

gradio_client = pytest.importorskip("gradio_client")

pytestmark = pytest.mark.slow  # the app served on loopback, two annotators' sessions

RATINGS = [None] * (MAX_SLOTS * 2)


@pytest.fixture(scope="module")
def served(app_server):
    url, _data = app_server
    database = storage.database_url()
    app = AppService(
        storage.SqlGenerationStore(database),
        storage.SqlRunStore(database),
        PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
    )
    service = app.campaigns(storage.SqlCampaignStore(database))
    created = service.create(
        CampaignRequest(
            "ui-study",
            "review",
            "sample",
            ("llm", "specsteer"),
            {"pairing": TEST_PAIRING_ID, "max_new_tokens": 4},
            2,
            ("ann", "bob"),
        )
    )
    list(service.generate("ui-study"))
    return url, created.codes


def client(url):
    return gradio_client.Client(url, verbose=False)


def create(panel, **changes):
    """The campaign form sent through its API: a small sample campaign on the tiny pair, with ``changes``."""
    values = dict(
        task="review",
        data="sample",
        upload=None,
        run=None,
        pairing=TEST_PAIRING_ID,
        runtime="auto",
        alpha=0.1,
        beta=1.0,
        max_new_tokens=4,
        annotators="",
        open_to_anyone=False,
        token="",
    )
    return panel.predict(**{**values, **changes}, api_name="/campaign_create")


def test_two_sessions_judge_with_their_own_seats(served):
    url, codes = served
    ann, bob = client(url), client(url)
    shown = ann.predict("ann", codes["ann"], "ui-study", api_name="/judge_start")
    status, progress = shown[0], shown[1]
    assert "Judging" in status and "1 of 2" in progress and "judged 0" in progress
    refused = bob.predict("bob", codes["ann"], "ui-study", api_name="/judge_start")
    assert "join code" in refused[0]
    saved = ann.predict("A", "clear and <b>fine</b>", *RATINGS, api_name="/judge_save")
    assert "plain text" in saved[0]  # markup refused, nothing saved
    saved = ann.predict("A", "clear", *RATINGS, api_name="/judge_save")
    assert "Saved" in saved[0] and "judged 1" in saved[1]
    started = bob.predict("bob", codes["bob"], "ui-study", api_name="/judge_start")
    assert "judged 0" in started[1]  # ann's judgement is not bob's
    assert "Name yourself" in client(url).predict("tie", "", *RATINGS, api_name="/judge_save")[0]
    saved = bob.predict("tie", "", *RATINGS, api_name="/judge_save")
    assert "Saved" in saved[0]
    skipped = bob.predict(api_name="/judge_skip")
    assert re.search(r"\d of 2", skipped[1])


def test_the_panel_shows_results_and_exports(served):
    url, _codes = served
    panel = client(url)
    exported = panel.predict("ui-study", "csv", "", api_name="/campaign_export")
    assert "exported" in exported[1]
    path = exported[0]["value"] if isinstance(exported[0], dict) else exported[0]  # an update of the File
    text = open(path, encoding="utf-8").read()
    assert "ann" in text and "seconds" in text
    refused = create(panel, name="x", limit=2, methods=["llm"])
    assert "two methods" in refused[0]


def test_the_panel_creates_and_generates_in_the_models_slot(served):
    url, _codes = served
    panel = client(url)
    created = create(panel, name="ui-made", limit=1, methods=["llm", "specsteer"], open_to_anyone=True)
    assert "stored" in created[0]
    status = panel.predict("ui-made", "", api_name="/campaign_generate")
    assert "1 of 1 comparisons ready" in status and "open to anyone" in status
    assert "no campaign" in panel.predict("nope", "", api_name="/campaign_generate")


def test_the_shortcuts_cover_every_choice_and_save():
    for key in ("'t'", "'g'", "'x'", "'Enter'", "'ArrowRight'", "'ArrowLeft'", "judge-save", "judge-choice"):
        assert key in SHORTCUTS_JS
