"""Dataset loaders: LongLaMP schema, CoSteer re-release, LaMP; selection and validation."""

from __future__ import annotations

import codecs
import importlib.util
import json
from pathlib import Path

import pytest

from specsteer.data.datasets import LONGLAMP_TASKS, Record, load_lamp, load_records
from specsteer.data.history import HistoryItem
from specsteer.data.record_files import DataError
from specsteer.data.sources import bundled_sample_path, shared_data_path

REVIEW_ITEM = {"description": "A kettle", "overall": "4.0", "reviewText": "Boils fast!", "summary": "Quick"}
WRITING_ITEM = {"author": "sam", "content": "Rye again.", "id": "a", "summary": "Bread"}


def review_record(user: str, number: int, **changes: object) -> dict:
    record = {
        "reviewerId": user,
        "id": number,
        "input": f"Write review {number}.",
        "output": f"Review {number}.",
        "profile": [REVIEW_ITEM, dict(REVIEW_ITEM, summary="Slow")],
    }
    record.update(changes)
    return record


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def review_file(tmp_path: Path) -> Path:
    users = ["U1", "U2", "U1", "U3", "U1"]
    return write_jsonl(tmp_path / "reviews.jsonl", [review_record(user, n) for n, user in enumerate(users)])


# --- formats ----------------------------------------------------------------


@pytest.mark.parametrize("task", LONGLAMP_TASKS)
def test_bundled_samples_load(task):
    records = load_records(bundled_sample_path(task))
    assert len(records) == 3
    assert {record.task for record in records} == {task}
    for record in records:
        assert 5 <= len(record.profile) <= 8
        assert record.output and record.input and record.user_id
        assert record.top_5 is None
    assert bundled_sample_path(task).stat().st_size < 12_000


@pytest.mark.parametrize("task", ["review", "writing"])
def test_shared_costeer_release_loads(task):
    path = shared_data_path(task)
    if path is None:
        pytest.skip("shared LongLaMP data not present")
    records = load_records(path)
    first = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])
    assert len(records) == 12
    assert [record.id for record in records] == [str(n) for n in range(12)]
    assert records[0].user_id == first["reviewerId" if task == "review" else "author"]
    assert records[0].input == first["input"] and records[0].output == first["output"]
    assert len(records[0].profile) == len(first["profile"])
    assert records[0].top_5 == records[0].profile[:5]
    assert "bge_score" not in records[0].profile[0].fields
    assert load_records(path, task=task) == records


def test_shared_data_path_follows_the_environment(tmp_path, monkeypatch):
    (tmp_path / "longlamp").mkdir()
    target = tmp_path / "longlamp" / "longlamp_review.jsonl"
    target.write_text("")
    monkeypatch.setenv("SPECSTEER_SHARED_DATA", str(tmp_path))
    assert shared_data_path("review") == target
    monkeypatch.setenv("SPECSTEER_SHARED_DATA", str(tmp_path / "longlamp"))
    assert shared_data_path("review") == target
    with pytest.raises(ValueError):
        shared_data_path("poetry")


def test_json_list_file(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([review_record("U1", 0), review_record("U2", 1)]))
    records = load_records(path)
    assert [(record.id, record.user_id) for record in records] == [("0", "U1"), ("1", "U2")]
    assert records[0] == Record(
        id="0",
        task="review",
        user_id="U1",
        input="Write review 0.",
        output="Review 0.",
        profile=(HistoryItem(REVIEW_ITEM), HistoryItem(dict(REVIEW_ITEM, summary="Slow"))),
    )


def test_record_without_id_gets_its_position(tmp_path):
    rows = [review_record("U1", 0), review_record("U1", 1)]
    for row in rows:
        del row["id"]
    assert [record.id for record in load_records(write_jsonl(tmp_path / "r.jsonl", rows))] == ["0", "1"]


def test_split_folder_layout(tmp_path):
    config = tmp_path / "product_review_user"
    config.mkdir()
    write_jsonl(config / "test.jsonl", [review_record("U1", 7)])
    write_jsonl(config / "val.jsonl", [review_record("U2", 8)])
    assert [record.id for record in load_records(config, split="test")] == ["7"]
    with pytest.raises(DataError, match="no train.jsonl.*holds test.jsonl, val.jsonl"):
        load_records(config, split="train")
    with pytest.raises(DataError, match="is a folder: pass split="):
        load_records(config)


