"""Benchmark records: LongLaMP (Hugging Face schema and the CoSteer re-release) and LaMP.

``load_records`` reads LongLaMP-style records — fields ``input``, ``output``,
``profile``, optional ``top_5`` and ``id``, and the task's user key
(``reviewerId`` / ``name`` / ``author``). The CoSteer re-release in
``shared/data/longlamp/`` is this schema plus a ``bge_score`` per profile item
(ignored). Files may be JSONL, a JSON list, or parquet (needs pyarrow or
fastparquet); JSON and JSONL in UTF-8, UTF-16 or UTF-32, with or without a byte
order mark, read as histories are (``specsteer.data.record_files`` reads the file). The task is the one given,
or else detected from the first profile item's keys; all records of a file must share it. Where records are
found (the bundled samples, the shared data folder) is ``specsteer.data.sources``.

``split``: for a directory, the file ``{path}/{split}.jsonl`` (or ``.json`` /
``.parquet``) is read — the layout ``{config}/{split}.jsonl`` of a Hugging Face
export, with ``path`` the config folder. For a file, records are kept whose
``split`` field equals ``split``; a record without that field is an error.

Records come back in file order, filtered by ``split`` and ``user``, at most
``limit`` of them (reading stops once ``limit`` are found). Every selected
record is validated in full before anything is returned; the message of a
:class:`~specsteer.data.record_files.DataError` names the file, the line or record number (1-based), the
record's id and the field.

``load_lamp`` reads LaMP-4/5/7: a questions file (JSON list of ``{id, input,
profile}``) and an outputs file (``{"task": "LaMP_4", "golds": [{id,
output}]}``). LaMP has no user key, so ``Record.user_id`` is None.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specsteer.data.facts import split_private_facts
from specsteer.data.history import USER_KEYS, HistoryError, HistoryItem, build_items, persona_history
from specsteer.data.json_limits import RECORDS_LIMITS, JsonLimits
from specsteer.data.record_files import DataError, load_json, read_raw_records, split_file

LONGLAMP_TASKS = ("review", "abstract", "writing")
COGENESIS_TASK = "cogenesis"
EVALUATION_TASKS = (*LONGLAMP_TASKS, COGENESIS_TASK)  # the tasks the evaluation grid reads records of
COGENESIS_SPLITS = ("dev", "test")
LAMP_TASK_NAMES = {"LaMP_4": "lamp4", "LaMP_5": "lamp5", "LaMP_7": "lamp7"}


@dataclass(frozen=True)
class Record:
    id: str
    task: str
    user_id: str | None
    input: str
    output: str
    profile: tuple[HistoryItem, ...]
    top_5: tuple[HistoryItem, ...] | None = None
    user_profile: str | None = None  # CoGenesis: the user profile text (private, like ``profile``)
    private_facts: tuple[str, ...] = ()  # CoGenesis: the profile's Privacy_info facts, the privacy ground truth


def load_records(
    path: str | os.PathLike[str],
    task: str | None = None,
    split: str | None = None,
    user: str | None = None,
    limit: int | None = None,
    json_limits: JsonLimits = RECORDS_LIMITS,
) -> list[Record]:
    """LongLaMP records from a file or a ``{config}/{split}`` folder (see module doc). ``json_limits``: the
    depth, size and item count a JSON or JSONL file may have (DataError beyond them)."""
    if task is not None and task not in LONGLAMP_TASKS:
        raise ValueError(f"unknown LongLaMP task {task!r}; choose one of {', '.join(LONGLAMP_TASKS)}")
    _check_limit(limit)
    source = Path(path)
    file = split_file(source, split) if source.is_dir() else source
    split_column = split if not source.is_dir() else None
    raw_records = read_raw_records(file, json_limits)
    if limit == 0:
        return []
    records: list[Record] = []
    file_is_empty = True
    for index, (place, raw) in enumerate(raw_records):
        file_is_empty = False
        where = f"{file.name} {place}"
        record = _expect_object(raw, where)
        where = f"{where} (id {_raw_id(record, index)})"
        if split_column is not None and _field(record, "split", where) != split_column:
            continue
        record_task = task or (records[0].task if records else _detect_task(record, where))
        if user is not None and _user_of(record, record_task, where) != str(user):
            continue
        records.append(_longlamp_record(record, record_task, index, where))
        if len(records) == limit:
            break
    if file_is_empty:
        raise DataError(f"{file.name}: the file has no records")
    return records


def load_lamp(
    questions_path: str | os.PathLike[str],
    outputs_path: str | os.PathLike[str],
    task: str | None = None,
    limit: int | None = None,
) -> list[Record]:
    """LaMP-4/5/7 records: questions joined with their gold outputs by id, in question order."""
    if task is not None and task not in LAMP_TASK_NAMES.values():
        raise ValueError(f"unknown LaMP task {task!r}; choose one of {', '.join(LAMP_TASK_NAMES.values())}")
    _check_limit(limit)
    questions_file, outputs_file = Path(questions_path), Path(outputs_path)
    questions = load_json(questions_file)
    if not isinstance(questions, list) or not questions:
        raise DataError(f"{questions_file.name}: expected a non-empty JSON list of questions")
    outputs = _expect_object(load_json(outputs_file), outputs_file.name)
    lamp_task = _lamp_task(outputs, outputs_file.name, task, questions[0], questions_file.name)
    golds = _gold_outputs(outputs, outputs_file.name)
    selected = questions if limit is None else questions[:limit]
    records = []
    for index, raw in enumerate(selected):
        where = f"{questions_file.name} question {index + 1}"
        question = _expect_object(raw, where)
        record_id = _raw_id(question, index)
        where = f"{where} (id {record_id})"
        if record_id not in golds:
            raise DataError(f"{where}: no gold output with this id in {outputs_file.name}")
        records.append(
            Record(
                id=record_id,
                task=lamp_task,
                user_id=None,
                input=_text_field(question, "input", where),
                output=golds[record_id],
                profile=_items(question, "profile", lamp_task, where),
            )
        )
    return records


def load_cogenesis(
    path: str | os.PathLike[str], limit: int | None = None, json_limits: JsonLimits = RECORDS_LIMITS
) -> list[Record]:
    """CoGenesis records from a JSON list as published (see module doc), in file order."""
    _check_limit(limit)
    file = Path(path)
    document = load_json(file, json_limits)
    if not isinstance(document, list) or not document:
        raise DataError(f"{file.name}: expected a non-empty JSON list of CoGenesis records")
    records: list[Record] = []
    for index, raw in enumerate(document[:limit] if limit is not None else document):
        where = f"{file.name} record {index + 1}"
        record = _expect_object(raw, where)
        record_id = str(record["tid"]) if record.get("tid") is not None else str(index)
        where = f"{where} (tid {record_id})"
        task, reference = _conversation(record, where)
        try:
            persona = persona_history(record, where, enforce_limits=False)
        except HistoryError as error:
            raise DataError(str(error)) from None
        facts = split_private_facts(persona.profile or "")
        if not facts:
            raise DataError(f"{where}: field 'additional_profile' has no 'Privacy_info:' line with facts")
        records.append(
            Record(
                id=record_id,
                task=COGENESIS_TASK,
                user_id=_persona_name(persona.profile or ""),
                input=task,
                output=reference,
                profile=persona.items,
                user_profile=persona.profile,
                private_facts=facts,
            )
        )
    return records


def _conversation(record: dict, where: str) -> tuple[str, str]:
    """The task (the user's turn) and the reference (the assistant's) of a CoGenesis record."""
    turns = _field(record, "conversations", where)
    if not isinstance(turns, list) or len(turns) < 2:
        raise DataError(f"{where}: field 'conversations' must hold the user's turn and the assistant's")
    texts = {}
    for number, turn in enumerate(turns[:2], start=1):
        turn = _expect_object(turn, f"{where}, conversation turn {number}")
        texts[turn.get("from")] = _text_field(turn, "value", f"{where}, conversation turn {number}")
    if set(texts) != {"user", "assistant"}:
        raise DataError(f"{where}: field 'conversations' must start with a 'user' turn and an 'assistant' turn")
    return texts["user"], texts["assistant"]


def _persona_name(profile: str) -> str | None:
    for line in profile.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip().lower() == "name" and value.strip():
            return value.strip()
    return None


def load_task_records(
    path: str | os.PathLike[str], task: str, limit: int | None = None, json_limits: JsonLimits = RECORDS_LIMITS
) -> list[Record]:
    """The records of one evaluation task: CoGenesis's loader for ``cogenesis``, LongLaMP's otherwise."""
    if task == COGENESIS_TASK:
        return load_cogenesis(path, limit=limit, json_limits=json_limits)
    return load_records(path, task, limit=limit, json_limits=json_limits)


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")


def _expect_object(raw: object, where: str) -> dict:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    return raw


def _raw_id(record: dict, index: int) -> str:
    """The record's id, or its 0-based position in the file when it has none."""
    value = record.get("id")
    return str(index) if value is None else str(value)


