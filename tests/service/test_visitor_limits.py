"""Bounded work per visitor and inputs that fail cleanly, through the service and the parsers (no server):
grid sizes and the operator's token, token budgets and text lengths, ids beyond what a database stores,
the one records parser (depth, size, item count) on every path, and the interactive turn before a grid's."""

from __future__ import annotations

import json
import threading
import time

import pytest

import storage
from specsteer.cli.evaluate import main as evaluate_main
from specsteer.data.datasets import load_records
from specsteer.data.history import HistoryError
from specsteer.data.history_upload import parse_history
from specsteer.data.record_files import DataError
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation.grid import EvalSpec
from specsteer.models.tiny import TEST_PAIRING_ID
from specsteer.protocol.exposure import Exposure
from specsteer.service.app_service import AppService
from specsteer.service.events import Failed
from specsteer.service.limits import LOCAL_LIMITS, PUBLIC_LIMITS, limits_for
from specsteer.stores.generations import NewAnnotation
from specsteer.util.turns import ModelTurns

NESTED = "[" * 10_000 + "]" * 10_000
TOKEN = "operator-secret"


@pytest.fixture
def public(url, tmp_path):
    return AppService(
        store=storage.SqlGenerationStore(url),
        runs=storage.SqlRunStore(url),
        uploads=tmp_path / "kept",
        exposure=Exposure(public=True, admin_token=TOKEN),
    )


def grid(**overrides) -> EvalSpec:
    values = dict(
        data=str(bundled_sample_path("review")),
        task="review",
        methods=("slm", "llm", "specsteer"),
        alphas=(1.0, 0.1),
        betas=(1.0,),
        limit=1,
        pairing=TEST_PAIRING_ID,
        max_new_tokens=4,
    )
    values.update(overrides)
    return EvalSpec(**values)


def first_failure(events) -> str:
    event = next(iter(events))
    assert isinstance(event, Failed), event
    return event.message


def test_the_limits_are_one_value_with_public_and_local_defaults():
    assert limits_for(True) is PUBLIC_LIMITS and limits_for(False) is LOCAL_LIMITS
    assert PUBLIC_LIMITS.open_grid_cells <= 24 and PUBLIC_LIMITS.open_records <= 8
    with pytest.raises(AttributeError):
        PUBLIC_LIMITS.max_new_tokens = 10**6  # type: ignore[misc]


def test_a_visitor_grid_of_ten_thousand_alphas_is_refused_at_once(public):
    """The probe's grid: 10,000 α values, 7 methods, two βs, 50 records. Refused before any point is
    counted one by one (the list's length alone), so the refusal is immediate."""
    alphas = tuple(float(i) / 10_000 for i in range(10_000))
    spec = grid(methods=("slm", "slm+", "llm", "llm+", "specsteer", "costeer", "lightcosteer"), alphas=alphas)
    started = time.monotonic()
    message = first_failure(public.evaluate(replace_spec(spec, betas=(1.0, 0.5), limit=50)))
    assert "10000 values" in message and "limit is 16" in message
    assert time.monotonic() - started < 1.0
    assert public.stored_runs() == []  # no run was opened


def replace_spec(spec: EvalSpec, **changes) -> EvalSpec:
    from dataclasses import replace

    return replace(spec, **changes)


def test_a_grid_beyond_the_visitor_cap_needs_the_operator_token(public):
    big = grid(alphas=tuple(float(i) for i in range(1, 9)), limit=3)  # (1 + 1 + 8) × 3 = 30 cells
    message = first_failure(public.evaluate(big))
    assert "30 cells" in message and "operator's token" in message
    message = first_failure(public.evaluate(big, operator_token="wrong"))
    assert "operator's token" in message
    records = first_failure(public.evaluate(grid(limit=9)))  # 4 × 9 = 36 cells, 9 records
    assert "9 records" in records
    # With the token the same grid passes the caps (it fails later, on the pairing this service lacks).
    with_token = first_failure(public.evaluate(big, operator_token=TOKEN))
    assert "operator's token" not in with_token and "cells" not in with_token
    # Beyond the hard cap even the operator is refused.
    huge = grid(alphas=tuple(float(i) for i in range(1, 17)), betas=tuple(float(i) for i in range(1, 17)), limit=50)
    assert "the limit is 2000 cells" in first_failure(public.evaluate(huge, operator_token=TOKEN))


def test_a_visitor_over_every_cap_is_told_the_visitors_cap_and_the_operator_the_operators(public):
    """A visitor whose grid was beyond the operator's cap too was told that cap ("2000 cells over at
    most 50 records"), which the visitor cannot reach without the token, instead of its own (24 over 8)."""
    huge = grid(alphas=tuple(float(i) for i in range(1, 17)), betas=tuple(float(i) for i in range(1, 17)), limit=50)
    for spec in (huge, replace_spec(huge, limit=None)):
        message = first_failure(public.evaluate(spec))
        assert "a grid may have 24 cells over 8 records" in message and "operator's token" in message, message
        assert "2000 cells" not in message and "at most 50 records" not in message
    every = first_failure(public.evaluate(replace_spec(grid(), limit=None)))
    assert every.startswith("This grid reads every record of its file") and "24 cells over 8 records" in every
    assert "the limit is 2000 cells over at most 50 records" in first_failure(
        public.evaluate(huge, operator_token=TOKEN)
    )


