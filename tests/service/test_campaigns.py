"""Annotation campaigns on the tiny pair: storage, the campaign service, the ``specsteer campaign`` command.

One campaign is generated once for the module on each database, SQLite and PostgreSQL (2 records x 3 methods,
a few tokens each); the tests judge it through the service as several annotators and read the leaderboard,
agreement and export back."""

from __future__ import annotations

import csv
import hashlib
import json
import threading
from dataclasses import replace

import pytest

import storage
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
from specsteer.protocol.exposure import Exposure
from specsteer.service.app_service import AppService
from specsteer.service.campaign_checks import MAX_RATIONALE_CHARS, annotator_order
from specsteer.service.campaign_values import CampaignError, CampaignGenerated, CampaignProgress, CampaignRequest
from specsteer.service.campaigns import CampaignService
from specsteer.service.events import ExportRefused
from specsteer.service.join_codes import FAILURES_PER_CAMPAIGN
from specsteer.service.pair_catalog import PairCatalog

SETTINGS = {"pairing": TEST_PAIRING_ID, "max_new_tokens": 4, "alpha": 0.1}
METHODS = ("slm+", "llm", "specsteer")


def make_app(url: str, exposure: Exposure | None = None) -> AppService:
    return AppService(
        storage.SqlGenerationStore(url),
        storage.SqlRunStore(url),
        PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
        exposure=exposure,
    )


def make_service(url: str, exposure: Exposure | None = None) -> CampaignService:
    return make_app(url, exposure).campaigns(storage.SqlCampaignStore(url))


@pytest.fixture(scope="module")
def db(module_db_url):
    """The campaign "study", generated once per database (SQLite, PostgreSQL): (its URL, the join codes)."""
    service = make_service(module_db_url)
    created = service.create(
        CampaignRequest("study", "review", "sample", METHODS, SETTINGS, limit=2, annotators=("ann", "bob", "cy"))
    )
    events = list(service.generate("study"))
    assert isinstance(events[-1], CampaignGenerated) and events[-1].status == "ready", events[-1]
    return module_db_url, dict(created.codes)


@pytest.fixture
def service(db):
    return make_service(db[0])


def seat(service, codes, name):
    return service.join("study", name, codes[name])


def test_the_campaign_is_ready_with_one_comparison_per_record(service):
    status = service.status("study")
    assert (status.campaign.ready, status.campaign.planned, status.campaign.status) == (2, 2, "ready")
    assert not status.campaign.open_to_anyone
    items = service.store.items(status.campaign.id)
    assert [item.position for item in items] == [0, 1]
    for item in items:
        assert sorted(service.comparisons.comparison(item.comparison_id).methods) == sorted(METHODS)


def test_joining_needs_the_code_given_to_the_name(service, db):
    codes = db[1]
    assert seat(service, codes, "ann").annotator == "ann"
    with pytest.raises(CampaignError, match="join code"):
        service.join("study", "ann", codes["bob"])
    with pytest.raises(CampaignError, match="ask for your join code"):
        service.join("study", "mallory", "")
    with pytest.raises(CampaignError, match="no campaign"):
        service.join("nope", "ann", codes["ann"])
    with pytest.raises(CampaignError, match="letters, digits"):
        service.join("study", "<b>ann</b>", codes["ann"])


def test_each_annotator_has_a_deterministic_blind_order(service, db):
    ann, bob = seat(service, db[1], "ann"), seat(service, db[1], "bob")
    first, again = service.view(ann, 0), service.view(ann, 0)
    assert first.comparison_id == again.comparison_id
    assert [o.method for o in first.slots] == [o.method for o in again.slots]
    assert sorted(o.method for o in first.slots) == sorted(METHODS)
    # Orders depend on the annotator: over many names the first slot is not always the same method.
    firsts = {service._shown(replace(ann, annotator=f"a{i}"), first.comparison_id)[1][0].method for i in range(30)}
    assert len(firsts) > 1
    assert sorted(annotator_order(1, "ann", [5, 6, 7])) == [5, 6, 7]
    assert service.view(bob, 0).total == 2


