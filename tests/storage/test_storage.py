"""Tests of storage/: engine settings, every table's round trip, validation, exports,
annotation statistics, resumable evaluation runs, and concurrent writers; on SQLite and on PostgreSQL
(``db_url``) except where a test is about SQLite itself."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError, OperationalError

import storage
from specsteer.evaluation.metrics import ROUGE_KEYS
from specsteer.method.events import GenerationStats, LinkMessage, TokenEvent
from specsteer.stores.campaigns import NewCampaign, NewCampaignJudgement
from specsteer.stores.generations import Judgement
from specsteer.stores.runs import CellResult, GridPoint, cell_key
from storage import db, exports
from storage.histories import history_sha256
from storage.models import Base, Comparison, ComparisonOutput, Generation

TABLES = {
    "histories",
    "generations",
    "comparisons",
    "comparison_outputs",
    "annotations",
    "annotation_pages",
    "eval_runs",
    "eval_cells",
}


pytestmark = pytest.mark.usefixtures("fresh_engines")


def _generation(url: str, method: str, text: str = "output", task: str = "review") -> int:
    return storage.save_generation(method=method, task=task, input_text="Write a review.", text=text, url=url)


def _comparison(url: str, methods: tuple[str, ...] = ("specsteer", "llm", "slm+"), blind: bool = True) -> int:
    ids = [_generation(url, method, text=f"text of {method}") for method in methods]
    return storage.save_comparison(
        generation_ids=ids, task="review", input_text="Write a review.", pairing="tiny", blind=blind, url=url
    )


# ------------------------------------------------------------------ engine and URL


def test_default_url_is_sqlite_file_in_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("SPECSTEER_DATA_DIR", str(tmp_path / "nested" / "data"))
    url = db.database_url()
    assert url == f"sqlite:///{(tmp_path / 'nested' / 'data' / 'specsteer.db').resolve()}"
    assert (tmp_path / "nested" / "data").is_dir()


def test_database_url_env_wins_and_postgres_urls_name_the_installed_driver(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db.example/specsteer")
    assert db.postgresql_driver() == "psycopg"  # requirements.txt's driver
    assert db.database_url() == "postgresql+psycopg://user:pw@db.example/specsteer"
    assert db.normalise_url("postgresql://db.example/x") == "postgresql+psycopg://db.example/x"
    assert db.normalise_url("postgresql+psycopg2://db.example/x") == "postgresql+psycopg2://db.example/x"
    # Server databases get no SQLite-only arguments (and need no driver to plan this).
    assert db.engine_options(db.database_url()) == {"pool_pre_ping": True}
    monkeypatch.setattr(db.importlib.util, "find_spec", lambda name: None)
    assert (
        db.normalise_url("postgres://db.example/x") == "postgresql://db.example/x"
    )  # SQLAlchemy names what is missing


def test_a_bare_path_names_a_sqlite_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # What people type after --database: a path, not a URL (SQLAlchemy alone rejects it).
    assert db.missing_sqlite_file("results/x.db") == str((tmp_path / "results" / "x.db").resolve())
    (tmp_path / "results").mkdir()
    history_id = storage.save_history(name="h", schema="plain", items=[{"text": "x"}], url="results/x.db")
    assert (tmp_path / "results" / "x.db").is_file()
    assert db.missing_sqlite_file("results/x.db") is None
    same = f"sqlite:///{tmp_path / 'results' / 'x.db'}"
    assert storage.get_history(history_id, url=same)["items"] == [{"text": "x"}]


def test_env_database_url_is_used_by_the_repositories(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    history_id = storage.save_history(name="h", schema="plain", items=[{"text": "x"}])
    assert storage.get_history(history_id)["items"] == [{"text": "x"}]
    assert (tmp_path / "env.db").exists()


def test_engine_is_cached_per_url_across_threads(url):
    engines: list = []
    threads = [threading.Thread(target=lambda: engines.append(db.get_engine(url))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(engine) for engine in engines}) == 1


def test_init_db_creates_all_tables_and_is_idempotent(db_url):
    db.init_db(db_url)
    db.init_db(db_url)
    db.reset_engines()
    engine = db.init_db(db_url)  # a fresh engine on an existing schema
    assert set(inspect(engine).get_table_names()) >= TABLES


def test_pragmas_are_set_on_every_connection(url):
    engine = db.init_db(url)
    # Two connections at once: both must come from the pool with the settings applied.
    with engine.connect() as first, engine.connect() as second:
        for connection in (first, second):
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == db.BUSY_TIMEOUT_MS


def test_in_memory_sqlite_shares_one_database():
    memory = "sqlite://"
    history_id = storage.save_history(name="m", schema="plain", items=[{"text": "x"}], url=memory)
    assert storage.get_history(history_id, url=memory)["name"] == "m"


def test_foreign_key_violations_are_rejected(db_url):
    with pytest.raises(IntegrityError), db.session_scope(db_url) as session:
        session.add(
            Generation(
                history_id=999,
                pairing="",
                method="llm",
                task="review",
                input_text="",
                settings={},
                text="",
                tokens=[],
                stats={},
                transcript=[],
            )
        )
    with pytest.raises(IntegrityError), db.session_scope(db_url) as session:
        comparison = Comparison(task="review", input_text="", pairing="", settings={}, display_order=["llm"])
        comparison.outputs = [ComparisonOutput(slot=0, label="A", generation_id=12345)]
        session.add(comparison)
    with db.session_scope(db_url) as session:
        assert session.execute(text("SELECT COUNT(*) FROM generations")).scalar() == 0


def test_session_scope_rolls_back_on_error(db_url):
    with pytest.raises(RuntimeError), db.session_scope(db_url) as session:
        session.execute(
            text(
                "INSERT INTO eval_runs (name, config, status, created_at, updated_at) "
                "VALUES ('x', '{}', 'pending', '2024-01-01', '2024-01-01')"
            )
        )
        raise RuntimeError("boom")
    assert storage.list_runs(url=db_url) == []


def test_retry_on_locked_reruns_the_unit_of_work():
    calls = []

    @db.retry_on_locked(attempts=4, base_delay=0.001)
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("INSERT ...", {}, sqlite3.OperationalError("database is locked"))
        return "done"

    assert flaky() == "done" and len(calls) == 3

    @db.retry_on_locked(attempts=4, base_delay=0.001)
    def broken() -> None:
        calls.append(1)
        raise OperationalError("SELECT ...", {}, sqlite3.OperationalError("no such table: x"))

    calls.clear()
    with pytest.raises(OperationalError):
        broken()
    assert len(calls) == 1  # other errors are not retried


def test_writer_waits_for_a_lock_held_by_another_process_style_connection(url, tmp_path):
    comparison_id = _comparison(url)
    holder = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # hold the write lock like a long writer elsewhere
    releaser = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    releaser.start()
    started = time.monotonic()
    storage.save_annotation(comparison_id=comparison_id, annotator="ann", preferred="A", url=url)
    assert time.monotonic() - started >= 0.4
    releaser.join()
    holder.close()
    assert len(storage.list_annotations(url=url)) == 1


# ---------------------------------------------------------------------- histories


class _Item:
    """Stands in for specsteer.data.history.HistoryItem (anything with .fields)."""

    def __init__(self, **fields: str) -> None:
        self.fields = fields


def test_history_roundtrip_and_dedupe(db_url):
    items = [{"reviewText": "Great pan.", "summary": "Good"}, {"reviewText": "Too small.", "summary": "Meh"}]
    first = storage.save_history(name="alice.jsonl", schema="review", items=items, user_id="A1", url=db_url)
    again = storage.save_history(
        name="renamed.jsonl", schema="review", items=[_Item(**i) for i in items], user_id="A1", url=db_url
    )
    other_user = storage.save_history(name="b.jsonl", schema="review", items=items, user_id="B2", url=db_url)
    assert again == first and other_user != first
    stored = storage.get_history(first, url=db_url)
    assert stored["items"] == items and stored["item_count"] == 2
    assert stored["name"] == "alice.jsonl" and stored["schema"] == "review" and stored["user_id"] == "A1"
    assert stored["sha256"] == history_sha256("review", "A1", items)
    assert stored["created_at"].tzinfo is not None
    listed = storage.list_histories(url=db_url)
    assert [h["id"] for h in listed] == [other_user, first] and "items" not in listed[0]
    assert storage.get_history(999, url=db_url) is None


# -------------------------------------------------------------------- generations


def test_generation_roundtrip_accepts_engine_dataclasses(db_url):
    history_id = storage.save_history(name="h", schema="plain", items=[{"text": "x"}], url=db_url)
    tokens = [
        TokenEvent(id=5, text="Hel", kind="accepted", round=0, ratio=1.7),
        TokenEvent(id=6, text="lo", kind="rejected", round=0, ratio=float("inf")),
        TokenEvent(id=7, text="lo!", kind="recovered", round=0),
    ]
    stats = GenerationStats(
        method="specsteer",
        new_tokens=2,
        rounds=1,
        drafted=2,
        accepted=1,
        acceptance_rate=0.5,
        forward_calls={"specialist": 2},
        uplink_bytes=40,
    )
    transcript = [LinkMessage(direction="uplink", kind="draft", payload={"ids": (5, 6)}, bytes=16)]
    generation_id = storage.save_generation(
        method="specsteer",
        task="review",
        input_text="Write.",
        text="Hello!",
        pairing="tiny",
        settings={"alpha": 0.1, "beta": 1.0, "draft_len": 4},
        tokens=tokens,
        stats=stats,
        transcript=transcript,
        history_id=history_id,
        url=db_url,
    )
    stored = storage.get_generation(generation_id, url=db_url)
    assert stored["tokens"][0] == {"id": 5, "text": "Hel", "kind": "accepted", "round": 0, "ratio": 1.7}
    assert stored["tokens"][1]["ratio"] is None  # JSON has no Infinity
    assert stored["stats"]["acceptance_rate"] == 0.5 and stored["stats"]["forward_calls"] == {"specialist": 2}
    assert stored["transcript"] == [{"direction": "uplink", "kind": "draft", "bytes": 16, "payload": {"ids": [5, 6]}}]
    assert stored["settings"] == {"alpha": 0.1, "beta": 1.0, "draft_len": 4}
    assert (stored["history_id"], stored["pairing"], stored["text"]) == (history_id, "tiny", "Hello!")
    assert "tokens" not in storage.list_generations(url=db_url)[0]
    assert storage.get_generation(999, url=db_url) is None


# -------------------------------------------------------------------- comparisons


def test_comparison_roundtrip_keeps_the_shown_order(db_url):
    comparison_id = _comparison(db_url, ("slm+", "specsteer", "llm"))
    stored = storage.get_comparison(comparison_id, url=db_url)
    assert stored["display_order"] == ["slm+", "specsteer", "llm"]
    assert stored["labels"] == {"A": "slm+", "B": "specsteer", "C": "llm"}
    assert [o["label"] for o in stored["outputs"]] == ["A", "B", "C"]
    assert stored["outputs"][1]["text"] == "text of specsteer"
    assert stored["blind"] is True and stored["pairing"] == "tiny"
    assert [c["id"] for c in storage.list_comparisons(url=db_url)] == [comparison_id]
    with db.session_scope(db_url) as session:
        assert [g.method for g in session.get(Comparison, comparison_id).generations] == ["slm+", "specsteer", "llm"]


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ("none", "1 to 26"),
        ("unknown", "unknown generation"),
        ("dup-id", "appears twice"),
        ("dup-method", "once per comparison"),
    ],
)
def test_comparison_validation(db_url, ids, message):
    first, second = _generation(db_url, "llm"), _generation(db_url, "llm")
    ids = {"none": [], "unknown": [first, 999], "dup-id": [first, first], "dup-method": [first, second]}[ids]
    with pytest.raises(ValueError, match=message):
        storage.save_comparison(generation_ids=ids, task="review", input_text="x", url=db_url)


# -------------------------------------------------------------------- annotations


def test_annotation_roundtrip_resolves_labels_to_methods(db_url):
    comparison_id = _comparison(db_url)  # A=specsteer, B=llm, C=slm+
    annotation_id = storage.save_annotation(
        comparison_id=comparison_id,
        annotator=" ann1 ",
        preferred="A",
        ratings={"A": {"personalization": 5, "fluency": 4.0}, "llm": {"fluency": 3, "personalization": None}},
        comment="A sounds like me",
        url=db_url,
    ).id
    [stored] = storage.list_annotations(url=db_url)
    assert isinstance(stored, Judgement)
    assert stored.id == annotation_id and stored.annotator == "ann1" and stored.comment == "A sounds like me"
    assert (stored.preferred, stored.preferred_method) == ("A", "specsteer")
    assert stored.ratings == {"specsteer": {"personalization": 5, "fluency": 4}, "llm": {"fluency": 3}}
    assert stored.display_order == ("specsteer", "llm", "slm+") and stored.created_at.tzinfo is not None


def test_annotation_labels_follow_the_order_this_annotator_saw(db_url):
    comparison_id = _comparison(db_url)
    storage.save_annotation(
        comparison_id=comparison_id,
        annotator="ann2",
        preferred="A",
        ratings={"B": {"fluency": 2}},
        display_order=["slm+", "specsteer", "llm"],
        url=db_url,
    )
    [stored] = storage.list_annotations(comparison_id=comparison_id, url=db_url)
    assert stored.preferred_method == "slm+" and stored.ratings == {"specsteer": {"fluency": 2}}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"comparison_id": 999}, "does not exist"),
        ({"annotator": "  "}, "annotator"),
        ({"preferred": "D"}, "preferred 'D'"),
        ({"preferred": "costeer"}, "preferred 'costeer'"),
        ({"preferred": ""}, "preferred"),
        ({"ratings": {"A": {"fluency": 0}}}, "1 to 5"),
        ({"ratings": {"A": {"fluency": 6}}}, "1 to 5"),
        ({"ratings": {"A": {"fluency": 3.5}}}, "whole number"),
        ({"ratings": {"A": {"fluency": True}}}, "whole number"),
        ({"ratings": {"A": {"fluency": "4"}}}, "whole number"),
        ({"ratings": {"A": {"style": 3}}}, "unknown rating criterion"),
        ({"ratings": {"Z": {"fluency": 3}}}, "rated output 'Z'"),
        ({"ratings": {"A": {"fluency": 3}, "specsteer": {"fluency": 4}}}, "rated twice"),
        ({"display_order": ["llm", "specsteer"]}, "exactly the comparison's methods"),
    ],
)
def test_annotation_validation_errors(url, changes, message):
    comparison_id = _comparison(url)
    arguments = {"comparison_id": comparison_id, "annotator": "ann", "preferred": "tie", **changes}
    with pytest.raises(ValueError, match=message):
        storage.save_annotation(url=url, **arguments)
    assert storage.list_annotations(url=url) == []


def test_every_special_preference_is_accepted(db_url):
    comparison_id = _comparison(db_url)
    for choice in ("tie", "all_good", "all_bad", "llm", "C"):
        storage.save_annotation(comparison_id=comparison_id, annotator="ann", preferred=choice, url=db_url)
    assert [a.preferred_method for a in storage.list_annotations(url=db_url)] == [
        "tie",
        "all_good",
        "all_bad",
        "llm",
        "slm+",
    ]


def test_export_rows_csv_and_jsonl(db_url, tmp_path):
    comparison_id = _comparison(db_url)
    storage.save_annotation(
        comparison_id=comparison_id,
        annotator="ann1",
        preferred="B",
        ratings={"B": {"personalization": 4, "fluency": 5}},
        comment="=cmd|' /C calc'!A0",
        url=db_url,
    )
    storage.save_annotation(
        comparison_id=comparison_id,
        annotator="ann2",
        preferred="tie",
        display_order=["llm", "slm+", "specsteer"],
        comment="fine, \"quoted\"\nnewline",
        url=db_url,
    )
    rows = storage.annotations_export_rows(url=db_url)
    assert [r["annotator"] for r in rows] == ["ann1", "ann2"]
    first = rows[0]
    assert first["preferred_method"] == "llm" and first["task"] == "review" and first["comparison_id"] == comparison_id
    assert first["display_order"] == "A=specsteer;B=llm;C=slm+"
    assert first["rating:llm:personalization"] == 4 and first["rating:llm:fluency"] == 5
    assert first["rating:specsteer:fluency"] is None
    assert first["input_text"] == "Write a review." and first["created_at"].endswith("+00:00")
    assert rows[1]["display_order"] == "A=llm;B=slm+;C=specsteer"

    csv_path = tmp_path / "annotations.csv"
    assert storage.write_annotations_csv(rows, csv_path) == 2
    with csv_path.open(encoding="utf-8", newline="") as stream:
        parsed = list(csv.DictReader(stream))
    assert parsed[0]["comment"] == "'=cmd|' /C calc'!A0"  # formula neutralised for spreadsheets
    assert parsed[1]["comment"] == "fine, \"quoted\"\nnewline"
    assert parsed[0]["rating:llm:fluency"] == "5" and parsed[0]["rating:specsteer:fluency"] == ""
    text_buffer = io.StringIO()
    storage.write_annotations_csv(rows, text_buffer)
    header = next(csv.reader(io.StringIO(text_buffer.getvalue())))
    assert header[0] == "annotation_id" and header[-1].startswith("rating:")

    buffer = io.StringIO()
    assert storage.write_annotations_jsonl(rows, buffer) == 2
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert lines[0]["comment"] == "=cmd|' /C calc'!A0"  # JSONL keeps text verbatim
    assert lines[1]["preferred_method"] == "tie" and lines[0]["rating:llm:fluency"] == 5


def test_annotation_summary_from_the_database(db_url):
    comparison_id = _comparison(db_url)
    storage.save_annotation(comparison_id=comparison_id, annotator="a", preferred="A", url=db_url)
    storage.save_annotation(comparison_id=comparison_id, annotator="b", preferred="specsteer", url=db_url)
    summary = storage.annotation_summary(url=db_url)
    assert summary.methods["specsteer"].win_rate == 1 and summary.methods["llm"].win_rate == 0
    assert summary.agreement.percent_agreement == 1
    assert storage.annotation_summary(task="abstract", url=db_url).judgements == 0


def test_a_page_holds_one_judgement_per_comparison_whatever_names_it_types(db_url):
    """One page session that submits under eight names is one judge: each save replaces the last (same id),
    the summary counts one judgement and no agreement; another page is a second judge."""
    comparison_id = _comparison(db_url)
    saved = [
        storage.save_annotation(
            comparison_id=comparison_id, annotator=f"name-{n}", preferred="ABC"[n % 3], page="page-1", url=db_url
        )
        for n in range(8)
    ]
    assert [s.replaced for s in saved] == [False] + [True] * 7 and len({s.id for s in saved}) == 1
    [stored] = storage.list_annotations(url=db_url)
    assert (stored.annotator, stored.preferred, stored.page) == ("name-7", "B", "page-1")
    summary = storage.annotation_summary(url=db_url)
    assert (summary.judgements, summary.judges, summary.names, summary.agreement.comparisons) == (1, 1, 1, 0)
    other = storage.save_annotation(
        comparison_id=comparison_id, annotator="name-7", preferred="B", page="page-2", url=db_url
    )
    assert not other.replaced and other.id != saved[0].id
    summary = storage.annotation_summary(url=db_url)
    assert (summary.judgements, summary.judges, summary.names) == (2, 2, 1)
    assert summary.agreement.comparisons == 1 and summary.agreement.percent_agreement == 1
    rows = storage.annotations_export_rows(url=db_url)
    assert len(rows) == 2 and rows[0]["page"] != rows[1]["page"] and len(rows[0]["page"]) <= 16


def test_judgements_saved_without_a_page_count_by_name_as_before(db_url):
    comparison_id = _comparison(db_url)
    for annotator in ("a", "b", "a"):
        storage.save_annotation(comparison_id=comparison_id, annotator=annotator, preferred="A", url=db_url)
    assert len(storage.list_annotations(url=db_url)) == 3  # stored apart: no page to replace
    summary = storage.annotation_summary(url=db_url)
    assert (summary.judgements, summary.judges) == (2, 2)  # each name's latest
    assert storage.annotations_export_rows(url=db_url)[0]["page"] == ""


def test_a_database_from_before_pages_were_kept_gains_their_table_and_keeps_its_judgements(db_url):
    comparison_id = _comparison(db_url)
    storage.save_annotation(comparison_id=comparison_id, annotator="old", preferred="A", url=db_url)
    with db.get_engine(db_url).begin() as connection:
        connection.execute(text("DROP TABLE annotation_pages"))  # the schema of an earlier version
    storage.reset_engines()  # the app restarts on the older database
    [old] = storage.list_annotations(url=db_url)
    assert (old.annotator, old.page) == ("old", None)
    saved = storage.save_annotation(comparison_id=comparison_id, annotator="new", preferred="B", page="p", url=db_url)
    assert not saved.replaced and storage.annotation_summary(url=db_url).judges == 2


def test_one_page_saving_at_once_stores_one_judgement(db_url):
    """A double click (or a script) saving the same page's judgement from several threads: one row."""
    comparison_id = _comparison(db_url)
    start = threading.Barrier(6)

    def save(worker: int):
        start.wait()
        return storage.save_annotation(
            comparison_id=comparison_id, annotator=f"n{worker}", preferred="A", page="one-page", url=db_url
        )

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(save, range(6)))
    assert len(storage.list_annotations(url=db_url)) == 1 and len({result.id for result in results}) == 1


