"""CDA in the app: the settings value reads the Generate tab's Acceptance dropdown and λ, applies them to SpecSteer
alone (the methods without α ignore them, as they ignore α), refuses them with the exact-target variant; a
generation run with them stores them, and the privacy panel shows the Open carrying the rule."""

from __future__ import annotations

import pytest

import app
import storage
from specsteer.engine.settings import ACCEPTANCES, GenerationSettings, SettingsError
from specsteer.service import page
from testkit import widget_settings
from ui import generate_handlers, generate_tab, pairs

TASK = "review"
INPUT = "Write a review of a power bank with great battery life"


def test_the_dropdown_offers_exactly_the_settings_rules():
    assert [value for _, value in generate_tab.ACCEPTANCE_CHOICES] == list(ACCEPTANCES)


def test_cda_settings_go_to_specsteer_alone():
    settings = GenerationSettings.from_values({"pairing": "x", "acceptance": "cda", "cda_lambda": 2.0})
    assert settings.decode_config().cda_lambda == 2.0
    assert settings.for_method("llm").decode_config().cda_lambda is None  # no α: nothing to adapt
    assert GenerationSettings.from_values({"pairing": "x", "cda_lambda": 2.0}).decode_config().cda_lambda is None


@pytest.mark.parametrize(
    "values, problem",
    [
        ({"acceptance": "adaptive"}, "Acceptance must be one of fixed, cda, not 'adaptive'."),
        ({"acceptance": "cda", "cda_lambda": -1.0}, "CDA's λ must be a finite number >= 0."),
        (
            {"acceptance": "cda", "decoding": "sampling", "exact": True},
            "CDA and the exact-target variant exclude each other",
        ),
    ],
)
def test_bad_cda_settings_are_sentences(values, problem):
    with pytest.raises(SettingsError) as caught:
        GenerationSettings.from_values({"pairing": "x", **values})
    assert problem in str(caught.value)


@pytest.mark.usefixtures("tiny_app")
def test_the_generate_tab_runs_cda_and_stores_it():
    tab = generate_handlers.GenerateTab(app.build_service())
    values = widget_settings(pairs.TINY_PAIRING_ID, 12, acceptance="cda", cda_lambda=2.0)
    final = list(tab.generate(page.read_sample("review"), TASK, INPUT, **values))[-1]
    assert "saved as generation" in final.status, final.status
    assert "acceptance=cda" in final.privacy and "cda_lambda=2.0" in final.privacy  # the Open carries the rule
    assert "Privacy check passed" in final.privacy
    stored = storage.get_generation(storage.list_generations()[0]["id"])
    assert stored["settings"]["acceptance"] == "cda" and stored["settings"]["cda_lambda"] == 2.0
    assert stored["stats"]["cda_lambda"] == 2.0
