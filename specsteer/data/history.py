"""A user's private history: profile items of one schema, validated (uploads are parsed in ``history_upload``).

A history is a sequence of profile items in one schema (DESIGN §5):

========  ======================================  ==========================
schema    item keys                                user key (record files)
========  ======================================  ==========================
review    description, overall, reviewText, summary  reviewerId
abstract  abstract, id, title, year               name
writing   author, content, id, summary            author
plain     text                                    (none)
cogenesis id, text, title                         (none; a persona record)
========  ======================================  ==========================

A CoGenesis persona (a record of the CoGenesis benchmark, or an object with the
same ``additional_profile`` and ``profile`` fields) is a history of the user's
texts (``cogenesis`` items: title and text) plus the user profile as text
(``History.profile``: age, occupation, the ``Privacy_info`` line, ...). Both are
private: only the Specialist reads them.

Every problem raises :class:`HistoryError` whose message says where (line,
item number — 1-based — and field). Limits are enforced, never worked around
by truncation: an oversized upload, too many items or an overlong item is
rejected so that the user knows what the Specialist will actually see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MAX_ITEMS = 2000
MAX_ITEM_CHARS = 20_000

# Keys kept from a profile item, per schema, in the schema's documented order.
# The LaMP schemas are never guessed from content (their keys overlap with the
# others); the LaMP loader (``datasets``) asks for them by name.
SCHEMA_FIELDS: dict[str, tuple[str, ...]] = {
    "review": ("description", "overall", "reviewText", "summary"),
    "abstract": ("abstract", "id", "title", "year"),
    "writing": ("author", "content", "id", "summary"),
    "plain": ("text",),
    "cogenesis": ("id", "text", "title"),
    "lamp4": ("id", "text", "title"),
    "lamp5": ("abstract", "id", "title"),
    "lamp7": ("id", "text"),
}

# An item must have at least one of these non-empty to be worth retrieving.
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "review": ("reviewText", "summary", "description"),
    "abstract": ("abstract", "title"),
    "writing": ("content", "summary"),
    "plain": ("text",),
    "cogenesis": ("text", "title"),
    "lamp4": ("text", "title"),
    "lamp5": ("abstract", "title"),
    "lamp7": ("text",),
}

# Keys that only one guessable schema has ("id" and "summary" are shared).
_SIGNATURE_KEYS: dict[str, frozenset[str]] = {
    "review": frozenset({"description", "overall", "reviewText"}),
    "abstract": frozenset({"abstract", "title", "year"}),
    "writing": frozenset({"author", "content"}),
    "plain": frozenset({"text"}),
}
DETECTABLE_SCHEMAS = tuple(_SIGNATURE_KEYS)

USER_KEYS: dict[str, str] = {"review": "reviewerId", "abstract": "name", "writing": "author"}

# Reading order of content fields for HistoryItem.text.
_DISPLAY_ORDER = ("title", "summary", "description", "reviewText", "abstract", "content", "text")


class HistoryError(ValueError):
    """An upload that cannot be used as a history; the message says where."""


class FrozenFields(dict[str, str]):
    """A read-only, hashable dict.

    Still a dict (json.dumps, ``isinstance(..., dict)`` and ``dict(...)`` work),
    but hashable so that items can be set members and cache keys, and
    read-only so that a hash never goes stale.
    """

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type, tuple[dict[str, str]]]:
        # Pickle and deepcopy would otherwise rebuild it through __setitem__.
        return (type(self), (dict(self),))

    def _read_only(self, *args: object, **kwargs: object) -> None:
        raise TypeError("history item fields are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]


@dataclass(frozen=True)
class HistoryItem:
    """One profile entry; ``fields`` (str -> str) is frozen into a read-only dict."""

    fields: Mapping[str, str]

    def __post_init__(self) -> None:
        for key, value in self.fields.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"history item fields must map str to str, got {key!r}: {value!r}")
        object.__setattr__(self, "fields", FrozenFields(self.fields))

    @property
    def text(self) -> str:
        """The item's content fields in reading order, one per line.

        Identifier-like fields (id, year, author, rating) are left out; an item
        built with other keys shows all of its values.
        """
        content = [self.fields[key] for key in _DISPLAY_ORDER if key in self.fields]
        return "\n".join(content or self.fields.values())


PROFILE_KEY = "additional_profile"  # a CoGenesis record's user profile (text, one "Key: value" per line)
MAX_PROFILE_CHARS = 20_000


@dataclass(frozen=True)
class History:
    items: tuple[HistoryItem, ...]
    schema: str
    user_id: str | None = None
    profile: str | None = None  # a persona's user profile text (CoGenesis), private like the items

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))

    def __len__(self) -> int:
        return len(self.items)


def build_items(
    raw_items: Sequence[object],
    *,
    schema: str | None = None,
    where: str = "item",
    places: Sequence[str] | None = None,
    enforce_limits: bool = True,
) -> tuple[str, tuple[HistoryItem, ...]]:
    """Validate raw profile dicts and turn them into HistoryItems of one schema.

    ``schema`` forces a schema (required for the LaMP ones); otherwise each
    item's schema is detected and all must agree with the first. Messages name
    an item as ``places[i]`` when given (e.g. "line 7"), else as
    ``f"{where} {i + 1}"``. Datasets pass ``enforce_limits=False``: the upload
    caps protect the app, not the benchmark.
    """
    if schema is not None and schema not in SCHEMA_FIELDS:
        raise ValueError(f"unknown schema {schema!r}; known: {', '.join(SCHEMA_FIELDS)}")
    if not raw_items:
        raise HistoryError("the history is empty: it needs at least one item")
    if enforce_limits and len(raw_items) > MAX_ITEMS:
        raise HistoryError(f"the history has {len(raw_items)} items; the limit is {MAX_ITEMS}")
    labels = places or [f"{where} {number}" for number in range(1, len(raw_items) + 1)]
    chosen = schema
    items = []
    for raw, place in zip(raw_items, labels, strict=True):
        item_schema = schema or _detect_schema(raw, place)
        chosen = chosen or item_schema
        if item_schema != chosen:
            raise HistoryError(
                f"{place} has {item_schema} fields but earlier items have {chosen} fields; "
                "a history must use one schema"
            )
        items.append(_make_item(raw, chosen, place, enforce_limits))
    assert chosen is not None  # raw_items is not empty: its first item chose the schema
    return chosen, tuple(items)


def persona_history(record: Mapping[str, object], where: str = "record", enforce_limits: bool = True) -> History:
    """A CoGenesis persona: its writing history (``profile``: title and text items) and its user
    profile text (``additional_profile``). HistoryError names the field at fault."""
    profile_text = record.get(PROFILE_KEY)
    if not isinstance(profile_text, str) or not profile_text.strip():
        raise HistoryError(f"{where}: field {PROFILE_KEY!r} must be the user profile as non-empty text")
    if enforce_limits and len(profile_text) > MAX_PROFILE_CHARS:
        raise HistoryError(
            f"{where}: field {PROFILE_KEY!r} has {len(profile_text)} characters; the limit is {MAX_PROFILE_CHARS}"
        )
    texts = record.get("profile")
    if not isinstance(texts, list):
        raise HistoryError(f"{where}: field 'profile' must be a list of the user's texts")
    _, items = build_items(texts, schema="cogenesis", where=f"{where}, profile item", enforce_limits=enforce_limits)
    return History(items=items, schema="cogenesis", profile=normalise_newlines(profile_text).strip())


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def schemas_matching(keys: Iterable[str]) -> list[str]:
    """The guessable schemas that one of ``keys`` is a signature key of (one when the keys name a schema)."""
    present = set(keys)
    return [name for name in DETECTABLE_SCHEMAS if _SIGNATURE_KEYS[name] & present]


def _detect_schema(raw: object, place: str) -> str:
    if not isinstance(raw, dict):
        raise HistoryError(f"{place}: expected an object of profile fields, got {json_type(raw)}")
    keys = set(raw)
    matches = schemas_matching(keys)
    if not matches:
        raise HistoryError(f"{place}: none of its keys {sorted(keys)} belongs to a known schema ({known_schemas()})")
    if len(matches) > 1:
        raise HistoryError(f"{place}: its keys {sorted(keys)} mix the {' and '.join(matches)} schemas")
    return matches[0]


def known_schemas() -> str:
    return "; ".join(f"{name}: {', '.join(SCHEMA_FIELDS[name])}" for name in DETECTABLE_SCHEMAS)


def _make_item(raw: object, schema: str, place: str, enforce_limits: bool) -> HistoryItem:
    if not isinstance(raw, dict):
        raise HistoryError(f"{place}: expected an object of profile fields, got {json_type(raw)}")
    fields = {}
    for key in SCHEMA_FIELDS[schema]:
        value = _field_value(raw.get(key), place, key)
        if value is not None:
            fields[key] = value
    if not any(key in fields for key in TEXT_FIELDS[schema]):
        wanted = ", ".join(TEXT_FIELDS[schema])
        raise HistoryError(f"{place}: has no text in any of the {schema} fields {wanted}")
    size = sum(len(value) for value in fields.values())
    if enforce_limits and size > MAX_ITEM_CHARS:
        raise HistoryError(f"{place}: {size} characters; the limit per item is {MAX_ITEM_CHARS}")
    return HistoryItem(fields)


def _field_value(value: object, place: str, key: str) -> str | None:
    """Strings as they are, numbers as text; None and blank strings count as missing."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise HistoryError(f"{place}: field {key!r} must be text or a number, got {json_type(value)}")
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else None


def json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)