def test_a_second_save_replaces_the_first_and_others_never_see_it(service, db):
    cy, bob = seat(service, db[1], "cy"), seat(service, db[1], "bob")
    view = service.view(cy, 0)
    first = service.save(cy, view, "A", {"A": {"fluency": 4}}, "fine", now=view.shown_at + 3)
    second = service.save(cy, view, "B", {}, "better", now=view.shown_at + 5)
    again = service.save(cy, view, "B", {}, "better", now=view.shown_at + 5)  # a double click
    assert first.id == second.id == again.id and again.saves == 3
    own = service.store.judgements(cy.campaign_id, cy.annotator_id)
    assert len(own) == 1 and own[0].preference == "B" and own[0].seconds == 5.0
    assert own[0].preferred_method == view.slots[1].method
    bobs_view = service.view(bob, [service.view(bob, p).comparison_id for p in range(2)].index(view.comparison_id))
    assert bobs_view.previous is None  # bob does not see cy's judgement
    assert service.view(cy, view.position).previous.rationale == "better"


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(preference="Z"), "Choose the preferred output"),
        (dict(preference="<script>"), "Choose the preferred output"),
        (dict(rationale="x" * (MAX_RATIONALE_CHARS + 1)), "limit"),
        (dict(rationale="y" * 1_000_000), "limit"),
        (dict(rationale="see <img src=x onerror=alert(1)>"), "plain text"),
        (dict(ratings={"A": {"fluency": 9}}), "whole number"),
        (dict(ratings={"Q": {"fluency": 3}}), "no output"),
        (dict(ratings={"A": {"charm": 3}}), "Unknown rating"),
    ],
)
def test_bad_input_is_refused_and_saves_nothing(service, db, change, message):
    ann = seat(service, db[1], "ann")
    view = service.view(ann, 1)
    before = service.store.judgements(None)
    arguments = dict(preference="A", ratings={}, rationale="")
    arguments.update(change)
    with pytest.raises(CampaignError, match=message):
        service.save(ann, view, arguments["preference"], arguments["ratings"], arguments["rationale"])
    assert service.store.judgements(None) == before


def test_a_comparison_of_another_campaign_or_order_is_refused(service, db):
    ann = seat(service, db[1], "ann")
    view = service.view(ann, 0)
    with pytest.raises(CampaignError, match="not part of this campaign"):
        service.save(ann, replace(view, comparison_id=view.comparison_id + 1000), "A")
    with pytest.raises(CampaignError, match="order"):
        service.save(ann, replace(view, slots=tuple(reversed(view.slots))), "A")
    with pytest.raises(CampaignError):
        service.save(replace(ann, campaign="other"), view, "A")


def test_leaderboard_position_bias_agreement_and_times(service, db):
    """Every annotator prefers specsteer: it ranks first; agreement and median times are read back."""
    for name, seconds in (("ann", 2.0), ("bob", 4.0), ("cy", 6.0)):
        annotator = seat(service, db[1], name)
        for position in range(2):
            view = service.view(annotator, position)
            label = view.labels[[o.method for o in view.slots].index("specsteer")]
            service.save(annotator, view, label, {label: {"fluency": 5}}, "", now=view.shown_at + seconds)
    report = service.report("study", resamples=200).report
    board = report.leaderboard
    assert board.rows[0].method == "specsteer" and board.rows[0].rank == 1
    assert all(row.strength is not None and row.lower <= row.strength <= row.upper for row in board.rows)
    assert report.judgements == 6 and report.comparisons == 2
    assert report.agreement.comparisons == 2 and report.agreement.percent_agreement == 1.0
    assert sum(slot.wins for slot in report.position_bias.slots) == 6
    assert {a.annotator: a.median_seconds for a in report.annotators} == {"ann": 2.0, "bob": 4.0, "cy": 6.0}
    assert service.report(None).campaigns == ("study",)


