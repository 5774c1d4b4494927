"""Prompt templates (paper Table 13): exact strings for every task."""

from __future__ import annotations

import hashlib

import pytest

from specsteer.data.history import DETECTABLE_SCHEMAS, HistoryItem
from specsteer.data.tasks import (
    ALL_TASKS,
    DEFAULT_PROMPT_STYLE,
    ITEM_WORD_BUDGET,
    LAMP_TASKS,
    PROMPT_STYLES,
    TASK_FOR_SCHEMA,
    TASKS,
    PromptPair,
    build_prompts,
    item_field_labels,
    render_item,
)

INPUT = "Generate the text."


def test_task_lists():
    assert TASKS == ("review", "abstract", "writing", "free", "cogenesis")
    assert ALL_TASKS == TASKS + ("lamp4", "lamp5", "lamp7")


def test_abstract_prompt():
    items = [
        HistoryItem({"abstract": "We study A.", "id": "1", "title": "On A", "year": "2020"}),
        HistoryItem({"abstract": "We study B.", "id": "2", "title": "On B", "year": "2021"}),
    ]
    assert build_prompts("abstract", INPUT, items) == PromptPair(
        plain=INPUT,
        private="Here are some examples of abstracts written by this author:\n"
        'Title: "On A"\nAbstract: "We study A."\n\n'
        'Title: "On B"\nAbstract: "We study B.". Following these examples, Generate the text.',
    )


def test_review_prompt():
    item = HistoryItem({"description": "A kettle", "overall": "4.0", "reviewText": "Boils fast!", "summary": "Quick"})
    assert build_prompts("review", INPUT, [item]).private == (
        "Here are past reviews written by this user:\n"
        'Product: "A kettle"\nSummary: "Quick" Review: "Boils fast!". Following their style, Generate the text.'
    )


def test_writing_prompt():
    items = [
        HistoryItem({"author": "sam", "content": "Rye again.", "id": "a", "summary": "Bread"}),
        HistoryItem({"author": "sam", "content": "Bagels!", "id": "b", "summary": "Boiled"}),
    ]
    assert build_prompts("writing", INPUT, items).private == (
        "Here are past posts written by this author:\n"
        'Summary: "Bread"\nContent: "Rye again."\n\n'
        'Summary: "Boiled"\nContent: "Bagels!". Following their style, Generate the text.'
    )


def test_free_prompt():
    items = [HistoryItem({"text": "First note."}), HistoryItem({"text": "Second note."})]
    assert build_prompts("free", INPUT, items).private == (
        "Here are past texts written by this user:\nFirst note.\n\nSecond note.. "
        "Following their style, Generate the text."
    )


def test_lamp_prompts():
    news = [
        HistoryItem({"id": "1", "text": "Rain all week.", "title": "Wet"}),
        HistoryItem({"text": "Sun.", "title": "Dry"}),
    ]
    papers = [
        HistoryItem({"abstract": "We do A.", "id": "1", "title": "A"}),
        HistoryItem({"abstract": "We do B.", "title": "B"}),
    ]
    tweets = [HistoryItem({"id": "1", "text": "so tired"}), HistoryItem({"text": "coffee pls"})]
    assert build_prompts("lamp4", INPUT, news).private == (
        '"Wet" is the title for "Rain all week.", and "Dry" is the title for "Sun.". Generate the text.'
    )
    assert build_prompts("lamp5", INPUT, papers).private == (
        '"A" is the title for "We do A.", and "B" is the title for "We do B.". '
        "Following the given patterns Generate the text."
    )
    assert build_prompts("lamp7", INPUT, tweets).private == (
        '"so tired", and "coffee pls" are written by a person. Following the given patterns Generate the text.'
    )


@pytest.mark.parametrize("task", ALL_TASKS)
def test_nothing_retrieved_gives_identical_prompts(task):
    pair = build_prompts(task, INPUT, [])
    assert pair.private == pair.plain == INPUT


@pytest.mark.parametrize("task", ALL_TASKS)
def test_plain_prompt_is_the_input_verbatim(task):
    text = '  Generate a review for "X" {with braces}.\n'
    pair = build_prompts(task, text, [HistoryItem({"text": "hello {0}"})])
    assert pair.plain == text
    assert pair.private.endswith(text)
    assert "hello {0}" in pair.private


