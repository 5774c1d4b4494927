"""A campaign from a stored evaluation run's outputs (``specsteer.service.campaign_import``, ``specsteer campaign
create --from-run``): the comparisons are the run's cells, no model is loaded, errors say what is wrong and
store nothing, and the Dashboard's "campaign beside run" view matches it to its run.

Two tiny runs are computed once for the module on the bundled review sample (3 records, 3 new tokens): "dev"
(every cell: SLM+, LLM, SpecSteer at α 0.1 and 1) and "part" (shard 0/2 only: records 0 and 2)."""

from __future__ import annotations

import json

import pytest

import storage
from specsteer.data.datasets import load_task_records
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation.grid import EvalSpec, run_grid
from specsteer.models.tiny import TEST_PAIRING_ID, tiny_pair
from specsteer.service.app_service import AppService
from specsteer.service.campaign_import import RunCampaignRequest, create_from_run
from specsteer.service.campaign_values import CampaignError, CampaignGenerated
from specsteer.service.campaigns import CampaignService
from specsteer.service.evaluation import EvaluationService
from specsteer.service.events import Failed
from specsteer.service.generation import GenerationService
from specsteer.service.pair_catalog import PairCatalog
from specsteer.service.pair_loading import PairLoader
from specsteer.stores.runs import GridPoint

SAMPLE = str(bundled_sample_path("review").resolve())
SPEC = EvalSpec(
    data=SAMPLE,
    task="review",
    methods=("slm+", "llm", "specsteer"),
    alphas=(0.1, 1.0),
    betas=(1.0,),
    limit=3,
    max_new_tokens=3,
    retrieval_k=1,
    pairing=TEST_PAIRING_ID,
)


def make_service(url: str) -> CampaignService:
    app = AppService(storage.SqlGenerationStore(url), storage.SqlRunStore(url), PairCatalog())
    return app.campaigns(storage.SqlCampaignStore(url))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    storage.reset_engines()
    url = f"sqlite:///{tmp_path_factory.mktemp('from-run') / 'runs.db'}"
    pair, runs = tiny_pair(), storage.SqlRunStore(url)
    dev = run_grid(EvalSpec(**{**SPEC.__dict__, "run_name": "dev"}), runs, pair=pair)
    part = run_grid(EvalSpec(**{**SPEC.__dict__, "run_name": "part"}), runs, pair=pair, shard=(0, 2))
    assert (dev.status, len(dev.cells), len(part.cells)) == ("finished", 12, 8)
    yield url, dev.run_id, part.run_id
    storage.reset_engines()


@pytest.fixture(autouse=True)
def no_models(monkeypatch):
    """Any attempt to load or run a model fails the test."""
    from specsteer.models import loading, tiny

    def refuse(*_args, **_kwargs):
        raise AssertionError("a campaign from a run must not load or run a model")

    monkeypatch.setattr(loading, "load_pair", refuse)
    monkeypatch.setattr(tiny, "shared_tiny_pair", refuse)
    monkeypatch.setattr(tiny, "tiny_pair", refuse)
    monkeypatch.setattr(PairCatalog, "load", refuse)
    for owner, name in (
        (PairLoader, "load"),
        (PairLoader, "for_settings"),
        (GenerationService, "compare"),
        (GenerationService, "generate"),
        (EvaluationService, "evaluate"),
    ):
        monkeypatch.setattr(owner, name, refuse)


@pytest.fixture
def service(db):
    return make_service(db[0])


def run_records():
    return load_task_records(SAMPLE, "review", limit=3)


def cells_at(service, run_id, point):
    return {cell.record_id: cell for cell in service.runs.cells(run_id) if cell.point == point}