def test_export_holds_every_field_with_formulas_neutralised(service, db, tmp_path):
    ann = seat(service, db[1], "ann")
    view = service.view(ann, 0)
    service.save(ann, view, "tie", {}, "=HYPERLINK(1)", now=view.shown_at + 1.5)
    exported = service.export("csv", "study")
    rows = list(csv.DictReader(exported.path.open(encoding="utf-8")))
    assert {row["annotator"] for row in rows} >= {"ann", "bob", "cy"}
    mine = [row for row in rows if row["annotator"] == "ann" and row["comparison_id"] == str(view.comparison_id)]
    assert mine[0]["rationale"] == "'=HYPERLINK(1)" and mine[0]["seconds"] == "1.5" and mine[0]["preference"] == "tie"
    assert {"slot_order", "output:A", "input_text", "rating:specsteer:fluency", "saves"} <= set(rows[0])
    lines = service.export("jsonl", "study").path.read_text(encoding="utf-8").splitlines()
    assert any(json.loads(line)["rationale"] == "=HYPERLINK(1)" for line in lines)


def test_public_app_needs_the_token_to_create_and_export_not_to_judge(db):
    app = make_app(db[0], Exposure(public=True, admin_token="op-secret"))
    public = app.campaigns(storage.SqlCampaignStore(db[0]))
    request = CampaignRequest("pub", "review", "sample", METHODS, SETTINGS, limit=1)
    with pytest.raises(ExportRefused):
        public.create(request, token="")
    with pytest.raises(ExportRefused):
        public.export("csv", "study", token="wrong")
    assert public.export("jsonl", "study", token="op-secret").count >= 6
    ann = public.join("study", "ann", db[1]["ann"])
    view = public.view(ann, 1)
    assert public.save(ann, view, "all_good").preference == "all_good"


def test_in_public_a_wrong_token_refuses_the_create_before_the_upload_is_read(db, tmp_path, monkeypatch):
    """The panel's create checks the operator's token first: a refused call opens and parses nothing."""
    from specsteer.service import evaluation
    from ui.campaign_handlers import CampaignHandlers

    app = make_app(db[0], Exposure(public=True, admin_token="op-secret"))
    public = app.campaigns(storage.SqlCampaignStore(db[0]))
    upload = tmp_path / "records.jsonl"
    upload.write_bytes(b"x" * 1024)
    touched: list[object] = []
    monkeypatch.setattr(app, "keep_records", lambda *args: touched.append(args))
    monkeypatch.setattr(evaluation, "load_records", lambda *args, **kwargs: touched.append(args))
    real_open = type(upload).open
    monkeypatch.setattr(type(upload), "open", lambda path, *a, **k: touched.append(path) or real_open(path, *a, **k))

    def create(token, upload_path):
        form = dict(name="from-upload", task="review", data="upload", limit=1, methods=["llm", "specsteer"])
        settings = dict(pairing=TEST_PAIRING_ID, runtime="auto", alpha=0.1, beta=1.0, max_new_tokens=4)
        return CampaignHandlers(public, app).create(
            **form, **settings, upload=str(upload_path), run=None, annotators="", open_to_anyone=False, token=token
        )

    for token in ("", "wrong", "op-secret "):
        shown, _choices, created = create(token, upload)
        assert "needs the operator" in shown and "Creating a campaign" in shown and created == ""
    shown, _choices, created = create("wrong", tmp_path / "no-such-file.jsonl")  # not even its size is read
    assert "needs the operator" in shown
    assert touched == []
    assert "from-upload" not in [campaign.name for campaign in public.campaigns()]


def test_join_codes_are_128_bits_and_stored_salted(service, db):
    codes = db[1]
    study = service.campaign("study")
    for name, code in codes.items():
        assert len(code) >= 22  # token_urlsafe(16): 128 bits
        stored = service.store.annotator(study.id, name).code_hash
        assert stored.startswith("s1$") and len(stored) <= 64 and code not in stored
        assert hashlib.sha256(code.encode()).hexdigest() != stored