def test_missing_fields_render_what_exists():
    assert (
        render_item("review", HistoryItem({"reviewText": "Great!", "summary": "Yes"}))
        == 'Summary: "Yes" Review: "Great!"'
    )
    assert render_item("review", HistoryItem({"reviewText": "Great!"})) == 'Review: "Great!"'
    assert render_item("abstract", HistoryItem({"abstract": "Only text."})) == 'Abstract: "Only text."'
    assert render_item("lamp4", HistoryItem({"text": "Body"})) == '"Body"'


def test_item_without_template_fields_is_shown_as_its_text():
    item = HistoryItem({"text": "A plain note."})
    assert render_item("review", item) == "A plain note."
    review = HistoryItem({"summary": "Head", "reviewText": "Body"})
    assert render_item("free", review) == "Head\nBody"


def test_items_without_text_are_skipped():
    empty = HistoryItem({"summary": "   "})
    assert build_prompts("writing", INPUT, [empty]).private == INPUT


def test_long_items_are_cut_to_the_word_budget_fairly():
    description = " ".join(f"d{n}" for n in range(300))
    review_text = " ".join(f"r{n}" for n in range(300))
    item = HistoryItem({"description": description, "summary": "two words", "reviewText": review_text})
    rendered = render_item("review", item)
    # The summary keeps both words; the two long fields split the remaining 148.
    assert 'Summary: "two words"' in rendered
    assert 'Product: "' + " ".join(f"d{n}" for n in range(74)) + ' ..."' in rendered
    assert 'Review: "' + " ".join(f"r{n}" for n in range(74)) + ' ..."' in rendered
    assert ITEM_WORD_BUDGET == 150


def test_truncation_keeps_original_spacing_and_can_be_disabled():
    text = "one\ntwo  three\n\nfour five"
    item = HistoryItem({"text": text})
    assert render_item("free", item, word_budget=3) == "one\ntwo  three ..."
    assert render_item("free", item, word_budget=None) == text
    assert build_prompts("free", INPUT, [item], item_word_budget=3).private.startswith(
        "Here are past texts written by this user:\none\ntwo  three ..."
    )


def test_short_items_are_untouched():
    item = HistoryItem({"text": "  short text  "})
    assert render_item("free", item) == "short text"


@pytest.mark.parametrize("budget", [0, -1])
def test_invalid_word_budget(budget):
    with pytest.raises(ValueError, match="word budget"):
        build_prompts("free", INPUT, [], item_word_budget=budget)


def test_unknown_task_lists_the_tasks():
    with pytest.raises(ValueError, match="unknown task 'poem'; choose one of review, abstract, writing, free"):
        build_prompts("poem", INPUT, [])


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_input_is_rejected(text):
    with pytest.raises(ValueError, match="empty"):
        build_prompts("review", text, [])


def test_every_history_schema_has_a_default_task():
    # A persona (cogenesis) is recognised by its record's profile text, not by its items' keys.
    assert set(TASK_FOR_SCHEMA) == set(DETECTABLE_SCHEMAS) | {"cogenesis"}
    assert set(TASK_FOR_SCHEMA.values()) == set(TASKS)


# --------------------------------------------------------------------------- the paper prompts, pinned
# Expected strings recorded from build_prompts before the clean style existed: the paper's templates
# are the default and must stay byte-for-byte what the stored runs were made with.

