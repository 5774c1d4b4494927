"""Tests of storage/: engine settings, every table's round trip, validation, exports,
annotation statistics, resumable evaluation runs, and concurrent writers."""

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
from specsteer.evaluation.run_store import CellResult, GridPoint, cell_key
from specsteer.method.events import GenerationStats, LinkMessage, TokenEvent
from storage import db, exports
from storage.histories import history_sha256
from storage.judgements import Judgement, summarize_annotations
from storage.models import Comparison, ComparisonOutput, Generation

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


def test_database_url_env_wins_and_postgres_scheme_is_normalised(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db.example/specsteer")
    assert db.database_url() == "postgresql://user:pw@db.example/specsteer"
    # Server databases get no SQLite-only arguments (and need no driver to plan this).
    assert db.engine_options(db.database_url()) == {"pool_pre_ping": True}


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


def test_init_db_creates_all_tables_and_is_idempotent(url):
    db.init_db(url)
    db.init_db(url)
    db.reset_engines()
    engine = db.init_db(url)  # a fresh engine on an existing schema
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


def test_foreign_key_violations_are_rejected(url):
    with pytest.raises(IntegrityError), db.session_scope(url) as session:
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
    with pytest.raises(IntegrityError), db.session_scope(url) as session:
        comparison = Comparison(task="review", input_text="", pairing="", settings={}, display_order=["llm"])
        comparison.outputs = [ComparisonOutput(slot=0, label="A", generation_id=12345)]
        session.add(comparison)
    with db.session_scope(url) as session:
        assert session.execute(text("SELECT COUNT(*) FROM generations")).scalar() == 0


def test_session_scope_rolls_back_on_error(url):
    with pytest.raises(RuntimeError), db.session_scope(url) as session:
        session.execute(
            text(
                "INSERT INTO eval_runs (name, config, status, created_at, updated_at) "
                "VALUES ('x', '{}', 'pending', '2024-01-01', '2024-01-01')"
            )
        )
        raise RuntimeError("boom")
    assert storage.list_runs(url=url) == []


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


def test_history_roundtrip_and_dedupe(url):
    items = [{"reviewText": "Great pan.", "summary": "Good"}, {"reviewText": "Too small.", "summary": "Meh"}]
    first = storage.save_history(name="alice.jsonl", schema="review", items=items, user_id="A1", url=url)
    again = storage.save_history(
        name="renamed.jsonl", schema="review", items=[_Item(**i) for i in items], user_id="A1", url=url
    )
    other_user = storage.save_history(name="b.jsonl", schema="review", items=items, user_id="B2", url=url)
    assert again == first and other_user != first
    stored = storage.get_history(first, url=url)
    assert stored["items"] == items and stored["item_count"] == 2
    assert stored["name"] == "alice.jsonl" and stored["schema"] == "review" and stored["user_id"] == "A1"
    assert stored["sha256"] == history_sha256("review", "A1", items)
    assert stored["created_at"].tzinfo is not None
    listed = storage.list_histories(url=url)
    assert [h["id"] for h in listed] == [other_user, first] and "items" not in listed[0]
    assert storage.get_history(999, url=url) is None


# -------------------------------------------------------------------- generations


def test_generation_roundtrip_accepts_engine_dataclasses(url):
    history_id = storage.save_history(name="h", schema="plain", items=[{"text": "x"}], url=url)
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
        url=url,
    )
    stored = storage.get_generation(generation_id, url=url)
    assert stored["tokens"][0] == {"id": 5, "text": "Hel", "kind": "accepted", "round": 0, "ratio": 1.7}
    assert stored["tokens"][1]["ratio"] is None  # JSON has no Infinity
    assert stored["stats"]["acceptance_rate"] == 0.5 and stored["stats"]["forward_calls"] == {"specialist": 2}
    assert stored["transcript"] == [{"direction": "uplink", "kind": "draft", "bytes": 16, "payload": {"ids": [5, 6]}}]
    assert stored["settings"] == {"alpha": 0.1, "beta": 1.0, "draft_len": 4}
    assert (stored["history_id"], stored["pairing"], stored["text"]) == (history_id, "tiny", "Hello!")
    assert "tokens" not in storage.list_generations(url=url)[0]
    assert storage.get_generation(999, url=url) is None


# -------------------------------------------------------------------- comparisons


