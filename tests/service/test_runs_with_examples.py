"""The user's runs with the example runs beside them (specsteer.service.example_runs.RunsWithExamples): both listed,
the examples marked and numbered apart, every read routed to its store, every write to the user's, and a write
aimed at an example refused before it reaches the examples' store."""

from __future__ import annotations

import pytest

import storage
from specsteer.method.events import GenerationStats
from specsteer.service.app_service import AppService
from specsteer.service.example_runs import EXAMPLE_IDS_FROM, ExampleRunsAreReadOnly, RunsWithExamples
from specsteer.stores.runs import CellResult, GridPoint


def _cell(record: str, output: str) -> CellResult:
    return CellResult(record, GridPoint("llm"), output, {}, GenerationStats("llm"))


@pytest.fixture
def stores(tmp_path, fresh_engines):
    """(the composite, the user's URL, the examples' URL, the example run's own id): one run in each database."""
    own_url, examples_url = f"sqlite:///{tmp_path / 'own.db'}", f"sqlite:///{tmp_path / 'examples.db'}"
    example_id = storage.create_run("example-grid", {"task": "review"}, url=examples_url)
    storage.save_cell(example_id, _cell("e1", "example output"), url=examples_url)
    own_id = storage.create_run("my-grid", {"task": "review"}, url=own_url)
    assert own_id == example_id == 1  # the two databases number their runs alike: the composite keeps them apart
    storage.save_cell(own_id, _cell("m1", "my output"), url=own_url)
    runs = RunsWithExamples(storage.SqlRunStore(own_url), storage.SqlRunStore(examples_url))
    return runs, own_url, examples_url, example_id


def test_both_are_listed_the_users_first_and_the_examples_marked_with_ids_of_their_own(stores):
    runs, _, _, example_id = stores
    listed = runs.runs()
    assert [(run.name, run.example) for run in listed] == [("my-grid", False), ("example-grid", True)]
    own, example = listed
    assert own.id == 1 and example.id == EXAMPLE_IDS_FROM + example_id
    assert runs.run(own.id) == own and runs.run(example.id) == example
    assert [cell.output for cell in runs.cells(own.id)] == ["my output"]
    assert [cell.output for cell in runs.cells(example.id)] == ["example output"]
    assert runs.run(EXAMPLE_IDS_FROM + 99) is None and runs.run(99) is None


def test_writes_go_to_the_users_store_and_never_to_an_example(stores):
    runs, own_url, examples_url, example_id = stores
    new_id = runs.open_run("another", {"task": "review"})
    assert runs.save_cell(new_id, _cell("m2", "new")) and runs.finished_keys(new_id) == {_cell("m2", "").key}
    runs.set_status(new_id, "finished")
    assert storage.get_run_by_name("another", url=own_url).status == "finished"
    assert storage.get_run_by_name("another", url=examples_url) is None
    shown = EXAMPLE_IDS_FROM + example_id
    for write in (
        lambda: runs.save_cell(shown, _cell("e2", "x")),
        lambda: runs.set_status(shown, "failed", "x"),
        lambda: runs.finished_keys(shown),
    ):
        with pytest.raises(ExampleRunsAreReadOnly, match="is an example that ships with the app: it is read-only"):
            write()
    assert storage.get_run(example_id, url=examples_url).status == "pending"
    assert [cell.record_id for cell in storage.run_cells(example_id, url=examples_url)] == ["e1"]


def test_the_service_reads_an_example_as_any_stored_run(stores):
    runs, own_url, _, example_id = stores
    service = AppService(store=storage.SqlGenerationStore(own_url), runs=runs)
    shown = EXAMPLE_IDS_FROM + example_id
    assert [run.name for run in service.stored_runs()] == ["my-grid", "example-grid"]
    results = service.run_results(shown)
    assert results is not None and results.run.example and [c.record_id for c in results.cells] == ["e1"]
    assert service.stored_run(shown).name == "example-grid"