_LONG = " ".join(f"w{n}" for n in range(90))
_PINNED_CASES = {
    "review": (
        'Generate the review text written by a reviewer who has a given an overall rating of "4.0" for a '
        'product with description "A {steel} kettle". The summary of the review text is "Fast".',
        [
            HistoryItem(
                {
                    "description": _LONG,
                    "overall": "5.0",
                    "reviewText": "Line one.\nLine  two " + _LONG,
                    "summary": "Works",
                }
            ),
            HistoryItem({"reviewText": "Only a body.", "summary": ""}),
        ],
    ),
    "writing": (
        "Generate the content for a reddit post Press on regardless.",
        [
            HistoryItem({"author": "a", "content": _LONG + " end", "id": "1", "summary": "TL;DR {0}"}),
            HistoryItem({"text": "fallback text"}),
        ],
    ),
    "abstract": (
        'Generate an abstract for the title "On B".',
        [HistoryItem({"abstract": _LONG, "id": "1", "title": "On A", "year": "2020"})],
    ),
    "free": ("Write a note.", [HistoryItem({"text": _LONG + " " + _LONG})]),
    "lamp7": ("Paraphrase: x", [HistoryItem({"text": _LONG})]),
}
_PINNED_PRIVATE_AT_20_WORDS = {
    "review": 'Here are past reviews written by this user:\nProduct: "w0 w1 w2 w3 w4 w5 w6 w7 w8 ..."\n'
    'Summary: "Works" Review: "Line one.\nLine  two w0 w1 w2 w3 w4 w5 ..."\n\nReview: "Only a body.". '
    'Following their style, Generate the review text written by a reviewer who has a given an overall rating '
    'of "4.0" for a product with description "A {steel} kettle". The summary of the review text is "Fast".',
    "writing": 'Here are past posts written by this author:\nSummary: "TL;DR {0}"\n'
    'Content: "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 ..."\n\nfallback text. '
    "Following their style, Generate the content for a reddit post Press on regardless.",
    "abstract": 'Here are some examples of abstracts written by this author:\nTitle: "On A"\n'
    'Abstract: "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 ...". '
    'Following these examples, Generate an abstract for the title "On B".',
    "free": "Here are past texts written by this user:\n"
    "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 .... Following their style, Write a note.",
    "lamp7": '"w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 ..." are written by a person. '
    "Following the given patterns Paraphrase: x",
}
# SHA-256 over every record's plain and private prompt (BM25 top-3, default word budget), in file order.
_PINNED_FILE_DIGESTS = {
    ("bundled", "review"): "bfcba54a7bce936a90bc4adf5b17fb798e333a6866bf64d4414472f8471e29b1",
    ("bundled", "writing"): "d429c43a0aeeaf2f1dc8359efd59f09513240c56e04e5702b5ddff7fdfa0f6bd",
    ("bundled", "abstract"): "37d520bac62340cc362f6ed2c95f110244131943e9c9df58f5d73e005be7e4ea",
    ("shared", "review"): "5450a2254092829dd399f758ddc8739e486476f7a5d06cfbb6f8e56c958db3a0",
    ("shared", "writing"): "0c011ae9ba5abe1fa42cc2a2980be0ff7bcbc8087395dc729d1d8915bcaf4ae3",
}


@pytest.mark.parametrize("task", sorted(_PINNED_CASES))
def test_paper_prompts_are_pinned(task):
    input_text, items = _PINNED_CASES[task]
    pair = build_prompts(task, input_text, items, item_word_budget=20)
    assert pair == PromptPair(plain=input_text, private=_PINNED_PRIVATE_AT_20_WORDS[task])


@pytest.mark.parametrize("source, task", sorted(_PINNED_FILE_DIGESTS))
def test_paper_prompts_of_whole_record_files_are_pinned(source, task):
    from specsteer.data.datasets import load_records
    from specsteer.data.retrieval import retrieve
    from specsteer.data.sources import bundled_sample_path, shared_data_path

    path = bundled_sample_path(task) if source == "bundled" else shared_data_path(task)
    if path is None:
        pytest.skip("the shared LongLaMP records are not here")
    digest = hashlib.sha256()
    for record in load_records(path, task):
        pair = build_prompts(task, record.input, retrieve(task, record.input, list(record.profile), 3))
        for prompt in (pair.plain, pair.private):
            digest.update(prompt.encode() + b"\0")
    assert digest.hexdigest() == _PINNED_FILE_DIGESTS[source, task]


# --------------------------------------------------------------------------- the clean style

CLEAN_INSTRUCTION = "Write only the {} itself, with no title, headings, field labels or introduction."
# One real-looking item per task with every field its schema has.
FULL_ITEMS = {
    "review": HistoryItem(
        {
            "description": "Paper Mate InkJoy Quatro, four colours in one pen.",
            "overall": "5.0",
            "reviewText": "Writes smoothly.\nThe red is bright.",
            "summary": "A GREAT pen",
        }
    ),
    "writing": HistoryItem(
        {
            "author": "sam",
            "content": "I was a waitress for two years.",
            "id": "a",
            "summary": "Rage comics, everywhere.",
        }
    ),
    "abstract": HistoryItem({"abstract": "We study A.", "id": "1", "title": "On A", "year": "2020"}),
    "free": HistoryItem({"text": "Dear diary, rain again."}),
    "cogenesis": HistoryItem({"id": "0", "title": "Rain", "text": "Dear diary, rain again."}),
}


def test_prompt_styles():
    assert PROMPT_STYLES == ("paper", "clean")
    assert DEFAULT_PROMPT_STYLE == "paper"


@pytest.mark.parametrize("task", TASKS)
def test_the_default_style_is_the_paper(task):
    items = [FULL_ITEMS[task]]
    assert build_prompts(task, INPUT, items) == build_prompts(task, INPUT, items, style="paper")
    assert render_item(task, items[0]) == render_item(task, items[0], style="paper")


