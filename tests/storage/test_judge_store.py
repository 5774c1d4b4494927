"""LLM judges' grades and verdicts stored beside a run's cells (storage.SqlJudgeStore), on SQLite and PostgreSQL:
a settled result is kept, one that failed on the way is replaced, every judge's stays its own; a read-only
database made before judges (an example runs' file) reads as having none; a run's results copy onto a run of another
database as they are stored (storage.judge_scores.copy_judgements)."""

from __future__ import annotations

import sqlite3

import pytest

import storage
from specsteer.method.events import GenerationStats
from specsteer.stores.judges import JudgeIdentity, JudgeScore, PairVerdict
from specsteer.stores.runs import CellResult, GridPoint
from storage.judge_scores import CopiedJudgements, copy_judgements
from storage.judge_store import SqlJudgeStore
from storage.runs import copy_run

ENDPOINT = JudgeIdentity("gpt-judge", "endpoint")
WEAK = JudgeIdentity("small-model", "local", weak=True)
LLM, STEERED = GridPoint("llm"), GridPoint("specsteer", 0.1, 1.0)


def grade(point=LLM, score=7.0, judge=ENDPOINT, kind=None, record="r1", criterion="personalization") -> JudgeScore:
    reason = None if kind is None else f"a {kind}"
    return JudgeScore(
        record, point, criterion, judge, score, prompt="the prompt\x00 sent", answer="Rating: [[7]]", reason_kind=kind,
        reason=reason,
    )  # fmt: skip


def a_run(url: str) -> int:
    run_id = storage.create_run("judged", {"task": "cogenesis"}, url=url)
    for point in (LLM, STEERED):
        storage.save_cell(run_id, CellResult("r1", point, "out", {}, GenerationStats(point.method)), url=url)
    return run_id


def test_grades_are_kept_per_run_cell_judge_and_criterion(db_url):
    store = SqlJudgeStore(db_url)
    run_id = a_run(db_url)
    assert store.save_score(run_id, grade())
    assert not store.save_score(run_id, grade(score=2.0))  # settled: the first grade stays
    assert store.save_score(run_id, grade(judge=WEAK, score=4.0))  # another judge's is its own
    assert store.save_score(run_id, grade(criterion="overall", score=5.0))
    assert store.save_score(run_id, grade(point=STEERED, score=None, kind="malformed"))
    scores = store.scores(run_id)
    assert [(s.judge, s.criterion, s.point, s.score) for s in scores] == [
        (ENDPOINT, "personalization", LLM, 7.0),
        (WEAK, "personalization", LLM, 4.0),
        (ENDPOINT, "overall", LLM, 5.0),
        (ENDPOINT, "personalization", STEERED, None),
    ]
    first = scores[0]
    assert first.prompt == "the prompt\ufffd sent" and first.answer == "Rating: [[7]]" and first.created_at is not None
    assert scores[1].judge.weak and scores[3].reason == "a malformed"
    # A malformed answer is settled too: asking again would get it again.
    assert store.settled_scores(run_id, ENDPOINT.key) == {
        (first.cell_key, "personalization"),
        (first.cell_key, "overall"),
        (scores[3].cell_key, "personalization"),
    }
    # A row without a grade gives way to one with a grade (an answer read again, say); a grade never does.
    assert store.save_score(run_id, grade(point=STEERED, score=8.0))
    assert not store.save_score(run_id, grade(point=STEERED, score=None, kind="malformed"))
    assert [s.score for s in store.scores(run_id) if s.point == STEERED] == [8.0]


def test_a_timeout_is_replaced_by_the_next_answer(db_url):
    store = SqlJudgeStore(db_url)
    run_id = a_run(db_url)
    assert store.save_score(run_id, grade(score=None, kind="timeout"))
    assert store.settled_scores(run_id, ENDPOINT.key) == set()
    assert store.save_score(run_id, grade(score=None, kind="http"))  # still not settled: replaced
    assert store.save_score(run_id, grade(score=6.0))
    assert [(s.score, s.reason_kind) for s in store.scores(run_id)] == [(6.0, None)]


