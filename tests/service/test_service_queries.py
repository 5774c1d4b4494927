"""What the tabs read and write besides the workflows, through the service and the SQL stores:
saved comparisons (reshuffled only here), judgements, their export, stored runs, kept uploads.
No model is loaded."""

from __future__ import annotations

import pytest

import storage
from specsteer.data.history import HistoryError
from specsteer.data.sources import bundled_sample_path
from specsteer.method.events import GenerationStats
from specsteer.protocol.exposure import Exposure
from specsteer.service.app_service import AppService
from specsteer.service.events import ExportRefused
from specsteer.stores.generations import NewAnnotation
from specsteer.stores.runs import CellResult, GridPoint

METHODS = ("slm", "llm", "specsteer", "slm+")


@pytest.fixture
def service(url, tmp_path):
    return AppService(store=storage.SqlGenerationStore(url), runs=storage.SqlRunStore(url), uploads=tmp_path / "kept")


def saved_comparison(url, blind: bool) -> int:
    ids = [
        storage.save_generation(
            method=method,
            task="review",
            input_text="in",
            text=f"text of {method}",
            stats=GenerationStats(method, new_tokens=index + 1),
            url=url,
        )
        for index, method in enumerate(METHODS)
    ]
    return storage.save_comparison(generation_ids=ids, task="review", input_text="in", blind=blind, url=url)


def test_a_blind_comparison_is_reopened_in_a_fresh_order_and_a_plain_one_as_saved(service, url):
    blind, plain = saved_comparison(url, blind=True), saved_comparison(url, blind=False)
    assert service.reopen_comparison(plain).methods == METHODS
    orders = {service.reopen_comparison(blind).methods for _ in range(40)}
    assert len(orders) > 1 and all(sorted(order) == sorted(METHODS) for order in orders)
    reopened = service.reopen_comparison(blind)
    assert all(output.text == f"text of {output.method}" for output in reopened.outputs)  # texts travel along
    assert [comparison.id for comparison in service.saved_comparisons()] == [plain, blind]  # newest first
    with pytest.raises(ValueError, match=r"^Comparison #999 does not exist\.$"):
        service.reopen_comparison(999)


def test_a_judgement_is_saved_and_its_outputs_come_back_in_the_order_judged(service, url):
    comparison = service.reopen_comparison(saved_comparison(url, blind=True))
    shown = comparison.methods
    saved = service.annotate(
        NewAnnotation(comparison.id, "ann", "B", {"A": {"fluency": 4, "personalization": None}}, "", shown)
    )
    assert [output.method for output in saved.outputs] == list(shown)
    assert [output.stats.new_tokens for output in saved.outputs] == [METHODS.index(m) + 1 for m in shown]
    summary = service.annotation_summary()
    assert summary.judgements == 1 and summary.methods[shown[1]].wins == 1
    assert summary.methods[shown[0]].mean_ratings == {"fluency": 4.0}
    with pytest.raises(ValueError, match="from 1 to 5"):
        service.annotate(NewAnnotation(comparison.id, "ann", "A", {"A": {"fluency": 9}}, "", shown))


def test_the_export_needs_the_operators_token_in_public_and_says_when_there_is_nothing(service, url):
    assert service.export_annotations("csv").path is None  # nothing judged yet: no file
    comparison = saved_comparison(url, blind=False)
    service.annotate(NewAnnotation(comparison, "visitor", "tie", {}, "note", METHODS))
    exported = service.export_annotations("jsonl")
    assert exported.count == 1 and "visitor" in exported.path.read_text()
    service = AppService(service.store, service.runs, exposure=Exposure(public=True, admin_token="operator-token"))
    with pytest.raises(ExportRefused, match="needs the operator's token"):
        service.export_annotations("csv", "guess")
    assert service.export_annotations("csv", "operator-token").count == 1
    with pytest.raises(ValueError, match="Unknown export format"):
        service.export_annotations("xlsx", "operator-token")  # type: ignore[arg-type]


def test_stored_runs_are_listed_and_read_with_their_cells(service, url):
    run_id = storage.create_run("r", {"task": "review"}, url=url)
    storage.save_cell(run_id, CellResult("rec", GridPoint("llm"), "out", {}, GenerationStats("llm")), url=url)
    assert [(run.id, run.cell_count) for run in service.stored_runs()] == [(run_id, 1)]
    results = service.run_results(run_id)
    assert results.run.name == "r" and [cell.record_id for cell in results.cells] == ["rec"]
    assert service.stored_run(run_id).cell_count == 1
    assert service.stored_run(run_id + 1) is None and service.run_results(run_id + 1) is None


def test_an_uploaded_records_file_is_kept_once_it_reads_and_removed_when_it_does_not(service, tmp_path):
    good = tmp_path / "mine.jsonl"
    good.write_text(bundled_sample_path("review").read_text())
    kept = service.keep_records(good, "review")
    assert kept.name == "mine.jsonl" and kept.parent.parent == service.uploads
    assert service.keep_records(good, "review") == kept  # the same content is kept once
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "x"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl"):
        service.keep_records(bad, "review")
    assert [path.name for path in service.uploads.rglob("*") if path.is_file()] == ["mine.jsonl"]
    nowhere = AppService(store=service.store, runs=service.runs)
    with pytest.raises(ValueError, match="keeps no uploaded files"):
        nowhere.keep_records(good, "review")


def test_an_uploaded_history_is_read_and_named_after_its_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("One.\n\nTwo.")
    loaded = AppService.read_history(path)
    assert loaded.name == "“notes.txt”" and len(loaded.history) == 2
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(HistoryError, match="malformed JSON"):
        AppService.read_history(broken)