def test_the_comparisons_are_the_run_cells_outputs_ready_at_once(service, db):
    created = create_from_run(service, RunCampaignRequest("dev-a01", "dev", alpha=0.1, annotators=("ann",)))
    campaign = created.campaign
    assert (campaign.status, campaign.ready, campaign.planned) == ("ready", 3, 3)
    assert campaign.methods == ("slm+", "llm", "specsteer")
    assert (campaign.settings["alpha"], campaign.settings["beta"], campaign.settings["max_new_tokens"]) == (0.1, 1, 3)
    assert (campaign.settings["retrieval_k"], campaign.data["path"]) == (1, SAMPLE)
    records = run_records()
    items = service.store.items(campaign.id)
    assert [(item.position, item.record_key) for item in items] == [(i, r.id) for i, r in enumerate(records)]
    points = [GridPoint("slm+"), GridPoint("llm"), GridPoint("specsteer", 0.1, 1.0)]
    by_point = {point.method: cells_at(service, db[1], point) for point in points}
    for item, record in zip(items, records, strict=True):
        comparison = service.comparisons.comparison(item.comparison_id)
        assert comparison.input_text == record.input and comparison.task == "review"
        for output in comparison.outputs:
            cell = by_point[output.method][record.id]
            assert output.text == cell.output
            assert output.stats.new_tokens == cell.stats.new_tokens
    status = service.status("dev-a01")
    assert "'dev'" in status.source and "α=0.1 β=1" in status.source
    # annotators join with the code issued and judge at once
    seat = service.join("dev-a01", "ann", created.codes["ann"])
    view = service.view(seat, 0)
    saved = service.save(seat, view, "A")
    assert saved.preferred_method == view.slots[0].method
    report = service.report("dev-a01", resamples=20)
    assert report.report.judgements == 1
    assert report.sources and "evaluation run 'dev'" in report.sources[0]


def test_generate_on_such_a_campaign_generates_nothing(service):
    create_from_run(service, RunCampaignRequest("dev-gen", "dev", methods=("slm+", "llm"), limit=2))
    events = list(service.generate("dev-gen"))
    assert len(events) == 1 and isinstance(events[0], CampaignGenerated)
    assert (events[0].status, events[0].ready, events[0].generated) == ("ready", 2, 0)


def test_the_first_complete_records_in_the_runs_order(service, db):
    created = create_from_run(service, RunCampaignRequest("part-2", "part", methods=("slm+", "llm"), limit=2))
    records = run_records()
    items = service.store.items(created.campaign.id)
    assert [(item.position, item.record_key) for item in items] == [(0, records[0].id), (2, records[2].id)]
    assert created.campaign.data["limit"] == 2 and created.campaign.settings["alpha"] == 0.1  # none read: default


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (RunCampaignRequest("x", "nope"), "no stored evaluation run named 'nope'"),
        (RunCampaignRequest("x", "dev"), r"α = 0\.1, 1 for SpecSteer: choose the alpha"),
        (RunCampaignRequest("x", "dev", alpha=0.3), r"no SpecSteer cell at specsteer a=0\.3 b=1; its settings are"),
        (RunCampaignRequest("x", "dev", alpha=0.1, beta=2.0), "no SpecSteer cell at specsteer a=0.1 b=2"),
        (RunCampaignRequest("x", "dev", methods=("slm+", "sd")), "The run has no sd cells; its methods are"),
        (RunCampaignRequest("x", "dev", methods=("slm+", "llm"), alpha=0.1), "None of the methods chosen reads α"),
        (RunCampaignRequest("x", "dev", methods=("slm+",)), "at least two methods"),
        (RunCampaignRequest("x", "dev", methods=("slm+", "llm"), limit=4), "has 3 of its 3 records .* 4 asked for"),
        (RunCampaignRequest("x", "part", methods=("slm+", "llm"), limit=3), "has 2 of its 3 records .* 3 asked for"),
        (RunCampaignRequest("x", "dev", methods=("slm+", "llm"), limit=0), "number of records is 1 to"),
        (RunCampaignRequest("<b>", "dev", methods=("slm+", "llm")), "may hold letters"),
    ],
)
def test_what_does_not_fit_is_refused_and_stores_nothing(service, request_, message):
    before = [campaign.name for campaign in service.campaigns()]
    with pytest.raises(CampaignError, match=message):
        create_from_run(service, request_)
    assert [campaign.name for campaign in service.campaigns()] == before