def test_export_files_are_written_from_rows_alone(tmp_path):
    rows = [
        {"annotation_id": 1, "comment": "@SUM(A1)", exports.rating_column("llm", "fluency"): 4},
        {"annotation_id": 2, exports.rating_column("sd", "fluency"): None, "comment": "ok"},
    ]
    path = tmp_path / "rows.csv"
    assert exports.write_annotations_csv(rows, path) == 2
    header, first, second = list(csv.reader(path.open(encoding="utf-8", newline="")))
    # Every row's columns appear, rating columns last and sorted, whichever row brought them.
    assert header == ["annotation_id", "comment", "rating:llm:fluency", "rating:sd:fluency"]
    assert first == ["1", "'@SUM(A1)", "4", ""] and second == ["2", "ok", "", ""]
    assert exports.display_order_text(["slm", "llm"]) == "A=slm;B=llm"


# --------------------------------------------------------------------------- runs

CONFIG = {
    "data": "data/longlamp/review.jsonl",
    "task": "review",
    "limit": 10,
    "methods": ("llm", "specsteer"),
    "alphas": [0.1, 1.0],
    "betas": [1.0],
    "pairing": "tiny",
    "max_new_tokens": 64,
}


def _cell(
    record_id: str,
    method: str = "llm",
    alpha: float | None = None,
    beta: float | None = None,
    output: str = "",
    rouge=None,
    **stats,
) -> CellResult:
    return CellResult(
        record_id, GridPoint(method, alpha, beta), output, rouge or {}, GenerationStats(method=method, **stats)
    )