def test_a_code_stored_unsalted_still_joins_and_is_stored_salted_after(service, db):
    """Codes issued by an earlier version (48 bits, a bare SHA-256) keep working; the first join re-stores them."""
    study = service.campaign("study")
    old_code = "Ab3_xY9z"  # what token_urlsafe(6) gave
    dee = service.store.add_annotator(study.id, "dee", hashlib.sha256(old_code.encode()).hexdigest())
    with pytest.raises(CampaignError, match="join code"):
        service.join("study", "dee", "Ab3_xY9Z")
    assert service.store.annotator(study.id, "dee").code_hash == hashlib.sha256(old_code.encode()).hexdigest()
    assert service.join("study", "dee", f" {old_code} ").annotator_id == dee.id
    restored = service.store.annotator(study.id, "dee").code_hash
    assert restored.startswith("s1$") and old_code not in restored
    assert service.join("study", "dee", old_code).annotator_id == dee.id


def test_failed_joins_are_limited_per_client_and_campaign(service, db):
    codes = db[1]
    for _attempt in range(FAILURES_PER_CAMPAIGN):
        with pytest.raises(CampaignError, match="not the one issued"):
            service.join("study", "ann", "guess", client="203.0.113.7")
    with pytest.raises(
        CampaignError, match=r"Too many failed joins at this campaign from your address: try again in 15"
    ):
        service.join("study", "ann", codes["ann"], client="203.0.113.7")  # the right code too, while it lasts
    with pytest.raises(CampaignError, match="Too many failed joins"):
        service.join("study", "mallory", "", client="203.0.113.7")
    assert service.join("study", "ann", codes["ann"], client="203.0.113.8").annotator == "ann"  # another client


def test_create_refuses_bad_requests(service):
    bad = [
        (CampaignRequest("study", "review", "sample", METHODS, SETTINGS, limit=1), "already"),
        (CampaignRequest("x" * 65, "review", "sample", METHODS, SETTINGS, limit=1), "limit"),
        (CampaignRequest("c", "review", "sample", ("llm+", "llm"), SETTINGS, limit=1), "not llm\\+"),
        (CampaignRequest("c", "review", "sample", ("llm",), SETTINGS, limit=1), "two methods"),
        (CampaignRequest("c", "review", "sample", METHODS, SETTINGS, limit=100000), "records"),
        (CampaignRequest("c", "review", "/etc/passwd-nope", METHODS, SETTINGS, limit=1), "gone"),
        (CampaignRequest("c", "nope", "sample", METHODS, SETTINGS, limit=1), "task"),
        (CampaignRequest("c", "review", "sample", METHODS, {**SETTINGS, "pairing": "nope"}, limit=1), "pairing"),
    ]
    for request, message in bad:
        with pytest.raises(ValueError, match=message):
            service.create(request)
    assert [campaign.name for campaign in service.campaigns()] == ["study"]


def test_a_stopped_campaign_resumes_without_duplicates_and_shards_share_it(url):
    service = make_service(url)
    service.create(CampaignRequest("r", "review", "sample", ("llm", "slm+"), SETTINGS, limit=3))
    cancel = threading.Event()
    for event in service.generate("r", cancel):
        if isinstance(event, CampaignProgress):
            cancel.set()  # stop after the first record
    status = service.status("r").campaign
    assert (status.ready, status.status) == (1, "stopped")
    shards = [list(service.generate("r", shard=(index, 2))) for index in (0, 1)]
    assert shards[0][-1].status == "preparing" and shards[1][-1].status == "ready"
    items = service.store.items(status.id)
    assert [item.position for item in items] == [0, 1, 2]
    assert len({item.comparison_id for item in items}) == 3
    assert list(service.generate("r"))[-1].generated == 0  # nothing left: nothing generated twice


