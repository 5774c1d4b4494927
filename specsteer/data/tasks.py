"""Prompt construction from the paper's Table 13 templates.

Every task has a per-profile-entry prompt (how one retrieved item is shown)
and an aggregated input prompt (how the shown items precede the task input).
The Specialist's user message (``PromptPair.private``) is the aggregated
prompt; the Generalist's and the generic Specialist's (``PromptPair.plain``)
is the task input alone. With nothing retrieved the two are identical.

``TASKS`` are the LongLaMP tasks, ``cogenesis`` (a persona's task: the
CoGenesis benchmark's context-aware instruction following) and ``free`` (any
text with a plain-text history), offered by the app and the generate CLI.

CoGenesis prompts are sectioned, in the structure the CoGenesis and CoSteer
authors used: the user profile, then the writing history (the retrieved texts),
then the task, each under its own heading, so that the Specialist answers the
task instead of continuing the last history text it read. The user profile is
given as ``build_prompts(..., profile=...)``; only the cogenesis task takes one.
Its plain prompt is the task alone (clean style: and the write-only-the-text
instruction). ``ALL_TASKS`` adds the
LaMP-4/5/7 tasks used only by the evaluation loaders.

Item length: each rendered item is held to ``ITEM_WORD_BUDGET`` words
(whitespace-separated) of field content, so three retrieved items keep the
Specialist's prompt at a few hundred tokens — on a 2-core CPU every extra
prompt token is paid in prefill time on each draft round's cache. The budget
is shared fairly between an item's fields: each gets an equal share, and what
a short field (a summary, a title) leaves unused goes to the long ones. A cut
field ends with " ..." so the model sees it was cut. Pass
``item_word_budget=None`` for the paper's untruncated prompts.

Prompt styles. ``style="paper"`` (the default) is Table 13 as the paper
wrote it, so numbers stay comparable with the paper's. Its field labels
(``Product: "…"``, ``Summary: "…"``) are a layout the small Specialist tends
to continue instead of writing the text asked for. ``style="clean"`` (review,
abstract, writing, free) shows each retrieved item as the user's own text
alone (the review, post, abstract or text; not the product description,
summary or title), in quotes, without field labels, and ends both prompts
with an instruction to write only the text: no title, headings, labels or
introduction. In the clean style the plain prompt is therefore the input
*followed by that instruction* (the Generalist gets it too, so that the two
sides of a speculative method are asked for the same thing), and the private
prompt ends with the plain prompt. Both styles share the word budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from specsteer.data.history import HistoryItem

TASKS = ("review", "abstract", "writing", "free", "cogenesis")
LAMP_TASKS = ("lamp4", "lamp5", "lamp7")
ALL_TASKS = TASKS + LAMP_TASKS

# The task a history of each schema is naturally used for.
TASK_FOR_SCHEMA = {
    "review": "review",
    "abstract": "abstract",
    "writing": "writing",
    "cogenesis": "cogenesis",
    "plain": "free",
}

ITEM_WORD_BUDGET = 150
TRUNCATION_MARK = " ..."

PromptStyle = Literal["paper", "clean"]
PROMPT_STYLES: tuple[PromptStyle, ...] = get_args(PromptStyle)
DEFAULT_PROMPT_STYLE: PromptStyle = "paper"


@dataclass(frozen=True)
class PromptPair:
    # User message for the Generalist and the generic Specialist: the task input (clean style: and an instruction).
    plain: str
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
    aggregate: str  # "{items}" and "{input}" mark the joined entries and the plain prompt
    plain: str = "{input}"  # the plain prompt; "{input}" marks the task input
    sectioned: bool = False  # profile, history and task under headings (see _sectioned); aggregate unused


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
    "cogenesis": _Template(
        entry=(_Segment("", "Title: {}", "title"), _Segment("\n", "{}", "text")),
        joiner="\n\n",
        aggregate="",
        sectioned=True,
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


def _clean_template(field: str, items_noun: str, text_noun: str) -> _Template:
    """One clean-style template: the item's own text in quotes, no field labels.

    The preface does not open with "Here are": models echo it as a "Here is …" preamble.
    """
    return _Template(
        entry=(_Segment("", '"{}"', field),),
        joiner="\n\n",
        aggregate=f"Below are {items_noun}, each in quotes.\n\n{{items}}\n\n"
        f"Write in the same style as these {text_noun}s.\n\n{{input}}",
        plain=f"{{input}}\n\nWrite only the {text_noun} itself, with no title, headings, field labels or introduction.",
    )


_CLEAN_TEMPLATES: dict[str, _Template] = {
    "abstract": _clean_template("abstract", "abstracts written by this author", "abstract"),
    "review": _clean_template("reviewText", "past reviews written by this user", "review"),
    "writing": _clean_template("content", "past posts written by this author", "post"),
    "free": _clean_template("text", "past texts written by this user", "text"),
    # The history texts without their titles (a title is what the small Specialist copies first).
    "cogenesis": _Template(
        entry=(_Segment("", '"{}"', "text"),),
        joiner="\n\n",
        aggregate="",
        plain="{input}\n\nWrite only the text the task asks for, with no title, headings or introduction.",
        sectioned=True,
    ),
}
_PROFILE_HEADING = "## About the user"
_HISTORY_HEADING = "## Texts the user wrote before (examples of their style)"
_TASK_HEADING = "## The task (write it for this user, in their style)"
_TEMPLATES_BY_STYLE: dict[str, dict[str, _Template]] = {"paper": _TEMPLATES, "clean": _CLEAN_TEMPLATES}

_WORD = re.compile(r"\S+")
# A paper per-entry pattern that names its field, e.g. 'Product: "{}"' (label "Product").
_LABELLED_PATTERN = re.compile(r"^(?P<label>\w[\w ]*):")


def build_prompts(
    task: str,
    input_text: str,
    retrieved: Sequence[HistoryItem],
    *,
    item_word_budget: int | None = ITEM_WORD_BUDGET,
    style: PromptStyle = DEFAULT_PROMPT_STYLE,
    profile: str | None = None,
) -> PromptPair:
    """The plain and the history-augmented user messages for one request.

    ``input_text`` is used verbatim (LongLaMP inputs are full instructions);
    in the paper style it is the whole plain prompt, in the clean style the
    plain prompt adds the write-only-the-text instruction after it.
    ``profile``: the user profile text, for the sectioned (cogenesis) prompt only.
    """
    template = _template(task, style)
    _check_budget(item_word_budget)
    if not input_text.strip():
        raise ValueError("the task input is empty")
    if profile and profile.strip() and not template.sectioned:
        raise ValueError(f"the {task} prompt has no place for a user profile; use the cogenesis task for a persona")
    plain = template.plain.format(input=input_text)
    rendered = (render_item(task, item, item_word_budget, style=style) for item in retrieved)
    entries = [entry for entry in rendered if entry]
    if template.sectioned:
        return PromptPair(plain=plain, private=_sectioned(profile, template.joiner.join(entries), plain))
    if not entries:
        return PromptPair(plain=plain, private=plain)
    private = template.aggregate.format(items=template.joiner.join(entries), input=plain)
    return PromptPair(plain=plain, private=private)


def _sectioned(profile: str | None, history: str, plain: str) -> str:
    """Profile, history and task, each under its heading; a missing part is left out, and with
    neither profile nor history the private prompt is the plain one."""
    sections = [(_PROFILE_HEADING, (profile or "").strip()), (_HISTORY_HEADING, history)]
    present = [f"{heading}\n{body}" for heading, body in sections if body]
    if not present:
        return plain
    return "\n\n".join([*present, f"{_TASK_HEADING}\n{plain}"])


def render_item(
    task: str,
    item: HistoryItem,
    word_budget: int | None = ITEM_WORD_BUDGET,
    *,
    style: PromptStyle = DEFAULT_PROMPT_STYLE,
) -> str:
    """One item through the task's per-profile-entry prompt.

    Fields the item lacks are left out; an item with none of the template's
    fields is shown as its plain text. Returns "" for an item without text.
    """
    template = _template(task, style)
    _check_budget(word_budget)
    present = [segment for segment in template.entry if item.fields.get(segment.key, "").strip()]
    if not present:
        (text,) = _fit_to_budget([item.text.strip()], word_budget)
        return text
    values = _fit_to_budget([item.fields[segment.key].strip() for segment in present], word_budget)
    parts = [segment.pattern.format(value) for segment, value in zip(present, values, strict=True)]
    separators = [""] + [segment.separator for segment in present[1:]]
    return "".join(separator + part for separator, part in zip(separators, parts, strict=True))


def item_field_labels(task: str) -> tuple[str, ...]:
    """The field labels the paper's per-entry prompt of ``task`` shows, in order.

    ("Product", "Summary", "Review") for review; () for tasks whose items carry
    no labels (free, the LaMP tasks). The hygiene measure looks for these in outputs.
    """
    matches = (_LABELLED_PATTERN.match(segment.pattern) for segment in _template(task).entry)
    return tuple(match["label"] for match in matches if match)


def as_prompt_style(value: str) -> PromptStyle:
    """``value`` as a prompt style, or ValueError naming the styles (a public endpoint's caller sends any text)."""
    for style in PROMPT_STYLES:
        if value == style:
            return style
    raise ValueError(f"unknown prompt style {value!r}; choose one of {', '.join(PROMPT_STYLES)}")


def _template(task: str, style: PromptStyle = DEFAULT_PROMPT_STYLE) -> _Template:
    if task not in _TEMPLATES:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(ALL_TASKS)}")
    templates = _TEMPLATES_BY_STYLE[as_prompt_style(style)]
    if task not in templates:
        covered = ", ".join(templates)
        raise ValueError(f"the {style} prompt style covers {covered}; {task} has the paper's template only")
    return templates[task]


def _check_budget(word_budget: int | None) -> None:
    if word_budget is not None and word_budget < 1:
        raise ValueError(f"the item word budget must be at least 1, or None for no limit; got {word_budget}")


def _fit_to_budget(values: list[str], budget: int | None) -> list[str]:
    counts = [len(_WORD.findall(value)) for value in values]
    if budget is None or sum(counts) <= budget:
        return values
    return [_first_words(value, allowed) for value, allowed in zip(values, _fair_shares(counts, budget), strict=True)]


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