def test_create_run_resumes_same_config_and_refuses_a_different_one(db_url):
    run_id = storage.create_run("grid-1", CONFIG, url=db_url)
    reordered = dict(reversed(list(CONFIG.items())), methods=["llm", "specsteer"])
    assert storage.create_run("grid-1", reordered, url=db_url) == run_id
    with pytest.raises(ValueError, match="different config"):
        storage.create_run("grid-1", {**CONFIG, "limit": 20}, url=db_url)
    other = storage.create_run("grid-2", CONFIG, url=db_url)
    assert other != run_id
    assert [r.name for r in storage.list_runs(url=db_url)] == ["grid-2", "grid-1"]
    run = storage.get_run(run_id, url=db_url)
    assert isinstance(run, storage.StoredRun)
    assert run.status == "pending" and run.config["methods"] == ["llm", "specsteer"] and run.cell_count == 0
    assert storage.get_run_by_name("grid-1", url=db_url).id == run_id
    assert storage.get_run(999, url=db_url) is None and storage.get_run_by_name("nope", url=db_url) is None


def test_run_status_transitions(db_url):
    run_id = storage.create_run("grid", CONFIG, url=db_url)
    created = storage.get_run(run_id, url=db_url)
    storage.set_run_status(run_id, "failed", error="OOM", url=db_url)
    failed = storage.get_run(run_id, url=db_url)
    assert (failed.status, failed.error) == ("failed", "OOM")
    assert failed.updated_at >= created.updated_at
    storage.set_run_status(run_id, "running", url=db_url)
    assert storage.get_run(run_id, url=db_url).error is None
    with pytest.raises(ValueError, match="status must be one of"):
        storage.set_run_status(run_id, "done", url=db_url)
    with pytest.raises(ValueError, match="does not exist"):
        storage.set_run_status(999, "running", url=db_url)


