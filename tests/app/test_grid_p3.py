"""The Dashboard's grid sets P³'s k and τ (method p3), as the Generate tab does: the form's values reach the
EvalSpec and the stored run, bounded as the engine bounds them, and bad values get a message."""

from __future__ import annotations

import html
import math

import pytest

import app
import storage
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU
from specsteer.protocol.wire import MAX_DRAFT_LEN
from specsteer.service.evaluation_runs import GridForm
from ui import dashboard_handlers, pairs

pytestmark = pytest.mark.usefixtures("tiny_app")


def dashboard_values(**overrides) -> dict[str, object]:
    """The grid's values, small: one record of the sample, 4 tokens, the tiny pairing."""
    values: dict[str, object] = {
        "source": "sample",
        "upload": None,
        "task": "review",
        "records": 1,
        "methods": ["p3"],
        "alphas": "1.0",
        "betas": "1",
        "pairing": pairs.TINY_PAIRING_ID,
        "runtime": "auto",
        "max_new_tokens": 4,
        "draft_len": 2,
        "run_name": "",
    }
    return {**values, **overrides}


def _form(**overrides) -> GridForm:
    return GridForm(**dashboard_values(**overrides))


def test_the_form_passes_k_and_tau_into_the_spec_and_defaults_to_p3s_own():
    spec = _form(methods=["p3"], p3_draft_len=3.0, p3_tau=0.2).spec(lambda path, task: path)
    assert (spec.p3_draft_len, spec.p3_tau) == (3, 0.2)
    plain = _form(methods=["p3"]).spec(lambda path, task: path)
    assert (plain.p3_draft_len, plain.p3_tau) == (DEFAULT_DRAFT_LEN, DEFAULT_TAU)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"p3_tau": math.nan}, "P³ τ must be a number"),
        ({"p3_tau": "high"}, "P³ τ must be a number"),
        ({"p3_draft_len": None}, "P³ draft length must be a number"),
        ({"p3_tau": 1.5}, "P³'s tau must be between 0"),
        ({"p3_draft_len": MAX_DRAFT_LEN + 1}, f"P³'s draft length must be between 1 and {MAX_DRAFT_LEN}"),
        ({"p3_draft_len": 0}, "P³'s draft length must be between 1"),
    ],
)
def test_bad_p3_settings_get_a_message_and_store_nothing(values, message):
    tab = dashboard_handlers.DashboardTab(app.build_service())
    final = list(tab.run_batch(**dashboard_values(methods=["p3"], run_name="bad-p3", **values)))[-1]
    assert "ss-box-error" in final.status and html.escape(message) in final.status  # shown escaped
    assert storage.get_run_by_name("bad-p3") is None


def test_a_grid_of_p3_runs_with_the_forms_k_and_tau_and_stores_them():
    tab = dashboard_handlers.DashboardTab(app.build_service())
    values = dashboard_values(methods=["llm", "p3"], run_name="p3-grid", p3_draft_len=3, p3_tau=0.3)
    final = list(tab.run_batch(**values))[-1]
    assert "finished" in final.status and "2 cells computed" in final.status
    config = storage.get_run_by_name("p3-grid").config
    assert (config["p3_draft_len"], config["p3_tau"]) == (3, 0.3)