def test_split_column(tmp_path):
    rows = [
        review_record("U1", 0, split="train"),
        review_record("U1", 1, split="test"),
        review_record("U2", 2, split="test"),
    ]
    path = write_jsonl(tmp_path / "all.jsonl", rows)
    assert [record.id for record in load_records(path, split="test")] == ["1", "2"]
    with pytest.raises(DataError, match=r"line 1 \(id 0\): field 'split' is missing"):
        load_records(write_jsonl(tmp_path / "nosplit.jsonl", [review_record("U1", 0)]), split="test")


def test_parquet_without_an_engine_says_what_to_install(tmp_path):
    if importlib.util.find_spec("pyarrow") or importlib.util.find_spec("fastparquet"):
        pytest.skip("a parquet engine is installed")
    path = tmp_path / "test.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(DataError, match="test.parquet: reading parquet needs pyarrow"):
        load_records(path)


# --- selection ----------------------------------------------------------------


def test_selection_by_user_keeps_file_order(review_file):
    assert [record.id for record in load_records(review_file, user="U1")] == ["0", "2", "4"]
    assert load_records(review_file, user="nobody") == []


def test_limit(review_file):
    assert [record.id for record in load_records(review_file, limit=2)] == ["0", "1"]
    assert [record.id for record in load_records(review_file, user="U1", limit=2)] == ["0", "2"]
    assert load_records(review_file, limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        load_records(review_file, limit=-1)


def test_reading_stops_at_the_limit(tmp_path):
    rows = [review_record("U1", 0), review_record("U1", 1)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "{broken\n")
    assert len(load_records(path, limit=2)) == 2
    with pytest.raises(DataError, match="line 3"):
        load_records(path)


def test_unselected_records_are_not_validated(tmp_path):
    rows = [review_record("U1", 0), review_record("U2", 1, output=None)]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    assert len(load_records(path, user="U1")) == 1
    with pytest.raises(DataError, match=r"line 2 \(id 1\): field 'output' must be a string"):
        load_records(path)


# --- validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("not an object", r"r.jsonl line 2: expected a JSON object"),
        (review_record("U", 5, input=None) | {"input": 3}, r"line 2 \(id 5\): field 'input' must be a string, got int"),
        (
            {k: v for k, v in review_record("U", 5).items() if k != "output"},
            r"line 2 \(id 5\): field 'output' is missing",
        ),
        (review_record("U", 5, output="  "), r"line 2 \(id 5\): field 'output' is empty"),
        (review_record("U", 5, profile=[]), r"line 2 \(id 5\): field 'profile' must be a non-empty list"),
        (review_record("U", 5, profile="x"), r"line 2 \(id 5\): field 'profile' must be a non-empty list"),
        (
            review_record("U", 5, profile=[REVIEW_ITEM, "x"]),
            r"line 2 \(id 5\): field 'profile' item 2: expected an object",
        ),
        (
            review_record("U", 5, profile=[REVIEW_ITEM, {"overall": "1"}]),
            r"line 2 \(id 5\): field 'profile' item 2: has no text",
        ),
        (
            review_record("U", 5, top_5=[{"summary": {"a": 1}}]),
            r"line 2 \(id 5\): field 'top_5' item 1: field 'summary'",
        ),
        (
            review_record("U", 5, profile=[WRITING_ITEM]),
            r"line 2 \(id 5\): field 'profile' holds writing items, but the task is review",
        ),
        (review_record("U", 5, profile=[{"text": "plain"}]), r"line 2 \(id 5\): profile items look like plain texts"),
        (review_record(["U"], 5), r"line 2 \(id 5\): field 'reviewerId' must be a string"),
    ],
)
def test_bad_records_name_the_record_and_field(tmp_path, row, expected):
    path = write_jsonl(tmp_path / "r.jsonl", [review_record("U1", 0), row])
    with pytest.raises(DataError, match=expected):
        load_records(path)