def test_a_store_failure_midway_leaves_the_campaign_failed(service, monkeypatch):
    calls = []
    save = service.comparisons.save_comparison

    def fail_second(comparison):
        calls.append(comparison)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        return save(comparison)

    monkeypatch.setattr(service.comparisons, "save_comparison", fail_second)
    with pytest.raises(CampaignError, match="disk full"):
        create_from_run(service, RunCampaignRequest("broken", "dev", methods=("slm+", "llm")))
    campaign = service.campaign("broken")
    assert (campaign.status, campaign.ready, campaign.planned) == ("failed", 1, 3)
    events = list(service.generate("broken"))
    assert len(events) == 1 and isinstance(events[0], Failed) and "stopped at 1 of 3" in events[0].message


def test_the_cli_creates_it_and_refuses_generation_options(db, capsys):
    from specsteer.cli import main

    url = db[0]
    args = ["campaign", "create", "--from-run", "dev", "--database", url, "--json"]
    assert main([*args, "--name", "cli-a1", "--alpha", "1", "--limit", "2", "--annotators", "ann,bob"]) == 0
    captured = capsys.readouterr()
    status = json.loads(captured.out)
    assert (status["status"], status["ready"], status["planned"]) == ("ready", 2, 2)
    assert status["methods"] == ["slm+", "llm", "specsteer"] and "α=1 β=1" in status["source"]
    assert sorted(status["codes"]) == ["ann", "bob"] and "join code for ann" in captured.err
    at_one = cells_at(make_service(url), db[1], GridPoint("specsteer", 1.0, 1.0))
    store = storage.SqlGenerationStore(url)
    for item in storage.SqlCampaignStore(url).items(storage.SqlCampaignStore(url).campaign("cli-a1").id):
        outputs = {output.method: output.text for output in store.comparison(item.comparison_id).outputs}
        assert outputs["specsteer"] == at_one[item.record_key].output
    assert main(["campaign", "leaderboard", "cli-a1", "--database", url]) == 0
    assert "evaluation run 'dev'" in capsys.readouterr().out
    refused = [
        (["--task", "review"], "leave out --task"),
        (["--max-new-tokens", "5", "--no-generate"], "leave out --max-new-tokens, --no-generate"),
        (["--data", "sample", "--shard", "0/2"], "leave out --data, --shard"),
        (["--alpha", "0.3"], "no SpecSteer cell at specsteer a=0.3 b=1"),
    ]
    for extra, message in refused:
        assert main([*args, "--name", "cli-no", *extra]) == 2
        assert message in capsys.readouterr().err
    assert main(["campaign", "create", "--name", "cli-no", "--database", url]) == 2
    assert "needs --task and --data (or --from-run RUN)" in capsys.readouterr().err
    assert "cli-no" not in [campaign.name for campaign in make_service(url).campaigns()]


def test_beside_run_shows_it_beside_its_own_run_only(service, db):
    from ui.campaign_beside_run import beside_html

    create_from_run(service, RunCampaignRequest("beside-dev", "dev", alpha=1.0, limit=1))
    create_from_run(service, RunCampaignRequest("beside-part", "part", methods=("slm+", "llm"), limit=1))
    dev, part = db[1], db[2]
    # both runs read the same records file: the match is by the run each campaign names
    beside_dev = {name for report in service.beside_run(dev) for name in report.campaigns}
    beside_part = {name for report in service.beside_run(part) for name in report.campaigns}
    assert "beside-dev" in beside_dev and "beside-dev" not in beside_part
    assert "beside-part" in beside_part and "beside-part" not in beside_dev
    html = beside_html(service, [dev])
    assert "Leaderboard · beside-dev" in html and "evaluation run &#x27;dev&#x27;" in html
    assert "Leaderboard · beside-part" not in html