def test_a_run_name_longer_than_the_cap_is_refused_and_not_stored(public):
    message = first_failure(public.evaluate(grid(run_name="x" * 100_000)))
    assert "run name has 100,000 characters" in message and "120" in message
    assert public.stored_runs() == []


def test_token_budget_and_input_length_are_capped_in_public(public):
    history = None
    failed = next(iter(public.generate(history, "review", "in", {"pairing": TEST_PAIRING_ID, "max_new_tokens": 4000})))
    assert isinstance(failed, Failed) and "limit here is 512" in failed.message
    failed = next(iter(public.generate(history, "review", "x" * 100_000, {"pairing": TEST_PAIRING_ID})))
    assert isinstance(failed, Failed) and "task input has 100,000 characters" in failed.message
    failed = next(iter(public.compare(history, "review", "x" * 100_000, {"pairing": TEST_PAIRING_ID}, ["slm"], True)))
    assert isinstance(failed, Failed) and "task input" in failed.message


def test_annotator_names_and_comments_are_capped(public):
    for annotator, comment, what in (("n" * 121, "", "annotator's name"), ("me", "c" * 4001, "comment")):
        annotation = NewAnnotation(
            comparison_id=1, annotator=annotator, preferred="tie", ratings={}, comment=comment, display_order=("slm",)
        )
        with pytest.raises(ValueError, match=what):
            public.annotate(annotation)


def test_ids_beyond_a_database_integer_name_nothing(public):
    huge = 99999999999999999999
    with pytest.raises(ValueError, match="does not exist"):
        public.reopen_comparison(huge)
    assert public.run_results(huge) is None and public.stored_run(huge) is None


def test_one_records_parser_refuses_deep_nesting_with_a_data_error(tmp_path):
    for name in ("nested.json", "nested.jsonl"):
        path = tmp_path / name
        path.write_text(NESTED)
        with pytest.raises(DataError, match="nested more than 32 levels"):
            load_records(path, "review")


def test_histories_share_the_depth_check():
    with pytest.raises(HistoryError, match="nested more than 16 levels"):
        parse_history(NESTED)


def test_a_rejected_upload_leaves_nothing_in_the_uploads_folder(public, tmp_path, monkeypatch):
    from specsteer.service import evaluation as service_module

    monkeypatch.setattr(service_module, "MAX_RECORDS_UPLOAD_ITEMS", 10)  # the cap, made small to stay quick
    nested = tmp_path / "nested.json"
    nested.write_text(NESTED)
    big = tmp_path / "many.jsonl"
    record = json.loads(bundled_sample_path("review").read_text().splitlines()[0])
    big.write_text("\n".join(json.dumps({**record, "id": str(i)}) for i in range(11)))
    for path, reason in ((nested, "nested more than 32 levels"), (big, "more than 10 records")):
        with pytest.raises(ValueError, match=reason):
            public.keep_records(path, "review")
    assert not public.uploads.exists() or not any(public.uploads.rglob("*"))


def test_the_cli_prints_a_message_for_a_nested_records_file(tmp_path, capsys):
    nested = tmp_path / "nested.json"
    nested.write_text(NESTED)
    code = evaluate_main(
        [
            "--data",
            str(nested),
            "--task",
            "review",
            "--pairing",
            TEST_PAIRING_ID,
            "--database",
            f"sqlite:///{tmp_path / 'r.db'}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: nested.json line 1") and "Traceback" not in err


def test_a_waiting_interactive_turn_goes_before_the_next_batch_turn():
    """A grid cell holds the models; a generation arrives; the grid's next cell waits for it."""
    turns = ModelTurns()
    order: list[str] = []
    cell_running = threading.Event()
    release_cell = threading.Event()

    def grid_cells():
        with turns.batch():
            order.append("cell 1")
            cell_running.set()
            release_cell.wait(5)
        with turns.batch():
            order.append("cell 2")

    def generation():
        with turns.interactive():
            order.append("generation")

    worker = threading.Thread(target=grid_cells)
    worker.start()
    assert cell_running.wait(5)
    visitor = threading.Thread(target=generation)
    visitor.start()
    deadline = time.monotonic() + 5
    while turns._interactive_waiting == 0 and time.monotonic() < deadline:  # the generation is waiting
        time.sleep(0.01)
    release_cell.set()
    worker.join(5)
    visitor.join(5)
    assert order == ["cell 1", "generation", "cell 2"]