def _field(record: dict, key: str, where: str) -> object:
    if key not in record:
        raise DataError(f"{where}: field {key!r} is missing")
    return record[key]


def _text_field(record: dict, key: str, where: str) -> str:
    value = _field(record, key, where)
    if not isinstance(value, str):
        raise DataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise DataError(f"{where}: field {key!r} is empty")
    return value


def _detect_task(record: dict, where: str) -> str:
    profile = _field(record, "profile", where)
    if not isinstance(profile, list) or not profile:
        raise DataError(f"{where}: field 'profile' must be a non-empty list")
    try:
        schema, _ = build_items(profile[:1], where="profile item", enforce_limits=False)
    except HistoryError as error:
        raise DataError(f"{where}: {error}") from None
    if schema not in LONGLAMP_TASKS:
        raise DataError(f"{where}: profile items look like {schema} texts, not review, abstract or writing items")
    return schema


def _user_of(record: dict, task: str, where: str) -> str | None:
    key = USER_KEYS[task]
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return str(value)


def _longlamp_record(record: dict, task: str, index: int, where: str) -> Record:
    detected = _detect_task(record, where)
    if detected != task:
        raise DataError(f"{where}: field 'profile' holds {detected} items, but the task is {task}")
    return Record(
        id=_raw_id(record, index),
        task=task,
        user_id=_user_of(record, task, where),
        input=_text_field(record, "input", where),
        output=_text_field(record, "output", where),
        profile=_items(record, "profile", task, where),
        top_5=_optional_items(record, "top_5", task, where),
    )