def test_cell_keys_are_canonical_and_unforgeable():
    assert cell_key("rec1", GridPoint("specsteer", 0.1, 1)) == "rec1|specsteer|a=0.1|b=1"
    assert cell_key("rec1", GridPoint("llm")) == "rec1|llm|a=-|b=-"
    assert cell_key("r", GridPoint("sd", 0.1 + 0.2, 1.0)) == cell_key("r", GridPoint("sd", 0.3, 1))
    assert cell_key("a|b", GridPoint("c")) != cell_key("a", GridPoint("b|c"))


def test_save_cell_is_idempotent_and_roundtrips_typed_cells(db_url):
    run_id = storage.create_run("grid", CONFIG, url=db_url)
    rouge = {"rouge1": 0.31, "rougeL": 0.2, "rouge1_stemmed": 0.33, "rougeL_stemmed": 0.21}
    cell = _cell(
        "r1",
        "specsteer",
        0.1,
        1.0,
        output="text",
        rouge=rouge,
        tok_per_s=12.5,
        acceptance_rate=0.8,
        rounds=4,
        uplink_bytes=64,
        downlink_bytes=300,
        seconds=1.2,
        new_tokens=15,
    )
    assert storage.save_cell(run_id, cell, url=db_url) is True
    assert storage.save_cell(run_id, _cell("r1", "specsteer", 0.1, 1.0, output="other"), url=db_url) is False
    # NULL alpha/beta (methods without them) must deduplicate too.
    assert storage.save_cell(run_id, _cell("r1"), url=db_url) is True
    assert storage.save_cell(run_id, _cell("r1"), url=db_url) is False
    cells = storage.run_cells(run_id, url=db_url)
    assert cells == [cell, _cell("r1", rouge=dict.fromkeys(ROUGE_KEYS))]  # read back equal to what was saved
    assert storage.finished_cell_keys(run_id, url=db_url) == {"r1|specsteer|a=0.1|b=1", "r1|llm|a=-|b=-"}
    assert storage.get_run(run_id, url=db_url).cell_count == 2
    with pytest.raises(ValueError, match="does not exist"):
        storage.save_cell(999, _cell("r1"), url=db_url)
    with pytest.raises(ValueError, match="unknown ROUGE"):
        storage.save_cell(run_id, _cell("r2", rouge={"rouge2": 0.1}), url=db_url)


