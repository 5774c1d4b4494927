"""parse_history: every accepted format, every rejection with its location, the caps."""

from __future__ import annotations

import codecs
import copy
import json
import pickle

import pytest

from specsteer.data import history_upload
from specsteer.data.history import MAX_ITEM_CHARS, MAX_ITEMS, History, HistoryError, HistoryItem
from specsteer.data.history_upload import MAX_JSON_DEPTH, MAX_UPLOAD_BYTES, parse_history
from specsteer.data.sources import SAMPLE_USERS, sample_history_path, shared_data_path

REVIEW = {"description": "A kettle", "overall": "4.0", "reviewText": "Boils fast!", "summary": "Quick"}
WRITING = {"author": "sam", "content": "bread again", "id": "x1", "summary": "bread"}
ABSTRACT = {"abstract": "We propose things.", "id": "p1", "title": "Things", "year": "2020"}


def jsonl(*rows: object) -> str:
    return "\n".join(json.dumps(row) for row in rows) + "\n"


# --- accepted formats -------------------------------------------------------


def test_json_list_of_items():
    parsed = parse_history(json.dumps([REVIEW, REVIEW]), "h.json")
    assert parsed.schema == "review"
    assert len(parsed) == 2
    assert parsed.items[0].fields == REVIEW


def test_json_record_object_uses_profile_and_user_key():
    record = {"reviewerId": "U1", "input": "x", "output": "y", "profile": [REVIEW]}
    parsed = parse_history(json.dumps(record), "r.json")
    assert parsed == History(items=(HistoryItem(REVIEW),), schema="review", user_id="U1")


def test_json_object_with_only_profile():
    parsed = parse_history(json.dumps({"profile": [ABSTRACT]}))
    assert parsed.schema == "abstract"
    assert parsed.user_id is None


def test_jsonl_items_one_per_line_and_shared_author_is_the_user():
    parsed = parse_history(jsonl(WRITING, WRITING), "w.jsonl")
    assert parsed.schema == "writing"
    assert parsed.user_id == "sam"


def test_jsonl_record_file_uses_first_record():
    first = {"author": "a", "input": "i", "output": "o", "profile": [WRITING]}
    second = {"author": "b", "input": "i", "output": "o", "profile": [WRITING, WRITING]}
    parsed = parse_history(jsonl(first, second), "records.jsonl")
    assert parsed.user_id == "a"
    assert len(parsed) == 1


def test_extra_keys_are_ignored_and_numbers_become_text():
    item = dict(REVIEW, overall=5, bge_score=[0.3], asin="B00")
    parsed = parse_history(json.dumps([item]), "h.json")
    assert dict(parsed.items[0].fields) == dict(REVIEW, overall="5")


def test_null_and_blank_values_are_missing():
    item = {"reviewText": "Great", "summary": None, "description": "   "}
    parsed = parse_history(json.dumps([item]), "h.json")
    assert dict(parsed.items[0].fields) == {"reviewText": "Great"}


def test_csv_with_schema_columns():
    text = 'title,abstract,year\nFirst,"We show, with commas, that it works.",2019\nSecond,"Multi\nline",2020\n'
    parsed = parse_history(text, "a.csv")
    assert parsed.schema == "abstract"
    assert parsed.items[0].fields["abstract"] == "We show, with commas, that it works."
    assert parsed.items[1].fields["abstract"] == "Multi\nline"


def test_csv_with_single_text_column():
    parsed = parse_history("text\nhello there\n\ngeneral kenobi\n", "t.csv")
    assert parsed.schema == "plain"
    assert [item.text for item in parsed.items] == ["hello there", "general kenobi"]


def test_plain_text_paragraphs():
    parsed = parse_history(b"First para\nstill first.\n\n\n  Second.  \n\nThird\r\n", "notes.txt")
    assert [item.text for item in parsed.items] == ["First para\nstill first.", "Second.", "Third"]
    assert parsed.schema == "plain"


