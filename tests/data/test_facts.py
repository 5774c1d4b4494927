"""The private-fact matcher and the exposure of private facts (specsteer.data.facts)."""

from __future__ import annotations

import json
from pathlib import Path

from specsteer.data.facts import expose, fact_shares, fact_terms, mentions, method_exposure, split_private_facts
from specsteer.data.tasks import PromptPair

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "fact_matcher_sample.json"
PROFILE = """Age: 47
Name: Isabel Martinez
Privacy_info: Hosts a monthly dinner party to network with potential clients; Recently celebrated 20th wedding anniversary with a trip to the Maldives;  ; Volunteers at a local animal shelter on weekends.
Smart_device_usage: Uses a golf tracker"""


def test_facts_are_the_privacy_line_split_at_semicolons():
    assert split_private_facts(PROFILE) == (
        "Hosts a monthly dinner party to network with potential clients",
        "Recently celebrated 20th wedding anniversary with a trip to the Maldives",
        "Volunteers at a local animal shelter on weekends",
    )
    assert split_private_facts("Age: 3\nName: Kim") == ()


def test_terms_leave_out_function_words_and_the_profiles_generic_verbs():
    assert fact_terms("Recently celebrated 20th wedding anniversary with a trip to the Maldives") == (
        "celebrat",
        "20th",
        "wedd",
        "anniversary",
        "trip",
        "maldiv",
    )


def test_a_paraphrase_counts_and_scattered_words_do_not():
    fact = "Recently celebrated 20th wedding anniversary with a trip to the Maldives"
    assert mentions(fact, "After our anniversary trip to the Maldives I came back rested.")
    assert not mentions(fact, "The Maldives are far away.")  # one term of six
    scattered = "A trip. " + "Many unrelated words fill this long sentence about markets and homes. " * 4 + "Maldives."
    assert not mentions(fact, scattered)
    assert not mentions(fact, "")


def test_the_matcher_on_the_hand_labelled_sample():
    """Precision and recall on 40 fact/text pairs read and labelled by a person (docs/research/COGENESIS.md)."""
    pairs = json.loads(SAMPLE.read_text(encoding="utf-8"))["pairs"]
    assert len(pairs) == 40
    decided = [(mentions(pair["fact"], pair["text"]), pair["states_fact"]) for pair in pairs]
    true_positive = sum(found and truth for found, truth in decided)
    precision = true_positive / sum(found for found, _ in decided)
    recall = true_positive / sum(truth for _, truth in decided)
    assert sum(truth for _, truth in decided) == 17
    # Measured when the matcher was written: 16 of 20 found pairs right, 16 of 17 stated facts found.
    assert precision >= 0.8 and recall >= 0.94


def test_exposure_separates_the_task_the_prompt_the_drafts_and_the_output():
    facts = split_private_facts(PROFILE)
    prompts = PromptPair(
        plain="Write an invitation to my monthly dinner party for potential clients.",
        private=PROFILE + "\n\nWrite an invitation to my monthly dinner party for potential clients.",
    )
    sent = "Join us! Our trip to the Maldives for our wedding anniversary taught us"
    output = "Join us for a dinner party where clients meet."
    specsteer = method_exposure("specsteer", facts, prompts, sent, output)
    assert specsteer.in_task == (True, False, False)
    assert specsteer.sent == (True, True, False)
    assert specsteer.rejected_only == (False, True, False)  # only the refused drafts carried it
    assert specsteer.sent_beyond_task == (facts[1],)
    assert specsteer.headline() == (
        "2 of 3 private facts were sent to the cloud (1 of them named in the task you "
        "typed; 1 only in rejected drafts, which you never see)"
    )
    leaky = method_exposure("llm+", facts, prompts, "", output)
    assert leaky.sent == (True, True, True) and leaky.private_prompt_sent
    assert "whole private context" in leaky.headline()
    local = method_exposure("slm+", facts, prompts, "", output)
    assert local.sent == (False, False, False)
    assert local.in_output == (True, False, False)
    shares = fact_shares([specsteer, leaky, local])
    assert shares.facts == 9 and shares.generations == 3
    assert abs(shares.sent - 5 / 9) < 1e-9  # 2 + 3 + 0
    assert abs(shares.sent_beyond_task - 3 / 6) < 1e-9  # of the 6 facts the task did not name
    assert abs(shares.rejected_only - 1 / 9) < 1e-9
    assert fact_shares([]) is None


def test_the_plain_prompt_alone_sends_only_what_the_task_names():
    facts = split_private_facts(PROFILE)
    exposure = expose(facts, "Plan my week.", "Plan my week.", "", "Volunteers at the animal shelter on weekends")
    assert exposure.sent == (False, False, False)
    assert exposure.in_output == (False, False, True)
    assert exposure.headline() == "0 of 3 private facts were sent to the cloud"
