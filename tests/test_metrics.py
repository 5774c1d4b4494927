"""ROUGE against values worked out by hand, stemmed and unstemmed."""

from __future__ import annotations

import pytest

from specsteer.evaluation.metrics import ROUGE_KEYS, corpus_rouge, rouge_scores
from storage import ROUGE_KEYS as STORED_ROUGE_KEYS


def test_keys_match_the_database_columns():
    assert ROUGE_KEYS == STORED_ROUGE_KEYS


def test_stemming_matches_running_with_runs():
    # reference "the cat was running" (4 tokens), prediction "the cat runs" (3 tokens).
    # Unstemmed: shared unigrams {the, cat} = 2, P = 2/3, R = 2/4,
    #   F = 2PR / (P + R) = (2/3) / (7/6) = 4/7; the LCS is "the cat" (2), so ROUGE-L = 4/7 too.
    # Stemmed: runs -> run, running -> run ("was" has 3 letters and is never stemmed),
    #   shared {the, cat, run} = 3, P = 3/3, R = 3/4, F = (3/2) / (7/4) = 6/7; LCS 3, ROUGE-L = 6/7.
    scores = rouge_scores("the cat runs", "the cat was running")
    assert scores["rouge1"] == pytest.approx(4 / 7)
    assert scores["rougeL"] == pytest.approx(4 / 7)
    assert scores["rouge1_stemmed"] == pytest.approx(6 / 7)
    assert scores["rougeL_stemmed"] == pytest.approx(6 / 7)


def test_rouge_l_counts_order_and_rouge_1_does_not():
    # "cat the" against "the cat": both unigrams shared, R-1 = 1. The longest common subsequence
    # is one token, so P = R = 1/2 and R-L = 1/2.
    scores = rouge_scores("cat the", "the cat")
    assert scores["rouge1"] == pytest.approx(1.0)
    assert scores["rougeL"] == pytest.approx(0.5)


def test_case_and_punctuation_are_ignored_and_empty_output_scores_zero():
    assert rouge_scores("The CAT!", "the cat")["rouge1"] == pytest.approx(1.0)
    assert set(rouge_scores("", "the cat").values()) == {0.0}


def test_corpus_figure_is_the_mean_over_records_on_0_to_100():
    records = [
        {"rouge1": 0.5, "rougeL": 0.25, "rouge1_stemmed": 0.5, "rougeL_stemmed": None},
        {"rouge1": 1.0, "rougeL": 0.75, "rouge1_stemmed": 0.0, "rougeL_stemmed": None},
    ]
    assert corpus_rouge(records) == {
        "rouge1": pytest.approx(75.0),
        "rougeL": pytest.approx(50.0),
        "rouge1_stemmed": pytest.approx(25.0),
        "rougeL_stemmed": None,
    }