def test_utf8_bom_and_non_ascii_are_fine():
    parsed = parse_history("\ufeffCafé crème ☕\n".encode())
    assert parsed.items[0].text == "Café crème ☕"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_a_byte_order_mark_are_read(encoding):
    content = "summary,reviewText\r\nCafé,Crème brûlée ☕ every day\r\n"
    raw = content.encode(encoding)
    if not encoding.endswith(("-le", "-be")):
        assert raw[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # Python's codec writes the mark
    else:
        raw = (codecs.BOM_UTF16_LE if encoding.endswith("-le") else codecs.BOM_UTF16_BE) + raw
    parsed = parse_history(raw, filename="h.csv")
    assert parsed.schema == "review" and parsed.items[0].fields["reviewText"] == "Crème brûlée ☕ every day"


def test_broken_utf16_names_its_encoding():
    with pytest.raises(HistoryError, match=r"starts as UTF-16 but is not valid UTF-16"):
        parse_history(codecs.BOM_UTF16_LE + "ok".encode("utf-16-le") + b"\x00\xd8", filename="h.txt")


@pytest.mark.parametrize(
    ("content", "schema"),
    [
        (json.dumps([REVIEW]), "review"),
        (jsonl(WRITING, WRITING), "writing"),
        ("title,abstract\nT,A\n", "abstract"),
        ("just some prose\n\nand more", "plain"),
    ],
)
def test_format_is_sniffed_without_a_filename(content, schema):
    assert parse_history(content).schema == schema


@pytest.mark.parametrize("schema", sorted(SAMPLE_USERS))
def test_bundled_sample_histories_parse(schema):
    path = sample_history_path(schema)
    parsed = parse_history(path.read_bytes(), path.name)
    # A persona sample is a CoGenesis record; every other sample is named after its schema.
    assert parsed.schema == ("cogenesis" if schema.startswith("persona-") else schema)
    assert 4 <= len(parsed) <= 15 if schema.startswith("persona-") else 6 <= len(parsed) <= 15
    assert parse_history(path.read_bytes()) == parsed  # sniffing agrees with the extension


@pytest.mark.parametrize("task", ["review", "writing"])
def test_shared_longlamp_files_parse_as_first_record_history(task):
    path = shared_data_path(task)
    if path is None:
        pytest.skip("shared LongLaMP data not present")
    parsed = parse_history(path.read_bytes(), path.name)
    first = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])
    assert parsed.schema == task
    assert len(parsed) == len(first["profile"])
    assert parsed.user_id == first["reviewerId" if task == "review" else "author"]


# --- HistoryItem ------------------------------------------------------------


def test_history_item_is_hashable_and_immutable():
    first, second = HistoryItem({"text": "a"}), HistoryItem({"text": "a"})
    assert first == second and hash(first) == hash(second)
    assert len({first, second}) == 1
    with pytest.raises(TypeError, match="read-only"):
        first.fields["text"] = "b"  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        first.fields.update(text="b")


def test_history_item_fields_behave_like_a_plain_dict():
    item = HistoryItem({"text": "a", "id": "1"})
    assert isinstance(item.fields, dict)
    assert json.loads(json.dumps(item.fields)) == {"text": "a", "id": "1"}
    assert copy.deepcopy(item) == item == pickle.loads(pickle.dumps(item))
    assert hash(copy.deepcopy(item)) == hash(item)


def test_history_item_text_joins_content_fields_in_reading_order():
    item = HistoryItem({"reviewText": "Body", "overall": "5.0", "summary": "Head"})
    assert item.text == "Head\nBody"
    assert HistoryItem({"custom": "value"}).text == "value"


def test_history_item_rejects_non_string_values():
    with pytest.raises(TypeError):
        HistoryItem({"text": 3})  # type: ignore[dict-item]


# --- rejections name the place at fault -------------------------------------


@pytest.mark.parametrize(
    ("content", "filename", "expected"),
    [
        (b"ok line\n\xff\xfe broken\n", "h.txt", r"line 2: .*not valid UTF-8"),
        ('[{"text": "a"},\n {"text": ]', "h.json", r"line 2, column 11: malformed JSON"),
        ('{"text": "a"}\n{"text": "b"}\n{"text": \n', "h.jsonl", r"line 3, column \d+: malformed JSON"),
        ('[{"text": "a"}, 7]', "h.json", r"item 2: expected an object .* a number"),
        ('{"text": "a"}\n"loose string"\n', "h.jsonl", r"line 2: expected an object .* a string"),
        ('[{"overall": "5.0"}]', "h.json", r"item 1: has no text in any of the review fields"),
        ('[{"foo": "bar"}]', "h.json", r"item 1: none of its keys \['foo'\]"),
        ('[{"text": "a", "reviewText": "b"}]', "h.json", r"item 1: .* mix the review and plain schemas"),
        (json.dumps([REVIEW, WRITING]), "h.json", r"item 2 has writing fields but earlier items have review fields"),
        (jsonl(REVIEW, REVIEW, ABSTRACT), "h.jsonl", r"line 3 has abstract fields"),
        (json.dumps([{"text": ["list"]}]), "h.json", r"item 1: field 'text' must be text or a number, got a list"),
        (json.dumps([{"text": True}]), "h.json", r"field 'text' .* a boolean"),
        (
            json.dumps({"profile": [REVIEW, {"summary": "s", "overall": {"x": 1}}]}),
            "r.json",
            r"record, profile item 2: field 'overall'",
        ),
        (json.dumps({"profile": "nope"}), "r.json", r"record: field 'profile' must be a list"),
        (jsonl({"profile": [REVIEW]}, REVIEW), "r.jsonl", r"line 2 is a profile item but line 1 is a record"),
        ('{"items": []}', "h.json", r"expected a JSON list of profile items"),
        ("[]", "h.json", r"empty"),
        ("", "h.txt", r"empty"),
        ("\n\n  \n", None, r"empty"),
        ("title,abstract\n", "a.csv", r"CSV has a header but no rows"),
        ("foo,bar\n1,2\n", "a.csv", r"line 1: the CSV header \['foo', 'bar'\] names no single known schema"),
        ("title,abstract\nT,A\nT2,A2,extra\n", "a.csv", r"line 3: 3 values but the header has 2 columns"),
        ("title,abstract,year\nT,,2020\n,,2021\n", "a.csv", r"line 3: has no text in any of the abstract fields"),
        ("x", "history.pdf", r"unsupported file type '.pdf'"),
    ],
)
def test_bad_input_names_the_place(content, filename, expected):
    with pytest.raises(HistoryError, match=expected):
        parse_history(content, filename)