def _items(record: dict, key: str, schema: str, where: str) -> tuple[HistoryItem, ...]:
    value = _field(record, key, where)
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: field {key!r} must be a non-empty list")
    try:
        _, items = build_items(value, schema=schema, where=f"field {key!r} item", enforce_limits=False)
    except HistoryError as error:
        raise DataError(f"{where}: {error}") from None
    return items


def _optional_items(record: dict, key: str, schema: str, where: str) -> tuple[HistoryItem, ...] | None:
    if record.get(key) is None:
        return None
    if record[key] == []:
        return ()
    return _items(record, key, schema, where)


def _lamp_task(outputs: dict, outputs_name: str, task: str | None, first_question: object, questions_name: str) -> str:
    named = outputs.get("task")
    if named is not None and named not in LAMP_TASK_NAMES:
        supported = ", ".join(LAMP_TASK_NAMES)
        raise DataError(f"{outputs_name}: field 'task' is {named!r}; supported LaMP tasks are {supported}")
    found = (LAMP_TASK_NAMES.get(named) if named is not None else None) or _detect_lamp_task(
        first_question, f"{questions_name} question 1"
    )
    if task is not None and task != found:
        raise DataError(f"{outputs_name}: the data is {found}, but task={task!r} was asked for")
    return found


def _detect_lamp_task(question: object, where: str) -> str:
    profile = _field(_expect_object(question, where), "profile", where)
    first = profile[0] if isinstance(profile, list) and profile else None
    keys = set(first) if isinstance(first, dict) else set()
    if "abstract" in keys:
        return "lamp5"
    if "title" in keys:
        return "lamp4"
    if "text" in keys:
        return "lamp7"
    raise DataError(f"{where}: field 'profile' does not look like LaMP-4, 5 or 7 items; name the task")


def _gold_outputs(outputs: dict, outputs_name: str) -> dict[str, str]:
    golds = _field(outputs, "golds", outputs_name)
    if not isinstance(golds, list):
        raise DataError(f"{outputs_name}: field 'golds' must be a list")
    by_id: dict[str, str] = {}
    for number, raw in enumerate(golds, start=1):
        where = f"{outputs_name} gold {number}"
        gold = _expect_object(raw, where)
        gold_id = str(_field(gold, "id", where))
        if gold_id in by_id:
            raise DataError(f"{where} (id {gold_id}): the id appears twice")
        by_id[gold_id] = _text_field(gold, "output", f"{where} (id {gold_id})")
    return by_id