def test_nothing_is_returned_when_a_later_record_is_bad(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [review_record("U1", 0), review_record("U1", 1, input="")])
    with pytest.raises(DataError, match=r"id 1\): field 'input' is empty"):
        load_records(path)


def test_malformed_and_undecodable_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(json.dumps(review_record("U1", 0)).encode() + b'\n\n{"id": \n')
    with pytest.raises(DataError, match=r"r.jsonl line 3, column \d+: malformed JSON"):
        load_records(path)
    path.write_bytes(json.dumps(review_record("U1", 0)).encode() + b"\n\xff\n")
    with pytest.raises(DataError, match="line 2: not valid UTF-8"):
        load_records(path)


# Text as Windows editors save it: UTF-16 (Notepad's "Unicode") and UTF-32, with or without a byte order mark,
# and UTF-8 with its mark; read as histories are (specsteer.data.text_encoding).
ENCODINGS = [
    ("utf-16-le", codecs.BOM_UTF16_LE),
    ("utf-16-le", b""),
    ("utf-16-be", codecs.BOM_UTF16_BE),
    ("utf-16-be", b""),
    ("utf-32-le", codecs.BOM_UTF32_LE),
    ("utf-32-be", b""),
    ("utf-8", codecs.BOM_UTF8),
]


@pytest.mark.parametrize(("encoding", "mark"), ENCODINGS)
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_records_files_in_utf16_utf32_and_utf8_with_a_mark_are_read(tmp_path, encoding, mark, suffix):
    rows = [review_record("U1", 0), review_record("U2", 1, input="Write about a crème brûlée ☕.")]
    text = (
        "".join(json.dumps(row, ensure_ascii=False) + "\r\n" for row in rows)
        if suffix == ".jsonl"
        else json.dumps(rows)
    )
    path = tmp_path / f"records{suffix}"
    path.write_bytes(mark + text.encode(encoding))
    records = load_records(path)
    assert [record.user_id for record in records] == ["U1", "U2"]
    assert records[1].input == "Write about a crème brûlée ☕."


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            codecs.BOM_UTF16_LE + "[{}".encode("utf-16-le") + b"\x00\xd8",
            r"r.json: the file starts as UTF-16 but is not valid UTF-16",
        ),
        (
            '[{"input": "a record"}]'.encode("utf-16-le") + b"\x00\xd8",
            r"r.json: the file looks like UTF-16 LE without a byte order mark but is not valid",
        ),
        (b'[{"a": "\xff"}]', r"r.json: line 1: not valid UTF-8 \(byte 8\)"),
    ],
)
def test_a_records_file_that_does_not_decode_says_which_encoding_it_looked_like(tmp_path, raw, message):
    path = tmp_path / "r.json"
    path.write_bytes(raw)
    with pytest.raises(DataError, match=message):
        load_records(path)
    (tmp_path / "r.jsonl").write_bytes(raw)
    with pytest.raises(DataError, match=message.replace("json", "jsonl", 1)):
        load_records(tmp_path / "r.jsonl")


def test_file_level_errors(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_records(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="empty.jsonl: the file has no records"):
        load_records(tmp_path / "empty.jsonl")
    (tmp_path / "obj.json").write_text("{}")
    with pytest.raises(DataError, match="expected a JSON list of records"):
        load_records(tmp_path / "obj.json")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="unsupported file type '.csv'"):
        load_records(tmp_path / "data.csv")
    with pytest.raises(ValueError, match="unknown LongLaMP task"):
        load_records(tmp_path / "obj.json", task="lamp4")


def test_mixed_tasks_in_one_file(tmp_path):
    writing = {"author": "sam", "id": 1, "input": "Post.", "output": "Text.", "profile": [WRITING_ITEM]}
    path = write_jsonl(tmp_path / "mixed.jsonl", [review_record("U1", 0), writing])
    with pytest.raises(
        DataError, match=r"line 2 \(id 1\): field 'profile' holds writing items, but the task is review"
    ):
        load_records(path)


def test_explicit_task_must_match_the_data(tmp_path, review_file):
    with pytest.raises(DataError, match="holds review items, but the task is writing"):
        load_records(review_file, task="writing")


# --- LaMP -----------------------------------------------------------------------------