def test_cells_stored_by_an_older_version_still_read(db_url):
    run_id = storage.create_run("old", CONFIG, url=db_url)
    with db.session_scope(db_url) as session:  # stats without "method", "trace" or "verified", plus a retired key
        session.execute(
            text(
                "INSERT INTO eval_cells (run_id, cell_key, record_id, method, output, stats, created_at) "
                "VALUES (:run, 'r1|llm|a=-|b=-', 'r1', 'llm', 'x', :stats, '2024-01-01')"
            ),
            {"run": run_id, "stats": json.dumps({"new_tokens": 3, "seconds": 0.5, "acceptance": 0.9})},
        )
    [cell] = storage.run_cells(run_id, url=db_url)
    assert cell.point == GridPoint("llm") and cell.stats.method == "llm"
    assert (cell.stats.new_tokens, cell.stats.seconds, cell.stats.verified, cell.stats.trace) == (3, 0.5, 0, [])


def test_deleting_a_run_cascades_to_its_cells(db_url):
    run_id = storage.create_run("grid", CONFIG, url=db_url)
    storage.save_cell(run_id, _cell("r1"), url=db_url)
    with db.session_scope(db_url) as session:
        session.execute(text("DELETE FROM eval_runs WHERE id = :id"), {"id": run_id})
    with db.session_scope(db_url) as session:
        assert session.execute(text("SELECT COUNT(*) FROM eval_cells")).scalar() == 0