def test_clean_review_prompt():
    items = [FULL_ITEMS["review"], HistoryItem({"reviewText": "Loud lid.", "summary": "Meh"})]
    assert build_prompts("review", INPUT, items, style="clean") == PromptPair(
        plain="Generate the text.\n\n" + CLEAN_INSTRUCTION.format("review"),
        private="Below are past reviews written by this user, each in quotes.\n\n"
        '"Writes smoothly.\nThe red is bright."\n\n"Loud lid."\n\n'
        "Write in the same style as these reviews.\n\n"
        "Generate the text.\n\n" + CLEAN_INSTRUCTION.format("review"),
    )


@pytest.mark.parametrize(
    "task, shown, noun, preface",
    [
        ("writing", '"I was a waitress for two years."', "post", "Below are past posts written by this author"),
        ("abstract", '"We study A."', "abstract", "Below are abstracts written by this author"),
        ("free", '"Dear diary, rain again."', "text", "Below are past texts written by this user"),
    ],
)
def test_clean_prompts_of_the_other_tasks(task, shown, noun, preface):
    pair = build_prompts(task, INPUT, [FULL_ITEMS[task]], style="clean")
    assert pair.plain == f"{INPUT}\n\n{CLEAN_INSTRUCTION.format(noun)}"
    assert pair.private == (
        f"{preface}, each in quotes.\n\n{shown}\n\nWrite in the same style as these {noun}s.\n\n{pair.plain}"
    )


@pytest.mark.parametrize("task", TASKS)
def test_clean_prompts_show_no_field_labels(task):
    pair = build_prompts(task, INPUT, [FULL_ITEMS[task]] * 2, style="clean")
    paper = build_prompts(task, INPUT, [FULL_ITEMS[task]])
    for label in item_field_labels(task):
        assert f"{label}:" in paper.private  # the paper's layout shows it ...
        assert f"{label}:" not in pair.private  # ... the clean one does not
    assert not pair.private.startswith("Here")  # no "Here are …" to echo as a preamble


def test_field_labels_come_from_the_paper_templates():
    assert item_field_labels("review") == ("Product", "Summary", "Review")
    assert item_field_labels("writing") == ("Summary", "Content")
    assert item_field_labels("abstract") == ("Title", "Abstract")
    assert all(item_field_labels(task) == () for task in ("free", *LAMP_TASKS))


@pytest.mark.parametrize("task", TASKS)
def test_clean_prompts_keep_the_prompt_pair_contract(task):
    text = '  Generate a review for "X" {with braces}.\n'
    pair = build_prompts(task, text, [FULL_ITEMS[task]], style="clean")
    assert pair.plain.startswith(text)  # the input verbatim, then the instruction
    assert pair.private.endswith(pair.plain)
    nothing = build_prompts(task, text, [], style="clean")
    assert nothing.private == nothing.plain == pair.plain


def test_clean_items_share_the_word_budget_and_the_fallback():
    item = HistoryItem({"summary": "Quick", "reviewText": "one two three four five"})
    assert render_item("review", item, 3, style="clean") == '"one two three ..."'
    assert build_prompts("review", INPUT, [item], item_word_budget=3, style="clean").private.startswith(
        'Below are past reviews written by this user, each in quotes.\n\n"one two three ..."\n\n'
    )
    # An item without the shown field falls back to its text, as in the paper style: no labels either way.
    assert render_item("review", HistoryItem({"summary": "Quick"}), style="clean") == "Quick"


@pytest.mark.parametrize("style", ["fancy", "Paper", "", None])
def test_unknown_prompt_styles_are_refused(style):
    with pytest.raises(ValueError, match=r"unknown prompt style .*; choose one of paper, clean"):
        build_prompts("review", INPUT, [], style=style)
    with pytest.raises(ValueError, match="unknown prompt style"):
        render_item("review", FULL_ITEMS["review"], style=style)


@pytest.mark.parametrize("task", LAMP_TASKS)
def test_the_clean_style_does_not_cover_the_lamp_tasks(task):
    with pytest.raises(
        ValueError, match=f"covers abstract, review, writing, free, cogenesis; {task} has the paper's template"
    ):
        build_prompts(task, INPUT, [], style="clean")


def test_an_unknown_task_is_named_before_the_style():
    with pytest.raises(ValueError, match="unknown task 'poem'"):
        build_prompts("poem", INPUT, [], style="fancy")
