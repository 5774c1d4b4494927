"""The method table says what the engine really does: checked by running every method on tiny models."""

from __future__ import annotations

import pytest

from specsteer.data.history import HistoryItem
from specsteer.engine import decode_config as engine
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request
from specsteer.method.catalog import METHOD_INFO, METHODS, method_info, method_label

REQUEST = Request(
    task="free",
    input_text="Write about batteries",
    retrieval_k=1,
    history=[HistoryItem({"text": "I always write about battery life and chargers."})],
)


def _run(pair, method: str, **settings):
    return collect(generate(pair, REQUEST, DecodeConfig(method=method, max_new_tokens=12, **settings)))[1]


def test_the_engine_runs_exactly_the_methods_of_the_table(pair):
    # The engine validates against the table itself, not a copy of it.
    assert engine.METHODS is METHODS
    assert [info.name for info in METHOD_INFO.values()] == list(METHODS)
    # Every method of the table runs and reports itself; a name outside it is refused before anything runs.
    assert [_run(pair, method).stats.method for method in METHODS] == list(METHODS)
    with pytest.raises(ValueError, match="unknown method"):
        DecodeConfig(method="gpt").validate()
    with pytest.raises(ValueError, match="unknown method"):
        _run(pair, "gpt")


def test_labels_are_distinct_and_unknown_names_are_shown_as_they_are():
    assert len({info.label for info in METHOD_INFO.values()}) == len(METHODS)
    assert method_label("slm+") == "SLM+" and method_label("sd-plain") == "sd-plain"
    assert METHOD_INFO["specsteer"].choice_label.startswith("SpecSteer — ")
    with pytest.raises(ValueError, match="choose one of"):
        method_info("gpt")


@pytest.mark.parametrize("method", METHODS)
def test_device_only_and_speculative_match_what_a_generation_does(pair, method):
    info = METHOD_INFO[method]
    finished = _run(pair, method)
    assert (finished.transcript == []) is info.device_only
    # drafted: the Edge's drafts, or under P³ the Cloud's drafts the Edge checked
    assert (finished.stats.drafted > 0) is (info.speculative or info.cloud_drafts)


@pytest.mark.parametrize("method", METHODS)
def test_a_parameter_the_table_says_a_method_ignores_changes_nothing(pair, method):
    info = METHOD_INFO[method]
    base = _run(pair, method, alpha=0.1, beta=1.0).token_ids
    if not info.takes_alpha:
        assert _run(pair, method, alpha=5.0, beta=1.0).token_ids == base
    if not info.takes_beta:
        assert _run(pair, method, alpha=0.1, beta=3.0).token_ids == base


@pytest.mark.parametrize("method", [name for name, info in METHOD_INFO.items() if info.takes_beta])
def test_methods_that_take_beta_are_steered_by_it(pair, method):
    assert _run(pair, method, beta=0.0).token_ids != _run(pair, method, beta=3.0).token_ids


def test_specsteer_is_the_method_that_takes_alpha_and_alpha_changes_its_acceptance(pair):
    assert [name for name, info in METHOD_INFO.items() if info.takes_alpha] == ["specsteer"]
    permissive, strict = _run(pair, "specsteer", alpha=0.0), _run(pair, "specsteer", alpha=float("inf"))
    assert permissive.stats.accepted == permissive.stats.drafted and strict.stats.accepted == 0