def write_lamp(tmp_path: Path, task: str | None, questions: list[dict], golds: list[dict]) -> tuple[Path, Path]:
    questions_path = tmp_path / "dev_questions.json"
    outputs_path = tmp_path / "dev_outputs.json"
    questions_path.write_text(json.dumps(questions))
    outputs = {"golds": golds} if task is None else {"task": task, "golds": golds}
    outputs_path.write_text(json.dumps(outputs))
    return questions_path, outputs_path


NEWS_QUESTIONS = [
    {
        "id": "110",
        "input": "Generate a headline for the following article: Rain.",
        "profile": [{"id": "1100", "text": "Storms hit.", "title": "Wet week"}],
    },
    {
        "id": "111",
        "input": "Generate a headline for the following article: Sun.",
        "profile": [
            {"id": "1110", "text": "Clear skies.", "title": "Dry days"},
            {"id": "1111", "text": "Hot.", "title": "Heat"},
        ],
    },
]
NEWS_GOLDS = [{"id": "111", "output": "Sunny"}, {"id": "110", "output": "Rainy"}]


def test_lamp4_questions_join_golds_by_id(tmp_path):
    records = load_lamp(*write_lamp(tmp_path, "LaMP_4", NEWS_QUESTIONS, NEWS_GOLDS))
    assert [(record.id, record.output, record.task) for record in records] == [
        ("110", "Rainy", "lamp4"),
        ("111", "Sunny", "lamp4"),
    ]
    assert records[1].profile[1].fields == {"id": "1111", "text": "Hot.", "title": "Heat"}
    assert records[0].user_id is None and records[0].top_5 is None
    assert len(load_lamp(*write_lamp(tmp_path, "LaMP_4", NEWS_QUESTIONS, NEWS_GOLDS), limit=1)) == 1


@pytest.mark.parametrize(
    ("profile", "task"),
    [
        ([{"id": "1", "text": "t", "title": "T"}], "lamp4"),
        ([{"id": "1", "abstract": "We.", "title": "T"}], "lamp5"),
        ([{"id": "1", "text": "tweet"}], "lamp7"),
    ],
)
def test_lamp_task_detected_without_a_task_name(tmp_path, profile, task):
    questions = [{"id": "1", "input": "Do it.", "profile": profile}]
    records = load_lamp(*write_lamp(tmp_path, None, questions, [{"id": "1", "output": "Done"}]))
    assert records[0].task == task


def test_lamp_errors(tmp_path):
    with pytest.raises(DataError, match=r"question 2 \(id 111\): no gold output"):
        load_lamp(*write_lamp(tmp_path, "LaMP_4", NEWS_QUESTIONS, NEWS_GOLDS[1:]))
    with pytest.raises(DataError, match="'LaMP_2'; supported LaMP tasks are LaMP_4, LaMP_5, LaMP_7"):
        load_lamp(*write_lamp(tmp_path, "LaMP_2", NEWS_QUESTIONS, NEWS_GOLDS))
    with pytest.raises(DataError, match="the data is lamp4, but task='lamp7'"):
        load_lamp(*write_lamp(tmp_path, "LaMP_4", NEWS_QUESTIONS, NEWS_GOLDS), task="lamp7")
    with pytest.raises(DataError, match=r"gold 3 \(id 111\): the id appears twice"):
        load_lamp(*write_lamp(tmp_path, "LaMP_4", NEWS_QUESTIONS, NEWS_GOLDS + NEWS_GOLDS[:1]))
    broken = [dict(NEWS_QUESTIONS[0]), dict(NEWS_QUESTIONS[1], profile=[{"id": "9", "text": "  "}])]
    with pytest.raises(DataError, match=r"question 2 \(id 111\): field 'profile' item 1: has no text"):
        load_lamp(*write_lamp(tmp_path, "LaMP_4", broken, NEWS_GOLDS))
    with pytest.raises(DataError, match="field 'golds' is missing"):
        questions_path, outputs_path = write_lamp(tmp_path, "LaMP_4", NEWS_QUESTIONS, NEWS_GOLDS)
        outputs_path.write_text(json.dumps({"task": "LaMP_4"}))
        load_lamp(questions_path, outputs_path)
