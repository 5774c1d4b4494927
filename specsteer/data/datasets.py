"""Benchmark records: LongLaMP (Hugging Face schema and the CoSteer re-release) and LaMP.

``load_records`` reads LongLaMP-style records — fields ``input``, ``output``,
``profile``, optional ``top_5`` and ``id``, and the task's user key
(``reviewerId`` / ``name`` / ``author``). The CoSteer re-release in
``shared/data/longlamp/`` is this schema plus a ``bge_score`` per profile item
(ignored). Files may be JSONL, a JSON list, or parquet (needs pyarrow or
fastparquet); JSON and JSONL in UTF-8, UTF-16 or UTF-32, with or without a byte
order mark, read as histories are (``specsteer.data.text_encoding``). The task is the one given, or else detected from the first
profile item's keys; all records of a file must share it.

``split``: for a directory, the file ``{path}/{split}.jsonl`` (or ``.json`` /
``.parquet``) is read — the layout ``{config}/{split}.jsonl`` of a Hugging Face
export, with ``path`` the config folder. For a file, records are kept whose
``split`` field equals ``split``; a record without that field is an error.

Records come back in file order, filtered by ``split`` and ``user``, at most
``limit`` of them (reading stops once ``limit`` are found). Every selected
record is validated in full before anything is returned; the message of a
:class:`DataError` names the file, the line or record number (1-based), the
record's id and the field.

``load_lamp`` reads LaMP-4/5/7: a questions file (JSON list of ``{id, input,
profile}``) and an outputs file (``{"task": "LaMP_4", "golds": [{id,
output}]}``). LaMP has no user key, so ``Record.user_id`` is None.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from specsteer.data.facts import split_private_facts
from specsteer.data.history import USER_KEYS, HistoryError, HistoryItem, build_items, persona_history
from specsteer.data.json_limits import RECORDS_LIMITS, JsonLimits, too_deep
from specsteer.data.text_encoding import SNIFF_BYTES, UTF8, TextEncodingError, decode_text, encoding_of, is_utf8, not_utf8

LONGLAMP_TASKS = ("review", "abstract", "writing")
COGENESIS_TASK = "cogenesis"
EVALUATION_TASKS = (*LONGLAMP_TASKS, COGENESIS_TASK)  # the tasks the evaluation grid reads records of
COGENESIS_SPLITS = ("dev", "test")
LAMP_TASK_NAMES = {"LaMP_4": "lamp4", "LaMP_5": "lamp5", "LaMP_7": "lamp7"}

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO_ROOT / "assets" / "samples"
# Evaluation runs the docs cite, read-only beside the user's own in the app's Dashboard and the default traces of
# `specsteer gpu-profile` (built by benchmarks/build_example_runs.py).
EXAMPLE_RUNS_DB = REPO_ROOT / "assets" / "example_runs.db"
@dataclass(frozen=True)
class SampleUser:
    """A bundled synthetic user (assets/samples): the history file and an input that suits it."""

    file: str
    label: str  # how the app's sample picker names the user
    input_text: str


# The one catalogue of sample users. The first four are CoGenesis personas from the dev split (records as
# published: a profile and four texts, private; the input is the record's task).
SAMPLE_USERS: dict[str, SampleUser] = {
    'persona-hr': SampleUser(
        'persona_hr_manager.json',
        'Gregory, HR manager (persona, CoGenesis)',
        'Write an article on balancing work and family life: Share personal insights and professional advice on how working remotely on Fridays has improved your work-life balance and family relationships.',
    ),
    'persona-principal': SampleUser(
        'persona_retired_principal.json',
        'Martha, retired school principal (persona, CoGenesis)',
        'Heirloom Tomato Article: Prepare an informative article for your gardening club, detailing the process of cultivating heirloom tomatoes, your personal tips, and the emotional significance of this tradition.',
    ),
    'persona-developer': SampleUser(
        'persona_software_developer.json',
        'Ava, software developer (persona, CoGenesis)',
        'Write a Spanish language learning article: She can share her experience learning Spanish, the apps she uses, methodologies, study routine, and how it might help in her professional life, possibly for internal cultural diversification materials.',
    ),
    'persona-gamedev': SampleUser(
        'persona_game_developer.json',
        'Alex, indie game developer (persona, CoGenesis)',
        'Creative Patch Notes: Craft creative patch notes for your latest game update.',
    ),
    'review': SampleUser(
        'review_user.jsonl',
        'Gadget reviewer (review, JSONL)',
        'Generate the review text written by a reviewer who has given an overall rating of "5.0" for a product with description "Portable power bank, 20000 mAh, two USB-C ports, 65 W fast charging.". The summary of the review text is "Charges my laptop twice!".',
    ),
    'writing': SampleUser(
        'writing_user.json',
        'Home baker (writing, JSON)',
        'Generate the content for a reddit post first time making croissants',
    ),
    'abstract': SampleUser(
        'abstract_user.csv',
        'Sensor-network researcher (abstract, CSV)',
        'Generate an abstract for the title "Detecting Faulty Soil Sensors from Neighbour Agreement" using the following items: 1. sensor faults 2. spatial correlation 3. fault detection accuracy',
    ),
    'plain': SampleUser(
        'plain_user.txt',
        'Hiking club organiser (plain text)',
        "Write a short message to the club announcing Sunday's lake walk and what to bring.",
    ),
}
DEFAULT_SAMPLE = "persona-hr"
SHARED_DATA_ENV = "SPECSTEER_SHARED_DATA"
_SPLIT_SUFFIXES = (".jsonl", ".json", ".parquet")


class DataError(ValueError):
    """A dataset file that cannot be used; the message names the record and field."""


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
    file = _split_file(source, split) if source.is_dir() else source
    split_column = split if not source.is_dir() else None
    raw_records = _read_raw_records(file, json_limits)
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
    questions = _load_json(questions_file)
    if not isinstance(questions, list) or not questions:
        raise DataError(f"{questions_file.name}: expected a non-empty JSON list of questions")
    outputs = _expect_object(_load_json(outputs_file), outputs_file.name)
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
    document = _load_json(file, json_limits)
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


def bundled_sample_path(task: str) -> Path:
    """The small synthetic LongLaMP-schema dataset shipped in assets/samples/."""
    if task not in LONGLAMP_TASKS:
        raise ValueError(f"no bundled sample for task {task!r}; choose one of {', '.join(LONGLAMP_TASKS)}")
    return SAMPLES_DIR / f"longlamp_sample_{task}.jsonl"


def sample_history_path(schema: str) -> Path:
    """A synthetic sample history upload of the given schema."""
    if schema not in SAMPLE_USERS:
        raise ValueError(f"no sample history for schema {schema!r}; choose one of {', '.join(SAMPLE_USERS)}")
    return SAMPLES_DIR / SAMPLE_USERS[schema].file


def shared_data_path(task: str) -> Path | None:
    """The real LongLaMP records of ``task`` in the shared data folder, if present.

    Looked for in ``$SPECSTEER_SHARED_DATA`` (the folder holding the files, or
    its parent holding ``longlamp/``), then in ``../shared/data/longlamp/``
    beside the repository.
    """
    if task not in LONGLAMP_TASKS:
        raise ValueError(f"unknown LongLaMP task {task!r}; choose one of {', '.join(LONGLAMP_TASKS)}")
    return _shared_file("longlamp", f"longlamp_{task}.jsonl")


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")


def _split_file(folder: Path, split: str | None) -> Path:
    if split is None:
        raise DataError(f"{folder} is a folder: pass split= to read {{split}}.jsonl inside it")
    for suffix in _SPLIT_SUFFIXES:
        candidate = folder / f"{split}{suffix}"
        if candidate.is_file():
            return candidate
    present = ", ".join(sorted(path.name for path in folder.iterdir())) or "nothing"
    raise DataError(f"{folder} has no {split}.jsonl, {split}.json or {split}.parquet (it holds {present})")


def _read_raw_records(file: Path, limits: JsonLimits = RECORDS_LIMITS) -> Iterator[tuple[str, object]]:
    """(place, parsed record) pairs in file order; JSONL is read lazily."""
    if not file.is_file():
        raise DataError(f"{file}: no such file")
    suffix = file.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(file, limits)
    if suffix == ".json":
        document = _load_json(file, limits)
        if not isinstance(document, list):
            raise DataError(f"{file.name}: expected a JSON list of records")
        return ((f"record {number}", raw) for number, raw in enumerate(document, start=1))
    if suffix == ".parquet":
        return ((f"row {number}", raw) for number, raw in enumerate(_read_parquet(file), start=1))
    raise DataError(f"{file.name}: unsupported file type {suffix!r}; use .jsonl, .json or .parquet")


def _read_jsonl(file: Path, limits: JsonLimits = RECORDS_LIMITS) -> Iterator[tuple[str, object]]:
    _check_size(file, limits)
    count = 0
    for number, line in _text_lines(file):
        if not line.strip():
            continue
        count += 1
        if limits.max_items is not None and count > limits.max_items:
            raise DataError(f"{file.name}: more than {limits.max_items:,} records; the limit is {limits.max_items:,}")
        if too_deep(line, limits.max_depth) is not None:
            raise DataError(_too_deep(file, number, limits))
        try:
            yield f"line {number}", json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{file.name} line {number}, column {error.colno}: malformed JSON ({error.msg})") from None


def _text_lines(file: Path) -> Iterator[tuple[int, str]]:
    """A text file's lines, numbered from 1, in the encoding ``specsteer.data.text_encoding`` finds. UTF-8
    (shared records files are, and may be large) is read a line at a time; a UTF-16 or UTF-32 file (saved by
    a Windows editor) is decoded whole, as its lines cannot be found in its bytes."""
    with file.open("rb") as handle:
        wide = not is_utf8(encoding_of(handle.read(SNIFF_BYTES)))
        handle.seek(0)
        if wide:
            yield from enumerate(_decoded(file, handle.read()).split("\n"), start=1)
            return
        offset = 0
        for number, raw_line in enumerate(handle, start=1):
            try:
                line = raw_line.decode(UTF8 if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{file.name}: {not_utf8(number, offset + error.start)}") from None
            offset += len(raw_line)
            yield number, line


def _decoded(file: Path, data: bytes) -> str:
    try:
        return decode_text(data)
    except TextEncodingError as error:
        raise DataError(f"{file.name}: {error}") from None


def _load_json(file: Path, limits: JsonLimits = RECORDS_LIMITS) -> object:
    if not file.is_file():
        raise DataError(f"{file}: no such file")
    _check_size(file, limits)
    text = _decoded(file, file.read_bytes())
    try:
        line = too_deep(text, limits.max_depth)
        if line is not None:
            raise DataError(_too_deep(file, line, limits))
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataError(
            f"{file.name} line {error.lineno}, column {error.colno}: malformed JSON ({error.msg})"
        ) from None
    except RecursionError:  # too_deep counts brackets as the parser does; this stays a message all the same
        raise DataError(f"{file.name}: the JSON nests too deep to read") from None
    if limits.max_items is not None and isinstance(document, list) and len(document) > limits.max_items:
        raise DataError(f"{file.name}: {len(document):,} records; the limit is {limits.max_items:,}")
    return document


def _check_size(file: Path, limits: JsonLimits) -> None:
    size = file.stat().st_size
    if limits.max_bytes is not None and size > limits.max_bytes:
        raise DataError(f"{file.name} is {size / 1e6:.1f} MB; the limit is {limits.max_bytes / 1e6:.1f} MB")


def _too_deep(file: Path, line: int, limits: JsonLimits) -> str:
    return (
        f"{file.name} line {line}: the JSON is nested more than {limits.max_depth} levels deep; a records "
        "file is a list of records (objects whose profile is a list of flat items)"
    )


def _read_parquet(file: Path) -> list[dict]:
    if not any(importlib.util.find_spec(engine) for engine in ("pyarrow", "fastparquet")):
        raise DataError(
            f"{file.name}: reading parquet needs pyarrow (pip install pyarrow) or fastparquet; "
            "or export the split as JSONL"
        )
    import pandas

    return [
        {str(key): _plain_python(item) for key, item in row.items()}
        for row in pandas.read_parquet(file).to_dict("records")
    ]


def _plain_python(value: object) -> object:
    """Nested parquet values (numpy arrays, numpy scalars) as lists, dicts and scalars."""
    if isinstance(value, Mapping):
        return {key: _plain_python(item) for key, item in value.items()}
    if hasattr(value, "tolist"):
        return _plain_python(value.tolist())
    if isinstance(value, list):
        return [_plain_python(item) for item in value]
    return value


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


def shared_cogenesis_path(split: str = "test") -> Path | None:
    """The CoGenesis records of ``split`` (dev or test) in the shared data folder, if present
    (``$SPECSTEER_SHARED_DATA``, the folder or its parent holding ``cogenesis/``, then
    ``../shared/data/cogenesis/``)."""
    if split not in COGENESIS_SPLITS:
        raise ValueError(f"unknown CoGenesis split {split!r}; choose one of {', '.join(COGENESIS_SPLITS)}")
    return _shared_file("cogenesis", f"cogenesis_{split}.json")


def _shared_file(dataset: str, name: str) -> Path | None:
    """``name`` in ``$SPECSTEER_SHARED_DATA`` (the dataset's folder or its parent), then in
    ``../shared/data/<dataset>/`` beside the repository; None where it is in neither."""
    folders = []
    if os.environ.get(SHARED_DATA_ENV):
        configured = Path(os.environ[SHARED_DATA_ENV])
        folders += [configured, configured / dataset]
    folders.append(REPO_ROOT.parent / "shared" / "data" / dataset)
    for folder in folders:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def resolve_data_source(source: str, task: str) -> str:
    """A records file from a source name: ``sample`` (bundled), ``shared`` (the real records) or a path.

    For ``cogenesis``, ``shared`` is the test split and ``shared:dev`` the dev split; there is no
    bundled sample dataset (the bundled personas are app sample users)."""
    if task == COGENESIS_TASK and source in ("shared", "shared:dev", "shared:test"):
        split = source.partition(":")[2] or "test"
        found = shared_cogenesis_path(split)
        if found is None:
            raise DataError(f"no CoGenesis {split} records here (../shared/data/cogenesis/ or $SPECSTEER_SHARED_DATA)")
        return str(found)
    if source == "sample":
        return str(bundled_sample_path(task))
    if source == "shared":
        found = shared_data_path(task)
        if found is None:
            raise DataError(
                f"no real LongLaMP records for the {task} task here (../shared/data/longlamp/ or "
                "$SPECSTEER_SHARED_DATA); use the bundled sample or another file"
            )
        return str(found)
    return source