def test_run_survives_an_app_restart(db_url):
    store = storage.SqlRunStore(db_url)
    run_id = store.open_run("grid", CONFIG)
    store.set_status(run_id, "running")
    for record in ("r1", "r2", "r3"):
        store.save_cell(run_id, _cell(record, "specsteer", 0.1, 1.0))
    keys_before = store.finished_keys(run_id)
    db.reset_engines()  # the app process restarts: no engine, no cached state
    store = storage.SqlRunStore(db_url)
    assert store.open_run("grid", CONFIG) == run_id
    assert store.finished_keys(run_id) == keys_before
    todo = [r for r in ("r1", "r2", "r3", "r4") if _cell(r, "specsteer", 0.1, 1.0).key not in keys_before]
    assert todo == ["r4"]
    assert storage.get_run(run_id, url=db_url).status == "running"
    assert [cell.record_id for cell in store.cells(run_id)] == ["r1", "r2", "r3"]


# ------------------------------------------------------ the same on SQLite and PostgreSQL


def test_ids_go_beyond_32_bits_on_postgresql(postgres_url):
    """PostgreSQL's INTEGER ends at 2**31 - 1 (SQLite's row ids are 64-bit): ids and the columns that hold
    them are BIGINT there. Every table's sequence starts past it, then every repository writes and reads."""
    start = 2**31 + 7
    engine = db.init_db(postgres_url)
    with engine.begin() as connection:
        for table in Base.metadata.sorted_tables:
            if "id" in table.c:
                connection.exec_driver_sql(f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), {start})")
    history_id = storage.save_history(name="h", schema="plain", items=[{"text": "x"}], url=postgres_url)
    generation_ids = [
        storage.save_generation(
            method=m, task="review", input_text="i", text=m, history_id=history_id, url=postgres_url
        )
        for m in ("llm", "slm+")
    ]
    comparison_id = storage.save_comparison(
        generation_ids=generation_ids, task="review", input_text="i", history_id=history_id, url=postgres_url
    )
    annotation_id = storage.save_annotation(
        comparison_id=comparison_id, annotator="a", preferred="A", page="p", url=postgres_url
    ).id
    run_id = storage.create_run("big", CONFIG, url=postgres_url)
    assert storage.save_cell(run_id, _cell("r1"), url=postgres_url)
    campaigns = storage.SqlCampaignStore(postgres_url)
    campaign = campaigns.create_campaign(
        NewCampaign("big", "review", ("llm", "slm+"), "tiny", {}, {"source": "sample"}, 1, True, {})
    )
    assert campaigns.add_item(campaign.id, 0, "r1", comparison_id)
    annotator = campaigns.add_annotator(campaign.id, "ann", None)
    judgement_id = campaigns.save_judgement(
        NewCampaignJudgement(campaign.id, comparison_id, annotator.id, ("llm", "slm+"), "A", "llm", {}, "", 1.0)
    )
    ids = [history_id, *generation_ids, comparison_id, annotation_id, run_id, campaign.id, annotator.id, judgement_id]
    assert all(identifier > 2**31 for identifier in ids)
    stored = storage.get_comparison(comparison_id, url=postgres_url)
    assert [output["generation_id"] for output in stored["outputs"]] == generation_ids
    assert stored["history_id"] == history_id and storage.get_run(run_id, url=postgres_url).cell_count == 1
    assert [j.id for j in campaigns.judgements(campaign.id)] == [judgement_id]