def test_comparison_roundtrip_keeps_the_shown_order(url):
    comparison_id = _comparison(url, ("slm+", "specsteer", "llm"))
    stored = storage.get_comparison(comparison_id, url=url)
    assert stored["display_order"] == ["slm+", "specsteer", "llm"]
    assert stored["labels"] == {"A": "slm+", "B": "specsteer", "C": "llm"}
    assert [o["label"] for o in stored["outputs"]] == ["A", "B", "C"]
    assert stored["outputs"][1]["text"] == "text of specsteer"
    assert stored["blind"] is True and stored["pairing"] == "tiny"
    assert [c["id"] for c in storage.list_comparisons(url=url)] == [comparison_id]
    with db.session_scope(url) as session:
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
def test_comparison_validation(url, ids, message):
    first, second = _generation(url, "llm"), _generation(url, "llm")
    ids = {"none": [], "unknown": [first, 999], "dup-id": [first, first], "dup-method": [first, second]}[ids]
    with pytest.raises(ValueError, match=message):
        storage.save_comparison(generation_ids=ids, task="review", input_text="x", url=url)


# -------------------------------------------------------------------- annotations


def test_annotation_roundtrip_resolves_labels_to_methods(url):
    comparison_id = _comparison(url)  # A=specsteer, B=llm, C=slm+
    annotation_id = storage.save_annotation(
        comparison_id=comparison_id,
        annotator=" ann1 ",
        preferred="A",
        ratings={"A": {"personalization": 5, "fluency": 4.0}, "llm": {"fluency": 3, "personalization": None}},
        comment="A sounds like me",
        url=url,
    ).id
    [stored] = storage.list_annotations(url=url)
    assert isinstance(stored, Judgement)
    assert stored.id == annotation_id and stored.annotator == "ann1" and stored.comment == "A sounds like me"
    assert (stored.preferred, stored.preferred_method) == ("A", "specsteer")
    assert stored.ratings == {"specsteer": {"personalization": 5, "fluency": 4}, "llm": {"fluency": 3}}
    assert stored.display_order == ("specsteer", "llm", "slm+") and stored.created_at.tzinfo is not None


def test_annotation_labels_follow_the_order_this_annotator_saw(url):
    comparison_id = _comparison(url)
    storage.save_annotation(
        comparison_id=comparison_id,
        annotator="ann2",
        preferred="A",
        ratings={"B": {"fluency": 2}},
        display_order=["slm+", "specsteer", "llm"],
        url=url,
    )
    [stored] = storage.list_annotations(comparison_id=comparison_id, url=url)
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


def test_tie_and_all_bad_are_accepted(url):
    comparison_id = _comparison(url)
    for choice in ("tie", "all_bad", "llm", "C"):
        storage.save_annotation(comparison_id=comparison_id, annotator="ann", preferred=choice, url=url)
    assert [a.preferred_method for a in storage.list_annotations(url=url)] == ["tie", "all_bad", "llm", "slm+"]


def test_export_rows_csv_and_jsonl(url, tmp_path):
    comparison_id = _comparison(url)
    storage.save_annotation(
        comparison_id=comparison_id,
        annotator="ann1",
        preferred="B",
        ratings={"B": {"personalization": 4, "fluency": 5}},
        comment="=cmd|' /C calc'!A0",
        url=url,
    )
    storage.save_annotation(
        comparison_id=comparison_id,
        annotator="ann2",
        preferred="tie",
        display_order=["llm", "slm+", "specsteer"],
        comment="fine, \"quoted\"\nnewline",
        url=url,
    )
    rows = storage.annotations_export_rows(url=url)
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


# ---------------------------------------------------------------- annotation stats


def _judgement(annotation_id, comparison_id, annotator, preferred, shown, ratings=None):
    return Judgement(
        id=annotation_id,
        comparison_id=comparison_id,
        annotator=annotator,
        preferred=preferred,
        preferred_method=preferred,
        ratings=ratings or {},
        display_order=tuple(shown),
    )


