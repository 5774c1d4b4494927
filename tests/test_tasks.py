"""Prompt templates (paper Table 13): exact strings for every task."""

from __future__ import annotations

import pytest

from specsteer.history import DETECTABLE_SCHEMAS, HistoryItem
from specsteer.tasks import (
    ALL_TASKS,
    ITEM_WORD_BUDGET,
    TASK_FOR_SCHEMA,
    TASKS,
    PromptPair,
    build_prompts,
    render_item,
)

INPUT = "Generate the text."


def test_task_lists():
    assert TASKS == ("review", "abstract", "writing", "free")
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
    item = HistoryItem(
        {"description": "A kettle", "overall": "4.0", "reviewText": "Boils fast!", "summary": "Quick"}
    )
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
    with pytest.raises(
        ValueError, match="unknown task 'poem'; choose one of review, abstract, writing, free"
    ):
        build_prompts("poem", INPUT, [])


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_input_is_rejected(text):
    with pytest.raises(ValueError, match="empty"):
        build_prompts("review", text, [])


def test_every_history_schema_has_a_default_task():
    assert set(TASK_FOR_SCHEMA) == set(DETECTABLE_SCHEMAS)
    assert set(TASK_FOR_SCHEMA.values()) == set(TASKS)
