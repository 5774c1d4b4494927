"""Prompt construction from the paper's Table 13 templates.

Every task has a per-profile-entry prompt (how one retrieved item is shown)
and an aggregated input prompt (how the shown items precede the task input).
The Specialist's user message (``PromptPair.private``) is the aggregated
prompt; the Generalist's and the generic Specialist's (``PromptPair.plain``)
is the task input alone. With nothing retrieved the two are identical.

``TASKS`` are the LongLaMP tasks plus ``free`` (any text with a plain-text
history) offered by the app and the generate CLI. ``ALL_TASKS`` adds the
LaMP-4/5/7 tasks used only by the evaluation loaders.

Item length: each rendered item is held to ``ITEM_WORD_BUDGET`` words
(whitespace-separated) of field content, so three retrieved items keep the
Specialist's prompt at a few hundred tokens — on a 2-core CPU every extra
prompt token is paid in prefill time on each draft round's cache. The budget
is shared fairly between an item's fields: each gets an equal share, and what
a short field (a summary, a title) leaves unused goes to the long ones. A cut
field ends with " ..." so the model sees it was cut. Pass
``item_word_budget=None`` for the paper's untruncated prompts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from specsteer.history import HistoryItem

TASKS = ("review", "abstract", "writing", "free")
LAMP_TASKS = ("lamp4", "lamp5", "lamp7")
ALL_TASKS = TASKS + LAMP_TASKS

# The task a history of each schema is naturally used for.
TASK_FOR_SCHEMA = {"review": "review", "abstract": "abstract", "writing": "writing", "plain": "free"}

ITEM_WORD_BUDGET = 150
TRUNCATION_MARK = " ..."


@dataclass(frozen=True)
class PromptPair:
    plain: str  # user message for the Generalist and the generic Specialist (task input only)
    private: str  # user message for the Specialist: retrieved history, then the task input


@dataclass(frozen=True)
class _Segment:
    """One field of a per-entry prompt; ``separator`` precedes it unless it comes first."""

    separator: str
    pattern: str  # "{}" marks the field value
    key: str


@dataclass(frozen=True)
class _Template:
    entry: tuple[_Segment, ...]
    joiner: str
    aggregate: str  # "{items}" and "{input}" mark the joined entries and the task input


_TEMPLATES: dict[str, _Template] = {
    "abstract": _Template(
        entry=(_Segment("", 'Title: "{}"', "title"), _Segment("\n", 'Abstract: "{}"', "abstract")),
        joiner="\n\n",
        aggregate="Here are some examples of abstracts written by this author:\n{items}. "
        "Following these examples, {input}",
    ),
    "review": _Template(
        entry=(
            _Segment("", 'Product: "{}"', "description"),
            _Segment("\n", 'Summary: "{}"', "summary"),
            _Segment(" ", 'Review: "{}"', "reviewText"),
        ),
        joiner="\n\n",
        aggregate="Here are past reviews written by this user:\n{items}. Following their style, {input}",
    ),
    "writing": _Template(
        entry=(_Segment("", 'Summary: "{}"', "summary"), _Segment("\n", 'Content: "{}"', "content")),
        joiner="\n\n",
        aggregate="Here are past posts written by this author:\n{items}. Following their style, {input}",
    ),
    "free": _Template(
        entry=(_Segment("", "{}", "text"),),
        joiner="\n\n",
        aggregate="Here are past texts written by this user:\n{items}. Following their style, {input}",
    ),
    "lamp4": _Template(
        entry=(_Segment("", '"{}"', "title"), _Segment(" is the title for ", '"{}"', "text")),
        joiner=", and ",
        aggregate="{items}. {input}",
    ),
    "lamp5": _Template(
        entry=(_Segment("", '"{}"', "title"), _Segment(" is the title for ", '"{}"', "abstract")),
        joiner=", and ",
        aggregate="{items}. Following the given patterns {input}",
    ),
    "lamp7": _Template(
        entry=(_Segment("", '"{}"', "text"),),
        joiner=", and ",
        aggregate="{items} are written by a person. Following the given patterns {input}",
    ),
}

_WORD = re.compile(r"\S+")


def build_prompts(
    task: str,
    input_text: str,
    retrieved: Sequence[HistoryItem],
    *,
    item_word_budget: int | None = ITEM_WORD_BUDGET,
) -> PromptPair:
    """The plain and the history-augmented user messages for one request.

    ``input_text`` is used verbatim (LongLaMP inputs are full instructions).
    """
    template = _template(task)
    _check_budget(item_word_budget)
    if not input_text.strip():
        raise ValueError("the task input is empty")
    entries = [entry for entry in (render_item(task, item, item_word_budget) for item in retrieved) if entry]
    if not entries:
        return PromptPair(plain=input_text, private=input_text)
    private = template.aggregate.format(items=template.joiner.join(entries), input=input_text)
    return PromptPair(plain=input_text, private=private)


def render_item(task: str, item: HistoryItem, word_budget: int | None = ITEM_WORD_BUDGET) -> str:
    """One item through the task's per-profile-entry prompt.

    Fields the item lacks are left out; an item with none of the template's
    fields is shown as its plain text. Returns "" for an item without text.
    """
    template = _template(task)
    _check_budget(word_budget)
    present = [segment for segment in template.entry if item.fields.get(segment.key, "").strip()]
    if not present:
        (text,) = _fit_to_budget([item.text.strip()], word_budget)
        return text
    values = _fit_to_budget([item.fields[segment.key].strip() for segment in present], word_budget)
    parts = [segment.pattern.format(value) for segment, value in zip(present, values, strict=True)]
    separators = [""] + [segment.separator for segment in present[1:]]
    return "".join(separator + part for separator, part in zip(separators, parts, strict=True))


def _template(task: str) -> _Template:
    try:
        return _TEMPLATES[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(ALL_TASKS)}") from None


def _check_budget(word_budget: int | None) -> None:
    if word_budget is not None and word_budget < 1:
        raise ValueError(f"the item word budget must be at least 1, or None for no limit; got {word_budget}")


def _fit_to_budget(values: list[str], budget: int | None) -> list[str]:
    counts = [len(_WORD.findall(value)) for value in values]
    if budget is None or sum(counts) <= budget:
        return values
    return [
        _first_words(value, allowed)
        for value, allowed in zip(values, _fair_shares(counts, budget), strict=True)
    ]


def _fair_shares(counts: list[int], budget: int) -> list[int]:
    """Split ``budget`` words between fields: equal shares, unused share passed on.

    Fields are served shortest first, each taking at most an equal share of
    what is left, so a short field keeps all of its words and the long ones
    split the rest.
    """
    shares = [0] * len(counts)
    remaining = budget
    pending = sorted(range(len(counts)), key=lambda index: counts[index])
    for position, index in enumerate(pending):
        shares[index] = min(counts[index], remaining // (len(pending) - position))
        remaining -= shares[index]
    return shares


def _first_words(value: str, allowed: int) -> str:
    """The first ``allowed`` words of ``value`` with their original spacing."""
    words = list(_WORD.finditer(value))
    if len(words) <= allowed:
        return value
    if not allowed:
        return TRUNCATION_MARK.strip()
    return value[: words[allowed - 1].end()] + TRUNCATION_MARK