def test_win_rates_and_agreement_on_a_hand_computed_example():
    three, two_a, two_b = ["specsteer", "llm", "slm+"], ["specsteer", "llm"], ["specsteer", "slm+"]
    annotations = [
        _judgement(1, 1, "ann1", "specsteer", three, {"specsteer": {"fluency": 4}}),
        _judgement(2, 1, "ann2", "specsteer", three, {"specsteer": {"fluency": 5}}),
        _judgement(3, 1, "ann3", "llm", three),
        _judgement(4, 2, "ann1", "tie", two_a),
        _judgement(5, 2, "ann2", "llm", two_a),
        _judgement(6, 3, "ann1", "specsteer", two_b),
        _judgement(7, 3, "ann1", "slm+", two_b),  # re-judged: replaces annotation 6
    ]
    summary = summarize_annotations(annotations)
    assert summary.judgements == 6 and summary.judges == 3 and summary.names == 3
    methods = summary.methods
    assert list(methods) == ["llm", "slm+", "specsteer"]
    # specsteer shown 3+2+1 = 6 times, preferred twice, one tie where it was shown.
    specsteer = methods["specsteer"]
    assert (specsteer.shown, specsteer.wins, specsteer.ties, specsteer.all_bad) == (6, 2, 1, 0)
    assert specsteer.win_rate == pytest.approx(2 / 6) and specsteer.mean_ratings == {"fluency": 4.5}
    assert (methods["llm"].shown, methods["llm"].wins, methods["llm"].win_rate) == (5, 2, pytest.approx(0.4))
    assert (methods["slm+"].shown, methods["slm+"].wins, methods["slm+"].win_rate) == (4, 1, 0.25)
    # Items with >= 2 annotators: comparison 1 {specsteer: 2, llm: 1}, comparison 2 {tie: 1, llm: 1}.
    # P1 = (2*1 + 0) / (3*2) = 1/3, P2 = 0 -> P-bar = 1/6.
    # Pooled shares: specsteer 2/5, llm 2/5, tie 1/5 -> Pe = 9/25; kappa = (1/6 - 9/25) / (16/25) = -29/96.
    agreement = summary.agreement
    assert agreement.comparisons == 2 and agreement.judgements == 5
    assert agreement.percent_agreement == pytest.approx(1 / 6)
    assert agreement.unanimous == 0
    assert agreement.fleiss_kappa == pytest.approx(-29 / 96)


def test_perfect_agreement_and_undefined_kappa():
    shown = ["specsteer", "llm"]
    perfect = [
        _judgement(1, 1, "a", "llm", shown),
        _judgement(2, 1, "b", "llm", shown),
        _judgement(3, 2, "a", "specsteer", shown),
        _judgement(4, 2, "b", "specsteer", shown),
    ]
    agreement = summarize_annotations(perfect).agreement
    assert agreement.percent_agreement == 1 and agreement.unanimous == 1 and agreement.fleiss_kappa == 1
    # Everyone always picks the same category: chance agreement is 1, kappa is undefined.
    assert summarize_annotations(perfect[:2]).agreement.fleiss_kappa is None
    assert summarize_annotations([]).agreement.percent_agreement is None


def test_annotation_summary_from_the_database(url):
    comparison_id = _comparison(url)
    storage.save_annotation(comparison_id=comparison_id, annotator="a", preferred="A", url=url)
    storage.save_annotation(comparison_id=comparison_id, annotator="b", preferred="specsteer", url=url)
    summary = storage.annotation_summary(url=url)
    assert summary.methods["specsteer"].win_rate == 1 and summary.methods["llm"].win_rate == 0
    assert summary.agreement.percent_agreement == 1
    assert storage.annotation_summary(task="abstract", url=url).judgements == 0


def test_a_page_holds_one_judgement_per_comparison_whatever_names_it_types(url):
    """One page session that submits under eight names is one judge: each save replaces the last (same id),
    the summary counts one judgement and no agreement; another page is a second judge."""
    comparison_id = _comparison(url)
    saved = [
        storage.save_annotation(
            comparison_id=comparison_id, annotator=f"name-{n}", preferred="ABC"[n % 3], page="page-1", url=url
        )
        for n in range(8)
    ]
    assert [s.replaced for s in saved] == [False] + [True] * 7 and len({s.id for s in saved}) == 1
    [stored] = storage.list_annotations(url=url)
    assert (stored.annotator, stored.preferred, stored.page) == ("name-7", "B", "page-1")
    summary = storage.annotation_summary(url=url)
    assert (summary.judgements, summary.judges, summary.names, summary.agreement.comparisons) == (1, 1, 1, 0)
    other = storage.save_annotation(
        comparison_id=comparison_id, annotator="name-7", preferred="B", page="page-2", url=url
    )
    assert not other.replaced and other.id != saved[0].id
    summary = storage.annotation_summary(url=url)
    assert (summary.judgements, summary.judges, summary.names) == (2, 2, 1)
    assert summary.agreement.comparisons == 1 and summary.agreement.percent_agreement == 1
    rows = storage.annotations_export_rows(url=url)
    assert len(rows) == 2 and rows[0]["page"] != rows[1]["page"] and len(rows[0]["page"]) <= 16