def test_text_with_nul_is_kept_with_a_replacement_character(db_url):
    """PostgreSQL's text cannot hold NUL, which a byte-level model may emit and any caller may send: it is
    stored as U+FFFD on both databases (JSON values keep it: JSON escapes it)."""
    history_id = storage.save_history(name="h\x00", schema="plain", items=[{"text": "a\x00b"}], url=db_url)
    generation_id = storage.save_generation(
        method="llm", task="review", input_text="in\x00put", text="out\x00", tokens=[{"text": "\x00"}], url=db_url
    )
    stored = storage.get_generation(generation_id, url=db_url)
    assert (stored["input_text"], stored["text"]) == ("in\ufffdput", "out\ufffd")
    assert stored["tokens"] == [{"text": "\x00"}]
    assert storage.get_history(history_id, url=db_url)["name"] == "h\ufffd"
    assert storage.get_history(history_id, url=db_url)["items"] == [{"text": "a\x00b"}]


def test_values_longer_than_their_column_are_refused_alike(db_url):
    """PostgreSQL refuses a value longer than its VARCHAR where SQLite would keep it: the repositories refuse
    it on both, with a sentence, before the database sees it."""
    run_id = storage.create_run("long", CONFIG, url=db_url)
    with pytest.raises(ValueError, match="record id is 256 characters long; the limit is 255"):
        storage.save_cell(run_id, _cell("r" * 256), url=db_url)
    assert storage.save_cell(run_id, _cell("r" * 255), url=db_url)  # up to the limit
    with pytest.raises(ValueError, match="run name is 300 characters long"):
        storage.create_run("n" * 300, CONFIG, url=db_url)
    with pytest.raises(ValueError, match="history name"):
        storage.save_history(name="h" * 256, schema="plain", items=[], url=db_url)
    with pytest.raises(ValueError, match="annotator is 256"):
        storage.save_annotation(comparison_id=_comparison(db_url), annotator="a" * 256, preferred="A", url=db_url)
    assert storage.get_run(run_id, url=db_url).cell_count == 1 and storage.list_histories(url=db_url) == []


