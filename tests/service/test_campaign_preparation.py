"""What a campaign's form decides before anything is generated, GUI-free: its defaults and which fields each
source shows, the estimated time (from stored runs' measured speed, else the calibration), and which outputs are
too alike to ask anyone about."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from specsteer.method.events import GenerationStats
from specsteer.models import calibration
from specsteer.service import campaign_estimate
from specsteer.service.campaign_checks import NEAR_IDENTICAL, judgeable, outputs_similarity, similarity
from specsteer.service.campaign_estimate import StoredPaces, estimate, measured_paces
from specsteer.service.campaign_form import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_METHODS,
    DEFAULT_RECORDS,
    CampaignForm,
    shows_run,
    shows_upload,
)
from specsteer.service.campaign_values import CampaignError
from specsteer.stores.runs import CellResult, GridPoint, StoredRun

# --------------------------------------------------------------------------- the form


def form(**changes) -> CampaignForm:
    values = dict(
        name="study",
        task="review",
        data="sample",
        upload=None,
        run=None,
        limit=DEFAULT_RECORDS,
        methods=list(DEFAULT_METHODS),
        pairing="tiny-test",
        runtime="auto",
        alpha=0.1,
        beta=1.0,
        max_new_tokens=DEFAULT_MAX_NEW_TOKENS,
        annotators="ann, bob",
        open_to_anyone=False,
    )
    return CampaignForm(**{**values, **changes})


def test_the_defaults_are_a_campaign_a_two_core_cpu_finishes_in_minutes():
    assert 2 <= len(DEFAULT_METHODS) <= 3 and DEFAULT_MAX_NEW_TOKENS <= 64 and DEFAULT_RECORDS <= 5


def test_each_source_shows_its_own_field_only():
    assert shows_upload("upload") and not shows_upload("sample") and not shows_upload("run")
    assert shows_run("run") and not shows_run("upload") and not shows_run("sample")


def test_the_form_becomes_a_campaign_to_generate_or_one_from_a_stored_run():
    request = form().request()
    assert request.methods == tuple(DEFAULT_METHODS) and request.annotators == ("ann", "bob")
    assert request.settings["max_new_tokens"] == DEFAULT_MAX_NEW_TOKENS and request.limit == DEFAULT_RECORDS
    assert form(data="upload").request("/kept/records.jsonl").data == "/kept/records.jsonl"
    from_run = form(data="run", run="grid-1", alpha="", beta=2).run_request()
    assert (from_run.run, from_run.alpha, from_run.beta, from_run.limit) == ("grid-1", None, 2.0, DEFAULT_RECORDS)
    with pytest.raises(CampaignError, match="Choose the stored run"):
        form(data="run").run_request()
    with pytest.raises(CampaignError, match="whole number"):
        form(limit=1.5).request()
    with pytest.raises(TypeError):
        CampaignForm.widgets(name=1)


# --------------------------------------------------------------------------- near-identical outputs


def test_outputs_are_near_identical_when_normalised_equal_or_alike_character_by_character():
    assert similarity("The  battery lasts.\n", "the battery LASTS.") == 1.0  # normalised text equal
    long = "This power bank charged my phone four times over a weekend of camping. " * 3
    assert similarity(long, long.replace("four", "five")) >= NEAR_IDENTICAL  # one word of a long output
    assert similarity("Great battery life.", "Terrible battery life.") < NEAR_IDENTICAL
    assert outputs_similarity(["same text", "Same text", "same  text"]) == 1.0
    assert outputs_similarity(["same text", "same text", "another answer"]) < NEAR_IDENTICAL  # one differs
    assert not judgeable(1.0) and judgeable(0.5) and judgeable(None)  # None: stored before it was measured


# --------------------------------------------------------------------------- the estimate


def cell(method: str, ttft: float, seconds: float, tokens: int = 9, disturbed: bool = False) -> CellResult:
    stats = GenerationStats(method, new_tokens=tokens, seconds=seconds, ttft_s=ttft, pauses=int(disturbed))
    return CellResult("r", GridPoint(method), "text", {}, stats)


def test_a_pace_is_the_first_tokens_median_wait_and_the_seconds_of_each_token_after_it():
    paces = measured_paces(
        [
            cell("llm", 1.0, 5.0),  # 8 tokens after the first in 4 s
            cell("llm", 3.0, 7.0),  # the same pace
            cell("llm", 0.1, 99.0, disturbed=True),  # left out, as every speed figure leaves it out
            cell("slm+", 2.0, 2.0, tokens=1),  # nothing after its first token: no pace from it
        ]
    )
    assert set(paces) == {"llm"}
    llm = paces["llm"]
    assert (llm.first_token_s, llm.per_token_s, llm.generations) == (2.0, 0.5, 2)
    assert llm.seconds(65) == pytest.approx(2.0 + 64 * 0.5)


def test_the_estimate_follows_the_settings_and_says_how_it_was_made():
    paces = measured_paces([cell("llm", 2.0, 6.0), cell("specsteer", 1.0, 9.0)])  # 0.5 and 1.0 s a token
    short = estimate(3, ("llm", "specsteer"), 9, paces)
    assert short.seconds == pytest.approx(3 * ((2.0 + 8 * 0.5) + (1.0 + 8 * 1.0)))
    assert short.minutes == 1 and short.text().startswith("Estimated time: about 1 min (3 records × 2 methods")
    assert "stored runs of this pairing measured" in short.text() and "(2 generations)" in short.text()
    long = estimate(5, ("llm", "specsteer"), 64, paces)
    assert long.minutes == 8  # 5 × ((2 + 63 × 0.5) + (1 + 63 × 1)) s = 487.5 s
    assert "up to 64 tokens" in long.text()
    unknown = estimate(3, ("llm", "p3"), 64, paces)
    assert unknown.minutes is None and "No estimate" in unknown.text() and "P³" in unknown.text()


def test_the_calibration_gives_a_pace_where_no_stored_run_measured_one(monkeypatch):
    small = calibration.ModelTiming("s", prompt_tok_s=100.0, step_s=0.05, verify_s=0.2)
    large = calibration.ModelTiming("l", prompt_tok_s=50.0, step_s=0.2, verify_s=0.5)
    saved = calibration.Calibration(
        "k", "cpu", "pair", (calibration.RuntimeTiming("llama.cpp", "q4", small, large),), (), 1.0
    )
    monkeypatch.setattr(calibration, "saved_calibration", lambda pairing: saved)
    pace = campaign_estimate.calibrated_pace("pair", "llm")
    assert pace is not None and pace.source == "calibration"
    assert pace.per_token_s == pytest.approx(0.2)  # the Generalist's step
    assert pace.seconds(64) == pytest.approx(calibration.estimate(saved.timings[0], "llm", new_tokens=64))
    monkeypatch.setattr(calibration, "saved_calibration", lambda pairing: None)
    assert campaign_estimate.calibrated_pace("pair", "llm") is None


class CountingRuns:
    """A run store of one run whose cells are counted as they are read."""

    def __init__(self, cells: list[CellResult], pairing: str = "pair") -> None:
        self.cells_read = 0
        self._cells = cells
        now = datetime.now(UTC)
        self.run_value = StoredRun(1, "grid", {"pairing": pairing}, "finished", None, now, now, len(cells))

    def runs(self):
        return [self.run_value]

    def cells(self, run_id):
        self.cells_read += 1
        return list(self._cells)


def test_stored_paces_read_a_runs_cells_once_and_again_only_when_it_grew():
    runs = CountingRuns([cell("llm", 2.0, 6.0)])
    paces = StoredPaces(runs)  # type: ignore[arg-type]
    assert paces.paces("pair")["llm"].generations == 1 and paces.paces("pair")
    assert runs.cells_read == 1
    assert paces.paces("other pairing") == {}
    runs._cells.append(cell("llm", 2.0, 6.0))
    runs.run_value = StoredRun(1, "grid", {"pairing": "pair"}, "finished", None, *([runs.run_value.created_at] * 2), 2)
    assert paces.paces("pair")["llm"].generations == 2 and runs.cells_read == 2