def test_history_error_is_a_value_error():
    assert issubclass(HistoryError, ValueError)


# --- caps --------------------------------------------------------------------


def test_oversized_upload_is_rejected_before_parsing(monkeypatch):
    def fail(*_args, **_kwargs):
        raise AssertionError("parsed an oversized upload")

    monkeypatch.setattr(history_upload, "_parse_plain", fail)
    with pytest.raises(HistoryError, match="larger than 5 MB"):
        parse_history(b"a" * (MAX_UPLOAD_BYTES + 1), "big.txt")
    with pytest.raises(HistoryError, match="larger than"):
        parse_history("é" * (MAX_UPLOAD_BYTES // 2 + 1), "big.txt")  # 2 bytes a character


def test_upload_of_exactly_the_size_limit_passes_the_size_check():
    # One 5 MB paragraph gets past the size check and is then stopped by the item cap.
    with pytest.raises(HistoryError, match="limit per item"):
        parse_history(b"a" * MAX_UPLOAD_BYTES, "big.txt")


def test_too_many_items_is_rejected_not_truncated():
    over = MAX_ITEMS + 1
    with pytest.raises(HistoryError, match=f"{over} items; the limit is {MAX_ITEMS}"):
        parse_history(json.dumps([{"text": "x"}] * over), "h.json")
    with pytest.raises(HistoryError, match=f"{over} lines"):
        parse_history(jsonl(*[{"text": "x"}] * over), "h.jsonl")
    with pytest.raises(HistoryError, match=f"{over} paragraphs"):
        parse_history("\n\n".join(["x"] * over), "h.txt")
    with pytest.raises(HistoryError, match=f"more than {MAX_ITEMS} rows"):
        parse_history("text\n" + "x\n" * over, "h.csv")
    assert len(parse_history("\n\n".join(["x"] * MAX_ITEMS), "h.txt")) == MAX_ITEMS


def test_overlong_item_is_rejected_with_its_place():
    long_text = "w" * (MAX_ITEM_CHARS + 1)
    with pytest.raises(HistoryError, match=rf"paragraph 2 \(line 3\): {MAX_ITEM_CHARS + 1} characters"):
        parse_history(f"short\n\n{long_text}\n", "h.txt")
    with pytest.raises(HistoryError, match="item 1: .* the limit per item"):
        parse_history(json.dumps([{"reviewText": long_text}]), "h.json")
    assert parse_history("w" * MAX_ITEM_CHARS, "h.txt").items[0].text == "w" * MAX_ITEM_CHARS


# --- hostile uploads: deep nesting and wide encodings without a mark -------------------------


@pytest.mark.parametrize("filename", ["deep.json", "deep.jsonl", None])
def test_json_nested_too_deep_is_refused_by_name(filename):
    deep = "[" * 10_000 + "]" * 10_000
    with pytest.raises(HistoryError, match=rf"line 1: the JSON is nested more than {MAX_JSON_DEPTH} levels"):
        parse_history(deep, filename)


def test_depth_counts_brackets_outside_strings_only():
    item = {"reviewText": "[" * 50 + "{" * 50, "summary": "brackets in text are text"}
    assert parse_history(json.dumps([item]), "h.json").items[0].fields["reviewText"].startswith("[[[")
    record = {"reviewerId": "u1", "profile": [REVIEW]}
    assert parse_history(json.dumps(record), "h.json").user_id == "u1"


def test_deep_line_of_a_jsonl_file_is_named():
    content = jsonl(WRITING) + "[" * 40 + "]" * 40 + "\n"
    with pytest.raises(HistoryError, match=r"line 2: the JSON is nested more than"):
        parse_history(content, "h.jsonl")


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_wide_encodings_without_a_byte_order_mark_are_read(encoding):
    raw = json.dumps([REVIEW, {**REVIEW, "summary": "Crème brûlée ☕"}], ensure_ascii=False).encode(encoding)
    assert not raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    parsed = parse_history(raw, "h.json")  # was: "malformed JSON"
    assert parsed.items[1].fields["summary"] == "Crème brûlée ☕"


def test_broken_utf16_without_a_mark_names_the_encoding_it_looks_like():
    raw = "one paragraph\n\nanother".encode("utf-16-le") + b"\x00\xd8"
    with pytest.raises(HistoryError, match=r"looks like UTF-16 LE without a byte order mark but is not valid"):
        parse_history(raw, "h.txt")