def test_names_differing_in_case_are_different_names_on_both(db_url):
    campaigns = storage.SqlCampaignStore(db_url)
    campaign = campaigns.create_campaign(
        NewCampaign("Study", "review", ("llm",), "tiny", {}, {"source": "sample"}, 1, True, {})
    )
    upper, lower = campaigns.add_annotator(campaign.id, "Ann", None), campaigns.add_annotator(campaign.id, "ann", None)
    assert upper.id != lower.id and campaigns.annotator(campaign.id, "ANN") is None
    assert campaigns.campaign("study") is None and campaigns.campaign("Study").id == campaign.id
    assert storage.create_run("Run", CONFIG, url=db_url) != storage.create_run("run", CONFIG, url=db_url)


# -------------------------------------------------------------------- concurrency


def test_threads_writing_annotations_lose_nothing(db_url):
    comparison_id = _comparison(db_url)
    errors: list[BaseException] = []
    ids: list[int] = []
    start = threading.Barrier(8)

    def annotate(worker: int) -> None:
        start.wait()
        try:
            for index in range(25):
                ids.append(
                    storage.save_annotation(
                        comparison_id=comparison_id,
                        annotator=f"ann{worker}",
                        preferred="ABC"[index % 3],
                        ratings={"A": {"fluency": 1 + index % 5}},
                        comment=f"{worker}-{index}",
                        url=db_url,
                    ).id
                )
        except BaseException as error:  # reported below; a thread cannot fail the test itself
            errors.append(error)

    threads = [threading.Thread(target=annotate, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stored = storage.list_annotations(url=db_url)
    assert len(stored) == 200 and len(set(ids)) == 200
    assert {a.comment for a in stored} == {f"{w}-{i}" for w in range(8) for i in range(25)}


GRID_CELLS = 20


def _write_the_grid_in_another_process(url: str, run_id: int, start, results) -> None:
    storage.finished_cell_keys(run_id, url=url)  # engine and connection ready before the race starts
    start.wait()
    inserted = sum(
        storage.save_cell(run_id, _cell(f"r{index}", "specsteer", 0.1, 1.0, output=f"out {index}"), url=url)
        for index in range(GRID_CELLS)
    )
    results.put(inserted)


@pytest.mark.slow  # a child process
def test_two_processes_writing_one_runs_cells_store_each_once(db_url):
    """Two workers on one run (``--shard`` overlapping completely, the worst case): each process has its own
    engine and tries every one of the 20 cells at the same moment as the other."""
    run_id = storage.create_run("parallel", CONFIG, url=db_url)
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited connections
    start, results = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_write_the_grid_in_another_process, args=(db_url, run_id, start, results))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    inserted = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    cells = storage.run_cells(run_id, url=db_url)
    keys = [cell.key for cell in cells]
    print(
        f"{db.get_engine(db_url).dialect.name}: 2 processes, {GRID_CELLS} cells each tried: {len(cells)} stored, "
        f"{len(set(keys))} distinct, inserted {inserted[0]} + {inserted[1]}, {len(keys) - len(set(keys))} twice"
    )
    assert len(cells) == len(set(keys)) == GRID_CELLS
    assert sum(inserted) == GRID_CELLS  # each cell inserted by exactly one process
    assert storage.get_run(run_id, url=db_url).cell_count == GRID_CELLS