def test_judgements_saved_without_a_page_count_by_name_as_before(url):
    comparison_id = _comparison(url)
    for annotator in ("a", "b", "a"):
        storage.save_annotation(comparison_id=comparison_id, annotator=annotator, preferred="A", url=url)
    assert len(storage.list_annotations(url=url)) == 3  # stored apart: no page to replace
    summary = storage.annotation_summary(url=url)
    assert (summary.judgements, summary.judges) == (2, 2)  # each name's latest
    assert storage.annotations_export_rows(url=url)[0]["page"] == ""


def test_a_database_from_before_pages_were_kept_gains_their_table_and_keeps_its_judgements(url):
    comparison_id = _comparison(url)
    storage.save_annotation(comparison_id=comparison_id, annotator="old", preferred="A", url=url)
    with db.get_engine(url).begin() as connection:
        connection.execute(text("DROP TABLE annotation_pages"))  # the schema of an earlier version
    storage.reset_engines()  # the app restarts on the older database
    [old] = storage.list_annotations(url=url)
    assert (old.annotator, old.page) == ("old", None)
    saved = storage.save_annotation(comparison_id=comparison_id, annotator="new", preferred="B", page="p", url=url)
    assert not saved.replaced and storage.annotation_summary(url=url).judges == 2


def test_one_page_saving_at_once_stores_one_judgement(url):
    """A double click (or a script) saving the same page's judgement from several threads: one row."""
    comparison_id = _comparison(url)
    start = threading.Barrier(6)

    def save(worker: int):
        start.wait()
        return storage.save_annotation(
            comparison_id=comparison_id, annotator=f"n{worker}", preferred="A", page="one-page", url=url
        )

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(save, range(6)))
    assert len(storage.list_annotations(url=url)) == 1 and len({result.id for result in results}) == 1


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


def test_create_run_resumes_same_config_and_refuses_a_different_one(url):
    run_id = storage.create_run("grid-1", CONFIG, url=url)
    reordered = dict(reversed(list(CONFIG.items())), methods=["llm", "specsteer"])
    assert storage.create_run("grid-1", reordered, url=url) == run_id
    with pytest.raises(ValueError, match="different config"):
        storage.create_run("grid-1", {**CONFIG, "limit": 20}, url=url)
    other = storage.create_run("grid-2", CONFIG, url=url)
    assert other != run_id
    assert [r.name for r in storage.list_runs(url=url)] == ["grid-2", "grid-1"]
    run = storage.get_run(run_id, url=url)
    assert isinstance(run, storage.StoredRun)
    assert run.status == "pending" and run.config["methods"] == ["llm", "specsteer"] and run.cell_count == 0
    assert storage.get_run_by_name("grid-1", url=url).id == run_id
    assert storage.get_run(999, url=url) is None and storage.get_run_by_name("nope", url=url) is None


def test_run_status_transitions(url):
    run_id = storage.create_run("grid", CONFIG, url=url)
    created = storage.get_run(run_id, url=url)
    storage.set_run_status(run_id, "failed", error="OOM", url=url)
    failed = storage.get_run(run_id, url=url)
    assert (failed.status, failed.error) == ("failed", "OOM")
    assert failed.updated_at >= created.updated_at
    storage.set_run_status(run_id, "running", url=url)
    assert storage.get_run(run_id, url=url).error is None
    with pytest.raises(ValueError, match="status must be one of"):
        storage.set_run_status(run_id, "done", url=url)
    with pytest.raises(ValueError, match="does not exist"):
        storage.set_run_status(999, "running", url=url)


def test_cell_keys_are_canonical_and_unforgeable():
    assert cell_key("rec1", GridPoint("specsteer", 0.1, 1)) == "rec1|specsteer|a=0.1|b=1"
    assert cell_key("rec1", GridPoint("llm")) == "rec1|llm|a=-|b=-"
    assert cell_key("r", GridPoint("sd", 0.1 + 0.2, 1.0)) == cell_key("r", GridPoint("sd", 0.3, 1))
    assert cell_key("a|b", GridPoint("c")) != cell_key("a", GridPoint("b|c"))


