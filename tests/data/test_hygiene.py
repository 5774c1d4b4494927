"""Output hygiene: layout copying, preambles and refusals, on real-looking outputs (many taken from the LongLaMP
grids' stored runs), and the report script on a small read-only database."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from specsteer.data.history import HistoryItem
from specsteer.data.hygiene import (
    GridVerdict,
    HygieneShares,
    HygieneVerdict,
    classify_output,
    hygiene_shares,
    layout_copy_evidence,
    preamble_evidence,
    refusal_evidence,
)
from specsteer.data.sources import bundled_sample_path
from specsteer.data.tasks import build_prompts

REPO = Path(__file__).resolve().parents[2]

REVIEW_INPUT = (
    'Generate the review text written by a reviewer who has a given an overall rating of "5.0" for a product '
    'with description "The new Paper Mate InkJoy Quatro features the revolutionary InkJoy writing system.". '
    'The summary of the review text is "A GREAT four color pen".'
)
REVIEW_ITEMS = [
    HistoryItem(
        {
            "description": "Anne Greene is the author of Trail of Tears.",
            "overall": "4.0",
            "reviewText": "Liked the idea of the storyline.",
            "summary": "Angel with Steel Wings",
        }
    )
]
WRITING_INPUT = "Generate the content for a reddit post Visited my grandparents grave site."
WRITING_ITEMS = [
    HistoryItem(
        {"author": "u", "content": "I was a waitress for two years.", "id": "1", "summary": "Rage comics, everywhere."}
    )
]
REVIEW = build_prompts("review", REVIEW_INPUT, REVIEW_ITEMS)
WRITING = build_prompts("writing", WRITING_INPUT, WRITING_ITEMS)


def _layout(output: str, task: str = "review", prompts=REVIEW) -> str | None:
    return layout_copy_evidence(output, task, prompts)


# --------------------------------------------------------------------------- layout copy


@pytest.mark.parametrize(
    "output, evidence",
    [
        # SLM+ on review record 0: the product line of the layout instead of a review.
        (
            'Product: "The new Paper Mate InkJoy Quatro features the revolutionary InkJoy writing system."\n'
            'Summary: "A GREAT four color pen"',
            'Product: "',
        ),
        # A review that drifts into the layout on a later line.
        ('Smooth ink, bright colours.\n\nSummary: "Four colours" Review: "Writes well."', 'Summary: "'),
        # SpecSteer a=1 on review record 4: the Review field after a closing quote, as the template joins them.
        ('"Between Faith and Fear" Review: "Between Faith and Fear" Review: "Between Faith and Fear"', 'Review: "'),
        ('  Product: “InkJoy Quatro”', 'Product: “'),
    ],
)
def test_review_layout_copies(output, evidence):
    assert _layout(output) == evidence


@pytest.mark.parametrize(
    "output, evidence",
    [
        # SLM+ on writing record 5: markdown bold around the label, the value still quoted.
        (
            '**Title:** Visited My Grandparents Grave Site\n\n**Summary:** "I recently visited my grandparents."',
            '**Summary:** "',
        ),
        ('Title: "My Grandparents\' Grave Site"\n\nSummary: "I recently visited."', 'Summary: "'),
        ('Summary: "Rage comics." \nContent: "I\'m not joking."', 'Summary: "'),
    ],
)
def test_writing_layout_copies(output, evidence):
    assert _layout(output, "writing", WRITING) == evidence


def test_abstract_layout_copy():
    prompts = build_prompts(
        "abstract",
        'Generate an abstract for the title "On B".',
        [HistoryItem({"abstract": "We study A.", "title": "On A"})],
    )
    assert _layout('Title: "On B"\nAbstract: "We study B."', "abstract", prompts) == 'Title: "'


@pytest.mark.parametrize(
    "output",
    [
        # Mentions of the word, and labels inside sentences, are a review's own words.
        "This product is great. The product description undersells it; my summary: buy it.",
        'The box says Product: "Kettle" on the side, which made me laugh.',
        # Review record 4: every method echoed the summary "My Review: Between Faith and Fear".
        "My Review: Between Faith and Fear",
        # Lower case is not how the template writes its labels.
        'summary: "works" review: "fine"',
        # A label without the opening quote is a heading, not the item layout.
        "Summary: I recently visited my grandparents' grave site.",
    ],
)
def test_review_outputs_that_do_not_copy_the_layout(output):
    assert _layout(output) is None


@pytest.mark.parametrize(
    "output",
    [
        # The Generalist, who never sees the layout, writes these headings (writing records 0, 1, 7).
        'Title: "Don\'t Let Friends Tank Your Karma"\n\nContent:\nHey everyone!',
        "Title: Press on Regardless\n\nI'm excited to share a story.",
        '### Title: "My Journey Through Religion"',
        "Observation bias:\nObservation bias is a type of bias.",
    ],
)
def test_writing_outputs_that_do_not_copy_the_layout(output):
    assert _layout(output, "writing", WRITING) is None


def test_no_layout_to_copy_when_nothing_was_retrieved():
    nothing = build_prompts("review", REVIEW_INPUT, [])
    assert _layout('Product: "InkJoy"', prompts=nothing) is None


def test_a_field_the_request_itself_writes_is_an_echo():
    request = 'Write a product page in this form: Summary: "…" then the text.'
    prompts = build_prompts("review", request, REVIEW_ITEMS)
    assert _layout('Summary: "Four colours"', prompts=prompts) is None
    assert _layout('Product: "InkJoy"', prompts=prompts) == 'Product: "'
    bold = build_prompts("review", 'Use the form **Summary:** "…" for the headline.', REVIEW_ITEMS)
    assert _layout('**Summary:** "Four colours"', prompts=bold) is None


def test_free_texts_have_no_layout():
    prompts = build_prompts("free", "Write a note.", [HistoryItem({"text": "Summary: \"x\" was my old habit."})])
    assert _layout('Summary: "x"', "free", prompts) is None


def test_the_clean_style_is_measured_with_the_paper_labels():
    clean = build_prompts("review", REVIEW_INPUT, REVIEW_ITEMS, style="clean")
    assert _layout('Product: "InkJoy"', prompts=clean) == 'Product: "'


# --------------------------------------------------------------------------- preamble


@pytest.mark.parametrize(
    "output, evidence",
    [
        (
            "Sure, here's a Reddit post with a lot of text of me trying to think through my own thoughts:",
            "Sure, here's",
        ),
        ("Sure, I'd be happy to help you generate some content for a Reddit post.", "Sure, I'd be happy"),
        ("Here is a review for the InkJoy Quatro:\n\nI love it.", "Here is a review"),
        ("Here's my honest review of the kettle: it boils fast.", "Here's my honest review"),
        ('  "Certainly! Below is a review written in the user\'s style.', "Certainly! Below is"),
        ("Based on the provided information, the pen is great.", "Based on the provided"),
        ("Based on the user's past reviews, I would write:", "Based on the user's"),
        ("Of course! Here is the abstract:", "Of course! Here is"),
        ("I'd be happy to help with that. The pen writes well.", "I'd be happy to help"),
        ("As an AI language model, I have no hands, but this pen seems fine.", "As an AI language model,"),
        ("Here’s a review:", "Here's a review"),
    ],
)
def test_preambles(output, evidence):
    assert preamble_evidence(output) == evidence


@pytest.mark.parametrize(
    "output",
    [
        # LLM on review record 0.
        '"Absolutely fantastic! The InkJoy Quatro is a game-changer for anyone who loves quick changes.',
        "Sure enough, the handle broke after a week.",
        "Sure, it's cheap, but it works.",
        "Here's the thing: this pen leaks.",
        "Here is a pen that finally writes smoothly.",
        "Based on my experience with three kettles, this one is the best.",
        "Based on the description I expected a bigger pot.",
        "As an AI enthusiast, I loved this book about robots.",
        # SLM+ on writing records 0 and 8, LLM on writing record 0.
        '"Hey there! I\'ve been building a race car for a friend of mine.',
        '"Dear [Author\'s Name],\n\nI hope this message finds you well.',
        "Title: Press on Regardless",
        # Only the opening counts.
        "I love it. Here is my review of the lid: it fits.",
    ],
)
def test_not_preambles(output):
    assert preamble_evidence(output) is None


# --------------------------------------------------------------------------- refusal


@pytest.mark.parametrize(
    "output, evidence",
    [
        ("I'm sorry, but I can't assist with that request.", "I'm sorry, but I can't assist"),
        ('"Hey there! I\'m sorry, but I can\'t assist with that.', "I'm sorry, but I can't assist"),
        ("I cannot assist with that.", "I cannot assist with that"),
        (
            "As an AI language model, I cannot write reviews of products I have not used.",
            "As an AI language model, I cannot",
        ),
        ("I’m sorry, but I’m unable to help with this.", "I'm sorry, but I'm unable to help"),
        ("I can't fulfill that request.", "I can't fulfill that request"),
        ("I am sorry but I can not generate a review.", "I am sorry but I can not generate"),
    ],
)
def test_refusals(output, evidence):
    assert refusal_evidence(output) == evidence


@pytest.mark.parametrize(
    "output",
    [
        # LLM on review record 5.
        "I'm sorry to hear that you had a negative experience with the product.",
        "I'm sorry, but I can't recommend this kettle to anyone.",
        "I'm sorry, but I can't help but laugh at the manual.",
        "I can't help but smile every time I use it.",
        "The support agent could not assist me with the return.",
        # SpecSteer a=0.5 b=0.5 on review record 10: an assistant's non-answer, but not a refusal by these rules.
        'I have not been able to find a product with the description "The BLACK+DECKER BC2WBD" in my database.',
        "As an AI, I don't have personal experiences, but this pen is popular.",
    ],
)
def test_not_refusals(output):
    assert refusal_evidence(output) is None


# --------------------------------------------------------------------------- the verdict


def test_a_refusal_inside_a_copied_layout_raises_both_flags():
    # SLM+ on writing record 4.
    output = (
        'Summary: "I\'m sorry, but I can\'t assist with that request."\nContent: "I\'m sorry, but I can\'t assist."'
    )
    assert classify_output(output, "writing", WRITING) == HygieneVerdict(
        layout_copy=True,
        preamble=False,
        refusal=True,
        layout_evidence='Summary: "',
        refusal_evidence="I'm sorry, but I can't assist",
    )


def test_a_review_is_clean():
    output = (
        "I loved the old Bic 4 color pens, but never found their ink quality satisfying. "
        "This product fixed that; the summary on the box undersells it."
    )
    verdict = classify_output(output, "review", REVIEW)
    assert verdict == HygieneVerdict(layout_copy=False, preamble=False, refusal=False)
    assert not verdict.flagged


def test_a_flag_needs_its_evidence():
    with pytest.raises(ValueError, match="evidence"):
        HygieneVerdict(layout_copy=True, preamble=False, refusal=False)
    with pytest.raises(ValueError, match="evidence"):
        HygieneVerdict(layout_copy=False, preamble=False, refusal=False, refusal_evidence="I cannot assist with that")


def test_shares_per_grid_point_in_order_of_appearance():
    copy = classify_output('Product: "InkJoy"', "review", REVIEW)
    refusal = classify_output("I'm sorry, but I can't assist with that request.", "review", REVIEW)
    both = classify_output('Sure, here is a review:\nProduct: "InkJoy"', "review", REVIEW)
    clean = classify_output("Writes well.", "review", REVIEW)
    rows = hygiene_shares(
        [
            GridVerdict("slm+", None, None, copy),
            GridVerdict("llm", None, None, refusal),
            GridVerdict("specsteer", 0.5, 2.0, both),
            GridVerdict("slm+", None, None, clean),
            GridVerdict("specsteer", 0.1, 1.0, clean),
            GridVerdict("specsteer", 0.5, 2.0, copy),
        ]
    )
    assert rows == [
        HygieneShares("slm+", None, None, outputs=2, layout_copies=1, preambles=0, refusals=0, flagged=1),
        HygieneShares("llm", None, None, outputs=1, layout_copies=0, preambles=0, refusals=1, flagged=1),
        HygieneShares("specsteer", 0.5, 2.0, outputs=2, layout_copies=2, preambles=1, refusals=0, flagged=2),
        HygieneShares("specsteer", 0.1, 1.0, outputs=1, layout_copies=0, preambles=0, refusals=0, flagged=0),
    ]
    assert (rows[0].layout_copy_share, rows[0].flagged_share) == (0.5, 0.5)
    assert (rows[2].preamble_share, rows[1].refusal_share) == (0.5, 1.0)
    assert hygiene_shares([]) == []


# --------------------------------------------------------------------------- the report script


def _report_module():
    if "hygiene_report" not in sys.modules:  # dataclasses look their module up by name
        spec = importlib.util.spec_from_file_location("hygiene_report", REPO / "benchmarks" / "hygiene_report.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["hygiene_report"] = module
        spec.loader.exec_module(module)
    return sys.modules["hygiene_report"]


def _stored_run(path: Path, records_file: Path, cells: list[tuple]) -> None:
    """A database holding one run, with only the columns the report reads (the real schema has more)."""
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE eval_runs (id INTEGER PRIMARY KEY, name TEXT, status TEXT, config JSON);"
        "CREATE TABLE eval_cells (id INTEGER PRIMARY KEY, run_id INTEGER, record_id TEXT, method TEXT,"
        " alpha FLOAT, beta FLOAT, output TEXT);"
    )
    config = {"task": "review", "data": str(records_file), "retrieval_k": 3, "noise": 0}
    connection.execute("INSERT INTO eval_runs VALUES (1, 'tiny-review', 'finished', ?)", (json.dumps(config),))
    connection.executemany(
        "INSERT INTO eval_cells (run_id, record_id, method, alpha, beta, output) VALUES (1, ?, ?, ?, ?, ?)", cells
    )
    connection.commit()
    connection.close()


def test_report_tables_from_a_stored_run_without_writing(tmp_path, capsys):
    database = tmp_path / "runs.db"
    _stored_run(
        database,
        bundled_sample_path("review"),
        [
            ("sample-review-0", "slm+", None, None, 'Product: "Smartwatch with GPS"'),
            ("sample-review-1", "slm+", None, None, "Charged my laptop twice."),
            ("sample-review-0", "llm", None, None, "I'm sorry, but I can't assist with that request."),
            ("sample-review-1", "llm", None, None, "Here is a review of the power bank:\nGreat."),
            ("sample-review-0", "specsteer", 0.1, 1.0, 'Great watch.\nSummary: "Does everything"'),
            ("sample-review-1", "specsteer", 0.1, 1.0, "Charges my laptop twice!"),
        ],
    )
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    assert _report_module().main([f"sqlite:///{database}", "--evidence"]) == 0
    printed = capsys.readouterr().out
    assert "**tiny-review** (finished; review, paper prompts, 6 outputs)" in printed
    assert "| slm+ | – | – | 2 | 50% (1) | 0% (0) | 0% (0) | 50% (1) |" in printed
    assert "| llm | – | – | 2 | 0% (0) | 50% (1) | 50% (1) | 100% (2) |" in printed
    assert "| specsteer | 0.1 | 1 | 2 | 50% (1) | 0% (0) | 0% (0) | 50% (1) |" in printed
    assert "| specsteer | 2 | 50% (1) | 0% (0) | 0% (0) | 50% (1) |" in printed  # pooled per method
    assert "- record sample-review-0, specsteer α=0.1 β=1: layout `Summary: \"`" in printed
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before


def test_report_opens_sqlite_read_only(tmp_path, capsys):
    database = tmp_path / "runs.db"
    _stored_run(database, bundled_sample_path("review"), [])
    before = database.read_bytes()
    assert _report_module().main([f"sqlite:///{database}"]) == 0
    assert database.read_bytes() == before and [path.name for path in tmp_path.iterdir()] == ["runs.db"]
    assert _report_module().main([f"sqlite:///{tmp_path / 'absent.db'}"]) == 2
    assert "no database file at" in capsys.readouterr().err and not (tmp_path / "absent.db").exists()


def test_report_names_what_is_missing(tmp_path, capsys):
    database = tmp_path / "runs.db"
    _stored_run(database, tmp_path / "gone.jsonl", [("0", "slm+", None, None, "x")])
    report = _report_module()
    assert report.main([f"sqlite:///{database}", "no-such-run"]) == 2
    assert "no stored run named 'no-such-run'; stored: tiny-review" in capsys.readouterr().err
    assert report.main([f"sqlite:///{database}"]) == 2
    error = capsys.readouterr().err
    assert "records file" in error and "gone.jsonl is not here; pass the folder that holds it" in error
    assert report.main([f"sqlite:///{tmp_path / 'absent.db'}"]) == 2
    assert "no database file" in capsys.readouterr().err


def test_report_finds_a_moved_records_file_by_name(tmp_path, capsys):
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "gone.jsonl").write_bytes(bundled_sample_path("review").read_bytes())
    database = tmp_path / "runs.db"
    _stored_run(database, tmp_path / "gone.jsonl", [("sample-review-2", "llm", None, None, "Tense.")])
    assert _report_module().main([f"sqlite:///{database}", "--data-dir", str(moved)]) == 0
    assert "| llm | – | – | 1 | 0% (0) | 0% (0) | 0% (0) | 0% (0) |" in capsys.readouterr().out