def test_cli_create_status_leaderboard_export(tmp_path, capsys, fresh_engines):
    from specsteer.cli import main

    database = f"sqlite:///{tmp_path / 'cli.db'}"
    args = ["--pairing", TEST_PAIRING_ID, "--data", "sample", "--task", "review", "--limit", "2"]
    args += ["--methods", "slm+,llm,specsteer", "--name", "c1", "--max-new-tokens", "4", "--database", database]
    assert main(["campaign", "create", *args, "--json"]) == 0
    capsys.readouterr()
    assert main(["campaign", "status", "c1", "--json", "--database", database]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["ready"], status["planned"], status["status"]) == (2, 2, "ready")
    assert main(["campaign", "leaderboard", "c1", "--json", "--database", database]) == 0
    board = json.loads(capsys.readouterr().out)
    rows = board["leaderboard"]["rows"]
    assert sorted(row["method"] for row in rows) == ["llm", "slm+", "specsteer"]
    assert all({"strength", "lower", "upper"} <= set(row) and row["strength"] is None for row in rows)
    assert main(["campaign", "status", "nope", "--database", database]) == 2
    output = tmp_path / "out.csv"
    assert main(["campaign", "export", "c1", "--format", "csv", "--output", str(output), "--database", database]) == 0
    assert "written: 0" in capsys.readouterr().out


def test_a_campaigns_leaderboard_beside_a_run_of_the_same_records(service, db):
    from specsteer.data.sources import bundled_sample_path
    from ui.campaign_beside_run import beside_html

    sample = str(bundled_sample_path("review").resolve())
    same = storage.create_run("same-records", {"data": sample, "task": "review", "limit": 2}, url=db[0])
    other = storage.create_run("other-records", {"data": sample, "task": "writing"}, url=db[0])
    assert [report.campaigns for report in service.beside_run(same)] == [("study",)]
    assert service.beside_run(other) == []
    with pytest.raises(CampaignError, match="no stored run"):
        service.beside_run(10**20)
    assert "Leaderboard · study" in beside_html(service, [same])
    assert "No annotation campaign" in beside_html(service, [other])


def test_an_open_campaign_takes_names_up_to_its_bound(url, monkeypatch):
    from specsteer.service import campaigns

    service = make_service(url)
    service.create(CampaignRequest("open", "review", "sample", ("llm", "slm+"), SETTINGS, limit=1))
    list(service.generate("open"))
    monkeypatch.setattr(campaigns, "MAX_OPEN_ANNOTATORS", 2)
    first, second = service.join("open", "x1"), service.join("open", "x2")
    assert service.join("open", "x1") == first and first != second  # the same name is the same seat
    with pytest.raises(CampaignError, match="no more"):
        service.join("open", "x3")
    assert service.report("open").open_to_anyone


def test_two_saves_at_once_store_one_judgement(service, db):
    """Two tabs (or a double click) saving the same judgement at the same moment: one row, both saves counted."""
    from concurrent.futures import ThreadPoolExecutor

    bob = seat(service, db[1], "bob")
    view = service.view(bob, 1)
    before = service.store.judgements(bob.campaign_id, bob.annotator_id)
    start = threading.Barrier(4)

    def save(choice):
        start.wait()
        return service.save(bob, view, choice, {}, "").id

    with ThreadPoolExecutor(4) as pool:
        ids = set(pool.map(save, ["A", "B", "tie", "A"]))
    after = service.store.judgements(bob.campaign_id, bob.annotator_id)
    mine = [j for j in after if j.comparison_id == view.comparison_id]
    assert len(ids) == 1 and len(mine) == 1
    assert len(after) == len(before) + (0 if any(j.comparison_id == view.comparison_id for j in before) else 1)
    previous = next((j.saves for j in before if j.comparison_id == view.comparison_id), 0)
    assert mine[0].saves == previous + 4