def test_verdicts_are_kept_per_order(db_url):
    store = SqlJudgeStore(db_url)
    run_id = a_run(db_url)

    def verdict(first, second, winner, kind=None):
        return PairVerdict("r1", first, second, "overall", WEAK, winner, reason_kind=kind, reason=kind and "why")

    assert store.save_verdict(run_id, verdict(LLM, STEERED, "first"))
    assert store.save_verdict(run_id, verdict(STEERED, LLM, None, "timeout"))
    assert not store.save_verdict(run_id, verdict(LLM, STEERED, "second"))
    assert store.save_verdict(run_id, verdict(STEERED, LLM, "tie"))
    found = store.verdicts(run_id)
    assert [(v.first, v.second, v.winner) for v in found] == [(LLM, STEERED, "first"), (STEERED, LLM, "tie")]
    assert found[1].preferred is None and found[0].preferred == LLM and found[0].judge == WEAK
    assert store.settled_verdicts(run_id, WEAK.key) == {(v.first_key, v.second_key, "overall") for v in found}
    assert store.settled_verdicts(run_id, ENDPOINT.key) == set()


def test_grades_go_with_their_run_and_refuse_an_unknown_one(db_url):
    store = SqlJudgeStore(db_url)
    run_id = a_run(db_url)
    store.save_score(run_id, grade())
    other = storage.create_run("other", {"task": "cogenesis"}, url=db_url)
    assert store.scores(other) == []
    with pytest.raises(ValueError, match="does not exist"):
        store.save_score(10_000, grade())
    with pytest.raises(ValueError, match="judge key is"):
        store.save_score(run_id, grade(judge=JudgeIdentity("m" * 400, "endpoint")))


def test_a_read_only_database_made_before_judges_has_no_grades(tmp_path, fresh_engines):
    path = tmp_path / "examples.db"
    url = f"sqlite:///{path}"
    run_id = a_run(url)
    storage.reset_engines()
    with sqlite3.connect(path) as connection:  # as the example runs' file was built before judges
        connection.execute("DROP TABLE judge_scores")
        connection.execute("DROP TABLE judge_verdicts")
        connection.execute("PRAGMA journal_mode = DELETE")
    read_only = SqlJudgeStore(storage.read_only_url(path, immutable=True))
    assert read_only.scores(run_id) == [] and read_only.verdicts(run_id) == []
    assert read_only.settled_scores(run_id, ENDPOINT.key) == set()
    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "judge_scores" not in tables  # reading created nothing
    # Opened for writing, the same file gains the tables and keeps its runs.
    writable = SqlJudgeStore(url)
    assert writable.save_score(run_id, grade())
    assert [s.score for s in writable.scores(run_id)] == [7.0]


def test_a_runs_results_are_copied_as_stored_onto_a_run_of_another_database(tmp_path, db_url):
    source = f"sqlite:///{tmp_path / 'judged.db'}"
    judged = SqlJudgeStore(source)
    run_id = a_run(source)
    judged.save_score(run_id, grade())
    judged.save_score(run_id, grade(judge=WEAK, score=4.0))
    judged.save_score(run_id, grade(point=STEERED, score=None, kind="timeout"))  # unsettled rows go as they are
    judged.save_verdict(run_id, PairVerdict("r1", LLM, STEERED, "overall", WEAK, "second", prompt="p", answer="[[B]]"))
    another = storage.create_run("another", {"task": "review"}, url=db_url)  # the copy's id is not its source's
    target_run = copy_run(run_id, source=source, target=db_url)
    assert target_run != run_id

    assert copy_judgements(run_id, target_run, source=source, target=db_url) == CopiedJudgements(3, 1)
    copied = SqlJudgeStore(db_url)
    assert copied.scores(target_run) == judged.scores(run_id)  # judge, weak flag, prompt, answer, reason and time
    assert copied.verdicts(target_run) == judged.verdicts(run_id)
    assert copied.settled_scores(target_run, WEAK.key) == judged.settled_scores(run_id, WEAK.key)
    assert copied.settled_scores(target_run, ENDPOINT.key) == judged.settled_scores(run_id, ENDPOINT.key)

    with pytest.raises(ValueError, match="already has judge results"):  # twice would mix two copies
        copy_judgements(run_id, target_run, source=source, target=db_url)
    with pytest.raises(ValueError, match="run 10000 does not exist in the source"):
        copy_judgements(10_000, target_run, source=source, target=db_url)
    with pytest.raises(ValueError, match="run 10000 does not exist in the target"):
        copy_judgements(run_id, 10_000, source=source, target=db_url)
    assert len(copied.scores(target_run)) == 3  # the refusals added nothing
    unjudged = storage.create_run("unjudged", {"task": "review"}, url=source)
    assert copy_judgements(unjudged, another, source=source, target=db_url) == CopiedJudgements(0, 0)
