"""The "judgements can be stuffed" inputs that failed uncleanly: a comparison id beyond any database id,
and a run name of 100,000 characters (shown in every visitor's run picker). The stuffing itself is answered by
campaigns (tests/test_campaigns.py: join codes, one judgement per annotator and comparison)."""

from __future__ import annotations

import pytest

import app
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation.grid import MAX_RUN_NAME_CHARS, EvalSpec
from ui import compare_handlers

pytestmark = pytest.mark.usefixtures("tiny_app")


@pytest.mark.parametrize("chosen", ["99999999999999999999", "#18446744073709551616", "0"])
def test_an_out_of_range_comparison_id_is_a_message_not_a_500(chosen, warnings):
    view = compare_handlers.CompareTab(app.build_service()).open_comparison(chosen)
    assert "does not exist" in view.status and warnings


def test_the_service_refuses_ids_beyond_any_row():
    service = app.build_service()
    for bad in (2**63, 10**20, -1, True):
        with pytest.raises(ValueError, match="does not exist"):
            service.reopen_comparison(bad)


@pytest.mark.parametrize("name", ["x" * 100_000, "run\x00name", ""])
def test_a_run_name_is_bounded(name):
    spec = EvalSpec(data=str(bundled_sample_path("review")), task="review", methods=("llm",), run_name=name)
    with pytest.raises(ValueError, match="run name"):
        spec.validate()
    assert EvalSpec(
        data=str(bundled_sample_path("review")), task="review", methods=("llm",), run_name="y" * MAX_RUN_NAME_CHARS
    ).validate()