@pytest.mark.parametrize("limit, tokens", [(float("inf"), 4), (2, float("nan")), ("many", 4), (1.5, 4), (10**30, 4)])
def test_the_panel_refuses_numbers_that_are_not_whole(db, limit, tokens):
    from ui.campaign_handlers import CampaignHandlers

    app = make_app(db[0])
    service = app.campaigns(storage.SqlCampaignStore(db[0]))
    shown, _choices, created = CampaignHandlers(service, app).create(
        name="numbers",
        task="review",
        data="sample",
        upload=None,
        run=None,
        limit=limit,
        methods=["llm", "specsteer"],
        pairing=TEST_PAIRING_ID,
        runtime="auto",
        alpha=0.1,
        beta=1.0,
        max_new_tokens=tokens,
        annotators="",
        open_to_anyone=False,
        token="",
    )
    assert "ss-box-error" in shown and created == ""
    assert "numbers" not in [campaign.name for campaign in service.campaigns()]


ANNOTATORS_AT_ONCE = 50


def test_fifty_annotators_judging_at_once_store_every_judgement_once(db_url):
    """50 people join an open campaign and judge both of its comparisons at the same moment, each in a thread
    of its own (its own seat, its own sessions): every judgement is stored, none twice."""
    from concurrent.futures import ThreadPoolExecutor

    service = make_service(db_url)
    service.create(CampaignRequest("crowd", "review", "sample", ("llm", "slm+"), SETTINGS, limit=2))
    assert list(service.generate("crowd"))[-1].status == "ready"
    start = threading.Barrier(ANNOTATORS_AT_ONCE)

    def judge(name: str) -> list[int]:
        start.wait()
        seat = service.join("crowd", name)
        saved = []
        for position in range(2):
            view = service.view(seat, position)
            saved.append(service.save(seat, view, "A", {"A": {"fluency": 4}}, f"{name} at {position}").id)
        return saved

    names = [f"annotator{number:02d}" for number in range(ANNOTATORS_AT_ONCE)]
    with ThreadPoolExecutor(ANNOTATORS_AT_ONCE) as pool:
        ids = [judgement_id for saved in pool.map(judge, names) for judgement_id in saved]
    campaign = service.campaign("crowd")
    stored = service.store.judgements(campaign.id)
    pairs = {(judgement.annotator, judgement.comparison_id) for judgement in stored}
    print(
        f"{storage.get_engine(db_url).dialect.name}: {ANNOTATORS_AT_ONCE} annotators x 2 comparisons at once: "
        f"{len(stored)} judgements stored, {len(pairs)} distinct (annotator, comparison), "
        f"{service.store.annotator_count(campaign.id)} annotators"
    )
    assert len(ids) == len(set(ids)) == len(stored) == len(pairs) == 2 * ANNOTATORS_AT_ONCE
    assert {judgement.annotator for judgement in stored} == set(names)
    assert all(judgement.saves == 1 for judgement in stored)
    assert {judgement.rationale for judgement in stored} == {f"{name} at {p}" for name in names for p in range(2)}
    assert service.store.annotator_count(campaign.id) == ANNOTATORS_AT_ONCE


def test_near_identical_outputs_are_counted_and_never_queued(url):
    """Standard SD reproduces LLM's greedy output token for token: a campaign of the two asks no one anything,
    and says so; one of outputs that differ is queued as before."""
    service = make_service(url)
    service.create(CampaignRequest("alike", "review", "sample", ("llm", "sd"), SETTINGS, limit=2, open_to_anyone=True))
    assert list(service.generate("alike"))[-1].status == "ready"
    items = service.store.items(service.campaign("alike").id)
    assert [item.similarity for item in items] == [1.0, 1.0]
    assert service.status("alike").near_identical == 2
    seat = service.join("alike", "ann")
    with pytest.raises(CampaignError, match="outputs of all 2 ready so far are near-identical"):
        service.view(seat, 0)
    report = service.report("alike", resamples=50)
    assert (report.to_judge, report.near_identical) == (0, 2)
    differing = make_service(url)
    differing.create(CampaignRequest("apart", "review", "sample", ("llm", "specsteer"), SETTINGS, limit=1))
    list(differing.generate("apart"))
    (item,) = differing.store.items(differing.campaign("apart").id)
    assert item.similarity is not None and item.similarity < 0.95
    assert differing.report("apart", resamples=50).to_judge == 1