def test_save_cell_is_idempotent_and_roundtrips_typed_cells(url):
    run_id = storage.create_run("grid", CONFIG, url=url)
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
    assert storage.save_cell(run_id, cell, url=url) is True
    assert storage.save_cell(run_id, _cell("r1", "specsteer", 0.1, 1.0, output="other"), url=url) is False
    # NULL alpha/beta (methods without them) must deduplicate too.
    assert storage.save_cell(run_id, _cell("r1"), url=url) is True
    assert storage.save_cell(run_id, _cell("r1"), url=url) is False
    cells = storage.run_cells(run_id, url=url)
    assert cells == [cell, _cell("r1", rouge=dict.fromkeys(ROUGE_KEYS))]  # read back equal to what was saved
    assert storage.finished_cell_keys(run_id, url=url) == {"r1|specsteer|a=0.1|b=1", "r1|llm|a=-|b=-"}
    assert storage.get_run(run_id, url=url).cell_count == 2
    with pytest.raises(ValueError, match="does not exist"):
        storage.save_cell(999, _cell("r1"), url=url)
    with pytest.raises(ValueError, match="unknown ROUGE"):
        storage.save_cell(run_id, _cell("r2", rouge={"rouge2": 0.1}), url=url)


def test_cells_stored_by_an_older_version_still_read(url):
    run_id = storage.create_run("old", CONFIG, url=url)
    with db.session_scope(url) as session:  # stats without "method", "trace" or "verified", plus a retired key
        session.execute(
            text(
                "INSERT INTO eval_cells (run_id, cell_key, record_id, method, output, stats, created_at) "
                "VALUES (:run, 'r1|llm|a=-|b=-', 'r1', 'llm', 'x', :stats, '2024-01-01')"
            ),
            {"run": run_id, "stats": json.dumps({"new_tokens": 3, "seconds": 0.5, "acceptance": 0.9})},
        )
    [cell] = storage.run_cells(run_id, url=url)
    assert cell.point == GridPoint("llm") and cell.stats.method == "llm"
    assert (cell.stats.new_tokens, cell.stats.seconds, cell.stats.verified, cell.stats.trace) == (3, 0.5, 0, [])


def test_deleting_a_run_cascades_to_its_cells(url):
    run_id = storage.create_run("grid", CONFIG, url=url)
    storage.save_cell(run_id, _cell("r1"), url=url)
    with db.session_scope(url) as session:
        session.execute(text("DELETE FROM eval_runs WHERE id = :id"), {"id": run_id})
    with db.session_scope(url) as session:
        assert session.execute(text("SELECT COUNT(*) FROM eval_cells")).scalar() == 0


def test_run_survives_an_app_restart(url):
    store = storage.SqlRunStore(url)
    run_id = store.open_run("grid", CONFIG)
    store.set_status(run_id, "running")
    for record in ("r1", "r2", "r3"):
        store.save_cell(run_id, _cell(record, "specsteer", 0.1, 1.0))
    keys_before = store.finished_keys(run_id)
    db.reset_engines()  # the app process restarts: no engine, no cached state
    store = storage.SqlRunStore(url)
    assert store.open_run("grid", CONFIG) == run_id
    assert store.finished_keys(run_id) == keys_before
    todo = [r for r in ("r1", "r2", "r3", "r4") if _cell(r, "specsteer", 0.1, 1.0).key not in keys_before]
    assert todo == ["r4"]
    assert storage.get_run(run_id, url=url).status == "running"
    assert [cell.record_id for cell in store.cells(run_id)] == ["r1", "r2", "r3"]


# -------------------------------------------------------------------- concurrency


def test_threads_writing_annotations_lose_nothing(url):
    comparison_id = _comparison(url)
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
                        url=url,
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
    stored = storage.list_annotations(url=url)
    assert len(stored) == 200 and len(set(ids)) == 200
    assert {a.comment for a in stored} == {f"{w}-{i}" for w in range(8) for i in range(25)}


def _write_cells_in_another_process(url: str, run_id: int, worker: int, start, results) -> None:
    start.wait()
    inserted = 0
    for index in range(50):
        inserted += storage.save_cell(
            run_id, _cell(f"w{worker}-r{index}", "specsteer", 0.1, 1.0, output=f"out {index}"), url=url
        )
        if index % 5 == 0:  # both processes race on the same shared cells too
            inserted += storage.save_cell(run_id, _cell(f"shared-{index}"), url=url)
    results.put((worker, inserted))


def test_processes_writing_cells_lose_nothing(url):
    run_id = storage.create_run("parallel", CONFIG, url=url)
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited connections
    start, results = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_write_cells_in_another_process, args=(url, run_id, w, start, results)) for w in range(2)
    ]
    for worker in workers:
        worker.start()
    inserted = dict(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    cells = storage.run_cells(run_id, url=url)
    assert len(cells) == 2 * 50 + 10
    assert sum(inserted.values()) == 110  # each shared cell was inserted by exactly one process
    assert len({c.key for c in cells}) == 110
    assert storage.get_run(run_id, url=url).cell_count == 110
